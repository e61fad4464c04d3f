"""The checks of notebook 11 pass the reference and other natural answers, spot the stub and name the typical mistakes."""

from __future__ import annotations

import pytest
import torch

from helpers.checks.lm import _nucleus, check_apply_rope, check_cache_update, check_repeat_kv, check_rms_norm, check_top_p_filter
from helpers.models.lm import apply_rope, apply_rope_complex, cache_update, filter_logits, repeat_kv, rms_norm
from tests.conftest import assert_caught, assert_not_attempted


def stub(*args, **kwargs):
    raise NotImplementedError("Exercise: fill in")


# ---------------------------------------------------------------- RMSNorm


def test_rms_norm_reference_and_variants_pass():
    assert check_rms_norm(rms_norm) is True
    assert check_rms_norm(lambda x, w, eps: x / (x * x).mean(-1, keepdim=True).add(eps).sqrt() * w) is True
    assert check_rms_norm(lambda x, w, eps: torch.nn.functional.rms_norm(x, (x.shape[-1],), w, eps)) is True


def test_rms_norm_stub_not_attempted(capsys):
    assert_not_attempted(check_rms_norm, stub, capsys)
    assert_not_attempted(check_rms_norm, ..., capsys)


RMS_MISTAKES = [
    (lambda x, w, eps: x / torch.sqrt(x.pow(2).mean(-2, keepdim=True) + eps) * w, ["wrong axis"]),
    (lambda x, w, eps: x / torch.sqrt(x.pow(2).mean(0, keepdim=True) + eps) * w, ["batch axis"]),
    (lambda x, w, eps: x / torch.sqrt(x.pow(2).sum(-1, keepdim=True) + eps) * w, ["summed, not averaged"]),
    (lambda x, w, eps: x / (x.pow(2).mean(-1, keepdim=True) + eps) * w, ["square root is missing"]),
    (lambda x, w, eps: torch.nn.functional.layer_norm(x, (x.shape[-1],), w, None, eps), ["LayerNorm"]),
    (lambda x, w, eps: x / torch.sqrt(x.pow(2).mean(-1, keepdim=True) + eps), ["gain"]),
    (lambda x, w, eps: x * torch.sqrt(x.pow(2).mean(-1, keepdim=True) + eps) * w, ["instead of divided"]),
    (lambda x, w, eps: x / (torch.sqrt(x.pow(2).mean(-1, keepdim=True)) + eps) * w, ["outside the square root"]),
    (lambda x, w, eps: 2 * rms_norm(x, w, eps), ["differs from the reference"]),
]


@pytest.mark.parametrize("wrong, phrases", RMS_MISTAKES)
def test_rms_norm_mistakes_are_named(wrong, phrases):
    assert_caught(check_rms_norm, wrong, *phrases)


# ---------------------------------------------------------------- RoPE


def test_rope_reference_and_variants_pass():
    assert check_apply_rope(apply_rope) is True
    assert check_apply_rope(apply_rope_complex) is True

    def with_matrix(x, angles):  # each pair times a 2x2 rotation matrix
        c, s = angles.cos(), angles.sin()
        rot = torch.stack([torch.stack([c, -s], -1), torch.stack([s, c], -1)], -2)  # (n, d/2, 2, 2)
        pairs = x.unflatten(-1, (-1, 2))  # (..., n, d/2, 2)
        return (rot @ pairs.unsqueeze(-1)).squeeze(-1).flatten(-2)

    assert check_apply_rope(with_matrix) is True


def test_rope_stub_not_attempted(capsys):
    assert_not_attempted(check_apply_rope, stub, capsys)


def _half_split(x, angles):
    d = x.shape[-1]
    a, b = x[..., : d // 2], x[..., d // 2 :]
    return torch.cat([a * angles.cos() - b * angles.sin(), a * angles.sin() + b * angles.cos()], -1)


def _concat(x, angles):
    a, b = x[..., 0::2], x[..., 1::2]
    return torch.cat([a * angles.cos() - b * angles.sin(), a * angles.sin() + b * angles.cos()], -1)


ROPE_MISTAKES = [
    (_half_split, ["wrong features", "half-split"]),
    (lambda x, angles: apply_rope(x, -angles), ["wrong way"]),
    (_concat, ["not put back in place"]),
    (lambda x, angles: apply_rope(x, angles.flip(0)), ["positions are reversed"]),
    (lambda x, angles: x, ["unchanged"]),
    (lambda x, angles: apply_rope(x, 2 * angles), ["differs from the reference"]),
]


@pytest.mark.parametrize("wrong, phrases", ROPE_MISTAKES)
def test_rope_mistakes_are_named(wrong, phrases):
    assert_caught(check_apply_rope, wrong, *phrases)


# ---------------------------------------------------------------- GQA


def test_repeat_kv_reference_and_variants_pass():
    assert check_repeat_kv(repeat_kv) is True

    def expand(kv, groups):
        b, g, n, d = kv.shape
        return kv[:, :, None].expand(b, g, groups, n, d).reshape(b, g * groups, n, d)

    assert check_repeat_kv(expand) is True
    assert check_repeat_kv(lambda kv, groups: torch.cat([kv[:, i : i + 1] for i in range(kv.shape[1]) for _ in range(groups)], 1))


def test_repeat_kv_stub_not_attempted(capsys):
    assert_not_attempted(check_repeat_kv, stub, capsys)


REPEAT_MISTAKES = [
    (lambda kv, groups: kv.repeat(1, groups, 1, 1), ["wrong order", "repeat_interleave"]),
    (lambda kv, groups: kv.repeat_interleave(groups, dim=2), ["axis 2"]),
    (lambda kv, groups: kv.repeat_interleave(groups, dim=3), ["axis 3"]),
    (lambda kv, groups: kv, ["wrong shape"]),
    (lambda kv, groups: kv.repeat_interleave(groups, dim=1).flip(1), ["differs from the reference"]),
]


@pytest.mark.parametrize("wrong, phrases", REPEAT_MISTAKES)
def test_repeat_kv_mistakes_are_named(wrong, phrases):
    assert_caught(check_repeat_kv, wrong, *phrases)


# ---------------------------------------------------------------- KV cache


def test_cache_update_reference_and_variants_pass():
    assert check_cache_update(cache_update) is True
    assert check_cache_update(lambda ck, cv, k, v: (torch.cat((ck, k), dim=-2), torch.cat((cv, v), dim=-2))) is True
    assert check_cache_update(lambda ck, cv, k, v: [torch.cat([ck, k], 2), torch.cat([cv, v], 2)]) is True


def test_cache_update_stub_not_attempted(capsys):
    assert_not_attempted(check_cache_update, stub, capsys)


CACHE_MISTAKES = [
    (lambda ck, cv, k, v: (torch.cat([ck, k], 1), torch.cat([cv, v], 1)), ["axis 1", "sequence axis"]),
    (lambda ck, cv, k, v: (torch.cat([ck, k], 3), torch.cat([cv, v], 3)), ["axis 3", "sequence axis"]),
    (lambda ck, cv, k, v: (torch.cat([k, ck], 2), torch.cat([v, cv], 2)), ["before the cached ones"]),
    (lambda ck, cv, k, v: (k, v), ["cache is dropped"]),
    (lambda ck, cv, k, v: (ck, cv), ["not added"]),
    (lambda ck, cv, k, v: (torch.cat([cv, v], 2), torch.cat([ck, k], 2)), ["swapped"]),
    (lambda ck, cv, k, v: torch.cat([ck, k], 2), ["pair"]),
    (lambda ck, cv, k, v: (torch.cat([ck, k], 2), torch.cat([cv, k], 2)), ["v_all", "differs from the reference"]),
]


@pytest.mark.parametrize("wrong, phrases", CACHE_MISTAKES)
def test_cache_update_mistakes_are_named(wrong, phrases):
    assert_caught(check_cache_update, wrong, *phrases)


# ---------------------------------------------------------------- top-p


def _top_p_sorted(logits, p):
    probs = logits.softmax(-1)
    sorted_probs, order = probs.sort(dim=-1, descending=True)
    keep = (sorted_probs.cumsum(-1) - sorted_probs) < p
    return logits.masked_fill(~keep.scatter(-1, order, keep), float("-inf"))


def _top_p_loop(logits, p):
    out = torch.full_like(logits, float("-inf"))
    for i, row in enumerate(logits):
        total = 0.0
        for j in row.softmax(-1).argsort(descending=True).tolist():
            out[i, j] = row[j]
            total += row.softmax(-1)[j].item()
            if total >= p:
                break
    return out


def test_top_p_reference_and_variants_pass():
    assert check_top_p_filter(lambda logits, p: filter_logits(logits, top_p=p)) is True
    assert check_top_p_filter(_top_p_sorted) is True
    assert check_top_p_filter(_top_p_loop) is True


def test_top_p_stub_not_attempted(capsys):
    assert_not_attempted(check_top_p_filter, stub, capsys)


def _variant(kind):
    def wrong(logits, p):
        probs = logits.softmax(-1)
        sorted_probs, order = probs.sort(dim=-1, descending=kind != "ascending")
        cumulative = sorted_probs.cumsum(0 if kind == "axis0" else -1)
        keep = cumulative < p if kind == "exclusive" else (cumulative - sorted_probs) < p
        if kind != "unsorted":
            keep = keep.scatter(-1, order, keep)
        if kind == "own":
            keep = probs >= p
        if kind == "mask":
            return keep
        if kind == "probs":
            return probs.masked_fill(~keep, float("-inf"))
        return logits.masked_fill(~keep, float("-inf"))

    return wrong


TOP_P_MISTAKES = [
    (_variant("exclusive"), ["includes that token"]),
    (_variant("ascending"), ["least likely"]),
    (_variant("unsorted"), ["original order"]),
    (_variant("axis0"), ["wrong axis"]),
    (_variant("own"), ["own probability"]),
    (_variant("mask"), ["boolean mask"]),
    (_variant("probs"), ["probabilities"]),
    (lambda logits, p: logits.masked_fill(~_nucleus(logits, p, "logits_cumsum"), float("-inf")), ["over the logits"]),
    (lambda logits, p: filter_logits(logits, top_p=p).nan_to_num(neginf=-1e9), ["keeps tokens", "expected"]),
    (lambda logits, p: filter_logits(logits, top_p=p) * 2, ["were changed"]),
]


@pytest.mark.parametrize("wrong, phrases", TOP_P_MISTAKES)
def test_top_p_mistakes_are_named(wrong, phrases):
    assert_caught(check_top_p_filter, wrong, *phrases)
