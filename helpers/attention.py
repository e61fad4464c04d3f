"""Attention: softmax, scaled dot-product attention, masks, multi-head attention.

Shapes follow PyTorch's batch-first convention:

- queries ``q``: ``(..., n, d_k)``  (n queries)
- keys    ``k``: ``(..., m, d_k)``  (m keys)
- values  ``v``: ``(..., m, d_v)``
- boolean ``mask``: broadcastable to ``(..., n, m)``, ``True`` = may attend
  (the convention of ``torch.nn.functional.scaled_dot_product_attention``).
  A mask of any other dtype (an additive 0/-inf float mask, a 0/1 integer mask)
  is rejected with a ``TypeError`` that says how to convert it, rather than
  silently reinterpreted.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor, nn

__all__ = [
    "softmax",
    "scaled_dot_product_attention",
    "causal_mask",
    "padding_mask",
    "MultiHeadAttention",
    "MultiplicativeAttention",
    "AdditiveAttention",
    "dot_product_scores",
    "copy_mha_to_torch",
    "split_heads",
    "merge_heads",
    "head_scores",
    "multi_head_columns",
    "qkv_projections",
    "score_matrix",
    "attention_column_layout",
    "mha_parameter_count",
    "attention_with_positions",
    "softargmax_attention",
    "softmax_backward",
    "require_bool_mask",
]


def require_bool_mask(mask: Tensor) -> Tensor:
    """Return ``mask`` if it is boolean (``True`` = may attend); otherwise raise a ``TypeError`` saying how to convert it."""
    if not isinstance(mask, Tensor):
        raise TypeError(f"mask should be a boolean tensor (True = may attend), got {type(mask).__name__}")
    if mask.dtype != torch.bool:
        kind = "an additive float mask? " if mask.is_floating_point() else ""
        raise TypeError(
            f"mask has dtype {mask.dtype} ({kind}this course's masks are boolean, True = may attend, the convention of "
            "F.scaled_dot_product_attention). Convert it: an additive mask (0 = may attend, -inf = blocked) with `mask == 0`; "
            "a 0/1 mask (1 = may attend) with `mask.bool()`; nn.MultiheadAttention's attn_mask (True = blocked) with `~mask`"
        )
    return mask


def softmax(x: Tensor, dim: int = -1) -> Tensor:
    """Numerically stable softmax along ``dim`` (same shape as ``x``).

    Subtracts the maximum along ``dim`` first, so ``exp`` never overflows;
    the result is unchanged because softmax is shift-invariant.
    A slice that is entirely ``-inf`` (every key masked) gives NaN, as in PyTorch.
    """
    x_max = x.amax(dim=dim, keepdim=True)
    x_max = torch.where(torch.isfinite(x_max), x_max, torch.zeros_like(x_max))
    exps = torch.exp(x - x_max)
    return exps / exps.sum(dim=dim, keepdim=True)


def scaled_dot_product_attention(q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None = None) -> tuple[Tensor, Tensor]:
    """softmax(q k^T / sqrt(d_k)) v, returning ``(out, weights)``.

    q ``(..., n, d_k)``, k ``(..., m, d_k)``, v ``(..., m, d_v)``,
    mask boolean broadcastable to ``(..., n, m)`` with ``True`` = may attend.
    Returns out ``(..., n, d_v)`` and weights ``(..., n, m)`` (each row sums to 1).
    """
    d_k = q.shape[-1]
    scores = q @ k.transpose(-2, -1) / math.sqrt(d_k)  # (..., n, m)
    if mask is not None:
        scores = scores.masked_fill(~require_bool_mask(mask), float("-inf"))
    weights = softmax(scores, dim=-1)  # (..., n, m)
    return weights @ v, weights  # (..., n, d_v), (..., n, m)


def qkv_projections(X, W_q, W_k, W_v):
    """Row layout projections ``(Q, K, V) = (X @ W_q, X @ W_k, X @ W_v)``.

    X ``(..., n, d_model)`` with one row per token; W_q, W_k ``(d_model, d_k)``,
    W_v ``(d_model, d_v)``. Returns Q, K ``(..., n, d_k)`` and V ``(..., n, d_v)``.
    Works for numpy arrays and torch tensors alike.
    """
    return X @ W_q, X @ W_k, X @ W_v


def score_matrix(Q, K, scale: bool = True):
    """``Q @ K^T``, divided by ``sqrt(d_k)`` when ``scale``.

    Q ``(..., n, d_k)``, K ``(..., m, d_k)`` -> scores ``(..., n, m)``; row i holds
    query i's dot products with every key. Works for numpy arrays and torch tensors.
    """
    scores = Q @ K.swapaxes(-2, -1)  # (..., n, m)
    return scores / math.sqrt(Q.shape[-1]) if scale else scores


def attention_column_layout(X: Tensor, W_q: Tensor, W_k: Tensor, W_v: Tensor) -> Tensor:
    """Attention with tokens as columns: X ``(d_model, n)``, W_q and W_k ``(d_k, d_model)``, W_v ``(d_v, d_model)``.

    Q = W_q X ``(d_k, n)``, K = W_k X ``(d_k, n)``, V = W_v X ``(d_v, n)``;
    A = softmax(K^T Q / sqrt(d_k)) over axis 0 (each column, one query, sums to 1) ``(n, n)``;
    returns H = V A ``(d_v, n)``.
    """
    Q, K, V = W_q @ X, W_k @ X, W_v @ X  # (d_k, n), (d_k, n), (d_v, n)
    A = torch.softmax(K.T @ Q / math.sqrt(Q.shape[0]), dim=0)  # (n keys, n queries)
    return V @ A  # (d_v, n)


def split_heads(x: Tensor, num_heads: int) -> Tensor:
    """``(batch, n, d_model)`` -> ``(batch, heads, n, d_k)``: view as (batch, n, heads, d_k), then transpose(1, 2)."""
    batch, n, d_model = x.shape
    return x.view(batch, n, num_heads, d_model // num_heads).transpose(1, 2)


def merge_heads(x: Tensor) -> Tensor:
    """``(batch, heads, n, d_k)`` -> ``(batch, n, heads * d_k)``: transpose back, then reshape."""
    batch, heads, n, d_k = x.shape
    return x.transpose(1, 2).reshape(batch, n, heads * d_k)


def head_scores(queries: Tensor, keys: Tensor, num_heads: int) -> Tensor:
    """Every head's scaled scores from un-split projections (notebook 04, exercise 4.1).

    ``queries`` ``(batch, n, d_model)``, ``keys`` ``(batch, m, d_model)`` -> ``(batch, heads, n, m)``:
    ``scores[b, h, i, j] = q_i^(h) . k_j^(h) / sqrt(d_k)`` with head ``h`` owning features ``h*d_k .. (h+1)*d_k - 1``.
    """
    d_k = queries.shape[-1] // num_heads
    q = queries.unflatten(-1, (num_heads, d_k))  # (batch, n, heads, d_k)
    k = keys.unflatten(-1, (num_heads, d_k))  # (batch, m, heads, d_k)
    return torch.einsum("bnhd,bmhd->bhnm", q, k) / math.sqrt(d_k)  # (batch, heads, n, m)


def multi_head_columns(X: Tensor, W_q: Tensor, W_k: Tensor, W_v: Tensor, W_o: Tensor, num_heads: int) -> Tensor:
    """Multi-head self-attention in the numerator (column) layout (notebook 04, exercise 4.3).

    Tokens are the columns of ``X`` ``(d_model, n)``; the ``W`` are ``(d_model, d_model)`` matrices acting on columns
    (``nn.Linear``'s ``(out, in)`` layout). ``H = W_o [V_1 softargmax(K_1^T Q_1 / sqrt(d_k)); ...]`` with the softmax
    over the keys (dim 0), -> ``(d_model, n)``.
    """
    d_k = X.shape[0] // num_heads
    heads = []
    for i in range(num_heads):
        rows = slice(i * d_k, (i + 1) * d_k)
        q_i, k_i, v_i = W_q[rows] @ X, W_k[rows] @ X, W_v[rows] @ X  # (d_k, n) each
        weights = torch.softmax(k_i.T @ q_i / math.sqrt(d_k), dim=0)  # (n keys, n queries): columns sum to 1
        heads.append(v_i @ weights)  # (d_k, n)
    return W_o @ torch.cat(heads, dim=0)  # (d_model, n)


def mha_parameter_count(d_model: int, num_heads: int, bias: bool = True) -> int:
    """Parameters of a multi-head attention layer: four (d_model, d_model) matrices, plus four bias vectors.

    The count does not depend on ``num_heads``: the heads split the d_model features, they do not add weights.
    """
    return 4 * d_model * d_model + (4 * d_model if bias else 0)


def attention_with_positions(X: Tensor, W_Q: Tensor, W_K: Tensor, W_V: Tensor) -> tuple[Tensor, Tensor]:
    """Single-head self-attention on ``[X | I_n]``: each token with a one-hot position appended.

    X ``(n, d)``; W_Q, W_K ``(d + n, d_k)``; W_V ``(d + n, d_v)``.
    Returns the output ``(n, d_v)`` and the weights ``(n, n)``.
    """
    n = X.shape[0]
    W_Q, W_K, W_V = (w.to(X.dtype) for w in (W_Q, W_K, W_V))  # weights of another float dtype follow X's
    X_pos = torch.cat([X, torch.eye(n, dtype=X.dtype, device=X.device)], dim=1)  # (n, d + n): content, then one-hot position
    Q, K, V = X_pos @ W_Q, X_pos @ W_K, X_pos @ W_V  # (n, d_k), (n, d_k), (n, d_v)
    weights = torch.softmax(Q @ K.T / math.sqrt(Q.shape[-1]), dim=-1)  # (n, n)
    return weights @ V, weights


def softargmax_attention(beta: float, K: Tensor, V: Tensor, Q: Tensor) -> tuple[Tensor, Tensor]:
    """Attention in the numerator layout (vectors as columns): ``H = V softargmax_beta(K^T Q)`` (notebook 03).

    K ``(..., d, m)`` holds the m keys as columns, V ``(..., d_v, m)`` their values, Q ``(..., d, n)`` the n queries;
    ``beta`` (the inverse temperature) multiplies the scores. Returns H ``(..., d_v, n)`` and the weights
    ``(..., m, n)``: column i holds query i's weights over the keys and sums to 1.
    """
    weights = torch.softmax(beta * (K.mT @ Q), dim=-2)  # (..., m, n): softmax over the keys, down each column
    return V @ weights, weights  # (..., d_v, n), (..., m, n)


def softmax_backward(a: Tensor, g: Tensor) -> Tensor:
    """The gradient with respect to the scores z of ``a = softmax(z)`` (last axis), given ``g = dL/da`` (notebook 03).

    The Jacobian of softmax is ``diag(a) - a a^T``; applied to g it gives ``a * (g - a . g)``. a, g ``(..., m)`` ->
    ``(..., m)``.
    """
    return a * (g - (a * g).sum(dim=-1, keepdim=True))


def causal_mask(n: int, device: torch.device | str | None = None) -> Tensor:
    """Boolean ``(n, n)`` look-ahead mask: ``True`` on and below the diagonal.

    Query i may attend to keys 0..i, never to a later position.
    """
    return torch.ones(n, n, dtype=torch.bool, device=device).tril()


def padding_mask(lengths: Tensor, max_len: int) -> Tensor:
    """Boolean ``(batch, 1, max_len)`` key mask from sequence lengths, ``True`` = real token.

    Broadcasts against scores ``(batch, n, max_len)``; add a head axis with
    ``.unsqueeze(1)`` for ``(batch, heads, n, max_len)``.
    """
    positions = torch.arange(max_len, device=lengths.device)  # (max_len,)
    return (positions[None, :] < lengths[:, None])[:, None, :]  # (batch, 1, max_len)


class MultiHeadAttention(nn.Module):
    """Multi-head attention, batch first, with heads packed in one projection each.

    ``MultiHeadAttention(d_model, num_heads)``; projections ``w_q``, ``w_k``,
    ``w_v``, ``w_o`` are ``nn.Linear(d_model, d_model)``; head size
    ``d_k = d_model // num_heads``.

    ``forward(query, key, value, mask=None, need_weights=True)``:
    query ``(batch, n, d_model)``, key and value ``(batch, m, d_model)``,
    mask boolean broadcastable to ``(batch, heads, n, m)`` (``True`` = may attend;
    a ``(n, m)`` or ``(batch, 1, m)`` mask is broadcast).
    Returns ``(out, weights)``: out ``(batch, n, d_model)``, weights
    ``(batch, heads, n, m)``. With ``need_weights=False`` the fused kernel
    ``F.scaled_dot_product_attention`` runs and weights is ``None``.
    """

    def __init__(self, d_model: int, num_heads: int, bias: bool = True, dropout: float = 0.0) -> None:
        super().__init__()
        if d_model % num_heads != 0:
            raise ValueError(f"d_model={d_model} is not divisible by num_heads={num_heads}")
        self.d_model = d_model
        self.num_heads = num_heads
        self.d_k = d_model // num_heads
        self.dropout = dropout
        self.w_q = nn.Linear(d_model, d_model, bias=bias)
        self.w_k = nn.Linear(d_model, d_model, bias=bias)
        self.w_v = nn.Linear(d_model, d_model, bias=bias)
        self.w_o = nn.Linear(d_model, d_model, bias=bias)

    def split_heads(self, x: Tensor) -> Tensor:
        """``(batch, len, d_model)`` -> ``(batch, heads, len, d_k)``: view, then transpose."""
        return split_heads(x, self.num_heads)

    def merge_heads(self, x: Tensor) -> Tensor:
        """``(batch, heads, len, d_k)`` -> ``(batch, len, d_model)``: transpose back, then reshape."""
        return merge_heads(x)

    def forward(
        self,
        query: Tensor,
        key: Tensor,
        value: Tensor,
        mask: Tensor | None = None,
        need_weights: bool = True,
    ) -> tuple[Tensor, Tensor | None]:
        q = self.split_heads(self.w_q(query))  # (batch, heads, n, d_k)
        k = self.split_heads(self.w_k(key))  # (batch, heads, m, d_k)
        v = self.split_heads(self.w_v(value))  # (batch, heads, m, d_k)
        if mask is not None:
            mask = require_bool_mask(mask)
            if mask.dim() == 3:  # (batch, n or 1, m) -> (batch, 1, n or 1, m)
                mask = mask.unsqueeze(1)
        dropout_p = self.dropout if self.training else 0.0
        if need_weights:
            out, weights = scaled_dot_product_attention(q, k, v, mask)  # (batch, heads, n, d_k), (batch, heads, n, m)
            if dropout_p > 0:
                out = F.dropout(weights, dropout_p) @ v
        else:
            out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=dropout_p)
            weights = None
        return self.w_o(self.merge_heads(out)), weights  # (batch, n, d_model)


def copy_mha_to_torch(ours: MultiHeadAttention, theirs: nn.MultiheadAttention) -> nn.MultiheadAttention:
    """Copy our ``w_q, w_k, w_v, w_o`` into ``nn.MultiheadAttention``'s packed layout.

    PyTorch stacks the three input projections row-wise in ``in_proj_weight``
    ``(3 * d_model, d_model)`` = [W_q; W_k; W_v] and keeps W_o in ``out_proj``.
    """
    if theirs.embed_dim != ours.d_model or theirs.num_heads != ours.num_heads:
        raise ValueError(
            f"shapes differ: ours d_model={ours.d_model}, heads={ours.num_heads}; "
            f"theirs embed_dim={theirs.embed_dim}, heads={theirs.num_heads}"
        )
    with torch.no_grad():
        theirs.in_proj_weight.copy_(torch.cat([ours.w_q.weight, ours.w_k.weight, ours.w_v.weight]))
        theirs.out_proj.weight.copy_(ours.w_o.weight)
        if theirs.in_proj_bias is not None:
            theirs.in_proj_bias.copy_(torch.cat([ours.w_q.bias, ours.w_k.bias, ours.w_v.bias]))
            theirs.out_proj.bias.copy_(ours.w_o.bias)
    return theirs


def dot_product_scores(s: Tensor, h: Tensor) -> Tensor:
    """Dot-product scores ``s^T h_i``: s ``(batch, d)``, h ``(batch, m, d)`` -> ``(batch, m)``."""
    return (h @ s.unsqueeze(-1)).squeeze(-1)


class MultiplicativeAttention(nn.Module):
    """Multiplicative (Luong "general") scores ``s^T W h_i``.

    ``forward(s, h)``: decoder state s ``(batch, d_s)``, encoder states
    h ``(batch, m, d_h)`` -> scores ``(batch, m)``. Parameters: ``d_s * d_h``.
    """

    def __init__(self, d_s: int, d_h: int) -> None:
        super().__init__()
        self.W = nn.Linear(d_h, d_s, bias=False)

    def forward(self, s: Tensor, h: Tensor) -> Tensor:
        return (self.W(h) @ s.unsqueeze(-1)).squeeze(-1)  # (batch, m)


class AdditiveAttention(nn.Module):
    """Additive (Bahdanau) scores ``v^T tanh(W1 h_i + W2 s)``.

    ``forward(s, h)``: s ``(batch, d_s)``, h ``(batch, m, d_h)`` -> scores ``(batch, m)``.
    Parameters: ``d_att * (d_h + d_s + 1)``.
    """

    def __init__(self, d_s: int, d_h: int, d_att: int) -> None:
        super().__init__()
        self.W1 = nn.Linear(d_h, d_att, bias=False)
        self.W2 = nn.Linear(d_s, d_att, bias=False)
        self.v = nn.Linear(d_att, 1, bias=False)

    def forward(self, s: Tensor, h: Tensor) -> Tensor:
        hidden = torch.tanh(self.W1(h) + self.W2(s).unsqueeze(1))  # (batch, m, d_att)
        return self.v(hidden).squeeze(-1)  # (batch, m)
