"""A generated translation task for notebook 09: English number words -> German number words, with true alignments.

Numbers from 1 to 999,999 are written out in British English and in German, one word per token:

- English: ``four hundred and twenty one thousand five hundred and seven``
- German:  ``vier hundert ein und zwanzig tausend fünf hundert sieben``

German says the units before the tens ("ein und zwanzig", one-and-twenty), so the word alignment
**crosses** in every number with both (``twenty one`` -> ``ein und zwanzig``). The compounds German writes
as one word (``einundzwanzigtausend``) are split at their parts, so that every German word but ``und``
translates exactly one English word, and the **true alignment** is known by construction: for each German
word, the position of its English word, or ``-1`` for ``und`` (which has no English counterpart). English's
``and`` has no German counterpart either. One is ``eins`` at the end of a number and ``ein`` before
``und``, ``hundert`` and ``tausend``, as in German.

Vocabularies: 30 English words and 31 German words, after three special tokens shared by both sides,
``<pad>`` = 0, ``<bos>`` = 1 (the decoder's start token), ``<eos>`` = 2 (ends every source and target).

``make_translation_splits()`` draws distinct numbers with Python's ``random.Random(seed)`` (the same on every
machine and Python version), so the train, validation and test splits are disjoint **by content**: no test
number, hence no test sentence, occurs in training. Everything is generated in memory; nothing is read or
downloaded.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

import torch
from torch import Tensor

__all__ = [
    "PAD",
    "BOS",
    "EOS",
    "SPECIALS",
    "Vocabulary",
    "ENGLISH",
    "GERMAN",
    "number_to_english",
    "number_to_german",
    "translate_number",
    "TranslationSet",
    "TranslationSplits",
    "encode_pairs",
    "sample_numbers",
    "make_translation_splits",
]

PAD, BOS, EOS = 0, 1, 2
SPECIALS = ("<pad>", "<bos>", "<eos>")
MAX_NUMBER = 999_999

_EN_UNITS = ("one", "two", "three", "four", "five", "six", "seven", "eight", "nine")
_EN_TEENS = ("ten", "eleven", "twelve", "thirteen", "fourteen", "fifteen", "sixteen", "seventeen", "eighteen", "nineteen")
_EN_TENS = ("twenty", "thirty", "forty", "fifty", "sixty", "seventy", "eighty", "ninety")
_DE_UNITS = ("ein", "zwei", "drei", "vier", "fünf", "sechs", "sieben", "acht", "neun")
_DE_TEENS = ("zehn", "elf", "zwölf", "dreizehn", "vierzehn", "fünfzehn", "sechzehn", "siebzehn", "achtzehn", "neunzehn")
_DE_TENS = ("zwanzig", "dreißig", "vierzig", "fünfzig", "sechzig", "siebzig", "achtzig", "neunzig")


class Vocabulary:
    """Words <-> ids: the three specials first (``<pad>`` 0, ``<bos>`` 1, ``<eos>`` 2), then the words in a fixed order."""

    def __init__(self, words: tuple[str, ...]) -> None:
        self.itos: tuple[str, ...] = SPECIALS + tuple(words)
        self.stoi: dict[str, int] = {w: i for i, w in enumerate(self.itos)}
        if len(self.stoi) != len(self.itos):
            raise ValueError("a vocabulary's words must be distinct")

    def __len__(self) -> int:
        return len(self.itos)

    @property
    def words(self) -> tuple[str, ...]:
        """The real words, without the specials."""
        return self.itos[len(SPECIALS) :]

    def encode(self, words: list[str]) -> list[int]:
        """Ids of ``words``; an unknown word raises ``KeyError`` naming it."""
        try:
            return [self.stoi[w] for w in words]
        except KeyError as err:
            raise KeyError(f"{err.args[0]!r} is not in the vocabulary ({len(self.words)} words)") from None

    def decode(self, ids: list[int] | Tensor, strip: bool = True) -> str:
        """Words of ``ids`` joined by spaces; with ``strip``, stop at the first ``<eos>`` and drop ``<pad>`` and ``<bos>``."""
        out = []
        for i in ids.tolist() if isinstance(ids, Tensor) else ids:
            if strip and i == EOS:
                break
            if strip and i in (PAD, BOS):
                continue
            out.append(self.itos[i] if 0 <= i < len(self.itos) else f"<{i}?>")
        return " ".join(out)


#: The source side: 30 English words.
ENGLISH = Vocabulary(_EN_UNITS + _EN_TEENS + _EN_TENS + ("hundred", "thousand", "and"))
#: The target side: 31 German words (``eins`` and ``ein`` are both one).
GERMAN = Vocabulary(("eins",) + _DE_UNITS + _DE_TEENS + _DE_TENS + ("hundert", "tausend", "und"))

# A rendering is a list of (English words, German words, alignment) built piece by piece; the alignment holds,
# for each German word, the index of its English word inside the same piece, or -1.
_Piece = tuple[list[str], list[str], list[int]]


def _join(*pieces: _Piece) -> _Piece:
    en: list[str] = []
    de: list[str] = []
    align: list[int] = []
    for p_en, p_de, p_align in pieces:
        align += [a + len(en) if a >= 0 else -1 for a in p_align]
        en += p_en
        de += p_de
    return en, de, align


def _german_unit(n: int, final: bool) -> str:
    return "eins" if n == 1 and final else _DE_UNITS[n - 1]


def _below_100(n: int, final: bool) -> _Piece:
    if n < 10:
        return [_EN_UNITS[n - 1]], [_german_unit(n, final)], [0]
    if n < 20:
        return [_EN_TEENS[n - 10]], [_DE_TEENS[n - 10]], [0]
    tens, units = divmod(n, 10)
    if units == 0:
        return [_EN_TENS[tens - 2]], [_DE_TENS[tens - 2]], [0]
    # twenty one -> ein und zwanzig: the alignment crosses
    return [_EN_TENS[tens - 2], _EN_UNITS[units - 1]], [_german_unit(units, False), "und", _DE_TENS[tens - 2]], [1, -1, 0]


def _below_1000(n: int, final: bool) -> _Piece:
    hundreds, rest = divmod(n, 100)
    if hundreds == 0:
        return _below_100(rest, final)
    head: _Piece = ([_EN_UNITS[hundreds - 1], "hundred"], [_german_unit(hundreds, False), "hundert"], [0, 1])
    if rest == 0:
        return head
    return _join(head, (["and"], [], []), _below_100(rest, final))


def translate_number(n: int) -> tuple[list[str], list[str], list[int]]:
    """English words, German words and the true alignment of ``n`` (1 <= n <= 999,999).

    ``alignment[j]`` is the index of the English word that German word ``j`` translates, or ``-1`` (``und``).
    """
    if isinstance(n, bool) or not isinstance(n, int) or not 1 <= n <= MAX_NUMBER:
        raise ValueError(f"numbers run from 1 to {MAX_NUMBER:,}, got {n!r}")
    thousands, rest = divmod(n, 1000)
    if thousands == 0:
        return _below_1000(rest, True)
    pieces = [_below_1000(thousands, False), (["thousand"], ["tausend"], [0])]
    if 0 < rest < 100:
        pieces.append((["and"], [], []))  # British: one thousand and five
    if rest:
        pieces.append(_below_1000(rest, True))
    return _join(*pieces)


def number_to_english(n: int) -> str:
    """``421507`` -> ``'four hundred and twenty one thousand five hundred and seven'``."""
    return " ".join(translate_number(n)[0])


def number_to_german(n: int) -> str:
    """``421507`` -> ``'vier hundert ein und zwanzig tausend fünf hundert sieben'``."""
    return " ".join(translate_number(n)[1])


@dataclass
class TranslationSet:
    """One split, as padded tensors (every row ends with ``<eos>``, then ``<pad>``).

    - ``numbers`` ``(N,)``: the numbers;
    - ``src`` ``(N, S)``: English ids; ``tgt`` ``(N, T)``: German ids;
    - ``align`` ``(N, T)``: for each German position, the source position of its English word;
      ``-1`` for ``und``, ``<eos>`` and padding (no word to align).
    """

    numbers: Tensor
    src: Tensor
    tgt: Tensor
    align: Tensor

    def __len__(self) -> int:
        return len(self.numbers)

    def to(self, device: torch.device | str) -> TranslationSet:
        """The same split with every tensor on ``device``."""
        return TranslationSet(*(t.to(device) for t in (self.numbers, self.src, self.tgt, self.align)))

    def __getitem__(self, index: slice | Tensor) -> TranslationSet:
        """Rows ``index`` (a slice, or a tensor of indices or a boolean mask)."""
        return TranslationSet(self.numbers[index], self.src[index], self.tgt[index], self.align[index])


@dataclass
class TranslationSplits:
    """Training, validation and test splits, disjoint by number (hence by sentence), and the two vocabularies."""

    train: TranslationSet
    val: TranslationSet
    test: TranslationSet
    src_vocab: Vocabulary
    tgt_vocab: Vocabulary


def encode_pairs(numbers: list[int]) -> TranslationSet:
    """Render ``numbers``, look the words up and pad: a ``TranslationSet`` with the lengths of its longest rows."""
    rendered = [translate_number(n) for n in numbers]
    src_len = max((len(en) for en, _, _ in rendered), default=0) + 1
    tgt_len = max((len(de) for _, de, _ in rendered), default=0) + 1
    src = torch.full((len(numbers), src_len), PAD, dtype=torch.long)
    tgt = torch.full((len(numbers), tgt_len), PAD, dtype=torch.long)
    align = torch.full((len(numbers), tgt_len), -1, dtype=torch.long)
    for row, (en, de, alignment) in enumerate(rendered):
        src[row, : len(en) + 1] = torch.tensor(ENGLISH.encode(en) + [EOS])
        tgt[row, : len(de) + 1] = torch.tensor(GERMAN.encode(de) + [EOS])
        align[row, : len(de)] = torch.tensor(alignment, dtype=torch.long)
    return TranslationSet(torch.tensor(numbers, dtype=torch.long), src, tgt, align)


def sample_numbers(count: int, seed: int = 0) -> list[int]:
    """``count`` distinct numbers in 1..999,999 with every digit count equally likely (1 to 6 digits).

    Each draw picks a digit count, then a number of that many digits; a number already drawn is drawn again.
    The small strata run out (there are only 9 one-digit numbers), so most of the data is 3 to 6 digits long.
    The numbers come back shuffled.
    """
    if not 0 < count <= 200_000:
        raise ValueError(f"count must be between 1 and 200,000, got {count}")
    rng = random.Random(seed)
    seen: set[int] = set()
    numbers: list[int] = []
    while len(numbers) < count:
        digits = rng.randint(1, 6)
        n = rng.randint(10 ** (digits - 1), 10**digits - 1)
        if n not in seen:
            seen.add(n)
            numbers.append(n)
    rng.shuffle(numbers)  # the small strata run out first: shuffle, so that every split gets its share of them
    return numbers


def make_translation_splits(n_train: int = 4000, n_val: int = 500, n_test: int = 1000, seed: int = 0) -> TranslationSplits:
    """Distinct numbers, split in order into test, validation and training sets; each split padded on its own.

    The same arguments give the same splits on every machine. No number, hence no sentence, is in two splits.
    """
    for name, value in (("n_train", n_train), ("n_val", n_val), ("n_test", n_test)):
        if not isinstance(value, int) or value < 1:
            raise ValueError(f"{name} must be a positive integer, got {value!r}")
    numbers = sample_numbers(n_train + n_val + n_test, seed)
    test, val, train = numbers[:n_test], numbers[n_test : n_test + n_val], numbers[n_test + n_val :]
    return TranslationSplits(encode_pairs(train), encode_pairs(val), encode_pairs(test), ENGLISH, GERMAN)
