"""Checks of notebook 11 (a decoder-only language model): the next-token loss and the generation loop, the parts of
the 2025 block (RMSNorm, RoPE, sharing the key/value heads, SwiGLU), the sampling filters (temperature and top-k,
top-p) and the KV cache (attention of the newest positions over the cache, the cache update).

The loss is compared on random logits with the cross-entropy of the shifted window, and every typical slip (no shift,
the shift the wrong way, a wrap-around roll, logits and targets flattened differently, a sum, a mean over one axis only,
probabilities or raw logits given to the wrong function, bits instead of nats...) is named. The generation loop runs on
toy models: one whose next token is certain (the structure: cropping, the last position, appending, the batch) and one
with a fixed distribution sampled 8,000 times (the sampling: softmax of the filtered logits, not the logits, not the
argmax, not a softmax over the batch); the frequencies are within 0.035 of the probabilities for a right answer.

Each check compares the learner's function with PyTorch or an independent computation on fresh random float64
inputs, and names the typical mistakes. Tolerances follow the precision an answer may legitimately compute in:
the notebook's models are float32, so code that computes in float32 (LLaMA's RMSNorm, a complex64 RoPE) passes on
float64 inputs too, while every named mistake is made to differ by far more than float32 rounding (tiny-norm rows
and a large eps, so that a missing eps shows). A result that is off by the rounding of 16-bit arithmetic is named
as a precision problem; a result returned in another dtype than its input is named as such. The parts a model
trains with must also pass gradients through (no ``.detach()``, ``.item()`` or numpy inside).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from helpers.checks._core import ExerciseFailed, call_attempt, exercise, expect_close, expect_tensor
from helpers.models import lm as _lm
from helpers.models.lm import apply_rope_complex, rope_angles

__all__ = [
    "check_rms_norm",
    "check_apply_rope",
    "check_repeat_kv",
    "check_swiglu",
    "check_temperature_top_k",
    "check_top_p_filter",
    "check_cached_attention",
    "check_cache_update",
    "check_next_token_loss",
    "check_sample",
]

#: Tolerance for every part: float32's rounding is legitimate (the models are float32); each named mistake is far off.
ATOL, RTOL = 1e-5, 1e-5
_LOW = (torch.bfloat16, torch.float16)


# ---------------------------------------------------------------- shared helpers


def _short(dtype: torch.dtype) -> str:
    return str(dtype).replace("torch.", "")


def _call(fn: Callable, *args, what: str, hints: Mapping[str, str] | None = None):
    """``call``, with a hint appended to the error message of the learner's code when it contains a known phrase."""
    try:
        return call_attempt(fn, *args, what=what)
    except ExerciseFailed as err:
        text = str(err)
        for phrase, hint in (hints or {}).items():
            if phrase in text:
                raise ExerciseFailed(f"{text}. {hint}") from None
        raise


def _expect(
    actual: object,
    expected: Tensor,
    name: str,
    mistakes: Mapping[str, Tensor | None] | None = None,
    *,
    dtype: torch.dtype,
    low: Callable[[torch.dtype], Tensor] | None = None,
    atol: float = ATOL,
    rtol: float = RTOL,
    nonfinite_hint: str = "",
) -> Tensor:
    """Compare at float32's tolerance, name the mistakes; then name a 16-bit rounding error and a changed dtype.

    ``low(dtype)`` recomputes the reference in a 16-bit dtype: an answer off by about as much as that is named as a
    precision problem rather than as an unexplained difference.
    """
    actual = expect_tensor(actual, name)
    try:
        expect_close(actual, expected, name, atol=atol, rtol=rtol, mistakes=mistakes, nonfinite_hint=nonfinite_hint)
    except ExerciseFailed as err:
        if low is not None and "differs from the reference" in str(err) and actual.shape == expected.shape:
            error = (actual.detach().to("cpu", torch.float64) - expected.double()).abs().max().item()
            for low_dtype in _LOW:
                low_error = (low(low_dtype).double() - expected.double()).abs().max().item()
                if math.isfinite(error) and error <= 4 * low_error:
                    raise ExerciseFailed(
                        f"{name} is off by up to {error:.1g}: the size of {_short(low_dtype)}'s rounding (the reference "
                        f"computed in {_short(low_dtype)} is off by {low_error:.1g}), far more than float32's: a precision "
                        "problem. Compute in float32 or in the inputs' own dtype, not in 16-bit floats"
                    ) from None
        raise
    if actual.dtype != dtype:
        raise ExerciseFailed(
            f"{name} is {_short(actual.dtype)} for {_short(dtype)} inputs: return it in the input's dtype "
            "(`.to(x.dtype)` or `.type_as(x)`), since the model's next layer multiplies it with weights of that dtype"
        )
    return actual


def _expect_gradients(
    fn: Callable,
    reference: Callable,
    inputs: Sequence[Tensor],
    names: Sequence[str],
    title: str,
    extra: Sequence = (),
) -> None:
    """The learner's function must pass gradients to every input, equal to the reference's (at float32's tolerance).

    ``fn(*inputs, *extra)``: ``inputs`` require gradients, ``extra`` (eps, groups, the angles) do not.
    """
    ours = [t.detach().clone().requires_grad_() for t in inputs]
    theirs = [t.detach().clone().requires_grad_() for t in inputs]
    with torch.enable_grad():
        out = _call(fn, *ours, *extra, what="inputs that require gradients (as in training)")
        if not isinstance(out, Tensor) or not out.requires_grad:
            raise ExerciseFailed(
                f"{title} returns a result without gradients (a `.detach()`, `.item()`, numpy or `torch.no_grad()` "
                "inside?): the model could not learn through it. Use torch operations only"
            )
        expected = reference(*theirs, *extra)
        upstream = torch.randn(expected.shape, dtype=expected.dtype)
        (out.double() * upstream).sum().backward()
        (expected * upstream).sum().backward()
    for name, a, b in zip(names, ours, theirs, strict=True):
        if a.grad is None:
            raise ExerciseFailed(
                f"no gradient reaches `{name}` through your {title}: a `.detach()`, `.data` or a copy through numpy cuts "
                "it off, and the model could not learn that input's weights"
            )
        if not torch.allclose(a.grad.double(), b.grad.double(), atol=1e-4, rtol=1e-4):
            raise ExerciseFailed(
                f"the gradient with respect to `{name}` differs from the reference's: the forward pass is "
                "right, so something non-differentiable replaces part of it (an in-place change of a "
                "tensor autograd still needs?)"
            )


# ---------------------------------------------------------------- RMSNorm


def _rms(x: Tensor, w: Tensor, eps: float, dim: int | tuple[int, ...] = -1) -> Tensor:
    return x / torch.sqrt(x.pow(2).mean(dim, keepdim=True) + eps) * w


def _rms_mistakes(x: Tensor, w: Tensor, eps: float, small_eps_passed: bool = False) -> dict[str, Tensor | None]:
    """The typical wrong outputs. ``small_eps_passed``: the answer was right with eps=1e-6, so a result that ignores a
    large eps uses a hard-coded small one rather than none."""
    ms = x.pow(2).mean(-1, keepdim=True)  # (..., 1)
    centred = x - x.mean(-1, keepdim=True)
    no_keepdim = x / torch.sqrt(x.pow(2).mean(-1) + eps)[..., None, :] * w if x.shape[-1] == x.shape[-2] else None
    ignored = (
        f"eps is hard-coded (a small constant such as 1e-6) instead of the `eps` argument: right for eps=1e-6, but this "
        f"call passed eps={eps:g}; use the argument, sqrt(mean(x**2) + eps)"
    )
    mistakes: dict[str, Tensor | None] = {ignored: x / torch.sqrt(ms) * w} if small_eps_passed else {}
    mistakes |= {
        "eps is missing: the root mean square must be sqrt(mean(x**2) + eps); without eps a row of tiny features is "
        "blown up (here a row whose mean square is about eps comes out 1.4 times too large) and an all-zero row "
        "divides by 0": x / torch.sqrt(ms) * w,
        "the mean of the squares is taken over the wrong axis: RMSNorm normalises each token over its features, "
        "mean(dim=-1, keepdim=True)": _rms(x, w, eps, -2),
        "the mean of the squares is taken over the batch axis (dim=0); take it over the features, dim=-1": _rms(x, w, eps, 0),
        "the mean of the squares is taken over the last two axes; each token is normalised over its own features "
        "only, mean(dim=-1, keepdim=True)": _rms(x, w, eps, (-2, -1)),
        "the mean lost its axis (keepdim=False), so the (..., d) features are divided by a (...,) row of means "
        "broadcast along the wrong axis: use x.pow(2).mean(-1, keepdim=True)": no_keepdim,
        "the squares are summed, not averaged: the root MEAN square is x.pow(2).mean(-1, keepdim=True)": x
        / torch.sqrt(x.pow(2).sum(-1, keepdim=True) + eps)
        * w,
        "this is L2 normalisation, x / ||x|| (F.normalize): the L2 norm is sqrt(d) times the root mean square; "
        "divide by sqrt(mean(x**2) + eps)": x / x.norm(dim=-1, keepdim=True) * w,
        "the square root is missing: divide by sqrt(mean(x**2) + eps)": x / (ms + eps) * w,
        "the features are divided by the mean of their absolute values; RMSNorm divides by the root of the mean of "
        "their squares, sqrt(mean(x**2) + eps)": x / (x.abs().mean(-1, keepdim=True) + eps) * w,
        "the features are divided by the mean of their absolute values (without eps); RMSNorm divides by "
        "sqrt(mean(x**2) + eps)": x / x.abs().mean(-1, keepdim=True) * w,
        "the mean is subtracted: that is LayerNorm; RMSNorm only divides by the root mean square": centred
        / torch.sqrt(centred.pow(2).mean(-1, keepdim=True) + eps)
        * w,
        "the features are divided by their standard deviation (x.std or x.var): that subtracts the mean inside; "
        "RMSNorm divides by the root of the mean of the squares, sqrt(x.pow(2).mean(-1, keepdim=True) + eps)": x
        / torch.sqrt(x.var(-1, unbiased=False, keepdim=True) + eps)
        * w,
        "the features are divided by their (unbiased) standard deviation, x.std(-1): RMSNorm divides by "
        "sqrt(x.pow(2).mean(-1, keepdim=True) + eps), without subtracting the mean": x / x.std(-1, keepdim=True) * w,
        "the gain `weight` is not applied: multiply the normalised x by weight": _rms(x, w, eps) / w,
        "the normalised x is divided by the gain `weight`: multiply by it, x / rms * weight": _rms(x, w, eps) / w / w,
        "the gain `weight` is applied before the norm (x * weight inside the mean of the squares): normalise x first, "
        "then multiply by weight": _rms(x * w, torch.ones_like(w), eps),
        "the gain `weight` is inside the mean of the squares and not multiplied after: normalise x by "
        "sqrt(x.pow(2).mean(-1, keepdim=True) + eps), then multiply by weight": x
        / torch.sqrt((x * w).pow(2).mean(-1, keepdim=True) + eps),
        "the mean of the squares is taken over the whole tensor (no dim): each token is normalised over its own "
        "features, x.pow(2).mean(-1, keepdim=True)": x / torch.sqrt(x.pow(2).mean() + eps) * w,
        "the features are not squared: the root mean square is sqrt(mean(x**2) + eps), of the squares": x
        / torch.sqrt(x.mean(-1, keepdim=True).abs() + eps)
        * w,
        "the gain `weight` is added instead of multiplied: x / rms * weight": x / torch.sqrt(ms + eps) + w,
        "the result is multiplied by the root mean square instead of divided by it": x * torch.sqrt(ms + eps) * w,
        "eps is added outside the square root: sqrt(mean(x**2) + eps), as nn.RMSNorm": x / (torch.sqrt(ms) + eps) * w,
        "the gain is (1 + weight), the convention of some models (Gemma) that store the gain minus one: here `weight` "
        "is the gain itself, x / rms * weight": _rms(x, w, eps) / w * (1 + w),
    }
    for constant in (1e-5, 1e-6, 1e-8):
        if constant != eps:
            mistakes[
                f"eps is hard-coded ({constant:g}) instead of the `eps` argument: this call passed eps={eps:g}; use the "
                "argument, sqrt(mean(x**2) + eps)"
            ] = _rms(x, w, constant)
    return mistakes


def _rms_divisor(out: Tensor, x: Tensor, w: Tensor, eps: float) -> str | None:
    """Name what an answer of the form ``x * weight / D`` (or ``(x - mean) * weight / D``) divides by, D one number per
    token: the root mean square with eps elsewhere, a standard deviation, a sum over d - 1, a maximum... (None if the
    answer is not of that form, or D is none of these)."""
    out, d = out.detach().double(), x.shape[-1]
    if out.shape != x.shape or not torch.isfinite(out).all():
        return None
    centred = x - x.mean(-1, keepdim=True)
    for base, subtracted in ((x * w, False), (centred * w, True)):
        ratio = out / base  # (..., d): 1 / D in every entry of a token, if the answer has this form
        row = ratio.median(-1, keepdim=True).values  # (..., 1)
        if not torch.allclose(ratio, row.expand_as(ratio), rtol=1e-6, atol=0.0):
            continue
        divisor = 1.0 / row  # (..., 1)
        ms = x.pow(2).mean(-1, keepdim=True)
        big = (ms > 1e3 * eps).squeeze(-1)  # tokens where eps hardly matters
        if not big.any():
            return None
        families = {
            "the root mean square": ms.sqrt(),
            "the (unbiased) standard deviation": x.std(-1, keepdim=True),
            "the standard deviation": x.std(-1, unbiased=False, keepdim=True),
            "the root of the sum of squares over d - 1": (x.pow(2).sum(-1, keepdim=True) / (d - 1)).sqrt(),
            "the largest absolute value": x.abs().amax(-1, keepdim=True),
            "the root of the mean absolute value": x.abs().mean(-1, keepdim=True).sqrt(),
        }
        for family, value in families.items():
            if not torch.allclose(divisor[big], value[big], rtol=2e-3, atol=0.0):
                continue
            if subtracted:
                return (
                    f"each token's mean is subtracted and the result divided by {family}: that is LayerNorm; RMSNorm "
                    "does not subtract the mean, it divides x by sqrt(x.pow(2).mean(-1, keepdim=True) + eps)"
                )
            if family == "the root mean square":
                return (
                    "the root mean square is right for tokens of ordinary size, but eps enters it another way: a token "
                    "whose features are tiny (mean square about eps) comes out wrong. Add eps to the mean of the squares, "
                    "under the square root: sqrt(x.pow(2).mean(-1, keepdim=True) + eps)"
                )
            why = {
                "the (unbiased) standard deviation": "x.std(-1) (or x.var(-1) under the square root) subtracts each "
                "token's mean and divides by d - 1",
                "the standard deviation": "x.std(-1, unbiased=False) (or x.var) subtracts each token's mean",
                "the root of the sum of squares over d - 1": "that is Bessel's correction (as in x.var's default); the "
                "MEAN of the squares divides their sum by d",
                "the largest absolute value": "that is max-abs scaling",
                "the root of the mean absolute value": "that is neither squared nor a root mean square",
            }[family]
            return (
                f"each token is divided by {family} of its features: {why}. RMSNorm divides by the root of the mean of "
                "the squares, sqrt(x.pow(2).mean(-1, keepdim=True) + eps), without subtracting the mean"
            )
    return None


def _rms_inputs() -> list[tuple[Tensor, Tensor, float]]:
    cases = []
    for shape, eps in (((2, 3, 6), 1e-6), ((5, 5), 0.5)):  # a square (5, 5) shows a mean without keepdim
        x = torch.randn(*shape, dtype=torch.float64) * 2.0 + 0.5
        x[0, 0] = x[0, 0] / x[0, 0].pow(2).mean().sqrt() * math.sqrt(eps)  # a row whose mean square is eps: eps matters
        w = torch.empty(shape[-1], dtype=torch.float64).uniform_(0.5, 1.5)
        cases.append((x, w, eps))
    return cases


@exercise("RMSNorm")
def check_rms_norm(rms_norm) -> None:
    """Check ``rms_norm(x, weight, eps) -> Tensor`` against ``nn.RMSNorm``, float64 and float32, and its gradients."""
    small_eps_passed = False
    for x, w, eps in _rms_inputs():
        shape, d = tuple(x.shape), x.shape[-1]
        out = _call(
            rms_norm,
            x.clone(),
            w.clone(),
            eps,
            what=f"x {shape}, weight ({d},), eps={eps:g}",
            hints={"must match the size": "The mean over the features must keep its axis (keepdim=True) to broadcast"},
        )
        torch_norm = nn.RMSNorm(d, eps=eps).double()
        with torch.no_grad():
            torch_norm.weight.copy_(w)
            expected = torch_norm(x)
        name = f"rms_norm on x {shape} with eps={eps:g}"
        try:
            _expect(
                out,
                expected,
                name,
                _rms_mistakes(x, w, eps, small_eps_passed),
                dtype=x.dtype,
                low=lambda dt, x=x, w=w, eps=eps: _lm.rms_norm(x.to(dt), w.to(dt), eps),
            )
        except ExerciseFailed as err:
            if "differs from the reference" in str(err) and isinstance(out, Tensor):
                named = _rms_divisor(out, x, w, eps)
                if named:
                    raise ExerciseFailed(f"{name}: {named}") from None
            raise
        small_eps_passed = eps < 1e-4
    # the model's own dtype: float32 in, float32 out
    x32, w32 = torch.randn(2, 4, 6), torch.empty(6).uniform_(0.5, 1.5)
    out = _call(rms_norm, x32.clone(), w32.clone(), 1e-6, what="a float32 x (2, 4, 6), weight (6,), eps=1e-6")
    _expect(out, _lm.rms_norm(x32.double(), w32.double(), 1e-6), "rms_norm on a float32 x", dtype=torch.float32)
    x, w, eps = _rms_inputs()[0]
    _expect_gradients(rms_norm, _lm.rms_norm, [x, w], ["x", "weight"], "rms_norm", extra=[eps])


# ---------------------------------------------------------------- RoPE


def _pairs(x: Tensor) -> tuple[Tensor, Tensor]:
    return x[..., 0::2], x[..., 1::2]


def _interleave(even: Tensor, odd: Tensor) -> Tensor:
    return torch.stack([even, odd], -1).flatten(-2)


def _rope_mistakes(x: Tensor, angles: Tensor) -> dict[str, Tensor]:
    d = x.shape[-1]
    cos, sin = angles.cos(), angles.sin()  # (n, d/2)
    first, second = x[..., : d // 2], x[..., d // 2 :]
    even, odd = _pairs(x)
    rotate_pairs = _interleave(-odd, even)  # (..., n, d): each pair (a, b) -> (-b, a)
    rotate_half = torch.cat([-second, first], -1)  # (..., n, d): the half-split layout's partner
    tiled_cos, tiled_sin = cos.repeat(1, 2), sin.repeat(1, 2)  # (n, d): [c0 c1 .. c0 c1 ..]
    paired_cos, paired_sin = cos.repeat_interleave(2, -1), sin.repeat_interleave(2, -1)  # (n, d): [c0 c0 c1 c1 ..]
    return {
        "the pairs rotated are the wrong features: (x[i], x[i + d/2]) is the 'half-split' layout; this course rotates "
        "neighbouring features (x[2i], x[2i+1]), as the complex-number form does": torch.cat(
            [first * cos - second * sin, first * sin + second * cos], -1
        ),
        "cos and sin are swapped: the rotated pair is (a cos - b sin, a sin + b cos), with cos(angle) multiplying the "
        "feature itself": _interleave(even * sin - odd * cos, even * cos + odd * sin),
        "each pair is rotated the wrong way (by -angle): the rotated pair is (a cos - b sin, a sin + b cos)": apply_rope_complex(
            x, -angles
        ),
        "the odd features are not rotated (only x[2i] changes): both features of a pair change, (a, b) -> "
        "(a cos - b sin, a sin + b cos)": _interleave(even * cos - odd * sin, odd),
        "the even features are not rotated (only x[2i+1] changes): both features of a pair change, (a, b) -> "
        "(a cos - b sin, a sin + b cos)": _interleave(even, even * sin + odd * cos),
        "only the cosine terms are there: the rotated pair is (a cos - b sin, a sin + b cos)": _interleave(even * cos, odd * cos),
        "cos and sin are widened to d features with `repeat`, which tiles them ([angle 0, angle 1, ..., angle 0, angle "
        "1, ...]), while neighbouring features need the same angle twice in a row: use repeat_interleave(2, dim=-1)": x
        * tiled_cos
        + rotate_pairs * tiled_sin,
        "the layouts are mixed: the half-split partner (rotate_half: [-x2, x1]) is combined with angles repeated for "
        "neighbouring pairs; rotate neighbouring features, (x[2i], x[2i+1])": x * paired_cos + rotate_half * paired_sin,
        "the rotated pairs are not put back in place: the even results belong at features 0, 2, 4, ... and the odd at "
        "1, 3, 5, ... (stack them on a new last axis, then flatten), not concatenated": torch.cat(
            [even * cos - odd * sin, even * sin + odd * cos], -1
        ),
        "the frequencies are reversed: pair i turns by angles[:, i] (pair 0 fastest), not angles[:, d/2 - 1 - i]": apply_rope_complex(
            x, angles.flip(-1)
        ),
        "the positions are reversed: position t is rotated by angles[t]": apply_rope_complex(x, angles.flip(0)),
        "the angles are recomputed inside the function (base 10000, positions from 0) instead of using the `angles` "
        "argument: the model passes the angles of the positions it runs (a later start with a cache, another base)": apply_rope_complex(
            x, rope_angles(x.shape[-2], d)
        ),
        "x is returned unchanged: rotate each pair by its angle": x,
        "the two results of each pair are put back in swapped places: the first feature of a pair gets a cos - b sin, "
        "the second a sin + b cos": _interleave(even * sin + odd * cos, even * cos - odd * sin),
        "the sign of the b sin term is wrong in the first feature: (a cos + b sin, a sin + b cos) is not a rotation (it "
        "changes the pair's length); the rotated pair is (a cos - b sin, a sin + b cos)": _interleave(
            even * cos + odd * sin, even * sin + odd * cos
        ),
        "the sign of the a sin term is wrong in the second feature: (a cos - b sin, -a sin + b cos) is not a rotation (it "
        "changes the pair's length); the rotated pair is (a cos - b sin, a sin + b cos)": _interleave(
            even * cos - odd * sin, odd * cos - even * sin
        ),
        "the angles were converted from degrees (torch.deg2rad, or * pi / 180): they are already in radians, use "
        "angles.cos() and angles.sin() as they are": apply_rope_complex(x, angles * (math.pi / 180)),
    }


@exercise("rotary position embedding (RoPE)")
def check_apply_rope(apply_rope) -> None:
    """Check ``apply_rope(x, angles)`` against a complex-number implementation, its dtype, gradients, and its
    relative-position property."""
    for shape in ((2, 3, 5, 8), (4, 6)):
        n, d = shape[-2], shape[-1]
        x = torch.randn(*shape, dtype=torch.float64)
        angles = rope_angles(n, d, base=100.0) + 0.3  # (n, d/2); a non-zero first angle shows a missing rotation
        out = _call(apply_rope, x.clone(), angles.clone(), what=f"x {shape} and angles ({n}, {d // 2})")
        _expect(
            out,
            apply_rope_complex(x, angles),
            f"apply_rope on x {shape}",
            _rope_mistakes(x, angles),
            dtype=x.dtype,
            low=lambda dt, x=x, angles=angles: _lm.apply_rope(x.to(dt), angles),
        )
    # the model's dtype: float32 features with the float64 angles of rope_angles
    x32, angles = torch.randn(2, 4, 6), rope_angles(4, 6)
    out = _call(apply_rope, x32.clone(), angles.clone(), what="a float32 x (2, 4, 6) and float64 angles (4, 3)")
    out = expect_tensor(out, "apply_rope on a float32 x")
    if out.dtype == torch.float64:
        raise ExerciseFailed(
            "apply_rope on a float32 x returns float64: the angles are float64 (rope_angles), so x * angles.cos() is "
            "promoted to float64; cast cos and sin to x's dtype (angles.cos().to(x.dtype)), as the model is float32"
        )
    _expect(out, apply_rope_complex(x32.double(), angles), "apply_rope on a float32 x", dtype=torch.float32)
    x = torch.randn(2, 5, 8, dtype=torch.float64)
    angles = rope_angles(5, 8, base=100.0) + 0.3
    _expect_gradients(apply_rope, _lm.apply_rope, [x], ["x"], "apply_rope", extra=[angles])
    # the property RoPE is for: q at position s and k at position t score the same for every shift of both
    q, k = torch.randn(8, dtype=torch.float64), torch.randn(8, dtype=torch.float64)
    angles = rope_angles(20, 8, base=100.0)
    rq = expect_tensor(_call(apply_rope, q.expand(20, 8).clone(), angles.clone(), what="q (20, 8)"), "apply_rope(q)")
    rk = expect_tensor(_call(apply_rope, k.expand(20, 8).clone(), angles.clone(), what="k (20, 8)"), "apply_rope(k)")
    scores = [(rq[3 + shift].double() @ rk[1 + shift].double()).item() for shift in (0, 5, 11)]
    if max(scores) - min(scores) > 1e-5:
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
    out = expect_tensor(_call(repeat_kv, kv.clone(), groups, what=f"kv ({b}, {g}, {n}, {d}) and groups={groups}"), "repeat_kv")
    want = (b, g * groups, n, d)
    shape = tuple(out.shape)
    if shape != want:
        axes = {
            (b * groups, g, n, d): "on axis 0, the batch",
            (b, g, n * groups, d): "on axis 2, the sequence axis (each position repeated, as if the text were longer)",
            (b, g, n, d * groups): "on axis 3, the features",
        }
        if shape in axes:
            raise ExerciseFailed(f"repeat_kv returned shape {shape}: the repetition is {axes[shape]}; repeat the heads, dim=1")
        if shape in ((b, g, groups, n, d), (b, groups, g, n, d)):
            raise ExerciseFailed(
                f"repeat_kv returned 5 axes {shape}: the new axis of the copies is not merged with the heads; "
                f"reshape to (b, g * groups, n, d) = {want}"
            )
        if shape == (b, g * g, n, d):
            raise ExerciseFailed(
                f"repeat_kv returned {g * g} heads: each head was repeated kv_heads ({g}) times instead of `groups` "
                f"({groups}) times"
            )
        if shape == tuple(kv.shape):
            raise ExerciseFailed(f"repeat_kv returned the {g} key/value heads as they were; repeat each `groups` times, dim=1")
    expected = kv.repeat_interleave(groups, dim=1)
    mistakes = {
        "the heads are repeated in the wrong order: query head j reads key/value head j // groups, so each K/V head "
        "is repeated for consecutive query heads (kv.repeat_interleave(groups, dim=1)), not the whole set tiled "
        "(kv.repeat(1, groups, 1, 1))": kv.repeat(1, groups, 1, 1),
        "the positions were repeated along the sequence axis and then reshaped into heads, which mixes positions "
        "between heads: repeat along the heads axis, kv.repeat_interleave(groups, dim=1)": kv.repeat_interleave(
            groups, dim=2
        ).reshape(want),
        "the features were repeated and then reshaped into heads, which mixes features and positions: repeat along "
        "the heads axis, kv.repeat_interleave(groups, dim=1)": kv.repeat_interleave(groups, dim=3).reshape(want),
    }
    title = f"repeat_kv(kv, groups={groups})"
    _expect(out, expected, title, mistakes, dtype=kv.dtype)
    _expect_gradients(repeat_kv, _lm.repeat_kv, [kv], ["kv"], "repeat_kv", extra=[groups])
    # the same attention as PyTorch's grouped-query attention
    q = torch.randn(b, g * groups, n, d, dtype=torch.float64)
    k, v = torch.randn(b, g, n, d, dtype=torch.float64), torch.randn(b, g, n, d, dtype=torch.float64)
    keys = expect_tensor(_call(repeat_kv, k.clone(), groups, what="keys"), "repeat_kv(k)")
    values = expect_tensor(_call(repeat_kv, v.clone(), groups, what="values"), "repeat_kv(v)")
    ours = F.scaled_dot_product_attention(q, keys.double(), values.double(), is_causal=True)
    theirs = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
    expect_close(ours, theirs, "attention with your repeat_kv vs enable_gqa=True", atol=ATOL, rtol=RTOL)


# ---------------------------------------------------------------- SwiGLU


def _swiglu_inputs(dtype: torch.dtype = torch.float64) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    d, h = 6, 10  # distinct sizes: a missing transpose fails, a missing down projection shows as width 10
    x = torch.randn(2, 3, d, dtype=dtype)
    w_gate, w_up = torch.randn(h, d, dtype=dtype) / d**0.5, torch.randn(h, d, dtype=dtype) / d**0.5
    w_down = torch.randn(d, h, dtype=dtype) / h**0.5
    return x, w_gate, w_up, w_down


@exercise("SwiGLU feed-forward")
def check_swiglu(swiglu) -> None:
    """Check ``swiglu(x, w_gate, w_up, w_down)`` against ``w_down(silu(w_gate(x)) * w_up(x))`` built from ``nn.Linear``."""
    x, wg, wu, wd = _swiglu_inputs()
    out = _call(
        swiglu,
        x.clone(),
        wg.clone(),
        wu.clone(),
        wd.clone(),
        what="x (2, 3, 6), w_gate (10, 6), w_up (10, 6), w_down (6, 10)",
        hints={
            "cannot be multiplied": "The weights are in nn.Linear's layout (out_features, in_features): multiply by the "
            "transpose, x @ w.T (or use F.linear(x, w))"
        },
    )
    gate, up = x @ wg.T, x @ wu.T  # (2, 3, 10) each
    out = expect_tensor(out, "swiglu(x, ...)")
    if tuple(out.shape) == (2, 3, 10):
        raise ExerciseFailed(
            "swiglu returns shape (2, 3, 10), the hidden width: the down projection is missing, multiply by w_down.T"
        )
    linear = {name: nn.Linear(*w.shape[::-1], bias=False).double() for name, w in (("gate", wg), ("up", wu), ("down", wd))}
    with torch.no_grad():
        for name, w in (("gate", wg), ("up", wu), ("down", wd)):
            linear[name].weight.copy_(w)
        expected = linear["down"](F.silu(linear["gate"](x)) * linear["up"](x))  # (2, 3, 6)
    mistakes = {
        "the SiLU is on the wrong branch: the gate is silu(x @ w_gate.T), multiplied by the plain x @ w_up.T": (F.silu(up) * gate)
        @ wd.T,
        "GELU instead of SiLU (that is GeGLU): SwiGLU gates with silu(z) = z * sigmoid(z), F.silu": (F.gelu(gate) * up) @ wd.T,
        "the gate is sigmoid(z), not silu(z) = z * sigmoid(z) (that is the original GLU): use F.silu": (torch.sigmoid(gate) * up)
        @ wd.T,
        "ReLU instead of SiLU (that is ReGLU): SwiGLU gates with silu(z) = z * sigmoid(z), F.silu": (F.relu(gate) * up) @ wd.T,
        "the gate has no activation (a bilinear layer): apply F.silu to x @ w_gate.T": (gate * up) @ wd.T,
        "the up projection is missing: SwiGLU multiplies silu(x @ w_gate.T) elementwise by x @ w_up.T": F.silu(gate) @ wd.T,
        "the two branches are added instead of multiplied: the gate multiplies, silu(x @ w_gate.T) * (x @ w_up.T)": (
            F.silu(gate) + up
        )
        @ wd.T,
        "the SiLU is applied after the product of the two branches; only the gate branch goes through it, "
        "silu(x @ w_gate.T) * (x @ w_up.T)": F.silu(gate * up) @ wd.T,
        "a SiLU is applied to the output too: the down projection is the last step, with no activation after it": F.silu(
            (F.silu(gate) * up) @ wd.T
        ),
    }
    _expect(
        out,
        expected,
        "swiglu on x (2, 3, 6)",
        mistakes,
        dtype=x.dtype,
        low=lambda dt: _lm.swiglu(x.to(dt), wg.to(dt), wu.to(dt), wd.to(dt)),
    )
    x32, wg32, wu32, wd32 = _swiglu_inputs(torch.float32)
    out = _call(swiglu, x32, wg32, wu32, wd32, what="float32 inputs")
    _expect(
        out,
        _lm.swiglu(x32.double(), wg32.double(), wu32.double(), wd32.double()),
        "swiglu on float32 inputs",
        dtype=torch.float32,
    )
    _expect_gradients(swiglu, _lm.swiglu, [x, wg, wu, wd], ["x", "w_gate", "w_up", "w_down"], "swiglu")


# ---------------------------------------------------------------- sampling: temperature and top-k, top-p


def _top_counts(kept: Tensor, logits: Tensor) -> list[int | None]:
    """Per row, c when the kept tokens are exactly the c most likely ones, else None."""
    order = logits.argsort(-1, descending=True)
    counts: list[int | None] = []
    for row, o in zip(kept, order, strict=True):
        c = int(row.sum())
        counts.append(c if bool(row[o[:c]].all()) else None)
    return counts


#: A filter drops a token by setting its logit to -inf, or to a number so negative that the softmax gives it
#: probability exactly 0 whatever dtype samples it: -1e4 or less (-1e9, the other common choice, underflows to exactly 0
#: in float32 and float64, and float16 rounds it to -inf). A fill such as -100 still leaves e^-100 > 0 in float64.
DROPPED_AT = -1e4


def _dropped(out: Tensor) -> Tensor:
    """Which tokens a filter's output drops ``(..., vocab)`` bool: -inf, or -1e4 and below (see ``DROPPED_AT``)."""
    return out <= DROPPED_AT


def _dropped_hint(
    out: Tensor,
    logits: Tensor,
    name: str,
    probabilities: Sequence[Tensor],
    zero_fill: Tensor | None = None,
    keep: Tensor | None = None,
) -> None:
    """Name outputs that are not the logits with the dropped tokens at -inf: a mask, probabilities, zeros, or a
    negative number not negative enough to give probability 0 (-inf or any fill of -1e4 or less, -1e9 say, is right).

    ``probabilities``: the probabilities the learner may have returned instead (softmax of the logits, of logits / T);
    ``zero_fill``: the right logits with 0 instead of -inf for the dropped tokens (None where that is the right answer);
    ``keep``: the tokens the right answer keeps (for naming a fill that is not negative enough).
    """
    if out.dtype == torch.bool:
        raise ExerciseFailed(
            f"{name} is a boolean mask; return the logits with -inf for the dropped tokens (logits.masked_fill(~keep, float('-inf')))"
        )
    if not out.is_floating_point():
        raise ExerciseFailed(f"{name} has dtype {_short(out.dtype)}; return the (float) logits with -inf for the dropped tokens")
    if tuple(out.shape) != tuple(logits.shape):
        raise ExerciseFailed(
            f"{name} has shape {tuple(out.shape)}, expected {tuple(logits.shape)}: return every logit in its place (the "
            "dropped ones as -inf), not only the kept values"
        )
    if torch.isnan(out).any():
        raise ExerciseFailed(f"{name} contains NaN; mark dropped tokens with float('-inf')")
    if bool((out == float("inf")).any()):
        raise ExerciseFailed(f"{name} has +inf; dropped tokens get -inf (they must get probability 0)")
    finite = ~_dropped(out)
    if zero_fill is not None and torch.allclose(out.detach().double(), zero_fill.double(), atol=ATOL):
        raise ExerciseFailed(
            f"{name}: the dropped tokens are set to 0, which is a logit like any other (probability e^0 / Z > 0): set "
            "them to float('-inf')"
        )
    values = out.detach().double().masked_fill(~finite, 0.0)  # (..., vocab): dropped tokens as 0
    in_unit = bool((values >= 0).all()) and bool((values <= 1).all())
    rows_sum_to_one = torch.allclose(values.sum(-1), torch.ones(values.shape[:-1], dtype=torch.float64), atol=1e-6)
    present = values != 0  # (..., vocab): the entries the answer kept as numbers
    like = any(bool(present.any()) and torch.allclose(values[present], p.double()[present], atol=1e-9) for p in probabilities)
    if in_unit and (rows_sum_to_one or like):
        raise ExerciseFailed(
            f"{name} holds probabilities; return the logits themselves with -inf for the dropped tokens (sampling "
            "applies the softmax)"
        )
    if keep is not None and bool((~keep).any()):
        fills = out.detach()[~keep].double().unique()
        if len(fills) == 1 and DROPPED_AT < fills.item() <= -10 and bool((out.detach()[keep] > fills.item()).all()):
            value = fills.item()
            raise ExerciseFailed(
                f"{name} marks dropped tokens with {value:g}, which is not negative enough: after the softmax each keeps "
                f"a probability of about e^({value:g}) / Z, not 0 (in float64 exp underflows to 0 only below -745). Use "
                "float('-inf'); a number of -1e4 or less (such as -1e9) also gives exactly 0"
            )


def _top_k_mask(scaled: Tensor, k: int | None) -> Tensor:
    return torch.ones_like(scaled, dtype=torch.bool) if k is None else scaled >= scaled.topk(k, -1).values[..., -1:]


_TK_MISTAKES = {
    "times": "the logits are multiplied by the temperature; divide them by it (T < 1 sharpens, T > 1 flattens)",
    "ignored": "the temperature is not applied: divide the logits by it before sampling",
    "smallest": "the k least likely tokens are kept: keep the k largest logits (topk, or sort in descending order)",
}


@exercise("temperature and top-k")
def check_temperature_top_k(temperature_top_k) -> None:
    """Check ``temperature_top_k(logits, temperature, k)``: logits / T with ``-inf`` outside the k largest."""
    logits = torch.randn(3, 10, dtype=torch.float64) * 2.0  # (3, 10): no ties
    probes = [(0.5, 3), (2.0, 1), (1.0, None), (0.7, 10), (1.5, 6)]
    for temperature, k in probes:
        name = f"temperature_top_k(logits (3, 10), temperature={temperature}, k={k})"
        hints = {
            "NoneType": "With k=None every token stays: only the temperature applies (test `if k is None`)",
            "out of range": "k counts tokens: at most the vocabulary's size, and the k-th largest logit is "
            "logits.topk(k, dim=-1).values[..., -1:]",
        }
        out = _call(temperature_top_k, logits.clone(), temperature, k, what=name, hints=hints)
        out = expect_tensor(out, name)
        scaled = logits / temperature
        zero_fill = None if k in (None, 10) else scaled.masked_fill(~_top_k_mask(scaled, k), 0.0)
        right_kept = _top_k_mask(scaled, k)
        _dropped_hint(out, logits, name, [scaled.softmax(-1), logits.softmax(-1)], zero_fill, right_kept)
        kept = ~_dropped(out)
        if not torch.equal(kept, right_kept):
            smallest = scaled <= scaled.topk(k, -1, largest=False).values[..., -1:] if k else right_kept
            if torch.equal(kept, smallest):
                raise ExerciseFailed(f"{name}: {_TK_MISTAKES['smallest']}")
            counts = _top_counts(kept, logits)
            if all(c is not None for c in counts) and len(set(counts)) == 1:
                c = counts[0]
                raise ExerciseFailed(
                    f"{name}: every row keeps its {c} most likely tokens instead of {k}"
                    + (
                        ": an off-by-one in the k-th largest value (topk(k).values[..., -1:] is the k-th, kept with >=)"
                        if k and abs(c - k) == 1
                        else ""
                    )
                    + (": k=None must keep every token" if k is None else "")
                )
            raise ExerciseFailed(
                f"{name}: the kept tokens are not the k={k} largest logits of each row (row 0 keeps "
                f"{torch.nonzero(kept[0]).flatten().tolist()}, expected {torch.nonzero(right_kept[0]).flatten().tolist()}); "
                "keep the largest k along the vocabulary axis, dim=-1"
            )
        values = out[kept]
        if not torch.allclose(values.double(), scaled[kept], atol=ATOL, rtol=RTOL):
            if temperature != 1.0 and torch.allclose(values.double(), (logits * temperature)[kept], atol=ATOL, rtol=RTOL):
                raise ExerciseFailed(f"{name}: {_TK_MISTAKES['times']}")
            if temperature != 1.0 and torch.allclose(values.double(), logits[kept], atol=ATOL, rtol=RTOL):
                raise ExerciseFailed(f"{name}: {_TK_MISTAKES['ignored']}")
            raise ExerciseFailed(
                f"{name}: the kept logits are not logits / temperature (largest difference "
                f"{(values.double() - scaled[kept]).abs().max().item():.3g}); leave them otherwise unchanged"
            )
        if out.dtype != logits.dtype:
            raise ExerciseFailed(f"{name} is {_short(out.dtype)} for {_short(logits.dtype)} logits: keep the logits' dtype")


def _nucleus(logits: Tensor, p: float, kind: str = "right") -> Tensor:
    """Which tokens a top-p filter keeps ``(..., vocab)`` bool, the right way or a typical wrong one."""
    probs = (logits.softmax(0) if kind == "softmax_axis0" else logits.softmax(-1)).double()
    if kind == "one_minus":
        return _nucleus(logits, 1.0 - p)
    if kind == "one_minus_exclusive":  # cumsum < 1 - p, the most likely token kept
        top = torch.zeros_like(probs, dtype=torch.bool).scatter(-1, probs.argmax(-1, keepdim=True), True)
        return _nucleus(logits, 1.0 - p, "exclusive") | top
    if kind == "own_prob":
        return probs >= p
    if kind == "logits_cumsum":
        s, o = logits.sort(dim=-1, descending=True)
        ks = s.cumsum(-1) - s < p
        return ks.scatter(-1, o, ks)
    sorted_probs, order = probs.sort(dim=-1, descending=kind != "ascending")
    cumulative = sorted_probs.cumsum(0 if kind == "axis0" else -1)
    keep_sorted = cumulative < p if kind == "exclusive" else cumulative - sorted_probs < p
    if kind == "unsorted":
        return keep_sorted  # the mask of sorted positions, applied to the original order
    if kind == "gather":
        return keep_sorted.gather(-1, order)  # the permutation applied the wrong way round
    keep = keep_sorted.scatter(-1, order, keep_sorted)
    return ~keep if kind == "tail" else keep


_TOP_P_MISTAKES = {
    "exclusive": "the token that takes the total past p is dropped (a `cumsum <= p` or `cumsum < p` test on the "
    "running total including each token itself); the nucleus is the smallest set of most likely tokens whose "
    "probabilities reach p, so it includes that token: keep a token when the probability of the tokens ranked ABOVE "
    "it is below p (cumsum - probs < p)",
    "tail": "the tokens outside the nucleus are kept and the nucleus dropped: the mask is inverted (masked_fill(keep, "
    "...) instead of masked_fill(~keep, ...))",
    "ascending": "the least likely tokens are kept: sort the probabilities in descending order",
    "unsorted": "the mask is computed in sorted order but applied to the logits in their original order: scatter it "
    "back to the original positions (mask.scatter(-1, order, mask))",
    "gather": "the mask is put back in vocabulary order the wrong way round (gather, or mask[order], applies the "
    "inverse permutation): scatter it, keep = keep_sorted.scatter(-1, order, keep_sorted)",
    "axis0": "the cumulative sum runs over the wrong axis (the batch); sum over the vocabulary, dim=-1",
    "softmax_axis0": "the softmax runs over the wrong axis (the batch): the probabilities of each row are softmax(logits, dim=-1)",
    "own_prob": "each token's own probability is compared with p; top-p compares the cumulative probability of the "
    "most likely tokens",
    "logits_cumsum": "the cumulative sum is taken over the logits; take it over the probabilities, softmax(logits)",
    "one_minus_exclusive": "the nucleus is cut at 1 - p instead of p (the threshold of an ascending sort, as "
    "transformers removes the tokens whose cumulative probability from the bottom is at most 1 - p): with a descending "
    "sort, keep a token while the probability of the tokens ranked above it is below p",
    "one_minus": "the nucleus is cut at 1 - p instead of p (the threshold of an ascending sort, as transformers removes "
    "the tokens whose cumulative probability from the bottom is at most 1 - p): with a descending sort, keep a token "
    "while the probability of the tokens ranked above it is below p",
}


def _keeps_the_tail(kept: Sequence[Tensor], right: Sequence[Tensor], logits: Tensor) -> bool:
    """True when, at every p, every token after the nucleus is kept and of the nucleus at most its first and its last
    token (the one that reaches p), while some nucleus of 3 or more tokens loses its middle."""
    order = logits.argsort(-1, descending=True)
    ends = torch.zeros_like(right[0])
    ends.scatter_(-1, order[..., :1], True)
    middle_lost = False
    for a, b in zip(kept, right, strict=True):
        size = b.sum(-1, keepdim=True)  # (rows, 1)
        last = order.gather(-1, (size - 1).clamp(min=0))  # (rows, 1): the token that reaches p
        edge = ends.clone().scatter_(-1, last, True)
        if not bool((a | b).all()) or bool((a & b & ~edge).any()):
            return False
        middle_lost = middle_lost or bool((b & ~edge & ~a).any())
    return middle_lost


def _top_p_logits() -> Tensor:
    logits = torch.randn(5, 12, dtype=torch.float64) * 1.5  # (5, 12)
    logits[1] = torch.linspace(2.0, -2.0, 12, dtype=torch.float64)  # a row already sorted
    logits[2] = torch.randn(12, dtype=torch.float64) * 0.3  # nearly flat: a large nucleus
    logits[3, 5] = 6.0  # one dominant token (about 0.9 of the probability), not in first place
    return logits


@exercise("top-p (nucleus) filter")
def check_top_p_filter(top_p_filter) -> None:
    """Check ``top_p_filter(logits, p)``: the logits with ``-inf`` outside the nucleus, against ``top_p_filter`` of
    ``helpers.models.lm`` at several p; then p = 0 (the most likely token stays) and p = 1 in float32 (every token)."""
    logits = _top_p_logits()
    ps = (0.3, 0.5, 0.8, 0.95)
    outputs = []
    for p in ps:
        name = f"top_p_filter(logits (5, 12), p={p})"
        out = expect_tensor(_call(top_p_filter, logits.clone(), p, what=f"logits (5, 12) and p={p}"), name)
        nucleus = _nucleus(logits, p)
        _dropped_hint(out, logits, name, [logits.softmax(-1)], logits.masked_fill(~nucleus, 0.0), nucleus)
        outputs.append(out)
    kept = [~_dropped(out) for out in outputs]
    right = [_nucleus(logits, p) for p in ps]
    if not all(torch.equal(a, b) for a, b in zip(kept, right, strict=True)):
        for kind, message in _TOP_P_MISTAKES.items():
            if all(torch.equal(a, _nucleus(logits, p, kind)) for a, p in zip(kept, ps, strict=True)):
                raise ExerciseFailed(message)
        if _keeps_the_tail(kept, right, logits):
            raise ExerciseFailed(
                "the filter keeps the tail, the tokens ranked after the nucleus, and drops the nucleus itself (all but "
                "perhaps its first or last token): the comparison runs the wrong way (a `cumsum > p` or `cumsum >= p` "
                "test keeps what top-p removes). Keep a token while the probability of the tokens ranked ABOVE it is "
                "below p: cumsum - probs < p"
            )
        for a, b, p in zip(kept, right, ps, strict=True):
            if torch.equal(a, b):
                continue
            counts, sizes = _top_counts(a, logits), [int(n) for n in b.sum(-1)]
            if all(c is not None for c in counts) and len(set(counts)) == 1 and len(set(sizes)) > 1:
                raise ExerciseFailed(
                    f"with p={p} every row keeps its {counts[0]} most likely tokens: that is top-k; top-p keeps as many "
                    f"as it takes to reach p, here {sizes} tokens in the five rows (more when the model is unsure)"
                )
            if not a.any(-1).all():
                raise ExerciseFailed(f"with p={p}, a row keeps no token at all; the most likely token is always kept")
            row = next(i for i in range(len(a)) if not torch.equal(a[i], b[i]))
            c, size = counts[row], sizes[row]
            sorted_probs = logits[row].softmax(-1).sort(descending=True).values
            if c is not None:
                total = sorted_probs[:c].sum().item()
                why = (
                    f"their probabilities add up to {total:.3f}, short of p"
                    if c < size
                    else f"the first {size} already reach p ({sorted_probs[:size].sum().item():.3f})"
                )
                raise ExerciseFailed(
                    f"with p={p}, row {row} keeps its {c} most likely tokens, but {why}: the nucleus holds {size} "
                    "(keep a token while the probability of the tokens ranked above it is below p)"
                )
            raise ExerciseFailed(
                f"with p={p}, row {row} keeps tokens {torch.nonzero(a[row]).flatten().tolist()}, expected "
                f"{torch.nonzero(b[row]).flatten().tolist()} (the most likely tokens until their probabilities reach p)"
            )
    for out, k in zip(outputs, kept, strict=True):
        if out.dtype != logits.dtype:
            raise ExerciseFailed(
                f"the filtered logits are {_short(out.dtype)} for {_short(logits.dtype)} logits: keep the logits' dtype"
            )
        if not torch.allclose(out[k].double(), logits[k], atol=1e-12, rtol=0.0):
            raise ExerciseFailed(
                "the kept tokens' logits were changed; leave them as they are and set only the dropped ones to -inf"
            )
    # the ends of the range
    out = expect_tensor(_call(top_p_filter, logits.clone(), 0.0, what="logits (5, 12) and p=0"), "top_p_filter(logits, p=0)")
    kept0 = ~_dropped(out)
    top = torch.zeros_like(kept0).scatter(-1, logits.argmax(-1, keepdim=True), True)
    if not torch.equal(kept0, top):
        raise ExerciseFailed(
            f"with p=0 your filter keeps {kept0.sum(-1).tolist()} tokens per row; it must keep the most likely token "
            "alone (a row of only -inf gives NaN probabilities when sampled): always keep the first token of the sorted order"
        )
    big = torch.randn(2, 6400) * 4.0  # float32, as the model's logits: the tail holds many tiny probabilities
    out = expect_tensor(
        _call(top_p_filter, big.clone(), 1.0, what="float32 logits (2, 6400) and p=1"), "top_p_filter(logits, p=1)"
    )
    dropped = int(_dropped(out).sum())
    if dropped:
        raise ExerciseFailed(
            f"with p=1 every token must stay, but {dropped} of {big.numel()} float32 logits were dropped: a precision "
            "problem. In float32 the running sum of 6,400 probabilities reaches 1.0 before the last tokens (rounding), "
            "so `above < 1` fails for them; compute the cumulative sum in float64 (probs.double().cumsum(-1)), or "
            "return the logits unchanged when p >= 1"
        )
    if out.dtype != big.dtype:
        raise ExerciseFailed(f"the filtered logits are {_short(out.dtype)} for float32 logits: keep the logits' dtype")


# ---------------------------------------------------------------- attention over the cache


def _attention(q: Tensor, k: Tensor, v: Tensor, visible: Tensor | None, scale: float | None = None, dim: int = -1) -> Tensor:
    scores = q @ k.transpose(-2, -1) * (q.shape[-1] ** -0.5 if scale is None else scale)
    if visible is not None:
        scores = scores.masked_fill(~visible, float("-inf"))
    return scores.softmax(dim) @ v


def _visible(n: int, m: int, shift: int = 0) -> Tensor:
    """Query i (position m - n + i) sees keys up to position m - n + i + shift."""
    return torch.arange(m)[None, :] <= torch.arange(m - n, m)[:, None] + shift  # (n, m)


def _cached_attention_mistakes(q: Tensor, k: Tensor, v: Tensor) -> dict[str, Tensor | None]:
    n, m, d = q.shape[-2], k.shape[-2], q.shape[-1]
    right = _visible(n, m)
    top_left = torch.ones(n, m, dtype=torch.bool).tril()  # query i sees keys 0..i
    scores = q @ k.transpose(-2, -1) / math.sqrt(d)
    weights = scores.masked_fill(~right, float("-inf")).softmax(-1)
    return {
        "the causal mask is aligned top-left (is_causal=True, or tril of an (n, m) matrix): query 0 then sees key 0 "
        "only. The n queries are the LAST n of the m positions: query i is position m - n + i and sees keys 0 .. "
        "m - n + i. Build the (n, m) mask directly, torch.ones(n, m, dtype=torch.bool).tril(diagonal=m - n), or by "
        "comparing positions, torch.arange(m)[None, :] <= torch.arange(m - n, m)[:, None]; not by slicing an m x m "
        "mask, whose size grows with the square of the context": _attention(q, k, v, top_left) if n != m else None,
        "there is no causal mask: with several new queries, query i must not see the keys after its own position "
        "m - n + i (only a single new query, n = 1, may see every key)": _attention(q, k, v, None) if n > 1 else None,
        "each query misses its own key: query i (position m - n + i) sees keys 0 .. m - n + i, itself included": _attention(
            q, k, v, _visible(n, m, -1)
        ),
        "each query sees one key in its future: query i (position m - n + i) sees keys 0 .. m - n + i, no further": _attention(
            q, k, v, _visible(n, m, 1)
        )
        if n > 1
        else None,
        "the scores are not scaled: divide q @ k^T by sqrt(d)": _attention(q, k, v, right, 1.0),
        "the scores are divided by d instead of sqrt(d)": _attention(q, k, v, right, 1.0 / d),
        "the softmax runs over the queries (dim=-2); each query's weights over the keys must sum to 1 (dim=-1)": _attention(
            q, k, v, right, None, -2
        ),
        "the masked scores are set to 0 instead of -inf: a score of 0 still gets weight e^0 / Z; use float('-inf')": scores.masked_fill(
            ~right, 0.0
        ).softmax(-1)
        @ v,
        "the mask is applied after the softmax (weights zeroed but not renormalised): mask the scores with -inf before "
        "the softmax": (scores.softmax(-1) * right) @ v,
        "the weighted sum uses the keys instead of the values: weights @ v": weights @ k if k.shape[-1] == v.shape[-1] else None,
        "the boolean mask is added to the scores (True counts as 1, so the visible keys get +1 and nothing is hidden): "
        "hide the keys with scores.masked_fill(~visible, float('-inf')), or give F.scaled_dot_product_attention the "
        "boolean mask itself": (scores + right).softmax(-1) @ v,
        "the mask is inverted: for F.scaled_dot_product_attention a boolean attn_mask is True where a query MAY attend "
        "(keys 0 .. m - n + i for query i), False where it may not": F.scaled_dot_product_attention(q, k, v, attn_mask=~right)
        if n > 1
        else None,
        "the scores are divided by the square root of the number of keys, sqrt(m): scale by the key and query width, "
        "sqrt(d) = sqrt(q.shape[-1])": _attention(q, k, v, right, m**-0.5) if m != d else None,
    }


@exercise("attention over the cache")
def check_cached_attention(cached_attention) -> None:
    """Check ``cached_attention(q, k, v)``: causal attention of the last n positions over m keys, against
    ``F.scaled_dot_product_attention`` with the bottom-right mask."""
    b, h, d, d_v = 2, 3, 4, 6  # distinct from the numbers of keys (5, 4, 3): returning the weights or k @ shows
    for n, m in ((3, 5), (1, 4), (3, 3)):
        q = torch.randn(b, h, n, d, dtype=torch.float64)
        k, v = torch.randn(b, h, m, d, dtype=torch.float64), torch.randn(b, h, m, d_v, dtype=torch.float64)
        what = f"q ({b}, {h}, {n}, {d}) for the last {n} of {m} positions, k ({b}, {h}, {m}, {d}), v ({b}, {h}, {m}, {d_v})"
        name = f"cached_attention with {n} new of {m} positions"
        out = _call(cached_attention, q.clone(), k.clone(), v.clone(), what=what)
        if isinstance(out, (tuple, list)):
            raise ExerciseFailed(f"{name} returns a {type(out).__name__}; return the output tensor alone, (..., n, d_v)")
        out = expect_tensor(out, name)
        shape = tuple(out.shape)
        if shape == (b, h, n, m) and m != d_v:
            raise ExerciseFailed(
                f"{name} returns shape {shape}, the attention weights: return weights @ v, ({b}, {h}, {n}, {d_v})"
            )
        if shape == (b, h, n, d):
            raise ExerciseFailed(
                f"{name} returns shape {shape}: the weighted sum uses the keys instead of the values, weights @ v"
            )
        if shape == (b, h, m, d_v) and m != n:
            raise ExerciseFailed(
                f"{name} returns {m} positions: the output has one row per query (the {n} new positions), ({b}, {h}, {n}, {d_v})"
            )
        expected = F.scaled_dot_product_attention(q, k, v, attn_mask=_visible(n, m))
        _expect(
            out,
            expected,
            name,
            _cached_attention_mistakes(q, k, v),
            dtype=q.dtype,
            nonfinite_hint="a query whose every key is masked gets NaN (a softmax over only -inf): is the mask inverted? "
            "Hide the keys after the query's position, keep the others",
            low=lambda dt, q=q, k=k, v=v: _lm.cached_attention(q.to(dt), k.to(dt), v.to(dt)),
        )
    q = torch.randn(b, h, 2, d, dtype=torch.float64)
    k, v = torch.randn(b, h, 5, d, dtype=torch.float64), torch.randn(b, h, 5, d_v, dtype=torch.float64)
    _expect_gradients(cached_attention, _lm.cached_attention, [q, k, v], ["q", "k", "v"], "cached_attention")
    q32, k32, v32 = q.float(), k.float(), v.float()
    out = _call(cached_attention, q32, k32, v32, what="float32 q, k, v")
    _expect(out, _lm.cached_attention(q, k, v), "cached_attention on float32 inputs", dtype=torch.float32)


# ---------------------------------------------------------------- KV cache


@exercise("KV-cache update")
def check_cache_update(cache_update) -> None:
    """Check ``cache_update(cache_k, cache_v, k, v) -> (k_all, v_all)``: append along the sequence axis (dim 2)."""
    b, g, d = 2, 3, 5
    for m, n in ((2, 2), (4, 1), (0, 3)):  # equal sizes first, so a concatenation on the wrong axis runs and is named
        ck, cv = torch.randn(b, g, m, d, dtype=torch.float64), torch.randn(b, g, m, d, dtype=torch.float64)
        k, v = torch.randn(b, g, n, d, dtype=torch.float64), torch.randn(b, g, n, d, dtype=torch.float64)
        what = f"a cache of {m} positions ({b}, {g}, {m}, {d}) and {n} new ({b}, {g}, {n}, {d})"
        result = _call(
            cache_update,
            ck.clone(),
            cv.clone(),
            k.clone(),
            v.clone(),
            what=what,
            hints={
                "Sizes of tensors must match": "torch.cat joins tensors along one axis, and every other axis must "
                "have the same size: join the cache and the new positions along the sequence axis, dim=2"
            },
        )
        if not isinstance(result, (tuple, list)) or len(result) != 2:
            raise ExerciseFailed(f"cache_update returned {type(result).__name__}; return the pair (k_all, v_all)")
        k_all, v_all = (expect_tensor(t, name) for t, name in zip(result, ("k_all", "v_all"), strict=True))
        right_k, right_v = torch.cat([ck, k], 2), torch.cat([cv, v], 2)
        if k_all.shape == right_v.shape and m and torch.equal(k_all, right_v) and torch.equal(v_all, right_k):
            raise ExerciseFailed("the keys and the values are swapped: return (keys, values) in that order")
        for name, got in (("v_all", v_all), ("k_all", k_all)):
            if got.shape == right_k.shape and m:
                if name == "v_all" and any(torch.equal(got, torch.cat(p, 2)) for p in ((ck, k), (cv, k), (ck, v))):
                    raise ExerciseFailed(
                        "v_all is built (partly) from the keys: append the new values v to the cached values cache_v"
                    )
                if name == "k_all" and any(torch.equal(got, torch.cat(p, 2)) for p in ((cv, v), (ck, v), (cv, k))):
                    raise ExerciseFailed(
                        "k_all is built (partly) from the values: append the new keys k to the cached keys cache_k"
                    )
        for name, got, old, new, right in (("k_all", k_all, ck, k, right_k), ("v_all", v_all, cv, v, right_v)):
            shape, want = tuple(got.shape), tuple(right.shape)
            if got.dim() == 5:
                raise ExerciseFailed(
                    f"{name} has 5 axes {shape}: torch.stack adds a new axis; join along the sequence axis with torch.cat(..., dim=2)"
                )
            if got.dim() == 4 and shape != want:
                grown = [i for i in range(4) if shape[i] == old.shape[i] + new.shape[i] and shape[i] != want[i]]
                names = {0: "the batch", 1: "the heads", 3: "the features"}
                if grown and grown[0] in names:
                    raise ExerciseFailed(
                        f"{name} has shape {shape}: the cache is appended on axis {grown[0]} ({names[grown[0]]}); append "
                        "on the sequence axis, dim=2"
                    )
            mistakes = {
                "the new positions are put before the cached ones: append them at the end, "
                "torch.cat([cache, new], dim=2)": torch.cat([new, old], 2),
                "the cache is dropped: return the cached positions followed by the new ones": new,
                "the new positions are not added to the cache: torch.cat([cache, new], dim=2)": old,
            }
            expect_close(got, right, f"{name} (cache of {m}, {n} new)", atol=0.0, rtol=0.0, mistakes=mistakes if m else None)


# ---------------------------------------------------------------- the next-token loss


def _ce(logits: Tensor, targets: Tensor, reduction: str = "mean") -> Tensor:
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1), reduction=reduction)


def _next_token_mistakes(logits: Tensor, ids: Tensor) -> dict[str, Tensor | None]:
    b, n, v = logits.shape
    inputs, targets = logits[:, :-1], ids[:, 1:]  # (b, n - 1, V), (b, n - 1)
    per_token = _ce(inputs, targets, "none").view(b, n - 1)  # (b, n - 1)
    log_probs = inputs.log_softmax(-1).gather(-1, targets[..., None]).squeeze(-1)  # (b, n - 1)
    shift = (
        "position t's logits predict token t + 1, so the logits of positions 0 .. n - 2 (logits[:, :-1]) are compared "
        "with the tokens 1 .. n - 1 (ids[:, 1:])"
    )
    return {
        f"the targets are not shifted: each position is asked for its own input token, which it already sees; {shift}": _ce(
            logits, ids
        ),
        f"the targets are not shifted (both sides drop the same end): {shift}": _ce(logits[:, 1:], ids[:, 1:]),
        f"the targets are not shifted (both sides drop the last position): {shift}": _ce(logits[:, :-1], ids[:, :-1]),
        f"the shift runs the wrong way: logits[:, 1:] against ids[:, :-1] asks each position for the token before it; {shift}": _ce(
            logits[:, 1:], ids[:, :-1]
        ),
        "torch.roll wraps around: the last position is asked for the window's first token, which it cannot predict; drop "
        f"that pair instead: {shift}": _ce(logits, ids.roll(-1, dims=1)),
        "the logits and the targets are flattened in different orders (one of them transposed first): flatten both the "
        "same way, logits[:, :-1].reshape(-1, V) with ids[:, 1:].reshape(-1)": _ce(inputs, targets.transpose(0, 1))
        if b > 1
        else None,
        "the logits and the targets are flattened in different orders (the logits transposed first): flatten both the "
        "same way, logits[:, :-1].reshape(-1, V) with ids[:, 1:].reshape(-1)": _ce(inputs.transpose(0, 1), targets)
        if b > 1
        else None,
        "the losses are summed, not averaged: the loss is the mean over every prediction (F.cross_entropy's default "
        "reduction='mean')": per_token.sum(),
        "the mean is over the batch axis only and the positions are summed: average over every prediction, batch and "
        "positions alike (flatten both, then the default mean)": per_token.mean(0).sum(),
        "the mean is over the positions only and the batch is summed: average over every prediction, batch and positions "
        "alike (flatten both, then the default mean)": per_token.mean(1).sum(),
        "the log-softmax runs over the positions (dim=1); the probabilities of each prediction are over the vocabulary, "
        "log_softmax(dim=-1)": -logits.log_softmax(1)[:, :-1].gather(-1, targets[..., None]).mean(),
        "F.cross_entropy is given probabilities (a softmax first): it takes the raw logits and applies the log-softmax "
        "itself": _ce(inputs.softmax(-1), targets),
        "F.nll_loss is given raw logits: it expects log-probabilities; apply log_softmax(dim=-1) first, or use "
        "F.cross_entropy on the logits": -inputs.gather(-1, targets[..., None]).mean(),
        "the sign is flipped: the loss is MINUS the mean log-probability of the targets (it must fall as the model "
        "improves)": log_probs.mean(),
        "this is in bits (log base 2): the loss is in nats, with the natural log (bits per character come later, as "
        "loss / ln 2)": -log_probs.mean() / math.log(2),
        "this averages minus the probability of each target: the loss averages minus its LOG-probability, "
        "-log p": -log_probs.exp().mean(),
        "this is the perplexity, exp(loss): return the loss itself, the mean of -log p": (-log_probs.mean()).exp(),
        "the loss is label-smoothed (label_smoothing=...): that is a training trick, not the next-token loss; use "
        "F.cross_entropy's default, which asks for the target's probability alone": F.cross_entropy(
            inputs.reshape(-1, inputs.shape[-1]), targets.reshape(-1), label_smoothing=0.1
        ),
    }


def _next_token_inputs(dtype: torch.dtype = torch.float64) -> list[tuple[Tensor, Tensor]]:
    cases = []
    for b, n, v in ((2, 5, 7), (3, 4, 9)):  # distinct sizes: a swapped axis or a missing shift shows
        logits = torch.randn(b, n, v, dtype=dtype) * 2.0
        ids = torch.randint(0, v, (b, n))
        cases.append((logits, ids))
    return cases


_LOSS_HINTS = {
    "to match target batch_size": "The logits and the targets must pair up one to one: dropping the first token of the "
    "targets (ids[:, 1:]) means dropping the last position of the logits too (logits[:, :-1])",
    "Expected target size": "F.cross_entropy wants the classes on axis 1: flatten to logits (b (n - 1), V) and targets "
    "(b (n - 1),) first, logits[:, :-1].reshape(-1, V) and ids[:, 1:].reshape(-1)",
    "Expected input batch_size": "The logits and the targets must pair up one to one: flatten logits[:, :-1] and "
    "ids[:, 1:] the same way",
}


@exercise("the next-token loss")
def check_next_token_loss(next_token_loss) -> None:
    """Check ``next_token_loss(logits, ids) -> scalar``: the cross-entropy of logits[:, :-1] against ids[:, 1:]."""
    for logits, ids in _next_token_inputs():
        b, n, v = logits.shape
        what = f"logits ({b}, {n}, {v}) and ids ({b}, {n})"
        out = _call(next_token_loss, logits.clone(), ids.clone(), what=what, hints=_LOSS_HINTS)
        name = f"next_token_loss on {what}"
        if isinstance(out, (float, int)):
            raise ExerciseFailed(
                f"{name} returns a Python number ({type(out).__name__}): `.item()` drops the computation graph that "
                "training needs for loss.backward(); return the tensor"
            )
        out = expect_tensor(out, name)
        if out.numel() != 1:
            shape = tuple(out.shape)
            hint = (
                f"one loss per prediction ({shape}): average them, .mean() (F.cross_entropy's default reduction)"
                if out.numel() in (b * (n - 1), b * n)
                else "return the mean over every prediction, one number"
            )
            raise ExerciseFailed(f"{name} has shape {shape}, not a single number: {hint}")
        out = out.reshape(())
        expected = _ce(logits[:, :-1], ids[:, 1:])
        _expect(
            out,
            expected,
            name,
            _next_token_mistakes(logits, ids),
            dtype=out.dtype,  # a float32 loss is legitimate (the model is float32): judged at float32's precision
            low=lambda dt, logits=logits, ids=ids: _ce(logits[:, :-1].to(dt), ids[:, 1:]),
            nonfinite_hint="is a probability 0 before a log? F.cross_entropy (or log_softmax) computes the log-probabilities "
            "without overflow",
        )
    logits, ids = _next_token_inputs(torch.float32)[0]
    out = expect_tensor(_call(next_token_loss, logits.clone(), ids.clone(), what="float32 logits"), "next_token_loss")
    _expect(out.reshape(()), _ce(logits[:, :-1].double(), ids[:, 1:]), "next_token_loss on float32 logits", dtype=out.dtype)
    logits, ids = _next_token_inputs()[0]
    _expect_gradients(
        lambda z: next_token_loss(z, ids.clone()).reshape(()),
        lambda z: _ce(z[:, :-1], ids[:, 1:]),
        [logits],
        ["logits"],
        "next_token_loss",
    )


# ---------------------------------------------------------------- the generation loop


class _ChainModel(nn.Module):
    """A toy language model whose next token is ``(3 * last + previous + 1) % V``, almost surely (a logit of 40 against 0).

    It depends on the last two tokens (so a loop that shows it only the newest one goes wrong) and records the length
    of every input it is given.
    """

    def __init__(self, vocab: int = 11) -> None:
        super().__init__()
        self.vocab, self.lengths = vocab, []

    def rule(self, ids: Tensor) -> Tensor:
        previous = torch.cat([torch.zeros_like(ids[:, :1]), ids[:, :-1]], 1)  # (b, n): 0 before the first token
        return (3 * ids + previous + 1) % self.vocab  # (b, n)

    def forward(self, ids: Tensor) -> Tensor:
        self.lengths.append(ids.shape[-1])
        return 40.0 * F.one_hot(self.rule(ids), self.vocab).float()  # (b, n, V)


class _FixedModel(nn.Module):
    """A toy language model that predicts the same distribution after every token (positive logits, see below)."""

    def __init__(self, logits: Tensor) -> None:
        super().__init__()
        self.logits, self.calls = logits, 0

    def forward(self, ids: Tensor) -> Tensor:
        self.calls += 1
        return self.logits.expand(*ids.shape, -1).clone()  # (b, n, V)


def _chain(model: _ChainModel, ids: Tensor, steps: int, window: int, crop: str = "last", position: int = -1) -> Tensor:
    """What a deterministic loop gives on the chain model: the right one, or a typical wrong one."""
    for _ in range(steps):
        context = {"last": ids[:, -window:], "first": ids[:, :window], "none": ids, "newest": ids[:, -1:]}[crop]
        nxt = model.rule(context)[:, position]  # (b,)
        ids = torch.cat([ids, nxt[:, None]], 1)
    return ids


#: The distribution of the fixed model: probabilities 0.6, 0.25, 0.1, 0.05 as logits shifted to be positive (so that
#: sampling from the logits themselves runs, and is told apart by its frequencies).
_P = torch.tensor([0.6, 0.25, 0.1, 0.05])
_FIXED = _P.log() + 4.0


def _frequencies(tokens: Tensor, vocab: int) -> Tensor:
    return torch.bincount(tokens.flatten(), minlength=vocab).double() / tokens.numel()


_SAMPLE_HINTS = {
    "probability tensor contains": "torch.multinomial takes probabilities (or other non-negative weights): it was given "
    "logits, or log-probabilities, which are negative. Sample from softmax(logits_filter(logits), dim=-1)",
    "cannot be converted to Scalar": "The loop must handle a batch of prompts (ids is (b, n)): keep the sampled ids as a "
    "(b, 1) tensor, without .item()",
    "Sizes of tensors must match": "The new token must be a (b, 1) tensor, appended along the sequence axis: "
    "torch.cat([ids, next_ids], dim=1). The model returns (b, n, V): the last position's logits are "
    "model(...)[:, -1], (b, V)",
}


@exercise("the generation loop")
def check_sample(sample) -> None:
    """Check ``sample(model, ids, steps, window, logits_filter, generator)``: the loop of crop, run, filter, softmax,
    sample, append, on toy models whose next token is known or whose distribution is fixed."""
    # 1. a model whose next token is (almost surely) known: the loop's structure
    model = _ChainModel()
    prompt = torch.tensor([[1, 2, 3], [4, 0, 7]])  # (2, 3): a batch of two prompts
    steps, window = 6, 4
    what = "a toy model, a batch of 2 prompts of 3 tokens, steps=6, window=4"
    gen = torch.Generator().manual_seed(0)
    out = _call(sample, model, prompt.clone(), steps, window, lambda z: z, gen, what=what, hints=_SAMPLE_HINTS)
    name = "sample(...)"
    out = expect_tensor(out, name)
    b, n = prompt.shape
    if tuple(out.shape) != (b, n + steps):
        shape = tuple(out.shape)
        if shape == (b, steps):
            why = "only the new tokens: return the prompt followed by them, torch.cat([ids, next_ids], dim=1) at every step"
        elif shape == (b, n + 1):
            why = (
                "one new token only: the loop runs `steps` times, appending one token each time (is `return` indented "
                "inside the loop? It belongs after it)"
            )
        elif len(shape) == 2 and shape[0] == b and shape[1] == n + steps + 1:
            why = "one token too many: the loop runs `steps` times"
        elif len(shape) == 3:
            why = "an extra axis: append the (b, 1) ids of the sampled tokens along the sequence axis, dim=1"
        else:
            why = "append one token per step along the sequence axis, dim=1"
        raise ExerciseFailed(f"{name} returns shape {shape}, expected (batch, prompt + steps) = {(b, n + steps)}: {why}")
    if out.dtype != torch.long:
        raise ExerciseFailed(
            f"{name} returns {_short(out.dtype)} ids: token ids are integers (int64), as torch.multinomial returns them; "
            "do not turn them into floats"
        )
    if not torch.equal(out[:, :n], prompt):
        raise ExerciseFailed(f"{name} changes the prompt: keep it as the first {n} tokens and append after it")
    # 2. a model with a fixed distribution: the sampling itself (before the structure, since a wrong distribution
    # also scrambles the sequence of the toy model above)
    rows, vocab = 8000, len(_P)  # the frequencies are within 0.025 of the probabilities (4.5 standard errors)
    fixed_ids = torch.zeros(rows, 1, dtype=torch.long)
    cases = (
        ("no filter", lambda z: z, _P.double()),
        ("logits_filter=lambda z: z / 0.5", lambda z: z / 0.5, (_P.double() ** 2) / (_P.double() ** 2).sum()),
    )
    for label, logits_filter, probs in cases:
        fixed = _FixedModel(_FIXED.clone())
        what = f"a toy model with next-token probabilities {_P.tolist()}, {rows} prompts, steps=1, {label}"
        drawn = expect_tensor(
            _call(
                sample,
                fixed,
                fixed_ids.clone(),
                1,
                4,
                logits_filter,
                torch.Generator().manual_seed(1),
                what=what,
                hints=_SAMPLE_HINTS,
            ),
            name,
        )
        freq = _frequencies(drawn[:, -1], vocab)
        if (freq - probs).abs().max() <= 0.035:
            continue
        found = f"the sampled tokens' frequencies are {[round(f, 2) for f in freq.tolist()]} where the probabilities are {[round(p, 2) for p in probs.tolist()]}"
        if freq[0] == 1.0:
            raise ExerciseFailed(
                f"{name} always picks the most likely token (argmax): that is greedy decoding; sample from the "
                f"probabilities with torch.multinomial(probs, 1) ({found})"
            )
        weights = logits_filter(_FIXED.double())
        candidates = {
            "samples in proportion to the logits themselves, not to their softmax: torch.multinomial takes "
            "probabilities, softmax(logits_filter(logits), dim=-1)": weights / weights.sum(),
            "samples uniformly: is the softmax over the batch axis (dim=0)? Each row's probabilities are the softmax "
            "of its own logits, dim=-1": torch.full((vocab,), 1.0 / vocab, dtype=torch.float64),
            "does not apply logits_filter: sample from softmax(logits_filter(logits))": _P.double(),
            "takes a softmax of probabilities: a second softmax, or logits_filter applied after the softmax. The "
            "filter works on the logits (a temperature divides them, top-k and top-p set them to -inf): filter first, "
            "then one softmax": logits_filter(_P.double()).softmax(-1),
        }
        distance = {message: (freq - wrong).abs().max().item() for message, wrong in candidates.items()}
        nearest = min(distance, key=distance.get)
        if distance[nearest] <= 0.035 and (candidates[nearest] - probs).abs().max() > 0.1:
            raise ExerciseFailed(f"{name} {nearest} ({found})")
        raise ExerciseFailed(f"{name}: {found}; sample from softmax(logits_filter(logits), dim=-1) with torch.multinomial")
    # 3. back to the first model: the structure of the loop
    lengths = list(model.lengths)
    if len(lengths) == 1 and steps > 1:
        raise ExerciseFailed(
            f"{name} runs the model once for {steps} tokens: each new token changes what comes next, so the model runs "
            "again at every step, on the sequence with the new token appended"
        )
    expected_lengths = [min(n + i, window) for i in range(steps)]
    if max(lengths, default=0) > window:
        longest = max(lengths)
        extra = (
            f"one token more than the window ({longest} > {window}): ids[:, -window:] keeps exactly `window`"
            if longest == window + 1
            else f"inputs of up to {longest} tokens with window={window}"
        )
        raise ExerciseFailed(
            f"{name} does not crop the context to the last `window` tokens ({extra}): a model trained on 64 positions "
            "is worse beyond them, so each step runs on ids[:, -window:]"
        )
    right = _chain(_ChainModel(), prompt, steps, window)
    if not torch.equal(out, right):
        named = {
            "first": "the context is the FIRST `window` tokens (ids[:, :window]); the next token follows the LAST ones: "
            "ids[:, -window:]",
            "newest": "the model sees only the newest token (ids[:, -1:]): without a KV cache it needs the whole context, "
            "ids[:, -window:]",
        }
        for crop, message in named.items():
            if torch.equal(out, _chain(_ChainModel(), prompt, steps, window, crop=crop)):
                raise ExerciseFailed(f"{name}: {message}")
        if torch.equal(out, _chain(_ChainModel(), prompt, steps, window, position=0)):
            raise ExerciseFailed(
                f"{name} samples from the FIRST position's logits (model(...)[:, 0]): the prediction of the next token is "
                "at the last position, model(...)[:, -1]"
            )
        if (out[:, n:] == out[:, n : n + 1]).all() and not (right[:, n:] == right[:, n : n + 1]).all():
            raise ExerciseFailed(
                f"{name} gives the same token at every step: each step must see the tokens sampled so far; append the "
                "new token to ids (ids = torch.cat([ids, next_ids], dim=1)) before the next step"
            )
        row = next(i for i in range(b) if not torch.equal(out[i], right[i]))
        raise ExerciseFailed(
            f"{name}: on a toy model whose next token is certain, row {row} gives {out[row].tolist()}, expected "
            f"{right[row].tolist()}: crop to ids[:, -window:], run the model, take the last position's logits "
            "[:, -1], filter them, softmax(dim=-1), torch.multinomial, append"
        )
    if lengths != expected_lengths:
        raise ExerciseFailed(
            f"{name} runs the model on {lengths} tokens at its {steps} steps, where the last `window` tokens are "
            f"{expected_lengths}: crop with ids[:, -window:]"
        )
