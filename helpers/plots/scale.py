"""Figures of notebook 12 (attention at scale): the tiles of FlashAttention, and costs against sequence length.

Imported by its full path (``import helpers.plots.scale as scale_plots``).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

import matplotlib.pyplot as plt
import numpy as np
from matplotlib.colors import ListedColormap
from matplotlib.patches import Patch

__all__ = ["tile_map", "cost_curves"]


def tile_map(n: int, block_q: int, block_k: int, causal: bool = True, ax: plt.Axes | None = None) -> plt.Axes:
    """The (query block, key block) tiles of an ``(n, n)`` score matrix: skipped, computed whole, computed with a mask."""
    rows, cols = math.ceil(n / block_q), math.ceil(n / block_k)
    kinds = np.zeros((rows, cols))
    for r in range(rows):
        i0, i1 = r * block_q, min((r + 1) * block_q, n)
        for c in range(cols):
            j0, j1 = c * block_k, min((c + 1) * block_k, n)
            if not causal or j1 - 1 <= i0:
                kinds[r, c] = 1  # every key before every query: computed, no mask
            elif j0 < i1:
                kinds[r, c] = 2  # crosses the diagonal: computed with the mask
    if ax is None:
        _, ax = plt.subplots(figsize=(4.2, 4.2))
    colours = ["#f0f0f0", "#4c72b0", "#dd8452"]
    ax.imshow(kinds, cmap=ListedColormap(colours), vmin=0, vmax=2, extent=(0, n, n, 0), interpolation="nearest")
    for r in range(1, rows):
        ax.axhline(r * block_q, color="white", linewidth=0.6)
    for c in range(1, cols):
        ax.axvline(c * block_k, color="white", linewidth=0.6)
    ax.set(xlabel="key position", ylabel="query position", title=f"n = {n:,}, blocks {block_q} x {block_k}")
    ax.grid(False)
    labels = ["skipped", "computed", "computed, masked"]
    ax.legend(
        handles=[Patch(color=c, label=label) for c, label in zip(colours, labels, strict=True)],
        loc="upper right",
        fontsize=8,
        framealpha=0.9,
    )
    return ax


def cost_curves(
    sizes: Sequence[int],
    curves: Mapping[str, Sequence[float]],
    ylabel: str,
    title: str,
    ax: plt.Axes | None = None,
    reference: tuple[str, Sequence[float]] | None = None,
) -> plt.Axes:
    """Costs (bytes, seconds) against the sequence length, log-log, one line per method; ``reference`` dashed."""
    if ax is None:
        _, ax = plt.subplots(figsize=(5.5, 3.6))
    for label, values in curves.items():
        ax.plot(sizes, values, marker="o", label=label)
    if reference is not None:
        ax.plot(sizes, reference[1], linestyle="--", color="grey", label=reference[0])
    ax.set(xscale="log", yscale="log", xlabel="sequence length n", ylabel=ylabel, title=title)
    ax.set_xticks(list(sizes), [f"{s:,}" for s in sizes])
    ax.minorticks_off()
    ax.legend(fontsize=8)
    return ax
