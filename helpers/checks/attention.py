"""Checks for the attention exercises: softmax, scaled dot-product attention, causal mask, multi-head attention.

Each compares the student's answer with PyTorch's own implementation on fresh
random inputs of small, distinct sizes, and recognises the typical mistakes.
"""

from __future__ import annotations

import math
import re

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from helpers.checks._core import (
    ExerciseFailed,
    NotAttempted,
    call_attempt,
    exercise,
    expect_close,
    expect_deterministic,
    expect_shape,
    expect_tensor,
    is_unattempted,
)

__all__ = [
    "check_softmax",
    "check_scaled_dot_product_attention",
    "check_causal_mask",
    "check_multi_head_attention",
]

call = call_attempt  # a stub's NotImplementedError left in one branch of a written function is a named failure

_HALF_D_K = (
    "the scores are divided by d_k / 2: d_k ** 1/2 is (d_k ** 1) / 2, since ** binds tighter than /; "
    "write d_k ** 0.5 or math.sqrt(d_k)"
)
_STABILITY_HINT = (
    "exp overflowed or underflowed on large scores (exp overflows above 88 in float32, above 709 in float64). Subtract the maximum of each slice "
    "along `dim` (x.amax(dim, keepdim=True)) before exp: softmax does not change, exp never overflows"
)


def _signature_hint(message: str, signature: str) -> str:
    """A hint when the student's function does not take the exercise's arguments (a parameter left out or renamed)."""
    if re.search(r"positional arguments? but \d+ (were|was) given|unexpected keyword argument|missing \d+ required", message):
        return f". Your function does not take the arguments the exercise gives it: keep its signature, {signature}"
    return ""


def _call_softmax(softmax, x: Tensor, what: str, **kwargs) -> object:
    try:
        return call(softmax, x, what=what, **kwargs)
    except ExerciseFailed as err:
        hint = _signature_hint(str(err), "def softmax(x, dim=-1)")
        if hint:
            raise ExerciseFailed(f"{err}{hint}") from None
        if "must match the size" in str(err) or "broadcast" in str(err):
            raise ExerciseFailed(
                f"{err}. A max or sum along `dim` drops that axis unless you pass keepdim=True, so it no longer lines up with x"
            ) from None
        raise


@exercise("softmax")
def check_softmax(softmax) -> None:
    """Check ``softmax(x, dim=-1)`` against ``torch.softmax`` on several axes and large inputs."""
    x = torch.randn(2, 3, 4, dtype=torch.float64)
    out = _call_softmax(softmax, x, what="x of shape (2, 3, 4)")
    expected = torch.softmax(x, dim=-1)
    shifted = torch.exp(x - x.amax(-1, keepdim=True))  # the stable numerators, right so far
    mistakes = {
        "the stable exponentials are divided by the sum over the whole tensor (exps.sum()), not along `dim`: divide by "
        "exps.sum(dim, keepdim=True)": shifted / shifted.sum(),
        "softmax over axis 0 instead of the last axis (`dim`)": torch.softmax(x, 0),
        "softmax over axis 1 instead of the last axis (`dim`)": torch.softmax(x, 1),
        "the exponentials are not divided by their sum along `dim`": torch.exp(x),
        "normalised by the sum over the whole tensor, not along `dim`": torch.exp(x) / torch.exp(x).sum(),
        "that is log-softmax (x - logsumexp); softmax is exp(x) / sum(exp(x))": torch.log_softmax(x, -1),
        "normalised by the maximum instead of the sum of the exponentials": torch.exp(x) / torch.exp(x).amax(-1, keepdim=True),
        "the exponential is missing: softmax divides exp(x) by the sum of exp(x) along `dim`, not x by the sum of x": x
        / x.sum(-1, keepdim=True),
        "the exponentials are divided by their mean, not their sum (use .sum(dim, keepdim=True))": torch.exp(x)
        / torch.exp(x).mean(-1, keepdim=True),
    }
    for axis in (0, 1):  # a reduction along a hard-coded axis instead of `dim`
        mistakes[
            f"the sum runs along axis {axis}, a fixed axis, not along `dim` (here the last axis): divide by "
            "exps.sum(dim=dim, keepdim=True)"
        ] = shifted / shifted.sum(axis, keepdim=True)
        off_axis = torch.exp(x - x.amax(axis, keepdim=True))
        mistakes[
            f"the maximum is taken along axis {axis}, a fixed axis, not along `dim`: x.amax(dim=dim, keepdim=True) is a constant "
            "within each slice that softmax normalises; a maximum along another axis is not"
        ] = off_axis / off_axis.sum(-1, keepdim=True)
    if isinstance(out, Tensor) and out.dtype != x.dtype:
        raise ExerciseFailed(f"softmax changed the dtype from {x.dtype} to {out.dtype}; keep the input's dtype")
    expect_close(out, expected, "softmax(x) with the default dim", atol=1e-9, rtol=1e-7, mistakes=mistakes)

    for dim in (0, 1):
        out_dim = _call_softmax(softmax, x, dim=dim, what=f"x of shape (2, 3, 4) and dim={dim}")
        e_dim = torch.exp(x - x.amax(dim, keepdim=True))
        e_last = torch.exp(x - x.amax(-1, keepdim=True))
        ignored = {
            "the `dim` argument is ignored (softmax is always over the last axis)": torch.softmax(x, -1),
            "the maximum is taken along the last axis, not along `dim`: subtract x.amax(dim, keepdim=True), a constant "
            "within each slice that softmax normalises (a constant per last-axis row changes the result along another dim)": (
                e_last / e_last.sum(dim, keepdim=True)
            ),
            "the sum runs along the last axis, not along `dim`: divide by exps.sum(dim, keepdim=True)": e_dim
            / e_dim.sum(-1, keepdim=True),
        }
        expect_close(out_dim, torch.softmax(x, dim), f"softmax(x, dim={dim})", atol=1e-9, rtol=1e-7, mistakes=ignored)

    x_1d = torch.randn(5, dtype=torch.float64)
    expect_close(
        call(softmax, x_1d, dim=0, what="a 1-D x of shape (5,)"),
        torch.softmax(x_1d, 0),
        "softmax of a 1-D x",
        atol=1e-9,
        rtol=1e-7,
    )

    for dtype in (torch.float32, torch.float64):
        # rows on very different scales: a global maximum underflows whole rows to 0/0
        x_big = torch.randn(3, 4, dtype=dtype) * torch.tensor([[1000.0], [10.0], [-1000.0]], dtype=dtype)
        out_big = expect_tensor(call(softmax, x_big, what=f"large {dtype} scores of shape (3, 4)"), "softmax(x) on large inputs")
        expect_close(
            out_big,
            torch.softmax(x_big, -1),
            f"softmax on large {dtype} inputs",
            atol=1e-6,
            rtol=1e-5,
            mistakes=_unstable_softmaxes(x_big),
            nonfinite_hint=_STABILITY_HINT,
        )


def _unstable_softmaxes(x: Tensor) -> dict[str, Tensor]:
    """What the usual unstable softmaxes give on large scores (NaN where exp overflowed, in the same places)."""

    def normalise(e: Tensor) -> Tensor:
        return e / e.sum(-1, keepdim=True)

    return {
        "exp overflowed on large scores: nothing is subtracted before exp (exp overflows above 88 in float32, above 709 "
        "in float64). Subtract the maximum of each slice, x.amax(dim, keepdim=True), before exp": normalise(torch.exp(x)),
        "exp overflowed on large scores: the minimum was subtracted, which makes every other entry larger still; subtract "
        "the maximum, x.amax(dim, keepdim=True), so that every exponent is <= 0": normalise(
            torch.exp(x - x.amin(-1, keepdim=True))
        ),
        "exp overflowed or underflowed on large scores: one maximum of the whole tensor was subtracted (x.max()), so rows "
        "far below it underflow to 0 / 0; subtract each slice's own maximum, x.amax(dim, keepdim=True)": normalise(
            torch.exp(x - x.max())
        ),
    }


def _sdpa_reference(q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None) -> tuple[Tensor, Tensor]:
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    weights = torch.softmax(scores, -1)
    out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
    return out, weights


def _sdpa_mistakes(q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None) -> dict[str, tuple[Tensor | None, Tensor | None]]:
    """Outputs (out, weights) of typical wrong implementations."""
    d_k, d_v = q.shape[-1], v.shape[-1]
    raw = q @ k.transpose(-2, -1)

    def masked(scores: Tensor, fill: float = float("-inf"), m: Tensor | None = mask) -> Tensor:
        return scores if m is None else scores.masked_fill(~m, fill)

    def run(scores: Tensor, dim: int = -1) -> tuple[Tensor, Tensor]:
        w = torch.softmax(scores, dim)
        return w @ v, w

    mistakes: dict[str, tuple[Tensor | None, Tensor | None]] = {
        "the scores are not divided by sqrt(d_k) (the missing 1/sqrt(d_k) scale)": run(masked(raw)),
        "the scores are divided by d_k; divide by sqrt(d_k)": run(masked(raw / d_k)),
        "the scores are scaled with d_v (the size of the values); the scale is 1/sqrt(d_k), d_k = q.shape[-1]": run(
            masked(raw / math.sqrt(d_v))
        ),
        "the scores are multiplied by sqrt(d_k); divide by it": run(masked(raw * math.sqrt(d_k))),
        "the scores are scaled with the number of keys m = k.shape[-2]; the scale is 1/sqrt(d_k), d_k = q.shape[-1]": run(
            masked(raw / math.sqrt(k.shape[-2]))
        ),
        "softmax over the queries axis (-2); each query's weights over the keys (axis -1) must sum to 1": run(
            masked(raw / math.sqrt(d_k)), dim=-2
        ),
        "the weights are the scaled scores before softmax": (
            (masked(raw / math.sqrt(d_k), 0.0)) @ v,
            masked(raw / math.sqrt(d_k), 0.0),
        ),
        "the scale is applied after the softmax (the weights are divided by sqrt(d_k), so they no longer sum to 1); "
        "divide the scores by sqrt(d_k) before the softmax": (
            (torch.softmax(masked(raw), -1) / math.sqrt(d_k)) @ v,
            torch.softmax(masked(raw), -1) / math.sqrt(d_k),
        ),
        "the scores are scaled with the number of queries n = q.shape[-2]; the scale is 1/sqrt(d_k), d_k = q.shape[-1]": run(
            masked(raw / math.sqrt(q.shape[-2]))
        ),
        _HALF_D_K: run(masked(raw / (d_k / 2))),
    }
    if q.dim() >= 3 and q.shape[0] not in (d_k, k.shape[-2], q.shape[-2]):
        mistakes[
            "the scores are scaled with the batch size, len(q) = q.shape[0]; the scale is 1/sqrt(d_k) with d_k = q.shape[-1], "
            "the last axis (count from the end: it works with and without a batch)"
        ] = run(masked(raw / math.sqrt(q.shape[0])))
    if mask is not None:
        scaled = raw / math.sqrt(d_k)
        mistakes["the mask is ignored: positions where mask is False must get weight 0"] = run(scaled)
        mistakes[
            "the mask is inverted: True means *may attend* here (as in F.scaled_dot_product_attention); "
            "fill -inf where the mask is False"
        ] = run(masked(scaled, m=~mask))
        mistakes["masked scores were set to 0, not -inf, so masked keys still get weight after softmax"] = run(
            masked(scaled, 0.0)
        )
        w_after = torch.softmax(scaled, -1) * mask
        mistakes["the mask was applied after softmax without renormalising, so rows no longer sum to 1"] = (w_after @ v, w_after)
        renormalised = w_after / w_after.sum(-1, keepdim=True)
        mistakes[
            "the mask was applied after the softmax and the weights renormalised: right in exact arithmetic, but when a "
            "masked key has a much larger score, the allowed keys' weights underflow to 0 and 0 / 0 gives NaN; fill the "
            "masked scores with -inf before the softmax, scores.masked_fill(~mask, float('-inf'))"
        ] = (renormalised @ v, renormalised)
        w_inf = torch.softmax(scaled, -1).masked_fill(~mask, float("-inf"))
        mistakes[
            "-inf was filled into the weights after the softmax; fill it into the scores before the softmax, "
            "so that the masked weights come out as exactly 0"
        ] = (w_inf @ v, w_inf)
        mistakes["the boolean mask was added to the scores; use scores.masked_fill(~mask, float('-inf'))"] = run(scaled + mask)
    mistakes["the scores use q in place of the keys (q @ q^T); the scores are q @ k.transpose(-2, -1)"] = (
        (None, torch.softmax(q @ q.transpose(-2, -1) / math.sqrt(d_k), -1)) if q.shape[-2] != k.shape[-2] else (None, None)
    )
    if v.shape[-2] == k.shape[-2] and v.shape[-1] == d_k:
        swapped = torch.softmax(masked(q @ v.transpose(-2, -1) / math.sqrt(d_k)), -1)
        mistakes["k and v are swapped: the scores compare q with the keys k, the weights average the values v"] = (
            swapped @ k,
            swapped,
        )
    return mistakes


@exercise("scaled dot-product attention")
def check_scaled_dot_product_attention(attention) -> None:
    """Check ``attention(q, k, v, mask=None) -> (out, weights)`` against ``F.scaled_dot_product_attention``."""
    cases: list[tuple[str, Tensor, Tensor, Tensor, Tensor | None]] = []
    q, k, v = (
        torch.randn(2, 3, 5, dtype=torch.float64),
        torch.randn(2, 4, 5, dtype=torch.float64),
        torch.randn(2, 4, 6, dtype=torch.float64),
    )
    cases.append(("q (2, 3, 5), k (2, 4, 5), v (2, 4, 6), no mask", q, k, v, None))
    mask = torch.rand(2, 3, 4) > 0.4
    mask[..., 0] = True  # every query may attend to at least one key
    mask[..., 1] = False  # and is blocked from at least one
    cases.append(("the same q, k, v with a boolean mask (2, 3, 4)", q, k, v, mask))
    n = 4
    x = torch.randn(2, 3, n, 5, dtype=torch.float64)
    cases.append(
        (
            "self-attention with heads, q = k (2, 3, 4, 5), v (2, 3, 4, 6), causal mask (4, 4)",
            x,
            x,
            torch.randn(2, 3, n, 6, dtype=torch.float64),
            torch.ones(n, n, dtype=torch.bool).tril(),
        )
    )
    # scores far beyond exp's range (float64 overflows above 709, float32 above 88): a naive exp(s) / sum(exp(s)) gives NaN
    q_big = torch.randn(1, 3, 5, dtype=torch.float64) * 600
    cases.append(("large float64 scores (up to about ±1000), q (1, 3, 5) * 600", q_big, k[:1], v[:1], None))
    q32, k32, v32 = torch.randn(2, 3, 5) * 60, torch.randn(2, 4, 5), torch.randn(2, 4, 6)
    cases.append(("float32 q (2, 3, 5) * 60, k (2, 4, 5), v (2, 4, 6): scores up to about ±100", q32, k32, v32, None))
    cases.append(("the same float32 q, k, v with the boolean mask (2, 3, 4)", q32, k32, v32, mask))

    passed_3d = False
    for label, q, k, v, mask in cases:
        try:
            result = call(attention, q, k, v, what=label) if mask is None else call(attention, q, k, v, mask, what=label)
        except ExerciseFailed as err:
            hint = _signature_hint(str(err), "def scaled_dot_product_attention(q, k, v, mask=None)")
            if hint:
                raise ExerciseFailed(f"{err}{hint}") from None
            if "Boolean value of Tensor with more than one value is ambiguous" in str(err):
                raise ExerciseFailed(
                    f"{err}. `if mask:` asks for the truth of a whole tensor; ask whether a mask was given at all: "
                    "`if mask is not None:`"
                ) from None
            if "multiplied" in str(err) or "size mismatch" in str(err) or "must match the size" in str(err):
                if passed_3d and q.dim() == 4:
                    raise ExerciseFailed(
                        f"{err}. Your function works for (batch, n, d) inputs but not with a head axis, (batch, heads, n, d): "
                        "count the axes from the end, k.transpose(-2, -1) (k.transpose(1, 2) swaps the heads and the keys "
                        "of a 4-D tensor) and softmax(dim=-1)"
                    ) from None
                raise ExerciseFailed(
                    f"{err}. The scores are q @ k.transpose(-2, -1), shape (..., n, m): transpose the last two axes "
                    "(k.T reverses every axis of a batched tensor), and the weights multiply v as a matrix product, "
                    "weights @ v (weights * v multiplies entry by entry)"
                ) from None
            raise
        passed_3d = passed_3d or q.dim() == 3
        if not (isinstance(result, tuple) and len(result) == 2):
            raise ExerciseFailed(f"with {label}: return a tuple (out, weights), got {type(result).__name__}")
        out, weights = result
        expected_out, expected_w = _sdpa_reference(q, k, v, mask)
        if (
            isinstance(out, Tensor)
            and out.shape == expected_w.shape
            and isinstance(weights, Tensor)
            and weights.shape == expected_out.shape
            and expected_out.shape != expected_w.shape
        ):
            raise ExerciseFailed(f"with {label}: out and weights are swapped; return (out, weights)")
        if isinstance(weights, Tensor) and weights.shape == expected_w.transpose(-2, -1).shape != expected_w.shape:
            expect_close(weights, expected_w.transpose(-2, -1), "weights", atol=1e-9)  # raises unless it is the transpose
            raise ExerciseFailed(
                f"with {label}: the weights are transposed: they should be (..., n_queries, n_keys), computed as q @ k^T"
            )
        mistakes = _sdpa_mistakes(q, k, v, mask)
        atol, rtol = _tolerance(q.dtype)
        big = "large" in label or "float32" in label
        hint = (
            _STABILITY_HINT
            if big
            else "subtract the row maximum inside softmax, and make sure every row has a key it may attend to"
        )
        expect_close(
            weights,
            expected_w,
            f"weights with {label}",
            atol=atol,
            rtol=rtol,
            mistakes={m: w for m, (_, w) in mistakes.items()},
            nonfinite_hint=hint,
            float32_path=True,
        )
        expect_close(
            out,
            expected_out,
            f"out with {label}",
            atol=atol * 10,
            rtol=rtol,
            mistakes={m: o for m, (o, _) in mistakes.items()},
            nonfinite_hint=hint,
            float32_path=True,
        )


def _tolerance(dtype: torch.dtype) -> tuple[float, float]:
    """(atol, rtol) for a comparison in ``dtype``: float32 keeps about 7 significant digits, float64 about 16."""
    return (1e-10, 1e-8) if dtype == torch.float64 else (2e-5, 1e-4)


@exercise("causal mask")
def check_causal_mask(causal_mask) -> None:
    """Check ``causal_mask(n)``: a boolean ``(n, n)`` tensor, ``True`` on and below the diagonal."""
    first_shape = None
    for n in (4, 5, 1):
        mask = expect_tensor(call(causal_mask, n, what=f"n={n}"), f"causal_mask({n})")
        expected = torch.ones(n, n, dtype=torch.bool).tril()
        got = tuple(mask.shape)
        if got != (n, n):
            if first_shape is not None and got == first_shape:
                raise ExerciseFailed(
                    f"causal_mask({n}) has shape {got}, the same as causal_mask(4): the size is hard-coded; "
                    "build the mask from the argument n, torch.ones(n, n, dtype=torch.bool).tril()"
                )
            if got in ((1, n, n), (1, 1, n, n)):
                raise ExerciseFailed(
                    f"causal_mask({n}) has shape {got}, with extra axes of size 1; return the (n, n) mask itself "
                    "(it broadcasts over batch and heads where it is used)"
                )
        expect_shape(mask, (n, n), f"causal_mask({n})")
        first_shape = got
        if mask.dtype != torch.bool:
            if mask.is_floating_point() and (torch.isinf(mask).any() or bool((mask <= -1e4).any())):
                raise ExerciseFailed(
                    f"causal_mask({n}) is an additive float mask (0 and -inf, or a large negative number); return the "
                    "boolean form, True = may attend: torch.ones(n, n, dtype=torch.bool).tril()"
                )
            if set(mask.unique().tolist()) <= {0, 1}:
                raise ExerciseFailed(
                    f"causal_mask({n}) holds 0s and 1s of dtype {mask.dtype}; return a boolean tensor (torch.bool): "
                    "masked_fill(~mask, ...) needs booleans (~ refuses a float mask and flips every bit of an integer "
                    "one: 1 becomes -2), so add .bool() or build it with dtype=torch.bool"
                )
            raise ExerciseFailed(
                f"causal_mask({n}) has dtype {mask.dtype}; return a boolean tensor (torch.bool), True = may attend"
            )
        if torch.equal(mask, expected):
            continue
        if torch.equal(mask, ~expected):
            raise ExerciseFailed(
                "the mask is inverted: True marks *blocked* positions here (nn.MultiheadAttention's convention); "
                "this course uses True = may attend, on and below the diagonal"
            )
        if torch.equal(mask, expected.T):
            raise ExerciseFailed(
                "True sits on and above the diagonal (triu): that lets a token see the future; use the lower triangle (tril)"
            )
        if torch.equal(mask, torch.ones(n, n, dtype=torch.bool).tril(-1)):
            raise ExerciseFailed("the diagonal is False: a token must be able to attend to itself (use tril(), not tril(-1))")
        if torch.equal(mask, torch.ones(n, n, dtype=torch.bool).triu(1)):
            raise ExerciseFailed(
                "True above the diagonal marks blocked positions (nn.MultiheadAttention's convention); here True = may attend"
            )
        wrong = [tuple(int(i) for i in ij) for ij in torch.nonzero(mask != expected)[:3]]
        raise ExerciseFailed(f"causal_mask({n}) is wrong at (query, key) = {wrong}: query i may attend to keys 0..i")


# ---------------------------------------------------------------- multi-head attention


def _torch_mha(module: nn.Module, d_model: int, heads: int) -> nn.MultiheadAttention:
    bias = module.w_q.bias is not None
    ref = nn.MultiheadAttention(d_model, heads, bias=bias, batch_first=True).double()
    with torch.no_grad():
        ref.in_proj_weight.copy_(torch.cat([module.w_q.weight, module.w_k.weight, module.w_v.weight]))
        ref.out_proj.weight.copy_(module.w_o.weight)
        if bias:
            ref.in_proj_bias.copy_(torch.cat([module.w_q.bias, module.w_k.bias, module.w_v.bias]))
            ref.out_proj.bias.copy_(module.w_o.bias)
    return ref


def _mha_variant(
    module: nn.Module, heads: int, query: Tensor, key: Tensor, value: Tensor, mask: Tensor | None, mistake: str
) -> tuple[Tensor, Tensor]:
    """Multi-head attention with one deliberate mistake, using the student's weights."""
    b, n, d = query.shape
    d_k = d // heads

    def split(x: Tensor, length: int) -> Tensor:
        if mistake == "no_transpose_split":
            return x.reshape(b, heads, length, d_k)
        return x.view(b, length, heads, d_k).transpose(1, 2)

    if mistake == "keys_from_query":
        key = query
    if mistake == "kv_swapped":
        key, value = value, key
    if mistake == "values_from_key":
        value = key
    w_q, w_k = (module.w_k, module.w_q) if mistake == "w_q_w_k_swapped" else (module.w_q, module.w_k)
    q, k, v = split(w_q(query), n), split(w_k(key), key.shape[1]), split(module.w_v(value), value.shape[1])
    if k.shape[-2] != v.shape[-2]:
        return None, None
    scale = {"no_scale": 1.0, "sqrt_d_model": math.sqrt(d), "d_k": d_k, "sqrt_heads": math.sqrt(heads), "half_d_k": d_k / 2}.get(
        mistake, math.sqrt(d_k)
    )
    scores = q @ k.transpose(-2, -1) / scale
    if mask is not None and mistake not in ("mask_ignored", "mask_after_softmax"):
        m = mask.unsqueeze(1) if mistake == "mask_unsqueezed" else mask
        scores = scores.masked_fill(m if mistake == "mask_inverted" else ~m, 0.0 if mistake == "mask_zero" else float("-inf"))
    weights = torch.softmax(scores, {"softmax_queries": -2, "softmax_heads": 1}.get(mistake, -1))
    if mistake == "mask_after_softmax" and mask is not None:
        weights = weights.masked_fill(~mask, 0.0)  # the scores were left unmasked above
    out = weights @ v
    if mistake == "heads_reversed":
        out = out.flip(1)
    if mistake == "no_transpose_merge":
        merged = out.reshape(b, n, d)
    else:
        merged = out.transpose(1, 2).reshape(b, n, d)
    return (merged if mistake == "no_w_o" else module.w_o(merged)), weights


_MHA_MISTAKES = {
    "no_transpose_split": "heads split without a transpose: reshaping (batch, n, d_model) straight to (batch, heads, n, d_k) "
    "mixes tokens across heads; view as (batch, n, heads, d_k), then transpose(1, 2)",
    "no_transpose_merge": "heads merged without a transpose: (batch, heads, n, d_k) reshaped straight to (batch, n, d_model) "
    "mixes heads across tokens; transpose(1, 2) first, then reshape",
    "no_scale": "the scores are not divided by sqrt(d_k) (the missing 1/sqrt(d_k) scale)",
    "sqrt_d_model": "the scores are divided by sqrt(d_model); each head's scale is 1/sqrt(d_k) with d_k = d_model / num_heads",
    "d_k": "the scores are divided by d_k; divide by sqrt(d_k)",
    "softmax_queries": "softmax over the queries axis; each query's weights over the keys (the last axis) must sum to 1",
    "no_w_o": "the output projection w_o is not applied after merging the heads",
    "mask_ignored": "the mask is ignored: positions where mask is False must get weight 0",
    "mask_inverted": "the mask is inverted: True means *may attend* (F.scaled_dot_product_attention's convention, "
    "the opposite of nn.MultiheadAttention's attn_mask)",
    "mask_zero": "masked scores were set to 0, not -inf, so masked keys still get weight after softmax: "
    "scores.masked_fill(~mask, float('-inf'))",
    "keys_from_query": "the keys are computed from `query`; they come from `key`: k = self.w_k(key)",
    "kv_swapped": "key and value are swapped: the keys are self.w_k(key), the values self.w_v(value)",
    "half_d_k": _HALF_D_K,
    "values_from_key": "the values are computed from `key`; they come from `value`: v = self.w_v(value)",
    "w_q_w_k_swapped": "w_q and w_k are swapped: the queries are self.w_q(query), the keys self.w_k(key)",
    "sqrt_heads": "the scores are divided by sqrt(num_heads); each head's scale is 1/sqrt(d_k) with d_k = d_model / num_heads",
    "softmax_heads": "softmax over the heads axis (dim=1); each query's weights over the keys (the last axis, dim=-1) "
    "must sum to 1",
    "heads_reversed": "the heads are merged in reverse order: token t must get heads 0, 1, ... side by side, "
    "out.transpose(1, 2).reshape(batch, n, d_model)",
    "mask_after_softmax": "the mask was applied after the softmax (weights set to 0 without renormalising), so the "
    "rows no longer sum to 1: fill the masked *scores* with -inf before the softmax",
    "mask_unsqueezed": "the mask got an extra axis (mask.unsqueeze(1)), which lines its rows up with the heads; an (n, m) "
    "mask already broadcasts over batch and heads: use it as it is",
}

_MHA_DROPOUT_HINT = (
    "dropout is left active. F.dropout(w, p) drops at random even in eval mode (its default is training=True); "
    "use an nn.Dropout module created in __init__, which follows .eval(), or leave dropout out"
)


@exercise("multi-head attention")
def check_multi_head_attention(MultiHeadAttention) -> None:
    """Check a ``MultiHeadAttention(d_model, num_heads)`` class against ``nn.MultiheadAttention`` with copied weights."""
    if is_unattempted(MultiHeadAttention):
        raise NotAttempted("MultiHeadAttention is still `...`")
    d_model, heads = 18, 3  # d_k = 6: sqrt(d_k), d_k / 2, sqrt(d_model) and sqrt(num_heads) all differ
    module = call(MultiHeadAttention, d_model, heads, what=f"d_model={d_model}, num_heads={heads}")
    if not isinstance(module, nn.Module):
        raise ExerciseFailed(f"MultiHeadAttention({d_model}, {heads}) should be an nn.Module, got {type(module).__name__}")
    for name in ("w_q", "w_k", "w_v", "w_o"):
        layer = getattr(module, name, None)
        if layer is None:
            raise ExerciseFailed(
                f"the module has no attribute `{name}`: keep the four projections as nn.Linear attributes w_q, w_k, w_v, w_o"
            )
        if not isinstance(layer, nn.Linear):
            raise ExerciseFailed(f"`{name}` should be an nn.Linear, got {type(layer).__name__}")
        expect_shape(layer.weight, (d_model, d_model), f"{name}.weight")
        if layer.bias is None:
            raise ExerciseFailed(
                f"`{name}` has no bias (nn.Linear(..., bias=False)); the projections of this exercise have biases, "
                "as nn.MultiheadAttention's: nn.Linear(d_model, d_model)"
            )
    module64 = module.double().eval()

    query = torch.randn(2, 3, d_model, dtype=torch.float64)
    memory = torch.randn(2, 4, d_model, dtype=torch.float64)
    values = torch.randn(2, 4, d_model, dtype=torch.float64)
    causal = torch.ones(3, 3, dtype=torch.bool).tril()
    cases = [
        ("cross-attention: query (2, 3, 18), key = value (2, 4, 18), no mask", query, memory, memory, None, torch.float64),
        (
            "cross-attention: query (2, 3, 18), key (2, 4, 18) and a different value (2, 4, 18)",
            query,
            memory,
            values,
            None,
            torch.float64,
        ),
        ("self-attention: x (2, 3, 18) with a causal mask (3, 3)", query, query, query, causal, torch.float64),
        # scores of several hundred: a naive exp(s) / sum(exp(s)) overflows float32 (above 88)
        (
            "float32 self-attention: x (2, 3, 18) * 40 (scores of several hundred) with a causal mask (3, 3)",
            query.float() * 40,
            query.float() * 40,
            query.float() * 40,
            causal,
            torch.float32,
        ),
    ]
    with torch.no_grad():
        for label, q_in, k_in, v_in, mask, dtype in cases:
            module = module64.to(dtype)
            ref = _torch_mha(module, d_model, heads).to(dtype).eval()
            args = (q_in, k_in, v_in) if mask is None else (q_in, k_in, v_in, mask)
            try:
                result = call(module, *args, what=label)
            except ExerciseFailed as err:
                message = str(err)
                if label.startswith("cross") and "raised" in message and any(w in message for w in ("size", "shape", "match")):
                    raise ExerciseFailed(
                        f"{message}. Here the query has 3 tokens and key and value have 4: if the keys or values "
                        "are computed from `query`, the shapes do not fit; the keys come from `key`, "
                        "k = self.w_k(key), the values from `value`, v = self.w_v(value)"
                    ) from None
                raise
            again = call(module, *args, what=label)
            if not (isinstance(result, tuple) and len(result) == 2):
                raise ExerciseFailed(f"with {label}: forward should return a tuple (out, weights), got {type(result).__name__}")
            out, weights = result
            if isinstance(again, tuple) and len(again) == 2:
                expect_deterministic(out, again[0], f"out with {label}", _MHA_DROPOUT_HINT)
            want_out, want_w = ref(q_in, k_in, v_in, attn_mask=None if mask is None else ~mask, average_attn_weights=False)
            weights = expect_tensor(weights, "weights")
            if weights.shape == want_w.mean(1).shape:
                which = (
                    "averaged over heads"
                    if torch.allclose(weights.double(), want_w.double().mean(1), atol=1e-4)
                    else "one matrix per batch element, not one per head (a single head's weights?)"
                )
                raise ExerciseFailed(
                    f"with {label}: weights have shape {tuple(weights.shape)}, {which}; return the per-head weights "
                    f"(batch, heads, n, m) = {tuple(want_w.shape)}"
                )
            variants = {msg: _mha_variant(module, heads, q_in, k_in, v_in, mask, key) for key, msg in _MHA_MISTAKES.items()}
            atol, rtol = _tolerance(dtype)
            hint = _STABILITY_HINT if dtype == torch.float32 else ""
            expect_close(
                weights,
                want_w,
                f"weights with {label}",
                atol=atol,
                rtol=rtol,
                mistakes={m: w for m, (_, w) in variants.items()},
                nonfinite_hint=hint,
            )
            expect_close(
                out,
                want_out,
                f"out with {label}",
                atol=atol * 100 if dtype == torch.float32 else atol,
                rtol=rtol,
                mistakes={m: o for m, (o, _) in variants.items()},
                nonfinite_hint=hint,
            )
