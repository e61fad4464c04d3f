"""Transformer building blocks: positional encodings, layer norm, feed-forward, encoder and decoder blocks.

All modules are batch first: sequences are ``(batch, length, d_model)``.
Masks are boolean with ``True`` = may attend (see ``helpers.attention``).
The blocks mirror ``nn.TransformerEncoderLayer`` / ``nn.TransformerDecoderLayer``
(post-LN with ``norm_first=False``, pre-LN with ``norm_first=True``) so their
weights can be copied one to one (``copy_encoder_block_to_torch``).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from helpers.attention import MultiHeadAttention, copy_mha_to_torch

__all__ = [
    "sinusoidal_positional_encoding",
    "SinusoidalPositionalEncoding",
    "LearnedPositionalEmbedding",
    "layer_norm",
    "FeedForward",
    "EncoderBlock",
    "DecoderBlock",
    "copy_encoder_block_to_torch",
    "copy_decoder_block_to_torch",
    "randomise_layer_norms",
    "shift_matrix",
    "batch_norm",
    "transformer_lr",
]


def sinusoidal_positional_encoding(max_len: int, d_model: int) -> Tensor:
    """The encoding of "Attention Is All You Need", ``(max_len, d_model)``.

    PE[pos, 2i] = sin(pos / 10000^(2i / d_model)), PE[pos, 2i+1] = cos(pos / 10000^(2i / d_model)),
    positions counted from 0, sines on even and cosines on odd features (interleaved).
    """
    if d_model % 2 != 0:
        raise ValueError(f"d_model must be even, got {d_model}")
    position = torch.arange(max_len, dtype=torch.float64)[:, None]  # (max_len, 1)
    two_i = torch.arange(0, d_model, 2, dtype=torch.float64)  # (d_model/2,)
    angle = position / 10000 ** (two_i / d_model)  # (max_len, d_model/2)
    pe = torch.zeros(max_len, d_model, dtype=torch.float64)
    pe[:, 0::2] = torch.sin(angle)
    pe[:, 1::2] = torch.cos(angle)
    return pe.to(torch.get_default_dtype())


class SinusoidalPositionalEncoding(nn.Module):
    """Adds the fixed sinusoidal encoding to ``(batch, length, d_model)`` inputs."""

    pe: Tensor

    def __init__(self, d_model: int, max_len: int = 512) -> None:
        super().__init__()
        self.register_buffer("pe", sinusoidal_positional_encoding(max_len, d_model), persistent=False)

    def forward(self, x: Tensor) -> Tensor:
        return x + self.pe[: x.shape[1]]


class LearnedPositionalEmbedding(nn.Module):
    """Adds a learned embedding per position (``nn.Embedding(max_len, d_model)``)."""

    def __init__(self, d_model: int, max_len: int = 512) -> None:
        super().__init__()
        self.embedding = nn.Embedding(max_len, d_model)
        nn.init.normal_(self.embedding.weight, std=0.02)

    def forward(self, x: Tensor) -> Tensor:
        positions = torch.arange(x.shape[1], device=x.device)  # (length,)
        return x + self.embedding(positions)  # (batch, length, d_model)


def layer_norm(x: Tensor, gamma: Tensor, beta: Tensor, eps: float = 1e-5) -> Tensor:
    """Layer normalization over the last axis, as ``nn.LayerNorm``.

    Mean and *biased* variance over the features; ``eps`` inside the square root;
    then gain ``gamma`` and bias ``beta`` of shape ``(d,)``.
    """
    mean = x.mean(dim=-1, keepdim=True)
    var = x.var(dim=-1, keepdim=True, unbiased=False)
    return (x - mean) / torch.sqrt(var + eps) * gamma + beta


class FeedForward(nn.Module):
    """Position-wise feed-forward network: ``linear2(dropout(act(linear1(x))))``.

    ``d_ff`` defaults to ``4 * d_model``; ``activation`` is ``"relu"`` (the
    original paper) or ``"gelu"`` (GPT, ViT). Parameters:
    ``2 * d_model * d_ff + d_ff + d_model``.
    """

    def __init__(self, d_model: int, d_ff: int | None = None, dropout: float = 0.0, activation: str = "relu") -> None:
        super().__init__()
        d_ff = 4 * d_model if d_ff is None else d_ff
        if activation not in ("relu", "gelu"):
            raise ValueError(f"activation must be 'relu' or 'gelu', got {activation!r}")
        self.activation = activation
        self.linear1 = nn.Linear(d_model, d_ff)
        self.linear2 = nn.Linear(d_ff, d_model)
        self.dropout = nn.Dropout(dropout)

    def forward(self, x: Tensor) -> Tensor:
        act = F.relu if self.activation == "relu" else F.gelu
        return self.linear2(self.dropout(act(self.linear1(x))))


class EncoderBlock(nn.Module):
    """Self-attention and feed-forward, each with a residual and a layer norm.

    Post-LN (``norm_first=False``, the original paper)::

        x = norm1(x + dropout(self_attn(x)))
        x = norm2(x + dropout(ff(x)))

    Pre-LN (``norm_first=True``, GPT and ViT)::

        x = x + dropout(self_attn(norm1(x)))
        x = x + dropout(ff(norm2(x)))

    ``forward(x, mask=None)``: x ``(batch, n, d_model)`` -> ``(batch, n, d_model)``.
    Set ``keep_weights = True`` to keep the last attention weights in
    ``attn_weights`` ``(batch, heads, n, n)`` for plots.
    """

    def __init__(
        self,
        d_model: int,
        num_heads: int,
        d_ff: int | None = None,
        dropout: float = 0.0,
        norm_first: bool = False,
        activation: str = "relu",
    ) -> None:
        super().__init__()
        self.norm_first = norm_first
        self.self_attn = MultiHeadAttention(d_model, num_heads)
        self.ff = FeedForward(d_model, d_ff, dropout, activation)
        self.norm1 = nn.LayerNorm(d_model)
        self.norm2 = nn.LayerNorm(d_model)
        self.dropout1 = nn.Dropout(dropout)
        self.dropout2 = nn.Dropout(dropout)
        self.keep_weights = False
        self.attn_weights: Tensor | None = None

    def _self_attention(self, x: Tensor, mask: Tensor | None) -> Tensor:
        out, weights = self.self_attn(x, x, x, mask, need_weights=self.keep_weights)
        self.attn_weights = weights.detach() if weights is not None else None
        return self.dropout1(out)

    def forward(self, x: Tensor, mask: Tensor | None = None) -> Tensor:
        if self.norm_first:
            x = x + self._self_attention(self.norm1(x), mask)
            return x + self.dropout2(self.ff(self.norm2(x)))
        x = self.norm1(x + self._self_attention(x, mask))
        return self.norm2(x + self.dropout2(self.ff(x)))


class DecoderBlock(nn.Module):
    """Masked self-attention, cross-attention over the encoder output, feed-forward.

    Each sub-layer has a residual and a layer norm (post-LN or pre-LN as in
    ``EncoderBlock``). ``forward(x, memory, tgt_mask=None, memory_mask=None)``:
    x ``(batch, n, d_model)``, memory ``(batch, m, d_model)``; ``tgt_mask``
    ``(n, n)`` is usually ``causal_mask(n)``; returns ``(batch, n, d_model)``.
    """

    def __init__(
        self,
        d_model: int,
        num_heads: int,
        d_ff: int | None = None,
        dropout: float = 0.0,
        norm_first: bool = False,
        activation: str = "relu",
    ) -> None:
        super().__init__()
        self.norm_first = norm_first
        self.self_attn = MultiHeadAttention(d_model, num_heads)
        self.cross_attn = MultiHeadAttention(d_model, num_heads)
        self.ff = FeedForward(d_model, d_ff, dropout, activation)
        self.norm1 = nn.LayerNorm(d_model)
        self.norm2 = nn.LayerNorm(d_model)
        self.norm3 = nn.LayerNorm(d_model)
        self.dropout1 = nn.Dropout(dropout)
        self.dropout2 = nn.Dropout(dropout)
        self.dropout3 = nn.Dropout(dropout)

    def forward(self, x: Tensor, memory: Tensor, tgt_mask: Tensor | None = None, memory_mask: Tensor | None = None) -> Tensor:
        def self_block(y: Tensor) -> Tensor:
            return self.dropout1(self.self_attn(y, y, y, tgt_mask, need_weights=False)[0])

        def cross_block(y: Tensor) -> Tensor:
            return self.dropout2(self.cross_attn(y, memory, memory, memory_mask, need_weights=False)[0])

        if self.norm_first:
            x = x + self_block(self.norm1(x))
            x = x + cross_block(self.norm2(x))
            return x + self.dropout3(self.ff(self.norm3(x)))
        x = self.norm1(x + self_block(x))
        x = self.norm2(x + cross_block(x))
        return self.norm3(x + self.dropout3(self.ff(x)))


def _copy_common(ours: nn.Module, theirs: nn.Module, norms: int) -> None:
    with torch.no_grad():
        theirs.linear1.weight.copy_(ours.ff.linear1.weight)
        theirs.linear1.bias.copy_(ours.ff.linear1.bias)
        theirs.linear2.weight.copy_(ours.ff.linear2.weight)
        theirs.linear2.bias.copy_(ours.ff.linear2.bias)
        for i in range(1, norms + 1):
            getattr(theirs, f"norm{i}").weight.copy_(getattr(ours, f"norm{i}").weight)
            getattr(theirs, f"norm{i}").bias.copy_(getattr(ours, f"norm{i}").bias)


def copy_encoder_block_to_torch(ours: EncoderBlock, theirs: nn.TransformerEncoderLayer) -> nn.TransformerEncoderLayer:
    """Copy an ``EncoderBlock``'s weights into a batch-first ``nn.TransformerEncoderLayer``."""
    copy_mha_to_torch(ours.self_attn, theirs.self_attn)
    _copy_common(ours, theirs, norms=2)
    return theirs


def copy_decoder_block_to_torch(ours: DecoderBlock, theirs: nn.TransformerDecoderLayer) -> nn.TransformerDecoderLayer:
    """Copy a ``DecoderBlock``'s weights into a batch-first ``nn.TransformerDecoderLayer``."""
    copy_mha_to_torch(ours.self_attn, theirs.self_attn)
    copy_mha_to_torch(ours.cross_attn, theirs.multihead_attn)
    _copy_common(ours, theirs, norms=3)
    return theirs


def randomise_layer_norms(module: nn.Module) -> nn.Module:
    """Set every LayerNorm's gain in U(0.5, 1.5) and bias in N(0, 0.3^2), in place.

    Fresh layer norms are (1, 0), which would hide a swapped or missing norm when
    comparing two implementations; randomised ones make it show. Uses torch's RNG.
    """
    with torch.no_grad():
        for norm in (m for m in module.modules() if isinstance(m, nn.LayerNorm)):
            norm.weight.uniform_(0.5, 1.5)
            norm.bias.normal_(0.0, 0.3)
    return module


def shift_matrix(k: int, d_model: int, *, dtype: torch.dtype = torch.float64, device: torch.device | str | None = None) -> Tensor:
    """The ``(d_model, d_model)`` matrix ``M_k`` with ``PE(p + k) = M_k @ PE(p)`` for the sinusoidal encoding.

    Block-diagonal: pair ``i`` (features ``2i``, ``2i + 1``) gets the 2 x 2 block
    ``[[cos k w_i, sin k w_i], [-sin k w_i, cos k w_i]]`` with ``w_i = 10000^(-2i / d_model)``.
    """
    if d_model % 2 != 0:
        raise ValueError(f"d_model must be even, got {d_model}")
    omegas = 10000 ** (-torch.arange(0, d_model, 2, dtype=torch.float64, device=device) / d_model)  # (d_model/2,)
    cos_k, sin_k = torch.cos(k * omegas), torch.sin(k * omegas)  # (d_model/2,) each
    idx = torch.arange(0, d_model, 2, device=device)  # (d_model/2,): the sine feature of each pair
    M = torch.zeros(d_model, d_model, dtype=torch.float64, device=device)
    M[idx, idx], M[idx, idx + 1] = cos_k, sin_k  # new sin = cos(k w) sin + sin(k w) cos
    M[idx + 1, idx], M[idx + 1, idx + 1] = -sin_k, cos_k  # new cos = -sin(k w) sin + cos(k w) cos
    return M.to(dtype)


def batch_norm(x: Tensor, eps: float = 1e-5) -> Tensor:
    """Batch normalization of ``(batch, tokens, features)`` in training mode, without gain and bias.

    One mean and one biased variance per *feature*, over the batch and the tokens (axes 0 and 1), as
    ``nn.BatchNorm1d(features, affine=False)`` computes on ``x.transpose(1, 2)``; ``eps`` inside the square root.
    """
    if x.dim() != 3:
        raise ValueError(f"batch_norm expects (batch, tokens, features), got shape {tuple(x.shape)}")
    mean = x.mean(dim=(0, 1), keepdim=True)  # (1, 1, features)
    var = x.var(dim=(0, 1), keepdim=True, unbiased=False)  # (1, 1, features)
    return (x - mean) / torch.sqrt(var + eps)


def transformer_lr(step: int, d_model: int, warmup_steps: int) -> float:
    """The learning rate of "Attention Is All You Need" at ``step`` (counted from 1).

    ``d_model^-0.5 * min(step^-0.5, step * warmup_steps^-1.5)``: a linear rise for ``warmup_steps`` steps, to
    ``(d_model * warmup_steps)^-0.5``, then a decay like ``1 / sqrt(step)``.
    """
    if step < 1:
        raise ValueError(f"transformer_lr counts steps from 1, got step={step}")
    return d_model**-0.5 * min(step**-0.5, step * warmup_steps**-1.5)
