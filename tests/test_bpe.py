"""The course's byte-level BPE (helpers/tokenizers/bpe.py) and notebook 15's data: equal to tiktoken with GPT-2's ranks on a
fixed varied sample, every byte string round-trips, the incremental trainer learns the naive trainer's merges, and with
Hugging Face's tie rule Hugging Face's ``BpeTrainer``'s; clear errors on bad input.

``benchmarks/bench_bpe.py`` makes the same comparisons on 1.4 MB of text, and measures the speed.
"""

from __future__ import annotations

import hashlib
import json
import random

import matplotlib
import pytest
import tiktoken

import helpers.tokenizers.bpe as bpe
from helpers.data.common import DataError
from helpers.data.text import load_pydoc_text
from helpers.data.tokenizer_files import (
    GPT2_RANK_COUNT,
    GPT2_RANKS_SHA256,
    GPT2_RANKS_SIZE,
    gpt2_ranks_path,
    load_gpt2_ranks,
    smollm2_gguf_path,
)
from helpers.data.tokenizer_texts import ARTICLE_1, ENGLISH_PROSE, PYTHON_CODE, unicode_mix

matplotlib.use("Agg")


@pytest.fixture(scope="module")
def ranks():
    return load_gpt2_ranks()


@pytest.fixture(scope="module")
def gpt2(ranks):
    return bpe.BPETokenizer(ranks, special_tokens={bpe.ENDOFTEXT: 50256})


@pytest.fixture(scope="module")
def reference(ranks):
    return tiktoken.Encoding("gpt2", pat_str=bpe.GPT2_PATTERN, mergeable_ranks=ranks, special_tokens={bpe.ENDOFTEXT: 50256})


def fixed_sample() -> str:
    """About 100,000 characters: prose, code, whitespace runs, digits, accents, CJK, emoji, mixed scripts, controls."""
    runs = "".join(f"{' ' * n}x{chr(9) * (n % 4)}{n}{chr(10) * (n % 3)}\r\n" for n in range(60))
    return (
        load_pydoc_text()[:50_000]
        + ENGLISH_PROSE
        + PYTHON_CODE
        + "\n".join(ARTICLE_1.values())
        + unicode_mix(40_000, seed=0)
        + runs
        + "\u00a0\u3000\u2028\x85\x0b\x0c\x1c\x1d\x1e\x1f end \ufeffbom \U0001f468\u200d\U0001f469\u200d\U0001f467"
    )


# ---------------------------------------------------------------- GPT-2's file


def test_the_ranks_file_is_found_offline_and_verified():
    path = gpt2_ranks_path()
    assert path.name == "gpt2.tiktoken" and path.parent.parent.name == "whisper"
    data = path.read_bytes()
    assert len(data) == GPT2_RANKS_SIZE == 835_554
    assert hashlib.sha256(data).hexdigest() == GPT2_RANKS_SHA256


def test_the_ranks_are_gpt2s(ranks):
    assert len(ranks) == GPT2_RANK_COUNT == 50_256
    assert sorted(ranks.values()) == list(range(50_256))
    assert ranks[b"!"] == 0 and ranks[b" the"] == 262
    table = bpe.bytes_to_unicode()
    assert all(ranks[bytes([b])] == i for i, b in enumerate(table))  # the byte tokens are in bytes_to_unicode's order


def test_a_damaged_ranks_file_is_a_clear_error(tmp_path):
    bad = tmp_path / "gpt2.tiktoken"
    bad.write_bytes(b"IQ== 0\nnot-base64! 1\n")
    with pytest.raises(DataError, match="not a tiktoken ranks file"):
        load_gpt2_ranks(bad)
    bad.write_bytes(b"IQ== 0\n")
    with pytest.raises(DataError, match="256 single bytes"):
        load_gpt2_ranks(bad)


# ---------------------------------------------------------------- the encoder against tiktoken


def test_hello_world(gpt2):
    assert gpt2.encode("Hello world") == [15496, 995]
    assert gpt2.decode([15496, 995]) == "Hello world"


def test_fifty_thousand_merges_are_recovered_from_the_ranks(gpt2):
    assert len(gpt2.merge_ranks) == 50_000
    assert gpt2.merge_ranks[(b" ", b"t")] == 256 and gpt2.merge_ranks[(b" g", b"azed")] == 50_255


def test_the_encoder_gives_tiktokens_ids_on_a_varied_sample(gpt2, reference):
    text = fixed_sample()
    assert len(text) > 90_000
    ours, theirs = gpt2.encode_ordinary(text), reference.encode_ordinary(text)
    assert ours == theirs
    assert gpt2.decode(ours) == text
    for piece in ("", " ", "  ", "\n\n\n", "a", "'s", "'S", "123 4567", "😀", "\x00", "x\u0301", "<|endoftext|>"):
        assert gpt2.encode_ordinary(piece) == reference.encode_ordinary(piece), piece


def test_lone_surrogates_are_replaced_as_tiktoken_does(gpt2, reference):
    text = "a\ud800b \udfff"
    assert gpt2.encode(text) == reference.encode(text)


def test_every_byte_string_round_trips(gpt2):
    rng = random.Random(1)
    samples = [rng.randbytes(rng.randrange(0, 400)) for _ in range(300)]
    samples += [b"", b"\xff", b"\xc3", b"\xed\xa0\x80", b"\x00" * 50, b" " * 3000, "é😀中".encode() * 20, b"\xf0\x9f\x98"]
    for data in samples:
        assert gpt2.decode_bytes(gpt2.encode_bytes(data)) == data
    assert gpt2.decode([47249]) == "\ufffd"  # the first three bytes of an emoji alone


def test_encode_with_special_tokens_is_tiktokens_encode(gpt2, reference):
    specials = {bpe.ENDOFTEXT: 50256}
    for text in ["a<|endoftext|>b", "<|endoftext|><|endoftext|>", "", "plain", " x<|endoftext|>  y<|endoftext|>"]:
        assert bpe.encode_with_special_tokens(text, specials, {bpe.ENDOFTEXT}, gpt2.encode_ordinary) == reference.encode(
            text, allowed_special={bpe.ENDOFTEXT}
        )
    with pytest.raises(ValueError, match="not allowed"):
        bpe.encode_with_special_tokens("a<|endoftext|>", specials, set(), gpt2.encode_ordinary)
    with pytest.raises(ValueError, match="not special tokens"):
        bpe.encode_with_special_tokens("a", specials, {"<|im_start|>"}, gpt2.encode_ordinary)
    with pytest.raises(TypeError, match="takes a str"):
        bpe.encode_with_special_tokens(b"a", specials, set(), gpt2.encode_ordinary)


def test_special_tokens_only_where_allowed(gpt2, reference):
    text = "a<|endoftext|>b"
    assert gpt2.encode(text, allowed_special={bpe.ENDOFTEXT}) == [64, 50256, 65]
    assert gpt2.encode(text, allowed_special="all") == reference.encode(text, allowed_special="all")
    assert gpt2.encode_ordinary(text) == reference.encode_ordinary(text)
    with pytest.raises(ValueError, match="allowed_special"):
        gpt2.encode(text)
    with pytest.raises(ValueError, match="not special tokens"):
        gpt2.encode(text, allowed_special={"<|im_start|>"})
    assert gpt2.decode([50256]) == bpe.ENDOFTEXT


def test_bad_input_is_a_clear_error(gpt2):
    with pytest.raises(TypeError, match="encode_bytes"):
        gpt2.encode(b"bytes")
    with pytest.raises(TypeError, match="takes bytes"):
        gpt2.encode_bytes("text")
    with pytest.raises(ValueError, match="not in this vocabulary"):
        gpt2.decode([60_000])
    with pytest.raises(ValueError, match="not a valid regular expression"):
        bpe.pretokenize("x", "(unclosed")
    with pytest.raises(TypeError, match="ranks must map"):
        bpe.BPETokenizer({"a": 1})
    with pytest.raises(ValueError, match="not a BPE vocabulary"):
        bpe.merges_from_ranks({b"a": 0, b"b": 1, b"abc": 2})


# ---------------------------------------------------------------- pre-tokenization, UTF-8, decoding


def test_pretokenize_keeps_every_character_and_applies_patterns_in_turn():
    assert bpe.pretokenize("Hello  world!\n\n  x", bpe.GPT2_PATTERN) == ["Hello", " ", " world", "!", "\n\n ", " x"]
    assert bpe.pretokenize("a  12", bpe.SMOLLM_PATTERNS) == ["a", "  ", "1", "2"]
    assert bpe.pretokenize("a  12", bpe.GPT2_PATTERN) == ["a", " ", " 12"]
    assert bpe.pretokenize("ab12", (r"\d",)) == ["ab", "1", "2"]  # the text between matches is kept
    assert bpe.pretokenize("", bpe.GPT2_PATTERN) == []


def test_utf8_by_hand_equals_python():
    chars = [chr(cp) for cp in range(0, 0x110000, 97) if not 0xD800 <= cp < 0xE000]
    chars += ["\x7f", "\x80", "\u07ff", "\u0800", "\uffff", "\U00010000", "\U0010ffff"]
    for char in chars:
        assert bpe.utf8_encode(char) == char.encode("utf-8"), hex(ord(char))
    with pytest.raises(ValueError, match="one character"):
        bpe.utf8_encode("ab")


def test_decode_ids_joins_bytes_before_decoding():
    vocab = {0: b"\xc3", 1: b"\xa9", 2: b"\xff"}
    assert bpe.decode_ids([0, 1], vocab) == "é"
    assert bpe.decode_ids([2, 0], vocab) == "\ufffd\ufffd"


# ---------------------------------------------------------------- training


def test_the_incremental_trainer_learns_the_naive_trainers_merges():
    words = bpe.word_counts(load_pydoc_text()[:25_000] + unicode_mix(3_000, seed=3), special_tokens=[bpe.ENDOFTEXT])
    assert bpe.train_bpe(words, 200) == bpe.train_bpe_naive(words, 200)


def test_the_tie_rule_is_the_greatest_pair_in_byte_order():
    words = {(b"a", b"b"): 2, (b"c", b"d"): 2, (b"c", b"e"): 2, (b"x", b"y"): 1}
    expected = [(b"c", b"e"), (b"c", b"d"), (b"a", b"b"), (b"x", b"y")]
    assert bpe.train_bpe_naive(words, 10) == bpe.train_bpe(words, 10) == expected


def test_pair_counts_after_equals_a_recount():
    words = bpe.word_counts(load_pydoc_text()[:5_000])
    merges = bpe.train_bpe(words, 30)
    replay = dict(words)
    for pair in merges:
        replay = {bpe.merge_word(w, pair): n for w, n in replay.items()}
    assert bpe.pair_counts_after(words, merges) == +bpe.count_pairs(replay)


def test_special_tokens_cut_the_training_text():
    words = bpe.word_counts("ab<|endoftext|>cd", special_tokens=[bpe.ENDOFTEXT])
    assert dict(words) == {(b"a", b"b"): 1, (b"c", b"d"): 1}


def test_overlapping_pairs_are_counted_twice_and_merged_once():
    assert bpe.count_pairs({(b"a", b"a", b"a"): 3}) == {(b"a", b"a"): 6}
    assert bpe.merge_word((b"a", b"a", b"a"), (b"a", b"a")) == (b"aa", b"a")
    assert bpe.train_bpe({(b"a",) * 5: 1}, 10) == bpe.train_bpe_naive({(b"a",) * 5: 1}, 10)


def test_with_hugging_faces_tie_rule_the_trainer_reproduces_bpe_trainer():
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers

    text = load_pydoc_text()[:60_000]
    merges = 400
    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    trainer = trainers.BpeTrainer(
        vocab_size=256 + merges + 50, initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False
    )
    tokenizer.train_from_iterator([text], trainer)
    table = bpe.unicode_to_bytes()
    spelled = json.loads(tokenizer.to_str())["model"]["merges"][:merges]
    theirs = [tuple(bytes(table[c] for c in part) for part in (m if isinstance(m, list) else m.split(" "))) for m in spelled]
    spelling = bpe.bytes_to_unicode()
    ids = {bytes([b]): i for i, b in enumerate(sorted(range(256), key=lambda b: ord(spelling[b])))}
    assert ids == bpe.huggingface_byte_ids() and ids[b"!"] == 0 and ids[b" "] == 220

    def update(pair, *state):
        ids.setdefault(pair[0] + pair[1], len(ids))
        bpe.merge_pair_incremental(pair, *state)

    words = bpe.word_counts(text)
    ours = bpe.train_bpe(words, merges, update=update, tie_break=lambda p: (ids[p[0]], ids[p[1]]))
    assert ours == theirs
    assert bpe.train_bpe(words, merges, tie_break="huggingface") == theirs
    course = bpe.train_bpe(words, merges)
    assert course != theirs  # the course's rule breaks some tie differently: where they part, the two pairs tie
    first = next(i for i, (a, b) in enumerate(zip(course, theirs, strict=False)) if a != b)
    counts = bpe.pair_counts_after(words, course[:first])
    assert counts[course[first]] == counts[theirs[first]] == max(counts.values())
    with pytest.raises(ValueError, match="tie_break"):
        bpe.train_bpe(words, 1, tie_break="smallest")


def test_a_smoke_run_learns_few_merges(monkeypatch):
    words = bpe.word_counts(load_pydoc_text()[:20_000])
    monkeypatch.setenv("COURSE_SMOKE_TEST", "1")
    assert len(bpe.train_bpe(words, 1_000)) == bpe.SMOKE_MERGES
    monkeypatch.setenv("COURSE_SMOKE_TEST", "0")
    assert len(bpe.train_bpe(words, 300)) == 300


def test_training_input_errors():
    with pytest.raises(ValueError, match="num_merges"):
        bpe.train_bpe({(b"a", b"b"): 1}, -1)
    with pytest.raises(TypeError, match="mapping"):
        bpe.train_bpe([(b"a", b"b")], 1)
    with pytest.raises(TypeError, match="tuple of bytes"):
        bpe.train_bpe_naive({"ab": 1}, 1)


def test_a_tokenizer_from_its_own_merges():
    text = load_pydoc_text()[:30_000]
    merges = bpe.train_bpe(bpe.word_counts(text), 300)
    tokenizer = bpe.BPETokenizer.from_merges(merges, special_tokens=[bpe.ENDOFTEXT])
    ids = tokenizer.encode(text + bpe.ENDOFTEXT, allowed_special="all")
    assert tokenizer.decode(ids) == text + bpe.ENDOFTEXT
    assert len(ids) < len(text.encode()) / 2
    assert tokenizer.n_vocab == 256 + len(set(a + b for a, b in merges)) + 1
    with pytest.raises(TypeError, match="pair of bytes"):
        bpe.BPETokenizer.from_merges([("a", "b")])


def test_the_gpt2_spelling_constructor_equals_the_ranks_constructor(gpt2):
    spelling = bpe.bytes_to_unicode()
    tokens = [""] * 50_257
    for token, i in gpt2.vocab.items():
        tokens[i] = "".join(spelling[b] for b in token)
    tokens[50_256] = bpe.ENDOFTEXT
    merges = [
        f"{''.join(spelling[b] for b in a)} {''.join(spelling[b] for b in b_)}"
        for (a, b_), _ in sorted(gpt2.merge_ranks.items(), key=lambda kv: kv[1])
    ]
    spelled = bpe.BPETokenizer.from_gpt2_strings(tokens, merges, special_tokens=[bpe.ENDOFTEXT])
    text = fixed_sample()[:30_000]
    assert spelled.encode_ordinary(text) == gpt2.encode_ordinary(text)
    with pytest.raises(ValueError, match="not in GPT-2's byte alphabet"):
        bpe.BPETokenizer.from_gpt2_strings(["a", "b", "a\u4e2d"], [])


# ---------------------------------------------------------------- SmolLM2's tokenizer from its GGUF file


def test_smollm2s_tokenizer_read_from_gguf_equals_tokenizers():
    import gguf
    from tokenizers import Tokenizer, models, pre_tokenizers

    reader = gguf.GGUFReader(smollm2_gguf_path(verify=False))

    def strings(name):
        field = reader.fields[name]
        return [bytes(field.parts[i]).decode("utf-8") for i in field.data]

    tokens, merges = strings("tokenizer.ggml.tokens"), strings("tokenizer.ggml.merges")
    assert (len(tokens), len(merges)) == (49_152, 48_900)
    kinds = reader.fields["tokenizer.ggml.token_type"]
    specials = {t: i for i, t in enumerate(tokens) if int(kinds.parts[kinds.data[i]][0]) == 3}
    assert len(specials) == 17 and specials["<|im_start|>"] == 1
    ours = bpe.BPETokenizer.from_gpt2_strings(tokens, merges, bpe.SMOLLM_PATTERNS, specials)
    rust = Tokenizer(models.BPE(vocab={t: i for i, t in enumerate(tokens)}, merges=[tuple(m.split(" ")) for m in merges]))
    rust.pre_tokenizer = pre_tokenizers.Sequence(
        [pre_tokenizers.Digits(individual_digits=True), pre_tokenizers.ByteLevel(add_prefix_space=False)]
    )
    text = (
        load_pydoc_text()[:30_000] + PYTHON_CODE + "\n".join(ARTICLE_1.values()) + "\n".join(f"{n:>8}" for n in range(0, 3000, 7))
    )
    assert ours.encode_ordinary(text) == rust.encode(text).ids
    with pytest.raises(ValueError, match="byte fallback"):
        ours.encode_ordinary("\x04")  # one of the 21 bytes SmolLM2 has no token for


# ---------------------------------------------------------------- the figures


def test_token_figures():
    from helpers.plots.tokenizers import show_tokens, token_cost_bars, token_label

    assert token_label(b" a\n\t") == "·a\\n\\t"
    assert token_label(b"\xc3") == "\\xc3"
    ax = show_tokens([("row", [b"ab", b" c"], [1, 2]), ("plain", [b"x" * 80])], "t", width=20)
    assert ax.get_title() == "t"
    with pytest.raises(ValueError, match="ids"):
        show_tokens([("row", [b"a"], [1, 2])], "t")
    with pytest.raises(ValueError, match="same texts"):
        token_cost_bars({"a": {"x": 1.0}, "b": {"y": 2.0}}, "y", "t")
    with pytest.raises(TypeError, match="bytes"):
        token_label("text")
