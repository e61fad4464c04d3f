"""helpers.tokenizers.wordpiece: BERT's basic tokenization and WordPiece, and agreement with the reference tokenizer."""

from __future__ import annotations

import os
import random
import unicodedata

import pytest
import torch

from helpers.tokenizers.wordpiece import (
    DIFFERENCES_FROM_TOKENIZER_JSON,
    WordPieceTokenizer,
    basic_tokenize,
    clean_text,
    is_punctuation,
    split_on_punctuation,
    strip_accents,
    wordpiece,
)

TOY = {t: i for i, t in enumerate(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "un", "##aff", "##able", "a", "play", "##ing", "!", ","])}

#: A varied set: punctuation, accents, numbers, unknown words, white space, scripts, symbols, control characters.
TEXTS = [
    "The animal didn't cross the street because it was too tired.",
    "The animal didn't cross the street because it was too wide.",
    "Héllo, wörld! Ça va? naïve café façade résumé Ångström",
    "Prices rose 3.5% to $1,234.56 in 2023-24 (Q3)...",
    "unaffable antidisestablishmentarianism floccinaucinihilipilification",
    "e-mail: someone@example.com, url https://example.org/a?b=c&d=e#f",
    "Tabs\tand\nnewlines\r\n  and   spaces",
    "Ελληνικά και Русский текст",
    "中文字符 and 日本語のテキスト",
    "emoji 😀 ☃ and symbols ± × ÷ → ∞ ≠ © ®",
    "ÀÉÎÕÜ ß ø æ œ ł đ ħ",
    "don't won't y'all rock'n'roll O'Neill's",
    "x" * 120,
    "a" * 101 + " ok",
    "",
    "zqxjkvbw xyzzyplugh qwertyuiop",
    "İstanbul ﬁne ﬂow Ⅻ ½ ²",
    "control\x00chars\x07 here\u200b zero width\ufeff bom",
    "   ",
    "1234567890 3.14159 1e-10 0x1F",
    "«quotes» “curly” ‘single’ — en–dash … ¿¡",
    "A man is playing a guitar.",
]


def _random_texts(count: int, seed: int = 0) -> list[str]:
    rng = random.Random(seed)
    pools = [
        "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ      ",
        "0123456789.,;:!?'\"()[]{}-_/\\@#$%^&*+=<>|~`",
        "éèêëàâäôöûüçñÉÀÇÑ",
        "αβγδЖЯж中文日本語한국어",
        "\t\n\u00a0\u2003\u200b\ufeff\x07",
        "😀☃±×÷→∞≠©®½²ﬁ",
    ]
    return ["".join(rng.choice(rng.choice(pools)) for _ in range(rng.randint(0, 40))) for _ in range(count)]


def test_basic_steps():
    assert clean_text("a\tb\x00c\u200bd\u00a0e") == "a bcd e"
    assert strip_accents("café naïve Ångström") == "cafe naive Angstrom"
    assert split_on_punctuation("didn't") == ["didn", "'", "t"]
    assert split_on_punctuation("$3.50!") == ["$", "3", ".", "50", "!"]
    assert basic_tokenize("Héllo, WORLD!") == ["hello", ",", "world", "!"]
    assert basic_tokenize("中文 ok") == ["中", "文", "ok"]
    assert basic_tokenize("Héllo", lower_case=False) == ["Héllo"]
    assert [c for c in "$+^¿«—…’_" if not is_punctuation(c)] == []  # ASCII symbols count, as Unicode's P* does
    assert [c for c in "±×😀½é" if is_punctuation(c)] == []


def test_wordpiece_greedy_longest_match():
    assert wordpiece("unaffable", TOY) == ["un", "##aff", "##able"]
    assert wordpiece("playing", TOY) == ["play", "##ing"]
    assert wordpiece("play", TOY) == ["play"]
    assert wordpiece("playx", TOY) == ["[UNK]"]  # one uncovered character: the whole word is unknown
    assert wordpiece("a" * 101, {"a": 0, "##a": 1}) == ["[UNK]"]  # longer than 100 characters


def test_the_two_stages_can_be_replaced():
    """A learner's basic tokenizer and WordPiece run inside the tokenizer; each distinct word is split once."""
    calls = []

    def mine(word, vocab):
        calls.append(word)
        return wordpiece(word, vocab)

    tok = WordPieceTokenizer(TOY, wordpiece=mine, basic_tokenizer=lambda text: text.split())
    assert tok.tokenize("play playing play unaffable") == ["play", "play", "##ing", "play", "un", "##aff", "##able"]
    assert calls == ["play", "playing", "unaffable"]  # "play" once
    assert tok.tokenize("Play!") == ["[UNK]"]  # the learner's basic tokenizer (no lower-casing, no splitting) ran
    long_word = "a" * 101
    assert WordPieceTokenizer({**TOY, "##a": 12}, wordpiece=lambda w, v: ["a"] * len(w)).tokenize(long_word) == ["[UNK]"]


def test_batch_padding_and_truncation():
    tok = WordPieceTokenizer(TOY, max_length=4)
    batch = tok(["play", "unaffable, playing!"])
    assert batch["input_ids"].tolist() == [[2, 8, 3, 0], [2, 4, 5, 3]]  # truncated to 4, [SEP] kept
    assert batch["attention_mask"].tolist() == [[1, 1, 1, 0], [1, 1, 1, 1]]
    assert batch["input_ids"].dtype == torch.long
    assert tok.convert_ids_to_tokens(batch["input_ids"][1]) == ["[CLS]", "un", "##aff", "[SEP]"]
    with pytest.raises(ValueError, match=r"\[CLS\]"):
        WordPieceTokenizer({"[PAD]": 0, "[UNK]": 1, "[SEP]": 2})


@pytest.fixture(scope="module")
def ours():
    from helpers.models.minilm import load_tokenizer

    return load_tokenizer(max_length=10**6)


def test_vocab_file(ours):
    assert len(ours) == 30522
    assert (ours.pad_id, ours.unk_id, ours.cls_id, ours.sep_id) == (0, 100, 101, 102)
    assert ours.tokenize("The animal didn't cross the street") == ["the", "animal", "didn", "'", "t", "cross", "the", "street"]


def test_ids_equal_reference_tokenizer(ours):
    """Same ids as the model's own tokenizer (transformers, from the package's files, offline) on every text."""
    os.environ["HF_HUB_OFFLINE"] = "1"
    transformers = pytest.importorskip("transformers")
    from helpers.models.minilm import model_dir

    reference = transformers.AutoTokenizer.from_pretrained(str(model_dir()), local_files_only=True)
    texts = TEXTS + _random_texts(500) + (model_dir() / "README.md").read_text(encoding="utf-8").splitlines()
    disagree = [t for t in texts if ours.encode(t) != reference(t, truncation=False)["input_ids"]]
    assert not disagree, f"{len(disagree)} of {len(texts)} texts tokenized differently, e.g. {disagree[:3]!r}"


def test_known_differences_from_tokenizer_json(ours):
    """Where the original BERT's rules (ours) and the Rust tokenizers library differ, on every Python version."""
    os.environ["HF_HUB_OFFLINE"] = "1"
    transformers = pytest.importorskip("transformers")
    from helpers.models.minilm import model_dir

    reference = transformers.AutoTokenizer.from_pretrained(str(model_dir()), local_files_only=True)
    sigma, unassigned, cjk, punctuation, mark = DIFFERENCES_FROM_TOKENIZER_JSON
    assert "ΟΔΟΣ".lower() == "οδος"  # Python applies Unicode's final-sigma rule
    assert ours.tokenize(sigma) == ["ο", "##δ", "##ος"]
    assert reference.tokenize(sigma) == ["ο", "##δ", "##ο", "##σ"]  # character by character: σ
    assert ours.tokenize(unassigned) == ["ab"]  # category Cn, dropped like a control character (BERT drops every C*)
    assert reference.tokenize(unassigned) == ["[UNK]"]
    assert ours.tokenize(cjk) == ["x", "[UNK]", "y"]  # BERT's CJK range starts at U+2B820
    assert reference.tokenize(cjk) == ["[UNK]"]
    assert unicodedata.category(punctuation[1]) == "Po" and unicodedata.category(mark[1]) == "Mn"
    assert ours.tokenize(punctuation) == ["a", "[UNK]", "b"] and reference.tokenize(punctuation) == ["[UNK]"]
    assert ours.tokenize(mark) == ["ab"] and reference.tokenize(mark) == ["[UNK]"]
    for cp in (0x2B820, 0x2B91F):  # the whole range U+2B820..U+2B91F, and nothing outside it
        assert reference.tokenize(f"x{chr(cp)}y") == ["[UNK]"] and ours.tokenize(f"x{chr(cp)}y") == ["x", "[UNK]", "y"]
    for cp in (0x2B740, 0x2B920):  # CJK extension D, and the rest of extension E
        assert reference.tokenize(f"x{chr(cp)}y") == ours.tokenize(f"x{chr(cp)}y") == ["x", "[UNK]", "y"]


def test_output_depends_on_pythons_unicode_version(ours):
    """U+1FAE8 (Unicode 15.0) is unassigned before Python 3.12, so dropped; a symbol from 3.12 on, so [UNK]."""
    text = "so \U0001fae8 funny"
    if tuple(int(x) for x in unicodedata.unidata_version.split(".")) < (15, 0):
        assert unicodedata.category("\U0001fae8") == "Cn"
        assert ours.tokenize(text) == ["so", "funny"]
    else:
        assert unicodedata.category("\U0001fae8") == "So"
        assert ours.tokenize(text) == ["so", "[UNK]", "funny"]


def test_python_documentation_tokenized_like_the_reference(ours):
    """The 2,530 paragraphs of notebook 11's corpus (Python's documentation), as notebook 10 compares them."""
    os.environ["HF_HUB_OFFLINE"] = "1"
    transformers = pytest.importorskip("transformers")
    from helpers.data.text import load_pydoc_text
    from helpers.models.minilm import model_dir

    reference = transformers.AutoTokenizer.from_pretrained(str(model_dir()), local_files_only=True)
    paragraphs = [p for p in load_pydoc_text().split("\n\n") if p.strip()]
    assert len(paragraphs) == 2530
    theirs = reference(paragraphs, truncation=False)["input_ids"]
    assert sum(ours.encode(p) == ids for p, ids in zip(paragraphs, theirs, strict=True)) == len(paragraphs)
