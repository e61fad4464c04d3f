"""helpers.data.translation: the renderings, their true alignments, the vocabularies and the disjoint splits."""

from __future__ import annotations

import pytest
import torch

from helpers.data.translation import (
    BOS,
    ENGLISH,
    EOS,
    GERMAN,
    PAD,
    encode_pairs,
    make_translation_splits,
    number_to_english,
    number_to_german,
    sample_numbers,
    translate_number,
)


@pytest.mark.parametrize(
    "n, english, german",
    [
        (1, "one", "eins"),
        (12, "twelve", "zwölf"),
        (21, "twenty one", "ein und zwanzig"),
        (101, "one hundred and one", "ein hundert eins"),
        (1005, "one thousand and five", "ein tausend fünf"),
        (21001, "twenty one thousand and one", "ein und zwanzig tausend eins"),
        (310000, "three hundred and ten thousand", "drei hundert zehn tausend"),
        (
            421507,
            "four hundred and twenty one thousand five hundred and seven",
            "vier hundert ein und zwanzig tausend fünf hundert sieben",
        ),
    ],
)
def test_renderings(n, english, german):
    assert number_to_english(n) == english
    assert number_to_german(n) == german


def test_german_words_join_into_the_written_german_numbers():
    # German writes a number as one word: joining the parts gives the spelling of the Duden
    assert number_to_german(97).replace(" ", "") == "siebenundneunzig"
    assert number_to_german(1_001).replace(" ", "") == "eintausendeins"
    assert number_to_german(999_999).replace(" ", "") == "neunhundertneunundneunzigtausendneunhundertneunundneunzig"


def test_alignment_crosses_and_matches_word_for_word():
    en, de, align = translate_number(421_507)
    assert align == [0, 1, 4, -1, 3, 5, 6, 7, 9]
    assert align[2] > align[4]  # "ein" aligns after "zwanzig": the alignment crosses
    # every aligned German word translates its English word
    meaning = {"vier": "four", "hundert": "hundred", "ein": "one", "zwanzig": "twenty", "tausend": "thousand"}
    meaning |= {"fünf": "five", "sieben": "seven"}
    assert all(en[a] == meaning[w] for w, a in zip(de, align, strict=True) if a >= 0)


def test_every_number_aligns_all_words_but_und():
    for n in list(range(1, 1200)) + sample_numbers(2000, seed=3):
        en, de, align = translate_number(n)
        assert len(align) == len(de)
        assert [w for w, a in zip(de, align, strict=True) if a < 0] == ["und"] * de.count("und")
        aligned = [a for a in align if a >= 0]
        assert len(set(aligned)) == len(aligned), n  # one German word per English word
        assert all(en[a] != "and" for a in aligned)


def test_vocabularies():
    assert len(ENGLISH.words) == 30 and len(GERMAN.words) == 31
    assert ENGLISH.itos[:3] == GERMAN.itos[:3] == ("<pad>", "<bos>", "<eos>")
    assert (PAD, BOS, EOS) == (0, 1, 2)
    used_en, used_de = set(), set()
    for n in range(1, 100_000, 7):
        en, de, _ = translate_number(n)
        used_en |= set(en)
        used_de |= set(de)
    assert used_en == set(ENGLISH.words) and used_de == set(GERMAN.words)
    assert GERMAN.decode([GERMAN.stoi["ein"], GERMAN.stoi["und"], GERMAN.stoi["zwanzig"], EOS, PAD, 7]) == "ein und zwanzig"
    with pytest.raises(KeyError, match="not in the vocabulary"):
        ENGLISH.encode(["eleventy"])


@pytest.mark.parametrize("bad", [0, -3, 1_000_000, 2.5, "12", True])
def test_bad_numbers_are_refused(bad):
    with pytest.raises(ValueError, match="numbers run from 1"):
        translate_number(bad)


def test_encode_pairs_pads_and_aligns():
    pairs = encode_pairs([21, 421_507])
    assert pairs.src.shape == (2, 11) and pairs.tgt.shape == (2, 10)
    assert pairs.src[0, :3].tolist() == ENGLISH.encode(["twenty", "one"]) + [EOS]
    assert (pairs.src[0, 3:] == PAD).all() and (pairs.tgt[0, 4:] == PAD).all()
    assert pairs.align[0].tolist() == [1, -1, 0] + [-1] * 7
    assert pairs.tgt[1, 9] == EOS


def test_splits_are_deterministic_and_disjoint_by_content():
    a = make_translation_splits(n_train=300, n_val=50, n_test=100, seed=0)
    b = make_translation_splits(n_train=300, n_val=50, n_test=100, seed=0)
    assert torch.equal(a.train.src, b.train.src) and torch.equal(a.test.tgt, b.test.tgt)
    assert (len(a.train), len(a.val), len(a.test)) == (300, 50, 100)
    sentences = [{tuple(row.tolist()) for row in split.src} for split in (a.train, a.val, a.test)]
    assert not (sentences[0] & sentences[2]) and not (sentences[0] & sentences[1]) and not (sentences[1] & sentences[2])
    assert len(sentences[0]) == 300  # no duplicates inside a split either
    other = make_translation_splits(n_train=300, n_val=50, n_test=100, seed=1)
    assert not torch.equal(a.test.numbers, other.test.numbers)


def test_default_splits_fingerprint():
    # the course's data: the same numbers on every machine (random.Random is platform-independent)
    data = make_translation_splits()
    assert data.test.numbers[:5].tolist() == [793330, 7286, 2315, 77473, 23919]
    assert (len(data.train), len(data.val), len(data.test)) == (4000, 500, 1000)
    assert int(data.train.numbers.sum()) == 724_963_913


def test_bad_split_sizes():
    with pytest.raises(ValueError, match="n_val"):
        make_translation_splits(n_val=0)
    with pytest.raises(ValueError, match="count"):
        sample_numbers(0)
