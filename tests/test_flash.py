"""helpers.scale.flash: the online softmax and FlashAttention's tiled forward and backward passes, against PyTorch."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

from helpers.scale.flash import (
    attention_with_lse,
    flash_attention,
    flash_backward,
    flash_forward,
    merge_softmax_stats,
    online_softmax_stats,
    tile_counts,
)


@pytest.mark.parametrize("n, block", [(10, 4), (10, 10), (10, 16), (1, 1), (37, 5)])
def test_online_softmax_stats_equal_max_and_logsumexp(n, block):
    x = torch.randn(3, 2, n, dtype=torch.float64) * 5
    m, s = online_softmax_stats(x, block)  # (3, 2, 1) each
    assert m.shape == s.shape == (3, 2, 1)
    torch.testing.assert_close(m, x.amax(-1, keepdim=True), atol=0, rtol=0)
    torch.testing.assert_close((m + s.log()).squeeze(-1), torch.logsumexp(x, -1), atol=1e-12, rtol=0)
    torch.testing.assert_close(torch.exp(x - m) / s, torch.softmax(x, -1), atol=1e-12, rtol=0)


def test_online_softmax_is_stable_for_very_negative_and_very_large_rows():
    x = torch.stack([torch.linspace(-1010.0, -1000.0, 9), torch.linspace(800.0, 1000.0, 9)]).double()  # (2, 9)
    m, s = online_softmax_stats(x, 2)
    assert torch.isfinite(s).all() and (s >= 1).all()
    torch.testing.assert_close(torch.exp(x - m) / s, torch.softmax(x, -1), atol=1e-12, rtol=0)


def test_online_softmax_rejects_a_block_below_one():
    with pytest.raises(ValueError, match="block"):
        online_softmax_stats(torch.randn(3), 0)


def test_merge_is_symmetric_and_gives_the_whole_row():
    x = torch.randn(4, 50, dtype=torch.float64) * 3
    m, s = online_softmax_stats(x, 7)
    m1, s1 = online_softmax_stats(x[:, :13], 4)
    m2, s2 = online_softmax_stats(x[:, 13:], 6)
    for merged in (merge_softmax_stats(m1, s1, m2, s2), merge_softmax_stats(m2, s2, m1, s1)):
        torch.testing.assert_close(merged[0], m, atol=0, rtol=0)
        torch.testing.assert_close(merged[1], s, atol=1e-12, rtol=1e-12)


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("blocks", [(64, 64), (7, 5), (1, 3), (2000, 2000)])
def test_flash_forward_equals_sdpa_and_logsumexp_float64(causal, blocks):
    n, m = (37, 37) if causal else (37, 41)
    q = torch.randn(2, 3, n, 8, dtype=torch.float64)
    k, v = torch.randn(2, 3, m, 8, dtype=torch.float64), torch.randn(2, 3, m, 5, dtype=torch.float64)
    out, lse = flash_forward(q, k, v, *blocks, causal=causal)
    assert out.shape == (2, 3, n, 5) and lse.shape == (2, 3, n) and out.dtype == torch.float64
    torch.testing.assert_close(out, F.scaled_dot_product_attention(q, k, v, is_causal=causal), atol=1e-12, rtol=0)
    naive_out, naive_lse = attention_with_lse(q, k, v, causal)
    torch.testing.assert_close(out, naive_out, atol=1e-12, rtol=0)
    torch.testing.assert_close(lse, naive_lse, atol=1e-12, rtol=0)


@pytest.mark.parametrize("causal", [False, True])
def test_the_issue_target_n_1000_block_64(causal):
    """Tiled equals naive attention to 1e-5 in float32 and 1e-12 in float64, N = 1,000, block 64."""
    for dtype, tol in ((torch.float32, 1e-5), (torch.float64, 1e-12)):
        gen = torch.Generator().manual_seed(0)
        q, k, v = (torch.randn(1000, 64, dtype=dtype, generator=gen) for _ in range(3))
        out, lse = flash_forward(q, k, v, 64, 64, causal)
        naive_out, naive_lse = attention_with_lse(q, k, v, causal)
        assert (out - naive_out).abs().max().item() < tol
        assert (lse - naive_lse).abs().max().item() < tol


def test_flash_forward_skips_whole_tiles_under_the_causal_mask():
    assert tile_counts(1000, 1000, 64, 64, causal=True) == (136, 256)
    assert tile_counts(1000, 1000, 64, 64, causal=False) == (256, 256)
    assert tile_counts(13, 13, 4, 3, causal=True) == (sum(min(5, math.ceil(min(i0 + 4, 13) / 3)) for i0 in range(0, 13, 4)), 20)
    # the count agrees with the loop: count the key blocks the reference visits
    visited = [(i0, j0) for i0 in range(0, 13, 4) for j0 in range(0, 13, 3) if j0 < min(i0 + 4, 13)]
    assert tile_counts(13, 13, 4, 3, causal=True)[0] == len(visited)


def test_flash_forward_rejects_bad_inputs():
    q = torch.randn(5, 4)
    with pytest.raises(ValueError, match="causal"):
        flash_forward(q, torch.randn(6, 4), torch.randn(6, 3), causal=True)
    with pytest.raises(ValueError, match="do not fit"):
        flash_forward(q, torch.randn(6, 3), torch.randn(6, 3))
    with pytest.raises(ValueError, match="block"):
        flash_forward(q, q, q, block_q=0)


@pytest.mark.parametrize("causal", [False, True])
def test_flash_backward_equals_autograd(causal):
    q, k, v = (torch.randn(2, 2, 45, 6, dtype=torch.float64, requires_grad=True) for _ in range(3))
    dout = torch.randn(2, 2, 45, 6, dtype=torch.float64)
    ref = torch.autograd.grad(F.scaled_dot_product_attention(q, k, v, is_causal=causal), (q, k, v), dout)
    with torch.no_grad():
        out, lse = flash_forward(q, k, v, 16, 8, causal)
        grads = flash_backward(q, k, v, out, lse, dout, 16, 8, causal)
    for ours, theirs in zip(grads, ref, strict=True):
        torch.testing.assert_close(ours, theirs, atol=1e-12, rtol=0)
    via_function = torch.autograd.grad(flash_attention(q, k, v, 10, 12, causal), (q, k, v), dout)
    for ours, theirs in zip(via_function, ref, strict=True):
        torch.testing.assert_close(ours, theirs, atol=1e-12, rtol=0)


def test_flash_attention_passes_gradcheck():
    q, k, v = (torch.randn(1, 7, 3, dtype=torch.float64, requires_grad=True) for _ in range(3))
    assert torch.autograd.gradcheck(lambda a, b, c: flash_attention(a, b, c, 3, 2, True), (q, k, v))


def test_flash_backward_with_different_query_and_key_lengths():
    q = torch.randn(9, 4, dtype=torch.float64, requires_grad=True)
    k = torch.randn(14, 4, dtype=torch.float64, requires_grad=True)
    v = torch.randn(14, 3, dtype=torch.float64, requires_grad=True)
    dout = torch.randn(9, 3, dtype=torch.float64)
    ref = torch.autograd.grad(F.scaled_dot_product_attention(q, k, v), (q, k, v), dout)
    ours = torch.autograd.grad(flash_attention(q, k, v, 4, 5), (q, k, v), dout)
    for a, b in zip(ours, ref, strict=True):
        torch.testing.assert_close(a, b, atol=1e-12, rtol=0)


def test_flash_block_is_one_query_block_of_flash_forward():
    from helpers.scale.flash import flash_block

    q, k, v = (
        torch.randn(2, 9, 5, dtype=torch.float64),
        torch.randn(2, 13, 5, dtype=torch.float64),
        torch.randn(2, 13, 3, dtype=torch.float64),
    )
    out, lse = flash_block(q[:, 4:8], k, v, 4)
    full_out, full_lse = attention_with_lse(q, k, v)
    torch.testing.assert_close(out, full_out[:, 4:8], atol=1e-12, rtol=0)
    torch.testing.assert_close(lse, full_lse[:, 4:8], atol=1e-12, rtol=0)
    with pytest.raises(ValueError, match="block"):
        flash_block(q, k, v, 0)


def test_causal_tile_mask_skips_masks_and_keeps_whole():
    from helpers.scale.flash import causal_tile_mask

    assert causal_tile_mask(4, 8, 8, 11) is None  # every key after every query
    assert causal_tile_mask(8, 12, 9, 12).tolist() == [[False] * 3, [True, False, False], [True, True, False], [True] * 3]
    assert bool(causal_tile_mask(8, 12, 0, 8).all())  # wholly below: all True


def test_a_tile_mask_function_drives_the_causal_loop():
    """flash_forward(causal=True, tile_mask=fn) asks fn about the tiles that reach the diagonal, and skips on None."""
    from helpers.scale.flash import causal_tile_mask

    asked = []

    def recording(i0, i1, j0, j1):
        asked.append((i0, j0))
        return causal_tile_mask(i0, i1, j0, j1)

    q, k, v = (torch.randn(13, 4, dtype=torch.float64) for _ in range(3))
    out, _ = flash_forward(q, k, v, 4, 3, causal=True, tile_mask=recording)
    torch.testing.assert_close(out, F.scaled_dot_product_attention(q, k, v, is_causal=True), atol=1e-12, rtol=0)
    assert all(j0 + 3 - 1 > i0 for i0, j0 in asked)  # never asked about a tile wholly below the diagonal
    assert (8, 12) in asked  # the first key block past the diagonal: None, the loop stops there


def test_tile_update_and_tile_backward_match_their_formulas():
    from helpers.scale.flash import tile_backward, tile_update

    s, v = torch.randn(3, 4, dtype=torch.float64), torch.randn(4, 2, dtype=torch.float64)
    m, total, acc = (
        torch.full((3, 1), -math.inf, dtype=torch.float64),
        torch.zeros(3, 1, dtype=torch.float64),
        torch.zeros(3, 2, dtype=torch.float64),
    )
    m, total, acc = tile_update(m, total, acc, s, v)
    torch.testing.assert_close(acc / total, torch.softmax(s, -1) @ v, atol=1e-12, rtol=0)
    q, k = torch.randn(5, 4, dtype=torch.float64, requires_grad=True), torch.randn(6, 4, dtype=torch.float64, requires_grad=True)
    vv = torch.randn(6, 3, dtype=torch.float64, requires_grad=True)
    dout = torch.randn(5, 3, dtype=torch.float64)
    out, lse = attention_with_lse(q, k, vv)
    grads = tile_backward(q.detach(), k.detach(), vv.detach(), dout, lse.detach(), (dout * out.detach()).sum(-1))
    for ours, theirs in zip(grads, torch.autograd.grad(out, (q, k, vv), dout), strict=True):
        torch.testing.assert_close(ours, theirs, atol=1e-12, rtol=0)


def test_flash_backward_runs_a_tile_function_it_is_given():
    from helpers.scale.flash import tile_backward

    calls = []

    def counting(*args):
        calls.append(1)
        return tile_backward(*args)

    q, k, v = (torch.randn(9, 4, dtype=torch.float64, requires_grad=True) for _ in range(3))
    dout = torch.randn(9, 4, dtype=torch.float64)
    ours = torch.autograd.grad(flash_attention(q, k, v, 4, 3, True, counting), (q, k, v), dout)
    theirs = torch.autograd.grad(F.scaled_dot_product_attention(q, k, v, is_causal=True), (q, k, v), dout)
    assert len(calls) == tile_counts(9, 9, 4, 3, causal=True)[0]
    for a, b in zip(ours, theirs, strict=True):
        torch.testing.assert_close(a, b, atol=1e-12, rtol=0)


def test_cpu_kernel_blocks():
    from helpers.scale.flash import cpu_kernel_blocks, tile_counts

    assert [cpu_kernel_blocks(n) for n in (100, 192, 767, 768, 4096)] == [(32, 512), (64, 512), (64, 512), (256, 512), (256, 512)]
    # under a causal mask PyTorch's CPU kernel computes whole key blocks up to the diagonal: 20 of 32 at n = 2,048
    assert tile_counts(2048, 2048, *cpu_kernel_blocks(2048), causal=True) == (20, 32)
    assert tile_counts(512, 512, *cpu_kernel_blocks(512), causal=True) == (8, 8)  # one key block: nothing to skip
    with pytest.raises(ValueError):
        cpu_kernel_blocks(0)
