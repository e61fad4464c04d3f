"""Notebook 12: the online softmax and FlashAttention's tiled forward and backward, in plain PyTorch.

The references the notebook's exercises re-derive, written as loops over blocks so that each step reads as in
the papers (Milakov and Gimelshein, 2018, for the online softmax; Dao, 2023, for FlashAttention-2, whose loop
order this is: query blocks outside, one division at the end, the log-sum-exp saved for the backward pass;
FlashAttention-1, Dao et al., 2022, looped over key blocks outside and rescaled each output block in memory at
every step):

- ``online_softmax_stats(x, block)``: the running maximum ``m`` and running sum ``s`` of a softmax, in one pass
  over blocks of ``x``; ``merge_softmax_stats`` combines the statistics of two parts (what makes tiling possible);
- ``flash_block(qi, k, v, block_k)``: one block of queries against every key, one key block at a time
  (``tile_update``: the running maximum, sum and accumulator after one tile); ``causal_tile_mask`` says which tiles a
  causal mask skips and masks;
- ``flash_forward(q, k, v, block_q, block_k, causal)``: attention computed one (query block, key block) tile at a
  time, never holding the ``(n, m)`` score matrix; returns the output and the log-sum-exp of every score row;
- ``flash_backward(...)``: the gradients from ``q, k, v``, the output and the log-sum-exp alone, recomputing each
  tile's probabilities instead of storing them (``tile_backward``: one tile's share); ``flash_attention`` wraps both
  as an autograd function;
- ``attention_with_lse``: the naive version (the whole score matrix at once), to compare with;
- ``tile_counts``: how many tiles a causal mask lets the loop skip; ``cpu_kernel_blocks``: the block sizes of
  PyTorch's fused CPU kernel, whose causal skipping works on those blocks.

Shapes: leading axes ``...`` (batch, heads), queries ``n``, keys ``m``, head width ``d``, value width ``d_v``.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch
from torch import Tensor

__all__ = [
    "online_softmax_stats",
    "merge_softmax_stats",
    "attention_with_lse",
    "causal_tile_mask",
    "tile_update",
    "flash_block",
    "flash_forward",
    "tile_backward",
    "flash_backward",
    "flash_attention",
    "FlashAttentionFunction",
    "tile_counts",
    "cpu_kernel_blocks",
]


def online_softmax_stats(x: Tensor, block: int) -> tuple[Tensor, Tensor]:
    """The softmax statistics of ``x`` ``(..., n)`` along its last axis, in one pass over blocks of ``block`` entries.

    Returns ``(m, s)``, each ``(..., 1)``: ``m`` the maximum, ``s = sum(exp(x - m))``. Then
    ``softmax(x) = exp(x - m) / s`` and ``logsumexp(x) = m + log(s)``. The last block may be shorter.
    """
    if block < 1:
        raise ValueError(f"block must be at least 1, got {block}")
    m = torch.full((*x.shape[:-1], 1), -math.inf, dtype=x.dtype, device=x.device)  # (..., 1)
    s = torch.zeros((*x.shape[:-1], 1), dtype=x.dtype, device=x.device)  # (..., 1)
    for start in range(0, x.shape[-1], block):
        xb = x[..., start : start + block]  # (..., b), b <= block
        m_new = torch.maximum(m, xb.amax(dim=-1, keepdim=True))  # (..., 1)
        s = s * torch.exp(m - m_new) + torch.exp(xb - m_new).sum(dim=-1, keepdim=True)  # (..., 1)
        m = m_new
    return m, s


def merge_softmax_stats(m1: Tensor, s1: Tensor, m2: Tensor, s2: Tensor) -> tuple[Tensor, Tensor]:
    """The statistics ``(m, s)`` of two parts joined, from each part's own ``(m, s)`` (any order: it is symmetric)."""
    m = torch.maximum(m1, m2)
    return m, s1 * torch.exp(m1 - m) + s2 * torch.exp(m2 - m)


def _scale(d: int, scale: float | None) -> float:
    return 1.0 / math.sqrt(d) if scale is None else scale


def _check_shapes(q: Tensor, k: Tensor, v: Tensor, causal: bool) -> None:
    if q.shape[-1] != k.shape[-1] or k.shape[-2] != v.shape[-2]:
        raise ValueError(
            f"q (..., n, d), k (..., m, d) and v (..., m, d_v) do not fit: q {tuple(q.shape)}, k {tuple(k.shape)}, "
            f"v {tuple(v.shape)}"
        )
    if causal and q.shape[-2] != k.shape[-2]:
        raise ValueError(f"causal attention here is self-attention: n queries = m keys, got n={q.shape[-2]}, m={k.shape[-2]}")


def attention_with_lse(
    q: Tensor, k: Tensor, v: Tensor, causal: bool = False, scale: float | None = None
) -> tuple[Tensor, Tensor]:
    """Naive attention, the whole ``(..., n, m)`` score matrix at once: returns ``(out (..., n, d_v), lse (..., n))``."""
    _check_shapes(q, k, v, causal)
    scores = q @ k.transpose(-2, -1) * _scale(q.shape[-1], scale)  # (..., n, m)
    if causal:
        n = q.shape[-2]
        keep = torch.ones(n, n, dtype=torch.bool, device=q.device).tril()  # (n, n)
        scores = scores.masked_fill(~keep, -math.inf)
    lse = torch.logsumexp(scores, dim=-1)  # (..., n)
    return torch.exp(scores - lse[..., None]) @ v, lse  # (..., n, d_v), (..., n)


def causal_tile_mask(i0: int, i1: int, j0: int, j1: int, device: torch.device | str | None = None) -> Tensor | None:
    """The causal mask of the tile (queries ``i0 .. i1-1``, keys ``j0 .. j1-1``), or None where the tile is skipped.

    A key block that starts at or after the query block's end (``j0 >= i1``) lies wholly above the diagonal: None,
    skip it (and every key block after it). Otherwise a boolean ``(i1 - i0, j1 - j0)`` tensor, True where query
    ``i0 + r`` may see key ``j0 + c``, that is ``i0 + r >= j0 + c`` (absolute positions): all True for a tile wholly
    below the diagonal, a staircase for one that crosses it.
    """
    if j0 >= i1:
        return None
    rows = torch.arange(i0, i1, device=device)[:, None]  # (bq, 1): absolute query positions
    cols = torch.arange(j0, j1, device=device)[None, :]  # (1, bk): absolute key positions
    return rows >= cols  # (bq, bk), True = may attend


def tile_update(m: Tensor, total: Tensor, acc: Tensor, s: Tensor, v_tile: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    """FlashAttention-2's online update for one tile of scores: the running ``(m, l, acc)`` after it.

    ``m`` ``(..., bq, 1)`` the running maximum, ``total`` (the papers' ``l``) ``(..., bq, 1)`` the running sum of ``exp(s - m)``, ``acc``
    ``(..., bq, d_v)`` the unnormalised output ``sum exp(s - m) v``; ``s`` ``(..., bq, bk)`` the tile's scaled (and
    masked: ``-inf``) scores, ``v_tile`` ``(..., bk, d_v)``. What was summed under the old maximum is rescaled by
    ``exp(m_old - m_new)``; the division by the running sum waits for the last tile.
    """
    m_new = torch.maximum(m, s.amax(dim=-1, keepdim=True))  # (..., bq, 1)
    p = torch.exp(s - m_new)  # (..., bq, bk), unnormalised
    alpha = torch.exp(m - m_new)  # (..., bq, 1), rescales what was summed under the old maximum
    return m_new, total * alpha + p.sum(dim=-1, keepdim=True), acc * alpha + p @ v_tile


TileMask = Callable[[int, int, int, int], "Tensor | None"]


def flash_block(
    qi: Tensor,
    k: Tensor,
    v: Tensor,
    block_k: int = 64,
    scale: float | None = None,
    q_start: int | None = None,
    tile_mask: TileMask | None = None,
) -> tuple[Tensor, Tensor]:
    """One block of queries against every key, one key block at a time: ``(out (..., bq, d_v), lse (..., bq))``.

    qi ``(..., bq, d)``, k ``(..., m, d)``, v ``(..., m, d_v)``. Without ``q_start`` every key is visible. With
    ``q_start`` (causal attention), query ``r`` of the block sits at position ``q_start + r``: a tile wholly below the
    diagonal is computed whole; for every other tile ``tile_mask(i0, i1, j0, j1)`` (default ``causal_tile_mask``)
    gives its mask, or None for the first key block to skip (the loop stops there: every later block lies above the
    diagonal too).
    """
    if block_k < 1:
        raise ValueError(f"block sizes must be at least 1, got block_k={block_k}")
    bq, m, d_v = qi.shape[-2], k.shape[-2], v.shape[-1]
    qi = qi * _scale(qi.shape[-1], scale)  # (..., bq, d)
    m_i = torch.full((*qi.shape[:-1], 1), -math.inf, dtype=qi.dtype, device=qi.device)  # (..., bq, 1)
    l_i = torch.zeros((*qi.shape[:-1], 1), dtype=qi.dtype, device=qi.device)  # (..., bq, 1)
    acc = torch.zeros((*qi.shape[:-1], d_v), dtype=qi.dtype, device=qi.device)  # (..., bq, d_v)
    mask_fn = causal_tile_mask if tile_mask is None else tile_mask
    for j0 in range(0, m, block_k):
        j1 = min(j0 + block_k, m)
        keep = None
        if q_start is not None and j1 - 1 > q_start:  # the tile reaches the diagonal: skipped, or masked (tiles below: neither)
            keep = mask_fn(q_start, q_start + bq, j0, j1)
            if keep is None:  # this key block and every one after it lie above the diagonal: skip them
                break
            keep = keep.to(qi.device)
        s = qi @ k[..., j0:j1, :].transpose(-2, -1)  # (..., bq, bk)
        if keep is not None:
            s = s.masked_fill(~keep, -math.inf)
        m_i, l_i, acc = tile_update(m_i, l_i, acc, s, v[..., j0:j1, :])
    return acc / l_i, (m_i + torch.log(l_i)).squeeze(-1)


def flash_forward(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    block_q: int = 64,
    block_k: int = 64,
    causal: bool = False,
    scale: float | None = None,
    tile_mask: TileMask | None = None,
) -> tuple[Tensor, Tensor]:
    """FlashAttention-2's forward pass, one (query block, key block) tile at a time.

    q ``(..., n, d)``, k ``(..., m, d)``, v ``(..., m, d_v)`` -> ``(out (..., n, d_v), lse (..., n))``, where
    ``lse[i] = logsumexp_j(q_i . k_j * scale)`` over the keys query i may see (``scale`` defaults to 1/sqrt(d)).
    The query blocks are the outer loop (``flash_block`` for each): a running maximum ``m``, running sum ``l`` and an
    unnormalised accumulator are rescaled by ``exp(m_old - m_new)`` whenever a key block raises the maximum, and
    divided by ``l`` once, at the end. With ``causal`` (n == m), key blocks wholly after the query block are skipped
    and only tiles that cross the diagonal are masked (``tile_mask``, default ``causal_tile_mask``). The last block of
    either side may be shorter (n, m need not be multiples).
    """
    _check_shapes(q, k, v, causal)
    if block_q < 1 or block_k < 1:
        raise ValueError(f"block sizes must be at least 1, got {block_q} and {block_k}")
    n = q.shape[-2]
    out = torch.empty((*q.shape[:-1], v.shape[-1]), dtype=q.dtype, device=q.device)  # (..., n, d_v)
    lse = torch.empty(q.shape[:-1], dtype=q.dtype, device=q.device)  # (..., n)
    for i0 in range(0, n, block_q):
        i1 = min(i0 + block_q, n)
        out[..., i0:i1, :], lse[..., i0:i1] = flash_block(
            q[..., i0:i1, :], k, v, block_k, scale, q_start=i0 if causal else None, tile_mask=tile_mask
        )
    return out, lse


def tile_backward(
    qi: Tensor,
    kj: Tensor,
    vj: Tensor,
    doi: Tensor,
    lse_i: Tensor,
    delta_i: Tensor,
    keep: Tensor | None = None,
    scale: float | None = None,
) -> tuple[Tensor, Tensor, Tensor]:
    """One tile's share of the gradients: ``(dq_i, dk_j, dv_j)`` to add to ``dq[i-block]``, ``dk[j-block]``, ``dv[j-block]``.

    qi ``(..., bq, d)``, kj ``(..., bk, d)``, vj ``(..., bk, d_v)``, doi ``(..., bq, d_v)`` (the gradient of the
    output rows), ``lse_i`` ``(..., bq)`` the forward pass's log-sum-exp, ``delta_i`` ``(..., bq)`` = ``rowsum(dO * O)``,
    ``keep`` the tile's causal mask (None: every key visible). The probabilities are recomputed, ``P = exp(S - lse)``,
    already normalised; ``dV = P^T dO``, ``dS = P * (dO V^T - delta)``, ``dQ = dS K * scale``, ``dK = dS^T Q * scale``.
    """
    scale = _scale(qi.shape[-1], scale)
    s = qi @ kj.transpose(-2, -1) * scale  # (..., bq, bk)
    if keep is not None:
        s = s.masked_fill(~keep, -math.inf)
    p = torch.exp(s - lse_i[..., None])  # (..., bq, bk): the forward's probabilities, recomputed
    ds = p * (doi @ vj.transpose(-2, -1) - delta_i[..., None])  # (..., bq, bk)
    return ds @ kj * scale, ds.transpose(-2, -1) @ qi * scale, p.transpose(-2, -1) @ doi


TileBackward = Callable[..., "tuple[Tensor, Tensor, Tensor]"]


def flash_backward(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    out: Tensor,
    lse: Tensor,
    dout: Tensor,
    block_q: int = 64,
    block_k: int = 64,
    causal: bool = False,
    scale: float | None = None,
    tile_grads: TileBackward | None = None,
) -> tuple[Tensor, Tensor, Tensor]:
    """FlashAttention-2's backward pass: ``(dq, dk, dv)`` from the inputs, ``out``, ``lse`` and ``dout`` alone.

    The key/value blocks are the outer loop (each block's dk and dv are finished before the next), the query blocks
    the inner one; each tile's share comes from ``tile_grads`` (default ``tile_backward``: ``(qi, kj, vj, doi, lse_i,
    delta_i, keep)`` -> ``(dq_i, dk_j, dv_j)``), which recomputes the tile's probabilities from ``lse`` instead of
    reading them from memory. ``delta = rowsum(dout * out)``. Shapes as ``flash_forward``; ``dout`` ``(..., n, d_v)``.
    """
    _check_shapes(q, k, v, causal)
    n, m = q.shape[-2], k.shape[-2]
    grads_of = tile_backward if tile_grads is None else tile_grads
    delta = (dout * out).sum(dim=-1)  # (..., n)
    dq, dk, dv = torch.zeros_like(q), torch.zeros_like(k), torch.zeros_like(v)
    for j0 in range(0, m, block_k):
        j1 = min(j0 + block_k, m)
        kj, vj = k[..., j0:j1, :], v[..., j0:j1, :]  # (..., bk, d), (..., bk, d_v)
        for i0 in range(0, n, block_q):
            i1 = min(i0 + block_q, n)
            keep = causal_tile_mask(i0, i1, j0, j1, q.device) if causal else None
            if causal and keep is None:  # the tile lies above the diagonal
                continue
            if keep is not None and bool(keep.all()):
                keep = None
            extra = {} if scale is None else {"scale": scale}
            dqi, dkj, dvj = grads_of(
                q[..., i0:i1, :], kj, vj, dout[..., i0:i1, :], lse[..., i0:i1], delta[..., i0:i1], keep, **extra
            )
            dq[..., i0:i1, :] += dqi  # (..., bq, d)
            dk[..., j0:j1, :] += dkj  # (..., bk, d)
            dv[..., j0:j1, :] += dvj  # (..., bk, d_v)
    return dq, dk, dv


class FlashAttentionFunction(torch.autograd.Function):
    """Autograd with ``flash_forward`` and ``flash_backward``: it saves q, k, v, out and lse, never an (n, m) matrix."""

    @staticmethod
    def forward(ctx, q, k, v, block_q, block_k, causal, tile_grads=None):  # noqa: D102 (see the class)
        out, lse = flash_forward(q, k, v, block_q, block_k, causal)
        ctx.save_for_backward(q, k, v, out, lse)
        ctx.config = (block_q, block_k, causal)
        ctx.tile_grads = tile_grads
        return out

    @staticmethod
    def backward(ctx, dout):  # noqa: D102
        q, k, v, out, lse = ctx.saved_tensors
        dq, dk, dv = flash_backward(q, k, v, out, lse, dout, *ctx.config, tile_grads=ctx.tile_grads)
        return dq, dk, dv, None, None, None, None


def flash_attention(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    block_q: int = 64,
    block_k: int = 64,
    causal: bool = False,
    tile_grads: TileBackward | None = None,
) -> Tensor:
    """Attention ``(..., n, d_v)`` whose gradients come from ``flash_backward`` (the recomputation of the tiles).

    ``tile_grads`` is the function that computes one tile's share of the gradients (default ``tile_backward``).
    """
    return FlashAttentionFunction.apply(q, k, v, block_q, block_k, causal, tile_grads)


def tile_counts(n: int, m: int, block_q: int, block_k: int, causal: bool = False) -> tuple[int, int]:
    """``(computed, total)``: the tiles ``flash_forward`` computes, and all tiles of the ``(n, m)`` score matrix."""
    rows, cols = math.ceil(n / block_q), math.ceil(m / block_k)
    if not causal:
        return rows * cols, rows * cols
    computed = sum(sum(1 for j0 in range(0, m, block_k) if j0 < min(i0 + block_q, n)) for i0 in range(0, n, block_q))
    return computed, rows * cols


def cpu_kernel_blocks(n: int) -> tuple[int, int]:
    """``(block_q, block_k)``: the tiles of PyTorch's fused CPU attention kernel for ``n`` queries (``SDPBackend.FLASH_ATTENTION``
    on the CPU; ``aten/src/ATen/native/cpu/FlashAttentionKernel.cpp``, ``flash_attention_kernel_impl``): 256 queries
    from n = 768 on, 64 from 192, else 32, by 512 keys. Under a causal mask it computes, for each query block, every
    key block that starts at or before the block's last query, whole (the part above the diagonal set to -inf), so
    ``tile_counts(n, n, *cpu_kernel_blocks(n), causal=True)`` counts the blocks it computes."""
    if n < 1:
        raise ValueError(f"n must be at least 1, got {n}")
    return (256 if n >= 768 else 64 if n >= 192 else 32), 512
