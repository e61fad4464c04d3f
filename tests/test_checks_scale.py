"""The checks of notebook 12 pass the reference and other natural answers, spot the stub and name the typical mistakes.

Each catalogue below holds wrong answers written the way a learner writes them (not only the checks' own rebuilt
mistakes), each asserted with the words of its named message, and right answers written other natural ways.
"""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

from helpers.checks.scale import (
    _block,
    _forward,
    _linear,
    _stats,
    _tile,
    _tile_grads,
    check_causal_tile_mask,
    check_flash_block,
    check_flash_forward,
    check_linear_attention_recurrent,
    check_online_softmax_stats,
    check_sliding_window_mask,
    check_tile_backward,
)
from helpers.scale.flash import (
    attention_with_lse,
    causal_tile_mask,
    flash_block,
    flash_forward,
    online_softmax_stats,
    tile_backward,
)
from helpers.scale.linear_attention import (
    elu_feature_map,
    linear_attention_chunked,
    linear_attention_parallel,
    linear_attention_recurrent,
)
from helpers.scale.sliding import sliding_window_mask
from tests.conftest import assert_caught, assert_not_attempted


def stub(*args, **kwargs):
    raise NotImplementedError("Exercise: replace this line with your code")


# ---------------------------------------------------------------- 12.1 online softmax


def _stats_flat(x, block):  # (m, s) as (...,) instead of (..., 1)
    m, s = online_softmax_stats(x, block)
    return m.squeeze(-1), s.squeeze(-1)


def _stats_list_of_blocks(x, block):  # blocks taken with split, statistics merged pairwise, returned as a list
    m = torch.full(x.shape[:-1], -math.inf, dtype=x.dtype, device=x.device)
    s = torch.zeros(x.shape[:-1], dtype=x.dtype, device=x.device)
    for xb in x.split(block, dim=-1):
        mb = xb.amax(-1)
        sb = torch.exp(xb - mb[..., None]).sum(-1)
        new = torch.maximum(m, mb)
        s = s * torch.exp(m - new) + sb * torch.exp(mb - new)
        m = new
    return [m[..., None], s[..., None]]


def _stats_loop_over_entries(x, block):  # one entry at a time inside each block (the naive loop)
    m = x.new_full((*x.shape[:-1], 1), float("-inf"))
    s = x.new_zeros((*x.shape[:-1], 1))
    for start in range(0, x.shape[-1], block):
        for j in range(start, min(start + block, x.shape[-1])):
            xj = x[..., j : j + 1]
            new = torch.maximum(m, xj)
            s = s * torch.exp(m - new) + torch.exp(xj - new)
            m = new
    return m, s


def _stats_with_a_scalar_start(x, block):  # a 0-dim tensor (-inf) broadcasts on any device: right
    m, s = torch.tensor(-math.inf, dtype=x.dtype), 0.0
    for start in range(0, x.shape[-1], block):
        xb = x[..., start : start + block]
        new = torch.maximum(m, xb.amax(-1, keepdim=True))
        s = s * torch.exp(m - new) + torch.exp(xb - new).sum(-1, keepdim=True)
        m = new
    return m, s


def test_online_softmax_reference_and_variants_pass():
    assert check_online_softmax_stats(online_softmax_stats) is True
    assert check_online_softmax_stats(_stats_flat) is True
    assert check_online_softmax_stats(_stats_list_of_blocks) is True
    assert check_online_softmax_stats(_stats_loop_over_entries) is True
    assert check_online_softmax_stats(_stats_with_a_scalar_start) is True
    assert check_online_softmax_stats(lambda x, b: tuple(t.float() for t in online_softmax_stats(x, b))) is True  # float32


def test_online_softmax_stub_not_attempted(capsys):
    assert_not_attempted(check_online_softmax_stats, stub, capsys)
    assert_not_attempted(check_online_softmax_stats, ..., capsys)


STATS_MISTAKES = [
    ("no_rescale", ["not rescaled when the maximum grows"]),
    ("own_max", ["own maximum", "running"]),
    ("flipped", ["upside down"]),
    ("zero_init", ["starts at 0 instead of -inf"]),
    ("block_max", ["maximum of the last block only"]),
    ("dropped_ragged", ["last, shorter block is dropped"]),
    ("overlapping", ["overlap", "counted twice"]),
    ("short", ["one entry short"]),
    ("max_no_dim", ["without dim", "every row at once"]),
    ("sum_no_dim", ["sum is taken without dim"]),
    ("raw_exp", ["without subtracting the running maximum"]),
    ("log_sum", ["log of the sum"]),
    ("lse", ["log-sum-exp"]),
]


@pytest.mark.parametrize("kind, phrases", STATS_MISTAKES)
def test_online_softmax_mistakes_are_named(kind, phrases):
    assert_caught(check_online_softmax_stats, lambda x, block: _stats(x, block, kind), *phrases)


def _stats_each_block_own_max(x, block):  # as a learner writes it: m is right, the terms use each block's own max
    m = x.new_full((*x.shape[:-1], 1), -math.inf)
    s = x.new_zeros((*x.shape[:-1], 1))
    for start in range(0, x.shape[-1], block):
        xb = x[..., start : start + block]
        m = torch.maximum(m, xb.amax(-1, keepdim=True))
        s = s + torch.exp(xb - xb.amax(-1, keepdim=True)).sum(-1, keepdim=True)
    return m, s


def _stats_max_without_dim(x, block):
    m, s = x.new_full((*x.shape[:-1], 1), -math.inf), x.new_zeros((*x.shape[:-1], 1))
    for start in range(0, x.shape[-1], block):
        xb = x[..., start : start + block]
        new = torch.maximum(m, xb.max())
        s = s * torch.exp(m - new) + torch.exp(xb - new).sum(-1, keepdim=True)
        m = new
    return m, s


def _stats_two_pass(x, block):  # right numbers, but the whole row at once: notebook 02's softmax
    m = x.amax(-1, keepdim=True)
    return m, torch.exp(x - m).sum(-1, keepdim=True)


def _stats_without_device(x, block):  # right on the CPU; on a GPU, torch.full(...) without device= mixes devices
    m = torch.full((*x.shape[:-1], 1), -math.inf, dtype=x.dtype)
    s = torch.zeros((*x.shape[:-1], 1), dtype=x.dtype)
    for start in range(0, x.shape[-1], block):
        xb = x[..., start : start + block]
        new = torch.maximum(m, xb.amax(-1, keepdim=True))
        s = s * torch.exp(m - new) + torch.exp(xb - new).sum(-1, keepdim=True)
        m = new
    return m, s


def _stats_in_float32(x, block):  # float64 inputs, a float32 computation converted back: a precision problem
    m, s = online_softmax_stats(x.float(), block)
    return m.double(), s.double()


def _stats_partial(x, block):  # the ragged last block left for later
    if x.shape[-1] % block:
        raise NotImplementedError
    return online_softmax_stats(x, block)


def test_online_softmax_other_wrong_answers_are_named():
    assert_caught(check_online_softmax_stats, _stats_each_block_own_max, "own maximum")
    assert_caught(check_online_softmax_stats, _stats_max_without_dim, "without dim")
    assert_caught(check_online_softmax_stats, _stats_two_pass, "two-pass", "walk along the row in blocks")
    assert_caught(check_online_softmax_stats, lambda x, b: (torch.logsumexp(x, -1, keepdim=True), None), "s", "tensor")
    assert_caught(check_online_softmax_stats, _stats_without_device, "torch.full", "device=")
    assert_caught(check_online_softmax_stats, _stats_in_float32, "precision problem")
    assert_caught(check_online_softmax_stats, _stats_partial, "partial work", "NotImplementedError")
    assert_caught(check_online_softmax_stats, lambda x, b: online_softmax_stats(x, b)[0], "return the pair (m, s)")
    assert_caught(check_online_softmax_stats, lambda x, b: (x.amax(-1, keepdim=True), x.sum()), "one number per row")
    assert_caught(check_online_softmax_stats, lambda x, b: (x.amax(0, keepdim=True), x.exp().sum(0)), "one number per row")
    m_plus_one = lambda x, b: (online_softmax_stats(x, b)[0] + 1, online_softmax_stats(x, b)[1])
    assert_caught(check_online_softmax_stats, m_plus_one, "m (the maximum of each row)", "differs from the reference")
    assert_caught(check_online_softmax_stats, lambda x, b: x.max(-1, keepdim=True), "values and indices", ".values")


# ---------------------------------------------------------------- 12.2 one query block, tile by tile


def _block_fa1(qi, k, v, block_k):
    """FlashAttention-1's update: the output kept normalised after every tile. A right answer."""
    qi = qi / math.sqrt(qi.shape[-1])
    m = qi.new_full((*qi.shape[:-1], 1), -math.inf)
    total, out = qi.new_zeros((*qi.shape[:-1], 1)), qi.new_zeros((*qi.shape[:-1], v.shape[-1]))
    for j0 in range(0, k.shape[-2], block_k):
        s = qi @ k[..., j0 : j0 + block_k, :].transpose(-2, -1)
        new = torch.maximum(m, s.amax(-1, keepdim=True))
        p, alpha = torch.exp(s - new), torch.exp(m - new)
        new_total = alpha * total + p.sum(-1, keepdim=True)
        out = (total * alpha * out + p @ v[..., j0 : j0 + block_k, :]) / new_total
        m, total = new, new_total
    return out, (m + total.log()).squeeze(-1)


def _block_merging_tiles(qi, k, v, block_k):
    """Each tile's own softmax and log-sum-exp, merged with logaddexp: another right answer."""
    out, lse = None, None
    for j0 in range(0, k.shape[-2], block_k):
        s = qi @ k[..., j0 : j0 + block_k, :].transpose(-2, -1) / math.sqrt(qi.shape[-1])
        lse_t, out_t = torch.logsumexp(s, -1), torch.softmax(s, -1) @ v[..., j0 : j0 + block_k, :]
        if out is None:
            out, lse = out_t, lse_t
        else:
            new = torch.logaddexp(lse, lse_t)
            out = out * torch.exp(lse - new)[..., None] + out_t * torch.exp(lse_t - new)[..., None]
            lse = new
    return out, lse


def _block_with_split(qi, k, v, block_k):  # k.split and zip, scale on the scores, lse kept (..., bq, 1)
    m = torch.full((*qi.shape[:-1], 1), -math.inf, dtype=qi.dtype, device=qi.device)
    total = torch.zeros_like(m)
    acc = torch.zeros((*qi.shape[:-1], v.shape[-1]), dtype=qi.dtype, device=qi.device)
    for kj, vj in zip(k.split(block_k, dim=-2), v.split(block_k, dim=-2), strict=True):
        s = torch.einsum("...qd,...kd->...qk", qi, kj) * qi.shape[-1] ** -0.5
        new = torch.maximum(m, s.amax(-1, keepdim=True))
        p = torch.exp(s - new)
        total = total * torch.exp(m - new) + p.sum(-1, keepdim=True)
        acc = acc * torch.exp(m - new) + p @ vj
        m = new
    return acc / total, m + total.log()


def test_flash_block_reference_and_variants_pass():
    assert check_flash_block(flash_block) is True
    assert check_flash_block(_block_fa1) is True
    assert check_flash_block(_block_merging_tiles) is True
    assert check_flash_block(_block_with_split) is True
    assert check_flash_block(lambda qi, k, v, bk: tuple(t.float() for t in flash_block(qi, k, v, bk))) is True  # float32


def test_flash_block_stub_not_attempted(capsys):
    assert_not_attempted(check_flash_block, stub, capsys)


BLOCK_MISTAKES = [
    ("no_rescale_both", ["neither the running sum nor the accumulator is rescaled"]),
    ("no_rescale_acc", ["accumulator is not rescaled"]),
    ("no_rescale_l", ["running sum is not rescaled"]),
    ("zero_init", ["starts at 0 instead of -inf"]),
    ("flipped_alpha", ["upside down", "NaN"]),
    ("per_block", ["divided by that block's own sum"]),
    ("tile_softmax_added", ["normalised on its own", "added"]),
    ("fa1_no_old_sum", ["FlashAttention-1", "old sum"]),
    ("dropped_ragged_k", ["last, shorter key block is dropped"]),
    ("overlapping_k", ["overlap by one key"]),
    ("no_scale", ["not scaled"]),
    ("d_scale", ["divided by d instead of sqrt(d)"]),
    ("max_before_scale", ["unscaled scores", "overflows"]),
    ("lse_plus_l", ["m + l", "log forgotten"]),
    ("lse_no_max", ["log(l) without the running maximum"]),
]


@pytest.mark.parametrize("kind, phrases", BLOCK_MISTAKES)
def test_flash_block_mistakes_are_named(kind, phrases):
    assert_caught(check_flash_block, lambda qi, k, v, bk: _block(qi, k, v, bk, kind), *phrases)


def _block_each_tile_softmax(qi, k, v, block_k):  # as a learner writes it: softmax per tile, outputs added
    out = qi.new_zeros((*qi.shape[:-1], v.shape[-1]))
    for j0 in range(0, k.shape[-2], block_k):
        s = qi @ k[..., j0 : j0 + block_k, :].transpose(-2, -1) / math.sqrt(qi.shape[-1])
        out = out + torch.softmax(s, -1) @ v[..., j0 : j0 + block_k, :]
    return out, torch.logsumexp(qi @ k.transpose(-2, -1) / math.sqrt(qi.shape[-1]), -1)


def _block_slicing_the_batch(qi, k, v, block_k):  # k[j0:j1] slices the first axis: right on (n, d) inputs only
    qi = qi / math.sqrt(qi.shape[-1])
    m = qi.new_full((*qi.shape[:-1], 1), -math.inf)
    total, acc = qi.new_zeros((*qi.shape[:-1], 1)), qi.new_zeros((*qi.shape[:-1], v.shape[-1]))
    for j0 in range(0, k.shape[-2], block_k):
        kj, vj = k[j0 : j0 + block_k], v[j0 : j0 + block_k]
        s = qi @ kj.transpose(-2, -1)
        new = torch.maximum(m, s.amax(-1, keepdim=True))
        p, alpha = torch.exp(s - new), torch.exp(m - new)
        total, acc, m = alpha * total + p.sum(-1, keepdim=True), alpha * acc + p @ vj, new
    return acc / total, (m + total.log()).squeeze(-1)


def _block_with_dot_T(qi, k, v, block_k):  # k_tile.T: right on (n, d) inputs, reverses every axis of a batched tile
    qi = qi / math.sqrt(qi.shape[-1])
    m = qi.new_full((*qi.shape[:-1], 1), -math.inf)
    total, acc = qi.new_zeros((*qi.shape[:-1], 1)), qi.new_zeros((*qi.shape[:-1], v.shape[-1]))
    for j0 in range(0, k.shape[-2], block_k):
        s = qi @ k[..., j0 : j0 + block_k, :].T
        new = torch.maximum(m, s.amax(-1, keepdim=True))
        p, alpha = torch.exp(s - new), torch.exp(m - new)
        total, acc, m = alpha * total + p.sum(-1, keepdim=True), alpha * acc + p @ v[..., j0 : j0 + block_k, :], new
    return acc / total, (m + total.log()).squeeze(-1)


def _block_whole_strip(qi, k, v, block_k):  # right numbers from the block's whole row of scores at once
    return attention_with_lse(qi, k, v)


def _block_ragged_unfinished(qi, k, v, block_k):  # partial work: the ragged last key block left for later
    if k.shape[-2] % block_k:
        raise NotImplementedError
    return flash_block(qi, k, v, block_k)


def test_flash_block_other_wrong_answers_are_named():
    assert_caught(check_flash_block, _block_each_tile_softmax, "normalised on its own")
    assert_caught(check_flash_block, _block_slicing_the_batch, "batch and head axes", "k[..., j0:j1, :]")
    assert_caught(check_flash_block, _block_with_dot_T, ".transpose(-2, -1)", ".T")
    assert_caught(check_flash_block, _block_whole_strip, "whole (8, 1024) row of scores")
    assert_caught(check_flash_block, _block_ragged_unfinished, "partial work")
    assert_caught(check_flash_block, lambda *a: flash_block(*a)[::-1], "wrong order", "return out, lse")
    assert_caught(check_flash_block, lambda *a: flash_block(*a)[0], "return the pair (out, lse)")
    assert_caught(check_flash_block, lambda *a: (flash_block(*a)[0], flash_block(*a)[1][..., :1]), "one number per query")
    unscaled_lse = lambda qi, *a: (flash_block(qi, *a)[0], flash_block(qi, *a)[1] * math.sqrt(qi.shape[-1]))
    assert_caught(check_flash_block, unscaled_lse, "unscaled scores")
    assert_caught(check_flash_block, lambda *a: (flash_block(*a)[0] * 1.01, flash_block(*a)[1]), "differs from the reference")
    as_float32 = lambda *a: tuple(t.float().double() for t in flash_block(*(x.float() if torch.is_tensor(x) else x for x in a)))
    assert_caught(check_flash_block, as_float32, "precision problem")
    assert_caught(check_flash_block, lambda qi, k, v, bk: 1 / 0, "ZeroDivisionError")


# ---------------------------------------------------------------- 12.3 every query block


def _forward_course(q, k, v, block_q, block_k):
    return flash_forward(q, k, v, block_q, block_k)


def _forward_preallocated(q, k, v, block_q, block_k):  # writes each block into tensors allocated up front
    out = q.new_empty(*q.shape[:-1], v.shape[-1])
    lse = q.new_empty(q.shape[:-1])
    for i0 in range(0, q.shape[-2], block_q):
        out[..., i0 : i0 + block_q, :], lse[..., i0 : i0 + block_q] = flash_block(q[..., i0 : i0 + block_q, :], k, v, block_k)
    return out, lse


def _forward_split(q, k, v, block_q, block_k):  # q.split, lists and torch.cat
    pieces = [flash_block(qi, k, v, block_k) for qi in q.split(block_q, dim=-2)]
    return torch.cat([o for o, _ in pieces], -2), torch.cat([s for _, s in pieces], -1)


def test_flash_forward_reference_and_variants_pass():
    assert check_flash_forward(_forward_course) is True
    assert check_flash_forward(_forward_preallocated) is True
    assert check_flash_forward(_forward_split) is True
    swapped_blocks = lambda q, k, v, bq, bk: _forward_split(q, k, v, bk, bq)  # any blocking gives the same answer
    assert check_flash_forward(swapped_blocks) is True


def test_flash_forward_stub_not_attempted(capsys):
    assert_not_attempted(check_flash_forward, stub, capsys)


def _forward_dropping_the_ragged_block(q, k, v, block_q, block_k):
    out, lse = q.new_zeros(*q.shape[:-1], v.shape[-1]), q.new_zeros(q.shape[:-1])
    for i0 in range(0, q.shape[-2] - block_q + 1, block_q):
        out[..., i0 : i0 + block_q, :], lse[..., i0 : i0 + block_q] = flash_block(q[..., i0 : i0 + block_q, :], k, v, block_k)
    return out, lse


def _forward_overlapping_blocks(q, k, v, block_q, block_k):
    pieces = [flash_block(q[..., i0 : i0 + block_q + 1, :], k, v, block_k) for i0 in range(0, q.shape[-2], block_q)]
    return torch.cat([o for o, _ in pieces], -2), torch.cat([s for _, s in pieces], -1)


def _forward_naive(q, k, v, block_q, block_k):  # right numbers, the whole (n, m) score matrix at once
    return attention_with_lse(q, k, v)


def _forward_inline_no_rescale(q, k, v, block_q, block_k):  # the loop written inline, with the plainest slip
    return _forward(q, k, v, block_q, block_k, block_mistake="no_rescale_both")


def _forward_slicing_the_batch(q, k, v, block_q, block_k):
    pieces = [flash_block(q[i0 : i0 + block_q], k, v, block_k) for i0 in range(0, q.shape[-2], block_q)]
    return torch.cat([o for o, _ in pieces], -2), torch.cat([s for _, s in pieces], -1)


def _forward_without_device(q, k, v, block_q, block_k):
    out = torch.empty(*q.shape[:-1], v.shape[-1], dtype=q.dtype)
    lse = torch.empty(q.shape[:-1], dtype=q.dtype)
    for i0 in range(0, q.shape[-2], block_q):
        out[..., i0 : i0 + block_q, :], lse[..., i0 : i0 + block_q] = flash_block(q[..., i0 : i0 + block_q, :], k, v, block_k)
    return out, lse


def test_flash_forward_wrong_answers_are_named():
    assert_caught(check_flash_forward, _forward_dropping_the_ragged_block, "last, shorter query block")
    assert_caught(check_flash_forward, _forward_overlapping_blocks, "query blocks overlap")
    assert_caught(check_flash_forward, _forward_naive, "whole (256, 256) score matrix")
    assert_caught(check_flash_forward, _forward_inline_no_rescale, "neither the running sum nor the accumulator")
    assert_caught(check_flash_forward, _forward_slicing_the_batch, "batch and head axes")
    assert_caught(check_flash_forward, _forward_without_device, "torch.empty", "device=")
    assert_caught(check_flash_forward, lambda *a: _forward_course(*a)[::-1], "wrong order")
    assert_caught(check_flash_forward, lambda *a: _forward_course(*a)[0], "return the pair (out, lse)")
    assert_caught(
        check_flash_forward, lambda q, k, v, bq, bk: _forward(q, k, v, bq, bk, block_mistake="d_scale"), "instead of sqrt(d)"
    )
    assert_caught(check_flash_forward, lambda q, k, v, bq, bk: _forward(q, k, v, bq, bk, block_mistake="zero_init"), "-inf")


# ---------------------------------------------------------------- 12.4 the causal mask, tile by tile


def _tile_with_tril_offset(i0, i1, j0, j1):  # tril with the tile's offset: right
    if j0 >= i1:
        return None
    return torch.ones(i1 - i0, j1 - j0, dtype=torch.bool).tril(diagonal=i0 - j0)


def _tile_with_loops(i0, i1, j0, j1):
    if j0 > i1 - 1:
        return None
    return torch.tensor([[i >= j for j in range(j0, j1)] for i in range(i0, i1)])


def test_causal_tile_mask_reference_and_variants_pass():
    assert check_causal_tile_mask(causal_tile_mask) is True
    assert check_causal_tile_mask(_tile_with_tril_offset) is True
    assert check_causal_tile_mask(_tile_with_loops) is True


def test_causal_tile_mask_stub_not_attempted(capsys):
    assert_not_attempted(check_causal_tile_mask, stub, capsys)


TILE_MISTAKES = [
    ("skip_from_block_start", ["skipped only when it starts at or after the query block's END", "j0 > i0"]),
    ("skip_by_end", ["end after the query block but start inside it"]),
    ("no_skip", ["wholly above the diagonal", "return None"]),
    ("none_below", ["wholly below the diagonal", "all True"]),
    ("all_true", ["nothing is skipped and nothing is masked"]),
    ("own_tril", ["inside the tile", "absolute positions"]),
    ("own_tril_crossing", ["their own tril()", "absolute positions"]),
    ("diagonal_tiles_only", ["only the tiles that start on the diagonal"]),
    ("hides_diagonal", ["hides the diagonal", "NaN"]),
    ("wrong_way", ["wrong way"]),
    ("inverted", ["inverted"]),
]


@pytest.mark.parametrize("kind, phrases", TILE_MISTAKES)
def test_causal_tile_mask_mistakes_are_named(kind, phrases):
    assert_caught(check_causal_tile_mask, lambda *tile: _tile(*tile, kind), *phrases)


def _tile_crossing_with_own_tril(i0, i1, j0, j1):  # as a learner writes it: tril() only on the crossing tiles
    if j0 >= i1:
        return None
    if j1 - 1 <= i0:
        return torch.ones(i1 - i0, j1 - j0, dtype=torch.bool)
    return torch.ones(i1 - i0, j1 - j0, dtype=torch.bool).tril()


def _tile_skip_unfinished(i0, i1, j0, j1):  # partial work: the skip left for later
    if j0 >= i1:
        raise NotImplementedError
    return causal_tile_mask(i0, i1, j0, j1)


def _tile_everything_unfinished_but_a_start(i0, i1, j0, j1):
    rows = torch.arange(i0, i1)[:, None]  # the absolute query positions: a start
    if rows.numel():
        raise NotImplementedError
    return rows


def test_partial_work_that_raises_on_every_input_is_not_called_untouched():
    assert_caught(check_causal_tile_mask, _tile_everything_unfinished_but_a_start, "partial work")


def test_the_generators_stub_with_its_docstring_is_not_attempted(capsys):
    def causal_tile_mask(i0, i1, j0, j1):
        """None where the tile is skipped, else its mask."""
        raise NotImplementedError("Exercise: replace this line with your code")

    assert_not_attempted(check_causal_tile_mask, causal_tile_mask, capsys)


def test_causal_tile_mask_other_wrong_answers_are_named():
    assert_caught(check_causal_tile_mask, _tile_crossing_with_own_tril, "own tril()", "absolute")
    assert_caught(check_causal_tile_mask, _tile_skip_unfinished, "partial work")
    assert_caught(
        check_causal_tile_mask, lambda *t: None if causal_tile_mask(*t) is None else causal_tile_mask(*t).int(), "dtype"
    )
    assert_caught(
        check_causal_tile_mask, lambda *t: None if causal_tile_mask(*t) is None else causal_tile_mask(*t).T, "transposed"
    )
    assert_caught(check_causal_tile_mask, lambda *t: None, "was skipped (None)")
    assert_caught(
        check_causal_tile_mask, lambda i0, i1, j0, j1: torch.ones(i1 - i0, j1 - j0, dtype=torch.bool), "nothing is skipped"
    )


# ---------------------------------------------------------------- 12.5 one tile of the backward pass


def _tile_grads_einsum(qi, kj, vj, doi, lse_i, delta_i, keep=None):
    scale = qi.shape[-1] ** -0.5
    s = torch.einsum("...id,...jd->...ij", qi, kj) * scale
    p = torch.exp(s - lse_i.unsqueeze(-1))
    if keep is not None:
        p = p * keep  # zero the hidden keys after the exponential: the same P
    ds = p * (torch.einsum("...ie,...je->...ij", doi, vj) - delta_i.unsqueeze(-1))
    return (
        torch.einsum("...ij,...jd->...id", ds, kj) * scale,
        torch.einsum("...ij,...id->...jd", ds, qi) * scale,
        torch.einsum("...ij,...ie->...je", p, doi),
    )


def test_tile_backward_reference_and_variants_pass():
    assert check_tile_backward(tile_backward) is True
    assert check_tile_backward(_tile_grads_einsum) is True
    assert check_tile_backward(lambda *a: list(tile_backward(*a))) is True


def test_tile_backward_stub_not_attempted(capsys):
    assert_not_attempted(check_tile_backward, stub, capsys)


GRAD_MISTAKES = [
    ("no_lse", ["without subtracting the log-sum-exp"]),
    ("tile_softmax", ["softmax of this tile alone"]),
    ("no_scale_s", ["scores are not scaled"]),
    ("no_delta", ["without the row term"]),
    ("delta_outside", ["inside the product"]),
    ("no_scale_grads", ["miss the factor 1/sqrt(d)"]),
    ("no_mask", ["mask is ignored"]),
    ("sign", ["wrong sign"]),
]


@pytest.mark.parametrize("kind, phrases", GRAD_MISTAKES)
def test_tile_backward_mistakes_are_named(kind, phrases):
    assert_caught(check_tile_backward, lambda *a: _tile_grads(*a, mistake=kind), *phrases)


def _grads_dv_untransposed(qi, kj, vj, doi, lse_i, delta_i, keep=None):
    dq, dk, _ = tile_backward(qi, kj, vj, doi, lse_i, delta_i, keep)
    p = torch.exp(qi @ kj.transpose(-2, -1) / math.sqrt(qi.shape[-1]) - lse_i[..., None])
    return dq, dk, p @ doi


def _grads_with_dot_T(qi, kj, vj, doi, lse_i, delta_i, keep=None):
    scale = qi.shape[-1] ** -0.5
    s = qi @ kj.T * scale
    if keep is not None:
        s = s.masked_fill(~keep, -math.inf)
    p = torch.exp(s - lse_i[..., None])
    ds = p * (doi @ vj.T - delta_i[..., None])
    return ds @ kj * scale, ds.T @ qi * scale, p.T @ doi


def test_tile_backward_other_wrong_answers_are_named():
    assert_caught(check_tile_backward, lambda *a: tile_backward(*a)[::-1], "wrong order")
    assert_caught(check_tile_backward, _grads_dv_untransposed, "cannot be multiplied", "P^T dO")
    assert_caught(check_tile_backward, _grads_with_dot_T, ".transpose(-2, -1)")
    assert_caught(check_tile_backward, lambda *a: tile_backward(*a)[:2], "return the three")
    assert_caught(check_tile_backward, lambda *a: tuple(2 * g for g in tile_backward(*a)), "differs from the reference")


# ---------------------------------------------------------------- the sliding-window mask


def _window_loops(n, window):
    mask = torch.zeros(n, n, dtype=torch.bool)
    for i in range(n):
        for j in range(max(0, i - window + 1), i + 1):
            mask[i, j] = True
    return mask


def test_window_reference_and_variants_pass():
    assert check_sliding_window_mask(sliding_window_mask) is True
    assert check_sliding_window_mask(_window_loops) is True
    ones = lambda n, w: torch.ones(n, n, dtype=torch.bool)
    assert check_sliding_window_mask(lambda n, w: ones(n, w).tril() & ones(n, w).triu(-(w - 1))) is True
    assert check_sliding_window_mask(lambda n, w: torch.ones(n, n).tril().triu(1 - w).bool()) is True


def test_window_stub_not_attempted(capsys):
    assert_not_attempted(check_sliding_window_mask, stub, capsys)


def _offset(n):
    i = torch.arange(n)
    return i[:, None] - i[None, :]


def _window_partial(n, w):
    if w > n:
        raise NotImplementedError
    return sliding_window_mask(n, w)


WINDOW_MISTAKES = [
    (lambda n, w: (_offset(n) >= 0) & (_offset(n) <= w), ["one key too many"]),
    (lambda n, w: (_offset(n) >= 0) & (_offset(n) < w - 1), ["one key too few"]),
    (lambda n, w: (_offset(n) > 0) & (_offset(n) <= w), ["leaves out the query itself"]),
    (lambda n, w: (_offset(n) > 0) & (_offset(n) < w), ["leaves out the query itself"]),
    (lambda n, w: (_offset(n) >= 0) & (torch.arange(n)[None, :] < w), ["anchored at the start"]),
    (lambda n, w: (_offset(n) >= 0) & (torch.arange(n)[:, None] // w == torch.arange(n)[None, :] // w), ["fixed chunks"]),
    (lambda n, w: (_offset(n) <= 0) & (_offset(n) > -w), ["wrong side"]),
    (lambda n, w: sliding_window_mask(n, w).T, ["wrong side"]),
    (lambda n, w: _offset(n).abs() < w, ["both ways"]),
    (lambda n, w: _offset(n) < w, ["after the query is visible"]),
    (lambda n, w: _offset(n) >= 0, ["window is ignored"]),
    (lambda n, w: ~sliding_window_mask(n, w), ["inverted"]),
    (lambda n, w: sliding_window_mask(n, w).float(), ["dtype", "boolean"]),
    (lambda n, w: torch.zeros(n, n).masked_fill(~sliding_window_mask(n, w), -math.inf), ["additive"]),
    (lambda n, w: sliding_window_mask(n, w).int(), ["dtype"]),
    (lambda n, w: sliding_window_mask(n + 1, w), ["wrong shape"]),
    (lambda n, w: sliding_window_mask(n, w) & (torch.arange(n)[:, None] > 0), ["row 0", "allows keys"]),
    (_window_partial, ["partial work"]),
]


@pytest.mark.parametrize("wrong, phrases", WINDOW_MISTAKES)
def test_window_mistakes_are_named(wrong, phrases):
    assert_caught(check_sliding_window_mask, wrong, *phrases)


# ---------------------------------------------------------------- linear attention, recurrent form


def _recurrent_einsum(q, k, v):
    fq, fk = elu_feature_map(q), elu_feature_map(k)
    s = torch.zeros(*q.shape[:-2], q.shape[-1], v.shape[-1], dtype=q.dtype, device=q.device)
    z = torch.zeros(*q.shape[:-2], q.shape[-1], dtype=q.dtype, device=q.device)
    out = []
    for i in range(q.shape[-2]):
        s = s + torch.einsum("...d,...e->...de", fk[..., i, :], v[..., i, :])
        z = z + fk[..., i, :]
        out.append(
            torch.einsum("...d,...de->...e", fq[..., i, :], s) / torch.einsum("...d,...d->...", fq[..., i, :], z)[..., None]
        )
    return torch.stack(out, -2)


def _recurrent_cumsum(q, k, v):  # the states of every position at once, by cumulative sums
    fq, fk = elu_feature_map(q), elu_feature_map(k)
    states = torch.cumsum(fk[..., :, :, None] * v[..., :, None, :], dim=-3)  # (..., n, d, d_v)
    z = torch.cumsum(fk, dim=-2)  # (..., n, d)
    return (fq[..., None, :] @ states).squeeze(-2) / (fq * z).sum(-1, keepdim=True)


def _recurrent_with_eps(q, k, v, eps=1e-6):  # Katharopoulos et al.'s code: eps in the denominator
    fq, fk = elu_feature_map(q), elu_feature_map(k)
    state = q.new_zeros(*q.shape[:-2], q.shape[-1], v.shape[-1])
    z = q.new_zeros(*q.shape[:-2], q.shape[-1])
    out = []
    for i in range(q.shape[-2]):
        state = state + fk[..., i, :, None] * v[..., i, None, :]
        z = z + fk[..., i, :]
        out.append((fq[..., i, None, :] @ state).squeeze(-2) / ((fq[..., i, :] * z).sum(-1, keepdim=True) + eps))
    return torch.stack(out, -2)


def test_linear_reference_and_variants_pass():
    assert check_linear_attention_recurrent(linear_attention_recurrent) is True
    assert check_linear_attention_recurrent(linear_attention_parallel) is True
    assert check_linear_attention_recurrent(lambda q, k, v: linear_attention_chunked(q, k, v, 3)) is True
    assert check_linear_attention_recurrent(_recurrent_einsum) is True
    assert check_linear_attention_recurrent(_recurrent_cumsum) is True
    assert check_linear_attention_recurrent(_recurrent_with_eps) is True  # the paper's eps = 1e-6
    assert check_linear_attention_recurrent(lambda q, k, v: linear_attention_recurrent(q.float(), k.float(), v.float())) is True


def test_linear_stub_not_attempted(capsys):
    assert_not_attempted(check_linear_attention_recurrent, stub, capsys)


def _non_causal(q, k, v):
    fq, fk = elu_feature_map(q), elu_feature_map(k)
    return (fq @ (fk.transpose(-2, -1) @ v)) / (fq @ fk.sum(-2)[..., None])


LINEAR_MISTAKES = [
    (lambda q, k, v: _linear(q, k, v, "no_normaliser"), ["normaliser is missing"]),
    (lambda q, k, v: _linear(q, k, v, "identity"), ["feature map is missing"]),
    (lambda q, k, v: _linear(q, k, v, "read_first"), ["read before it takes in position i"]),
    (lambda q, k, v: _linear(q, k, v, "state_not_summed"), ["state S is replaced"]),
    (lambda q, k, v: _linear(q, k, v, "z_not_summed"), ["normaliser's state z is replaced"]),
    (lambda q, k, v: _linear(q, k, v, "den_no_query"), ["sum of z alone, without the query"]),
    (lambda q, k, v: _linear(q, k, v, "den_raw_q"), ["normaliser uses q instead of phi(q)"]),
    (lambda q, k, v: _linear(q, k, v, "exp"), ["feature map is exp"]),
    (lambda q, k, v: _linear(q, k, v, "relu"), ["relu"]),
    (lambda q, k, v: _linear(q, k, v, "elu"), ["without the + 1"]),
    (lambda q, k, v: _linear(q, k, v, "phi_q_only"), ["queries only"]),
    (lambda q, k, v: _linear(q, k, v, "phi_k_only"), ["keys only"]),
    (lambda q, k, v: _linear(q, k, v, "backwards"), ["runs backwards"]),
    (_non_causal, ["later ones included"]),
    (lambda q, k, v: F.scaled_dot_product_attention(q, k, v, is_causal=True), ["softmax attention"]),
    (lambda q, k, v: _recurrent_with_eps(q, k, v, eps=1e-2), ["differs from the reference"]),
    (lambda q, k, v: linear_attention_recurrent(q, k, v) * 0.5, ["differs from the reference"]),
    (lambda q, k, v: linear_attention_recurrent(q, k, v)[..., :-1, :], ["wrong shape"]),
    (lambda q, k, v: linear_attention_recurrent(q, k, v).numpy(), ["torch.Tensor"]),
    (lambda q, k, v: linear_attention_recurrent(q.float(), k.float(), v.float()).double(), ["precision problem"]),
]


@pytest.mark.parametrize("wrong, phrases", LINEAR_MISTAKES)
def test_linear_mistakes_are_named(wrong, phrases):
    assert_caught(check_linear_attention_recurrent, wrong, *phrases)


def _recurrent_learner_backwards(q, k, v):  # as a learner writes it: reversed(range(n))
    fq, fk = elu_feature_map(q), elu_feature_map(k)
    state, z = q.new_zeros(*q.shape[:-2], q.shape[-1], v.shape[-1]), q.new_zeros(*q.shape[:-2], q.shape[-1])
    out = [None] * q.shape[-2]
    for i in reversed(range(q.shape[-2])):
        state, z = state + fk[..., i, :, None] * v[..., i, None, :], z + fk[..., i, :]
        out[i] = (fq[..., i, None, :] @ state).squeeze(-2) / (fq[..., i, :] * z).sum(-1, keepdim=True)
    return torch.stack(out, -2)


def _recurrent_without_device(q, k, v):
    fq, fk = elu_feature_map(q), elu_feature_map(k)
    state = torch.zeros(*q.shape[:-2], q.shape[-1], v.shape[-1], dtype=q.dtype)
    z = torch.zeros(*q.shape[:-2], q.shape[-1], dtype=q.dtype)
    out = []
    for i in range(q.shape[-2]):
        state, z = state + fk[..., i, :, None] * v[..., i, None, :], z + fk[..., i, :]
        out.append((fq[..., i, None, :] @ state).squeeze(-2) / (fq[..., i, :] * z).sum(-1, keepdim=True))
    return torch.stack(out, -2)


def test_linear_other_wrong_answers_are_named():
    assert_caught(check_linear_attention_recurrent, _recurrent_learner_backwards, "runs backwards")
    assert_caught(check_linear_attention_recurrent, _recurrent_without_device, "torch.zeros", "device=")


def _forward_ragged_unfinished(q, k, v, block_q, block_k):  # partial work: the ragged query block left for later
    if q.shape[-2] % block_q:
        raise NotImplementedError
    return _forward_course(q, k, v, block_q, block_k)


def test_flash_forward_partial_work_is_named():
    assert_caught(check_flash_forward, _forward_ragged_unfinished, "partial work")
