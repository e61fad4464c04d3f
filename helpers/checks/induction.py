"""Checks of notebook 13 (induction heads): the scores that find the heads of the circuit, a head ablation, and the
composed QK circuit that shows K-composition in the weights.

- ``check_prev_token_score(prev_token_score)``: ``prev_token_score(pattern)`` takes attention patterns
  ``(batch, heads, n, n)`` (rows: queries, columns: keys) and returns one score per head ``(heads,)``: the mean over
  the batch and over queries ``i = 1 .. n-1`` of the attention from query ``i`` to key ``i - 1``.
- ``check_induction_score(induction_score)``: ``induction_score(pattern, period)`` for sequences that end in two
  copies of ``period`` tokens: the mean over the batch and over the queries of the second copy
  (``i = n - period .. n - 1``) of the attention from query ``i`` to key ``i - period + 1``, the token after the
  earlier occurrence of the current one; ``(heads,)``.
- ``check_ablate_head(ablate_head)``: ``ablate_head(z, head, how)`` takes one layer's per-head results
  ``(batch, heads, n, d_k)`` and returns a new tensor in which head ``head`` is zero (``how="zero"``) or replaced
  at each position by its mean over the batch (``how="mean"``), every other head unchanged.
- ``check_qk_circuit(qk_circuit)``: ``qk_circuit(embed, w_q, w_k, w_v, w_o)`` returns the ``(V, V)`` scores a
  layer-1 head gives from a query holding token ``a`` to a key whose previous token is ``b``, read through a layer-0
  head: ``(w_q e_a) . (w_k w_o w_v e_b) / sqrt(d_k)``.

The inputs are random (causal patterns: every row a softmax over the keys up to the query), in float64 and float32,
with small distinct sizes, so that each typical mistake gives a different number and is named. Any right way passes:
a loop, ``diagonal``, fancy indexing, ``torch.where``, ``einsum``. One dtype rule: an answer is judged at the precision
it computes in (a float32 result at float32's precision, whatever the inputs), and a float64 result that is only
float32-accurate is named as a precision problem (``helpers.checks._core.expect_close``).
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable
from typing import Any

import torch
from torch import Tensor
from torch.overrides import TorchFunctionMode
from torch.utils.weak import WeakIdKeyDictionary

from helpers.checks._core import (
    ExerciseFailed,
    NotAttempted,
    call,
    exercise,
    expect_close,
    expect_shape,
    expect_tensor,
)
from helpers.models.induction import ablate_head as _ablate
from helpers.models.induction import induction_score as _induction
from helpers.models.induction import prev_token_score as _prev
from helpers.models.induction import qk_circuit as _qk

__all__ = ["check_prev_token_score", "check_induction_score", "check_ablate_head", "check_qk_circuit"]

#: float64 answers must agree to rounding level; a float32 answer is judged at float32's precision (expect_close).
ATOL, RTOL = 1e-10, 1e-10


def random_patterns(batch: int, heads: int, n: int, dtype: torch.dtype = torch.float64) -> Tensor:
    """Random causal attention patterns ``(batch, heads, n, n)``: each row a softmax over keys ``0 .. i``."""
    scores = 2.0 * torch.randn(batch, heads, n, n, dtype=torch.float64)
    scores = scores.masked_fill(~torch.ones(n, n, dtype=torch.bool).tril(), float("-inf"))
    return scores.softmax(dim=-1).to(dtype)


def _dtype_name(dtype: torch.dtype) -> str:
    return str(dtype).replace("torch.", "")


def _score_shape(out: Tensor, batch: int, heads: int, n: int, name: str) -> None:
    """Name the usual wrong shapes of a per-head score."""
    got = tuple(out.shape)
    if got == (heads,):
        return
    if got == () and not out.is_floating_point():
        raise ExerciseFailed(
            f"{name} is a single integer, {int(out)}: the index of the best head (an argmax)? Return every head's "
            f"score, ({heads},), and leave choosing a head to the cells below"
        )
    hints = {
        (batch, heads): "one score per sequence: average over the batch too (axis 0), so that one score per head remains",
        (): "a single number: keep one score per head (average over the batch and the queries, not over the heads)",
        (batch,): "one number per sequence: average over the batch and the queries, but keep the heads (axis 1)",
        (1, heads): "keep no batch axis: (heads,), e.g. .mean(dim=(0, -1)) without keepdim",
    }
    if got in hints:
        raise ExerciseFailed(f"{name} has shape {got}, expected ({heads},): {hints[got]}")
    if len(got) == 3 and got[:2] == (batch, heads):
        raise ExerciseFailed(
            f"{name} has shape {got}, expected ({heads},): one value per query is left; average over the queries too"
        )
    if len(got) == 2 and got[0] == heads:
        raise ExerciseFailed(f"{name} has shape {got}, expected ({heads},): average over the queries too (the last axis)")
    expect_shape(out, (heads,), name)


def _as_float(out: Tensor) -> Tensor:
    """An integer or boolean score (a count of argmax hits, say) compared as a float, so that its mistake is named."""
    return out if out.is_floating_point() else out.double()


def _top_is(p: Tensor, offset: int, queries: Tensor) -> Tensor:
    """Per head, the share of (sequence, query) pairs whose largest weight is on key ``i + offset``: ``(heads,)``."""
    top = p[:, :, queries].argmax(-1)  # (b, h, len(queries))
    return (top == (queries + offset)).double().mean(dim=(0, -1))


# ---------------------------------------------------------------- the device of new tensors

#: Factories that put a tensor on the CPU unless they are given ``device=``.
_FACTORIES = {
    torch.zeros,
    torch.ones,
    torch.full,
    torch.empty,
    torch.tensor,
    torch.as_tensor,
    torch.arange,
    torch.eye,
    torch.linspace,
    torch.randn,
    torch.rand,
}


def _tensors(value: Any) -> list[Tensor]:
    """Every tensor in a (nested) argument."""
    if isinstance(value, Tensor):
        return [value]
    if isinstance(value, (tuple, list)):
        return [t for v in value for t in _tensors(v)]
    if isinstance(value, dict):
        return [t for v in value.values() for t in _tensors(v)]
    return []


class _OnAGPU(TorchFunctionMode):
    """Runs a learner's function as if its inputs were on a GPU, following where every tensor it makes would live.

    The inputs are marked "gpu"; a factory without ``device=`` makes a "cpu" tensor; any other operation's result is
    "gpu" when one of its tensors is. CUDA refuses an operation that mixes a GPU tensor with a CPU tensor of one or
    more dimensions (a 0-dim CPU tensor is a scalar and mixes with anything; an index may stay on the CPU; assigning
    into a slice copies across devices): each such operation is recorded in ``mixed``, and each factory call without
    ``device=`` in ``factories``.
    """

    def __init__(self, inputs: list[Tensor]) -> None:
        super().__init__()
        self.where: WeakIdKeyDictionary = WeakIdKeyDictionary()
        for t in inputs:
            self.where[t] = "gpu"
        self.mixed: list[str] = []
        self.factories: list[str] = []

    def device_of(self, t: Tensor) -> str:
        return self.where.get(t, "cpu")

    def __torch_function__(self, func, types, args=(), kwargs=None):  # type: ignore[no-untyped-def]
        kwargs = kwargs or {}
        result = func(*args, **kwargs)
        name = getattr(func, "__name__", str(func))
        if func in _FACTORIES:
            on = "gpu" if kwargs.get("device") is not None else "cpu"
            if on == "cpu":
                self.factories.append(f"torch.{name}")
        else:
            if name == "__getitem__":  # an index may stay on the CPU
                operands = _tensors(args[0])
            elif name == "__setitem__":  # out[...] = value copies across devices
                operands = []
            else:
                operands = _tensors(args) + _tensors(kwargs)
            devices = [(self.device_of(t), t.dim()) for t in operands]
            if any(d == "gpu" for d, _ in devices) and any(d == "cpu" and dim > 0 for d, dim in devices):
                self.mixed.append(name)
            in_place = name.endswith("_") and not name.startswith("_") and args and isinstance(args[0], Tensor)
            on = self.device_of(args[0]) if in_place else "gpu" if any(d == "gpu" for d, _ in devices) else "cpu"
        for t in _tensors(result):
            if t not in self.where:
                self.where[t] = on
        return result


def _expect_device_follows(fn: Callable[..., Any], args: tuple, name: str, input_name: str) -> None:
    """A right answer must also run on a GPU: every tensor it creates follows its inputs' device.

    Replays ``fn`` under ``_OnAGPU``; names a tensor created without ``device=`` that CUDA would refuse to combine
    with the inputs, or a result that would come back on the CPU whatever the inputs' device.
    """
    inputs = [a for a in args if isinstance(a, Tensor)]
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            with _OnAGPU(inputs) as mode:
                result = fn(*args)
    except Exception:  # noqa: BLE001 (the cases before ran it: a failure here gives no verdict)
        return
    made = ", ".join(f"{f}(...)" for f in dict.fromkeys(mode.factories)) or "a factory"
    symbols = {"add_": "+=", "sub_": "-=", "mul_": "*=", "div_": "/=", "add": "+", "sub": "-", "mul": "*", "div": "/"}
    symbols |= {"matmul": "@", "__mul__": "*", "__add__": "+", "__sub__": "-", "__truediv__": "/", "__matmul__": "@"}
    fix = (
        f"Create new tensors on {input_name}'s device (and in its dtype): torch.zeros(..., device={input_name}.device, "
        f"dtype={input_name}.dtype), or {input_name}.new_zeros(...), torch.zeros_like(...)"
    )
    if mode.mixed:
        raise ExerciseFailed(
            f"your `{name}` is right on the CPU, but on a GPU it fails: it creates a tensor with {made} and no device=, "
            f"so that tensor stays on the CPU, and `{symbols.get(mode.mixed[0], mode.mixed[0])}` then combines it with "
            f"{input_name}, which is on the "
            f'GPU ("expected all tensors to be on the same device"). {fix}'
        )
    outputs = _tensors(result)
    if outputs and any(mode.device_of(t) == "cpu" for t in outputs):
        raise ExerciseFailed(
            f"your `{name}` is right on the CPU, but it returns a tensor made with {made} and no device=: on a GPU your "
            f"result would come back on the CPU, not on {input_name}'s device. {fix}"
        )


# ---------------------------------------------------------------- previous-token score


def _prev_mistakes(p: Tensor) -> dict[str, Tensor]:
    b, _, n, _ = p.shape
    below = p.diagonal(offset=-1, dim1=-2, dim2=-1)  # (b, h, n-1)
    sub = torch.ones(n, n, dtype=p.dtype).tril(-1).triu(-1)  # 1 on the sub-diagonal
    queries = torch.arange(1, n)
    return {
        "you read the diagonal, each token's attention to itself; the previous token of query i is key i - 1, "
        "one below the diagonal (offset=-1)": p.diagonal(dim1=-2, dim2=-1).mean(dim=(0, -1)),
        "you read above the diagonal, where a causal pattern is 0: rows are queries and columns keys, so the previous "
        "token of query i is pattern[..., i, i - 1] (did you swap the query and key axes?)": p.diagonal(
            offset=1, dim1=-2, dim2=-1
        ).mean(dim=(0, -1)),
        "you read two below the diagonal (key i - 2); the previous token is key i - 1": p.diagonal(
            offset=-2, dim1=-2, dim2=-1
        ).mean(dim=(0, -1)),
        "query 0 is in your average, reading key 0, itself ((i - 1).clamp(min=0) turns its missing previous token into "
        "key 0, which a causal pattern gives weight 1): query 0 has no previous token, so average over the queries "
        "1 .. n-1 only": ((below.sum(-1) + p[:, :, 0, 0]) / n).mean(0),
        "you divided by n: query 0 has no previous token, so average over the n - 1 queries 1 .. n-1": below.sum(-1).mean(0) / n,
        "you summed over the queries instead of averaging: the score is a mean attention weight, between 0 and 1": below.sum(
            -1
        ).mean(0),
        "you summed over the batch and the queries instead of averaging: the score is a mean attention weight, between "
        "0 and 1": below.sum(dim=(0, -1)),
        "you averaged over all n x n entries of the pattern (zeros included): only the n - 1 entries pattern[..., i, i - 1] "
        "count, so average over those (the queries 1 .. n-1) and the batch": (p * sub).mean(dim=(0, -1, -2)),
        "you averaged every entry of the pattern, which gives 1/n for every head (each row sums to 1): keep only the "
        "entries pattern[..., i, i - 1]": p.mean(dim=(0, -1, -2)),
        "you averaged every attention weight below the diagonal (all earlier keys), not only key i - 1": (
            p * sub.new_ones(n, n).tril(-1)
        ).sum(dim=(0, -1, -2))
        / (b * n * (n - 1) / 2),
        "you took the largest attention to the previous token (a max), not the mean over the batch and the queries": below.amax(
            dim=(0, -1)
        ),
        "you took a max over the queries (of the batch's mean): the score is the mean over the batch and the queries": below.mean(
            0
        ).amax(-1),
        "you took a max over the queries of each sequence, then the mean: the score is the mean over the batch and the "
        "queries, no max": below.amax(-1).mean(0),
        "you took a max over the batch: the score is the mean over the batch and the queries, no max": below.amax(0).mean(-1),
        "you counted the queries whose largest weight is on the previous token (an argmax): the score is the attention "
        "weight itself, pattern[..., i, i - 1], averaged": _top_is(p, -1, queries),
    }


@exercise("previous-token score")
def check_prev_token_score(prev_token_score) -> None:
    """Check ``prev_token_score(pattern)``: ``(batch, heads, n, n)`` -> ``(heads,)``."""
    for batch, heads, n, dtype in ((3, 4, 7, torch.float64), (2, 3, 9, torch.float64), (4, 2, 6, torch.float32)):
        p = random_patterns(batch, heads, n, dtype)
        label = f"random causal patterns of shape {(batch, heads, n, n)} ({_dtype_name(dtype)})"
        name = f"prev_token_score on {label}"
        out = expect_tensor(call(prev_token_score, p, what=label), name)
        _score_shape(out, batch, heads, n, name)
        expect_close(_as_float(out), _prev(p.double()), name, atol=ATOL, rtol=RTOL, mistakes=_prev_mistakes(p.double()))
    # a head that attends only to the previous token scores exactly 1
    n = 5
    perfect = torch.zeros(1, 1, n, n, dtype=torch.float64)
    perfect[0, 0, 0, 0] = 1.0
    perfect[0, 0, torch.arange(1, n), torch.arange(n - 1)] = 1.0
    out = expect_tensor(call(prev_token_score, perfect, what="a head that always attends to the previous token"), "score")
    if out.shape == (1,) and abs(float(out[0]) - 1.0) > 1e-6:
        raise ExerciseFailed(
            f"a head that always attends to the previous token (query 0 to itself) scores {float(out[0]):.4g}, expected 1: "
            "average over the queries 1 .. n-1, which all have a previous token"
        )
    _expect_device_follows(prev_token_score, (random_patterns(2, 3, 6),), "prev_token_score", "pattern")


# ---------------------------------------------------------------- induction score


def _diag_mean(p: Tensor, offset: int, queries: slice) -> Tensor:
    """Mean of ``p[b, h, i, i + offset]`` over the batch and the queries ``i`` in ``queries`` (offset <= 0)."""
    n = p.shape[-1]
    idx = torch.arange(n)[queries]
    idx = idx[(idx + offset >= 0) & (idx + offset < n)]
    return p[:, :, idx, idx + offset].mean(dim=(0, -1))


def _diag_sum(p: Tensor, offset: int, queries: slice) -> Tensor:
    n = p.shape[-1]
    idx = torch.arange(n)[queries]
    return p[:, :, idx, idx + offset].sum(-1).mean(0)


def _induction_mistakes(p: Tensor, period: int) -> dict[str, Tensor]:
    n = p.shape[-1]
    second = slice(n - period, n)
    return {
        "you measured attention to the earlier occurrence of the current token itself (key i - period), the pattern of "
        "a duplicate-token head; the induction head attends to the token AFTER it, key i - period + 1": _diag_mean(
            p, -period, second
        ),
        "off by one: key i - period + 2 is two after the earlier occurrence; the token after it is key i - period + 1": (
            _diag_mean(p, -period + 2, second)
        ),
        "off by one: key i - period - 1 is the token before the earlier occurrence; the token after it is key "
        "i - period + 1": _diag_mean(p, -period - 1, second),
        "you averaged over queries of the first copy too (the whole stripe at offset -(period - 1)): a token of the first "
        "copy has no earlier occurrence; average over the last `period` queries only": _diag_mean(p, -period + 1, slice(0, n)),
        "one query too many: you averaged period + 1 queries, from n - period - 1 on; the second copy is the last "
        "`period` positions, n - period .. n - 1": _diag_mean(p, -period + 1, slice(n - period - 1, n)),
        "your queries start one position too early, in the first copy: the second copy is the last `period` "
        "positions, n - period .. n - 1": _diag_mean(p, -period + 1, slice(n - period - 1, n - 1)),
        "your queries start one position too late: the second copy's first token (position n - period) is a query too; "
        "average over the last `period` queries": _diag_mean(p, -period + 1, slice(n - period + 1, n)),
        "you summed over the queries instead of averaging: the score is a mean attention weight, between 0 and 1 "
        "(.mean over the last `period` queries and the batch)": _diag_sum(p, -period + 1, second),
        "you summed over the batch and the queries instead of averaging: the score is a mean attention weight, between "
        "0 and 1": _diag_sum(p, -period + 1, second) * p.shape[0],
        "you read the diagonal (each token's attention to itself)": _diag_mean(p, 0, second),
        "you read above the diagonal, where a causal pattern is 0: rows are queries and columns keys (did you swap "
        "the query and key axes?)": _diag_mean(p.transpose(-1, -2), -period + 1, second),
        "you read the previous token (key i - 1), the previous-token score": _diag_mean(p, -1, second),
        "you took the largest attention (a max) to the token after the earlier occurrence: the score is the mean over "
        "the batch and the queries": p[:, :, torch.arange(n - period, n), torch.arange(n - period, n) - period + 1].amax(
            dim=(0, -1)
        ),
        "you counted the queries whose largest weight is on key i - period + 1 (an argmax): the score is the attention "
        "weight itself, averaged": _top_is(p, -period + 1, torch.arange(n - period, n)),
    }


@exercise("induction score")
def check_induction_score(induction_score) -> None:
    """Check ``induction_score(pattern, period)``: ``(batch, heads, n, n)`` -> ``(heads,)``."""
    cases = (  # (batch, heads, period, tokens before the two copies, dtype)
        (3, 4, 5, 1, torch.float64),  # a BOS token first, as in this notebook's data
        (2, 3, 6, 0, torch.float64),  # no BOS
        (2, 2, 4, 3, torch.float64),  # three tokens before the copies
        (4, 3, 5, 1, torch.float32),
    )
    passed_bos = False
    for batch, heads, period, before, dtype in cases:
        n = before + 2 * period
        p = random_patterns(batch, heads, n, dtype)
        label = f"random causal patterns of shape {(batch, heads, n, n)} ({_dtype_name(dtype)}), period={period}"
        layout = f"{before} token{'s' if before != 1 else ''} before the two copies"
        name = f"induction_score on {label}, {layout}"
        try:
            out = expect_tensor(call(induction_score, p, period, what=f"{label} ({layout})"), name)
            _score_shape(out, batch, heads, n, name)
            expect_close(
                _as_float(out),
                _induction(p.double(), period),
                name,
                atol=ATOL,
                rtol=RTOL,
                mistakes=_induction_mistakes(p.double(), period),
            )
        except ExerciseFailed as err:
            if passed_bos and before != 1:
                raise ExerciseFailed(
                    f"{err}. Your score is right when one BOS token precedes the two copies but not with {before}: count the "
                    "second copy from the end of the sequence (its last `period` positions), not from the start"
                ) from None
            raise
        passed_bos = passed_bos or before == 1
    _expect_device_follows(induction_score, (random_patterns(2, 3, 9), 4), "induction_score", "pattern")


# ---------------------------------------------------------------- ablation


def _ablate_mistakes(z: Tensor, head: int, how: str) -> dict[str, Tensor]:
    batch, heads, n, d_k = z.shape
    own = z[:, head]  # (b, n, d_k)
    mean = own.mean(0, keepdim=True)  # (1, n, d_k)

    def with_head(value: Tensor | float) -> Tensor:
        """z with head ``head`` replaced by ``value`` (broadcast over its (batch, n, d_k) slice)."""
        out = z.clone()
        out[:, head] = value
        return out

    mistakes: dict[str, Tensor] = {}
    below = (head - 1) % heads
    mistakes[
        f"you ablated head {below} instead of head {head}: `head` counts from 0 (head 0 is z[:, 0]), so use z[:, head] "
        "as it is, with no - 1 as for numbering from 1"
    ] = _ablate(z, below, how)
    if head + 1 < heads:
        mistakes[f"you ablated head {head + 1} instead of head {head}: heads are counted from 0 along axis 1, z[:, head]"] = (
            _ablate(z, head + 1, how)
        )
    if head < n:
        wrong_axis = z.clone()
        wrong_axis[:, :, head] = 0.0 if how == "zero" else z[:, :, head].mean(0, keepdim=True)
        mistakes[
            f"you changed position {head} of every head (axis 2) instead of head {head} (axis 1): z is (batch, heads, n, d_k)"
        ] = wrong_axis
    if head < d_k:
        last = z.clone()
        last[..., head] = 0.0 if how == "zero" else z[..., head].mean(0, keepdim=True)
        mistakes[
            f"you changed feature {head} of every head (the last axis, d_k) instead of head {head}: heads are axis 1, "
            "z[:, head] (z is (batch, heads, n, d_k))"
        ] = last
    if head < batch:
        first = z.clone()
        first[head] = 0.0 if how == "zero" else z.mean(0)
        mistakes[
            f"you changed sequence {head} of the batch (axis 0) instead of head {head}: z[head] is a sequence, z[:, head] "
            "the head"
        ] = first
    kept = (torch.zeros_like(z) if how == "zero" else z.mean(0, keepdim=True).expand_as(z)).clone()
    kept[:, head] = own
    mistakes[
        f"you kept only head {head} and ablated every other head: ablate head `head` alone, and leave the others as they are"
    ] = kept
    if how == "zero":
        mistakes["you zeroed every head of the layer; ablate only head `head`, leave the others as they are"] = torch.zeros_like(
            z
        )
        mistakes[f"you replaced head {head} by its mean over the batch: how='zero' sets it to 0"] = with_head(mean)
        return mistakes
    mistakes.update(
        {
            f"you set head {head} to 0: how='mean' replaces it by its mean over the batch, at each position": with_head(0.0),
            f"you subtracted head {head}'s mean over the batch (centring it); mean ablation *replaces* the head's results "
            "by that mean, the same vector for every sequence": with_head(own - mean),
            "you took the mean over the positions (axis 2) instead of over the batch (axis 0): the mean keeps one vector "
            "per position": with_head(own.mean(1, keepdim=True)),
            "you took the mean over the batch and the positions together: keep one mean vector per position (the mean "
            "over the batch, axis 0, only)": with_head(own.mean((0, 1), keepdim=True)),
            "you took the mean over the heads (axis 1) instead of over the batch (axis 0)": with_head(z.mean(1)),
            "you took the mean over the features (the last axis); the mean is over the batch, one d_k vector per "
            "position": with_head(own.mean(-1, keepdim=True)),
            "you replaced every head by its mean over the batch; ablate only head `head`": z.mean(0, keepdim=True).expand_as(z),
        }
    )
    return mistakes


def _unfinished_branches(fn, z: Tensor) -> None:
    """Partial work is not "not attempted": a branch that runs next to one that still raises the stub is named."""
    raised, ran = [], []
    for how in ("zero", "mean"):
        try:
            call(fn, z.clone(), 0, how, what=f"z of shape {tuple(z.shape)}, head=0, how={how!r}")
        except NotAttempted:
            raised.append(how)
            continue
        except ExerciseFailed as err:
            if "unfinished branch" in str(err):  # the stub's raise left in one branch (helpers.checks._core.in_a_branch)
                raised.append(how)
                continue
            # otherwise a real attempt that fails: the comparisons below name it
        ran.append(how)
    if raised and ran:
        todo = " and ".join(f"how={h!r}" for h in raised)
        raise ExerciseFailed(
            f"your ablate_head runs for {' and '.join(f'how={h!r}' for h in ran)} but still raises NotImplementedError for "
            f"{todo}: finish that branch ("
            + (
                "set the head's results to 0"
                if raised == ["zero"]
                else "replace the head's results by their mean over the batch, axis 0"
            )
            + ")"
        )


@exercise("head ablation")
def check_ablate_head(ablate_head) -> None:
    """Check ``ablate_head(z, head, how)``: ``(batch, heads, n, d_k)`` -> same shape, one head zeroed or mean-ablated."""
    _unfinished_branches(ablate_head, torch.randn(3, 4, 5, 6, dtype=torch.float64))
    for batch, heads, n, d_k, dtype in ((3, 4, 5, 6, torch.float64), (5, 3, 4, 2, torch.float32)):
        z = torch.randn(batch, heads, n, d_k, dtype=dtype)
        for how in ("zero", "mean"):
            for head in (0, heads - 2, heads - 1):
                label = f"z of shape {(batch, heads, n, d_k)} ({_dtype_name(dtype)}), head={head}, how={how!r}"
                name = f"ablate_head on {label}"
                out = expect_tensor(call(ablate_head, z, head, how, what=label), name)
                if tuple(out.shape) == (batch, n, d_k):
                    raise ExerciseFailed(
                        f"{name} has shape {tuple(out.shape)}: you returned one head's results; return the whole layer's "
                        f"z {(batch, heads, n, d_k)} with head {head} ablated"
                    )
                expect_shape(out, z.shape, name)
                if out.dtype != dtype:
                    raise ExerciseFailed(
                        f"{name} is {_dtype_name(out.dtype)} for a {_dtype_name(dtype)} z: keep z's dtype (the model's "
                        "next step, W_O, is a layer in z's dtype and refuses another); create new tensors with "
                        "dtype=z.dtype, or start from z.clone()"
                    )
                expect_close(
                    out,
                    _ablate(z.double(), head, how),
                    name,
                    atol=ATOL,
                    rtol=RTOL,
                    mistakes=_ablate_mistakes(z.double(), head, how),
                )
    for how in ("zero", "mean"):
        _expect_device_follows(ablate_head, (torch.randn(3, 4, 5, 6, dtype=torch.float64), 1, how), "ablate_head", "z")


# ---------------------------------------------------------------- the composed QK circuit


def _qk_mistakes(embed: Tensor, w_q: Tensor, w_k: Tensor, w_v: Tensor, w_o: Tensor) -> dict[str, Tensor]:
    d_k, d = w_q.shape
    ov = w_o @ w_v  # (d, d)
    queries = embed @ w_q.T  # (V, d_k)
    keys = embed @ ov.T @ w_k.T  # (V, d_k)
    right = queries @ keys.T / math.sqrt(d_k)
    direct = embed @ w_k.T  # (V, d_k): a key that reads its own token
    ov_queries = embed @ ov.T @ w_q.T
    return {
        f"you forgot to divide by sqrt(d_k) = sqrt({d_k}): the head's scores are q . k / sqrt(d_k)": queries @ keys.T,
        f"you divided by d_k = {d_k}; attention divides by sqrt(d_k)": queries @ keys.T / d_k,
        f"you divided by sqrt(d_model) = sqrt({d}); the scale is sqrt(d_k), the width of the head (w_q.shape[0])": queries
        @ keys.T
        / math.sqrt(d),
        f"you divided by sqrt({w_v.shape[0]}), the previous-token head's width: the scale belongs to the head that "
        "computes the scores, sqrt(w_q.shape[0])": queries @ keys.T / math.sqrt(w_v.shape[0]),
        "your keys read token b directly (embed @ w_k.T), as a key in layer 0 would: here the key reads what the "
        "previous-token head wrote, w_o @ w_v @ e_b, so keys = embed @ w_v.T @ w_o.T @ w_k.T": queries
        @ direct.T
        / math.sqrt(d_k),
        "W_OV is applied transposed: the previous-token head writes w_o @ w_v @ e_b (a column vector); with embeddings "
        "as rows that is embed @ w_v.T @ w_o.T, not embed @ w_o @ w_v": queries @ (embed @ ov @ w_k.T).T / math.sqrt(d_k),
        "your queries go through the previous-token head too (that would be Q-composition); the query holds token a "
        "itself, embed @ w_q.T": ov_queries @ keys.T / math.sqrt(d_k),
        "you passed the query through the previous-token head instead of the key: the key position is the one whose "
        "previous token is b, so W_OV belongs on the key side": ov_queries @ direct.T / math.sqrt(d_k),
        "rows and columns are swapped: rows are the query's token a, columns the key's previous token b (return "
        "queries @ keys.T, not keys @ queries.T)": right.T,
        "w_q and w_k are swapped: the query is w_q @ e_a, the key w_k @ (w_o @ w_v @ e_b)": (embed @ w_k.T)
        @ (embed @ ov.T @ w_q.T).T
        / math.sqrt(d_k),
        "you returned the softmax of each row: return the scores themselves (the cells below take the softmax)": right.softmax(
            -1
        ),
        "you returned a softmax over each column (dim=0): return the scores themselves": right.softmax(0),
    }


@exercise("the composed QK circuit")
def check_qk_circuit(qk_circuit) -> None:
    """Check ``qk_circuit(embed, w_q, w_k, w_v, w_o)`` -> ``(V, V)``: ``(w_q e_a) . (w_k w_o w_v e_b) / sqrt(d_k)``."""
    for vocab, d, d_k, d_k0, dtype in ((7, 6, 4, 3, torch.float64), (5, 8, 2, 4, torch.float64), (6, 5, 3, 2, torch.float32)):
        embed = torch.randn(vocab, d, dtype=dtype)
        w_q, w_k = torch.randn(d_k, d, dtype=dtype), torch.randn(d_k, d, dtype=dtype)
        w_v, w_o = torch.randn(d_k0, d, dtype=dtype), torch.randn(d, d_k0, dtype=dtype)
        args = (embed, w_q, w_k, w_v, w_o)
        label = (
            f"embed {tuple(embed.shape)}, w_q and w_k {tuple(w_q.shape)}, w_v {tuple(w_v.shape)}, w_o {tuple(w_o.shape)} "
            f"({_dtype_name(dtype)})"
        )
        name = f"qk_circuit on {label}"
        try:
            out = expect_tensor(call(qk_circuit, *args, what=label), name)
        except ExerciseFailed as err:
            if "cannot be multiplied" in str(err) or "size of tensor" in str(err) or "must match" in str(err):
                raise ExerciseFailed(
                    f"{err}. Follow the shapes: embed @ w_q.T is (V, d_k), the queries; embed @ w_v.T @ w_o.T is (V, d), "
                    "what the previous-token head writes for each token b; times w_k.T it is (V, d_k), the keys"
                ) from None
            raise
        double = tuple(a.double() for a in args)
        expect_close(out, _qk(*double), name, atol=ATOL, rtol=RTOL, mistakes=_qk_mistakes(*double), float32_path=True)
