"""The checks of notebook 11 pass the reference and other natural answers (float32 code included), spot the stub and
name the typical mistakes, each with its own message."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from helpers.checks.lm import (
    _nucleus,
    check_apply_rope,
    check_cache_update,
    check_cached_attention,
    check_next_token_loss,
    check_repeat_kv,
    check_rms_norm,
    check_sample,
    check_swiglu,
    check_temperature_top_k,
    check_top_p_filter,
)
from helpers.models.lm import (
    apply_rope,
    apply_rope_complex,
    cache_update,
    cached_attention,
    cached_attention_math,
    next_token_loss,
    repeat_kv,
    rms_norm,
    rope_angles,
    swiglu,
    temperature_top_k,
    top_p_filter,
)
from helpers.models.lm import sample as lm_sample
from tests.conftest import assert_caught, assert_not_attempted


def stub(*args, **kwargs):
    raise NotImplementedError("Exercise: fill in")


def ms(x):
    return x.pow(2).mean(-1, keepdim=True)


# ---------------------------------------------------------------- RMSNorm


def _llama_rms_norm(x, w, eps):  # LLaMA's RMSNorm: computed in float32, returned in x's dtype
    normed = x.float() * torch.rsqrt(x.float().pow(2).mean(-1, keepdim=True) + eps)
    return normed.type_as(x) * w


def _module_rms_norm(x, w, eps):
    norm = nn.RMSNorm(x.shape[-1], eps=eps, dtype=x.dtype)
    with torch.no_grad():
        norm.weight.copy_(w)
    return norm(x)


RMS_RIGHT = [
    rms_norm,
    lambda x, w, eps: x / (x * x).mean(-1, keepdim=True).add(eps).sqrt() * w,
    lambda x, w, eps: F.rms_norm(x, (x.shape[-1],), w, eps),
    lambda x, w, eps: x * torch.rsqrt(x.pow(2).sum(-1, keepdim=True) / x.shape[-1] + eps) * w,
    _llama_rms_norm,
    lambda x, w, eps: (x.float() / torch.sqrt(ms(x.float()) + eps) * w.float()).to(x.dtype),
]


@pytest.mark.parametrize("answer", RMS_RIGHT)
def test_rms_norm_right_answers_pass(answer):
    assert check_rms_norm(answer) is True


def test_rms_norm_module_built_inside_is_named():
    # a new nn.RMSNorm with the weight copied in: right values, but the model's own gain would never learn
    assert_caught(check_rms_norm, _module_rms_norm, "no gradient reaches `weight`")


def test_rms_norm_stub_not_attempted(capsys):
    assert_not_attempted(check_rms_norm, stub, capsys)
    assert_not_attempted(check_rms_norm, ..., capsys)


RMS_MISTAKES = [
    (lambda x, w, eps: x / torch.sqrt(ms(x)) * w, ["eps is missing"]),
    (lambda x, w, eps: x * torch.rsqrt(ms(x)) * w, ["eps is missing"]),
    (lambda x, w, eps: x / torch.sqrt(ms(x) + 1e-6) * w, ["hard-coded", "1e-6"]),
    (lambda x, w, eps: x / torch.sqrt(ms(x) + 1e-5) * w, ["hard-coded", "1e-05"]),
    (lambda x, w, eps: x / torch.sqrt(x.pow(2).mean(-2, keepdim=True) + eps) * w, ["wrong axis"]),
    (lambda x, w, eps: x / torch.sqrt(x.pow(2).mean(0, keepdim=True) + eps) * w, ["batch axis"]),
    (lambda x, w, eps: x / torch.sqrt(x.pow(2).mean((-2, -1), keepdim=True) + eps) * w, ["last two axes"]),
    (lambda x, w, eps: x / torch.sqrt(x.pow(2).mean(-1) + eps) * w, ["keepdim"]),
    (lambda x, w, eps: x / torch.sqrt(x.pow(2).sum(-1, keepdim=True) + eps) * w, ["summed, not averaged"]),
    (lambda x, w, eps: F.normalize(x, dim=-1) * w, ["L2 normalisation"]),
    (lambda x, w, eps: x / x.norm(dim=-1, keepdim=True) * w, ["L2 normalisation"]),
    (lambda x, w, eps: x / (ms(x) + eps) * w, ["square root is missing"]),
    (lambda x, w, eps: x / (x.abs().mean(-1, keepdim=True) + eps) * w, ["absolute values"]),
    (lambda x, w, eps: x / x.abs().mean(-1, keepdim=True) * w, ["absolute values"]),
    (lambda x, w, eps: F.layer_norm(x, (x.shape[-1],), w, None, eps), ["LayerNorm"]),
    (lambda x, w, eps: x / torch.sqrt(x.var(-1, unbiased=False, keepdim=True) + eps) * w, ["standard deviation"]),
    (lambda x, w, eps: x / x.std(-1, keepdim=True) * w, ["standard deviation"]),
    (lambda x, w, eps: x / torch.sqrt(ms(x) + eps), ["gain"]),
    (lambda x, w, eps: x / torch.sqrt(ms(x) + eps) + w, ["added instead of multiplied"]),
    (lambda x, w, eps: x * torch.sqrt(ms(x) + eps) * w, ["instead of divided"]),
    (lambda x, w, eps: x / (torch.sqrt(ms(x)) + eps) * w, ["outside the square root"]),
    (lambda x, w, eps: (x / torch.sqrt(ms(x) + eps) * w).float(), ["float32 for float64", "type_as"]),
    (lambda x, w, eps: x.double() / torch.sqrt(ms(x.double()) + eps) * w.double(), ["float64 for float32"]),
    (lambda x, w, eps: (x.bfloat16() / torch.sqrt(ms(x.bfloat16()) + eps) * w.bfloat16()).to(x.dtype), ["bfloat16", "precision"]),
    (lambda x, w, eps: rms_norm(x, w, eps).detach(), ["gradients", "detach"]),
    (lambda x, w, eps: x / torch.sqrt(ms(x).detach() + eps) * w, ["gradient with respect to `x`"]),
    (lambda x, w, eps: torch.from_numpy(rms_norm(x, w, eps).detach().numpy()), ["gradients"]),
    (lambda x, w, eps: 2 * rms_norm(x, w, eps), ["differs from the reference"]),
    # issue 36: the standard deviation with eps, and other divisors, named by what they divide by
    (lambda x, w, eps: x / torch.sqrt(x.var(-1, keepdim=True) + eps) * w, ["(unbiased) standard deviation", "d - 1"]),
    (lambda x, w, eps: x / (x.std(-1, keepdim=True) + eps) * w, ["(unbiased) standard deviation"]),
    (
        lambda x, w, eps: x / (x.std(-1, unbiased=False, keepdim=True) + eps) * w,
        ["standard deviation", "subtracts each token's mean"],
    ),
    (lambda x, w, eps: x / torch.sqrt(x.pow(2).sum(-1, keepdim=True) / (x.shape[-1] - 1) + eps) * w, ["d - 1", "Bessel"]),
    (lambda x, w, eps: x / (x.abs().amax(-1, keepdim=True) + eps) * w, ["largest absolute value"]),
    (lambda x, w, eps: x / torch.sqrt(x.abs().mean(-1, keepdim=True) + eps) * w, ["mean absolute value"]),
    (lambda x, w, eps: x / torch.sqrt(ms(x) + eps * x.shape[-1]) * w, ["eps enters it another way"]),
    (
        lambda x, w, eps: (x - x.mean(-1, keepdim=True)) / torch.sqrt(x.var(-1, keepdim=True) + eps) * w,
        ["mean is subtracted", "LayerNorm"],
    ),
    (lambda x, w, eps: x / torch.sqrt(ms(x) + eps) / w, ["divided by the gain"]),
    (lambda x, w, eps: x / torch.sqrt(ms(x * w) + eps), ["inside the mean of the squares"]),
    (lambda x, w, eps: x * w / torch.sqrt(ms(x * w) + eps), ["applied before the norm"]),
    (lambda x, w, eps: x / torch.sqrt(x.pow(2).mean() + eps) * w, ["whole tensor"]),
    (lambda x, w, eps: x / torch.sqrt(x.mean(-1, keepdim=True).abs() + eps) * w, ["not squared"]),
]


@pytest.mark.parametrize("wrong, phrases", RMS_MISTAKES)
def test_rms_norm_mistakes_are_named(wrong, phrases):
    assert_caught(check_rms_norm, wrong, *phrases)


def test_rms_norm_a_missing_eps_is_not_mistaken_for_float32():
    # the difference a missing eps makes is far above float32's rounding on these inputs, and named
    message = assert_caught(check_rms_norm, lambda x, w, eps: x.float() / torch.sqrt(ms(x.float())) * w.float(), "eps")
    assert "precision" not in message


# ---------------------------------------------------------------- RoPE


def _rope_matrix(x, angles):  # each pair times a 2x2 rotation matrix
    c, s = angles.cos().to(x.dtype), angles.sin().to(x.dtype)
    rot = torch.stack([torch.stack([c, -s], -1), torch.stack([s, c], -1)], -2)  # (n, d/2, 2, 2)
    pairs = x.unflatten(-1, (-1, 2))  # (..., n, d/2, 2)
    return (rot @ pairs.unsqueeze(-1)).squeeze(-1).flatten(-2)


def _rope_complex64(x, angles):  # complex64, as LLaMA's reference code
    z = torch.view_as_complex(x.float().reshape(*x.shape[:-1], -1, 2))
    rotated = z * torch.polar(torch.ones_like(angles, dtype=torch.float32), angles.float())
    return torch.view_as_real(rotated).flatten(-2).type_as(x)


def _rope_every_two(x, angles):  # full-width cos and sin, and the pairwise partner (-b, a)
    cos = angles.cos().repeat_interleave(2, -1).to(x.dtype)
    sin = angles.sin().repeat_interleave(2, -1).to(x.dtype)
    partner = torch.stack([-x[..., 1::2], x[..., 0::2]], -1).flatten(-2)
    return x * cos + partner * sin


ROPE_RIGHT = [apply_rope, _rope_matrix, _rope_complex64, _rope_every_two, lambda x, a: apply_rope_complex(x, a)]


@pytest.mark.parametrize("answer", ROPE_RIGHT)
def test_rope_right_answers_pass(answer):
    assert check_apply_rope(answer) is True


def test_rope_stub_not_attempted(capsys):
    assert_not_attempted(check_apply_rope, stub, capsys)


def _half_split(x, angles):
    d = x.shape[-1]
    a, b = x[..., : d // 2], x[..., d // 2 :]
    c, s = angles.cos().to(x.dtype), angles.sin().to(x.dtype)
    return torch.cat([a * c - b * s, a * s + b * c], -1)


def _rope_parts(x, angles, even_fn, odd_fn):
    c, s = angles.cos().to(x.dtype), angles.sin().to(x.dtype)
    a, b = x[..., 0::2], x[..., 1::2]
    return torch.stack([even_fn(a, b, c, s), odd_fn(a, b, c, s)], -1).flatten(-2)


def _rope_tiled(x, angles):  # `repeat` instead of `repeat_interleave` for the full-width cos and sin
    cos, sin = angles.cos().repeat(1, 2).to(x.dtype), angles.sin().repeat(1, 2).to(x.dtype)
    partner = torch.stack([-x[..., 1::2], x[..., 0::2]], -1).flatten(-2)
    return x * cos + partner * sin


def _rope_mixed(x, angles):  # rotate_half with pairwise angles
    d = x.shape[-1]
    cos, sin = angles.cos().repeat_interleave(2, -1).to(x.dtype), angles.sin().repeat_interleave(2, -1).to(x.dtype)
    return x * cos + torch.cat([-x[..., d // 2 :], x[..., : d // 2]], -1) * sin


def _rope_concat(x, angles):
    a, b = x[..., 0::2], x[..., 1::2]
    c, s = angles.cos().to(x.dtype), angles.sin().to(x.dtype)
    return torch.cat([a * c - b * s, a * s + b * c], -1)


ROPE_MISTAKES = [
    (_half_split, ["wrong features", "half-split"]),
    (
        lambda x, a: _rope_parts(x, a, lambda a_, b, c, s: a_ * s - b * c, lambda a_, b, c, s: a_ * c + b * s),
        ["cos and sin are swapped"],
    ),
    (lambda x, angles: apply_rope(x, -angles), ["wrong way"]),
    (lambda x, a: _rope_parts(x, a, lambda a_, b, c, s: a_ * c - b * s, lambda a_, b, c, s: b), ["odd features are not rotated"]),
    (
        lambda x, a: _rope_parts(x, a, lambda a_, b, c, s: a_, lambda a_, b, c, s: a_ * s + b * c),
        ["even features are not rotated"],
    ),
    (lambda x, a: _rope_parts(x, a, lambda a_, b, c, s: a_ * c, lambda a_, b, c, s: b * c), ["only the cosine"]),
    (_rope_tiled, ["`repeat`", "repeat_interleave"]),
    (_rope_mixed, ["layouts are mixed"]),
    (_rope_concat, ["not put back in place"]),
    (lambda x, angles: apply_rope(x, angles.flip(-1)), ["frequencies are reversed"]),
    (lambda x, angles: apply_rope(x, angles.flip(0)), ["positions are reversed"]),
    (lambda x, angles: apply_rope(x, rope_angles(x.shape[-2], x.shape[-1])), ["recomputed", "`angles` argument"]),
    (lambda x, angles: x, ["unchanged"]),
    (lambda x, angles: x * 1.0 + 0 * angles.sum(), ["unchanged"]),
    (
        lambda x, angles: _rope_parts(
            x, angles, lambda a, b, c, s: a * c.double() - b * s.double(), lambda a, b, c, s: a * s.double() + b * c.double()
        ),
        ["float64", "angles.cos().to(x.dtype)"],
    ),
    (lambda x, angles: apply_rope(x.bfloat16(), angles).to(x.dtype), ["bfloat16", "precision"]),
    (lambda x, angles: apply_rope(x, angles).float(), ["float32 for float64"]),
    (lambda x, angles: apply_rope(x, angles).detach(), ["gradients"]),
    (lambda x, angles: apply_rope(x, 2 * angles), ["differs from the reference"]),
    (
        lambda x, a: _rope_parts(x, a, lambda a_, b, c, s: a_ * s + b * c, lambda a_, b, c, s: a_ * c - b * s),
        ["swapped places"],
    ),
]


@pytest.mark.parametrize("wrong, phrases", ROPE_MISTAKES)
def test_rope_mistakes_are_named(wrong, phrases):
    assert_caught(check_apply_rope, wrong, *phrases)


# ---------------------------------------------------------------- GQA


def _expand(kv, groups):
    b, g, n, d = kv.shape
    return kv[:, :, None].expand(b, g, groups, n, d).reshape(b, g * groups, n, d)


REPEAT_RIGHT = [
    repeat_kv,
    _expand,
    lambda kv, groups: torch.cat([kv[:, i : i + 1] for i in range(kv.shape[1]) for _ in range(groups)], 1),
    lambda kv, groups: kv[:, torch.arange(kv.shape[1] * groups) // groups],
    lambda kv, groups: torch.repeat_interleave(kv, groups, dim=1),
    lambda kv, groups: kv.repeat(1, 1, groups, 1).reshape(kv.shape[0], -1, *kv.shape[2:]),  # tiles each head's rows: right
]


@pytest.mark.parametrize("answer", REPEAT_RIGHT)
def test_repeat_kv_right_answers_pass(answer):
    assert check_repeat_kv(answer) is True


def test_repeat_kv_stub_not_attempted(capsys):
    assert_not_attempted(check_repeat_kv, stub, capsys)


REPEAT_MISTAKES = [
    (lambda kv, groups: kv.repeat(1, groups, 1, 1), ["wrong order", "repeat_interleave"]),
    (lambda kv, groups: torch.cat([kv] * groups, 1), ["wrong order"]),
    (lambda kv, groups: kv.repeat_interleave(groups, dim=2), ["axis 2", "sequence axis"]),
    (lambda kv, groups: kv.repeat(1, 1, groups, 1), ["axis 2", "sequence axis"]),
    (lambda kv, groups: kv.repeat_interleave(groups, dim=3), ["axis 3", "features"]),
    (lambda kv, groups: kv.repeat_interleave(groups, dim=0), ["axis 0", "batch"]),
    (
        lambda kv, groups: kv.repeat_interleave(groups, dim=2).reshape(kv.shape[0], -1, *kv.shape[2:]),
        ["sequence axis and then reshaped"],
    ),
    (lambda kv, groups: kv.repeat_interleave(groups, dim=3).reshape(kv.shape[0], -1, *kv.shape[2:]), ["features were repeated"]),
    (lambda kv, groups: kv[:, :, None].expand(-1, -1, groups, -1, -1), ["5 axes", "not merged"]),
    (lambda kv, groups: kv.repeat_interleave(kv.shape[1], dim=1), ["kv_heads (3) times"]),
    (lambda kv, groups: kv, ["as they were"]),
    (lambda kv, groups: kv.repeat_interleave(groups, dim=1).float(), ["float32 for float64"]),
    (lambda kv, groups: kv.repeat_interleave(groups, dim=1).detach(), ["gradients"]),
    (lambda kv, groups: kv.repeat_interleave(groups, dim=1).flip(1), ["differs from the reference"]),
]


@pytest.mark.parametrize("wrong, phrases", REPEAT_MISTAKES)
def test_repeat_kv_mistakes_are_named(wrong, phrases):
    assert_caught(check_repeat_kv, wrong, *phrases)


# ---------------------------------------------------------------- SwiGLU


SWIGLU_RIGHT = [
    swiglu,
    lambda x, wg, wu, wd: F.linear(F.silu(F.linear(x, wg)) * F.linear(x, wu), wd),
    lambda x, wg, wu, wd: ((x @ wg.T) * torch.sigmoid(x @ wg.T) * (x @ wu.T)) @ wd.T,
    lambda x, wg, wu, wd: torch.einsum("...h,dh->...d", F.silu(torch.einsum("...d,hd->...h", x, wg)) * (x @ wu.T), wd),
    lambda x, wg, wu, wd: swiglu(x.float(), wg.float(), wu.float(), wd.float()).to(x.dtype),
]


@pytest.mark.parametrize("answer", SWIGLU_RIGHT)
def test_swiglu_right_answers_pass(answer):
    assert check_swiglu(answer) is True


def test_swiglu_stub_not_attempted(capsys):
    assert_not_attempted(check_swiglu, stub, capsys)


SWIGLU_MISTAKES = [
    (lambda x, wg, wu, wd: (F.silu(x @ wu.T) * (x @ wg.T)) @ wd.T, ["wrong branch"]),
    (lambda x, wg, wu, wd: (F.gelu(x @ wg.T) * (x @ wu.T)) @ wd.T, ["GELU", "GeGLU"]),
    (lambda x, wg, wu, wd: (torch.sigmoid(x @ wg.T) * (x @ wu.T)) @ wd.T, ["sigmoid", "GLU"]),
    (lambda x, wg, wu, wd: (F.relu(x @ wg.T) * (x @ wu.T)) @ wd.T, ["ReLU", "ReGLU"]),
    (lambda x, wg, wu, wd: ((x @ wg.T) * (x @ wu.T)) @ wd.T, ["no activation", "bilinear"]),
    (lambda x, wg, wu, wd: F.silu(x @ wg.T) @ wd.T, ["up projection is missing"]),
    (lambda x, wg, wu, wd: (F.silu(x @ wg.T) + x @ wu.T) @ wd.T, ["added instead of multiplied"]),
    (lambda x, wg, wu, wd: F.silu((x @ wg.T) * (x @ wu.T)) @ wd.T, ["after the product"]),
    (lambda x, wg, wu, wd: F.silu(swiglu(x, wg, wu, wd)), ["output too"]),
    (lambda x, wg, wu, wd: (F.silu(x @ wg) * (x @ wu)) @ wd, ["nn.Linear's layout", "x @ w.T"]),
    (lambda x, wg, wu, wd: F.silu(x @ wg.T) * (x @ wu.T), ["down projection is missing"]),
    (
        lambda x, wg, wu, wd: swiglu(x.bfloat16(), wg.bfloat16(), wu.bfloat16(), wd.bfloat16()).to(x.dtype),
        ["bfloat16", "precision"],
    ),
    (lambda x, wg, wu, wd: swiglu(x, wg, wu, wd).double(), ["float64 for float32"]),
    (lambda x, wg, wu, wd: swiglu(x, wg.detach(), wu, wd), ["no gradient reaches `w_gate`"]),
    (lambda x, wg, wu, wd: 2 * swiglu(x, wg, wu, wd), ["differs from the reference"]),
]


@pytest.mark.parametrize("wrong, phrases", SWIGLU_MISTAKES)
def test_swiglu_mistakes_are_named(wrong, phrases):
    assert_caught(check_swiglu, wrong, *phrases)


# ---------------------------------------------------------------- temperature and top-k


def _top_k_sorted(logits, temperature, k):
    logits = logits / temperature
    if k is None:
        return logits
    kth = logits.sort(-1, descending=True).values[..., k - 1 : k]
    return logits.masked_fill(logits < kth, float("-inf"))


def _top_k_scatter(logits, temperature, k):
    logits = logits / temperature
    if k is None:
        return logits
    values, index = logits.topk(k, -1)
    return torch.full_like(logits, float("-inf")).scatter(-1, index, values)


def _top_k_transformers(logits, temperature, k):
    from transformers import TemperatureLogitsWarper, TopKLogitsWarper

    scores = TemperatureLogitsWarper(temperature)(None, logits)
    return scores if k is None else TopKLogitsWarper(k)(None, scores)


TOP_K_RIGHT = [
    temperature_top_k,
    _top_k_sorted,
    _top_k_scatter,
    _top_k_transformers,
    # a very negative number instead of -inf gives probability exactly 0 after the softmax as well (issue review of 11)
    lambda logits, t, k: temperature_top_k(logits, t, k).clamp(min=-1e9),
    lambda logits, t, k: temperature_top_k(logits, t, k).nan_to_num(neginf=torch.finfo(logits.dtype).min),
]


@pytest.mark.parametrize("answer", TOP_K_RIGHT)
def test_temperature_top_k_right_answers_pass(answer):
    assert check_temperature_top_k(answer) is True


def test_temperature_top_k_stub_not_attempted(capsys):
    assert_not_attempted(check_temperature_top_k, stub, capsys)


def _tk(transform=lambda z, t: z / t, keep=lambda z, k: z >= z.topk(k, -1).values[..., -1:], fill=float("-inf"), none_ok=True):
    def answer(logits, temperature, k):
        z = transform(logits, temperature)
        if k is None and none_ok:
            return z
        return z.masked_fill(~keep(z, k), fill)

    return answer


TOP_K_MISTAKES = [
    (_tk(transform=lambda z, t: z * t), ["multiplied by the temperature"]),
    (_tk(transform=lambda z, t: z), ["temperature is not applied"]),
    (_tk(keep=lambda z, k: z <= z.topk(k, -1, largest=False).values[..., -1:]), ["least likely"]),
    (_tk(keep=lambda z, k: z > z.topk(k, -1).values[..., -1:]), ["off-by-one"]),
    (
        _tk(
            keep=lambda z, k: z >= z.sort(-1, descending=True).values[..., min(k, z.shape[-1] - 1) : min(k, z.shape[-1] - 1) + 1]
        ),
        ["off-by-one"],
    ),
    (_tk(fill=0.0), ["set to 0"]),
    (_tk(fill=-100.0), ["-100", "not negative enough", "-1e9"]),
    (_tk(none_ok=False), ["k=None"]),
    (lambda logits, t, k: _tk()(logits, t, k).softmax(-1), ["probabilities"]),
    (lambda logits, t, k: _tk()(logits, t, k).isfinite(), ["boolean mask"]),
    (lambda logits, t, k: (logits / t).topk(k or logits.shape[-1], -1).values, ["shape", "in its place"]),
    (_tk(keep=lambda z, k: z >= z.topk(min(k, z.shape[0]), 0).values[-1:]), ["keeps its 10 most likely tokens instead of 3"]),
    (_tk(transform=lambda z, t: z / t + 1.0), ["not logits / temperature"]),
    (lambda logits, t, k: _tk()(logits, t, k).float(), ["float32 for float64"]),
]


@pytest.mark.parametrize("wrong, phrases", TOP_K_MISTAKES)
def test_temperature_top_k_mistakes_are_named(wrong, phrases):
    assert_caught(check_temperature_top_k, wrong, *phrases)


# ---------------------------------------------------------------- top-p


def _top_p_loop(logits, p):
    out = torch.full_like(logits, float("-inf"))
    for i, row in enumerate(logits):
        probs = row.double().softmax(-1)
        total = 0.0
        for j in probs.argsort(descending=True).tolist():
            if total >= p and total > 0:
                break
            out[i, j] = row[j]
            total += probs[j].item()
    return out


def _top_p_transformers(logits, p):
    from transformers import TopPLogitsWarper

    return TopPLogitsWarper(p)(None, logits) if p > 0 else _top_p_keep_first(logits, p)


def _top_p_keep_first(logits, p):
    if p >= 1:
        return logits
    sorted_probs, order = logits.double().softmax(-1).sort(dim=-1, descending=True)
    keep = (sorted_probs.cumsum(-1) - sorted_probs) < p
    keep[..., 0] = True
    return logits.masked_fill(~keep.scatter(-1, order, keep), float("-inf"))


def _top_p_hf_shift(logits, p):  # the old transformers idiom: remove past p, shifted right by one
    sorted_logits, order = logits.sort(descending=True)
    cumulative = sorted_logits.double().softmax(-1).cumsum(-1)
    remove = cumulative > p
    remove[..., 1:] = remove[..., :-1].clone()
    remove[..., 0] = False
    return logits.masked_fill(remove.scatter(-1, order, remove), float("-inf"))


TOP_P_RIGHT = [
    top_p_filter,
    _top_p_keep_first,
    _top_p_loop,
    _top_p_hf_shift,
    _top_p_transformers,
    lambda logits, p: logits if p >= 1 else _sorted_keep(lambda sp, cum, p: cum - sp <= p, first=True)(logits, p),
    # a very negative number instead of -inf gives probability exactly 0 after the softmax as well
    lambda logits, p: top_p_filter(logits, p).clamp(min=-1e9),
]


@pytest.mark.parametrize("answer", TOP_P_RIGHT)
def test_top_p_right_answers_pass(answer):
    assert check_top_p_filter(answer) is True


def test_top_p_stub_not_attempted(capsys):
    assert_not_attempted(check_top_p_filter, stub, capsys)


def _variant(kind, output="logits", fix_ends=True):
    def wrong(logits, p):
        if fix_ends and p >= 1:
            return logits
        keep = _nucleus(logits, p, kind)
        if fix_ends and kind == "right":
            keep = keep | torch.zeros_like(keep).scatter(-1, logits.argmax(-1, keepdim=True), True)
        if output == "mask":
            return keep
        if output == "probs":
            return logits.softmax(-1).masked_fill(~keep, float("-inf"))
        if output == "probs0":
            return logits.softmax(-1).masked_fill(~keep, 0.0)
        if output == "renormalised":
            probs = logits.softmax(-1).masked_fill(~keep, 0.0)
            return probs / probs.sum(-1, keepdim=True)
        if output == "zero":
            return logits.masked_fill(~keep, 0.0)
        if output == "-1e9":
            return logits.masked_fill(~keep, -1e9)
        if output == "-100":
            return logits.masked_fill(~keep, -100.0)
        return logits.masked_fill(~keep, float("-inf"))

    return wrong


def _cumsum_le_p(logits, p):  # keep while the running total (including the token) is at most p
    sorted_probs, order = logits.softmax(-1).sort(descending=True)
    keep = sorted_probs.cumsum(-1) <= p
    return logits.masked_fill(~keep.scatter(-1, order, keep), float("-inf"))


def _remove_past_p(logits, p):  # remove past p without the shift
    sorted_logits, order = logits.sort(descending=True)
    remove = sorted_logits.softmax(-1).cumsum(-1) > p
    return logits.masked_fill(remove.scatter(-1, order, remove), float("-inf"))


def _top_k_not_p(logits, p):
    k = max(1, int(p * logits.shape[-1]))
    return logits.masked_fill(logits < logits.topk(k, -1).values[..., -1:], float("-inf"))


def _one_more(logits, p):  # keeps the token after the one that reaches p as well
    sorted_probs, order = logits.softmax(-1).sort(descending=True)
    above = sorted_probs.cumsum(-1) - sorted_probs
    keep = torch.cat([torch.ones_like(above[..., :1], dtype=torch.bool), (above < p)[..., :-1]], -1)
    return logits.masked_fill(~keep.scatter(-1, order, keep), float("-inf"))


def _sorted_keep(rule, first=False):
    """A top-p filter that keeps the tokens where ``rule(sorted_probs, cumsum, p)`` holds (and the top one if ``first``)."""

    def answer(logits, p):
        sorted_probs, order = logits.double().softmax(-1).sort(-1, descending=True)
        keep = rule(sorted_probs, sorted_probs.cumsum(-1), p)
        if first:
            keep[..., 0] = True
        return logits.masked_fill(~keep.scatter(-1, order, keep), float("-inf"))

    return answer


def _float32_cumsum(logits, p):  # the textbook answer computing its running sum in float32, keeping the top token
    sorted_probs, order = logits.float().softmax(-1).sort(descending=True)
    keep = (sorted_probs.cumsum(-1) - sorted_probs) < p
    keep[..., 0] = True
    return logits.masked_fill(~keep.scatter(-1, order, keep), float("-inf"))


TOP_P_MISTAKES = [
    (_variant("exclusive"), ["includes that token"]),
    (_cumsum_le_p, ["includes that token"]),
    (_remove_past_p, ["includes that token"]),
    (_variant("tail"), ["inverted"]),
    (_variant("ascending"), ["least likely"]),
    (_variant("unsorted"), ["original order"]),
    (_variant("gather"), ["wrong way round", "scatter"]),
    (_variant("axis0"), ["cumulative sum runs over the wrong axis"]),
    (_variant("softmax_axis0"), ["softmax runs over the wrong axis"]),
    (_variant("own_prob"), ["own probability"]),
    (_variant("logits_cumsum"), ["over the logits"]),
    (_top_k_not_p, ["top-k", "as many"]),
    (_one_more, ["the first", "already reach p"]),
    (_variant("right", "mask"), ["boolean mask"]),
    (_variant("right", "probs"), ["probabilities"]),
    (_variant("right", "probs0"), ["probabilities"]),
    (_variant("right", "renormalised"), ["probabilities"]),
    (_variant("right", "zero"), ["set to 0"]),
    (_variant("right", "-100"), ["-100", "not negative enough"]),
    (_variant("right", fix_ends=False), ["p=0", "most likely token alone"]),
    (_float32_cumsum, ["p=1", "precision", "float64"]),
    (lambda logits, p: _top_p_keep_first(logits, p) * 2, ["were changed"]),
    (lambda logits, p: _top_p_keep_first(logits, p).float(), ["float32 for float64"]),
    # issue 36: the tail after the nucleus kept, in the ways a comparison can run the wrong way; the threshold 1 - p
    (_sorted_keep(lambda sp, cum, p: cum > p), ["keeps the tail", "cumsum - probs < p"]),
    (_sorted_keep(lambda sp, cum, p: cum >= p), ["keeps the tail"]),
    (_sorted_keep(lambda sp, cum, p: cum > p, first=True), ["keeps the tail"]),
    (_sorted_keep(lambda sp, cum, p: cum - sp >= p, first=True), ["keeps the tail"]),
    (_sorted_keep(lambda sp, cum, p: cum - sp < 1 - p, first=True), ["1 - p"]),
    (_sorted_keep(lambda sp, cum, p: cum < 1 - p, first=True), ["1 - p"]),
]


@pytest.mark.parametrize("wrong, phrases", TOP_P_MISTAKES)
def test_top_p_mistakes_are_named(wrong, phrases):
    assert_caught(check_top_p_filter, wrong, *phrases)


# ---------------------------------------------------------------- attention over the cache


def _cached_loop(q, k, v):  # one query at a time, over the keys it may see
    n, m = q.shape[-2], k.shape[-2]
    rows = []
    for i in range(n):
        seen = m - n + i + 1
        scores = q[..., i : i + 1, :] @ k[..., :seen, :].transpose(-2, -1) / math.sqrt(q.shape[-1])
        rows.append(scores.softmax(-1) @ v[..., :seen, :])
    return torch.cat(rows, -2)


def _cached_tril(q, k, v):
    n, m = q.shape[-2], k.shape[-2]
    mask = torch.ones(n, m, dtype=torch.bool).tril(diagonal=m - n)
    return F.scaled_dot_product_attention(q, k, v, attn_mask=mask)


def _cached_big_negative(q, k, v):
    n, m = q.shape[-2], k.shape[-2]
    scores = q @ k.transpose(-2, -1) / q.shape[-1] ** 0.5
    scores = scores.masked_fill(torch.ones(n, m, dtype=torch.bool).tril(m - n).logical_not(), -1e9)
    return scores.softmax(-1) @ v


CACHED_RIGHT = [
    cached_attention,
    cached_attention_math,
    _cached_loop,
    _cached_tril,
    _cached_big_negative,
    lambda q, k, v: cached_attention_math(q.float(), k.float(), v.float()).to(q.dtype),
]


@pytest.mark.parametrize("answer", CACHED_RIGHT)
def test_cached_attention_right_answers_pass(answer):
    assert check_cached_attention(answer) is True


def test_cached_attention_stub_not_attempted(capsys):
    assert_not_attempted(check_cached_attention, stub, capsys)


def _attend(mask="right", scale=None, dim=-1, fill=float("-inf"), after=False, values="v"):
    def answer(q, k, v):
        n, m, d = q.shape[-2], k.shape[-2], q.shape[-1]
        scores = q @ k.transpose(-2, -1) * (d**-0.5 if scale is None else scale(d))
        shift = {"right": m - n, "top-left": 0, "own": m - n - 1, "future": m - n + 1}.get(mask)
        visible = torch.ones(n, m, dtype=torch.bool) if shift is None else torch.ones(n, m, dtype=torch.bool).tril(shift)
        if mask == "inverted":
            visible = ~torch.ones(n, m, dtype=torch.bool).tril(m - n)
        if after:
            weights = scores.softmax(dim) * visible
        else:
            weights = scores.masked_fill(~visible, fill).softmax(dim)
        return weights @ (v if values == "v" else k)

    return answer


def _visible_added(q, k, v):  # the boolean mask added to the scores
    n, m = q.shape[-2], k.shape[-2]
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
    return (scores + torch.ones(n, m, dtype=torch.bool).tril(m - n)).softmax(-1) @ v


CACHED_MISTAKES = [
    (lambda q, k, v: F.scaled_dot_product_attention(q, k, v, is_causal=True), ["top-left", "LAST n"]),
    (_attend("top-left"), ["top-left"]),
    (lambda q, k, v: F.scaled_dot_product_attention(q, k, v), ["no causal mask"]),
    (_attend("none"), ["no causal mask"]),
    (_attend("own"), ["misses its own key"]),
    (_attend("future"), ["one key in its future"]),
    (_attend(scale=lambda d: 1.0), ["not scaled"]),
    (_attend(scale=lambda d: 1.0 / d), ["by d instead of sqrt(d)"]),
    (_attend(dim=-2), ["over the queries"]),
    (_attend(fill=0.0), ["set to 0 instead of -inf"]),
    (_attend(after=True), ["after the softmax"]),
    (_attend("inverted"), ["NaN", "mask inverted"]),
    (_attend(values="k"), ["keys instead of the values"]),
    (lambda q, k, v: (_attend()(q, k, v), None), ["tuple", "output tensor alone"]),
    (lambda q, k, v: (q @ k.transpose(-2, -1)).softmax(-1), ["attention weights"]),
    (lambda q, k, v: F.scaled_dot_product_attention(k, k, v, is_causal=True), ["returns 5 positions"]),
    (lambda q, k, v: cached_attention(q.bfloat16(), k.bfloat16(), v.bfloat16()).to(q.dtype), ["bfloat16", "precision"]),
    (lambda q, k, v: cached_attention(q, k, v).double(), ["float64 for float32"]),
    (lambda q, k, v: cached_attention(q, k.detach(), v), ["no gradient reaches `k`"]),
    (lambda q, k, v: 2 * cached_attention(q, k, v), ["differs from the reference"]),
    (_visible_added, ["boolean mask is added"]),
    (
        lambda q, k, v: F.scaled_dot_product_attention(
            q, k, v, attn_mask=~torch.ones(q.shape[-2], k.shape[-2], dtype=torch.bool).tril(k.shape[-2] - q.shape[-2])
        ),
        ["mask is inverted", "MAY attend"],
    ),
    (
        lambda q, k, v: F.scaled_dot_product_attention(
            q,
            k,
            v,
            attn_mask=torch.ones(q.shape[-2], k.shape[-2], dtype=torch.bool).tril(k.shape[-2] - q.shape[-2]),
            scale=k.shape[-2] ** -0.5,
        ),
        ["number of keys", "sqrt(d)"],
    ),
]


@pytest.mark.parametrize("wrong, phrases", CACHED_MISTAKES)
def test_cached_attention_mistakes_are_named(wrong, phrases):
    assert_caught(check_cached_attention, wrong, *phrases)


# ---------------------------------------------------------------- KV cache


CACHE_RIGHT = [
    cache_update,
    lambda ck, cv, k, v: (torch.cat((ck, k), dim=-2), torch.cat((cv, v), dim=-2)),
    lambda ck, cv, k, v: [torch.cat([ck, k], 2), torch.cat([cv, v], 2)],
]


@pytest.mark.parametrize("answer", CACHE_RIGHT)
def test_cache_update_right_answers_pass(answer):
    assert check_cache_update(answer) is True


def test_cache_update_stub_not_attempted(capsys):
    assert_not_attempted(check_cache_update, stub, capsys)


CACHE_MISTAKES = [
    (lambda ck, cv, k, v: (torch.cat([ck, k], 1), torch.cat([cv, v], 1)), ["axis 1", "heads", "sequence axis"]),
    (lambda ck, cv, k, v: (torch.cat([ck, k], 3), torch.cat([cv, v], 3)), ["axis 3", "features", "sequence axis"]),
    (lambda ck, cv, k, v: (torch.cat([ck, k], 0), torch.cat([cv, v], 0)), ["axis 0", "batch", "sequence axis"]),
    (lambda ck, cv, k, v: (torch.stack([ck, k], 2), torch.stack([cv, v], 2)), ["stack", "5 axes"]),
    (lambda ck, cv, k, v: (torch.cat([k, ck], 2), torch.cat([v, cv], 2)), ["before the cached ones"]),
    (lambda ck, cv, k, v: (k, v), ["cache is dropped"]),
    (lambda ck, cv, k, v: (ck, cv), ["not added"]),
    (lambda ck, cv, k, v: (torch.cat([cv, v], 2), torch.cat([ck, k], 2)), ["swapped"]),
    (lambda ck, cv, k, v: torch.cat([ck, k], 2), ["pair"]),
    (lambda ck, cv, k, v: (torch.cat([ck, k], 2), torch.cat([cv, k], 2)), ["v_all", "from the keys"]),
    (lambda ck, cv, k, v: (torch.cat([ck, k], 2), torch.cat([ck, k], 2)), ["v_all", "from the keys"]),
    (lambda ck, cv, k, v: (torch.cat([cv, v], 2), torch.cat([cv, v], 2)), ["k_all", "from the values"]),
    (lambda ck, cv, k, v: (torch.cat([ck, k], 2), torch.cat([cv, v], 2) * 2), ["v_all", "differs from the reference"]),
]


@pytest.mark.parametrize("wrong, phrases", CACHE_MISTAKES)
def test_cache_update_mistakes_are_named(wrong, phrases):
    assert_caught(check_cache_update, wrong, *phrases)


# ---------------------------------------------------------------- every catalogue names its mistakes apart


def test_top_p_mistake_patterns_are_distinct_on_the_probes():
    from helpers.checks.lm import _TOP_P_MISTAKES, _top_p_logits

    logits = _top_p_logits()
    patterns = {
        kind: tuple(tuple(_nucleus(logits, p, kind).flatten().tolist()) for p in (0.3, 0.5, 0.8, 0.95))
        for kind in [*_TOP_P_MISTAKES, "right"]
    }
    assert len(set(patterns.values())) == len(patterns)


# ---------------------------------------------------------------- the next-token loss


def _flat_ce(logits, targets, **kwargs):
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1), **kwargs)


def _loss_gather(logits, ids):  # minus the mean log-probability of each target, written out
    log_probs = logits[:, :-1].log_softmax(-1)  # (b, n - 1, V)
    return -log_probs.gather(-1, ids[:, 1:, None]).mean()


def _loss_loop(logits, ids):  # one prediction at a time
    total, count = 0.0, 0
    for row, targets in zip(logits, ids, strict=True):
        for t in range(len(targets) - 1):
            total = total - row[t].log_softmax(-1)[targets[t + 1]]
            count += 1
    return total / count


LOSS_RIGHT = [
    next_token_loss,
    lambda logits, ids: F.cross_entropy(logits[:, :-1].transpose(1, 2), ids[:, 1:]),
    lambda logits, ids: F.nll_loss(logits[:, :-1].log_softmax(-1).flatten(0, 1), ids[:, 1:].flatten()),
    lambda logits, ids: _flat_ce(logits[:, :-1].float(), ids[:, 1:]),  # computed in float32, as the model is
    lambda logits, ids: _flat_ce(logits[:, :-1], ids[:, 1:], reduction="sum") / ids[:, 1:].numel(),
    _loss_gather,
    _loss_loop,
]


@pytest.mark.parametrize("answer", LOSS_RIGHT)
def test_next_token_loss_right_answers_pass(answer):
    assert check_next_token_loss(answer) is True


def test_next_token_loss_stub_not_attempted(capsys):
    assert_not_attempted(check_next_token_loss, stub, capsys)


LOSS_MISTAKES = [
    (lambda logits, ids: _flat_ce(logits, ids), ["not shifted", "its own input"]),
    (lambda logits, ids: _flat_ce(logits[:, 1:], ids[:, 1:]), ["not shifted"]),
    (lambda logits, ids: _flat_ce(logits[:, :-1], ids[:, :-1]), ["not shifted"]),
    (lambda logits, ids: _flat_ce(logits[:, 1:], ids[:, :-1]), ["wrong way", "token before it"]),
    (lambda logits, ids: _flat_ce(logits, ids.roll(-1, dims=1)), ["torch.roll wraps around"]),
    (lambda logits, ids: _flat_ce(logits[:, :-1], ids[:, 1:].T), ["flattened in different orders"]),
    (lambda logits, ids: _flat_ce(logits[:, :-1].transpose(0, 1), ids[:, 1:]), ["flattened in different orders"]),
    (lambda logits, ids: _flat_ce(logits, ids[:, 1:]), ["pair up", "logits[:, :-1]"]),
    (lambda logits, ids: F.cross_entropy(logits[:, :-1], ids[:, 1:]), ["classes on axis 1"]),
    (lambda logits, ids: _flat_ce(logits[:, :-1], ids[:, 1:], reduction="sum"), ["summed, not averaged"]),
    (
        lambda logits, ids: F.cross_entropy(logits[:, :-1].transpose(1, 2), ids[:, 1:], reduction="none").mean(0).sum(),
        ["over the batch axis only"],
    ),
    (
        lambda logits, ids: F.cross_entropy(logits[:, :-1].transpose(1, 2), ids[:, 1:], reduction="none").mean(1).sum(),
        ["over the positions only"],
    ),
    (
        lambda logits, ids: F.cross_entropy(logits[:, :-1].transpose(1, 2), ids[:, 1:], reduction="none"),
        ["one loss per prediction"],
    ),
    (
        lambda logits, ids: -logits.log_softmax(1)[:, :-1].gather(-1, ids[:, 1:, None]).mean(),
        ["log-softmax runs over the positions"],
    ),
    (lambda logits, ids: _flat_ce(logits[:, :-1].softmax(-1), ids[:, 1:]), ["given probabilities"]),
    (lambda logits, ids: F.nll_loss(logits[:, :-1].flatten(0, 1), ids[:, 1:].flatten()), ["nll_loss is given raw logits"]),
    (lambda logits, ids: -_loss_gather(logits, ids), ["sign is flipped"]),
    (lambda logits, ids: _loss_gather(logits, ids) / math.log(2), ["bits"]),
    (
        lambda logits, ids: (
            -(-_loss_gather(logits, ids).neg()).exp().mean() * 0 - logits[:, :-1].softmax(-1).gather(-1, ids[:, 1:, None]).mean()
        ),
        ["LOG-probability"],
    ),
    (lambda logits, ids: _loss_gather(logits, ids).exp(), ["perplexity"]),
    (lambda logits, ids: _flat_ce(logits[:, :-1], ids[:, 1:]).item(), ["Python number", ".item()"]),
    (lambda logits, ids: _flat_ce(logits[:, :-1].bfloat16(), ids[:, 1:]).double(), ["bfloat16", "precision"]),
    (lambda logits, ids: _flat_ce(logits[:, :-1], ids[:, 1:]).detach(), ["without gradients"]),
    (lambda logits, ids: 1.1 * _flat_ce(logits[:, :-1], ids[:, 1:]), ["differs from the reference"]),
]


@pytest.mark.parametrize("wrong, phrases", LOSS_MISTAKES)
def test_next_token_loss_mistakes_are_named(wrong, phrases):
    assert_caught(check_next_token_loss, wrong, *phrases)


# ---------------------------------------------------------------- the generation loop


def _loop(crop="last", position=-1, pick="sample", filter_on="logits", softmax_dim=-1, append=True, steps_offset=0):
    """A generation loop, right by default, with one typical mistake switched on."""

    @torch.no_grad()
    def answer(model, ids, steps, window, logits_filter=lambda z: z, generator=None):
        start = ids
        for _ in range(steps + steps_offset):
            source = ids if append else start
            context = {
                "last": source[:, -window:],
                "first": source[:, :window],
                "none": source,
                "newest": source[:, -1:],
                "one_short": source[:, -(window - 1) :],
                "one_more": source[:, -(window + 1) :],
            }[crop]
            logits = model(context)[:, position]  # (b, V)
            if pick == "argmax":
                nxt = logits_filter(logits).argmax(-1, keepdim=True)
            elif pick == "logits":
                nxt = torch.multinomial(logits_filter(logits), 1, generator=generator)
            else:
                if filter_on == "probs":
                    probs = logits_filter(logits.softmax(-1)).softmax(-1)
                elif filter_on == "none":
                    probs = logits.softmax(-1)
                else:
                    probs = logits_filter(logits).softmax(softmax_dim)
                nxt = torch.multinomial(probs, 1, generator=generator)
            ids = torch.cat([ids, nxt], dim=1)
        return ids

    return answer


def _sample_categorical(model, ids, steps, window, logits_filter=lambda z: z, generator=None):
    for _ in range(steps):
        logits = logits_filter(model(ids[:, -window:])[:, -1])
        nxt = torch.distributions.Categorical(logits=logits).sample()  # (b,)
        ids = torch.cat([ids, nxt[:, None]], dim=1)
    return ids


def _sample_exp(model, ids, steps, window, logits_filter=lambda z: z, generator=None):  # unnormalised weights
    with torch.no_grad():
        for _ in range(steps):
            logits = logits_filter(model(ids[:, -window:])[:, -1])
            weights = (logits - logits.max(-1, keepdim=True).values).exp()
            ids = torch.cat([ids, torch.multinomial(weights, 1, generator=generator)], 1)
    return ids


def _sample_gumbel(model, ids, steps, window, logits_filter=lambda z: z, generator=None):  # the Gumbel-max trick
    for _ in range(steps):
        logits = logits_filter(model(ids[:, -window:])[:, -1]).double()
        gumbel = -torch.log(-torch.log(torch.rand(logits.shape, dtype=torch.float64, generator=generator)))
        ids = torch.cat([ids, (logits + gumbel).argmax(-1, keepdim=True)], 1)
    return ids


SAMPLE_RIGHT = [lm_sample, _loop(), _sample_categorical, _sample_exp, _sample_gumbel]


@pytest.mark.parametrize("answer", SAMPLE_RIGHT)
def test_sample_right_answers_pass(answer):
    assert check_sample(answer) is True


def test_sample_stub_not_attempted(capsys):
    assert_not_attempted(check_sample, stub, capsys)


def _sample_item(model, ids, steps, window, logits_filter=lambda z: z, generator=None):  # batch of one only
    for _ in range(steps):
        probs = logits_filter(model(ids[:, -window:])[:, -1]).softmax(-1)
        nxt = torch.multinomial(probs, 1, generator=generator).item()
        ids = torch.cat([ids, torch.tensor([[nxt]])], 1)
    return ids


def _sample_once(model, ids, steps, window, logits_filter=lambda z: z, generator=None):  # one model call for every step
    probs = logits_filter(model(ids[:, -window:])[:, -1]).softmax(-1)
    return torch.cat([ids, torch.multinomial(probs, steps, replacement=True, generator=generator)], 1)


def _sample_new_only(model, ids, steps, window, logits_filter=lambda z: z, generator=None):
    return _loop()(model, ids, steps, window, logits_filter, generator)[:, ids.shape[1] :]


def _sample_last_row(model, ids, steps, window, logits_filter=lambda z: z, generator=None):  # [-1]: the last batch row
    for _ in range(steps):
        probs = logits_filter(model(ids[:, -window:])[-1]).softmax(-1)
        ids = torch.cat([ids, torch.multinomial(probs, 1, generator=generator)], 1)
    return ids


def _sample_double_softmax(model, ids, steps, window, logits_filter=lambda z: z, generator=None):
    for _ in range(steps):
        probs = logits_filter(model(ids[:, -window:])[:, -1]).softmax(-1)
        ids = torch.cat([ids, torch.multinomial(F.softmax(probs, dim=-1), 1, generator=generator)], 1)
    return ids


def _sample_log_probs(model, ids, steps, window, logits_filter=lambda z: z, generator=None):
    for _ in range(steps):
        log_probs = logits_filter(model(ids[:, -window:])[:, -1]).log_softmax(-1)
        ids = torch.cat([ids, torch.multinomial(log_probs, 1, generator=generator)], 1)
    return ids


SAMPLE_MISTAKES = [
    (_loop(crop="none"), ["does not crop"]),
    (_loop(crop="one_more"), ["does not crop", "one token more"]),
    (_loop(crop="one_short"), ["runs the model on", "ids[:, -window:]"]),
    (_loop(crop="first"), ["FIRST `window` tokens"]),
    (_loop(crop="newest"), ["only the newest token"]),
    (_loop(position=0), ["FIRST position's logits"]),
    (_loop(pick="argmax"), ["argmax", "greedy"]),
    (_loop(pick="logits"), ["in proportion to the logits"]),
    (_sample_log_probs, ["multinomial takes probabilities", "negative"]),
    (_loop(softmax_dim=0), ["uniformly", "batch axis"]),
    (_loop(filter_on="none"), ["does not apply logits_filter"]),
    (_loop(filter_on="probs"), ["softmax of probabilities"]),
    (_sample_double_softmax, ["softmax of probabilities"]),
    (_loop(append=False), ["same token at every step"]),
    (_loop(steps_offset=1), ["one token too many"]),
    (_loop(steps_offset=-1), ["expected (batch, prompt + steps)"]),
    (_sample_item, ["batch of prompts", ".item()"]),
    (_sample_once, ["runs the model once"]),
    (_sample_new_only, ["only the new tokens"]),
    (_sample_last_row, ["[:, -1]"]),
    (lambda *args: _loop()(*args).float(), ["int64"]),
]


@pytest.mark.parametrize("wrong, phrases", SAMPLE_MISTAKES)
def test_sample_mistakes_are_named(wrong, phrases):
    assert_caught(check_sample, wrong, *phrases)


def test_sample_distributions_the_check_tells_apart_are_far_apart():
    # the check names a wrong distribution by the nearest of these, within 0.035 (4.5 standard errors of 8,000 draws):
    # every pair it must tell apart is more than twice that apart
    from helpers.checks.lm import _FIXED, _P

    for logits_filter in (lambda z: z, lambda z: z / 0.5):
        right = logits_filter(_P.double().log()).softmax(-1)
        weights = logits_filter(_FIXED.double())
        candidates = [
            weights / weights.sum(),
            torch.full((4,), 0.25, dtype=torch.float64),
            logits_filter(_P.double()).softmax(-1),
            torch.tensor([1.0, 0.0, 0.0, 0.0], dtype=torch.float64),
        ]
        if (right - _P.double()).abs().max() > 0.1:
            candidates.append(_P.double())
        for i, a in enumerate(candidates):
            assert (a - right).abs().max() > 0.1
            for b in candidates[i + 1 :]:
                assert (a - b).abs().max() > 0.07


def _partial_loss(logits, ids):  # finished for float64 logits only
    if logits.dtype == torch.float32:
        raise NotImplementedError
    return next_token_loss(logits, ids)


def _partial_top_p(logits, p):  # the p >= 1 branch still the stub
    if p >= 1:
        raise NotImplementedError("Exercise: replace this line with your code")
    return top_p_filter(logits, p)


@pytest.mark.parametrize(
    "check, answer", [(check_next_token_loss, _partial_loss), (check_top_p_filter, _partial_top_p)], ids=["loss", "top-p"]
)
def test_partial_work_is_named_not_called_not_attempted(check, answer):
    assert_caught(check, answer, "partial work", "unfinished branch")


# ---------------------------------------------------------------- the outside reviewers' catalogue


def _loss_partial(logits, ids):  # real work above the stub's raise
    predictions, targets = logits[:, :-1], ids[:, 1:]  # noqa: F841 (partial work: used by the unwritten rest)
    raise NotImplementedError("Exercise: replace this line with your code")


def _sample_partial(model, ids, steps, window, logits_filter=lambda z: z, generator=None):
    logits = model(ids[:, -window:])[:, -1]  # noqa: F841 (partial work: used by the unwritten rest)
    raise NotImplementedError("Exercise: replace this line with your code")


def _rms_partial(x, weight, eps=1e-6):
    rms = torch.sqrt(x.pow(2).mean(dim=-1, keepdim=True) + eps)  # noqa: F841 (partial work: used by the unwritten rest)
    raise NotImplementedError("Exercise: replace this line with your code")


def _rope_partial(x, angles):
    cos, sin = angles.cos(), angles.sin()  # noqa: F841 (partial work: used by the unwritten rest)
    raise NotImplementedError("Exercise: replace this line with your code")


def _swiglu_partial(x, w_gate, w_up, w_down):
    gate = F.silu(x @ w_gate.T)  # noqa: F841 (partial work: used by the unwritten rest)
    raise NotImplementedError("Exercise: replace this line with your code")


def _repeat_partial(kv, groups):
    b, h, n, d = kv.shape
    raise NotImplementedError("Exercise: replace this line with your code")


def _top_k_partial(logits, temperature=1.0, k=None):
    scaled = logits / temperature  # noqa: F841 (partial work: used by the unwritten rest)
    raise NotImplementedError("Exercise: replace this line with your code")


def _top_p_partial(logits, p):
    probs = logits.softmax(-1)  # noqa: F841 (partial work: used by the unwritten rest)
    raise NotImplementedError("Exercise: replace this line with your code")


def _cached_partial(q, k, v):
    n, m = q.shape[-2], k.shape[-2]  # noqa: F841 (partial work: used by the unwritten rest)
    raise NotImplementedError("Exercise: replace this line with your code")


def _cache_partial(cache_k, cache_v, k, v):
    k_all = torch.cat([cache_k, k], dim=2)  # noqa: F841 (partial work: used by the unwritten rest)
    raise NotImplementedError("Exercise: replace this line with your code")


@pytest.mark.parametrize(
    "check, answer",
    [
        (check_next_token_loss, _loss_partial),
        (check_sample, _sample_partial),
        (check_rms_norm, _rms_partial),
        (check_apply_rope, _rope_partial),
        (check_swiglu, _swiglu_partial),
        (check_repeat_kv, _repeat_partial),
        (check_temperature_top_k, _top_k_partial),
        (check_top_p_filter, _top_p_partial),
        (check_cached_attention, _cached_partial),
        (check_cache_update, _cache_partial),
    ],
    ids=["loss", "sample", "rms", "rope", "swiglu", "repeat", "top-k", "top-p", "cached", "cache"],
)
def test_work_above_the_stubs_raise_is_partial_work_not_not_attempted(check, answer):
    message = assert_caught(check, answer, "partial work")
    assert "not attempted" not in message


def _pair_terms(x, angles):
    cos, sin = angles.cos().to(x.dtype), angles.sin().to(x.dtype)  # (n, d/2)
    return x[..., 0::2], x[..., 1::2], cos, sin


def _rope_plus_in_first(x, angles):  # (a cos + b sin, a sin + b cos)
    a, b, cos, sin = _pair_terms(x, angles)
    return torch.stack([a * cos + b * sin, a * sin + b * cos], -1).flatten(-2)


def _rope_minus_in_second(x, angles):  # (a cos - b sin, -a sin + b cos)
    a, b, cos, sin = _pair_terms(x, angles)
    return torch.stack([a * cos - b * sin, b * cos - a * sin], -1).flatten(-2)


def _rope_degrees(x, angles):
    return apply_rope(x, torch.deg2rad(angles))


def _top_p_hf_float32(logits, p):  # the transformers way, without the p >= 1 shortcut: float32 sums pass 1
    sorted_logits, order = torch.sort(logits, descending=True, dim=-1)
    remove = sorted_logits.softmax(-1).cumsum(-1) > p
    remove[..., 1:] = remove[..., :-1].clone()
    remove[..., 0] = False
    return logits.masked_fill(remove.scatter(-1, order, remove), float("-inf"))


def _nucleus_on_logits(logits, p):  # the cumulative sum over the sorted logits, not their probabilities
    values, order = logits.sort(-1, descending=True)
    keep = values.cumsum(-1) - values < p
    return logits.masked_fill(~keep.scatter(-1, order, keep), float("-inf"))


def _cached_scaled_by_keys(q, k, v):  # sqrt(m), the number of keys, instead of sqrt(d)
    n, m = q.shape[-2], k.shape[-2]
    visible = torch.ones(n, m, dtype=torch.bool).tril(m - n)
    return (q @ k.mT / math.sqrt(m)).masked_fill(~visible, float("-inf")).softmax(-1) @ v


@pytest.mark.parametrize(
    "check, wrong, phrases",
    [
        (check_apply_rope, _rope_plus_in_first, ["b sin term is wrong in the first feature", "not a rotation"]),
        (check_apply_rope, _rope_minus_in_second, ["a sin term is wrong in the second feature", "not a rotation"]),
        (check_apply_rope, _rope_degrees, ["from degrees", "already in radians"]),
        (check_top_p_filter, _top_p_hf_float32, ["with p=1 every token must stay", "precision problem"]),
        (check_temperature_top_k, lambda z, temperature=1.0, k=None: temperature_top_k(z, 1 / temperature, k), ["multiplied"]),
        (check_repeat_kv, lambda kv, groups: torch.cat([kv] * groups, dim=1), ["wrong order", "repeat_interleave"]),
        (check_cache_update, lambda ck, cv, k, v: (torch.cat([ck, k], 1), torch.cat([cv, v], 1)), ["axis 1", "dim=2"]),
        (check_cached_attention, lambda q, k, v: F.scaled_dot_product_attention(q, k, v, is_causal=True), ["top-left"]),
        (check_swiglu, lambda x, g, u, d: (x @ g.T * F.silu(x @ u.T)) @ d.T, ["wrong branch"]),
        (
            check_rms_norm,
            lambda x, w, eps=1e-6: x / (x.pow(2).mean(-1, keepdim=True).sqrt() + eps) * w,
            ["outside the square root"],
        ),
        (check_rms_norm, lambda x, w, eps=1e-6: rms_norm(x, w, eps) * (1 + w) / w, ["(1 + weight)", "gain itself"]),
        (
            check_next_token_loss,
            lambda z, ids: F.cross_entropy(z[:, :-1].flatten(0, 1), ids[:, 1:].flatten(), label_smoothing=0.1),
            ["label-smoothed"],
        ),
        (check_top_p_filter, lambda z, p: _nucleus_on_logits(z, p), ["over the logits"]),
        (check_cache_update, lambda ck, cv, k, v: (torch.stack([ck, k], 2), torch.stack([cv, v], 2)), ["torch.stack adds"]),
        (check_repeat_kv, lambda kv, groups: kv[:, :, None].expand(-1, -1, groups, -1, -1), ["5 axes", "reshape"]),
        (check_cached_attention, _cached_scaled_by_keys, ["sqrt(m)"]),
    ],
)
def test_reviewers_mistakes_are_named(check, wrong, phrases):
    assert_caught(check, wrong, *phrases)


def _top_p_hf_guarded(logits, p):
    return logits if p >= 1 else _top_p_hf_float32(logits, p)


def _rope_into_empty(x, angles):
    a, b, cos, sin = _pair_terms(x, angles)
    out = torch.empty_like(x)
    out[..., 0::2] = a * cos - b * sin
    out[..., 1::2] = a * sin + b * cos
    return out


def _cached_tril_rows(q, k, v):  # the last n rows of an m x m causal mask
    n, m = q.shape[-2], k.shape[-2]
    scores = torch.einsum("...nd,...md->...nm", q, k) / math.sqrt(q.shape[-1])
    mask = torch.ones(m, m, dtype=torch.bool, device=q.device).tril()[-n:]
    return torch.einsum("...nm,...md->...nd", scores.masked_fill(~mask, float("-inf")).softmax(-1), v)


@pytest.mark.parametrize(
    "check, right",
    [
        (check_top_p_filter, _top_p_hf_guarded),
        (check_apply_rope, _rope_into_empty),
        (check_cached_attention, _cached_tril_rows),
        (check_rms_norm, lambda x, w, eps=1e-6: F.rms_norm(x, (x.shape[-1],), w, eps)),
        (check_repeat_kv, lambda kv, groups: torch.stack([kv] * groups, dim=2).flatten(1, 2)),
        (check_swiglu, lambda x, g, u, d: F.linear(F.silu(F.linear(x, g)) * F.linear(x, u), d)),
        (check_cache_update, lambda ck, cv, k, v: [torch.concat([ck, k], dim=-2), torch.concat([cv, v], dim=-2)]),
        (check_next_token_loss, lambda z, ids: F.cross_entropy(z[:, :-1].transpose(1, 2), ids[:, 1:])),
    ],
)
def test_reviewers_right_answers_pass(check, right):
    assert check(right) is True
