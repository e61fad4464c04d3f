"""helpers.attention equals PyTorch's own implementations."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from helpers.attention import (
    AdditiveAttention,
    MultiHeadAttention,
    MultiplicativeAttention,
    causal_mask,
    copy_mha_to_torch,
    dot_product_scores,
    padding_mask,
    scaled_dot_product_attention,
    softmax,
)

TOL = dict(atol=1e-6, rtol=1e-6)


@pytest.mark.parametrize("dim", [0, 1, -1])
def test_softmax_matches_torch(dim):
    x = torch.randn(2, 3, 4, dtype=torch.float64)
    torch.testing.assert_close(softmax(x, dim), torch.softmax(x, dim), **TOL)


def test_softmax_is_stable_for_large_inputs():
    x = torch.tensor([[1000.0, 999.0, -1000.0], [-1e4, -1e4 + 1, -1e4 + 2]])
    out = softmax(x)
    assert torch.isfinite(out).all()
    torch.testing.assert_close(out, torch.softmax(x, -1), **TOL)


@pytest.mark.parametrize("with_mask", [False, True])
def test_sdpa_matches_torch(with_mask):
    q, k, v = torch.randn(2, 3, 5), torch.randn(2, 4, 5), torch.randn(2, 4, 6)
    mask = None
    if with_mask:
        mask = torch.rand(2, 3, 4) > 0.5
        mask[..., 0] = True
    out, weights = scaled_dot_product_attention(q, k, v, mask)
    torch.testing.assert_close(out, F.scaled_dot_product_attention(q, k, v, attn_mask=mask), **TOL)
    assert weights.shape == (2, 3, 4)
    torch.testing.assert_close(weights.sum(-1), torch.ones(2, 3), **TOL)
    if with_mask:
        assert (weights[~mask] == 0).all()


def test_causal_mask_and_sdpa_is_causal():
    assert causal_mask(3).tolist() == [[True, False, False], [True, True, False], [True, True, True]]
    x = torch.randn(1, 5, 4)
    out, _ = scaled_dot_product_attention(x, x, x, causal_mask(5))
    torch.testing.assert_close(out, F.scaled_dot_product_attention(x, x, x, is_causal=True), **TOL)


def test_padding_mask():
    m = padding_mask(torch.tensor([2, 3]), 4)
    assert m.shape == (2, 1, 4)
    assert m[0, 0].tolist() == [True, True, False, False]


@pytest.mark.parametrize("bias", [True, False])
@pytest.mark.parametrize("masked", [False, True])
def test_mha_matches_nn_multiheadattention(bias, masked):
    torch.manual_seed(0)
    ours = MultiHeadAttention(16, 4, bias=bias).eval()
    theirs = copy_mha_to_torch(ours, nn.MultiheadAttention(16, 4, bias=bias, batch_first=True)).eval()
    x = torch.randn(2, 5, 16)
    mask = causal_mask(5) if masked else None
    out, weights = ours(x, x, x, mask)
    ref_out, ref_w = theirs(x, x, x, attn_mask=None if mask is None else ~mask, average_attn_weights=False)
    torch.testing.assert_close(out, ref_out, **TOL)
    torch.testing.assert_close(weights, ref_w, **TOL)
    fused, none = ours(x, x, x, mask, need_weights=False)
    assert none is None
    torch.testing.assert_close(fused, ref_out, **TOL)


def test_mha_walkthrough_sizes_cross_attention_and_padding():
    torch.manual_seed(0)
    ours = MultiHeadAttention(768, 12).eval()
    theirs = copy_mha_to_torch(ours, nn.MultiheadAttention(768, 12, batch_first=True)).eval()
    q, kv = torch.randn(1, 5, 768), torch.randn(1, 7, 768)
    keep = padding_mask(torch.tensor([6]), 7)  # (1, 1, 7)
    out, weights = ours(q, kv, kv, keep)
    ref_out, ref_w = theirs(q, kv, kv, key_padding_mask=~keep[:, 0], average_attn_weights=False)
    assert weights.shape == (1, 12, 5, 7)
    torch.testing.assert_close(out, ref_out, **TOL)
    torch.testing.assert_close(weights, ref_w, **TOL)


@pytest.mark.parametrize("masked", [False, True])
def test_mha_walkthrough_sizes_with_and_without_causal_mask(masked):
    """Notebook 04's sizes: d_model 768, 12 heads, 5 tokens."""
    torch.manual_seed(0)
    ours = MultiHeadAttention(768, 12).eval()
    theirs = copy_mha_to_torch(ours, nn.MultiheadAttention(768, 12, batch_first=True)).eval()
    x = torch.randn(1, 5, 768)
    mask = causal_mask(5) if masked else None
    out, weights = ours(x, x, x, mask)
    ref_out, ref_w = theirs(x, x, x, attn_mask=None if mask is None else ~mask, average_attn_weights=False)
    assert out.shape == (1, 5, 768) and weights.shape == (1, 12, 5, 5)
    torch.testing.assert_close(out, ref_out, **TOL)
    torch.testing.assert_close(weights, ref_w, **TOL)


def test_mha_rejects_indivisible_heads():
    with pytest.raises(ValueError, match="not divisible"):
        MultiHeadAttention(10, 3)


def test_scoring_variants_shapes_and_parameters():
    s, h = torch.randn(2, 6), torch.randn(2, 4, 6)
    torch.testing.assert_close(dot_product_scores(s, h), torch.einsum("bd,bmd->bm", s, h), **TOL)
    mult = MultiplicativeAttention(6, 6)
    torch.testing.assert_close(mult(s, h), torch.einsum("bd,de,bme->bm", s, mult.W.weight, h), **TOL)
    add = AdditiveAttention(d_s=6, d_h=5, d_att=7)
    assert add(s, torch.randn(2, 4, 5)).shape == (2, 4)
    assert sum(p.numel() for p in add.parameters()) == 7 * (5 + 6 + 1)
    assert math.isclose(sum(p.numel() for p in mult.parameters()), 36)


@pytest.mark.parametrize(
    "mask",
    [
        torch.zeros(3, 3).masked_fill(~causal_mask(3), float("-inf")),  # additive 0 / -inf
        causal_mask(3).float(),  # 0 / 1 float
        causal_mask(3).long(),  # 0 / 1 integer
    ],
    ids=["additive", "float01", "int01"],
)
def test_non_boolean_masks_are_rejected_with_the_conversion(mask):
    q = torch.randn(1, 3, 4)
    with pytest.raises(TypeError, match="boolean, True = may attend") as info:
        scaled_dot_product_attention(q, q, q, mask)
    assert "mask == 0" in str(info.value) and "mask.bool()" in str(info.value)
    mha = MultiHeadAttention(4, 2)
    with pytest.raises(TypeError, match="boolean"):
        mha(q, q, q, mask)


def test_converted_additive_mask_gives_the_boolean_result():
    q = torch.randn(1, 3, 4, dtype=torch.float64)
    additive = torch.zeros(3, 3, dtype=torch.float64).masked_fill(~causal_mask(3), float("-inf"))
    torch.testing.assert_close(
        scaled_dot_product_attention(q, q, q, additive == 0)[0], scaled_dot_product_attention(q, q, q, causal_mask(3))[0]
    )
