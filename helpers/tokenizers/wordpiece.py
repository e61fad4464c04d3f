"""BERT's WordPiece tokenizer, written out (notebook 10).

Text becomes token ids in two stages, as in BERT (Devlin et al., 2019) and in
Hugging Face's ``BertTokenizer``:

1. **basic tokenization** (``basic_tokenize``): drop control characters and turn
   every kind of white space into a space; put spaces around CJK ideographs;
   lower-case; strip accents (Unicode NFD, then drop the combining marks);
   split on white space and make every punctuation character a word of its own;
2. **WordPiece** (``wordpiece``): split each word greedily into the longest
   pieces found in the vocabulary, left to right; every piece after the first
   carries the prefix ``##``; a word that cannot be covered becomes ``[UNK]``.

``WordPieceTokenizer`` adds ``[CLS]`` and ``[SEP]``, truncates, pads a batch and
returns ``input_ids`` and ``attention_mask`` tensors ``(batch, length)``. Both
stages can be replaced by a learner's own functions (notebook 10's exercises):
``WordPieceTokenizer(vocab, basic_tokenizer=..., wordpiece=...)``.

**Which BERT.** This is the original BERT's tokenizer (Google's
``tokenization.py``; Hugging Face's Python ``BertTokenizer`` of transformers 4),
written on Python's ``str.lower`` and ``unicodedata``. The tokenizer
all-MiniLM-L6-v2 ships as ``tokenizer.json`` is run by the Rust library
``tokenizers`` (what ``transformers.AutoTokenizer`` loads). The two give the same
ids on ordinary text, and differ in rare corners (``tests/test_tokenizer.py``
tests each):

- a capital sigma at the end of a word: Python's ``"ΟΔΟΣ".lower()`` applies
  Unicode's final-sigma rule (``"οδος"``, with ς); ``tokenizers`` lower-cases
  character by character (``"οδοσ"``);
- code points that Python's Unicode database does not assign (category ``Cn``):
  dropped here, like control characters (BERT's rule drops every category
  ``C*``); ``tokenizers`` keeps them (``[UNK]``);
- characters whose category differs between Python's Unicode database and the
  older tables compiled into ``tokenizers`` (punctuation, combining marks added
  or re-classified in recent Unicode versions);
- the CJK ideographs U+2B820 to U+2B91F: BERT puts spaces around them (its range
  starts at U+2B820); ``tokenizers``' range starts at U+2B920.

The output also depends on the Python version, whose ``unicodedata`` follows
one Unicode version (3.10: 13.0, 3.11: 14.0, 3.12: 15.0, 3.13: 15.1, 3.14:
16.0): U+1FAE8 (a face emoji of Unicode 15.0) is unassigned for Python 3.11,
so dropped, and a symbol for Python 3.12, so ``[UNK]``.
"""

from __future__ import annotations

import unicodedata
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

import torch
from torch import Tensor

__all__ = [
    "load_vocab",
    "clean_text",
    "strip_accents",
    "is_punctuation",
    "split_on_punctuation",
    "basic_tokenize",
    "wordpiece",
    "WordPieceTokenizer",
    "DIFFERENCES_FROM_TOKENIZER_JSON",
]

#: Texts on which this tokenizer (the original BERT's) and the Rust ``tokenizers`` library reading all-MiniLM-L6-v2's
#: ``tokenizer.json`` split differently on every Python version (3.10 to 3.14), with the reason (see the module's docstring).
DIFFERENCES_FROM_TOKENIZER_JSON = {
    "ΟΔΟΣ": "a capital sigma that ends a word: str.lower() gives the final form ς, tokenizers gives σ",
    "a\u0378b": "a code point no Unicode version assigns: dropped here like a control character, kept (so [UNK]) by tokenizers",
    "x\U0002b820y": "a CJK ideograph of U+2B820 to U+2B91F: a word of its own here, inside its word for tokenizers",
    "a\u09fdb": "a punctuation mark (U+09FD) missing from tokenizers' older Unicode tables: a word of its own here, not there",
    "a\u07fdb": "a combining mark (U+07FD) missing from tokenizers' older Unicode tables: stripped here like an accent, not there",
}


def load_vocab(path: str | Path) -> dict[str, int]:
    """Read a BERT ``vocab.txt``: one token per line, the id is the line number (from 0)."""
    vocab: dict[str, int] = {}
    with open(path, encoding="utf-8") as f:
        for index, line in enumerate(f):
            vocab[line.rstrip("\n")] = index
    return vocab


def _is_whitespace(char: str) -> bool:
    return char in " \t\n\r" or unicodedata.category(char) == "Zs"


def _is_control(char: str) -> bool:
    return char not in "\t\n\r" and unicodedata.category(char).startswith("C")


def is_punctuation(char: str) -> bool:
    """BERT's rule: every ASCII character that is not a letter, a digit or a space ($, +, ^ too), or Unicode category P*.

    ``"$"`` (a currency symbol, category Sc) and ``"+"`` are punctuation here, though Unicode does not say so;
    ``"¿"``, ``"«"`` and ``"—"`` are (category P*); ``"±"``, ``"×"`` and ``"😀"`` are not (symbols, category S*).
    """
    cp = ord(char)
    if 33 <= cp <= 47 or 58 <= cp <= 64 or 91 <= cp <= 96 or 123 <= cp <= 126:
        return True
    return unicodedata.category(char).startswith("P")


def _is_cjk(cp: int) -> bool:
    return (
        0x4E00 <= cp <= 0x9FFF
        or 0x3400 <= cp <= 0x4DBF
        or 0x20000 <= cp <= 0x2A6DF
        or 0x2A700 <= cp <= 0x2B73F
        or 0x2B740 <= cp <= 0x2B81F
        or 0x2B820 <= cp <= 0x2CEAF
        or 0xF900 <= cp <= 0xFAFF
        or 0x2F800 <= cp <= 0x2FA1F
    )


def clean_text(text: str) -> str:
    """Drop NUL, U+FFFD and control characters; every white space becomes a space; spaces around CJK ideographs."""
    out = []
    for char in text:
        cp = ord(char)
        if cp == 0 or cp == 0xFFFD or _is_control(char):
            continue
        if _is_whitespace(char):
            out.append(" ")
        elif _is_cjk(cp):
            out.append(f" {char} ")
        else:
            out.append(char)
    return "".join(out)


def strip_accents(word: str) -> str:
    """``"café"`` -> ``"cafe"``: decompose (NFD: é = e + U+0301) and drop the combining marks (category Mn)."""
    return "".join(c for c in unicodedata.normalize("NFD", word) if unicodedata.category(c) != "Mn")


def split_on_punctuation(word: str) -> list[str]:
    """``"didn't"`` -> ``["didn", "'", "t"]``: every punctuation character is a word of its own."""
    pieces: list[str] = []
    start_new = True
    for char in word:
        if is_punctuation(char):
            pieces.append(char)
            start_new = True
        else:
            if start_new:
                pieces.append("")
                start_new = False
            pieces[-1] += char
    return pieces


def basic_tokenize(text: str, lower_case: bool = True) -> list[str]:
    """Text -> words and punctuation, before WordPiece (BERT's ``BasicTokenizer``).

    ``"Héllo, world!"`` -> ``["hello", ",", "world", "!"]``. Accents are stripped
    when lower-casing, as for the uncased BERT models.
    """
    words: list[str] = []
    for word in clean_text(text).split():
        if lower_case:
            word = strip_accents(word.lower())
        words.extend(split_on_punctuation(word))
    return words


def wordpiece(word: str, vocab: Mapping[str, int], unk_token: str = "[UNK]", max_chars: int = 100) -> list[str]:
    """Greedy longest-match-first WordPiece for one word.

    From the start of the word take the longest prefix found in ``vocab``; then
    from where it ended the longest piece found as ``"##" + piece``; and so on to
    the end. ``"unaffable"`` -> ``["una", "##ffa", "##ble"]``. If at some
    position no piece (not even one character) is in the vocabulary, the whole
    word becomes ``[unk_token]``; so does a word longer than ``max_chars``.
    """
    if len(word) > max_chars:
        return [unk_token]
    pieces: list[str] = []
    start = 0
    while start < len(word):
        end = len(word)
        piece = None
        while start < end:  # shrink from the right until the piece is known
            candidate = word[start:end] if start == 0 else "##" + word[start:end]
            if candidate in vocab:
                piece = candidate
                break
            end -= 1
        if piece is None:
            return [unk_token]
        pieces.append(piece)
        start = end
    return pieces


_course_wordpiece = wordpiece  # the module's function, for WordPieceTokenizer(wordpiece=None), whose argument shadows it


class WordPieceTokenizer:
    """BERT's tokenizer on a ``vocab.txt``: ``tokenize``, ``encode`` and batches of tensors.

    ``tokenizer(["a sentence", "another, longer sentence"])`` returns a dict with
    ``input_ids`` and ``attention_mask`` ``(batch, length)`` (``torch.long``),
    each row ``[CLS] tokens [SEP]`` then ``[PAD]`` (id 0) up to the longest row;
    the mask is 1 on real tokens and 0 on padding. Rows longer than
    ``max_length`` (default 256, sentence-transformers' limit for this model)
    are truncated, keeping the final ``[SEP]``.

    ``basic_tokenizer(text) -> list[str]`` and ``wordpiece(word, vocab) -> list[str]``
    replace the two stages (default: ``basic_tokenize`` with ``lower_case`` and
    ``wordpiece`` of this module). A word longer than ``max_chars`` characters
    becomes ``[UNK]`` before ``wordpiece`` sees it, as in BERT. Each distinct word is
    split once and remembered, so a slow ``wordpiece`` costs little on a large corpus.
    """

    def __init__(
        self,
        vocab: Mapping[str, int] | str | Path,
        lower_case: bool = True,
        max_length: int = 256,
        *,
        basic_tokenizer: Callable[[str], list[str]] | None = None,
        wordpiece: Callable[[str, Mapping[str, int]], list[str]] | None = None,
        max_chars: int = 100,
    ) -> None:
        self.vocab: dict[str, int] = load_vocab(vocab) if isinstance(vocab, (str, Path)) else dict(vocab)
        self.ids_to_tokens = {i: t for t, i in self.vocab.items()}
        self.lower_case = lower_case
        self.max_length = max_length
        self.max_chars = max_chars
        self.basic_tokenizer = basic_tokenizer
        self.wordpiece = wordpiece if wordpiece is not None else _course_wordpiece
        self._pieces: dict[str, list[str]] = {}  # word -> its pieces, each distinct word split once
        for special in ("[PAD]", "[UNK]", "[CLS]", "[SEP]"):
            if special not in self.vocab:
                raise ValueError(f"the vocabulary has no {special} token")
        self.pad_id, self.unk_id = self.vocab["[PAD]"], self.vocab["[UNK]"]
        self.cls_id, self.sep_id = self.vocab["[CLS]"], self.vocab["[SEP]"]

    def __len__(self) -> int:
        return len(self.vocab)

    def words(self, text: str) -> list[str]:
        """Text -> words and punctuation (the first stage)."""
        if self.basic_tokenizer is not None:
            return list(self.basic_tokenizer(text))
        return basic_tokenize(text, self.lower_case)

    def split_word(self, word: str) -> list[str]:
        """One word -> its WordPiece pieces (the second stage); ``[UNK]`` for a word over ``max_chars`` characters."""
        pieces = self._pieces.get(word)
        if pieces is None:
            pieces = ["[UNK]"] if len(word) > self.max_chars else list(self.wordpiece(word, self.vocab))
            self._pieces[word] = pieces
        return pieces

    def tokenize(self, text: str) -> list[str]:
        """Text -> WordPiece tokens, without ``[CLS]``/``[SEP]``."""
        return [piece for word in self.words(text) for piece in self.split_word(word)]

    def convert_tokens_to_ids(self, tokens: Sequence[str]) -> list[int]:
        return [self.vocab.get(t, self.unk_id) for t in tokens]

    def convert_ids_to_tokens(self, ids: Sequence[int] | Tensor) -> list[str]:
        return [self.ids_to_tokens[int(i)] for i in ids]

    def encode(self, text: str, max_length: int | None = None) -> list[int]:
        """``[CLS] tokens [SEP]`` as ids, truncated to ``max_length`` ids in all."""
        max_length = self.max_length if max_length is None else max_length
        ids = self.convert_tokens_to_ids(self.tokenize(text))[: max_length - 2]
        return [self.cls_id, *ids, self.sep_id]

    def __call__(self, texts: str | Sequence[str], max_length: int | None = None) -> dict[str, Tensor]:
        """A padded batch: ``{"input_ids": (batch, n), "attention_mask": (batch, n)}``, n the longest row."""
        if isinstance(texts, str):
            texts = [texts]
        rows = [self.encode(t, max_length) for t in texts]
        n = max(len(r) for r in rows)
        input_ids = torch.full((len(rows), n), self.pad_id, dtype=torch.long)  # (batch, n)
        attention_mask = torch.zeros(len(rows), n, dtype=torch.long)  # (batch, n)
        for i, row in enumerate(rows):
            input_ids[i, : len(row)] = torch.tensor(row)
            attention_mask[i, : len(row)] = 1
        return {"input_ids": input_ids, "attention_mask": attention_mask}
