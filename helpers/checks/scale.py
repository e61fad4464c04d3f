"""Checks of notebook 12 (attention at scale: online softmax, tiled attention, sliding windows, linear attention).

Each check runs the learner's function on fresh random float64 inputs of small distinct sizes, compares it with
PyTorch (``torch.softmax``, ``torch.logsumexp``, ``F.scaled_dot_product_attention``) or with the course's reference
(``helpers.scale.flash``, ``helpers.scale.linear_attention``), and names the typical mistakes: a running sum not rescaled when
the maximum grows, the rescaling factor upside down, a maximum that starts at 0, a dropped ragged last block, a
division per block, a causal skip that drops needed tiles, a window off by one or on the wrong side, a recurrence
that reads its state before updating it. A float32 run is judged at float32's tolerance.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor

from helpers.checks._core import ExerciseFailed, call, exercise, expect_close, expect_shape, expect_tensor
from helpers.scale.linear_attention import elu_feature_map, linear_attention_parallel

__all__ = [
    "check_online_softmax_stats",
    "check_flash_forward",
    "check_sliding_window_mask",
    "check_linear_attention_recurrent",
]


def _pair(result: object, names: tuple[str, str], what: str) -> tuple[Tensor, Tensor]:
    """The learner's result must be a pair of tensors (a tuple or a list of two)."""
    if type(result).__module__ == "torch.return_types":  # x.max(dim): (values, indices)
        raise ExerciseFailed(
            f"{what} returned the {type(result).__name__} of x.max(dim) (values and indices), not the pair "
            f"({names[0]}, {names[1]}): take `.values`, or use x.amax(dim, keepdim=True)"
        )
    if not isinstance(result, (tuple, list)) or len(result) != 2:
        kind = type(result).__name__ + (f" of length {len(result)}" if isinstance(result, (tuple, list)) else "")
        raise ExerciseFailed(f"{what} returned a {kind}; return the pair ({names[0]}, {names[1]})")
    return expect_tensor(result[0], names[0]), expect_tensor(result[1], names[1])


def _same(a: Tensor, b: Tensor, atol: float, rtol: float) -> bool:
    return a.shape == b.shape and bool(torch.allclose(a.double(), b.double(), atol=atol, rtol=rtol, equal_nan=True))


# ---------------------------------------------------------------- online softmax


def _stats(x: Tensor, block: int, mistake: str = "") -> tuple[Tensor, Tensor]:
    """Online softmax statistics ``(m, s)`` ``(..., 1)``, right or with one typical mistake."""
    init = 0.0 if mistake == "zero_init" else -math.inf
    m = torch.full((*x.shape[:-1], 1), init, dtype=x.dtype)
    s = torch.zeros((*x.shape[:-1], 1), dtype=x.dtype)
    n = x.shape[-1]
    stop = n - block + 1 if mistake == "dropped_ragged" else n
    for start in range(0, max(stop, 0), block):
        xb = x[..., start : start + block]
        block_max = xb.amax(-1, keepdim=True)
        m_new = block_max if mistake == "block_max" else torch.maximum(m, block_max)
        if mistake == "no_rescale":
            s = s + torch.exp(xb - m_new).sum(-1, keepdim=True)
        elif mistake == "flipped":
            s = s * torch.exp(m_new - m) + torch.exp(xb - m_new).sum(-1, keepdim=True)
        elif mistake == "raw_exp":
            s = s + torch.exp(xb).sum(-1, keepdim=True)
        else:
            s = s * torch.exp(m - m_new) + torch.exp(xb - m_new).sum(-1, keepdim=True)
        m = m_new
    if mistake == "log_sum":
        s = torch.log(s)
    if mistake == "lse":
        s = m + torch.log(s)
    return m, s


_STATS_MISTAKES = {
    "no_rescale": "the running sum is not rescaled when the maximum grows: before adding a block, multiply the sum so "
    "far by exp(m_old - m_new), since its terms were exp(x - m_old)",
    "flipped": "the running sum is rescaled by exp(m_new - m_old), upside down: the old terms exp(x - m_old) become "
    "exp(x - m_new) when multiplied by exp(m_old - m_new), a number at most 1",
    "zero_init": "the running maximum starts at 0 instead of -inf: for a row of scores all far below 0 (here near -1000) "
    "the maximum stays 0 and every exp(x - 0) underflows to 0, so s = 0 and the softmax is 0/0; start with "
    "m = torch.full(..., -inf)",
    "block_max": "m is the maximum of the last block only, not the running maximum of every block so far: "
    "m_new = torch.maximum(m, block.amax(-1, keepdim=True))",
    "dropped_ragged": "the last, shorter block is dropped: when n is not a multiple of the block, the last block holds "
    "n % block entries; loop with range(0, n, block) and slice x[..., start:start + block]",
    "raw_exp": "the sum adds exp(x) without subtracting the running maximum: s is the sum of exp(x - m)",
    "log_sum": "s is the log of the sum; return the sum itself, s = sum(exp(x - m))",
    "lse": "s is the log-sum-exp m + log(sum); return the sum itself, s = sum(exp(x - m)) (the notebook adds the log later)",
}


@exercise("online softmax")
def check_online_softmax_stats(online_softmax_stats) -> None:
    """Check ``online_softmax_stats(x, block) -> (m, s)`` against ``x.amax`` and ``torch.logsumexp``."""
    x = torch.randn(4, 10, dtype=torch.float64) * 3.0  # (4, 10): blocks of 4, 4 and 2
    x[0] = torch.linspace(-2.0, 6.0, 10, dtype=torch.float64)  # the maximum grows with every block
    x[1] = torch.linspace(6.0, -2.0, 10, dtype=torch.float64)  # the maximum sits in the first block
    x[2] = -1000.0 + torch.randn(10, dtype=torch.float64)  # every exp(x - 0) underflows to 0
    x[3, -1] = 9.0  # the maximum in the short last block
    cases = [(x, 4), (torch.randn(2, 3, 7, dtype=torch.float64) * 2.0, 3), (torch.randn(5, dtype=torch.float64), 8)]
    for xs, block in cases:
        shape = tuple(xs.shape)
        result = call(online_softmax_stats, xs.clone(), block, what=f"x of shape {shape} and block={block}")
        m, s = _pair(result, ("m", "s"), "online_softmax_stats")
        lead = shape[:-1]
        for name, t in (("m", m), ("s", s)):
            if tuple(t.shape) not in (lead + (1,), lead):
                raise ExerciseFailed(
                    f"{name} has shape {tuple(t.shape)} for x of shape {shape}; it holds one number per row: "
                    f"{lead + (1,)} (keepdim=True) or {lead}"
                )
        m, s = m.reshape(*lead, 1), s.reshape(*lead, 1)
        right_m = xs.amax(-1, keepdim=True)
        right_s = torch.exp(xs - right_m).sum(-1, keepdim=True)
        atol, rtol = (1e-5, 1e-4) if m.dtype == torch.float32 or s.dtype == torch.float32 else (1e-10, 1e-9)
        if not (_same(m, right_m, atol, rtol) and _same(s, right_s, atol, rtol)):
            for kind, message in _STATS_MISTAKES.items():
                wrong_m, wrong_s = _stats(xs, block, kind)
                if _same(m, wrong_m, atol, rtol) and _same(s, wrong_s, atol, rtol):
                    raise ExerciseFailed(f"with x of shape {shape} and block={block}: {message}")
            expect_close(m, right_m, f"m (the maximum of each row) for x of shape {shape}, block={block}", atol=atol, rtol=rtol)
            expect_close(s, right_s, f"s (the sum of exp(x - m)) for x of shape {shape}, block={block}", atol=atol, rtol=rtol)
    # float32 inputs are judged at float32's tolerance
    x32 = torch.randn(3, 9, dtype=torch.float32) * 4.0
    m32, s32 = _pair(
        call(online_softmax_stats, x32.clone(), 4, what="float32 x of shape (3, 9)"), ("m", "s"), "online_softmax_stats"
    )
    softmax = torch.exp(x32.double() - m32.reshape(3, 1).double()) / s32.reshape(3, 1).double()
    expect_close(softmax, torch.softmax(x32.double(), -1), "exp(x - m) / s for a float32 x (3, 9)", atol=1e-5, rtol=1e-4)


# ---------------------------------------------------------------- FlashAttention's forward


def _tiled(q: Tensor, k: Tensor, v: Tensor, bq: int, bk: int, causal: bool, mistake: str = "") -> tuple[Tensor, Tensor]:
    """A tiled forward pass ``(out, lse)``, right or with one typical mistake."""
    n, m, d = q.shape[-2], k.shape[-2], q.shape[-1]
    lead = q.shape[:-2]
    scale = 1.0 if mistake == "no_scale" else 1.0 / math.sqrt(d)
    out = torch.zeros((*lead, n, v.shape[-1]), dtype=q.dtype)
    lse = torch.zeros((*lead, n), dtype=q.dtype)
    k_stop = m - bk + 1 if mistake == "dropped_ragged_k" else m
    for i0 in range(0, n, bq):
        i1 = min(i0 + bq, n)
        qi = q[..., i0:i1, :] * scale
        m_i = torch.full((*lead, i1 - i0, 1), 0.0 if mistake == "zero_init" else -math.inf, dtype=q.dtype)
        l_i = torch.zeros((*lead, i1 - i0, 1), dtype=q.dtype)
        acc = torch.zeros((*lead, i1 - i0, v.shape[-1]), dtype=q.dtype)
        for j0 in range(0, max(k_stop, 0), bk):
            j1 = min(j0 + bk, m)
            if causal:
                if mistake == "skip_from_block_start" and j0 > i0:
                    break
                if mistake == "skip_by_end" and j1 > i1:
                    break
                if j0 >= i1:
                    break
            s = qi @ k[..., j0:j1, :].transpose(-2, -1)
            if causal and mistake != "no_tile_mask":
                rows, cols = torch.arange(i0, i1)[:, None], torch.arange(j0, j1)[None, :]
                if mistake == "local_mask":
                    rows, cols = torch.arange(i1 - i0)[:, None], torch.arange(j1 - j0)[None, :]
                keep = rows <= cols if mistake == "mask_flipped" else rows >= cols
                s = s.masked_fill(~keep, -math.inf)
            m_new = torch.maximum(m_i, s.amax(-1, keepdim=True))
            p = torch.exp(s - m_new)
            alpha = torch.exp(m_new - m_i) if mistake == "flipped_alpha" else torch.exp(m_i - m_new)
            l_i = (l_i if mistake == "no_rescale_l" else l_i * alpha) + p.sum(-1, keepdim=True)
            pv = p @ v[..., j0:j1, :]
            if mistake.startswith("per_block"):
                pv = pv / p.sum(-1, keepdim=True)
            acc = (acc if mistake == "no_rescale_acc" else acc * alpha) + pv
            m_i = m_new
        out[..., i0:i1, :] = acc if mistake == "per_block_no_final" else acc / l_i
        lse[..., i0:i1] = (torch.log(l_i) if mistake == "lse_no_max" else m_i + torch.log(l_i)).squeeze(-1)
    return out, lse


_FLASH_MISTAKES = {
    "no_rescale_acc": "the accumulator is not rescaled when the running maximum grows: its terms were weighted by "
    "exp(s - m_old), so multiply it by exp(m_old - m_new) before adding p @ v (as you do for the running sum)",
    "no_rescale_l": "the running sum is not rescaled when the running maximum grows: multiply it by exp(m_old - m_new) "
    "before adding p.sum(-1), as you do for the accumulator",
    "zero_init": "the running maximum starts at 0 instead of -inf: when every score of a query is far below 0 (here "
    "near -2000) the maximum stays 0, every exp(s - 0) underflows to 0 and the output is 0/0; start with "
    "m = torch.full(..., -inf)",
    "flipped_alpha": "the rescaling factor is upside down (every output is NaN: on the first key block exp(m_new - m_old) "
    "= exp(+inf) = inf, and 0 * inf = NaN): the old terms exp(s - m_old) become exp(s - m_new) when multiplied by "
    "exp(m_old - m_new), a number at most 1",
    "per_block": "each key block's probabilities are divided by that block's own sum: the sum over all keys is known "
    "only after the last key block, so accumulate the unnormalised p @ v and divide by the running sum once, at the end",
    "per_block_no_final": "each key block's probabilities are divided by that block's own sum: the sum over all keys is "
    "known only after the last key block, so accumulate the unnormalised p @ v and divide by the running sum once, at "
    "the end",
    "skip_from_block_start": "the causal skip drops tiles that are needed: a key block must be skipped only when it "
    "starts after the query block's LAST query (j0 >= i0 + block_q, or j0 > i1 - 1), not after its first",
    "skip_by_end": "the causal skip drops tiles that end after the query block but start inside it: such a tile holds "
    "keys that some of its queries may see; compute it, with the mask, and skip only key blocks that start after the "
    "query block's last query (j0 >= i1)",
    "no_tile_mask": "the tiles that cross the diagonal are not masked: skipping whole blocks is not enough, inside a "
    "tile that crosses the diagonal set the scores of keys after their query to -inf",
    "local_mask": "the causal mask of a tile compares positions inside the tile (0, 1, 2...) instead of the absolute "
    "positions: query i0 + r may see key j0 + c when i0 + r >= j0 + c",
    "mask_flipped": "the causal mask is on the wrong side: query i may see keys j <= i (the past), not j >= i",
    "dropped_ragged_k": "the last, shorter key block is dropped: when m is not a multiple of block_k, the last key "
    "block holds m % block_k keys; loop with range(0, m, block_k) and slice k[..., j0:j0 + block_k]",
    "no_scale": "the scores are not scaled: multiply q (or each tile's scores) by 1/sqrt(d)",
    "lse_no_max": "the log-sum-exp is log(l) without the running maximum: the running sum holds exp(s - m), so lse = m + log(l)",
}


def _reference(q: Tensor, k: Tensor, v: Tensor, causal: bool) -> tuple[Tensor, Tensor]:
    """``F.scaled_dot_product_attention`` and ``torch.logsumexp`` of the scaled (masked) scores."""
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
    if causal:
        n = q.shape[-2]
        scores = scores.masked_fill(~torch.ones(n, n, dtype=torch.bool).tril(), -math.inf)
    return F.scaled_dot_product_attention(q, k, v, is_causal=causal), torch.logsumexp(scores, dim=-1)


def _expect_flash(fn, q: Tensor, k: Tensor, v: Tensor, bq: int, bk: int, causal: bool) -> None:
    shape = f"q {tuple(q.shape)}, k {tuple(k.shape)}, v {tuple(v.shape)}, block_q={bq}, block_k={bk}, causal={causal}"
    result = call(fn, q.clone(), k.clone(), v.clone(), bq, bk, causal, what=shape)
    out, lse = _pair(result, ("out", "lse"), "flash_forward")
    right_out, right_lse = _reference(q, k, v, causal)
    if out.dtype != q.dtype:
        raise ExerciseFailed(
            f"out is {str(out.dtype).replace('torch.', '')} for {str(q.dtype).replace('torch.', '')} inputs: create the "
            "accumulators with the inputs' dtype (torch.zeros(..., dtype=q.dtype), or q.new_zeros(...))"
        )
    lead, n = tuple(q.shape[:-2]), q.shape[-2]
    if tuple(lse.shape) == lead + (n, 1):
        lse = lse.squeeze(-1)  # (..., n, 1) is the same answer with keepdim
    expect_shape(out, right_out.shape, f"out ({shape})")
    expect_shape(lse, right_lse.shape, f"lse ({shape}): one number per query")
    atol, rtol = (1e-5, 1e-4) if q.dtype == torch.float32 else (1e-10, 1e-9)
    if _same(out, right_out, atol, rtol) and _same(lse, right_lse, atol, rtol):
        return
    for kind, message in _FLASH_MISTAKES.items():
        if kind == "lse_no_max" or (
            not causal and kind in ("skip_from_block_start", "skip_by_end", "no_tile_mask", "local_mask", "mask_flipped")
        ):
            continue
        wrong_out, _ = _tiled(q, k, v, bq, bk, causal, kind)
        if _same(out, wrong_out, atol, rtol) and not _same(wrong_out, right_out, atol, rtol):
            raise ExerciseFailed(f"with {shape}: {message}")
    full = (n // bq) * bq
    if full < n and not _same(out, right_out, atol, rtol) and _same(out[..., :full, :], right_out[..., :full, :], atol, rtol):
        raise ExerciseFailed(
            f"with {shape}: the rows of the last, shorter query block ({full} to {n - 1}) are wrong or missing: when n is "
            "not a multiple of block_q, the last query block holds n % block_q queries; loop with range(0, n, block_q)"
        )
    expect_close(out, right_out, f"out ({shape})", atol=atol, rtol=rtol)
    if _same(out, right_out, atol, rtol) and not _same(lse, right_lse, atol, rtol):
        _, no_max = _tiled(q, k, v, bq, bk, causal, "lse_no_max")
        if _same(lse, no_max, atol, rtol):
            raise ExerciseFailed(f"with {shape}: {_FLASH_MISTAKES['lse_no_max']}")
        if _same(lse, right_lse * math.sqrt(q.shape[-1]), atol, rtol):
            raise ExerciseFailed(f"with {shape}: the log-sum-exp is of the unscaled scores; use the scores times 1/sqrt(d)")
    expect_close(lse, right_lse, f"lse ({shape}): logsumexp of each query's scaled scores", atol=atol, rtol=rtol)


def _expect_tiled_memory(fn) -> None:
    """A tiled forward never holds an (n, m) matrix: measure the learner's peak memory (helpers.scale.measure)."""
    from helpers.scale.measure import peak_extra_bytes

    n, d = 256, 8
    q, k, v = (torch.randn(n, d, dtype=torch.float64) for _ in range(3))
    try:
        peak = peak_extra_bytes(lambda: call(fn, q, k, v, 32, 32, False, what=f"q, k, v ({n}, {d}), blocks of 32")).peak
    except RuntimeError:  # a PyTorch whose profiler does not report memory: nothing to measure
        return
    full = n * n * q.element_size()
    if peak >= full:
        raise ExerciseFailed(
            f"the output is right, but with n = m = {n} and blocks of 32 your function held {peak:,} bytes at its peak, at "
            f"least one whole ({n}, {n}) score matrix ({full:,} bytes): compute the scores one (block_q, block_k) tile at a "
            "time, inside the loops, and keep only the running statistics and the accumulator between tiles"
        )


_PRODUCTS = {
    torch.matmul,
    torch.Tensor.matmul,
    torch.Tensor.__matmul__,
    torch.Tensor.__rmatmul__,
    torch.mm,
    torch.Tensor.mm,
    torch.bmm,
    torch.Tensor.bmm,
    torch.einsum,
    torch.tensordot,
    F.linear,
}


class _CountProducts(torch.overrides.TorchFunctionMode):
    """Counts the matrix products a function runs (scores and weighted sums, one or two per tile)."""

    def __init__(self) -> None:
        super().__init__()
        self.count = 0

    def __torch_function__(self, func, types, args=(), kwargs=None):  # type: ignore[no-untyped-def]
        if func in _PRODUCTS:
            self.count += 1
        return func(*args, **(kwargs or {}))


def _expect_causal_skips(fn) -> None:
    """With causal=True the tiles wholly above the diagonal are skipped: fewer matrix products than without the mask."""
    n, d, block = 16, 4, 4  # 4 x 4 tiles: 16 without the mask, 10 on or below the diagonal
    q, k, v = (torch.randn(n, d, dtype=torch.float64) for _ in range(3))
    counts = {}
    for causal, block_q in ((False, block), (True, block), (False, n)):
        with _CountProducts() as counter:
            call(fn, q, k, v, block_q, block, causal, what=f"q, k, v ({n}, {d}), blocks of {block}, causal={causal}")
        counts[causal, block_q] = counter.count
    tiles_queries = counts[False, block] > counts[False, n]  # all queries at once (block_q ignored) has nothing to skip
    if tiles_queries and counts[True, block] >= counts[False, block]:
        counts = {causal: counts[causal, block] for causal in (False, True)}
        raise ExerciseFailed(
            f"the output is right, but with causal=True your function runs as many matrix products ({counts[True]}) as "
            f"without the mask ({counts[False]}) on 4 x 4 tiles: it computes the tiles wholly above the diagonal and masks "
            "them all. Skip them: for query block [i0, i1), stop at the first key block with j0 >= i1 (only 10 of the 16 "
            "tiles are needed)"
        )


@exercise("FlashAttention's tiled forward pass")
def check_flash_forward(flash_forward) -> None:
    """Check ``flash_forward(q, k, v, block_q, block_k, causal) -> (out, lse)`` against F.scaled_dot_product_attention."""
    cases = [
        ((2, 11, 5), (2, 13, 5), (2, 13, 6), 4, 5, False),  # both sides ragged
        ((6, 4), (7, 4), (7, 3), 4, 3, False),  # every score near -2000 (see below)
        ((2, 13, 5), (2, 13, 5), (2, 13, 6), 4, 3, True),  # tiles that cross the diagonal unevenly
        ((3, 2, 10, 4), (3, 2, 10, 4), (3, 2, 10, 3), 5, 5, True),  # batch and heads, blocks that divide n
        ((9, 5), (9, 5), (9, 6), 16, 16, True),  # one block larger than the sequence
    ]
    for q_shape, k_shape, v_shape, bq, bk, causal in cases:
        q = torch.randn(*q_shape, dtype=torch.float64) * 1.5
        k = torch.randn(*k_shape, dtype=torch.float64) * 1.5
        v = torch.randn(*v_shape, dtype=torch.float64)
        k[..., -1, :] = q[..., :1, :].sum(-2) * 2.0  # a late key that raises the first queries' maximum
        if q_shape == (6, 4):  # scores all far below 0: a running maximum that starts at 0 underflows to 0/0
            q, k = 10.0 + q.abs(), -100.0 + k
        _expect_flash(flash_forward, q, k, v, bq, bk, causal)
    q32, k32, v32 = (torch.randn(2, 12, 8, dtype=torch.float32) for _ in range(3))
    _expect_flash(flash_forward, q32, k32, v32, 5, 4, True)
    _expect_tiled_memory(flash_forward)
    _expect_causal_skips(flash_forward)


# ---------------------------------------------------------------- sliding-window mask


def _window(n: int, window: int, kind: str = "") -> Tensor:
    i = torch.arange(n)
    offset = i[:, None] - i[None, :]
    return {
        "": (offset >= 0) & (offset < window),
        "one_more": (offset >= 0) & (offset <= window),
        "one_less": (offset >= 0) & (offset < window - 1),
        "future": (offset <= 0) & (offset > -window),
        "both_sides": offset.abs() < window,
        "not_causal": offset < window,
        "no_window": offset >= 0,
        "inverted": ~((offset >= 0) & (offset < window)),
    }[kind]


_WINDOW_MISTAKES = {
    "one_more": "the window holds one key too many: query i sees keys i - window + 1 .. i, so the condition is "
    "0 <= i - j < window (strictly less than the window), not <= window",
    "one_less": "the window holds one key too few: query i sees `window` keys, i - window + 1 .. i, itself included: "
    "0 <= i - j < window",
    "future": "the window is on the wrong side: query i may see itself and the window - 1 keys BEFORE it (j <= i), not "
    "after it; the rows are the queries, the columns the keys",
    "both_sides": "the window reaches both ways: a causal sliding window sees only the past, 0 <= i - j < window",
    "not_causal": "every key after the query is visible: keep the causal part, i - j >= 0, as well as i - j < window",
    "no_window": "the window is ignored: that is the plain causal mask; also require i - j < window",
    "inverted": "the mask is inverted: True must mean 'may attend' (the convention of F.scaled_dot_product_attention), "
    "for the keys inside the window",
}


@exercise("sliding-window mask")
def check_sliding_window_mask(sliding_window_mask) -> None:
    """Check ``sliding_window_mask(n, window) -> BoolTensor (n, n)``, then attention with it against is_causal=True."""
    for n, window in ((7, 3), (6, 1), (5, 8), (9, 4)):
        mask = expect_tensor(call(sliding_window_mask, n, window, what=f"n={n}, window={window}"), "the mask")
        if mask.dtype != torch.bool:
            hint = (
                " (an additive mask with 0 and -inf? the course's masks are boolean, True = may attend)"
                if mask.is_floating_point()
                else ""
            )
            raise ExerciseFailed(
                f"the mask has dtype {mask.dtype}{hint}; return a boolean tensor, True where query i may see key j"
            )
        expect_shape(mask, (n, n), f"the mask for n={n}, window={window}")
        right = _window(n, window)
        if torch.equal(mask, right):
            continue
        for kind, message in _WINDOW_MISTAKES.items():
            if torch.equal(mask, _window(n, window, kind)):
                raise ExerciseFailed(f"with n={n}, window={window}: {message}")
        rows = [i for i in range(n) if not torch.equal(mask[i], right[i])]
        raise ExerciseFailed(
            f"with n={n}, window={window}: row {rows[0]} (query {rows[0]}) allows keys "
            f"{torch.nonzero(mask[rows[0]]).flatten().tolist()}, expected {torch.nonzero(right[rows[0]]).flatten().tolist()}"
        )
    # a window that covers the sequence is the causal mask: attention equals is_causal=True
    q, k, v = (torch.randn(2, 6, 4, dtype=torch.float64) for _ in range(3))
    mask = call(sliding_window_mask, 6, 6, what="n=6, window=6")
    windowed = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
    expect_close(windowed, F.scaled_dot_product_attention(q, k, v, is_causal=True), "attention with window = n", atol=1e-12)


# ---------------------------------------------------------------- linear attention, recurrent form


def _linear_mistakes(q: Tensor, k: Tensor, v: Tensor) -> dict[str, Tensor]:
    fq, fk = elu_feature_map(q), elu_feature_map(k)

    def causal(fq_: Tensor, fk_: Tensor, normalise: bool = True, shift: bool = False, den_q: Tensor | None = None) -> Tensor:
        a = fq_ @ fk_.transpose(-2, -1)
        a = a.tril(-1) if shift else a.tril()
        num = a @ v
        if not normalise:
            return num
        if den_q is not None:
            den = (den_q @ fk_.transpose(-2, -1)).tril(-1 if shift else 0).sum(-1, keepdim=True)
        else:
            den = a.sum(-1, keepdim=True)
        return num / den

    full = fq @ fk.transpose(-2, -1)
    relu_q, relu_k = torch.relu(q), torch.relu(k)
    elu_q, elu_k = F.elu(q), F.elu(k)
    with torch.no_grad():
        softmax = F.scaled_dot_product_attention(q, k, v, is_causal=True)
    return {
        "the normaliser is missing: divide phi(q_i)^T S_i by phi(q_i)^T z_i, where z_i is the running sum of phi(k_j)": causal(
            fq, fk, normalise=False
        ),
        "the feature map is missing: apply phi = elu(x) + 1 to the queries and the keys, so every weight is positive": causal(
            q, k
        ),
        "the state is read before it takes in position i: add phi(k_i) v_i^T and phi(k_i) to the state first, then read "
        "it with phi(q_i) (a query sees its own key; at position 0 the empty state gives 0/0)": causal(fq, fk, shift=True),
        "the output uses every position, later ones included: the state at position i holds the keys and values of "
        "positions 0..i only (update it inside the loop, read it at once)": (full @ v) / full.sum(-1, keepdim=True),
        "the feature map is relu: this course's phi is elu(x) + 1 (Katharopoulos et al.), positive everywhere; relu "
        "gives zero weights and can divide by 0": causal(relu_q, relu_k),
        "the feature map is elu(x) without the + 1: its values go down to -1, so weights can be negative; use elu(x) + 1": causal(
            elu_q, elu_k
        ),
        "the normaliser uses q instead of phi(q): the denominator is phi(q_i) . z_i": causal(fq, fk, den_q=q),
        "the feature map is applied to the queries only: the keys need it too, phi(k_j)": causal(fq, k),
        "the feature map is applied to the keys only: the queries need it too, phi(q_i)": causal(q, fk),
        "that is softmax attention (exp of the scores): linear attention weighs key j by phi(q_i) . phi(k_j)": softmax,
    }


@exercise("linear attention, recurrent form")
def check_linear_attention_recurrent(linear_attention_recurrent) -> None:
    """Check ``linear_attention_recurrent(q, k, v) -> (..., n, d_v)`` against the parallel (masked matrix) form."""
    for q_shape, v_shape in (((2, 7, 5), (2, 7, 4)), ((9, 3), (9, 6)), ((2, 3, 6, 4), (2, 3, 6, 5))):
        q = torch.randn(*q_shape, dtype=torch.float64)
        k = torch.randn(*q_shape, dtype=torch.float64)
        v = torch.randn(*v_shape, dtype=torch.float64)
        what = f"q, k {q_shape} and v {v_shape}"
        out = call(linear_attention_recurrent, q.clone(), k.clone(), v.clone(), what=what)
        expect_close(
            out,
            linear_attention_parallel(q, k, v),
            f"the output for {what}",
            atol=1e-10,
            rtol=1e-9,
            mistakes=_linear_mistakes(q, k, v),
        )
    q32, k32, v32 = torch.randn(8, 4), torch.randn(8, 4), torch.randn(8, 3)
    out32 = call(linear_attention_recurrent, q32.clone(), k32.clone(), v32.clone(), what="float32 q, k (8, 4) and v (8, 3)")
    expect_close(out32, linear_attention_parallel(q32.double(), k32.double(), v32.double()), "the output for float32 inputs")
