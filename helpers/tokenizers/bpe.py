"""Byte-level BPE (notebook 15): GPT-2's pre-tokenization, a naive and an incremental trainer, the encoder and decoder.

The vocabulary of a byte-level BPE is a set of byte strings. Every single byte is a token (the *byte fallback*: any
text, any byte string, can be encoded), and each further token is the concatenation of two earlier ones, made by a
*merge*; the merges are numbered in the order they were learned, their *rank*.

Types used throughout (no tensors: a tokenizer maps text to Python ints):

- a *pre-token* is a ``str``, a piece of the text cut by a regular expression (``GPT2_PATTERN``); merges never cross
  the boundary between two pre-tokens;
- a *word* (in training) is a ``tuple[bytes, ...]``, a pre-token's bytes cut into its current tokens, starting from
  single bytes: ``(b"l", b"o", b"w")``;
- a *pair* is ``tuple[bytes, bytes]``; a merge list is ``list[tuple[bytes, bytes]]`` in rank order, and
  ``merge_ranks: dict[tuple[bytes, bytes], int]`` maps each pair to its rank;
- ids are ``int``: ``BPETokenizer.encode(text) -> list[int]``, ``decode(ids) -> str``, ``decode_bytes(ids) -> bytes``.

Training (``word_counts``, ``count_pairs``, ``merge_word``, ``train_bpe_naive``, ``train_bpe``) picks, at each step,
the most frequent pair of adjacent tokens inside the words, counted with the words' frequencies; among equally frequent
pairs, the greatest in byte order (``TIE_RULE``: compare the left tokens' bytes, then the right ones'; CS336's rule).
``train_bpe`` keeps the pair counts up to date incrementally (only the words that contain the merged pair change) with
a heap of candidates, and learns the same merges as ``train_bpe_naive``, which recounts every pair at every step;
``tie_break="huggingface"`` gives Hugging Face's ``BpeTrainer``'s merges instead (``HF_TIE_RULE``).

Encoding (``bpe_split``, ``BPETokenizer``) cuts the text into pre-tokens, then inside each applies the merges by rank:
the adjacent pair with the lowest rank first (its leftmost occurrence first), until no pair of the piece is a merge;
the resulting byte strings are looked up in the vocabulary. Special tokens (``encode_with_special_tokens``) are cut out
of the text first, and only where the caller allows them. This is GPT-2's original algorithm; with GPT-2's ranks it
gives tiktoken's ids exactly (``benchmarks/bench_bpe.py`` compares more than 1 MB of varied text).
"""

from __future__ import annotations

import heapq
from collections import Counter, defaultdict
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from typing import Literal

import regex

from helpers.runtime import smoke

__all__ = [
    "GPT2_PATTERN",
    "SMOLLM_PATTERNS",
    "ENDOFTEXT",
    "TIE_RULE",
    "SMOKE_MERGES",
    "Pair",
    "Word",
    "utf8_encode",
    "bytes_to_unicode",
    "unicode_to_bytes",
    "pretokenize",
    "word_counts",
    "count_pairs",
    "merge_word",
    "best_pair",
    "train_bpe_naive",
    "merge_pair_incremental",
    "train_bpe",
    "HF_TIE_RULE",
    "huggingface_byte_ids",
    "pair_counts_after",
    "bpe_split",
    "encode_with_special_tokens",
    "decode_ids",
    "merges_from_ranks",
    "BPETokenizer",
]

#: GPT-2's pre-tokenization (also tiktoken's ``r50k_base`` and Hugging Face's ``ByteLevel``): English contractions, a
#: run of letters or of digits or of other symbols with at most one space in front, and runs of white space, where a
#: run followed by a word leaves its last space to that word (``\s+(?!\S)``).
GPT2_PATTERN = r"""'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"""
#: SmolLM2's pre-tokenization (its GGUF file says ``tokenizer.ggml.pre = "smollm"``): every digit on its own first
#: (llama.cpp's ``\p{N}``; Hugging Face's ``Digits(individual_digits=True)``), then GPT-2's pattern inside the rest.
SMOLLM_PATTERNS = (r"\p{N}", GPT2_PATTERN)
#: GPT-2's end-of-text token (id 50,256).
ENDOFTEXT = "<|endoftext|>"
#: The most merges ``train_bpe`` learns in a smoke run of a notebook (``helpers.runtime.smoke``).
SMOKE_MERGES = 200
#: How ties between equally frequent pairs are broken, in words.
TIE_RULE = "the most frequent pair; among equally frequent pairs, the greatest in byte order (left token first, then right)"
#: Hugging Face ``tokenizers``' rule (``BpeTrainer``), ``train_bpe(..., tie_break="huggingface")``.
HF_TIE_RULE = (
    "the most frequent pair; among equally frequent pairs, the pair of smallest token ids (left first), the ids being the "
    "256 bytes in the order of GPT-2's printable characters, then each new token in the order it was made"
)

Pair = tuple[bytes, bytes]
Word = tuple[bytes, ...]
PatternLike = str | regex.Pattern | Sequence[str | regex.Pattern]

_COMPILED: dict[str, regex.Pattern] = {}


def _compiled(pattern: str | regex.Pattern) -> regex.Pattern:
    if isinstance(pattern, regex.Pattern):  # already compiled with the `regex` module
        return pattern
    if not isinstance(pattern, str):
        raise TypeError(f"a pre-tokenization pattern is a str (a regular expression), not {type(pattern).__name__}")
    if pattern not in _COMPILED:
        try:
            _COMPILED[pattern] = regex.compile(pattern)
        except regex.error as err:
            raise ValueError(f"the pre-tokenization pattern {pattern!r} is not a valid regular expression: {err}") from None
    return _COMPILED[pattern]


# ---------------------------------------------------------------- UTF-8


def utf8_encode(char: str) -> bytes:
    """One character's UTF-8 bytes, computed by hand (equal to ``char.encode("utf-8")``).

    A code point below 0x80 is one byte; below 0x800 two (``110xxxxx 10xxxxxx``); below 0x10000 three
    (``1110xxxx 10xxxxxx 10xxxxxx``); up to 0x10FFFF four (``11110xxx`` and three ``10xxxxxx``): the high bits first.
    """
    if not isinstance(char, str) or len(char) != 1:
        raise ValueError(f"utf8_encode takes one character, got {char!r}")
    cp = ord(char)
    if cp < 0x80:
        return bytes([cp])
    if cp < 0x800:
        return bytes([0xC0 | cp >> 6, 0x80 | cp & 0x3F])
    if cp < 0x10000:
        return bytes([0xE0 | cp >> 12, 0x80 | cp >> 6 & 0x3F, 0x80 | cp & 0x3F])
    return bytes([0xF0 | cp >> 18, 0x80 | cp >> 12 & 0x3F, 0x80 | cp >> 6 & 0x3F, 0x80 | cp & 0x3F])


# ---------------------------------------------------------------- GPT-2's printable spelling of bytes


def bytes_to_unicode() -> dict[int, str]:
    """GPT-2's table: each byte 0-255 -> one printable character, the spelling of tokens in vocab.json, merges.txt,
    tokenizer.json and GGUF files.

    Printable bytes stand for themselves (``"A"`` is byte 65); the 68 others (controls, space, ...) are shifted to
    characters from U+0100 up: the space is ``"Ġ"`` (U+0120), the newline ``"Ċ"`` (U+010A). The table's order is also
    the order of GPT-2's 256 byte tokens (``"!"`` has rank 0).
    """
    printable = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1), *range(ord("®"), ord("ÿ") + 1)]
    table = {b: chr(b) for b in printable}
    shifted = 0
    for b in range(256):
        if b not in table:
            table[b] = chr(256 + shifted)
            shifted += 1
    return table


def unicode_to_bytes() -> dict[str, int]:
    """The inverse of ``bytes_to_unicode``: printable character -> byte."""
    return {char: b for b, char in bytes_to_unicode().items()}


def _spelled_bytes(token: str, table: Mapping[str, int]) -> bytes:
    try:
        return bytes(table[char] for char in token)
    except KeyError as err:
        raise ValueError(
            f"the token {token!r} holds {err.args[0]!r}, which is not in GPT-2's byte alphabet (bytes_to_unicode): it is "
            "not a byte-level token (a special token? pass it in special_tokens)"
        ) from None


# ---------------------------------------------------------------- pre-tokenization


def pretokenize(text: str, pattern: PatternLike = GPT2_PATTERN) -> list[str]:
    """Cut ``text`` into pre-tokens: ``"Hello  world!"`` -> ``["Hello", " ", " world", "!"]`` with GPT-2's pattern.

    ``pattern`` is one regular expression (``regex`` syntax, with ``\\p{L}``), or a sequence of them applied in turn, each
    to the pieces of the one before (llama.cpp's and Hugging Face's ``Split(..., "isolated")``): the matches become
    pieces and so does any text between two matches, so that nothing is ever dropped.
    """
    if not isinstance(text, str):
        raise TypeError(f"pretokenize takes a str, not {type(text).__name__} (decode bytes first, or use encode_bytes)")
    patterns = [pattern] if isinstance(pattern, (str, regex.Pattern)) else list(pattern)
    if not patterns:
        raise ValueError("pretokenize needs at least one pattern")
    pieces = [text] if text else []
    for one in patterns:
        compiled = _compiled(one)
        cut: list[str] = []
        for piece in pieces:
            start = 0
            for match in compiled.finditer(piece):
                if match.start() > start:
                    cut.append(piece[start : match.start()])
                if match.end() > match.start():
                    cut.append(match.group())
                start = max(start, match.end())
            if start < len(piece):
                cut.append(piece[start:])
        pieces = cut
    return pieces


def _split_special(text: str, special: Collection[str]) -> list[tuple[str, bool]]:
    """``text`` cut at the special tokens it holds: ``[(chunk, is_special), ...]`` (longest special token first)."""
    if not special or not text:
        return [(text, False)] if text else []
    alternation = _compiled("|".join(regex.escape(s) for s in sorted(special, key=len, reverse=True)))
    out: list[tuple[str, bool]] = []
    start = 0
    for match in alternation.finditer(text):
        if match.start() > start:
            out.append((text[start : match.start()], False))
        out.append((match.group(), True))
        start = match.end()
    if start < len(text):
        out.append((text[start:], False))
    return out


def word_counts(text: str, pattern: PatternLike = GPT2_PATTERN, special_tokens: Collection[str] = ()) -> Counter[Word]:
    """How often each pre-token of ``text`` occurs, as words of single bytes: ``{(b"t", b"h", b"e"): 12, ...}``.

    Special tokens (``"<|endoftext|>"``) cut the text first and are not counted, so no merge crosses them either.
    """
    counts: Counter[str] = Counter()
    for chunk, is_special in _split_special(text, special_tokens):
        if not is_special:
            counts.update(pretokenize(chunk, pattern))
    return Counter({_single_bytes(piece.encode("utf-8", "surrogatepass")): n for piece, n in counts.items()})


def _single_bytes(data: bytes) -> Word:
    return tuple(data[i : i + 1] for i in range(len(data)))


# ---------------------------------------------------------------- training


def count_pairs(words: Mapping[Word, int]) -> Counter[Pair]:
    """Adjacent pairs inside each word, counted with the word's frequency: ``{(b"l", b"o"): 7, ...}``.

    Pairs never span two words, and a word ``(b"a", b"a", b"a")`` holds the pair ``(b"a", b"a")`` twice.
    """
    pairs: Counter[Pair] = Counter()
    for word, n in words.items():
        for pair in zip(word, word[1:], strict=False):
            pairs[pair] += n
    return pairs


def merge_word(word: Word, pair: Pair) -> Word:
    """``word`` with every occurrence of ``pair`` replaced by their concatenation, left to right, never overlapping.

    ``(b"a", b"a", b"a")`` with ``(b"a", b"a")`` gives ``(b"aa", b"a")``.
    """
    left, right = pair
    out: list[bytes] = []
    i, n = 0, len(word)
    while i < n:
        if i + 1 < n and word[i] == left and word[i + 1] == right:
            out.append(left + right)
            i += 2
        else:
            out.append(word[i])
            i += 1
    return tuple(out)


def best_pair(pair_counts: Mapping[Pair, int]) -> Pair:
    """The pair to merge next (``TIE_RULE``): the highest count, ties to the greatest pair in byte order."""
    return max(pair_counts, key=lambda pair: (pair_counts[pair], pair))


def _check_training_input(words: Mapping[Word, int], num_merges: int) -> None:
    if not isinstance(num_merges, int) or num_merges < 0:
        raise ValueError(f"num_merges must be an int >= 0, got {num_merges!r}")
    if not isinstance(words, Mapping):
        raise TypeError(
            f"the trainer takes the words and their counts as a mapping {{(b'l', b'o', b'w'): 5, ...}} (word_counts(text)), "
            f"not {type(words).__name__}"
        )
    for word, n in list(words.items())[:1]:
        if not (isinstance(word, tuple) and all(isinstance(t, bytes) for t in word)) or not isinstance(n, int):
            raise TypeError(f"each word is a tuple of bytes with an int count, e.g. (b'l', b'o', b'w'): 5; got {word!r}: {n!r}")


def train_bpe_naive(words: Mapping[Word, int], num_merges: int) -> list[Pair]:
    """Learn up to ``num_merges`` merges by recounting every pair at every step (slow; the definition).

    ``words``: ``word_counts(text)``. Returns the merges in rank order; stops early when no pair is left.
    """
    _check_training_input(words, num_merges)
    words = dict(words)
    merges: list[Pair] = []
    for _ in range(num_merges):
        pair_counts = count_pairs(words)
        if not pair_counts:
            break
        pair = best_pair(pair_counts)
        merges.append(pair)
        merged: Counter[Word] = Counter()
        for word, n in words.items():
            merged[merge_word(word, pair) if pair[0] in word else word] += n
        words = merged
    return merges


def merge_pair_incremental(
    pair: Pair,
    words: list[Word],
    counts: list[int],
    pair_counts: Counter[Pair],
    where: defaultdict[Pair, set[int]],
) -> None:
    """Merge ``pair`` in every word that holds it, and update the pair counts of those words only (in place).

    ``words[i]`` occurs ``counts[i]`` times; ``pair_counts`` counts every adjacent pair over all words;
    ``where[p]`` holds the index of every word that holds ``p`` (and possibly of words that no longer do).
    """
    for i in where.pop(pair, ()):
        old, n = words[i], counts[i]
        new = merge_word(old, pair)
        for p in zip(old, old[1:], strict=False):
            pair_counts[p] -= n
        for p in zip(new, new[1:], strict=False):
            pair_counts[p] += n
            where[p].add(i)
        words[i] = new
    pair_counts.pop(pair, None)


class _Greatest:
    """A heap key under which the greatest pair in byte order comes first (``heapq`` pops the smallest)."""

    __slots__ = ("pair",)

    def __init__(self, pair: Pair) -> None:
        self.pair = pair

    def __lt__(self, other: _Greatest) -> bool:
        return self.pair > other.pair

    def __eq__(self, other: object) -> bool:
        return isinstance(other, _Greatest) and self.pair == other.pair

    __hash__ = None  # type: ignore[assignment]


Update = Callable[[Pair, list[Word], list[int], Counter[Pair], defaultdict[Pair, set[int]]], None]
TieBreak = Literal["greatest", "huggingface"] | Callable[[Pair], object]


def huggingface_byte_ids() -> dict[bytes, int]:
    """The ids Hugging Face's ``BpeTrainer`` gives the 256 bytes with GPT-2's ``ByteLevel`` alphabet: their printable
    characters (``bytes_to_unicode``) in code-point order, so ``b"!"`` is 0 and the space (``"Ġ"``) is 220."""
    spelling = bytes_to_unicode()
    return {bytes([b]): i for i, b in enumerate(sorted(range(256), key=lambda b: ord(spelling[b])))}


def train_bpe(
    words: Mapping[Word, int],
    num_merges: int,
    *,
    update: Update | None = None,
    tie_break: TieBreak = "greatest",
) -> list[Pair]:
    """Learn up to ``num_merges`` merges with incremental pair counts and a heap; the merges of ``train_bpe_naive``.

    ``words``: ``word_counts(text)``. ``update`` is the function that merges a pair and updates the counts
    (``merge_pair_incremental``, or a learner's). Candidates sit in a heap by count; an entry whose count went down is
    pushed again with its current count when it comes up, and the pairs that a merge creates are pushed as it makes them.

    ``tie_break``: ``"greatest"`` (``TIE_RULE``, the course's), ``"huggingface"`` (``HF_TIE_RULE``: the pair of
    smallest token ids, new tokens numbered as they are made, which reproduces ``tokenizers``' ``BpeTrainer``), or a
    function giving each pair a key, the smallest key winning among equally frequent pairs (a key must not change
    during training).

    In a smoke run (``helpers.runtime.smoke``) at most ``SMOKE_MERGES`` merges are learned.
    """
    _check_training_input(words, num_merges)
    num_merges = smoke.capped(num_merges, SMOKE_MERGES)
    update = merge_pair_incremental if update is None else update
    ids: dict[bytes, int] | None = None
    if tie_break == "huggingface":
        ids = huggingface_byte_ids()
        for word in words:
            for token in word:
                ids.setdefault(token, len(ids))  # tokens longer than a byte in the words given: numbered as met
        known = ids

        def key(pair: Pair) -> object:
            return (known[pair[0]], known[pair[1]])

    elif tie_break == "greatest":
        key = _Greatest
    elif callable(tie_break):
        key = tie_break
    else:
        raise ValueError(f'tie_break must be "greatest", "huggingface" or a function of a pair, not {tie_break!r}')
    word_list, counts, pair_counts, where = _indexed_pairs(words)
    heap = [(-n, key(pair), pair) for pair, n in pair_counts.items() if n > 0]
    heapq.heapify(heap)
    merges: list[Pair] = []
    while heap and len(merges) < num_merges:
        negative, tie, pair = heapq.heappop(heap)
        current = pair_counts.get(pair, 0)
        if current != -negative:  # stale: the count went down since this entry was pushed
            if current > 0:
                heapq.heappush(heap, (-current, tie, pair))
            continue
        merges.append(pair)
        merged = pair[0] + pair[1]
        if ids is not None:
            ids.setdefault(merged, len(ids))
        touched = list(where.get(pair, ()))
        update(pair, word_list, counts, pair_counts, where)
        for i in touched:
            word = word_list[i]
            for p in zip(word, word[1:], strict=False):
                if (p[0] == merged or p[1] == merged) and pair_counts.get(p, 0) > 0:
                    heapq.heappush(heap, (-pair_counts[p], key(p), p))
    return merges


def _indexed_pairs(
    words: Mapping[Word, int],
) -> tuple[list[Word], list[int], Counter[Pair], defaultdict[Pair, set[int]]]:
    """The incremental trainer's state: the words in order, their counts, each adjacent pair's count, and for each
    pair the indices of the words that hold it."""
    word_list = list(words)
    counts = [words[w] for w in word_list]
    pair_counts: Counter[Pair] = Counter()
    where: defaultdict[Pair, set[int]] = defaultdict(set)
    for i, word in enumerate(word_list):
        for pair in zip(word, word[1:], strict=False):
            pair_counts[pair] += counts[i]
            where[pair].add(i)
    return word_list, counts, pair_counts, where


def pair_counts_after(words: Mapping[Word, int], merges: Iterable[Pair]) -> Counter[Pair]:
    """The pair counts a trainer sees after it has made ``merges`` on ``words`` (``word_counts(text)``): what it chose
    from at the next step. Computed incrementally (``merge_pair_incremental``)."""
    _check_training_input(words, 0)
    word_list, counts, pair_counts, where = _indexed_pairs(words)
    for pair in merges:
        merge_pair_incremental(tuple(pair), word_list, counts, pair_counts, where)  # type: ignore[arg-type]
    return Counter({p: n for p, n in pair_counts.items() if n > 0})


# ---------------------------------------------------------------- encoding


def bpe_split(piece: str | bytes, merge_ranks: Mapping[Pair, int]) -> list[bytes]:
    """One pre-token cut into tokens: from single bytes, merge the adjacent pair of lowest rank (its leftmost
    occurrence; a further occurrence of the same pair is merged at the next step, which ends as merging every
    occurrence at once) until no adjacent pair is a merge. ``"hello"`` -> ``[b"hello"]``, ``" tokenizer"`` ->
    ``[b" token", b"izer"]`` with GPT-2's merges.
    """
    data = piece.encode("utf-8", "surrogateescape") if isinstance(piece, str) else bytes(piece)
    parts = [data[i : i + 1] for i in range(len(data))]
    get = merge_ranks.get
    while len(parts) > 1:
        best = at = None
        for i, pair in enumerate(zip(parts, parts[1:], strict=False)):
            rank = get(pair)
            if rank is not None and (best is None or rank < best):
                best, at = rank, i
        if at is None:
            break
        parts[at : at + 2] = [parts[at] + parts[at + 1]]
    return parts


def encode_with_special_tokens(
    text: str,
    special_tokens: Mapping[str, int],
    allowed: Collection[str],
    encode: Callable[[str], list[int]],
) -> list[int]:
    """``text`` -> ids, the allowed special tokens as their own ids and the text between them through ``encode``.

    ``special_tokens``: every special token of the tokenizer, ``{"<|endoftext|>": 50256}``; ``allowed``: those that
    may appear in this text. The text is cut at the allowed special tokens, the longest first where one starts another;
    a special token that is in the text but not allowed raises ``ValueError`` (tiktoken's default), so that text from
    a user cannot smuggle in a control token. ``encode`` encodes ordinary text (a ``BPETokenizer``'s
    ``encode_ordinary``).
    """
    if not isinstance(text, str):
        raise TypeError(f"encode_with_special_tokens takes a str, not {type(text).__name__}")
    allowed = set(allowed)
    unknown = allowed - set(special_tokens)
    if unknown:
        raise ValueError(f"not special tokens of this tokenizer: {sorted(unknown)}; it has {sorted(special_tokens)[:5]}")
    for token in special_tokens:
        if token not in allowed and token in text:
            raise ValueError(
                f"the text holds the special token {token!r}, which is not allowed here: allow it to encode it as its "
                "special id, or encode the text as ordinary text"
            )
    ids: list[int] = []
    for chunk, is_special in _split_special(text, allowed):
        ids.extend([special_tokens[chunk]] if is_special else encode(chunk))
    return ids


def decode_ids(ids: Iterable[int], vocab: Mapping[int, bytes]) -> str:
    """ids -> text: the tokens' bytes joined, then decoded as UTF-8 once (a character whose bytes are split across
    two tokens comes back whole); bytes that are not valid UTF-8 become U+FFFD ("\ufffd", as tiktoken decodes)."""
    return b"".join(vocab[i] for i in ids).decode("utf-8", errors="replace")


def merges_from_ranks(ranks: Mapping[bytes, int]) -> dict[Pair, int]:
    """The merges behind a tiktoken ranks file: ``{(left, right): rank}`` for every token of two bytes or more.

    tiktoken stores only each token's rank. The token of rank ``r`` was made by one merge of two tokens of lower rank:
    BPE on its own bytes with the merges of lower rank ends with exactly those two (GPT-2: 50,000 merges).
    """
    merges: dict[Pair, int] = {}
    for token, rank in sorted(ranks.items(), key=lambda item: item[1]):
        if len(token) < 2:
            continue
        parts = bpe_split(token, merges)
        if len(parts) != 2:
            raise ValueError(
                f"the token {token!r} (rank {rank}) is not one merge of two tokens of lower rank (BPE on its bytes gives "
                f"{len(parts)} parts): these ranks are not a BPE vocabulary"
            )
        merges[(parts[0], parts[1])] = rank
    return merges


class BPETokenizer:
    """A byte-level BPE tokenizer: ``encode(text) -> list[int]``, ``decode(ids) -> str``, ``decode_bytes(ids) -> bytes``.

    Build it from

    - ``BPETokenizer(ranks, pattern, special_tokens)``: a tiktoken-style vocabulary ``{token bytes: id}`` whose ids are
      the merge order (GPT-2's ``load_gpt2_ranks()``); the merges are recovered from it (``merges_from_ranks``);
    - ``BPETokenizer.from_merges(merges, ...)``: a merge list in rank order (``train_bpe``); ids 0-255 are the bytes,
      then one id per new token in the order the merges made them;
    - ``BPETokenizer.from_gpt2_strings(tokens, merges, ...)``: the token strings (index = id) and ``"left right"`` merge
      strings in GPT-2's printable spelling (``bytes_to_unicode``), as Hugging Face's tokenizer.json and GGUF files
      store them.

    ``pattern``: the pre-tokenization (``GPT2_PATTERN``, or several patterns applied in turn: ``SMOLLM_PATTERNS``).
    ``special_tokens``: ``{"<|endoftext|>": 50256}``, matched whole in the text only where ``encode`` allows them.
    """

    def __init__(
        self,
        ranks: Mapping[bytes, int],
        pattern: PatternLike = GPT2_PATTERN,
        special_tokens: Mapping[str, int] | None = None,
        *,
        merges: Mapping[Pair, int] | None = None,
    ) -> None:
        if not isinstance(ranks, Mapping) or not all(isinstance(t, bytes) and isinstance(i, int) for t, i in ranks.items()):
            raise TypeError("ranks must map each token's bytes to its id: {b'hello': 31373, ...} (load_gpt2_ranks())")
        self.vocab: dict[bytes, int] = dict(ranks)
        self.merge_ranks: dict[Pair, int] = dict(merges) if merges is not None else merges_from_ranks(self.vocab)
        self.special_tokens: dict[str, int] = dict(special_tokens or {})
        self.pattern = pattern
        for one in [pattern] if isinstance(pattern, (str, regex.Pattern)) else list(pattern):
            _compiled(one)  # a bad pattern fails here, with its message
        self._decoder: dict[int, bytes] = {i: t for t, i in self.vocab.items()}
        for text, i in self.special_tokens.items():
            if i in self._decoder:
                raise ValueError(
                    f"the special token {text!r} has id {i}, which the vocabulary already gives to {self._decoder[i]!r}"
                )
            self._decoder[i] = text.encode("utf-8")
        self._cache: dict[str, tuple[int, ...]] = {}

    # -- construction

    @classmethod
    def from_merges(
        cls,
        merges: Iterable[Pair],
        pattern: PatternLike = GPT2_PATTERN,
        special_tokens: Collection[str] | Mapping[str, int] = (),
    ) -> BPETokenizer:
        """From a merge list in rank order (``train_bpe``): ids 0-255 the bytes, 256 on the new tokens, then the
        special tokens (a collection gets the next ids; a mapping keeps its own)."""
        vocab = {bytes([b]): b for b in range(256)}
        ranks: dict[Pair, int] = {}
        for rank, pair in enumerate(merges):
            if not (isinstance(pair, tuple) and len(pair) == 2 and all(isinstance(p, bytes) for p in pair)):
                raise TypeError(f"merge {rank} is {pair!r}; each merge is a pair of bytes, (b' t', b'he')")
            ranks.setdefault(pair, rank)
            vocab.setdefault(pair[0] + pair[1], len(vocab))
        if isinstance(special_tokens, Mapping):
            specials = dict(special_tokens)
        else:
            specials = {text: len(vocab) + k for k, text in enumerate(special_tokens)}
        return cls(vocab, pattern, specials, merges=ranks)

    @classmethod
    def from_gpt2_strings(
        cls,
        tokens: Sequence[str],
        merges: Sequence[str] | Sequence[tuple[str, str]],
        pattern: PatternLike = GPT2_PATTERN,
        special_tokens: Mapping[str, int] | Collection[str] = (),
    ) -> BPETokenizer:
        """From tokens and merges in GPT-2's printable spelling (``"Ġthe"`` is ``b" the"``): ``tokens[i]`` is the token of
        id ``i``, ``merges[k]`` the merge of rank ``k`` as ``"Ġ t"`` or ``("Ġ", "t")``.

        ``special_tokens``: which tokens are special (their text, or ``{text: id}``): they are matched whole in the text
        and kept out of the byte-level vocabulary (GGUF marks them with token type 3, "control").
        """
        table = unicode_to_bytes()
        specials = dict(special_tokens) if isinstance(special_tokens, Mapping) else {t: tokens.index(t) for t in special_tokens}
        special_ids = set(specials.values())
        vocab: dict[bytes, int] = {}
        for i, token in enumerate(tokens):
            if i not in special_ids:
                vocab.setdefault(_spelled_bytes(token, table), i)
        ranks: dict[Pair, int] = {}
        for rank, merge in enumerate(merges):
            left, right = merge.split(" ") if isinstance(merge, str) else merge
            pair = (_spelled_bytes(left, table), _spelled_bytes(right, table))
            if pair[0] + pair[1] not in vocab:
                raise ValueError(f"merge {rank} ({merge!r}) makes a token that is not in the vocabulary")
            ranks.setdefault(pair, rank)
        return cls(vocab, pattern, specials, merges=ranks)

    # -- encoding

    @property
    def n_vocab(self) -> int:
        """The number of ids: one more than the largest id (tiktoken's name)."""
        return max(self._decoder) + 1

    def _piece_ids(self, piece: str) -> tuple[int, ...]:
        cached = self._cache.get(piece)
        if cached is not None:
            return cached
        try:
            ids = tuple(self.vocab[part] for part in bpe_split(piece, self.merge_ranks))
        except KeyError as err:
            missing = err.args[0]
            raise ValueError(
                f"the bytes {missing!r} of {piece!r} have no token in this vocabulary: it lacks the byte fallback for "
                f"{', '.join(f'0x{b:02x}' for b in missing if bytes([b]) not in self.vocab) or 'them'}"
            ) from None
        if len(self._cache) < 500_000:
            self._cache[piece] = ids
        return ids

    def encode_ordinary(self, text: str) -> list[int]:
        """``text`` -> ids, reading special tokens' text as ordinary text."""
        return [i for piece in pretokenize(self._valid(text), self.pattern) for i in self._piece_ids(piece)]

    def encode(self, text: str, allowed_special: Collection[str] | Literal["all"] = ()) -> list[int]:
        """``text`` -> ids. Special tokens in ``allowed_special`` (or ``"all"``) become their ids; any other special
        token found in the text raises ``ValueError`` (tiktoken's default), so that text from users cannot inject one."""
        text = self._valid(text)
        allowed = set(self.special_tokens) if allowed_special == "all" else set(allowed_special)
        unknown = allowed - set(self.special_tokens)
        if unknown:
            raise ValueError(f"not special tokens of this tokenizer: {sorted(unknown)}; it has {sorted(self.special_tokens)[:5]}")
        found = [t for t in self.special_tokens if t not in allowed and t in text]
        if found:
            raise ValueError(
                f"the text holds the special token {found[0]!r}: pass allowed_special={{{found[0]!r}}} to encode it as its "
                "special id, or use encode_ordinary to encode it as ordinary text"
            )
        ids: list[int] = []
        for chunk, is_special in _split_special(text, allowed):
            if is_special:
                ids.append(self.special_tokens[chunk])
            else:
                ids.extend(i for piece in pretokenize(chunk, self.pattern) for i in self._piece_ids(piece))
        return ids

    def encode_bytes(self, data: bytes) -> list[int]:
        """Any byte string -> ids, valid UTF-8 or not: invalid bytes are cut like symbols and fall back on their
        single-byte tokens, so that ``decode_bytes(encode_bytes(data)) == data``."""
        if not isinstance(data, (bytes, bytearray)):
            raise TypeError(f"encode_bytes takes bytes, not {type(data).__name__} (use encode for a str)")
        text = bytes(data).decode("utf-8", "surrogateescape")  # an invalid byte 0xXY becomes the lone surrogate U+DCXY
        return [i for piece in pretokenize(text, self.pattern) for i in self._piece_ids(piece)]

    @staticmethod
    def _valid(text: str) -> str:
        if not isinstance(text, str):
            raise TypeError(f"encode takes a str, not {type(text).__name__} (use encode_bytes for bytes)")
        try:
            text.encode("utf-8")
        except UnicodeEncodeError:  # lone surrogates: replaced by U+FFFD, as tiktoken does
            text = text.encode("utf-16", "surrogatepass").decode("utf-16", "replace")
        return text

    # -- decoding

    def decode_bytes(self, ids: Iterable[int]) -> bytes:
        """ids -> the bytes they stand for, joined (a special token gives its text's UTF-8)."""
        try:
            return b"".join(self._decoder[int(i)] for i in ids)
        except KeyError as err:
            raise ValueError(f"id {err.args[0]} is not in this vocabulary (ids run from 0 to {self.n_vocab - 1})") from None
        except (TypeError, ValueError) as err:
            raise TypeError(f"decode takes a sequence of int ids: {err}") from None

    def decode(self, ids: Iterable[int], errors: str = "replace") -> str:
        """ids -> text: the bytes joined first, then decoded as UTF-8 (a character split across tokens comes back
        whole; bytes that are not valid UTF-8 become U+FFFD with ``errors="replace"``)."""
        return self.decode_bytes(ids).decode("utf-8", errors)

    def token_bytes(self, token_id: int) -> bytes:
        """The bytes of one id."""
        return self.decode_bytes([token_id])

    def pieces(self, text: str, allowed_special: Collection[str] | Literal["all"] = "all") -> list[bytes]:
        """The bytes of each token of ``text``, for display: ``[b"Hello", b" world"]``."""
        return [self._decoder[i] for i in self.encode(text, allowed_special)]
