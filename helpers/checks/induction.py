"""Checks of notebook 13 (induction heads): the scores that find the heads of the circuit, and a head ablation.

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

The inputs are random causal patterns (every row a softmax over the keys up to the query) and random results, in
float64 and float32, with small distinct sizes, so that each typical mistake (the diagonal instead of the one below
it, the earlier occurrence instead of the token after it, an offset off by one, the first copy averaged in, keys and
queries swapped, the wrong head or axis, a mean over the wrong axis) gives a different number and is named. Any right
way passes: a loop, ``diagonal``, fancy indexing, ``torch.where``.
"""

from __future__ import annotations

import torch
from torch import Tensor

from helpers.checks._core import ExerciseFailed, call, exercise, expect_close, expect_shape, expect_tensor
from helpers.models.induction import ablate_head as _ablate
from helpers.models.induction import induction_score as _induction
from helpers.models.induction import prev_token_score as _prev

__all__ = ["check_prev_token_score", "check_induction_score", "check_ablate_head"]

ATOL, RTOL = 1e-6, 1e-6  # float32's rounding of a mean of a few dozen numbers in [0, 1] is far below this


def random_patterns(batch: int, heads: int, n: int, dtype: torch.dtype = torch.float64) -> Tensor:
    """Random causal attention patterns ``(batch, heads, n, n)``: each row a softmax over keys ``0 .. i``."""
    scores = 2.0 * torch.randn(batch, heads, n, n, dtype=torch.float64)
    scores = scores.masked_fill(~torch.ones(n, n, dtype=torch.bool).tril(), float("-inf"))
    return scores.softmax(dim=-1).to(dtype)


def _score_shape(out: Tensor, batch: int, heads: int, n: int, name: str) -> None:
    """Name the usual wrong shapes of a per-head score."""
    got = tuple(out.shape)
    if got == (heads,):
        return
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


def _keep_dtype(out: Tensor, dtype: torch.dtype, name: str) -> None:
    if out.dtype != dtype:
        raise ExerciseFailed(f"{name} is {out.dtype} for {dtype} patterns; keep the pattern's dtype (no .float() or .double())")


# ---------------------------------------------------------------- previous-token score


def _prev_mistakes(p: Tensor) -> dict[str, Tensor]:
    n = p.shape[-1]
    below = p.diagonal(offset=-1, dim1=-2, dim2=-1)  # (b, h, n-1)
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
        "you divided by n: query 0 has no previous token, so average over the n - 1 queries 1 .. n-1": below.sum(-1).mean(0) / n,
        "you summed over the queries instead of averaging: the score is a mean attention weight, between 0 and 1": below.sum(
            -1
        ).mean(0),
        "you averaged every attention weight below the diagonal (all earlier keys), not only key i - 1": (
            p * torch.ones(n, n, dtype=p.dtype).tril(-1)
        ).sum(dim=(0, -1, -2))
        / (p.shape[0] * n * (n - 1) / 2),
    }


@exercise("previous-token score")
def check_prev_token_score(prev_token_score) -> None:
    """Check ``prev_token_score(pattern)``: ``(batch, heads, n, n)`` -> ``(heads,)``."""
    for batch, heads, n, dtype in ((3, 4, 7, torch.float64), (2, 3, 9, torch.float64), (4, 2, 6, torch.float32)):
        p = random_patterns(batch, heads, n, dtype)
        label = f"random causal patterns of shape {(batch, heads, n, n)} ({str(dtype).replace('torch.', '')})"
        name = f"prev_token_score on {label}"
        out = expect_tensor(call(prev_token_score, p, what=label), name)
        _score_shape(out, batch, heads, n, name)
        _keep_dtype(out, dtype, name)
        expect_close(out, _prev(p.double()), name, atol=ATOL, rtol=RTOL, mistakes=_prev_mistakes(p.double()))
    # a head that attends only to the previous token scores exactly 1
    n = 5
    perfect = torch.zeros(1, 1, n, n, dtype=torch.float64)
    perfect[0, 0, 0, 0] = 1.0
    perfect[0, 0, torch.arange(1, n), torch.arange(n - 1)] = 1.0
    out = expect_tensor(call(prev_token_score, perfect, what="a head that always attends to the previous token"), "score")
    if out.shape == (1,) and abs(float(out[0]) - 1.0) > 1e-9:
        raise ExerciseFailed(
            f"a head that always attends to the previous token (query 0 to itself) scores {float(out[0]):.4g}, expected 1: "
            "average over the queries 1 .. n-1, which all have a previous token"
        )


# ---------------------------------------------------------------- induction score


def _diag_mean(p: Tensor, offset: int, queries: slice) -> Tensor:
    """Mean of ``p[b, h, i, i + offset]`` over the batch and the queries ``i`` in ``queries`` (offset <= 0)."""
    n = p.shape[-1]
    idx = torch.arange(n)[queries]
    idx = idx[(idx + offset >= 0) & (idx + offset < n)]
    return p[:, :, idx, idx + offset].mean(dim=(0, -1))


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
        "your queries start one position too early, in the first copy: the second copy is the last `period` "
        "positions, n - period .. n - 1": _diag_mean(p, -period + 1, slice(n - period - 1, n - 1)),
        "your queries start one position too late: the second copy's first token (position n - period) is a query too; "
        "average over the last `period` queries": _diag_mean(p, -period + 1, slice(n - period + 1, n)),
        "you read the diagonal (each token's attention to itself)": _diag_mean(p, 0, second),
        "you read above the diagonal, where a causal pattern is 0: rows are queries and columns keys (did you swap "
        "the query and key axes?)": _diag_mean(p.transpose(-1, -2), -period + 1, second),
        "you read the previous token (key i - 1), the previous-token score": _diag_mean(p, -1, second),
    }


@exercise("induction score")
def check_induction_score(induction_score) -> None:
    """Check ``induction_score(pattern, period)``: ``(batch, heads, n, n)`` -> ``(heads,)``."""
    cases = (  # (batch, heads, period, tokens before the two copies, dtype)
        (3, 4, 5, 1, torch.float64),  # a BOS token first, as in this notebook's data
        (2, 3, 6, 0, torch.float64),  # no BOS, as for notebook 11's model
        (2, 2, 4, 3, torch.float64),  # three tokens before the copies
        (4, 3, 5, 1, torch.float32),
    )
    passed_bos = False
    for batch, heads, period, before, dtype in cases:
        n = before + 2 * period
        p = random_patterns(batch, heads, n, dtype)
        label = f"random causal patterns of shape {(batch, heads, n, n)} ({str(dtype).replace('torch.', '')}), period={period}"
        layout = f"{before} token{'s' if before != 1 else ''} before the two copies"
        name = f"induction_score on {label}, {layout}"
        try:
            out = expect_tensor(call(induction_score, p, period, what=f"{label} ({layout})"), name)
            _score_shape(out, batch, heads, n, name)
            _keep_dtype(out, dtype, name)
            expect_close(
                out, _induction(p.double(), period), name, atol=ATOL, rtol=RTOL, mistakes=_induction_mistakes(p.double(), period)
            )
        except ExerciseFailed as err:
            if passed_bos and before != 1:
                raise ExerciseFailed(
                    f"{err}. Your score is right when one BOS token precedes the two copies but not with {before}: count the "
                    "second copy from the end of the sequence (its last `period` positions), not from the start"
                ) from None
            raise
        passed_bos = passed_bos or before == 1


# ---------------------------------------------------------------- ablation


def _ablate_mistakes(z: Tensor, head: int, how: str) -> dict[str, Tensor]:
    heads = z.shape[1]

    def with_head(value: Tensor | float) -> Tensor:
        """z with head ``head`` replaced by ``value`` (broadcast over its (batch, n, d_k) slice)."""
        out = z.clone()
        out[:, head] = value
        return out

    mistakes = {}
    for other in (head - 1, head + 1):
        if 0 <= other < heads:
            mistakes[f"you ablated head {other} instead of head {head}: heads are counted from 0 along axis 1"] = _ablate(
                z, other, how
            )
    if head < z.shape[2]:
        wrong_axis = z.clone()
        wrong_axis[:, :, head] = 0.0 if how == "zero" else z[:, :, head].mean(0, keepdim=True)
        mistakes[
            f"you changed position {head} of every head (axis 2) instead of head {head} (axis 1): z is (batch, heads, n, d_k)"
        ] = wrong_axis
    if how == "zero":
        mistakes["you zeroed every head of the layer; ablate only head `head`, leave the others as they are"] = torch.zeros_like(
            z
        )
        mistakes[f"you replaced head {head} by its mean over the batch: how='zero' sets it to 0"] = _ablate(z, head, "mean")
        return mistakes
    own = z[:, head]  # (b, n, d_k)
    mistakes.update(
        {
            f"you set head {head} to 0: how='mean' replaces it by its mean over the batch, at each position": _ablate(
                z, head, "zero"
            ),
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


@exercise("head ablation")
def check_ablate_head(ablate_head) -> None:
    """Check ``ablate_head(z, head, how)``: ``(batch, heads, n, d_k)`` -> same shape, one head zeroed or mean-ablated."""
    for batch, heads, n, d_k, dtype in ((3, 4, 5, 6, torch.float64), (5, 3, 4, 2, torch.float32)):
        z = torch.randn(batch, heads, n, d_k, dtype=dtype)
        for how in ("zero", "mean"):
            for head in (0, heads - 2, heads - 1):
                label = f"z of shape {(batch, heads, n, d_k)} ({str(dtype).replace('torch.', '')}), head={head}, how={how!r}"
                name = f"ablate_head on {label}"
                out = expect_tensor(call(ablate_head, z, head, how, what=label), name)
                if tuple(out.shape) == (batch, n, d_k):
                    raise ExerciseFailed(
                        f"{name} has shape {tuple(out.shape)}: you returned one head's results; return the whole layer's "
                        f"z {(batch, heads, n, d_k)} with head {head} ablated"
                    )
                expect_shape(out, z.shape, name)
                if out.dtype != dtype:
                    raise ExerciseFailed(f"{name} is {out.dtype} for a {dtype} z; keep z's dtype")
                expect_close(
                    out,
                    _ablate(z.double(), head, how),
                    name,
                    atol=ATOL,
                    rtol=RTOL,
                    mistakes=_ablate_mistakes(z.double(), head, how),
                )
