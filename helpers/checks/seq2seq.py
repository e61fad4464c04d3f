"""Checks of notebook 09: teacher forcing's shift, the source padding mask, greedy decoding, additive attention,
alignment accuracy.

Each runs the student's code on fresh random inputs next to the reference in ``helpers.models.seq2seq``
(itself tested against ``helpers.attention`` and PyTorch) and names the typical mistakes: an off-by-one
shift or one along the batch axis, a mask that hides the queries instead of the keys or is off by one, a
decoding loop that does not feed the model its own output or stops too early, a missing tanh, ``v`` or
softmax, padding filled with 0 instead of ``-inf``. Where an error message hides the cause (``x.max(dim)``'s
pair, ``torch.cat``'s default axis, a broadcast without its new axis), the check says what it means.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable

import torch
from torch import Tensor, nn

from helpers.attention import AdditiveAttention
from helpers.checks._core import (
    ExerciseFailed,
    NotAttempted,
    call_attempt,
    device_mixup_hint,
    dtype_tolerance,
    exercise,
    expect_close,
    expect_device,
    expect_tensor,
    forbid_forward,
    require_attempt,
)
from helpers.data.translation import BOS, EOS, PAD
from helpers.models.seq2seq import (
    additive_attention,
    alignment_accuracy,
    cut_at_eos,
    exact_matches,
    greedy_decode,
    never_special,
    shift_right,
)

__all__ = [
    "check_shift_right",
    "check_source_padding_mask",
    "check_greedy_decode",
    "check_additive_attention",
    "check_alignment_accuracy",
]


def _random_targets(batch: int, lengths: list[int], vocab: int = 20, generator: torch.Generator | None = None) -> Tensor:
    """Padded targets ``(batch, max(lengths))``: random words, ``<eos>`` at the end of each row, then ``<pad>``."""
    n = max(lengths)
    tgt = torch.full((batch, n), PAD, dtype=torch.long)
    for row, length in enumerate(lengths):
        tgt[row, : length - 1] = torch.randint(3, vocab, (length - 1,), generator=generator)
        tgt[row, length - 1] = EOS
    return tgt


def _hinted(fn: Callable, what: str, hint: Callable[[Exception], str]) -> Callable:
    """The student's ``fn``; an exception whose raw message hides its cause becomes a failure with ``hint(err)`` added.

    The stub's ``NotImplementedError`` and the check's own failures pass through untouched (``call`` reads them).
    """
    name = getattr(fn, "__name__", type(fn).__name__)

    def wrapped(*args, **kwargs):
        try:
            return fn(*args, **kwargs)
        except (NotImplementedError, ExerciseFailed, NotAttempted):
            raise
        except Exception as err:
            extra = hint(err) or _device_hint(err)
            if not extra:
                raise
            raise ExerciseFailed(
                f"calling your `{name}` with {what} raised {type(err).__name__}: {str(err).rstrip('.')}. {extra}"
            ) from None

    wrapped.__name__ = name
    wrapped.__wrapped__ = fn  # call_attempt reads the student's source (partial work), not this wrapper's
    return wrapped


def _expect_device(out: object, like: Tensor, what: str) -> None:
    expect_device(out, like, what, "device=src.device, or use torch.full_like / x.new_full")


def _device_hint(err: Exception) -> str:
    return device_mixup_hint(
        err, "device=src.device (or h.device, weights.device), or build new tensors with torch.full_like / x.new_full"
    )


def _is_tuple_mistake(message: str) -> bool:
    """``x.max(dim)``, ``x.min(dim)``, ``x.topk(k)`` and ``x.sort()`` return pairs; using one as a tensor fails so."""
    return "return_types" in message or bool(
        re.search(r"tuple indices must be|'tuple' object has no attribute|tuple' and 'Tensor'|'Tensor' and 'tuple'", message)
    )


# ---------------------------------------------------------------- shift right


def _shift_hint(err: Exception) -> str:
    message = str(err)
    if "Sizes of tensors must match except in dimension 0" in message:
        return (
            "torch.cat joins along dim=0, the batch axis, unless told otherwise: the <bos> column goes in front of the "
            "positions, along dim=1: torch.cat([bos, tgt[:, :-1]], dim=1)"
        )
    if "must have same number of dimensions" in message or "Dimension out of range" in message:
        return "the <bos> part must be a column of shape (batch, 1), as tgt[:, :1] is: torch.full_like(tgt[:, :1], BOS)"
    if "expected Tensor as element" in message:
        return "torch.cat joins tensors: make <bos> a (batch, 1) tensor first, torch.full_like(tgt[:, :1], BOS)"
    return ""


def _shift_mistakes(tgt: Tensor) -> dict[str, Tensor]:
    bos = torch.full_like(tgt[:, :1], BOS)
    return {
        "the target is not shifted: position t of the decoder would read word t, the very word it must predict "
        "(an off-by-one: put <bos> first and drop the last position)": tgt,
        "the target is shifted the wrong way (to the left): the decoder input starts with <bos> and is the target "
        "moved one position to the right": torch.cat([tgt[:, 1:], torch.full_like(tgt[:, :1], PAD)], 1),
        "torch.roll wraps the last position around to the front: set the first column to <bos>": tgt.roll(1, dims=1),
        "the first word is dropped instead of the last (an off-by-one): keep tgt[:, :-1] behind <bos>": torch.cat(
            [bos, tgt[:, 1:]], 1
        ),
        "the first position holds <pad> instead of the start token <bos>": torch.cat([torch.full_like(bos, PAD), tgt[:, :-1]], 1),
        "the first position holds <eos> instead of the start token <bos>": torch.cat([torch.full_like(bos, EOS), tgt[:, :-1]], 1),
        "the target is shifted by two positions (an off-by-one): shift by exactly one": torch.cat([bos, bos, tgt[:, :-2]], 1),
        "each row's <eos> was removed instead of the last position: the decoder input is <bos> followed by the target "
        "without its last column, tgt[:, :-1], whatever token stands there (<eos> or <pad>)": torch.cat(
            [bos, tgt[:, :-1]], 1
        ).masked_fill(torch.cat([bos, tgt[:, :-1]], 1) == EOS, PAD),
    }


@exercise("shift right for teacher forcing")
def check_shift_right(shift_right_fn) -> None:
    """Check ``shift_right(tgt) -> (batch, n)``: ``<bos>``, then the target without its last position."""
    require_attempt(shift_right_fn, "shift_right")
    for lengths in ([4, 7, 2], [5, 5, 3, 6, 1]):
        tgt = _random_targets(len(lengths), lengths)
        batch, n = tgt.shape
        what = f"tgt of shape {tuple(tgt.shape)}"
        out = call_attempt(_hinted(shift_right_fn, what, _shift_hint), tgt, what=what)
        _expect_device(out, tgt, "the decoder input")
        out = expect_tensor(out, "the decoder input")
        if out.shape == (batch, n + 1):
            raise ExerciseFailed(
                f"the decoder input has {n + 1} positions for a target of {n}: <bos> was put in front but the last "
                "position was not dropped (tgt[:, :-1]); the decoder input and the target must have the same length, "
                "since position t of one predicts position t of the other"
            )
        if out.shape == (batch, n - 1):
            raise ExerciseFailed(
                f"the decoder input has {n - 1} positions for a target of {n}: the last position was dropped but <bos> "
                "was not put in front; torch.cat([bos, tgt[:, :-1]], dim=1) with bos a (batch, 1) column of BOS"
            )
        if out.shape[0] == batch + 1:
            raise ExerciseFailed(
                f"the decoder input has {batch + 1} rows for a batch of {batch}: <bos> was added as a new row, along "
                "dim=0 (the batch axis, torch.cat's default); it goes in front of each row's positions: dim=1"
            )
        if out.shape == (n, batch) and n != batch:
            raise ExerciseFailed(
                f"the decoder input has shape {(n, batch)}, the target's {(batch, n)} transposed: keep (batch, n)"
            )
        if out.is_floating_point() or out.dtype == torch.bool:
            raise ExerciseFailed(f"the decoder input has dtype {out.dtype}; token ids are integers (torch.long), as tgt")
        if out.shape == tgt.shape:
            ids = out.long()
            if torch.equal(ids[1:], tgt[:-1]) or torch.equal(ids[1:], shift_right(tgt)[:-1]):
                raise ExerciseFailed(
                    "the rows were shifted instead of the positions: row b holds the target of row b - 1, a shift along "
                    "dim=0, the batch axis (torch.cat's default, or tgt[:-1] instead of tgt[:, :-1]); shift along dim=1"
                )
            if bool((ids[:, -1] == BOS).all()) and not bool((ids[:, 0] == BOS).all()):
                raise ExerciseFailed(
                    "<bos> is at the end of every row: the start token goes first, where the decoder starts reading; "
                    "torch.cat([bos, tgt[:, :-1]], dim=1)"
                )
        expect_close(out.long(), shift_right(tgt), "the decoder input", atol=0, rtol=0, mistakes=_shift_mistakes(tgt))
        if out.dtype != torch.long:
            raise ExerciseFailed(f"the decoder input has dtype {out.dtype}; nn.Embedding needs torch.long ids, as tgt has")


# ---------------------------------------------------------------- padding mask


@exercise("source padding mask")
def check_source_padding_mask(mask_fn) -> None:
    """Check ``source_padding_mask(src) -> bool (batch, 1, m)`` (or ``(batch, 1, 1, m)``), ``True`` = a real token."""
    require_attempt(mask_fn, "source_padding_mask")
    for lengths in ([3, 6, 4, 2], [5, 1, 5]):  # one row of each batch is full length (no padding), one is all <eos>
        src = _random_targets(len(lengths), lengths)
        batch, m = src.shape
        what = f"src of shape {tuple(src.shape)}"
        out = call_attempt(_hinted(mask_fn, what, lambda err: ""), src, what=what)
        _expect_device(out, src, "the mask")
        out = expect_tensor(out, "the mask")
        real = src != PAD  # (batch, m)
        if out.dtype != torch.bool:
            kind = "a float" if out.is_floating_point() else "an integer"
            raise ExerciseFailed(
                f"the mask has dtype {out.dtype} ({kind} mask); the course's masks are boolean, True = may attend "
                "(compare with ==/!=, which gives booleans, and do not convert it)"
            )
        shape = tuple(out.shape)
        if shape in ((batch, m, 1), (batch, 1, m, 1)) and m != 1:
            raise ExerciseFailed(
                f"the mask has shape {shape}: it hides the queries instead of the keys. Padding must not be *attended to*, "
                f"so the mask runs along the last axis of the scores (batch, n, m), the keys: shape (batch, 1, m)"
            )
        if shape == (batch, m):
            raise ExerciseFailed(
                f"the mask has shape {shape}; against scores (batch, heads, n, m) it would be read as (n, m), one row per query, "
                "not per sentence: add the query axis, mask[:, None, :] -> (batch, 1, m)"
            )
        if shape == (1, batch, m) and batch != 1:
            raise ExerciseFailed(
                f"the mask has shape {shape}: the new axis went in front, so the sentences would line up with the queries; "
                "the query axis goes second, mask[:, None, :] -> (batch, 1, m)"
            )
        if shape == (batch, m, m):
            both = real[:, :, None] & real[:, None, :]
            if torch.equal(out, both):
                raise ExerciseFailed(
                    "the mask hides the padded queries as well as the keys: a padded query's row is then all False, and an "
                    "explicit softmax of nothing but -inf is 0/0 = NaN (PyTorch's fused kernels return zeros or other values there, by back-end). "
                    "Mask the keys only, (src != pad)[:, None, :] of shape (batch, 1, m)"
                )
            if torch.equal(out, real[:, None, :].expand(batch, m, m)):
                raise ExerciseFailed(
                    f"the mask has shape {shape}: one row per query, for exactly m = {m} queries. Cross-attention has as "
                    "many queries as target positions, so keep the query axis of size 1 to broadcast: (batch, 1, m)"
                )
        if shape not in ((batch, 1, m), (batch, 1, 1, m)):
            raise ExerciseFailed(
                f"the mask has shape {shape}; expected (batch, 1, m) = {(batch, 1, m)}: one row per sentence that broadcasts "
                "over the queries (MultiHeadAttention adds the head axis itself; (batch, 1, 1, m) is accepted too)"
            )
        flat = out.reshape(batch, m)
        if torch.equal(flat, ~real):
            raise ExerciseFailed(
                "the mask is inverted: True marks the padding. The course's convention (F.scaled_dot_product_attention's) "
                "is True = may attend, so True on the real tokens: src != pad"
            )
        if bool(flat.all()):
            raise ExerciseFailed(
                "the mask is True everywhere, so the padding is attended to: it compares with an id that never occurs in "
                f"src, such as <bos> (id {BOS}); padding is <pad> (id {PAD}): src != PAD"
            )
        if not bool(flat.any()):
            raise ExerciseFailed("the mask is False everywhere: every key is hidden; True marks the real tokens, src != PAD")
        lengths_t = real.sum(1, keepdim=True)  # (batch, 1)
        positions = torch.arange(m)[None, :]  # (1, m)
        if torch.equal(flat, positions < lengths_t - 1) or torch.equal(flat, real & (src != EOS)):
            raise ExerciseFailed(
                "the mask hides each sentence's last real token, <eos>: an off-by-one (positions < lengths, not "
                "lengths - 1), or <eos> taken for padding. Only <pad> (id 0) is padding; <eos> is a real source token"
            )
        if torch.equal(flat, positions <= lengths_t) or torch.equal(flat, positions < lengths_t + 1):
            raise ExerciseFailed(
                "the mask lets every padded sentence attend to one padding position after its end: an off-by-one "
                "(positions < lengths, not <=)"
            )
        if torch.equal(flat, src != EOS):
            raise ExerciseFailed("the mask compares with <eos> (id 2); padding is <pad> (id 0): src != PAD")
        if not torch.equal(flat, real):
            bad = int((flat != real).sum())
            raise ExerciseFailed(f"the mask is wrong at {bad} of {flat.numel()} source positions: it should be src != pad")


# ---------------------------------------------------------------- greedy decoding


class _Recorder(nn.Module):
    """Wraps the check's model: records which rows of the check's sources each decoder call ran, and what it was fed.

    A loop may decode the whole batch at once or a few sentences (one) at a time: each call's rows are found by
    matching the sources the state was encoded from. A decoder input whose rows are not the state's rows (a target
    taken from outside the function) fails by name, and so does one that holds no token ids.
    """

    def __init__(self, model: nn.Module, src: Tensor) -> None:
        super().__init__()
        self.model = model
        self.src = src
        self.calls: list[tuple[list[int] | None, Tensor]] = []

    def _rows(self, encoded: object) -> list[int] | None:
        if not isinstance(encoded, Tensor) or encoded.dim() != 2 or encoded.shape[1] > self.src.shape[1]:
            return None
        rows = []
        width = encoded.shape[1]
        for row in encoded:
            same = (self.src[:, :width] == row).all(1) & (self.src[:, width:] == PAD).all(1)
            found = same.nonzero().flatten().tolist()
            if len(found) != 1:
                return None
            rows.append(found[0])
        return rows

    def encode(self, src: Tensor) -> tuple[Tensor, ...]:
        return self.model.encode(src)

    def decode(self, tgt_in: Tensor, state: tuple[Tensor, ...]) -> Tensor:
        if isinstance(state, Tensor):
            raise ExerciseFailed(
                "model.decode was given a tensor as its state (the source itself?): it takes what model.encode returned, "
                "state = model.encode(src) once before the loop, then model.decode(ys, state) at every step"
            )
        if not isinstance(tgt_in, Tensor) or tgt_in.dim() != 2:
            got = tuple(tgt_in.shape) if isinstance(tgt_in, Tensor) else type(tgt_in).__name__
            raise ExerciseFailed(f"the decoder input should be (batch, t) token ids, got {got}")
        if tgt_in.is_floating_point() or tgt_in.dtype == torch.bool:
            raise ExerciseFailed(
                f"the decoder input has dtype {tgt_in.dtype}: it holds token ids, integers (torch.long), which the "
                "embedding looks up; start from torch.full((batch, 1), BOS, dtype=torch.long) and append argmax results"
            )
        encoded = state[0] if isinstance(state, (tuple, list)) and len(state) > 0 else None
        rows = encoded.shape[0] if isinstance(encoded, Tensor) and encoded.dim() == 2 else None
        if rows and tgt_in.shape[0] > rows and tgt_in.shape[0] % rows == 0 and bool((tgt_in[:rows, 0] == BOS).all()):
            raise ExerciseFailed(
                f"the decoder input has {tgt_in.shape[0]} rows for {rows} source sentences: the predicted words were "
                "appended as new rows, along dim=0 (the batch axis, torch.cat's default); append them as a new "
                "column, ys = torch.cat([ys, next_word[:, None]], dim=1)"
            )
        if isinstance(encoded, Tensor) and encoded.dim() == 2 and tgt_in.shape[0] != encoded.shape[0]:
            raise ExerciseFailed(
                f"the decoder was fed {tgt_in.shape[0]} rows for {encoded.shape[0]} encoded source sentences: the decoder "
                "input must be built inside the loop from <bos> and the model's own predictions, one row per source "
                "sentence, not taken from a variable outside the function (such as a target from the cells above: at "
                "translation time there is no target)"
            )
        self.calls.append((self._rows(encoded), tgt_in.detach().clone()))
        return self.model.decode(tgt_in.long(), state)

    def forward(self, src: Tensor, tgt_in: Tensor) -> Tensor:
        return self.decode(tgt_in, self.encode(src))


class _ToyTranslator(nn.Module):
    """A tiny causal model with the seq2seq interface whose next word depends on the last word fed and the source.

    ``logits[b, t] = A[tgt_in[b, t]] + B[src[b, min(t, length_b - 1)]] + C[t]`` (random tables): a loop that feeds
    the wrong words, or reads the wrong position, produces other sentences. Padding at the end of a source changes
    nothing (so a sentence may be decoded alone, trimmed or not). Rows end (``<eos>``) at different steps; ``<pad>``
    and ``<bos>`` are sometimes the most likely word, which a decoder must never choose.
    """

    def __init__(self, generator: torch.Generator, src_vocab: int = 12, tgt_vocab: int = 9, max_len: int = 16) -> None:
        super().__init__()

        def table(*shape: int) -> Tensor:
            return torch.randn(*shape, generator=generator, dtype=torch.float64)

        self.A = nn.Parameter(table(tgt_vocab, tgt_vocab) * 2)
        self.B = nn.Parameter(table(src_vocab, tgt_vocab) * 2)
        self.C = nn.Parameter(table(max_len, tgt_vocab))
        with torch.no_grad():
            self.C[:, EOS] += torch.linspace(-2.0, 4.0, max_len, dtype=torch.float64)  # <eos> grows likelier

    def encode(self, src: Tensor) -> tuple[Tensor]:
        return (src,)

    def decode(self, tgt_in: Tensor, state: tuple[Tensor, ...]) -> Tensor:
        src = state[0]
        n = tgt_in.shape[1]
        last = (src != PAD).sum(1, keepdim=True).clamp(min=1) - 1  # (batch, 1)
        cols = torch.minimum(torch.arange(n)[None, :], last)  # (batch, n)
        return self.A[tgt_in] + self.B[src.gather(1, cols)] + self.C[:n]  # (batch, n, tgt_vocab)

    def forward(self, src: Tensor, tgt_in: Tensor) -> Tensor:
        return self.decode(tgt_in, self.encode(src))


#: The toy's seed and the check's max_len: chosen (tests/test_checks_seq2seq.py checks it) so that every named
#: mistake below changes at least one row, and no two of them give the same rows.
_TOY_SEED, _MAX_LEN = 7, 7


def _decoder_model() -> tuple[_ToyTranslator, Tensor]:
    """The toy model and a batch of six distinct sources of different lengths."""
    generator = torch.Generator().manual_seed(_TOY_SEED)
    model = _ToyTranslator(generator).eval()
    src = _random_targets(6, [6, 3, 5, 2, 6, 4], vocab=12, generator=generator)
    return model, src


@torch.no_grad()
def _greedy_variant(
    model: nn.Module,
    src: Tensor,
    max_len: int,
    *,
    position: int = -1,
    steps: int | None = None,
    stop_on_any: bool = False,
    special: bool = True,
    batch_softmax: bool = False,
    time_argmax: bool = False,
) -> Tensor:
    """Greedy decoding with one typical mistake switched on (the defaults are the right loop)."""
    state = model.encode(src)
    ys = torch.full((src.shape[0], 1), BOS, dtype=torch.long)
    for _ in range(max_len if steps is None else steps):
        if time_argmax:  # the argmax over the positions, dim=1 of (batch, t, vocab), then the last vocabulary entry
            ys = torch.cat([ys, model.decode(ys, state).argmax(1)[:, -1:]], dim=1)
            if bool((ys == EOS).any(1).all()):
                break
            continue
        logits = model.decode(ys, state)[:, position]  # (batch, vocab)
        if batch_softmax:
            logits = torch.softmax(logits, dim=0)
        if special:
            logits = never_special(logits)
        ys = torch.cat([ys, logits.argmax(-1)[:, None]], dim=1)
        ended = (ys == EOS).any(1)
        if bool(ended.all()) or (stop_on_any and bool(ended.any())):
            break
    return ys[:, 1:]


def _greedy_mistakes(model: nn.Module, src: Tensor, max_len: int, special: bool = True) -> dict[str, Tensor]:
    """What each typical mistake of the loop returns on the check's model and sources (``special``: <pad> and <bos> masked)."""
    return {
        "the loop chose <pad> or <bos> as a word: neither can be part of a translation, so set their logits to -inf "
        "before the argmax (logits[:, [PAD, BOS]] = float('-inf'))": _greedy_variant(model, src, max_len, special=False),
        "the next word is read from the first position's logits (logits[:, 0]); the prediction for the next word "
        "is at the last position, logits[:, -1]": _greedy_variant(model, src, max_len, position=0, special=special),
        "the loop stops as soon as one row has produced <eos>, cutting the others short: stop only when every row "
        "has one, (ys == EOS).any(dim=1).all()": _greedy_variant(model, src, max_len, stop_on_any=True, special=special),
        "the loop runs one step short (max_len - 1 steps): a sentence may need all max_len steps; "
        "for _ in range(max_len)": _greedy_variant(model, src, max_len, steps=max_len - 1, special=special),
        "a softmax over the batch axis (dim=0) before the argmax mixes the sentences and changes which word wins; "
        "the most likely word is the argmax of the logits over the vocabulary (a softmax over dim=-1 would not "
        "change it, so none is needed)": _greedy_variant(model, src, max_len, batch_softmax=True, special=special),
        "the argmax runs over the positions (dim=1 of the (batch, t, vocab) logits), so the 'word' is a position "
        "index: take the last position first, then the argmax over the vocabulary, logits[:, -1].argmax(-1)": (
            _greedy_variant(model, src, max_len, time_argmax=True)
        ),
    }


def _greedy_hint(err: Exception) -> str:
    message = str(err)
    if _is_tuple_mistake(message):
        return (
            "x.max(dim) returns a pair (values, indices), not a tensor; the next word is the position of the largest "
            "logit, its index: logits[:, -1].argmax(-1) (or logits[:, -1].max(-1).indices)"
        )
    if "Boolean value of Tensor with more than one value is ambiguous" in message:
        return (
            "`if` was given a tensor with one entry per sentence (such as next_word == EOS), which has no single truth "
            "value: stop when every row has produced <eos>, `if (ys == EOS).any(dim=1).all(): break`"
        )
    if "Sizes of tensors must match" in message or "must have same number of dimensions" in message:
        along = " (torch.cat joins along dim=0, the batch axis, unless told otherwise)" if "dimension 0" in message else ""
        return (
            "the new column must have one entry per sentence: next_word = logits[:, -1].argmax(-1) is (batch,) (the "
            f"maximum over the vocabulary, the last axis), appended as next_word[:, None] along dim=1{along}"
        )
    return ""


def _one_step_each(recorder: _Recorder) -> bool:
    """True when the decoder ran once per sentence, on ``<bos>`` alone: a loop that returned after its first step."""
    if not recorder.calls or any(x.shape[1] != 1 for _, x in recorder.calls):
        return False
    rows = [r for r, _ in recorder.calls]
    if any(r is None for r in rows):
        return len(rows) == 1
    seen = [i for r in rows for i in r]
    return len(seen) == len(set(seen))


def _rows_differing(out: Tensor, expected: Tensor) -> list[int]:
    return (~exact_matches(out, expected)).nonzero().flatten().tolist()


def _check_short_max_len(decode_fn: Callable, model: nn.Module, src: Tensor, short: int = 2) -> None:
    """Run again with a ``max_len`` that cuts every row short of its ``<eos>``: the loop must stop after max_len words."""
    expected = greedy_decode(model, src, short)  # (batch, short): no row has ended yet
    what = f"a small model, src {tuple(src.shape)}, max_len={short}"
    with torch.no_grad():
        out = call_attempt(_hinted(decode_fn, what, _greedy_hint), _Recorder(model, src), src.clone(), short, what=what)
    _expect_device(out, src, f"the decoded tokens with max_len={short}")
    out = expect_tensor(out, f"the decoded tokens with max_len={short}")
    if out.dim() == 2 and out.shape[0] == src.shape[0] and out.shape[1] > short:
        raise ExerciseFailed(
            f"with max_len={short}, where no sentence has ended yet, {out.shape[1]} tokens per row came back: the loop "
            f"runs {out.shape[1] - short} step(s) too many; run at most max_len steps, for _ in range(max_len), and "
            "return the generated words without <bos>"
        )
    if out.dim() != 2 or out.shape[0] != src.shape[0] or _rows_differing(out.long(), expected):
        raise ExerciseFailed(
            f"with max_len={short}, where no sentence has ended yet, the rows differ from greedy decoding "
            f"(shape {tuple(out.shape)}, expected {tuple(expected.shape)}): return the first max_len generated words of each row"
        )


@exercise("greedy decoding")
def check_greedy_decode(decode_fn, max_len: int = _MAX_LEN) -> None:
    """Check ``greedy_decode(model, src, max_len) -> (batch, L)`` tokens without ``<bos>``, each row up to its ``<eos>``.

    The rows are compared up to their first ``<eos>``, so a loop may stop when every row has ended or run all
    ``max_len`` steps, may leave anything after a row's ``<eos>``, and may decode the batch at once or one
    sentence at a time.
    """
    require_attempt(decode_fn, "greedy_decode")
    model, src = _decoder_model()
    recorder = _Recorder(model, src)
    expected = greedy_decode(model, src, max_len)  # (6, L)
    what = f"a small model, src {tuple(src.shape)}, max_len={max_len}"
    with torch.no_grad():
        out = call_attempt(_hinted(decode_fn, what, _greedy_hint), recorder, src.clone(), max_len, what=what)
    _expect_device(out, src, "the decoded tokens")
    out = expect_tensor(out, "the decoded tokens")
    if out.dim() == 2 and out.shape[0] == 1 < src.shape[0] and recorder.calls and all(r == [0] for r, _ in recorder.calls):
        raise ExerciseFailed(
            f"only the first sentence came back (shape {tuple(out.shape)} for a batch of {src.shape[0]}): the loop over the "
            "sentences returned after its first one. Is the `return` indented inside that `for` loop? Collect every "
            "sentence's words and return after the loop (dedent it)"
        )
    if out.dim() != 2 or out.shape[0] != src.shape[0]:
        raise ExerciseFailed(f"the decoded tokens have shape {tuple(out.shape)}; expected (batch, L) = ({src.shape[0]}, L)")
    if out.is_floating_point():
        raise ExerciseFailed("the decoded tokens are floats: return the ids (argmax gives torch.long)")
    out = out.long()
    if not recorder.calls:
        raise ExerciseFailed("the loop never called model.decode (or the model): each step runs the decoder on the words so far")
    if out.shape[1] > max_len:
        raise ExerciseFailed(
            f"{out.shape[1]} tokens per row for max_len={max_len}: return at most max_len generated tokens, without <bos>"
            + (" (the first column is <bos>: drop it, ys[:, 1:])" if bool((out[:, 0] == BOS).all()) else "")
        )
    if bool((out[:, 0] == BOS).all()):
        raise ExerciseFailed("every row starts with <bos>: return the generated words only, ys[:, 1:]")
    if not _rows_differing(out, expected):
        _check_short_max_len(decode_fn, model, src)
        return
    # wrong: say why, from what the loop fed the decoder, then from what each typical mistake returns
    for _, x in recorder.calls:
        if not bool((x[:, 0] == BOS).all()):
            raise ExerciseFailed(f"the decoder input does not start with <bos> (id {BOS}): every row begins with the start token")
    if expected.shape[1] > 1 and (_one_step_each(recorder) or (out.shape[1] == 1 and torch.equal(out[:, 0], expected[:, 0]))):
        raise ExerciseFailed(
            "only the first word came back: the loop ended after its first step. Is the `return` indented inside the "
            "`for` loop? Return after the loop has run (dedent it), once every row has <eos> or max_len steps are done"
        )
    if len(recorder.calls) > 1 and {x.shape[1] for _, x in recorder.calls} == {1}:
        raise ExerciseFailed(
            "the decoder was fed <bos> alone at every step: append each predicted word to the decoder input "
            "(ys = torch.cat([ys, next_word[:, None]], dim=1)), so that step t sees the words before it"
        )
    own = cut_at_eos(out)
    for rows, x in recorder.calls:
        t = x.shape[1] - 1
        if rows is None or t == 0 or t > own.shape[1]:
            continue
        fed, mine = x[:, 1:], own[rows, :t]
        live = ~((mine == EOS).cumsum(1) - (mine == EOS).long()).bool()  # positions up to each row's first <eos>
        if not torch.equal(fed[live], mine[live]):
            raise ExerciseFailed(
                "the decoder is not fed its own output: at each step the input must be <bos> followed by the words the "
                "model itself chose at the steps before (at translation time there is no target to feed)"
            )
    for special in (True, False):  # each mistake alone, then with <pad> and <bos> left unmasked as well
        for message, wrong in _greedy_mistakes(model, src, max_len, special).items():
            if not _rows_differing(out, wrong):
                also = "" if special or "<pad> or <bos>" in message else "; and set the logits of <pad> and <bos> to -inf"
                raise ExerciseFailed(message + also)
    live = own != PAD  # (batch, L): the words of each row up to its first <eos>
    for token, name in ((BOS, "<bos>"), (PAD, "<pad>")):
        chosen = own == token if token != PAD else (out == PAD) & ~((out == EOS).cumsum(1) > 0)
        if bool((chosen & (live if token != PAD else torch.ones_like(live))).any()):
            raise ExerciseFailed(
                f"the loop chose {name} as a word: it is never part of a translation, so set the logits of both <pad> and "
                "<bos> to -inf before the argmax (logits[:, [PAD, BOS]] = float('-inf'))"
            )
    rows = _rows_differing(out, expected)
    raise ExerciseFailed(
        f"rows {rows} differ from greedy decoding: at each step take the most likely word, logits[:, -1].argmax(-1) "
        "(not a sample), never <pad> or <bos>, and append it to the decoder input"
    )


# ---------------------------------------------------------------- additive attention


_SIZES = {"batch": 3, "m": 5, "d_s": 4, "d_h": 6, "d_att": 7}  # all different, so that a swapped axis shows


def _additive_hint(err: Exception) -> str:
    message = str(err)
    batch, m, d_s, d_h, d_att = _SIZES.values()
    if _is_tuple_mistake(message):
        return (
            "x.max(dim) returns a pair (values, indices), not a tensor: take .values (x.max(dim, keepdim=True).values), "
            "or use x.amax(dim, keepdim=True), which returns the tensor alone"
        )
    if "cannot be multiplied" in message:
        return (
            f"att.W1 takes the encoder states h ({d_h} features) and att.W2 the decoder state s ({d_s} features): "
            "W1(h) + W2(s), not W1(s) or W2(h)"
        )
    found = re.search(r"size of tensor a \((\d+)\) must match the size of tensor b \((\d+)\)", message)
    if found:
        pair = {int(found.group(1)), int(found.group(2))}
        if pair == {batch, m}:
            return (
                "W2(s) is (batch, d_att) and W1(h) is (batch, m, d_att): give W2(s) the source axis, att.W2(s).unsqueeze(1), "
                "so that it is added at every source position"
            )
        if pair == {m, d_h}:
            return (
                "weights (batch, m) and h (batch, m, d_h) line up only with a trailing axis on the weights: "
                "(weights[..., None] * h).sum(1), or (weights.unsqueeze(1) @ h).squeeze(1)"
            )
    return ""


def _additive_mistakes(att: AdditiveAttention, s: Tensor, h: Tensor, mask: Tensor) -> dict[str, tuple[Tensor, Tensor]]:
    w1h, w2s = att.W1(h), att.W2(s).unsqueeze(1)  # (batch, m, d_att), (batch, 1, d_att)

    def finish(scores: Tensor, dim: int = -1, masked: Tensor | None = mask, softmax: bool = True) -> tuple[Tensor, Tensor]:
        if masked is not None:
            scores = scores.masked_fill(~masked, float("-inf"))
        weights = torch.softmax(scores, dim=dim) if softmax else scores
        return (weights.unsqueeze(1) @ h).squeeze(1), weights

    def from_weights(weights: Tensor) -> tuple[Tensor, Tensor]:
        return (weights.unsqueeze(1) @ h).squeeze(1), weights

    def score(hidden: Tensor) -> Tensor:
        return att.v(hidden).squeeze(-1)  # (batch, m)

    right = score(torch.tanh(w1h + w2s))
    unmasked = torch.softmax(right, dim=-1)
    scaled = "the scores are divided by sqrt(d) as in dot-product attention; additive scores are not scaled (their size is set by the learned v)"
    return {
        "the tanh is missing: the scores are v^T tanh(W1 h_i + W2 s); without the tanh they are linear in h_i "
        "and s, and the decoder state cannot change which word is preferred": finish(score(w1h + w2s)),
        "the non-linearity is a ReLU; Bahdanau's score uses tanh": finish(score(torch.relu(w1h + w2s))),
        "the non-linearity is a sigmoid; Bahdanau's score uses tanh": finish(score(torch.sigmoid(w1h + w2s))),
        "the tanh is applied after v: the score is v^T tanh(W1 h_i + W2 s), the tanh first, then the product with v": finish(
            torch.tanh(score(w1h + w2s))
        ),
        "the vector v is missing: the d_att features of tanh(W1 h_i + W2 s) were summed into a score; v^T weighs "
        "them, att.v(...).squeeze(-1)": finish(torch.tanh(w1h + w2s).sum(-1)),
        "the vector v is missing: the d_att features of tanh(W1 h_i + W2 s) were averaged into a score; v^T weighs "
        "them, att.v(...).squeeze(-1)": finish(torch.tanh(w1h + w2s).mean(-1)),
        "the decoder state is missing from the score (W2 s): without it the weights are the same at every step": finish(
            score(torch.tanh(w1h))
        ),
        "the score is a dot product of W1 h_i and W2 s (multiplicative, Luong-style attention); Bahdanau's additive "
        "score adds them and goes through tanh and v: att.v(torch.tanh(att.W1(h) + att.W2(s).unsqueeze(1)))": finish(
            (w1h * w2s).sum(-1)
        ),
        f"{scaled} (here by sqrt(d_att))": finish(right / math.sqrt(_SIZES["d_att"])),
        f"{scaled} (here by sqrt(d_h))": finish(right / math.sqrt(_SIZES["d_h"])),
        f"{scaled} (here by sqrt(d_s))": finish(right / math.sqrt(_SIZES["d_s"])),
        "the softmax runs over the wrong axis (the batch, dim=0): each sentence's weights over its source words "
        "must sum to 1, softmax(scores, dim=-1)": finish(right, dim=0),
        "the weights are the raw scores: take a softmax over the source positions": finish(right, softmax=False),
        "the weights are a log_softmax (log-probabilities, negative): take the softmax itself": from_weights(
            torch.log_softmax(right.masked_fill(~mask, float("-inf")), dim=-1)
        ),
        "the weights are a log_softmax (log-probabilities, negative), and the padding mask is ignored: take the "
        "softmax of the scores, with the padded ones filled with -inf": from_weights(torch.log_softmax(right, dim=-1)),
        "the padding mask is ignored: fill the scores of padded positions with -inf before the softmax": finish(
            right, masked=None
        ),
        "the padding mask is inverted: fill the scores where mask is False (the padding) with -inf": finish(right, masked=~mask),
        "the padded scores are set to 0, which still gets weight exp(0 - max) in the softmax: fill them with -inf "
        "(masked_fill(~mask, float('-inf')))": finish(right.masked_fill(~mask, 0.0), masked=None),
        "the mask is applied after the softmax: the weights were computed over every position, padding included, "
        "and then the padded ones zeroed, so a sentence's weights no longer sum to 1. Fill the scores with -inf "
        "before the softmax": from_weights(unmasked * mask),
        "the mask is applied after the softmax, with -inf: the weights must be probabilities (0 on the padding); "
        "fill the *scores* with -inf before the softmax": from_weights(unmasked.masked_fill(~mask, float("-inf"))),
    }


def _additive_inputs(dtype: torch.dtype) -> tuple[AdditiveAttention, Tensor, Tensor, Tensor]:
    batch, m, d_s, d_h, d_att = _SIZES.values()
    torch.manual_seed(1234)
    att = AdditiveAttention(d_s, d_h, d_att).to(dtype)
    s = torch.randn(batch, d_s, dtype=dtype)
    h = torch.randn(batch, m, d_h, dtype=dtype)
    mask = torch.arange(m)[None, :] < torch.tensor([5, 3, 2])[:, None]  # (batch, m): one row without padding
    return att, s, h, mask


def _run_additive(attention_fn: Callable, dtype: torch.dtype) -> tuple[object, tuple]:
    att, s, h, mask = inputs = _additive_inputs(dtype)
    what = f"s {tuple(s.shape)}, h {tuple(h.shape)}, mask {tuple(mask.shape)} ({str(dtype).replace('torch.', '')})"
    shortcut = "your function calls att(s, h), which computes the scores for you; write them with att.W1, att.W2, att.v"
    with torch.no_grad(), forbid_forward(att, shortcut):
        result = call_attempt(_hinted(attention_fn, what, _additive_hint), att, s, h, mask, what=what)
    return result, inputs


def _padding_got_weight(weights: Tensor, want: Tensor, mask: Tensor, mistakes: dict, atol: float, rtol: float) -> None:
    """Name a finite fill value (-10, say) that leaves the padding some weight, unless a named mistake explains the weights."""
    w = weights.detach().double()
    if w.shape != want.shape or not bool(torch.isfinite(w).all()) or torch.allclose(w, want, atol=atol, rtol=rtol):
        return
    if any(v.shape == w.shape and torch.allclose(w, v.double(), atol=atol, rtol=rtol, equal_nan=True) for v in mistakes.values()):
        return  # expect_close names it
    real = w.masked_fill(~mask, 0.0)
    renormalised = real / real.sum(-1, keepdim=True)
    if bool((w.masked_select(~mask) > atol).any()) and torch.allclose(renormalised, want, atol=10 * atol, rtol=rtol):
        raise ExerciseFailed(
            "the weights: the padded positions still get some weight, so the fill value is not negative enough: "
            "fill the padded scores with -inf (float('-inf')), or a number as large as -1e9"
        )


def _not_a_softmax(weights: Tensor, scores: Tensor, mask: Tensor, mistakes: dict, atol: float, rtol: float) -> None:
    """Name weights that are not a softmax of the scores over the real positions (raw scores, exp alone, a plain ratio).

    Read on the real positions only, so that any way of treating the padding gives the same diagnosis; weights that a
    named mistake explains are left to ``expect_close``.
    """
    w = weights.detach().double()
    if w.shape != scores.shape or any(
        v.shape == w.shape and torch.allclose(w, v.double(), atol=atol, rtol=rtol, equal_nan=True) for v in mistakes.values()
    ):
        return
    real_w, real_s = w[mask], scores[mask]
    if not bool(torch.isfinite(real_w).all()):
        return

    def same(candidate: Tensor) -> bool:
        return torch.allclose(real_w, candidate, atol=max(atol, 1e-6), rtol=max(rtol, 1e-5))

    exps = scores.masked_fill(~mask, float("-inf")).exp()  # (batch, m)
    ratio = scores.masked_fill(~mask, 0.0)
    ratio = ratio / ratio.sum(-1, keepdim=True)
    softmax_hint = (
        "the weights must be a softmax of the scores over each sentence's source words: positive and summing to 1, "
        "torch.softmax(scores.masked_fill(~mask, float('-inf')), dim=-1)"
    )
    if same(real_s):
        raise ExerciseFailed(f"the weights are the raw scores v^T tanh(W1 h_i + W2 s): the softmax is missing; {softmax_hint}")
    if same(exps[mask]):
        raise ExerciseFailed(f"the weights are exp(scores), not divided by their sum over the source words: {softmax_hint}")
    if same(ratio[mask]):
        raise ExerciseFailed(
            "the weights are the scores divided by their sum: scores can be negative, so these are no probabilities; "
            f"exponentiate first, {softmax_hint}"
        )
    if same(torch.sigmoid(real_s)) or same(torch.tanh(real_s)):
        raise ExerciseFailed(
            "each score was squashed on its own (a sigmoid or a tanh): weights that do not compete need not sum to 1; "
            + softmax_hint
        )
    flat = torch.softmax(scores.masked_fill(~mask, float("-inf")).flatten(), 0).reshape(scores.shape)
    if same(flat[mask]):
        raise ExerciseFailed(
            "the softmax ran over the whole batch at once (flattened): each sentence's weights must sum to 1 on their own, "
            "dim=-1 of the (batch, m) scores"
        )


_DTYPE_CLASH = re.compile(r"same dtype|scalar type|Double and Float|Float and Double|dtype (Float|Double)", re.IGNORECASE)


@exercise("additive (Bahdanau) attention")
def check_additive_attention(attention_fn) -> None:
    """Check ``additive_attention(att, s, h, mask) -> (context (batch, d_h), weights (batch, m))``.

    Runs in float64; an answer that computes in float32 (a tensor it makes itself, say) and so fails on float64
    inputs is run again on float32 inputs and judged at float32's precision, as it would run in the course's model.
    """
    require_attempt(attention_fn, "additive_attention")
    try:
        result, (att, s, h, mask) = _run_additive(attention_fn, torch.float64)
    except ExerciseFailed as err:
        if not _DTYPE_CLASH.search(str(err)):
            raise
        result, (att, s, h, mask) = _run_additive(attention_fn, torch.float32)
    batch, m, _, d_h, _ = _SIZES.values()
    if not isinstance(result, tuple) or len(result) != 2:
        raise ExerciseFailed(f"return a pair (context, weights); got {type(result).__name__}")
    for x, name in zip(result, ("context", "weights"), strict=True):
        _expect_device(x, h, f"the {name}")
    context, weights = (expect_tensor(x, name) for x, name in zip(result, ("context", "weights"), strict=True))
    if tuple(context.shape) == (batch, m) and tuple(weights.shape) == (batch, d_h):
        raise ExerciseFailed("the pair is swapped: return (context, weights), the context (batch, d_h) first")
    if tuple(weights.shape) in ((batch, m, 1), (batch, 1, m)):
        raise ExerciseFailed(
            f"the weights have shape {tuple(weights.shape)}: return them as (batch, m) = {(batch, m)}, one weight per "
            "source word (.squeeze() the extra axis); the decoder stacks them into (batch, n, m) maps"
        )
    with torch.no_grad():
        want_context, want_weights = additive_attention(att.double(), s.double(), h.double(), mask)
        mistakes = {
            message: wrong[1] for message, wrong in _additive_mistakes(att.double(), s.double(), h.double(), mask).items()
        }
    atol, rtol = max(1e-9, dtype_tolerance(weights.dtype)[0]), max(1e-7, dtype_tolerance(weights.dtype)[1])
    _padding_got_weight(weights, want_weights, mask, mistakes, atol, rtol)
    with torch.no_grad():
        att64 = att.double()
        right_scores = att64.v(torch.tanh(att64.W1(h.double()) + att64.W2(s.double()).unsqueeze(1))).squeeze(-1)
    _not_a_softmax(weights, right_scores, mask, mistakes, atol, rtol)
    expect_close(
        weights,
        want_weights,
        "the weights",
        atol=atol,
        rtol=rtol,
        mistakes=mistakes,
        nonfinite_hint="NaN or inf in the weights comes from a softmax whose every score is -inf (a mask that hides "
        "every position of a row), or from -inf kept in the weights themselves; fill only the padded scores "
        "(where mask is False) with -inf, before the softmax",
    )
    if tuple(context.shape) == (batch, m):
        raise ExerciseFailed(
            "the context has shape (batch, m): the weighted encoder states were summed over the features instead of the "
            "source positions; c = sum_i a_i h_i is (batch, d_h): (weights.unsqueeze(1) @ h).squeeze(1) or (weights[..., None] * h).sum(1)"
        )
    if tuple(context.shape) == (batch, 1, d_h):
        raise ExerciseFailed(
            f"the context has shape {(batch, 1, d_h)}: drop the middle axis left by the matrix product, "
            "(weights.unsqueeze(1) @ h).squeeze(1) -> (batch, d_h)"
        )
    expect_close(
        context,
        want_context,
        "the context",
        atol=1e-9,
        rtol=1e-7,
        mistakes={
            "the context is the plain mean of the encoder states: weight them by the attention weights": h.double().mean(1)
        },
    )


# ---------------------------------------------------------------- alignment accuracy


def _alignment_inputs(batch: int, n: int, m: int, dtype: torch.dtype) -> tuple[Tensor, Tensor]:
    """Attention maps ``(batch, n, m)`` and true alignments ``(batch, n)`` on which the usual slips give other values.

    About half of the words are aligned where their map peaks; source position 0 is the truth of several words (and
    the peak of some); each row ends with positions without a word (``-1``: ``<eos>`` and padding), one row has an
    ``und`` (``-1``) inside, and the rows have different numbers of words.
    """
    g = torch.Generator().manual_seed(7 + n + m)
    weights = torch.softmax(3 * torch.randn(batch, n, m, generator=g, dtype=torch.float64), dim=-1)
    peak = weights.argmax(-1)  # (batch, n)
    other = (peak + 1 + torch.randint(0, m - 1, (batch, n), generator=g)) % m  # never the peak
    align = torch.where(torch.rand(batch, n, generator=g) < 0.55, peak, other)
    align[:, 0] = 0  # the first target word reads the first source word, as numbers do
    words = [n - 1 - (row % 3) for row in range(batch)]  # then <eos> and padding: -1
    for row, length in enumerate(words):
        align[row, length:] = -1
    align[0, 2] = -1  # an "und" inside a sentence
    return weights.to(dtype), align


def _alignment_mistakes(weights: Tensor, align: Tensor) -> dict[str, float]:
    peak, has_word = weights.argmax(-1), align >= 0  # (batch, n), (batch, n)
    hits = (peak == align) & has_word
    share = float(hits.sum() / has_word.sum())
    per_sentence = (hits.sum(1).double() / has_word.sum(1).clamp(min=1).double()).mean()
    mistakes = {
        "the positions without a source word (align = -1: und, <eos>, padding) are counted as misses: count only the "
        "positions with align >= 0, in the denominator too": float(hits.double().mean()),
        "the positions without a source word (align = -1) are counted as hits: they have no true word to hit; keep only "
        "align >= 0": float((hits | ~has_word).double().mean()),
        "source position 0 is left out (align > 0): it is a real word, the first English word; the positions without one "
        "are the -1s, align >= 0": float(((peak == align) & (align > 0)).sum() / (align > 0).sum()),
        "each sentence's share was averaged: the accuracy counts every word of the batch once, so long sentences weigh "
        "more; take the hits over all the words at once": float(per_sentence),
        "this is a percentage; return the share between 0 and 1 (the notebook multiplies by 100 to print it)": 100 * share,
        "this is the number of hits: divide by the number of words with a source word (align >= 0)": float(hits.sum()),
        "the least-attended source position was taken (argmin): the model reads the source word it attends to most, argmax": float(
            ((weights.argmin(-1) == align) & has_word).sum() / has_word.sum()
        ),
    }
    if weights.shape[-2] == weights.shape[-1]:  # square maps: an argmax over the target positions gives a value
        mistakes[
            "the argmax ran over the target positions (dim=-2 or dim=1): it must pick a source position for each target "
            "word, over the last axis, weights.argmax(-1)"
        ] = float(((weights.argmax(-2) == align) & has_word).sum() / has_word.sum())
    return mistakes


def _alignment_hint(err: Exception) -> str:
    message = str(err)
    if "must match the size of tensor" in message or "The size of tensor a" in message:
        return (
            "the most-attended source position of each target word is an argmax over the last axis, weights.argmax(-1), "
            "(batch, n) like align; an argmax over another axis does not line up with it"
        )
    if "'bool' object is not subscriptable" in message or "'bool' object has no attribute" in message:
        return (
            "a comparison gave one plain bool instead of a tensor of them: weights.max(-1) returns a pair (values, "
            "indices), which == compares as a whole; the most-attended position is weights.argmax(-1)"
        )
    if _is_tuple_mistake(message):
        return (
            "weights.max(-1) returns a pair (values, indices); the most-attended position is its indices, or weights.argmax(-1)"
        )
    return ""


def _as_share(got: object, batch: int, n: int) -> float:
    """The learner's answer as a float: a number or a one-element tensor; other shapes are named."""
    if isinstance(got, bool):
        raise ExerciseFailed("the answer is a bool: return the share of hits, a number between 0 and 1")
    if isinstance(got, (int, float)):
        return float(got)
    if isinstance(got, Tensor):
        if got.numel() == 1:
            if got.dtype == torch.bool:
                raise ExerciseFailed("the answer is a bool tensor: return the share of hits, a number between 0 and 1")
            return float(got)
        shape = tuple(got.shape)
        if shape == (batch,):
            raise ExerciseFailed(
                f"the answer has shape {shape}, one share per sentence: the accuracy is one number over every word of the "
                "batch, each counted once"
            )
        if shape == (batch, n):
            raise ExerciseFailed(
                f"the answer has shape {shape}, one entry per target position: take the share of hits over the positions "
                "with a source word (align >= 0), one number"
            )
        raise ExerciseFailed(f"the answer has shape {shape}; return one number, the share of hits (a 0-dim tensor or a float)")
    raise ExerciseFailed(
        f"the answer is a {type(got).__name__}; return one number, the share of hits (a 0-dim tensor or a float)"
    )


@exercise("alignment accuracy")
def check_alignment_accuracy(accuracy_fn) -> None:
    """Check ``alignment_accuracy(weights (batch, n, m), align (batch, n)) -> share`` (a number or a 0-dim tensor).

    The share of the target words with a source word (``align >= 0``) whose most-attended source position is the
    true one, over the whole batch. Float64 and float32 maps; the answer may be a float, an int-valued ratio or a
    tensor of any floating dtype (a share of whole counts needs no more precision than float32 gives).
    """
    require_attempt(accuracy_fn, "alignment_accuracy")
    for batch, n, m, dtype in ((4, 7, 6, torch.float64), (3, 6, 6, torch.float32)):
        weights, align = _alignment_inputs(batch, n, m, dtype)
        what = f"weights of shape {(batch, n, m)} ({str(dtype).removeprefix('torch.')}) and align of shape {(batch, n)}"
        got = call_attempt(_hinted(accuracy_fn, what, _alignment_hint), weights.clone(), align.clone(), what=what)
        value = _as_share(got, batch, n)
        want = float(alignment_accuracy(weights, align))
        if math.isfinite(value) and abs(value - want) <= 1e-6:
            continue
        if not math.isfinite(value):
            raise ExerciseFailed(
                f"the answer is {value}: a division by zero words? Divide the hits by the number of words with a source "
                "word (align >= 0), which is not zero here"
            )
        for message, wrong in _alignment_mistakes(weights, align).items():
            if abs(value - wrong) <= 1e-6:
                raise ExerciseFailed(message)
        raise ExerciseFailed(
            f"with {what} the alignment accuracy should be {want:.6f}; yours is {value:.6f}: for each target position with align >= 0, "
            "is the source position of its largest weight (argmax over the last axis) its true one? Count those hits, and "
            "divide by the number of such positions"
        )
