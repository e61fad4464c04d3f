"""The checks of notebook 12 pass the reference and other natural answers, spot the stub and name the typical mistakes."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

from helpers.checks.scale import (
    _stats,
    _tiled,
    check_flash_forward,
    check_linear_attention_recurrent,
    check_online_softmax_stats,
    check_sliding_window_mask,
)
from helpers.scale.flash import attention_with_lse, flash_forward, online_softmax_stats
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


# ---------------------------------------------------------------- online softmax


def _stats_flat(x, block):  # (m, s) as (...,) instead of (..., 1)
    m, s = online_softmax_stats(x, block)
    return m.squeeze(-1), s.squeeze(-1)


def _stats_list_of_blocks(x, block):  # blocks taken with split, statistics merged pairwise, returned as a list
    m = torch.full(x.shape[:-1], -math.inf, dtype=x.dtype)
    s = torch.zeros(x.shape[:-1], dtype=x.dtype)
    for xb in x.split(block, dim=-1):
        mb = xb.amax(-1)
        sb = torch.exp(xb - mb[..., None]).sum(-1)
        new = torch.maximum(m, mb)
        s = s * torch.exp(m - new) + sb * torch.exp(mb - new)
        m = new
    return [m[..., None], s[..., None]]


def _stats_loop_over_entries(x, block):  # one entry at a time inside each block (the naive loop)
    m = torch.full((*x.shape[:-1], 1), float("-inf"), dtype=x.dtype)
    s = torch.zeros((*x.shape[:-1], 1), dtype=x.dtype)
    for start in range(0, x.shape[-1], block):
        for j in range(start, min(start + block, x.shape[-1])):
            xj = x[..., j : j + 1]
            new = torch.maximum(m, xj)
            s = s * torch.exp(m - new) + torch.exp(xj - new)
            m = new
    return m, s


def test_online_softmax_reference_and_variants_pass():
    assert check_online_softmax_stats(online_softmax_stats) is True
    assert check_online_softmax_stats(_stats_flat) is True
    assert check_online_softmax_stats(_stats_list_of_blocks) is True
    assert check_online_softmax_stats(_stats_loop_over_entries) is True
    assert check_online_softmax_stats(lambda x, b: tuple(t.float() for t in online_softmax_stats(x, b))) is True  # float32


def test_online_softmax_stub_not_attempted(capsys):
    assert_not_attempted(check_online_softmax_stats, stub, capsys)
    assert_not_attempted(check_online_softmax_stats, ..., capsys)


STATS_MISTAKES = [
    ("no_rescale", ["not rescaled when the maximum grows"]),
    ("flipped", ["upside down"]),
    ("zero_init", ["starts at 0 instead of -inf"]),
    ("block_max", ["maximum of the last block only"]),
    ("dropped_ragged", ["last, shorter block is dropped"]),
    ("raw_exp", ["without subtracting the running maximum"]),
    ("log_sum", ["log of the sum"]),
    ("lse", ["log-sum-exp"]),
]


@pytest.mark.parametrize("kind, phrases", STATS_MISTAKES)
def test_online_softmax_mistakes_are_named(kind, phrases):
    assert_caught(check_online_softmax_stats, lambda x, block: _stats(x, block, kind), *phrases)


def test_online_softmax_other_wrong_answers_are_named():
    assert_caught(check_online_softmax_stats, lambda x, b: online_softmax_stats(x, b)[0], "return the pair (m, s)")
    assert_caught(check_online_softmax_stats, lambda x, b: (x.amax(-1, keepdim=True), x.sum()), "one number per row")
    assert_caught(check_online_softmax_stats, lambda x, b: (x.amax(0, keepdim=True), x.exp().sum(0)), "one number per row")
    m_plus_one = lambda x, b: (online_softmax_stats(x, b)[0] + 1, online_softmax_stats(x, b)[1])
    assert_caught(check_online_softmax_stats, m_plus_one, "m (the maximum of each row)", "differs from the reference")
    assert_caught(check_online_softmax_stats, lambda x, b: x.max(-1, keepdim=True), "values and indices", ".values")


# ---------------------------------------------------------------- FlashAttention's forward


def _flash_queries_at_once(q, k, v, block_q, block_k, causal=False):
    """Every query at once, a loop over the key blocks only (block_q ignored): a right answer, vectorised."""
    n, m = q.shape[-2], k.shape[-2]
    qs = q / math.sqrt(q.shape[-1])
    run_max = torch.full((*q.shape[:-1], 1), -math.inf, dtype=q.dtype)
    run_sum = torch.zeros((*q.shape[:-1], 1), dtype=q.dtype)
    acc = torch.zeros((*q.shape[:-1], v.shape[-1]), dtype=q.dtype)
    for j0 in range(0, m, block_k):
        s = qs @ k[..., j0 : j0 + block_k, :].transpose(-2, -1)
        if causal:
            s = s.masked_fill(torch.arange(n)[:, None] < torch.arange(j0, min(j0 + block_k, m))[None, :], -math.inf)
        new = torch.maximum(run_max, s.amax(-1, keepdim=True))
        p = torch.exp(s - new)
        alpha = torch.exp(run_max - new)
        run_sum, acc, run_max = alpha * run_sum + p.sum(-1, keepdim=True), alpha * acc + p @ v[..., j0 : j0 + block_k, :], new
    return acc / run_sum, (run_max + run_sum.log()).squeeze(-1)


def _flash_with_sdpa_tiles(q, k, v, block_q, block_k, causal=False):
    """Every tile through F.scaled_dot_product_attention plus its own log-sum-exp, merged: another right answer."""
    n, m = q.shape[-2], k.shape[-2]
    outs, lses = [], []
    for i0 in range(0, n, block_q):
        i1 = min(i0 + block_q, n)
        out_i, lse_i = None, None
        for j0 in range(0, m, block_k):
            j1 = min(j0 + block_k, m)
            if causal and j0 >= i1:
                break
            mask = torch.arange(i0, i1)[:, None] >= torch.arange(j0, j1)[None, :] if causal else None
            qi, kj, vj = q[..., i0:i1, :], k[..., j0:j1, :], v[..., j0:j1, :]
            scores = qi @ kj.transpose(-2, -1) / math.sqrt(q.shape[-1])
            if mask is not None:
                scores = scores.masked_fill(~mask, -math.inf)
            lse_t = torch.logsumexp(scores, -1)
            out_t = torch.softmax(scores, -1).nan_to_num() @ vj
            if out_i is None:
                out_i, lse_i = out_t, lse_t
            else:
                new = torch.logaddexp(lse_i, lse_t)
                out_i = out_i * torch.exp(lse_i - new)[..., None] + out_t * torch.exp(lse_t - new)[..., None]
                lse_i = new
        outs.append(out_i)
        lses.append(lse_i)
    return torch.cat(outs, -2), torch.cat(lses, -1)


def test_flash_reference_and_variants_pass():
    assert check_flash_forward(flash_forward) is True
    assert check_flash_forward(_flash_queries_at_once) is True
    assert check_flash_forward(_flash_with_sdpa_tiles) is True
    assert check_flash_forward(lambda *a: [flash_forward(*a)[0], flash_forward(*a)[1][..., None]]) is True  # lse (..., n, 1)
    assert check_flash_forward(lambda q, k, v, bq, bk, causal: flash_forward(q, k, v, bq, bk, causal=causal)) is True


def test_flash_stub_not_attempted(capsys):
    assert_not_attempted(check_flash_forward, stub, capsys)


def _variant(kind):
    def wrong(q, k, v, bq, bk, causal=False):
        if kind == "dropped_ragged_q":
            out, lse = _tiled(q, k, v, bq, bk, causal)
            full = (q.shape[-2] // bq) * bq
            out[..., full:, :] = 0.0
            return out, lse
        return _tiled(q, k, v, bq, bk, causal, kind)

    return wrong


FLASH_MISTAKES = [
    ("no_rescale_acc", ["accumulator is not rescaled"]),
    ("no_rescale_l", ["running sum is not rescaled"]),
    ("zero_init", ["starts at 0 instead of -inf"]),
    ("flipped_alpha", ["upside down", "NaN"]),
    ("per_block", ["divided by that block's own sum"]),
    ("per_block_no_final", ["divided by that block's own sum"]),
    ("skip_from_block_start", ["causal skip drops tiles", "LAST query"]),
    ("skip_by_end", ["causal skip drops tiles that end after"]),
    ("no_tile_mask", ["not masked"]),
    ("local_mask", ["inside the tile", "absolute"]),
    ("mask_flipped", ["wrong side"]),
    ("dropped_ragged_k", ["last, shorter key block is dropped"]),
    ("dropped_ragged_q", ["last, shorter query block"]),
    ("no_scale", ["not scaled"]),
    ("lse_no_max", ["log(l) without the running maximum"]),
]


@pytest.mark.parametrize("kind, phrases", FLASH_MISTAKES)
def test_flash_mistakes_are_named(kind, phrases):
    assert_caught(check_flash_forward, _variant(kind), *phrases)


def _flash_masking_every_tile(q, k, v, block_q, block_k, causal=False):
    """Right numbers, but with causal=True every tile above the diagonal is computed and masked, none skipped."""
    n, m = q.shape[-2], k.shape[-2]
    out, lse = q.new_empty(*q.shape[:-1], v.shape[-1]), q.new_empty(q.shape[:-1])
    for i0 in range(0, n, block_q):
        i1 = min(i0 + block_q, n)
        qi = q[..., i0:i1, :] / math.sqrt(q.shape[-1])
        run_max = qi.new_full((*qi.shape[:-1], 1), -math.inf)
        run_sum, acc = qi.new_zeros((*qi.shape[:-1], 1)), qi.new_zeros((*qi.shape[:-1], v.shape[-1]))
        for j0 in range(0, m, block_k):
            j1 = min(j0 + block_k, m)
            s = qi @ k[..., j0:j1, :].transpose(-2, -1)
            if causal:
                s = s.masked_fill(torch.arange(i0, i1)[:, None] < torch.arange(j0, j1)[None, :], -math.inf)
            new = torch.maximum(run_max, s.amax(-1, keepdim=True))
            p, alpha = torch.exp(s - new), torch.exp(run_max - new)
            run_sum, acc, run_max = alpha * run_sum + p.sum(-1, keepdim=True), alpha * acc + p @ v[..., j0:j1, :], new
        out[..., i0:i1, :], lse[..., i0:i1] = acc / run_sum, (run_max + run_sum.log()).squeeze(-1)
    return out, lse


def test_flash_that_masks_instead_of_skipping_is_named():
    assert_caught(check_flash_forward, _flash_masking_every_tile, "as many matrix products", "j0 >= i1")


def test_flash_naive_whole_matrix_is_named():
    """Right numbers from the whole (n, m) score matrix: the check measures the peak memory and says so."""
    assert_caught(
        check_flash_forward, lambda q, k, v, bq, bk, causal=False: attention_with_lse(q, k, v, causal), "whole", "score matrix"
    )


def test_flash_other_wrong_answers_are_named():
    assert_caught(check_flash_forward, lambda *a: flash_forward(*a)[0], "return the pair (out, lse)")
    assert_caught(check_flash_forward, lambda *a: (flash_forward(*a)[0].float(), flash_forward(*a)[1]), "dtype")
    assert_caught(
        check_flash_forward, lambda *a: (flash_forward(*a)[0], flash_forward(*a)[1][..., :1]), "lse", "one number per query"
    )
    unscaled_lse = lambda q, *a: (flash_forward(q, *a)[0], flash_forward(q, *a)[1] * math.sqrt(q.shape[-1]))
    assert_caught(check_flash_forward, unscaled_lse, "unscaled scores")
    assert_caught(
        check_flash_forward, lambda *a: (flash_forward(*a)[0] * 1.01, flash_forward(*a)[1]), "differs from the reference"
    )
    assert_caught(check_flash_forward, lambda q, k, v, bq, bk, causal=False: 1 / 0, "ZeroDivisionError")


# ---------------------------------------------------------------- sliding-window mask


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


WINDOW_MISTAKES = [
    (lambda n, w: (_offset(n) >= 0) & (_offset(n) <= w), ["one key too many"]),
    (lambda n, w: (_offset(n) >= 0) & (_offset(n) < w - 1), ["one key too few"]),
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
]


@pytest.mark.parametrize("wrong, phrases", WINDOW_MISTAKES)
def test_window_mistakes_are_named(wrong, phrases):
    assert_caught(check_sliding_window_mask, wrong, *phrases)


# ---------------------------------------------------------------- linear attention, recurrent form


def _recurrent_einsum(q, k, v):
    fq, fk = elu_feature_map(q), elu_feature_map(k)
    s = torch.zeros(*q.shape[:-2], q.shape[-1], v.shape[-1], dtype=q.dtype)
    z = torch.zeros(*q.shape[:-2], q.shape[-1], dtype=q.dtype)
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


def test_linear_reference_and_variants_pass():
    assert check_linear_attention_recurrent(linear_attention_recurrent) is True
    assert check_linear_attention_recurrent(linear_attention_parallel) is True
    assert check_linear_attention_recurrent(lambda q, k, v: linear_attention_chunked(q, k, v, 3)) is True
    assert check_linear_attention_recurrent(_recurrent_einsum) is True
    assert check_linear_attention_recurrent(_recurrent_cumsum) is True
    assert check_linear_attention_recurrent(lambda q, k, v: linear_attention_recurrent(q.float(), k.float(), v.float())) is True


def test_linear_stub_not_attempted(capsys):
    assert_not_attempted(check_linear_attention_recurrent, stub, capsys)


def _recurrent(q, k, v, phi_q=elu_feature_map, phi_k=elu_feature_map, normalise=True, read_first=False, den_raw_q=False):
    fq, fk = phi_q(q), phi_k(k)
    s = torch.zeros(*q.shape[:-2], q.shape[-1], v.shape[-1], dtype=q.dtype)
    z = torch.zeros(*q.shape[:-2], q.shape[-1], dtype=q.dtype)
    out = []
    for i in range(q.shape[-2]):
        if not read_first:
            s = s + fk[..., i, :, None] * v[..., i, None, :]
            z = z + fk[..., i, :]
        num = (fq[..., i, None, :] @ s).squeeze(-2)
        den = ((q if den_raw_q else fq)[..., i, :] * z).sum(-1, keepdim=True)
        out.append(num / den if normalise else num)
        if read_first:
            s = s + fk[..., i, :, None] * v[..., i, None, :]
            z = z + fk[..., i, :]
    return torch.stack(out, -2)


def _non_causal(q, k, v):
    fq, fk = elu_feature_map(q), elu_feature_map(k)
    return (fq @ (fk.transpose(-2, -1) @ v)) / (fq @ fk.sum(-2)[..., None])


identity = lambda x: x
LINEAR_MISTAKES = [
    (lambda q, k, v: _recurrent(q, k, v, normalise=False), ["normaliser is missing"]),
    (lambda q, k, v: _recurrent(q, k, v, identity, identity), ["feature map is missing"]),
    (lambda q, k, v: _recurrent(q, k, v, read_first=True), ["read before it takes in position i"]),
    (_non_causal, ["later ones included"]),
    (lambda q, k, v: _recurrent(q, k, v, torch.relu, torch.relu), ["relu"]),
    (lambda q, k, v: _recurrent(q, k, v, F.elu, F.elu), ["without the + 1"]),
    (lambda q, k, v: _recurrent(q, k, v, den_raw_q=True), ["normaliser uses q instead of phi(q)"]),
    (lambda q, k, v: _recurrent(q, k, v, phi_k=identity), ["queries only"]),
    (lambda q, k, v: _recurrent(q, k, v, phi_q=identity), ["keys only"]),
    (lambda q, k, v: F.scaled_dot_product_attention(q, k, v, is_causal=True), ["softmax attention"]),
    (lambda q, k, v: linear_attention_recurrent(q, k, v) * 0.5, ["differs from the reference"]),
    (lambda q, k, v: linear_attention_recurrent(q, k, v)[..., :-1, :], ["wrong shape"]),
    (lambda q, k, v: linear_attention_recurrent(q, k, v).numpy(), ["torch.Tensor"]),
]


@pytest.mark.parametrize("wrong, phrases", LINEAR_MISTAKES)
def test_linear_mistakes_are_named(wrong, phrases):
    assert_caught(check_linear_attention_recurrent, wrong, *phrases)
