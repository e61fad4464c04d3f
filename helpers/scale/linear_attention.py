"""Notebook 12: linear attention (Katharopoulos et al., 2020, "Transformers are RNNs"), causal, in three forms.

Softmax attention weighs key j for query i by ``exp(q_i . k_j)``. Linear attention replaces that by a kernel
``phi(q_i) . phi(k_j)`` with a feature map ``phi`` whose values are positive, here ``elu(x) + 1``:

    out_i = phi(q_i)^T S_i / (phi(q_i)^T z_i),   S_i = sum_{j <= i} phi(k_j) v_j^T  (d, d_v),   z_i = sum_{j <= i} phi(k_j)  (d,)

- ``linear_attention_parallel``: the ``(n, n)`` matrix ``phi(Q) phi(K)^T``, masked and row-normalised (quadratic,
  like softmax attention, for checking);
- ``linear_attention_recurrent``: one position at a time, carrying the state ``(S, z)`` of fixed size: an RNN;
- ``linear_attention_chunked``: chunks of ``chunk`` positions, quadratic inside a chunk and the state between chunks:
  the fast form on a CPU (``n * chunk * d + n * d * d_v`` multiply-adds, linear in n).

Shapes: q, k ``(..., n, d)``, v ``(..., n, d_v)`` -> ``(..., n, d_v)``.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor

__all__ = [
    "elu_feature_map",
    "linear_attention_parallel",
    "linear_attention_recurrent",
    "linear_attention_chunked",
    "linear_attention_matrix",
]


def elu_feature_map(x: Tensor) -> Tensor:
    """``elu(x) + 1``: positive everywhere (``exp(x)`` below 0, ``x + 1`` above), so every weight is positive."""
    return F.elu(x) + 1


def linear_attention_matrix(q: Tensor, k: Tensor) -> Tensor:
    """The causal weights ``(..., n, n)`` linear attention gives: ``phi(q_i) . phi(k_j)`` for j <= i, rows summing to 1."""
    a = (elu_feature_map(q) @ elu_feature_map(k).transpose(-2, -1)).tril()  # (..., n, n)
    return a / a.sum(dim=-1, keepdim=True)


def linear_attention_parallel(q: Tensor, k: Tensor, v: Tensor) -> Tensor:
    """Causal linear attention through the whole ``(n, n)`` weight matrix (quadratic): ``(..., n, d_v)``."""
    return linear_attention_matrix(q, k) @ v


def linear_attention_recurrent(q: Tensor, k: Tensor, v: Tensor) -> Tensor:
    """Causal linear attention as a recurrence over positions, with a state ``S (..., d, d_v)`` and ``z (..., d)``.

    At position i the state first takes in key and value i (a query sees itself), then the query reads it.
    """
    fq, fk = elu_feature_map(q), elu_feature_map(k)  # (..., n, d)
    lead, n, d, d_v = q.shape[:-2], q.shape[-2], q.shape[-1], v.shape[-1]
    state = torch.zeros((*lead, d, d_v), dtype=q.dtype, device=q.device)  # (..., d, d_v)
    z = torch.zeros((*lead, d), dtype=q.dtype, device=q.device)  # (..., d)
    outputs = []
    for i in range(n):
        state = state + fk[..., i, :, None] * v[..., i, None, :]  # (..., d, d_v): add phi(k_i) v_i^T
        z = z + fk[..., i, :]  # (..., d)
        numerator = (fq[..., i, None, :] @ state).squeeze(-2)  # (..., d_v)
        denominator = (fq[..., i, :] * z).sum(dim=-1, keepdim=True)  # (..., 1)
        outputs.append(numerator / denominator)
    return torch.stack(outputs, dim=-2)  # (..., n, d_v)


def linear_attention_chunked(q: Tensor, k: Tensor, v: Tensor, chunk: int = 64) -> Tensor:
    """Causal linear attention in chunks: inside a chunk the masked ``(c, c)`` matrix, across chunks the state."""
    if chunk < 1:
        raise ValueError(f"chunk must be at least 1, got {chunk}")
    fq, fk = elu_feature_map(q), elu_feature_map(k)  # (..., n, d)
    lead, n, d, d_v = q.shape[:-2], q.shape[-2], q.shape[-1], v.shape[-1]
    state = torch.zeros((*lead, d, d_v), dtype=q.dtype, device=q.device)  # (..., d, d_v): chunks before this one
    z = torch.zeros((*lead, 1, d), dtype=q.dtype, device=q.device)  # (..., 1, d)
    out = torch.empty((*lead, n, d_v), dtype=q.dtype, device=q.device)
    for c0 in range(0, n, chunk):
        c1 = min(c0 + chunk, n)
        qc, kc, vc = fq[..., c0:c1, :], fk[..., c0:c1, :], v[..., c0:c1, :]  # (..., c, d), (..., c, d), (..., c, d_v)
        inside = (qc @ kc.transpose(-2, -1)).tril()  # (..., c, c): this chunk's own keys, causally
        numerator = qc @ state + inside @ vc  # (..., c, d_v)
        denominator = (qc * z).sum(dim=-1, keepdim=True) + inside.sum(dim=-1, keepdim=True)  # (..., c, 1)
        out[..., c0:c1, :] = numerator / denominator
        state = state + kc.transpose(-2, -1) @ vc  # (..., d, d_v)
        z = z + kc.sum(dim=-2, keepdim=True)  # (..., 1, d)
    return out
