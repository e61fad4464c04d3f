"""Notebook 15's texts for comparing tokenizers: prose, code and other scripts, fixed in the code; a mixed-Unicode generator.

- ``ENGLISH_PROSE`` and ``PYTHON_CODE`` were written for the course (MIT, like the rest of it).
- ``ARTICLE_1``: the first article of the Universal Declaration of Human Rights (United Nations, 1948), in eleven
  languages and eight writing systems (Latin, Cyrillic, Greek, Arabic, Devanagari, Chinese characters, Japanese,
  Hangul): the same sentence everywhere, so that the number of tokens it takes compares tokenizers across languages. The Declaration's translations are published by the UN's Office of the High
  Commissioner for Human Rights for everyone to reproduce.
- ``unicode_mix(n_chars, seed)``: a seeded jumble of what trips up a pre-tokenizer (letters of many scripts with
  combining marks, digits of several systems, contractions, emoji sequences, every kind of white space and runs of it,
  control characters, code), for comparing an encoder with tiktoken far from ordinary text. Only characters assigned
  since Unicode 6 are used, so that regular-expression engines with different Unicode tables agree on them.
- ``whitespace_runs()``: runs of 0 to 399 spaces, tabs, newlines and CRLF, each followed by a letter or a number.
- ``parity_parts()``, ``parity_text()``: about 1 MB of UTF-8 that is the same on every machine (Python's documentation
  as the course ships it, ``unicode_mix`` with seeds 0-3, the white-space runs, the samples above), on which
  notebook 15 compares its encoder with tiktoken and its pattern check compares a learner's pattern with GPT-2's.
"""

from __future__ import annotations

import functools
import random

from helpers.data.text import load_pydoc_text

__all__ = [
    "ENGLISH_PROSE",
    "PYTHON_CODE",
    "ARTICLE_1",
    "PARITY_SEEDS",
    "unicode_mix",
    "whitespace_runs",
    "parity_parts",
    "parity_text",
]

ENGLISH_PROSE = """\
A language model never sees letters. Before a sentence reaches the network, a tokenizer cuts it into pieces and \
replaces each piece by a number from a fixed list, the vocabulary. Frequent words such as "the" or "and" are single \
pieces; a rare word falls apart into several, and a name the tokenizer has never met may be spelled out almost letter \
by letter.

The choice matters more than it seems. It decides how long every sequence is, how much text fits into the context \
window, and what a training step costs. It also decides which questions are hard: asking how many times the letter r \
occurs in "strawberry" is easy for a reader who sees the letters, and hard for a model that sees three pieces whose \
spelling it has to remember. Numbers are split wherever the vocabulary happens to have pieces, so 1,234,567 and \
7,654,321 can be cut in different places, and adding them digit by digit is harder than it looks.

Nobody writes these vocabularies by hand. They are learned from a large sample of text by a simple rule: start from \
single bytes, find the pair of neighbours that occurs most often, make it a new piece, and repeat until the vocabulary \
is as large as wanted. What comes out reflects the text it was learned from, which is why a tokenizer trained on \
English handles Hindi or Korean far less economically than English.
"""

PYTHON_CODE = '''\
import json
from collections import Counter
from pathlib import Path


def word_frequencies(folder: Path, min_count: int = 2) -> dict[str, int]:
    """Count the words of every text file in ``folder``; keep those seen at least ``min_count`` times."""
    counts: Counter[str] = Counter()
    for path in sorted(folder.glob("*.txt")):
        with open(path, encoding="utf-8") as f:
            for line in f:
                counts.update(word.lower() for word in line.split() if word.isalpha())
    return {word: n for word, n in counts.most_common() if n >= min_count}


class Vocabulary:
    def __init__(self, words: list[str], specials: tuple[str, ...] = ("<pad>", "<unk>")) -> None:
        self.itos = [*specials, *words]
        self.stoi = {word: i for i, word in enumerate(self.itos)}

    def __len__(self) -> int:
        return len(self.itos)

    def encode(self, text: str) -> list[int]:
        unknown = self.stoi["<unk>"]
        return [self.stoi.get(word, unknown) for word in text.lower().split()]

    def save(self, path: Path) -> None:
        path.write_text(json.dumps({"itos": self.itos}, indent=4), encoding="utf-8")


if __name__ == "__main__":
    frequencies = word_frequencies(Path("corpus"))
    vocab = Vocabulary(list(frequencies))
    print(f"{len(vocab):,} words; 'the' is {vocab.encode('the')[0]}")
'''

#: Article 1 of the Universal Declaration of Human Rights, by language.
ARTICLE_1 = {
    "English": (
        "All human beings are born free and equal in dignity and rights. They are endowed with reason and conscience "
        "and should act towards one another in a spirit of brotherhood."
    ),
    "French": (
        "Tous les êtres humains naissent libres et égaux en dignité et en droits. Ils sont doués de raison et de "
        "conscience et doivent agir les uns envers les autres dans un esprit de fraternité."
    ),
    "German": (
        "Alle Menschen sind frei und gleich an Würde und Rechten geboren. Sie sind mit Vernunft und Gewissen begabt "
        "und sollen einander im Geist der Brüderlichkeit begegnen."
    ),
    "Spanish": (
        "Todos los seres humanos nacen libres e iguales en dignidad y derechos y, dotados como están de razón y "
        "conciencia, deben comportarse fraternalmente los unos con los otros."
    ),
    "Russian": (
        "Все люди рождаются свободными и равными в своем достоинстве и правах. Они наделены разумом и совестью и "
        "должны поступать в отношении друг друга в духе братства."
    ),
    "Greek": (
        "Όλοι οι άνθρωποι γεννιούνται ελεύθεροι και ίσοι στην αξιοπρέπεια και τα δικαιώματα. Είναι προικισμένοι με "
        "λογική και συνείδηση, και οφείλουν να συμπεριφέρονται μεταξύ τους με πνεύμα αδελφοσύνης."
    ),
    "Arabic": (
        "يولد جميع الناس أحرارًا متساوين في الكرامة والحقوق. وهم قد وهبوا عقلاً وضميرًا وعليهم أن يعامل بعضهم بعضًا بروح الإخاء."
    ),
    "Hindi": (
        "सभी मनुष्यों को गौरव और अधिकारों के मामले में जन्मजात स्वतन्त्रता और समानता प्राप्त है। उन्हें बुद्धि और "
        "अन्तरात्मा की देन प्राप्त है और परस्पर उन्हें भाईचारे के भाव से बर्ताव करना चाहिए।"
    ),
    "Chinese": "人人生而自由，在尊严和权利上一律平等。他们赋有理性和良心，并应以兄弟关系的精神相对待。",
    "Japanese": (
        "すべての人間は、生れながらにして自由であり、かつ、尊厳と権利とについて平等である。人間は、理性と良心とを"
        "授けられており、互いに同胞の精神をもって行動しなければならない。"
    ),
    "Korean": (
        "모든 인간은 태어날 때부터 자유로우며 그 존엄과 권리에 있어 동등하다. 인간은 천부적으로 이성과 양심을 "
        "부여받았으며 서로 형제애의 정신으로 행동하여야 한다."
    ),
}

# ---------------------------------------------------------------- a jumble of what trips up pre-tokenizers

_LETTERS = {
    "latin": "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ",
    "accented": "àáâãäåæçèéêëìíîïñòóôõöøùúûüýÿßÀÉÎÕÜŒœŁłŠšŽžđĐğİışŞ",
    "greek": "αβγδεζηθικλμνξοπρσςτυφχψωΑΒΓΔΘΛΞΠΣΦΨΩάέήίόύώ",
    "cyrillic": "абвгдеёжзийклмнопрстуфхцчшщъыьэюяАБВГДЕЖЗИЙКЛМНОПРСТУФХЦЧШЩЭЮЯ",
    "hebrew": "אבגדהוזחטיכלמנסעפצקרשת",
    "arabic": "ابتثجحخدذرزسشصضطظعغفقكلمنهوي",
    "devanagari": "अआइईउऊएऐओऔकखगघचछजझटठडढणतथदधनपफबभमयरलवशषसह",
    "thai": "กขคงจฉชซญดตถทธนบปผพฟภมยรลวศษสหอฮ",
    "cjk": "的一是不了人我在有他这中大来上国个到说们为子和你地出道也时年得就那要下以生会自着去之过家学对可",
    "kana": "あいうえおかきくけこさしすせそたちつてとなにぬねのはひふへほまみむめもやゆよらりるれろわをんアイウエオカキクケコ",
    "hangul": "가나다라마바사아자차카타파하한국어글말씀",
}
_MARKS = ["\u0301", "\u0308", "\u0327", "\u093e", "\u093f", "\u094d", "\u0e31", "\u0e34", "\u05b7", "\u064e"]
_DIGITS = ["0123456789", "٠١٢٣٤٥٦٧٨٩", "०१२३४५६७८९", "０１２３４５６７８９", "²³¹¼½¾", "ⅠⅡⅢⅣⅤⅫ"]
_SPACES = [" ", "  ", "   ", "    ", "        ", "\t", "\t\t", "\n", "\n\n", "\r\n", " \n", "\n    ", "\u00a0", "\u3000",
           "\u2028", "\u2009", "\x0b", "\x0c", "\x85", "\x1c", "\x1f", " \t "]  # fmt: skip
_CONTRACTIONS = ["'s", "'t", "'re", "'ve", "'m", "'ll", "'d", "'S", "'T", "'RE", "’s", "'x", "''", "'"]
_SYMBOLS = ["!", "?", ".", ",", "...", "?!", "--", "—", "«", "»", "“", "”", "(", ")", "[", "]", "{", "}", "#", "@",
            "$", "%", "&", "*", "+", "=", "<", ">", "/", "\\", "|", "~", "^", "_", "`", ";", ":", "€", "£", "©", "°"]  # fmt: skip
_EMOJI = ["😀", "👍", "👍🏽", "❤️", "👨‍👩‍👧", "🇫🇷", "🎉", "🤖", "✅", "⭐"]
_CODE = ["def f(x):\n    return x ** 2\n", "if a  ==  b:\n\tpass", "x=[1,2,3];y={'k':v}", "    # comment\n",
         "print(f\"{n:,}\")", "a->b", "i++;", "<|endoftext|>", "<div class=\"x\">", "0x1F", "1e-5", "__init__"]  # fmt: skip
_CONTROLS = ["\x00", "\x01", "\x07", "\x1b", "\x7f", "\ue000", "\ufeff", "\u200b", "\u200d"]


def _word(rng: random.Random) -> str:
    alphabet = _LETTERS[rng.choice(list(_LETTERS))]
    letters = [rng.choice(alphabet) for _ in range(rng.choice([1, 1, 2, 3, 4, 5, 6, 7, 9, 12, 20]))]
    if rng.random() < 0.15:
        letters.insert(rng.randrange(1, len(letters) + 1), rng.choice(_MARKS))
    return "".join(letters)


def unicode_mix(n_chars: int, seed: int = 0) -> str:
    """About ``n_chars`` characters of seeded Unicode jumble: words of 11 scripts, digits of 6 systems, contractions,
    emoji sequences, 22 kinds of white space and its runs, symbols, code, control characters."""
    rng = random.Random(seed)
    parts: list[str] = []
    size = 0
    while size < n_chars:
        kind = rng.random()
        if kind < 0.45:
            piece = _word(rng)
        elif kind < 0.55:
            piece = "".join(rng.choice(rng.choice(_DIGITS)) for _ in range(rng.choice([1, 2, 3, 4, 6, 10])))
        elif kind < 0.62:
            piece = _word(rng) + rng.choice(_CONTRACTIONS)
        elif kind < 0.75:
            piece = "".join(rng.choice(_SYMBOLS) for _ in range(rng.choice([1, 1, 2, 3])))
        elif kind < 0.81:
            piece = rng.choice(_EMOJI)
        elif kind < 0.87:
            piece = rng.choice(_CODE)
        elif kind < 0.90:
            piece = rng.choice(_CONTROLS)
        else:
            piece = rng.choice(_SPACES) * rng.choice([1, 1, 1, 2, 5])
        parts.append(piece)
        parts.append(" " if rng.random() < 0.7 else rng.choice(_SPACES))
        size += len(piece) + 1
    return "".join(parts)


#: The seeds of ``unicode_mix`` in ``parity_parts`` (60,000 characters each).
PARITY_SEEDS = (0, 1, 2, 3)


def whitespace_runs(n: int = 400) -> str:
    """Runs of ``k`` spaces for ``k`` in ``range(n)``, each followed by a letter, tabs, a letter, newlines, sometimes a
    CRLF, and the number ``k``: where GPT-2's rule "a run of white space leaves its last space to the next word" acts."""
    return "".join(
        f"{' ' * k}x{chr(9) * (k % 5)}y{chr(10) * (k % 4)}{chr(13) + chr(10) if k % 3 == 0 else ''}{k}" for k in range(n)
    )


def parity_parts() -> dict[str, str]:
    """About 1 MB of UTF-8, identical on every machine, by part: Python's documentation (the course's committed copy,
    466,117 bytes), ``unicode_mix`` with seeds 0-3 (465,272 bytes), the white-space runs (83,358 bytes) and the
    course's samples (prose, code, Article 1 in 11 languages)."""
    return dict(_parity_parts())


@functools.cache
def _parity_parts() -> tuple[tuple[str, str], ...]:
    return tuple(
        {
            "Python's documentation": load_pydoc_text(),
            "Unicode jumble": "".join(unicode_mix(60_000, seed) for seed in PARITY_SEEDS),
            "white-space runs": whitespace_runs(),
            "the course's samples": "\n\n".join([ENGLISH_PROSE, PYTHON_CODE, *ARTICLE_1.values()]),
        }.items()
    )


@functools.cache
def parity_text() -> str:
    """``parity_parts()`` joined into one text (about 1 MB of UTF-8)."""
    return "".join(parity_parts().values())
