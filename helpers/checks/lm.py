"""Checks of notebook 11 (a decoder-only language model): RMSNorm, RoPE, GQA key/value sharing, the KV-cache update.

Each check compares the student's function with PyTorch or with an independent
computation on fresh random float64 inputs, and names the typical mistakes:
the norm over the wrong axis, the wrong pairs of features rotated, K/V heads
repeated in the wrong order, the cache appended on the wrong axis.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from helpers.checks._core import ExerciseFailed, call, exercise, expect_close, expect_tensor
from helpers.models.lm import apply_rope_complex, rope_angles

__all__ = ["check_rms_norm", "check_apply_rope", "check_repeat_kv", "check_cache_update", "check_top_p_filter"]


# ---------------------------------------------------------------- RMSNorm


def _rms_mistakes(x: Tensor, w: Tensor, eps: float) -> dict[str, Tensor]:
    def over(dim: int) -> Tensor:
        return x / torch.sqrt(x.pow(2).mean(dim, keepdim=True) + eps) * w

    centred = x - x.mean(-1, keepdim=True)
    return {
        "the mean of the squares is taken over the wrong axis: RMSNorm normalises each token over its features, "
        "mean(dim=-1, keepdim=True)": over(-2),
        "the mean of the squares is taken over the batch axis (dim=0); take it over the features, dim=-1": over(0),
        "the squares are summed, not averaged: the root MEAN square is x.pow(2).mean(-1, keepdim=True)": x
        / torch.sqrt(x.pow(2).sum(-1, keepdim=True) + eps)
        * w,
        "the square root is missing: divide by sqrt(mean(x**2) + eps)": x / (x.pow(2).mean(-1, keepdim=True) + eps) * w,
        "the mean is subtracted: that is LayerNorm; RMSNorm only divides by the root mean square": centred
        / torch.sqrt(centred.pow(2).mean(-1, keepdim=True) + eps)
        * w,
        "the gain `weight` is not applied: multiply the normalised x by weight": over(-1) / w,
        "the result is multiplied by the root mean square instead of divided by it": x
        * torch.sqrt(x.pow(2).mean(-1, keepdim=True) + eps)
        * w,
        "eps is added outside the square root: sqrt(mean(x**2) + eps), as nn.RMSNorm": x
        / (torch.sqrt(x.pow(2).mean(-1, keepdim=True)) + eps)
        * w,
    }


@exercise("RMSNorm")
def check_rms_norm(rms_norm) -> None:
    """Check ``rms_norm(x, weight, eps) -> Tensor`` against ``nn.RMSNorm`` on (2, 3, 6) and (4, 5) inputs."""
    for shape, eps in (((2, 3, 6), 1e-6), ((4, 5), 0.5)):
        d = shape[-1]
        x = torch.randn(*shape, dtype=torch.float64) * 2.0 + 0.5
        torch_norm = nn.RMSNorm(d, eps=eps).double()
        with torch.no_grad():
            torch_norm.weight.uniform_(0.5, 1.5)
        w = torch_norm.weight.detach().clone()
        out = call(rms_norm, x.clone(), w.clone(), eps, what=f"x {shape}, weight ({d},), eps={eps}")
        with torch.no_grad():
            expected = torch_norm(x)
        expect_close(out, expected, f"rms_norm on x {shape}", atol=1e-10, rtol=1e-8, mistakes=_rms_mistakes(x, w, eps))


# ---------------------------------------------------------------- RoPE


def _rope_mistakes(x: Tensor, angles: Tensor) -> dict[str, Tensor]:
    d = x.shape[-1]
    cos, sin = angles.cos(), angles.sin()
    first, second = x[..., : d // 2], x[..., d // 2 :]
    half_split = torch.cat([first * cos - second * sin, first * sin + second * cos], -1)
    even, odd = x[..., 0::2], x[..., 1::2]
    not_interleaved = torch.cat([even * cos - odd * sin, even * sin + odd * cos], -1)
    return {
        "the pairs rotated are the wrong features: (x[i], x[i + d/2]) is the 'half-split' layout; this course rotates "
        "neighbouring features (x[2i], x[2i+1]), as the complex-number form does": half_split,
        "each pair is rotated the wrong way (by -angle): the rotated pair is (a cos - b sin, a sin + b cos)": apply_rope_complex(
            x, -angles
        ),
        "the rotated pairs are not put back in place: the even results belong at features 0, 2, 4, ... and the odd at "
        "1, 3, 5, ... (stack them on a new last axis, then flatten), not concatenated": not_interleaved,
        "the positions are reversed: position t is rotated by angles[t]": apply_rope_complex(x, angles.flip(0)),
        "x is returned unchanged: rotate each pair by its angle": x,
    }


@exercise("rotary position embedding (RoPE)")
def check_apply_rope(apply_rope) -> None:
    """Check ``apply_rope(x, angles)`` against a complex-number implementation, and its relative-position property."""
    for shape in ((2, 3, 5, 8), (4, 6)):
        n, d = shape[-2], shape[-1]
        x = torch.randn(*shape, dtype=torch.float64)
        angles = rope_angles(n, d, base=100.0) + 0.3  # (n, d/2); a non-zero first angle shows a missing rotation
        out = call(apply_rope, x.clone(), angles.clone(), what=f"x {shape} and angles ({n}, {d // 2})")
        expect_close(
            out,
            apply_rope_complex(x, angles),
            f"apply_rope on x {shape}",
            atol=1e-10,
            rtol=1e-8,
            mistakes=_rope_mistakes(x, angles),
        )
    # the property RoPE is for: q at position s and k at position t score the same for every shift of both
    q, k = torch.randn(8, dtype=torch.float64), torch.randn(8, dtype=torch.float64)
    scores = []
    for shift in (0, 5, 11):
        angles = rope_angles(20, 8, base=100.0)
        rq = expect_tensor(call(apply_rope, q.expand(20, 8).clone(), angles.clone(), what="q (20, 8)"), "apply_rope(q)")
        rk = expect_tensor(call(apply_rope, k.expand(20, 8).clone(), angles.clone(), what="k (20, 8)"), "apply_rope(k)")
        scores.append((rq[3 + shift] @ rk[1 + shift]).item())
    if max(scores) - min(scores) > 1e-9:
        raise ExerciseFailed(
            f"the score of q at position 3 + s and k at position 1 + s changes with s ({scores}); a rotation by the "
            "position makes it depend on the offset only"
        )


# ---------------------------------------------------------------- GQA


@exercise("grouped-query attention: sharing the key/value heads")
def check_repeat_kv(repeat_kv) -> None:
    """Check ``repeat_kv(kv, groups)``: ``(b, g, n, d)`` -> ``(b, g * groups, n, d)``, against
    ``F.scaled_dot_product_attention(..., enable_gqa=True)``."""
    b, g, groups, n, d = 2, 3, 2, 5, 4
    kv = torch.randn(b, g, n, d, dtype=torch.float64)
    out = expect_tensor(call(repeat_kv, kv.clone(), groups, what=f"kv ({b}, {g}, {n}, {d}) and groups={groups}"), "repeat_kv")
    expected = kv.repeat_interleave(groups, dim=1)
    mistakes = {
        "the heads are repeated in the wrong order: query head j reads key/value head j // groups, so each K/V head "
        "is repeated for consecutive query heads (kv.repeat_interleave(groups, dim=1)), not the whole set tiled "
        "(kv.repeat(1, groups, 1, 1))": kv.repeat(1, groups, 1, 1),
        "the repetition is on the wrong axis (the sequence axis, dim=2); repeat the heads, dim=1": kv.repeat_interleave(
            groups, dim=2
        ),
    }
    if out.shape == (b, g, n * groups, d) or out.shape == (b, g, n, d * groups):
        axis = 2 if out.shape[2] != n else 3
        raise ExerciseFailed(
            f"repeat_kv returned shape {tuple(out.shape)}: the repetition is on axis {axis}; repeat the heads, dim=1"
        )
    expect_close(out, expected, "repeat_kv(kv, groups)", atol=0.0, rtol=0.0, mistakes=mistakes)
    # the same attention as PyTorch's grouped-query attention
    q = torch.randn(b, g * groups, n, d, dtype=torch.float64)
    k, v = torch.randn(b, g, n, d, dtype=torch.float64), torch.randn(b, g, n, d, dtype=torch.float64)
    ours = F.scaled_dot_product_attention(q, call(repeat_kv, k, groups), call(repeat_kv, v, groups), is_causal=True)
    theirs = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
    expect_close(ours, theirs, "attention with your repeat_kv vs enable_gqa=True", atol=1e-10, rtol=1e-8)


# ---------------------------------------------------------------- KV cache


@exercise("KV-cache update")
def check_cache_update(cache_update) -> None:
    """Check ``cache_update(cache_k, cache_v, k, v) -> (k_all, v_all)``: append along the sequence axis (dim 2)."""
    b, g, d = 2, 3, 5
    for m, n in ((2, 2), (4, 1), (0, 3)):  # equal sizes first, so a concatenation on the wrong axis runs and is named
        ck, cv = torch.randn(b, g, m, d, dtype=torch.float64), torch.randn(b, g, m, d, dtype=torch.float64)
        k, v = torch.randn(b, g, n, d, dtype=torch.float64), torch.randn(b, g, n, d, dtype=torch.float64)
        what = f"a cache of {m} positions ({b}, {g}, {m}, {d}) and {n} new ({b}, {g}, {n}, {d})"
        result = call(cache_update, ck.clone(), cv.clone(), k.clone(), v.clone(), what=what)
        if not isinstance(result, (tuple, list)) or len(result) != 2:
            raise ExerciseFailed(f"cache_update returned {type(result).__name__}; return the pair (k_all, v_all)")
        k_all, v_all = (expect_tensor(t, name) for t, name in zip(result, ("k_all", "v_all"), strict=True))
        right_k, right_v = torch.cat([ck, k], 2), torch.cat([cv, v], 2)
        if k_all.shape == right_v.shape and m and torch.equal(k_all, right_v):
            raise ExerciseFailed("the keys and the values are swapped: return (keys, values) in that order")
        for name, got, old, new, right in (("k_all", k_all, ck, k, right_k), ("v_all", v_all, cv, v, right_v)):
            mistakes = {
                "the new positions are put before the cached ones: append them at the end, "
                "torch.cat([cache, new], dim=2)": torch.cat([new, old], 2),
                "the cache is dropped: return the cached positions followed by the new ones": new,
                "the new positions are not added to the cache: torch.cat([cache, new], dim=2)": old,
            }
            if got.dim() == 4 and got.shape != right.shape and (got.shape[1] != g or got.shape[3] != d):
                axis = 1 if got.shape[1] != g else 3
                raise ExerciseFailed(
                    f"{name} has shape {tuple(got.shape)}: the cache is appended on axis {axis} "
                    f"({'the heads' if axis == 1 else 'the features'}); append on the sequence axis, dim=2"
                )
            expect_close(got, right, f"{name} (cache of {m}, {n} new)", atol=0.0, rtol=0.0, mistakes=mistakes if m else None)


# ---------------------------------------------------------------- top-p sampling


def _nucleus(logits: Tensor, p: float, kind: str = "right") -> Tensor:
    """Which tokens a top-p filter keeps ``(..., vocab)`` bool, the right way or a typical wrong one."""
    probs = logits.softmax(-1)
    descending = kind != "ascending"
    sorted_probs, order = probs.sort(dim=-1, descending=descending)
    cumulative = sorted_probs.cumsum(0 if kind == "axis0" else -1)
    if kind == "exclusive":
        keep_sorted = cumulative < p
    else:
        keep_sorted = cumulative - sorted_probs < p
    if kind == "unsorted":
        return keep_sorted  # the mask of sorted positions, applied to the original order
    if kind == "own_prob":
        return probs >= p
    if kind == "logits_cumsum":
        s, o = logits.sort(dim=-1, descending=True)
        ks = s.cumsum(-1) - s < p
        return ks.scatter(-1, o, ks)
    return keep_sorted.scatter(-1, order, keep_sorted)


_TOP_P_MISTAKES = {
    "exclusive": "the token that takes the total past p is dropped; the nucleus is the smallest set of most likely "
    "tokens whose probabilities reach p, so it includes that token (keep a token when the probability of the "
    "tokens ranked above it is below p)",
    "ascending": "the least likely tokens are kept: sort the probabilities in descending order",
    "unsorted": "the mask is computed in sorted order but applied to the logits in their original order: scatter it "
    "back to the original positions (mask.scatter(-1, order, mask)) or index with the sort's order",
    "axis0": "the cumulative sum runs over the wrong axis (the batch); sum over the vocabulary, dim=-1",
    "own_prob": "each token's own probability is compared with p; top-p compares the cumulative probability of the "
    "most likely tokens",
    "logits_cumsum": "the cumulative sum is taken over the logits; take it over the probabilities, softmax(logits)",
}


@exercise("top-p (nucleus) filter")
def check_top_p_filter(top_p_filter) -> None:
    """Check ``top_p_filter(logits, p)``: the logits with ``-inf`` outside the nucleus, against ``filter_logits``."""
    logits = torch.randn(4, 12, dtype=torch.float64) * 1.5  # (4, 12)
    logits[1] = torch.linspace(2.0, -2.0, 12, dtype=torch.float64)  # a row already sorted
    for p in (0.5, 0.9):
        out = expect_tensor(call(top_p_filter, logits.clone(), p, what=f"logits (4, 12) and p={p}"), "the filtered logits")
        if out.dtype == torch.bool:
            raise ExerciseFailed(
                "top_p_filter returned a boolean mask; return the logits with -inf for the dropped tokens "
                "(logits.masked_fill(~keep, float('-inf')))"
            )
        if tuple(out.shape) != tuple(logits.shape):
            raise ExerciseFailed(f"the filtered logits have shape {tuple(out.shape)}, expected {tuple(logits.shape)}")
        if torch.isnan(out).any():
            raise ExerciseFailed("the filtered logits contain NaN; mark dropped tokens with float('-inf')")
        kept = torch.isfinite(out)
        if bool((out == float("inf")).any()):
            raise ExerciseFailed("some logits are +inf; dropped tokens get -inf (they must get probability 0)")
        right = _nucleus(logits, p)
        if not torch.equal(kept, right):
            for kind, message in _TOP_P_MISTAKES.items():
                if torch.equal(kept, _nucleus(logits, p, kind)):
                    raise ExerciseFailed(f"with p={p}: {message}")
            if not kept.any(-1).all():
                raise ExerciseFailed(f"with p={p}, a row keeps no token at all; the most likely token is always kept")
            rows = [i for i in range(len(kept)) if not torch.equal(kept[i], right[i])]
            raise ExerciseFailed(
                f"with p={p}, row {rows[0]} keeps tokens {torch.nonzero(kept[rows[0]]).flatten().tolist()}, expected "
                f"{torch.nonzero(right[rows[0]]).flatten().tolist()} (the most likely tokens until their probabilities reach p)"
            )
        if not torch.allclose(out[kept], logits[kept], atol=1e-12, rtol=0.0):
            if torch.allclose(out[kept], logits.softmax(-1)[kept], atol=1e-9):
                raise ExerciseFailed(
                    "the kept entries are probabilities; return the logits themselves (sampling applies softmax)"
                )
            raise ExerciseFailed(
                "the kept tokens' logits were changed; leave them as they are and set only the dropped ones to -inf"
            )
