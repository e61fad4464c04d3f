"""Notebook 12: the online softmax and FlashAttention's tiled forward and backward, in plain PyTorch.

The references the notebook's exercises re-derive, written as loops over blocks so that each step reads as in
the papers (Milakov and Gimelshein, 2018, for the online softmax; Dao et al., 2022 and Dao, 2023, for
FlashAttention and FlashAttention-2):

- ``online_softmax_stats(x, block)``: the running maximum ``m`` and running sum ``s`` of a softmax, in one pass
  over blocks of ``x``; ``merge_softmax_stats`` combines the statistics of two parts (what makes tiling possible);
- ``flash_forward(q, k, v, block_q, block_k, causal)``: attention computed one (query block, key block) tile at a
  time, never holding the ``(n, m)`` score matrix; returns the output and the log-sum-exp of every score row;
- ``flash_backward(...)``: the gradients from ``q, k, v``, the output and the log-sum-exp alone, recomputing each
  tile's probabilities instead of storing them; ``flash_attention`` wraps both as an autograd function;
- ``attention_with_lse``: the naive version (the whole score matrix at once), to compare with;
- ``tile_counts``: how many tiles a causal mask lets the loop skip.

Shapes: leading axes ``...`` (batch, heads), queries ``n``, keys ``m``, head width ``d``, value width ``d_v``.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

__all__ = [
    "online_softmax_stats",
    "merge_softmax_stats",
    "attention_with_lse",
    "flash_forward",
    "flash_backward",
    "flash_attention",
    "FlashAttentionFunction",
    "tile_counts",
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


def _tile_mask(i0: int, i1: int, j0: int, j1: int, device: torch.device) -> Tensor | None:
    """The causal mask of the tile (queries i0..i1-1, keys j0..j1-1) ``(i1-i0, j1-j0)``, or None where it keeps all."""
    if j1 - 1 <= i0:  # every key of the tile is at or before every query: nothing to mask
        return None
    rows = torch.arange(i0, i1, device=device)[:, None]  # (bq, 1)
    cols = torch.arange(j0, j1, device=device)[None, :]  # (1, bk)
    return rows >= cols  # (bq, bk), True = may attend


def flash_forward(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    block_q: int = 64,
    block_k: int = 64,
    causal: bool = False,
    scale: float | None = None,
) -> tuple[Tensor, Tensor]:
    """FlashAttention's forward pass, one (query block, key block) tile at a time.

    q ``(..., n, d)``, k ``(..., m, d)``, v ``(..., m, d_v)`` -> ``(out (..., n, d_v), lse (..., n))``, where
    ``lse[i] = logsumexp_j(q_i . k_j * scale)`` over the keys query i may see (``scale`` defaults to 1/sqrt(d)).
    For each query block, a running maximum ``m``, running sum ``l`` and an unnormalised accumulator ``acc`` are
    rescaled by ``exp(m_old - m_new)`` whenever a key block raises the maximum; the division by ``l`` happens once,
    at the end. With ``causal`` (n == m), key blocks wholly after the query block are skipped and only tiles that
    cross the diagonal are masked. The last block of either side may be shorter (n, m need not be multiples).
    """
    _check_shapes(q, k, v, causal)
    if block_q < 1 or block_k < 1:
        raise ValueError(f"block sizes must be at least 1, got {block_q} and {block_k}")
    n, m = q.shape[-2], k.shape[-2]
    lead = q.shape[:-2]
    scale = _scale(q.shape[-1], scale)
    out = torch.empty((*lead, n, v.shape[-1]), dtype=q.dtype, device=q.device)  # (..., n, d_v)
    lse = torch.empty((*lead, n), dtype=q.dtype, device=q.device)  # (..., n)
    for i0 in range(0, n, block_q):
        i1 = min(i0 + block_q, n)
        qi = q[..., i0:i1, :] * scale  # (..., bq, d)
        m_i = torch.full((*lead, i1 - i0, 1), -math.inf, dtype=q.dtype, device=q.device)  # (..., bq, 1)
        l_i = torch.zeros((*lead, i1 - i0, 1), dtype=q.dtype, device=q.device)  # (..., bq, 1)
        acc = torch.zeros((*lead, i1 - i0, v.shape[-1]), dtype=q.dtype, device=q.device)  # (..., bq, d_v)
        for j0 in range(0, m, block_k):
            if causal and j0 >= i1:  # this key block and all after it lie above the diagonal: skip them
                break
            j1 = min(j0 + block_k, m)
            s = qi @ k[..., j0:j1, :].transpose(-2, -1)  # (..., bq, bk)
            keep = _tile_mask(i0, i1, j0, j1, q.device) if causal else None
            if keep is not None:
                s = s.masked_fill(~keep, -math.inf)
            m_new = torch.maximum(m_i, s.amax(dim=-1, keepdim=True))  # (..., bq, 1)
            p = torch.exp(s - m_new)  # (..., bq, bk), unnormalised
            alpha = torch.exp(m_i - m_new)  # (..., bq, 1), rescales what was summed under the old maximum
            l_i = l_i * alpha + p.sum(dim=-1, keepdim=True)  # (..., bq, 1)
            acc = acc * alpha + p @ v[..., j0:j1, :]  # (..., bq, d_v)
            m_i = m_new
        out[..., i0:i1, :] = acc / l_i
        lse[..., i0:i1] = (m_i + torch.log(l_i)).squeeze(-1)
    return out, lse


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
) -> tuple[Tensor, Tensor, Tensor]:
    """FlashAttention-2's backward pass: ``(dq, dk, dv)`` from the inputs, ``out``, ``lse`` and ``dout`` alone.

    Each tile's probabilities are recomputed as ``exp(q_i k_j^T * scale - lse_i)`` (no running maximum needed: the
    log-sum-exp of the forward pass normalises them at once). With ``D_i = sum(dout_i * out_i)``:
    ``dv_j += P^T dout_i``, ``dS = P * (dout_i v_j^T - D_i)``, ``dq_i += dS k_j * scale``, ``dk_j += dS^T q_i * scale``.
    Shapes as ``flash_forward``; ``dout`` ``(..., n, d_v)``.
    """
    _check_shapes(q, k, v, causal)
    n, m = q.shape[-2], k.shape[-2]
    scale = _scale(q.shape[-1], scale)
    delta = (dout * out).sum(dim=-1, keepdim=True)  # (..., n, 1)
    dq, dk, dv = torch.zeros_like(q), torch.zeros_like(k), torch.zeros_like(v)
    for j0 in range(0, m, block_k):
        j1 = min(j0 + block_k, m)
        kj, vj = k[..., j0:j1, :], v[..., j0:j1, :]  # (..., bk, d), (..., bk, d_v)
        for i0 in range(0, n, block_q):
            i1 = min(i0 + block_q, n)
            if causal and j0 >= i1:  # the tile lies above the diagonal
                continue
            qi, doi = q[..., i0:i1, :], dout[..., i0:i1, :]  # (..., bq, d), (..., bq, d_v)
            s = qi @ kj.transpose(-2, -1) * scale  # (..., bq, bk)
            keep = _tile_mask(i0, i1, j0, j1, q.device) if causal else None
            if keep is not None:
                s = s.masked_fill(~keep, -math.inf)
            p = torch.exp(s - lse[..., i0:i1, None])  # (..., bq, bk), the forward's probabilities, recomputed
            dv[..., j0:j1, :] += p.transpose(-2, -1) @ doi  # (..., bk, d_v)
            ds = p * (doi @ vj.transpose(-2, -1) - delta[..., i0:i1, :])  # (..., bq, bk)
            dq[..., i0:i1, :] += ds @ kj * scale  # (..., bq, d)
            dk[..., j0:j1, :] += ds.transpose(-2, -1) @ qi * scale  # (..., bk, d)
    return dq, dk, dv


class FlashAttentionFunction(torch.autograd.Function):
    """Autograd with ``flash_forward`` and ``flash_backward``: it saves q, k, v, out and lse, never an (n, m) matrix."""

    @staticmethod
    def forward(ctx, q, k, v, block_q, block_k, causal):  # noqa: D102 (see the class)
        out, lse = flash_forward(q, k, v, block_q, block_k, causal)
        ctx.save_for_backward(q, k, v, out, lse)
        ctx.config = (block_q, block_k, causal)
        return out

    @staticmethod
    def backward(ctx, dout):  # noqa: D102
        q, k, v, out, lse = ctx.saved_tensors
        dq, dk, dv = flash_backward(q, k, v, out, lse, dout, *ctx.config)
        return dq, dk, dv, None, None, None


def flash_attention(q: Tensor, k: Tensor, v: Tensor, block_q: int = 64, block_k: int = 64, causal: bool = False) -> Tensor:
    """Attention ``(..., n, d_v)`` whose gradients come from ``flash_backward`` (the recomputation of the tiles)."""
    return FlashAttentionFunction.apply(q, k, v, block_q, block_k, causal)


def tile_counts(n: int, m: int, block_q: int, block_k: int, causal: bool = False) -> tuple[int, int]:
    """``(computed, total)``: the tiles ``flash_forward`` computes, and all tiles of the ``(n, m)`` score matrix."""
    rows, cols = math.ceil(n / block_q), math.ceil(m / block_k)
    if not causal:
        return rows * cols, rows * cols
    computed = sum(sum(1 for j0 in range(0, m, block_k) if j0 < min(i0 + block_q, n)) for i0 in range(0, n, block_q))
    return computed, rows * cols
