"""Checks of notebook 04 (multi-head attention, tensor by tensor) beyond ``check_multi_head_attention``.

- ``check_split_heads(split_heads)``: ``split_heads(x, num_heads)`` turns
  ``(batch, n, d_model)`` into ``(batch, heads, n, d_k)``;
- ``check_merge_heads(merge_heads)``: ``merge_heads(x)`` turns
  ``(batch, heads, n, d_k)`` back into ``(batch, n, heads * d_k)``;
- ``what_the_check_says(check, answer)``: a check's verdict on an answer, as a line of text, for a demonstration of
  a mistake (printed on stdout, and left out of ``summary()``).

Both name the view-without-transpose trap and, for any other wrong
rearrangement, say which token and which feature of the input ended up where.
"""

from __future__ import annotations

import contextlib
import io
import math
from collections.abc import Callable

import torch
from torch import Tensor

from helpers.attention import merge_heads as _merge_reference
from helpers.attention import split_heads as _split_reference
from helpers.checks import _core
from helpers.checks._core import (
    ExerciseFailed,
    call_attempt,
    exercise,
    expect_close,
    expect_shape,
    expect_tensor,
)

__all__ = ["check_split_heads", "check_merge_heads", "what_the_check_says"]


def _coded(batch: int, n: int, d_model: int) -> Tensor:
    """A float64 input whose entry [b, t, f] is 10000 b + 100 t + f: every value names its place."""
    b = torch.arange(batch, dtype=torch.float64)[:, None, None]
    t = torch.arange(n, dtype=torch.float64)[None, :, None]
    f = torch.arange(d_model, dtype=torch.float64)[None, None, :]
    return 10000 * b + 100 * t + f  # (batch, n, d_model)


def _decode(value: float) -> tuple[int, int, int] | None:
    if not math.isfinite(value):
        return None
    v = round(value)
    if abs(value - v) > 1e-9 or v < 0:
        return None
    return v // 10000, (v % 10000) // 100, v % 100


def _where_from(out: Tensor, expected: Tensor, index_names: str, describe_index) -> str:
    """Describe the first entry of ``out`` (coded input) that holds the wrong token/feature."""
    wrong = torch.nonzero(out != expected)
    if len(wrong) == 0:  # pragma: no cover - only called when they differ
        return ""
    idx = tuple(int(i) for i in wrong[0])
    got, want = _decode(float(out[idx])), _decode(float(expected[idx]))
    count = f"{len(wrong)} of {out.numel()} entries are in the wrong place"
    is_rearrangement = torch.equal(out.flatten().sort().values, expected.flatten().sort().values)
    if got is None or want is None or not is_rearrangement:
        count = f"{len(wrong)} of {out.numel()} entries differ"
        return f"{count}; out[{', '.join(map(str, idx))}] is {float(out[idx]):.6g}: the values were changed, not only rearranged"
    gb, gt, gf = got
    wb, wt, wf = want
    parts = []
    if gb != wb:
        parts.append(f"batch element {gb} instead of {wb}")
    if gt != wt:
        parts.append(f"token {gt} instead of token {wt}")
    if gf != wf:
        parts.append(f"feature {gf} instead of feature {wf}")
    return (
        f"{count}; out[{', '.join(map(str, idx))}] ({index_names} = {describe_index(idx)}) holds "
        + ", ".join(parts)
        + " of the input"
    )


def _raise_if_known(out: Tensor, expected: Tensor, mistakes: dict[str, Tensor | None], name: str) -> None:
    """Raise the message of the first typical mistake whose output ``out`` reproduces."""
    actual = out.detach().double()
    for message, wrong in mistakes.items():
        if wrong is None or wrong.shape != actual.shape or torch.allclose(wrong, expected, atol=1e-12, rtol=0):
            continue
        if torch.allclose(actual, wrong.double(), atol=1e-10, rtol=0):
            raise ExerciseFailed(f"{name}: {message}")


def _split_mistakes(x: Tensor, heads: int) -> dict[str, Tensor]:
    batch, n, d_model = x.shape
    d_k = d_model // heads
    return {
        "the view-versus-transpose trap: reshaping (batch, n, d_model) straight to (batch, heads, n, d_k) "
        "mixes tokens across heads; view as (batch, n, heads, d_k), then transpose(1, 2)": x.reshape(batch, heads, n, d_k),
        "the heads take every `heads`-th feature (strided) instead of a contiguous block of d_k features: "
        "view as (batch, n, heads, d_k), not (batch, n, d_k, heads)": x.reshape(batch, n, d_k, heads).permute(0, 3, 1, 2),
        "you transposed (batch, n, d_model) to (batch, d_model, n) before splitting, which mixes tokens into the features; "
        "view as (batch, n, heads, d_k) first, then transpose(1, 2)": x.transpose(1, 2).reshape(batch, heads, n, d_k),
        "the tokens were split into chunks instead of the features: split the last axis (d_model) into heads": torch.stack(
            x.reshape(batch, n * d_model).chunk(heads, dim=1), dim=1
        ).reshape(batch, heads, n, d_k)
        if (n * d_model) % heads == 0
        else None,
        "the heads come out in reverse order: head h should hold features h*d_k .. (h+1)*d_k - 1": _split_reference(
            x, heads
        ).flip(1),
    }


def _split_shape_hint(got: tuple[int, ...], batch: int, n: int, heads: int, d_k: int) -> str | None:
    if got == (batch, n, heads, d_k):
        return "you viewed x as (batch, n, heads, d_k) but did not transpose(1, 2) to (batch, heads, n, d_k)"
    if got == (batch, n, d_k, heads):
        return "the shape (batch, n, d_k, heads) puts heads last: view as (batch, n, heads, d_k), then transpose(1, 2)"
    if got == (batch, heads, d_k, n):
        return (
            "the last two axes are swapped: the result should be (batch, heads, n, d_k), tokens before features "
            "(transposing x to (batch, d_model, n) before splitting gives this too: split first, then transpose(1, 2))"
        )
    if got == (batch, d_k, heads, n):
        return (
            "transpose(1, 3) swaps the tokens with the features of each head; swap the tokens and the heads: "
            "view as (batch, n, heads, d_k), then transpose(1, 2)"
        )
    if got == (batch, d_k, n, heads):
        return "heads and d_k are swapped: the number of heads is `num_heads` and d_k = d_model // num_heads"
    if got == (batch * heads, n, d_k):
        return (
            "batch and heads merged into one axis (nn.MultiheadAttention's internal layout); "
            "keep them as two axes: (batch, heads, n, d_k)"
        )
    if got == (batch, n, heads * d_k):
        return "the result still has the shape (batch, n, d_model): nothing was split"
    if got == (batch, heads, n // heads, heads * d_k) and n % heads == 0:
        return (
            "the tokens axis (1) was split into heads; split the features, the last axis: "
            "x.unflatten(-1, (num_heads, d_k)) or x.view(batch, n, num_heads, d_k), then transpose(1, 2)"
        )
    if len(got) == 4 and got[0] == batch and got[1] != heads and got[1] * got[3] == heads * d_k:
        return f"axis 1 has {got[1]} heads but num_heads is {heads}: use the num_heads argument, do not hard-code it"
    if len(got) == 4 and got[0] != batch:
        return f"axis 0 should stay the batch axis (size {batch}): transpose(1, 2), not an axis involving the batch"
    return None


def _expect_same_dtype(out: Tensor, x: Tensor, name: str, what: str) -> None:
    """A rearrangement moves numbers and rounds none: its result keeps the input's dtype."""
    if out.dtype != x.dtype:
        raise ExerciseFailed(
            f"{name} returns {str(out.dtype).replace('torch.', '')} for a {str(x.dtype).replace('torch.', '')} input: "
            f"{what} only moves numbers, so it should keep x's dtype and round none. view, transpose and reshape keep it; "
            "a tensor you create and fill needs dtype=x.dtype (torch.zeros(..., dtype=x.dtype))"
        )


@exercise("split the heads")
def check_split_heads(split_heads) -> None:
    """Check ``split_heads(x, num_heads)``: ``(batch, n, d_model)`` -> ``(batch, heads, n, d_k)``, head h = features h*d_k..(h+1)*d_k-1."""
    for batch, n, d_model, heads in ((2, 5, 12, 3), (1, 4, 12, 2), (3, 2, 20, 4)):
        d_k = d_model // heads
        x = torch.randn(batch, n, d_model, dtype=torch.float64)
        label = f"x of shape {(batch, n, d_model)} and num_heads={heads}"
        try:
            out = expect_tensor(call_attempt(split_heads, x, heads, what=label), f"split_heads(x, {heads})")
        except ExerciseFailed as err:
            message = str(err)
            if "unflatten" in message and "dim 1 " in message:
                raise ExerciseFailed(
                    f"{message.split('. The sizes asked for')[0]}. unflatten(1, ...) splits the tokens axis; split the "
                    "features, the last axis: x.unflatten(-1, (num_heads, d_k)), then transpose(1, 2)"
                ) from None
            if "stack expects each tensor to be equal size" in message:
                raise ExerciseFailed(
                    f"{message}. The pieces were cut along the tokens axis; cut the features, the last axis: "
                    "x.chunk(num_heads, dim=-1) (or x.split(d_k, dim=-1)), then torch.stack(..., dim=1)"
                ) from None
            raise
        expected = _split_reference(x, heads)
        name = f"split_heads on {label}"
        if tuple(out.shape) != tuple(expected.shape):
            hint = _split_shape_hint(tuple(out.shape), batch, n, heads, d_k)
            if hint is not None:
                raise ExerciseFailed(f"{name}: got shape {tuple(out.shape)}, expected {tuple(expected.shape)}: {hint}")
            expect_shape(out, expected.shape, name)
        _expect_same_dtype(out, x, name, "splitting into heads")
        mistakes = _split_mistakes(x, heads)
        coded = _coded(batch, n, d_model)  # (batch, n, d_model), entry [b, t, f] = 10000 b + 100 t + f
        if not torch.allclose(out.detach().double(), expected, atol=1e-12, rtol=0):
            # Name the known mistakes first, then say where entries went.
            _raise_if_known(out, expected, mistakes, name)
            out_coded = call_attempt(split_heads, coded, heads, what=label)
            out_coded = expect_tensor(out_coded, "split_heads(x)").detach().double()
            if out_coded.shape == expected.shape:
                where = _where_from(
                    out_coded,
                    _split_reference(coded, heads),
                    "batch, head, token, j",
                    lambda i, d_k=d_k: f"{i[0]}, {i[1]}, {i[2]}, {i[3]}: token {i[2]}, feature {i[1] * d_k + i[3]}",
                )
                raise ExerciseFailed(f"{name}: {where}. Head h must hold features h*d_k .. (h+1)*d_k - 1 of every token")
            expect_close(out, expected, name, atol=1e-12, rtol=0)


@exercise("merge the heads")
def check_merge_heads(merge_heads) -> None:
    """Check ``merge_heads(x)``: ``(batch, heads, n, d_k)`` -> ``(batch, n, heads * d_k)``, the inverse of ``split_heads``."""
    for batch, heads, n, d_k in ((2, 3, 5, 4), (1, 2, 4, 6), (3, 4, 2, 5)):
        d_model = heads * d_k
        x = torch.randn(batch, heads, n, d_k, dtype=torch.float64)
        label = f"x of shape {(batch, heads, n, d_k)}"
        name = f"merge_heads on {label}"
        out = expect_tensor(call_attempt(merge_heads, x, what=label), "merge_heads(x)")
        expected = _merge_reference(x)
        got = tuple(out.shape)
        if got != tuple(expected.shape):
            hints = {
                (
                    batch,
                    n,
                    heads,
                    d_k,
                ): "you transposed to (batch, n, heads, d_k) but did not flatten the last two axes: reshape to (batch, n, d_model)",
                (batch, n, d_k): "the heads were summed or averaged; concatenate them instead (d_model = heads * d_k features)",
                (batch, heads * n, d_k): "the heads were concatenated along the tokens axis; concatenate them along the features",
                (
                    batch,
                    heads,
                    n * d_k,
                ): "the tokens were flattened into the features: transpose(1, 2) first, then reshape to (batch, n, d_model)",
            }
            if got in hints:
                raise ExerciseFailed(f"{name}: got shape {got}, expected {tuple(expected.shape)}: {hints[got]}")
            expect_shape(out, expected.shape, name)
        _expect_same_dtype(out, x, name, "merging the heads")
        mistakes = {
            "the view-versus-transpose trap: (batch, heads, n, d_k) reshaped straight to (batch, n, d_model) mixes heads "
            "across tokens; transpose(1, 2) first, then reshape": x.reshape(batch, n, d_model),
            "the features are interleaved (head index changing fastest): concatenate whole heads, "
            "transpose(1, 2) then reshape, not permute(0, 2, 3, 1)": x.permute(0, 2, 3, 1).reshape(batch, n, d_model),
            "the heads are concatenated in reverse order: head 0 must come first": _merge_reference(x.flip(1)),
            "the tokens come out in reverse order": _merge_reference(x).flip(1),
            "transpose(2, 3) swaps the tokens and the features inside each head; swap the heads and the tokens, "
            "transpose(1, 2), then reshape": x.transpose(2, 3).reshape(batch, n, d_model),
        }
        if not torch.allclose(out.detach().double(), expected, atol=1e-12, rtol=0):
            _raise_if_known(out, expected, mistakes, name)
            coded = _split_reference(_coded(batch, n, d_model), heads).contiguous()  # (batch, heads, n, d_k)
            out_coded = expect_tensor(call_attempt(merge_heads, coded, what=label), "merge_heads(x)").detach().double()
            if out_coded.shape == expected.shape:
                where = _where_from(
                    out_coded,
                    _coded(batch, n, d_model),
                    "batch, token, feature",
                    lambda i, d_k=d_k: f"{i[0]}, {i[1]}, {i[2]}: head {i[2] // d_k}, j {i[2] % d_k}",
                )
                raise ExerciseFailed(f"{name}: {where}. Token t must get heads 0, 1, ... of token t side by side")
            expect_close(out, expected, name, atol=1e-12, rtol=0)


def what_the_check_says(check: Callable[..., object], *answer: object) -> str:
    """The verdict of ``check(*answer)`` as one line: ``"correct"``, or the named mistake of a wrong answer.

    For a demonstration, such as a typical mistake fed to its check on purpose: nothing is printed or shown as a
    failure, and the closing ``summary()`` keeps listing only the learner's own answers.
    """
    saved = _core._RAISE["on"]
    _core.raise_failures(True)
    try:
        with _core.unrecorded(), contextlib.redirect_stdout(io.StringIO()) as printed:
            check(*answer)
    except ExerciseFailed as err:
        return str(err)
    finally:
        _core.raise_failures(saved)
    said = printed.getvalue().strip()
    return said.lstrip("✅⏳ ") if said else "correct"
