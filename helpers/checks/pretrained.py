"""Checks of notebook 10: basic tokenization, the WordPiece step, loading one BERT layer into an encoder block, mean pooling.

None of them needs the model package: they run on texts chosen so that the usual
slips give different answers, on a toy vocabulary, and on random weights with
BERT's names and layouts. Each names the mistake it recognises and says how to
fix it. An answer computed in float32, the precision of the model, is right; one
computed in float16 or bfloat16 is named as a precision problem.
"""

from __future__ import annotations

import unicodedata
from collections.abc import Callable, Mapping

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from helpers.checks._core import (
    ExerciseFailed,
    call_attempt,
    exercise,
    expect_close,
    expect_shape,
    expect_tensor,
    require_attempt,
)
from helpers.models.minilm import LAYER_NAMES, BertEncoderBlock, encoder_layer_state_dict
from helpers.tokenizers.wordpiece import basic_tokenize as reference_basic_tokenize
from helpers.tokenizers.wordpiece import is_punctuation
from helpers.tokenizers.wordpiece import split_on_punctuation as reference_split_on_punctuation
from helpers.tokenizers.wordpiece import wordpiece as reference_wordpiece

__all__ = [
    "check_split_on_punctuation",
    "check_basic_tokenize",
    "check_wordpiece",
    "check_layer_names",
    "check_load_encoder_layer",
    "check_mean_pooling",
    "TOY_VOCAB",
    "BASIC_TEXTS",
    "PUNCTUATION_WORDS",
]

_HALF = (torch.float16, torch.bfloat16)


def _precision_message(what: str) -> str:
    return (
        f"{what}: only about 3 significant digits agree with the reference, the precision of float16 or bfloat16. The model "
        "computes in float32: compute in float32 (or in the inputs' own dtype, float64 here), without .half() or .bfloat16()"
    )


def _as_word_list(got: object, what: str) -> list[str]:
    """The answer as a list of strings, or a named failure (a string, a nested list, None...)."""
    if isinstance(got, str):
        raise ExerciseFailed(f"for {what} you returned the string {got!r}; return a list of strings, e.g. ['play', '##ing']")
    if isinstance(got, tuple):
        got = list(got)
    if isinstance(got, list) and got and all(isinstance(p, (list, tuple)) for p in got):
        raise ExerciseFailed(f"for {what} you returned a list of lists ({got[:3]!r}...); return one flat list of strings")
    if not isinstance(got, list) or not all(isinstance(p, str) for p in got):
        raise ExerciseFailed(f"for {what} you returned {got!r}; return a list of strings")
    return got


# ---------------------------------------------------------------- basic tokenization

#: Texts on which the usual slips of basic tokenization give different answers. Every character in them has had the
#: same Unicode category since Unicode 6.1, so the expected words are the same on every Python version.
BASIC_TEXTS = [
    "Héllo, WÖRLD! Didn't Ça cost $3.50?",
    "naïve café\tfaçade\nrésumé  Ångström",
    "¿Qué? «Sí» — it’s 10:30… Wait...",
    "ﬁne ½ ² ß İstanbul ΟΔΟΣ",
    "3×4=12, a±b, snake_case, emoji 😀 ok",
    "control\x00chars\x07 zero\u200bwidth",
    "中文 and 日本語",
    "e-mail: a@b.com <tag> ^x^ `y` |z| ~w + #",
    "",
    "   ",
]

_ASCII_SYMBOLS = set("$+<=>^`|~")  # ASCII punctuation for BERT, symbols (S*) for Unicode


def _is_mark(char: str) -> bool:
    return unicodedata.category(char) == "Mn"


def _basic_mistake(texts: list[str], answers: list[list[str]], expected: list[list[str]]) -> str:
    """Name what the learner's basic tokenization did differently, from properties of its words."""
    words = [w for answer in answers for w in answer]
    want = [w for answer in expected for w in answer]
    if all(w.isascii() for w in words) and any(not w.isascii() for w in want):
        return (
            "every non-ASCII character is gone ('中', 'ß', 'ο', '😀'): encoding to ASCII with errors='ignore' drops letters, "
            "not only accents; decompose with NFD and drop only the combining marks (category 'Mn')"
        )
    if any(not w.strip() for w in words):
        return (
            "some words are empty strings (or white space): add a piece only if it is not empty (a word that ends in "
            "punctuation, 'hello,', leaves nothing after the ','), and split on white space with text.split(), which "
            "never returns empty strings (text.split(' ') gives '' between two spaces)"
        )
    controls = [w for w in words if any(unicodedata.category(c) in ("Cc", "Cf") for c in w)]
    if controls or "中文" in words or "中文and" in words:
        found = f"the word {controls[0]!r} still holds a control or zero-width character" if controls else "'中文' is one word"
        return (
            f"{found}: start with clean_text(text), which drops control and zero-width characters, turns every kind of "
            "white space into a space and puts spaces around Chinese characters"
        )
    upper = [w for w in words if w != w.lower()]
    if upper:
        return f"{upper[0]!r} is not lower-cased: call .lower() on the text or on each word"
    if "ss" in words and "ß" in want or "οδοσ" in words:
        return "you used str.casefold(), which turns 'ß' into 'ss' and a final 'ς' into 'σ': BERT lower-cases with str.lower()"
    accents = [w for w in words if any(_is_mark(c) for c in unicodedata.normalize("NFD", w))]
    if accents:
        return (
            f"{accents[0]!r} still carries an accent: strip accents by decomposing each word, unicodedata.normalize('NFD', "
            "word) (é becomes e + a combining accent), then dropping the characters whose unicodedata.category is 'Mn'"
        )
    if "fine" in words or "2" in words and "²" in want:
        return (
            "you normalised with NFKD (or NFKC), which also replaces compatibility characters ('ﬁ' -> 'fi', '²' -> '2', "
            "'½' -> '1⁄2'): use NFD, which only separates the accents"
        )
    punctuation = _punctuation_mistake(words, want)
    if punctuation:
        return punctuation
    for text, got, exp in zip(texts, answers, expected, strict=True):
        if got != exp:
            return (
                f"for {text!r} you gave {got}, expected {exp}: clean_text, lower-case, strip accents (NFD, drop 'Mn'), "
                "split on white space, then make every punctuation character a word of its own"
            )
    return "the words differ from the reference"  # not reached: some text differs


def _punctuation_mistake(words: list[str], want: list[str]) -> str:
    """Name what a split at punctuation did differently, from the words it gave (``words``) and the expected ones."""
    with_punctuation = [w for w in words if len(w) > 1 and any(is_punctuation(c) for c in w)]
    attached = sorted({c for w in with_punctuation for c in w if is_punctuation(c)})
    if attached:
        if all(is_punctuation(c) for w in with_punctuation for c in w):
            grouped = with_punctuation[0]
            return (
                f"consecutive punctuation stayed together ({grouped!r}): every punctuation character is a word of its own "
                "('...' gives '.', '.', '.')"
            )
        shown = " ".join(attached)
        if all(not c.isascii() for c in attached):
            return (
                f"the punctuation {shown} stayed inside words: only ASCII punctuation (string.punctuation) was split off; "
                "split at every character for which is_punctuation(char) is True ('¿', '«', '—', '…' and '’' too)"
            )
        if set(attached) <= _ASCII_SYMBOLS:
            return (
                f"the characters {shown} stayed inside words: you split at Unicode's punctuation categories (P*) only, but "
                "BERT also splits off every ASCII character that is not a letter, digit or space ('$', '+', '<', '=', '^'); "
                "use is_punctuation(char)"
            )
        if attached == ["_"]:
            return (
                "'_' stayed inside a word ('snake_case'): a regular expression's \\w counts '_' as a word character, but "
                "BERT splits it off like any punctuation; split at is_punctuation(char)"
            )
        return (
            f"punctuation was not split off ({shown} stayed inside words): every character for which is_punctuation(char) is "
            "True becomes a word of its own ('didn't' -> 'didn', \"'\", 't')"
        )
    punctuation_words = [w for w in want if len(w) == 1 and is_punctuation(w)]
    if sum(w in punctuation_words for w in words) < len(punctuation_words) and [
        w for w in want if w not in punctuation_words
    ] == [w for w in words if w not in punctuation_words]:
        return "the punctuation was dropped: keep every punctuation character, as a word of its own ('hello', ',', 'world')"
    symbols = sorted({w for w in words if len(w) == 1 and not is_punctuation(w) and not w.isalnum() and w not in want})
    if symbols:
        return (
            f"the symbols {' '.join(symbols)} were split off as if they were punctuation: BERT keeps '±', '×' and "
            "emoji inside words; split only where is_punctuation(char) is True (a regular expression's \\W is wider)"
        )
    return ""


@exercise("basic tokenization")
def check_basic_tokenize(basic_tokenize) -> None:
    """Check ``basic_tokenize(text) -> list[str]`` against ``helpers.tokenizers.wordpiece.basic_tokenize`` (lower-cased)."""
    require_attempt(basic_tokenize, "basic_tokenize")
    answers = [_as_word_list(call_attempt(basic_tokenize, text, what=f"the text {text!r}"), f"{text!r}") for text in BASIC_TEXTS]
    expected = [reference_basic_tokenize(text) for text in BASIC_TEXTS]
    if answers != expected:
        raise ExerciseFailed(_basic_mistake(BASIC_TEXTS, answers, expected))


#: Words (no white space: the basic tokenizer splits on it first) on which the usual slips of the punctuation split differ.
PUNCTUATION_WORDS = [
    "didn't",
    "hello,",
    "$3.50?",
    "wait...",
    "¿qué?",
    "«sí»",
    "—",
    "it’s",
    "10:30…",
    "snake_case",
    "3×4=12,",
    "a±b",
    "ok😀",
    "<tag>",
    "^x^",
    "`y`|z|~w",
    "a@b.com",
    "plain",
]


@exercise("splitting off punctuation")
def check_split_on_punctuation(split_on_punctuation) -> None:
    """Check ``split_on_punctuation(word) -> list[str]``: every punctuation character a word of its own, the rest kept."""
    require_attempt(split_on_punctuation, "split_on_punctuation")
    answers = [
        _as_word_list(call_attempt(split_on_punctuation, word, what=f"the word {word!r}"), repr(word))
        for word in PUNCTUATION_WORDS
    ]
    expected = [reference_split_on_punctuation(word) for word in PUNCTUATION_WORDS]
    if answers == expected:
        return
    words = [w for answer in answers for w in answer]
    want = [w for answer in expected for w in answer]
    if any(not w for w in words):
        raise ExerciseFailed(
            "some pieces are empty strings: add the letters collected so far only if there are any (a word that starts or "
            "ends with punctuation, ',hello' or 'hello,', leaves nothing on one side of the ',')"
        )
    if all(got == list(word) for word, got in zip(PUNCTUATION_WORDS, answers, strict=True)):
        raise ExerciseFailed(
            "every character became a piece of its own; only punctuation characters do, the letters and digits between "
            "two of them stay together ('didn', \"'\", 't')"
        )
    named = _punctuation_mistake(words, want)
    if named:
        raise ExerciseFailed(named)
    for word, got, right in zip(PUNCTUATION_WORDS, answers, expected, strict=True):
        if "".join(got) != word:
            raise ExerciseFailed(
                f"for {word!r} you gave {got}: the pieces do not spell the word any more. Every character belongs to exactly "
                "one piece: only the splitting is new, nothing is added, changed or dropped"
                + (
                    " (the letters left after the last punctuation character too: add that last piece after the loop)"
                    if len("".join(got)) < len(word)
                    else ""
                )
            )
        if got != right:
            raise ExerciseFailed(
                f"for {word!r} you gave {got}, expected {right}: collect the characters that are not punctuation into a "
                "piece, and when a punctuation character comes, close that piece (if it is not empty) and add the "
                "character alone"
            )


# ---------------------------------------------------------------- WordPiece

#: A small vocabulary on which the usual mistakes give different answers.
TOY_VOCAB = {
    token: i
    for i, token in enumerate(
        "[PAD] [UNK] [CLS] [SEP] u un una aff ##a ##aff ##ffa ##able ##ble ##b ##l ##e able ble "
        "play ##ing ##s ##er ing s er playing ##pla ##y token ##izer ##ize ##r ##i ##z ##t x ##x h ##h "
        "ab abc ##cd pla".split()
    )
}

#: Words whose greedy split separates the typical mistakes.
_WORDS = [
    "playing",
    "unaffable",
    "players",
    "tokenizer",
    "play",
    "x",
    "xx",
    "xhx",
    "uq",
    "unaffableq",
    "qplay",
    "tokenq",
    "abcd",
]

#: Lookups in the vocabulary allowed for one word before the check calls the loop endless.
_LOOKUP_BUDGET = 20_000


class _EndlessLoop(BaseException):
    """Raised by the counting vocabulary; a BaseException, so that the learner's ``except Exception`` cannot swallow it."""


class _CountingVocab(dict):
    """A dict that stops a WordPiece loop which never advances (too many lookups for one word)."""

    def __init__(self, data: Mapping[str, int]) -> None:
        super().__init__(data)
        self.lookups = 0

    def _count(self) -> None:
        self.lookups += 1
        if self.lookups > _LOOKUP_BUDGET:
            raise _EndlessLoop

    def __contains__(self, key: object) -> bool:
        self._count()
        return super().__contains__(key)

    def __getitem__(self, key: str) -> int:
        self._count()
        return super().__getitem__(key)

    def get(self, key: str, default: object = None) -> object:  # type: ignore[override]
        self._count()
        return super().get(key, default)


def _variant(kind: str) -> Callable[[str, Mapping[str, int]], list[str]]:
    """Typical wrong WordPiece implementations, to recognise what the learner's code did."""

    def split(word: str, vocab: Mapping[str, int]) -> list[str]:
        if kind == "never_split":
            return [word] if word in vocab else ["[UNK]"]
        if kind == "backtracking":
            return _backtracking(word, vocab) or ["[UNK]"]
        if kind == "from_end":
            return _from_end(word, vocab)
        pieces: list[str] = []
        start = 0
        while start < len(word):
            longest = len(word) - start - (1 if kind == "never_whole_rest" else 0)
            lengths = range(1, longest + 1) if kind == "shortest" else range(longest, 0, -1)
            piece = None
            for length in lengths:
                text = word[start : start + length]
                prefixed = "##" + text if (start > 0 or kind == "hash_first") and kind != "no_hash" else text
                if prefixed in vocab:
                    piece, end = prefixed, start + length
                    break
            if piece is None:
                if kind == "partial_unk":
                    return [*pieces, "[UNK]"]
                if kind == "partial_keep":
                    return pieces or ["[UNK]"]
                if kind == "skip_unknown":
                    start += 1
                    continue
                if kind == "char_unk":
                    pieces.append("[UNK]")
                    start += 1
                    continue
                return ["[UNK]"]
            pieces.append(piece.removeprefix("##") if kind == "bare_pieces" else piece)
            if kind == "first_piece_only":
                return pieces
            start = end
        return pieces

    return split


def _from_end(word: str, vocab: Mapping[str, int]) -> list[str]:
    """Greedy longest match from the END of the word (the longest suffix first): not WordPiece's left-to-right rule."""
    pieces: list[str] = []
    end = len(word)
    while end > 0:
        for start in range(end):
            piece = word[start:end] if start == 0 else "##" + word[start:end]
            if piece in vocab:
                pieces.insert(0, piece)
                end = start
                break
        else:
            return ["[UNK]"]
    return pieces


def _backtracking(word: str, vocab: Mapping[str, int], start: int = 0) -> list[str] | None:
    """A split that covers the word if any does (longest first, backtracking): not WordPiece's greedy rule."""
    if start == len(word):
        return []
    for end in range(len(word), start, -1):
        piece = word[start:end] if start == 0 else "##" + word[start:end]
        if piece in vocab:
            rest = _backtracking(word, vocab, end)
            if rest is not None:
                return [piece, *rest]
    return None


_WORDPIECE_MISTAKES = {
    "shortest": "the pieces are the shortest matches: WordPiece is greedy longest-match-first. From the current position "
    "try the whole rest of the word, then shorten it one character at a time until the piece is in the vocabulary",
    "never_whole_rest": "every word became '[UNK]': the whole rest of the word was never tried as a piece, so the last "
    "character can never be matched (or your function always returns ['[UNK]']). The longest candidate from position "
    "`start` is word[start:len(word)]: start the shrinking loop at end = len(word), not len(word) - 1",
    "never_split": "every word not in the vocabulary as a whole became '[UNK]': words were never split into pieces (or the "
    "pieces never reached the end of the word: the last candidate from `start` is word[start:len(word)]). Take the longest "
    "piece in the vocabulary from the start, then go on from where it ended with '##' pieces until the word is covered",
    "no_hash": "the pieces after the first were looked up without their '##' prefix: a piece that continues a word is "
    "stored as '##' + piece (so 'ing' at the start of a word and '##ing' inside one are different tokens)",
    "bare_pieces": "the pieces after the first lost their '##' in the list you return: return the vocabulary entry itself, "
    "'##' included ('play', '##ing'), so that the ids and the tokens stay the vocabulary's",
    "hash_first": "the first piece got a '##' prefix too: only the pieces that continue a word carry '##'",
    "partial_unk": "when no piece matches, the pieces found so far were kept and '[UNK]' appended: the whole word becomes a "
    "single '[UNK]' (return ['[UNK]'] and drop the pieces found before)",
    "partial_keep": "when no piece matches, you returned the pieces found so far and dropped the rest of the word: the whole "
    "word becomes a single '[UNK]' (return ['[UNK]'], not the partial pieces)",
    "skip_unknown": "a character with no matching piece was skipped: when no piece matches, the whole word becomes a single "
    "'[UNK]'",
    "char_unk": "an unmatched character became its own '[UNK]' and the split went on: the whole word becomes a single '[UNK]'",
    "first_piece_only": "you stopped after the first piece: go on from where each piece ended ('##' pieces) until the end "
    "of the word",
    "from_end": "the pieces were matched from the end of the word (the longest suffix first): WordPiece goes left to "
    "right, the longest piece from the start of the word, then the longest '##' piece from where it ended, and so on",
    "backtracking": "when the longest first piece led to a dead end you tried shorter ones (a search for any split that "
    "covers the word): WordPiece is greedy, it keeps the longest piece at each position and gives '[UNK]' for the whole "
    "word when the rest cannot be covered ('abcd' -> 'abc' then no '##d': '[UNK]', not 'ab', '##cd')",
}


def _describe_wordpiece_difference(word: str, got: list[str], want: list[str], vocab: Mapping[str, int]) -> str:
    """Why the pieces of one word differ, when no known variant explains every word."""
    shown = f"for {word!r} you gave {got}, expected {want}"
    if any(p != "[UNK]" and p.strip("[]").upper() == "UNK" for p in got):
        return f"{shown}: spell the unknown token exactly '[UNK]' (capitals, in brackets), the vocabulary's own entry"
    if want == ["[UNK]"]:
        if got == [word]:
            return f"{shown}: the word is not in the vocabulary and cannot be covered by pieces, so it is '[UNK]'"
        return (
            f"{shown}: at some position no piece is in the vocabulary, so the whole word becomes a single '[UNK]' "
            "(pieces found before that position are dropped)"
        )
    if got == ["[UNK]"]:
        return (
            f"{shown}: the word can be covered. At each position try the longest candidate first (the whole rest of the "
            "word), with '##' in front after the first piece, and shorten it until it is in the vocabulary"
        )
    if "".join(p.removeprefix("##") for p in got if p != "[UNK]") != word:
        return f"{shown}: the pieces (without their '##') do not spell the word: every character belongs to exactly one piece"
    if got and got[0].startswith("##"):
        return f"{shown}: the first piece of a word never carries '##'"
    if any(not p.startswith("##") for p in got[1:]):
        return f"{shown}: every piece after the first carries '##' (a continuation), in the lookup and in the list you return"
    unknown = [p for p in got if p not in vocab]
    if unknown:
        return f"{shown}: {unknown[0]!r} is not in the vocabulary; every piece must be a vocabulary entry"
    for mine, theirs in zip(got, want, strict=False):
        if mine != theirs:
            if len(mine.removeprefix("##")) < len(theirs.removeprefix("##")):
                return (
                    f"{shown}: where you took {mine!r} the vocabulary has the longer piece {theirs!r}; take the longest "
                    "piece at each position"
                )
            break
    return f"{shown}: take the longest piece in the vocabulary at each position, '##' before every piece but the first"


@exercise("WordPiece")
def check_wordpiece(wordpiece) -> None:
    """Check ``wordpiece(word, vocab) -> list[str]`` against ``helpers.tokenizers.wordpiece.wordpiece`` on a toy vocabulary."""
    require_attempt(wordpiece, "wordpiece")
    answers = {}
    for word in _WORDS:
        vocab = _CountingVocab(TOY_VOCAB)
        try:
            got = call_attempt(wordpiece, word, vocab, what=f"the word {word!r} and a toy vocabulary")
        except _EndlessLoop:
            raise ExerciseFailed(
                f"for {word!r} your loop looked up more than {_LOOKUP_BUDGET:,} candidates without finishing: it never "
                "ends. After each piece, move `start` to where the piece ended; when no piece matches, return ['[UNK]']"
            ) from None
        answers[word] = _as_word_list(got, repr(word))
    expected = {word: reference_wordpiece(word, TOY_VOCAB) for word in _WORDS}
    if answers == expected:
        return
    for kind, message in _WORDPIECE_MISTAKES.items():
        wrong = {word: _variant(kind)(word, TOY_VOCAB) for word in _WORDS}
        if answers == wrong:
            example = next(w for w in _WORDS if wrong[w] != expected[w])
            raise ExerciseFailed(f"{message} (for {example!r} you gave {answers[example]}, expected {expected[example]})")
    word = next(w for w in _WORDS if answers[w] != expected[w])
    raise ExerciseFailed(_describe_wordpiece_difference(word, answers[word], expected[word], TOY_VOCAB))


# ---------------------------------------------------------------- loading one layer


def _fake_bert_weights(d_model: int, d_ff: int, layers: int) -> dict[str, Tensor]:
    """Random tensors under BERT's names and in its layouts ``(out, in)``, ``layers`` layers."""
    shapes = {
        "attention.self.query": (d_model, d_model),
        "attention.self.key": (d_model, d_model),
        "attention.self.value": (d_model, d_model),
        "attention.output.dense": (d_model, d_model),
        "attention.output.LayerNorm": None,
        "intermediate.dense": (d_ff, d_model),
        "output.dense": (d_model, d_ff),
        "output.LayerNorm": None,
    }
    weights = {}
    for i in range(layers):
        for name, shape in shapes.items():
            prefix = f"encoder.layer.{i}.{name}"
            if shape is None:  # a layer norm: gain near 1, bias near 0, both random
                weights[f"{prefix}.weight"] = 1.0 + 0.3 * torch.randn(d_model, dtype=torch.float64)
                weights[f"{prefix}.bias"] = 0.3 * torch.randn(d_model, dtype=torch.float64)
            else:
                weights[f"{prefix}.weight"] = torch.randn(*shape, dtype=torch.float64) / shape[1] ** 0.5
                weights[f"{prefix}.bias"] = 0.1 * torch.randn(shape[0], dtype=torch.float64)
    weights["embeddings.word_embeddings.weight"] = torch.randn(20, d_model, dtype=torch.float64)
    return weights


def _describe_wrong_parameter(name: str, got: Tensor, start: Tensor, weights: dict[str, Tensor], layer: int) -> str:
    """Why the block's parameter ``name`` does not hold what layer ``layer`` says it should."""
    ours_to_bert = {f"{ours}.{kind}": f"{bert}.{kind}" for bert, ours in LAYER_NAMES.items() for kind in ("weight", "bias")}
    bert_name = f"encoder.layer.{layer}.{ours_to_bert[name]}"
    expected = weights[bert_name]
    if got.shape == start.shape and torch.equal(got, start):
        return f"`{name}` was not loaded (it still holds its initial values); it should hold `{bert_name}`"
    if got.dim() == 2 and got.T.shape == expected.shape and torch.allclose(got.T, expected, atol=1e-6):
        return (
            f"`{name}` holds `{bert_name}` transposed. BERT stores a linear layer's weight as nn.Linear does, "
            "(out_features, in_features): copy it as it is, without .T"
        )
    for other, tensor in weights.items():
        if other != bert_name and tensor.shape == got.shape and torch.allclose(tensor, got, atol=1e-6):
            return f"`{name}` holds `{other}`, but it should hold `{bert_name}`"
        if other != bert_name and tensor.dim() == 2 and tensor.T.shape == got.shape and torch.allclose(tensor.T, got, atol=1e-6):
            return f"`{name}` holds `{other}` transposed, but it should hold `{bert_name}` as it is"
    return f"`{name}` does not hold `{bert_name}` (largest difference {(got - expected).abs().max().item():.3g})"


#: Error texts from copying, and what they mean here.
_LOAD_ERROR_HINTS = [
    (
        ("size mismatch", "must match the size", "The size of tensor", "copying a param with shape"),
        "a tensor went to a parameter of another shape: match the names (`intermediate.dense` (d_ff, d_model) is "
        "`ff.linear1`, `output.dense` (d_model, d_ff) is `ff.linear2`, `attention.output.dense` is `self_attn.w_o`) and copy "
        "each weight as it is, (out_features, in_features), without .T",
    ),
    (
        ("cannot assign",),
        "a module's weight must stay an nn.Parameter: copy into it, `block.ff.linear1.weight.copy_(tensor)` inside "
        "`with torch.no_grad():`, or assign `nn.Parameter(tensor.clone())`",
    ),
    (
        ("Missing key", "Unexpected key"),
        "the names of the dict given to load_state_dict must be the block's own (`self_attn.w_q.weight`, ..., "
        "`norm2.bias`, see the cell that lists them), one entry for each of the 16 parameters",
    ),
    (
        ("leaf Variable that requires grad",),
        "copy_ into a parameter must run inside `with torch.no_grad():`",
    ),
]


def _with_hint(message: str, hints: list[tuple[tuple[str, ...], str]]) -> str:
    for needles, hint in hints:
        if any(needle in message for needle in needles):
            return f"{message}. {hint}"
    return message


#: What each BERT name is, for the messages of ``check_layer_names``.
_BERT_ROLES = {
    "attention.self.query": "the queries' projection W_Q",
    "attention.self.key": "the keys' projection W_K",
    "attention.self.value": "the values' projection W_V",
    "attention.output.dense": "the attention's output projection W_O (it sits in `attention.output`, so its name says "
    "'output', but it is the attention's)",
    "attention.output.LayerNorm": "the first layer norm, after the attention's residual (BERT keeps it inside "
    "`attention.output`)",
    "intermediate.dense": "the feed-forward network's first linear layer, d_model -> d_ff",
    "output.dense": "the feed-forward network's second linear layer, d_ff -> d_model",
    "output.LayerNorm": "the second layer norm, after the feed-forward network's residual",
}
#: The block's module names, which the values of the mapping must be.
_BLOCK_MODULES = tuple(LAYER_NAMES.values())


@exercise("BERT's names for the block's parts")
def check_layer_names(mapping) -> None:
    """Check a dict ``{BERT name: block module name}`` for one layer: 8 entries, ``"attention.self.query": "self_attn.w_q"``..."""
    require_attempt(mapping, "the dict of names")
    if not isinstance(mapping, Mapping):
        raise ExerciseFailed(
            f"the names are a {type(mapping).__name__}; give a dict from BERT's names to the block's, "
            '{"attention.self.query": "self_attn.w_q", ...}'
        )
    keys, values = list(mapping), list(mapping.values())
    if not all(isinstance(k, str) for k in keys) or not all(isinstance(v, str) for v in values):
        raise ExerciseFailed("every key and every value is a name, a string such as 'attention.self.query' or 'self_attn.w_q'")
    if set(keys) == set(_BLOCK_MODULES) and set(values) <= set(LAYER_NAMES):
        raise ExerciseFailed(
            "the dict runs the wrong way, from the block's names to BERT's: its keys are BERT's names (what you read in "
            "the file), its values the block's (where each tensor goes)"
        )
    suffixed = [n for n in keys + values if n.endswith((".weight", ".bias"))]
    if suffixed:
        raise ExerciseFailed(
            f"{suffixed[0]!r} names a tensor, not a module: give the modules' names without '.weight' or '.bias' (one entry "
            "per module; the loader adds both suffixes)"
        )
    prefixed = [k for k in keys if k.startswith(("encoder.", "layer."))]
    if prefixed:
        raise ExerciseFailed(
            f"{prefixed[0]!r} carries the layer's prefix: name each part as it follows 'encoder.layer.{{i}}.', so that the "
            "one dict serves every layer ('attention.self.query')"
        )
    unknown = [k for k in keys if k not in LAYER_NAMES]
    if unknown:
        raise ExerciseFailed(
            f"{unknown[0]!r} is not one of BERT's names for a layer's parts; the file's names after 'encoder.layer.0.' are "
            + ", ".join(repr(n) for n in LAYER_NAMES)
        )
    missing = [k for k in LAYER_NAMES if k not in mapping]
    if missing:
        raise ExerciseFailed(f"{len(missing)} of BERT's 8 parts have no entry: {', '.join(repr(m) for m in missing)}")
    strange = [v for v in values if v not in _BLOCK_MODULES]
    if strange:
        raise ExerciseFailed(
            f"the block has no module {strange[0]!r}: its parts are "
            + ", ".join(repr(n) for n in _BLOCK_MODULES)
            + " (the cell that lists the block's parameters shows them)"
        )
    for bert, ours in LAYER_NAMES.items():
        if mapping[bert] != ours:
            raise ExerciseFailed(f"{bert!r} goes to {mapping[bert]!r}, but it is {_BERT_ROLES[bert]}: the block's {ours!r}")


@exercise("loading one layer into an encoder block")
def check_load_encoder_layer(load_encoder_layer) -> None:
    """Check ``load_encoder_layer(block, weights, layer)``: copies BERT layer ``layer`` into a ``BertEncoderBlock``.

    Uses random weights with BERT's names and layouts (d_model 8, 2 heads, d_ff 12, 3 layers), in float64. Weights
    rounded to float32 on the way (``.float()``: the model's own precision) are right.
    """
    require_attempt(load_encoder_layer, "load_encoder_layer")
    d_model, heads, d_ff = 8, 2, 12
    weights = _fake_bert_weights(d_model, d_ff, layers=3)
    for layer in (1, 2):
        block = BertEncoderBlock(d_model, heads, d_ff).double()
        start = {k: v.clone() for k, v in block.state_dict().items()}
        given = {k: v.clone() for k, v in weights.items()}
        try:
            with torch.no_grad():
                returned = call_attempt(
                    load_encoder_layer,
                    block,
                    given,
                    layer,
                    what=f"a BertEncoderBlock (d_model 8, 2 heads, d_ff 12), BERT-style weights of 3 layers and layer={layer}",
                )
        except ExerciseFailed as err:
            raise ExerciseFailed(_with_hint(str(err), _LOAD_ERROR_HINTS)) from None
        expected = encoder_layer_state_dict(weights, layer)
        state = block.state_dict()
        unchanged = all(torch.equal(state[k], start[k]) for k in start if k in state)
        if unchanged and isinstance(returned, nn.Module) and returned is not block:
            raise ExerciseFailed(
                "the block you were given still holds its initial values, and you returned another module: load the weights "
                "into `block` itself, in place (the notebook keeps using the blocks it passed to your function)"
            )
        dtypes = {p.dtype for p in block.parameters()}
        if dtypes & set(_HALF):
            raise ExerciseFailed(_precision_message("the loaded block") + " (some parameters are float16 or bfloat16)")
        if len(dtypes) > 1:
            raise ExerciseFailed(
                f"the block's parameters now have mixed dtypes ({', '.join(sorted(str(d) for d in dtypes))}): copy into the "
                "existing parameters with copy_ (which keeps their dtype), or give every new parameter the same dtype"
            )
        rounded = False  # weights that went through float32 on the way: right, the model's own precision
        for name, want in expected.items():
            if name not in state:
                raise ExerciseFailed(
                    f"the block has no parameter `{name}` any more: copy into the block's existing modules "
                    "instead of replacing them"
                )
            got = state[name].detach().to("cpu", torch.float64)
            if got.shape == want.shape and torch.allclose(got, want, atol=1e-12, rtol=0):
                continue
            if got.shape == want.shape and torch.allclose(got, want, atol=1e-7, rtol=1e-6):
                rounded = True
                continue
            if got.shape == want.shape and torch.allclose(got, want, atol=1e-2, rtol=1e-2):
                raise ExerciseFailed(_precision_message(f"`{name}`"))
            raise ExerciseFailed(f"layer {layer}: " + _describe_wrong_parameter(name, got, start[name], weights, layer))
        for norm in ("norm1", "norm2"):
            if getattr(block, norm).eps != 1e-12:
                raise ExerciseFailed(
                    f"`block.{norm}` was replaced by a layer norm with eps={getattr(block, norm).eps}; "
                    "BERT's layer norms use eps=1e-12: copy the weights into the block's own norms"
                )
        reference = BertEncoderBlock(d_model, heads, d_ff).double().eval()
        reference.load_state_dict(expected)
        x = torch.randn(2, 5, d_model, dtype=torch.float64)
        dtype = next(iter(dtypes))
        float32 = rounded or dtype == torch.float32
        with torch.no_grad():
            out = block.eval()(x.to(dtype))
            expect_close(
                out,
                reference(x),
                f"the block's output after loading layer {layer}",
                atol=1e-5 if float32 else 1e-10,
                rtol=1e-4 if float32 else 1e-8,
            )


# ---------------------------------------------------------------- mean pooling

#: Error texts of a pooling that did not broadcast, and what they mean here (hidden (3, 6, 5), mask (3, 6)).
_POOL_ERROR_HINTS = [
    (
        ("tensor a (5) must match the size of tensor b (6)", "tensor a (6) must match the size of tensor b (5)"),
        "the mask (batch, n) does not broadcast against hidden (batch, n, d): give it a feature axis, "
        "attention_mask.unsqueeze(-1), (batch, n, 1)",
    ),
    (
        ("tensor a (5) must match the size of tensor b (3)", "tensor a (3) must match the size of tensor b (5)"),
        "the number of real tokens per sentence, mask.sum(1), has shape (batch,) and does not divide the sums (batch, d): "
        "keep its axis, mask.sum(1, keepdim=True), (batch, 1)",
    ),
]


@exercise("mean pooling")
def check_mean_pooling(mean_pool) -> None:
    """Check ``mean_pool(hidden, attention_mask) -> (batch, d)``: the mean over the real tokens only.

    An answer computed in float32 is right (the model's precision); one in float16 or bfloat16 is named.
    """
    require_attempt(mean_pool, "mean_pool")
    hidden = torch.randn(3, 6, 5, dtype=torch.float64)  # (batch 3, 6 tokens, d 5)
    lengths = torch.tensor([6, 4, 2])
    mask = (torch.arange(6)[None, :] < lengths[:, None]).long()  # (3, 6): 1 on real tokens, 0 on padding
    try:
        got = call_attempt(mean_pool, hidden, mask, what="hidden (3, 6, 5) and attention_mask (3, 6) with 6, 4 and 2 real tokens")
    except ExerciseFailed as err:
        raise ExerciseFailed(_with_hint(str(err), _POOL_ERROR_HINTS)) from None
    got = expect_tensor(got, "the pooled vectors")
    m = mask.to(hidden.dtype).unsqueeze(-1)  # (3, 6, 1)
    expected = (hidden * m).sum(1) / m.sum(1)  # (3, 5)
    if got.shape == (3, 6):
        raise ExerciseFailed(
            "the pooled vectors have shape (3, 6) = (batch, tokens): you averaged over the features (the last axis); "
            "average over the tokens, dim=1, to get (batch, d)"
        )
    if got.shape == (6, 5):
        raise ExerciseFailed(
            "the pooled vectors have shape (6, 5) = (tokens, d): you averaged over the batch axis (dim=0); average each "
            "sentence over its tokens, dim=1, to get (batch, d)"
        )
    if got.shape == (5,):
        raise ExerciseFailed(
            "you returned one vector (d,) for the whole batch (e.g. hidden[mask.bool()].mean(0) averages the real tokens of "
            "all sentences together): average each sentence over its own real tokens, to get (batch, d)"
        )
    if got.dim() == 3 and got.shape[1] == 1:
        raise ExerciseFailed(
            f"the pooled vectors have shape {tuple(got.shape)}: drop the token axis (keepdim=False, or squeeze it) "
            "to get (batch, d)"
        )
    expect_shape(got, (3, 5), "the pooled vectors")
    if got.dtype in _HALF:
        raise ExerciseFailed(_precision_message("the pooled vectors") + f" (your result is {got.dtype})")
    first, last = torch.zeros_like(m), torch.zeros_like(m)  # (3, 6, 1): [CLS] and [SEP] positions
    first[:, 0] = 1
    last[torch.arange(3), lengths - 1] = 1
    no_cls = m - first
    no_cls_sep = m - first - last
    inverted = 1 - m
    mistakes = {
        "the padding tokens were averaged in: multiply by the mask before summing and divide by the number of real tokens": hidden.mean(
            1
        ),
        "the masked sum was not divided by the number of real tokens (mask.sum(1))": (hidden * m).sum(1),
        "the sum runs over every token, the padding included, though the count is of the real tokens only: multiply the "
        "hidden states by the mask before summing, (hidden * m).sum(1)": hidden.sum(1) / m.sum(1),
        "the masked sum was divided by the padded length, not by the number of real tokens of each sentence": (hidden * m).sum(1)
        / hidden.shape[1],
        "the masked sum was divided by the number of real tokens of the whole batch (mask.sum()), not by each sentence's own "
        "count: divide by mask.sum(1, keepdim=True), one count per sentence": (hidden * m).sum(1) / m.sum(),
        "the [CLS] token (position 0) was left out: all-MiniLM-L6-v2 averages every real token, [CLS] and [SEP] included; "
        "use the attention mask as it is": (hidden * no_cls).sum(1) / no_cls.sum(1),
        "[CLS] and [SEP] were left out: all-MiniLM-L6-v2 averages every real token, special tokens included; use the "
        "attention mask as it is": (hidden * no_cls_sep).sum(1) / no_cls_sep.sum(1),
        "the mask was used the wrong way round (0 = real token): you averaged the padding; the attention mask is 1 on real "
        "tokens and 0 on padding": (hidden * inverted).sum(1) / inverted.sum(1),
        "the token vectors were scaled to unit length before pooling: average the hidden states as they are (the sentence "
        "vector is scaled after pooling, in the next cell)": (F.normalize(hidden, dim=-1) * m).sum(1) / m.sum(1),
        "the vectors were scaled to unit length: that is the step after mean pooling, leave it out here": F.normalize(
            expected, dim=-1
        ),
        "floor division (//) rounded the mean down: divide with /": torch.div(
            (hidden * m).sum(1), m.sum(1), rounding_mode="floor"
        ),
        "that is the first token's vector ([CLS] pooling); average over the real tokens instead": hidden[:, 0],
        "that is each sentence's last real token ([SEP]); average over all the real tokens instead": hidden[
            torch.arange(3), lengths - 1
        ],
        "that is a maximum over the tokens; average over the real tokens instead": hidden.masked_fill(m == 0, float("-inf")).amax(
            1
        ),
    }
    # float32 precision (1e-6) for every answer: the model computes in float32, so a float32 computation is right
    try:
        expect_close(got, expected, "the pooled vectors", atol=1e-6, rtol=1e-5, mistakes=mistakes)
    except ExerciseFailed as err:
        if "differs from the reference" in str(err) and torch.allclose(
            got.detach().to("cpu", torch.float64), expected, atol=1e-2, rtol=1e-2
        ):
            raise ExerciseFailed(_precision_message("the pooled vectors")) from None
        raise
    # a batch without padding is a plain mean
    full = call_attempt(mean_pool, hidden, torch.ones(3, 6, dtype=torch.long), what="a mask of all ones")
    expect_close(full, hidden.mean(1), "the pooled vectors of a batch without padding", atol=1e-6, rtol=1e-5)
