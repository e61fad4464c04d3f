"""Notebook 07: a transformer classifier for 1-D signals, and its MLP, CNN and GRU baselines.

Every model maps a batch of signals ``(batch, length)`` to class logits
``(batch, num_classes)``, so all of them train with the same
``helpers.training.fit`` loop.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import Tensor, nn

from helpers.blocks import EncoderBlock

__all__ = [
    "num_patches",
    "PatchEmbedding",
    "TransformerClassifier",
    "MLPClassifier",
    "CNNClassifier",
    "GRUClassifier",
    "attention_summary",
]


def num_patches(length: int, patch_size: int, stride: int) -> int:
    """How many windows of ``patch_size`` fit in ``length`` samples with step ``stride``."""
    if patch_size > length:
        raise ValueError(f"patch_size={patch_size} is longer than the signal ({length})")
    return (length - patch_size) // stride + 1


class PatchEmbedding(nn.Module):
    """Cut a signal into overlapping patches and project each to ``d_model``.

    ``forward(x)``: x ``(batch, length)`` -> tokens ``(batch, num_patches, d_model)``
    where patch ``i`` holds samples ``x[:, i*stride : i*stride + patch_size]``
    (``x.unfold(1, patch_size, stride)``) and ``proj`` is ``nn.Linear(patch_size, d_model)``.
    """

    def __init__(self, patch_size: int, stride: int, d_model: int) -> None:
        super().__init__()
        self.patch_size = patch_size
        self.stride = stride
        self.proj = nn.Linear(patch_size, d_model)

    def forward(self, x: Tensor) -> Tensor:
        patches = x.unfold(1, self.patch_size, self.stride)  # (batch, num_patches, patch_size)
        return self.proj(patches)  # (batch, num_patches, d_model)


class TransformerClassifier(nn.Module):
    """Patches -> linear embedding + learned positions -> encoder blocks -> pooled token -> linear head.

    ``pooling="cls"`` prepends a learned class token and classifies from its
    final state; ``pooling="mean"`` averages the patch tokens. The blocks are
    ``helpers.blocks.EncoderBlock`` (pre-LN by default, with a final layer norm).
    The defaults are notebook 07's MNIST-1D model: patches 8 wide with stride 2
    (17 tokens), width 32, 2 heads, 2 blocks, ``d_ff`` 64, no dropout, mean pooling (chosen on the validation
    split: ``benchmarks/search_classifier.py``; at the same training time, 2 blocks for 40 epochs beat 3 blocks
    for 27).

    ``patch_embedding(patch_size, stride, d_model)`` builds the patch embedding
    (default ``PatchEmbedding``); the notebook passes the student's class. It
    is built first, as here, so a class that creates the same ``nn.Linear``
    draws the same initial weights.

    ``forward(x)``: x ``(batch, length)`` -> logits ``(batch, num_classes)``.
    """

    def __init__(
        self,
        length: int = 40,
        num_classes: int = 10,
        patch_size: int = 8,
        stride: int = 2,
        d_model: int = 32,
        num_heads: int = 2,
        num_layers: int = 2,
        d_ff: int | None = 64,
        dropout: float = 0.0,
        pooling: str = "mean",
        norm_first: bool = True,
        patch_embedding: Callable[[int, int, int], nn.Module] = PatchEmbedding,
    ) -> None:
        super().__init__()
        if pooling not in ("cls", "mean"):
            raise ValueError(f"pooling must be 'cls' or 'mean', got {pooling!r}")
        self.pooling = pooling
        self.num_patches = num_patches(length, patch_size, stride)
        self.patch_embed = patch_embedding(patch_size, stride, d_model)
        n_tokens = self.num_patches + (1 if pooling == "cls" else 0)
        self.cls_token = nn.Parameter(torch.zeros(1, 1, d_model)) if pooling == "cls" else None
        self.pos_embed = nn.Parameter(torch.randn(1, n_tokens, d_model) * 0.02)
        self.blocks = nn.ModuleList(
            EncoderBlock(d_model, num_heads, d_ff, dropout, norm_first=norm_first, activation="gelu") for _ in range(num_layers)
        )
        self.norm = nn.LayerNorm(d_model) if norm_first else nn.Identity()
        self.head = nn.Linear(d_model, num_classes)

    def tokens(self, x: Tensor) -> Tensor:
        """Embedded tokens before the blocks: ``(batch, length)`` -> ``(batch, n_tokens, d_model)``."""
        tokens = self.patch_embed(x)  # (batch, num_patches, d_model)
        if self.cls_token is not None:
            cls = self.cls_token.expand(x.shape[0], -1, -1)  # (batch, 1, d_model)
            tokens = torch.cat([cls, tokens], dim=1)  # (batch, 1 + num_patches, d_model)
        return tokens + self.pos_embed  # (batch, n_tokens, d_model)

    def pool(self, h: Tensor) -> Tensor:
        """``(batch, n_tokens, d_model)`` -> ``(batch, d_model)``: the class token, or the mean."""
        return h[:, 0] if self.pooling == "cls" else h.mean(dim=1)

    def forward(self, x: Tensor) -> Tensor:
        h = self.tokens(x)  # (batch, n_tokens, d_model)
        for block in self.blocks:
            h = block(h)  # (batch, n_tokens, d_model)
        return self.head(self.pool(self.norm(h)))  # (batch, num_classes)

    def attention_maps(self, x: Tensor) -> list[Tensor]:
        """Run ``x`` and return each block's attention weights ``(batch, heads, n_tokens, n_tokens)``."""
        for block in self.blocks:
            block.keep_weights = True
        try:
            with torch.no_grad():
                self(x)
            return [block.attn_weights for block in self.blocks]
        finally:
            for block in self.blocks:
                block.keep_weights = False


class MLPClassifier(nn.Module):
    """The signal as one flat vector through fully connected layers: ``(batch, length)`` -> ``(batch, num_classes)``."""

    def __init__(self, length: int = 40, num_classes: int = 10, hidden: int = 100, num_layers: int = 2) -> None:
        super().__init__()
        layers: list[nn.Module] = []
        width = length
        for _ in range(num_layers):
            layers += [nn.Linear(width, hidden), nn.ReLU()]
            width = hidden
        layers.append(nn.Linear(width, num_classes))
        self.net = nn.Sequential(*layers)

    def forward(self, x: Tensor) -> Tensor:
        return self.net(x)


class CNNClassifier(nn.Module):
    """Three 1-D convolutions (kernel 5, stride 2, ReLU), then a linear layer over the flattened maps.

    The architecture of the MNIST-1D paper's CNN baseline: ``(batch, length)`` -> ``(batch, num_classes)``.
    """

    def __init__(self, length: int = 40, num_classes: int = 10, channels: int = 25) -> None:
        super().__init__()
        self.convs = nn.Sequential(
            nn.Conv1d(1, channels, 5, stride=2, padding=1),
            nn.ReLU(),
            nn.Conv1d(channels, channels, 3, stride=2, padding=1),
            nn.ReLU(),
            nn.Conv1d(channels, channels, 3, stride=2, padding=1),
            nn.ReLU(),
        )
        with torch.no_grad():
            flat = self.convs(torch.zeros(1, 1, length)).numel()
        self.head = nn.Linear(flat, num_classes)

    def forward(self, x: Tensor) -> Tensor:
        h = self.convs(x.unsqueeze(1))  # (batch, channels, length / 8)
        return self.head(h.flatten(1))  # (batch, num_classes)


class GRUClassifier(nn.Module):
    """A GRU reads the signal one sample at a time; its last hidden state is classified.

    ``(batch, length)`` -> ``(batch, num_classes)``.
    """

    def __init__(self, num_classes: int = 10, hidden: int = 32, num_layers: int = 1) -> None:
        super().__init__()
        self.gru = nn.GRU(1, hidden, num_layers=num_layers, batch_first=True)
        self.head = nn.Linear(hidden, num_classes)

    def forward(self, x: Tensor) -> Tensor:
        _, h_last = self.gru(x.unsqueeze(-1))  # h_last (num_layers, batch, hidden)
        return self.head(h_last[-1])  # (batch, num_classes)


def attention_summary(weights: Tensor) -> tuple[Tensor, Tensor]:
    """What a block's attention maps say, as two numbers per example (notebook 07, Exercise 7.5's reference).

    ``weights`` ``(batch, heads, n, n)`` (rows: queries, columns: keys; each row sums to 1) ->

    - ``received`` ``(batch, n)``: the attention each key receives, averaged over the heads and the queries (it
      sums to 1 over the keys);
    - ``spread`` ``(batch,)``: how far a query's row (averaged over the heads) is from the average row
      ``received``, as a total variation distance (half the sum of absolute differences, between 0 and 1),
      averaged over the queries: 0 when every query attends alike, so that the maps are made of columns.
    """
    if not isinstance(weights, Tensor) or weights.dim() != 4 or weights.shape[-1] != weights.shape[-2]:
        shape = tuple(weights.shape) if isinstance(weights, Tensor) else type(weights).__name__
        raise ValueError(f"attention_summary expects weights of shape (batch, heads, n, n), got {shape}")
    rows = weights.mean(dim=1)  # (batch, n, n): averaged over the heads
    received = rows.mean(dim=1)  # (batch, n): each key's column, averaged over the queries
    spread = 0.5 * (rows - received[:, None, :]).abs().sum(-1).mean(-1)  # (batch,)
    return received, spread
