"""Figures of notebook 13 (induction heads): attention patterns with token labels, per-head results over seeds as
bars, and the circuits read from the weights as heatmaps.

Imported by its full path (``import helpers.plots.induction as induction_plots``); each function returns the figure,
call ``plt.show()`` after it.
"""

from __future__ import annotations

import textwrap
from collections.abc import Mapping, Sequence

import matplotlib.pyplot as plt
import numpy as np
from matplotlib.figure import Figure

from helpers.plots.core import to_numpy

__all__ = ["pattern_grid", "seed_bars", "circuit_heatmaps"]


def pattern_grid(
    patterns: Sequence[object],
    labels: Sequence[str],
    titles: Sequence[str],
    suptitle: str,
    vmax: float = 1.0,
) -> Figure:
    """Attention patterns ``(n, n)`` side by side, rows queries and columns keys, every position labelled with its
    token, one colour scale for all (its colorbar on the right)."""
    fig, axes = plt.subplots(1, len(patterns), figsize=(5.6 * len(patterns) + 1.0, 5.6), squeeze=False)
    image = None
    for ax, pattern, title in zip(axes[0], patterns, titles, strict=True):
        values = to_numpy(pattern)
        image = ax.imshow(values, cmap="viridis", vmin=0.0, vmax=vmax)
        ax.grid(False)
        ticks = np.arange(len(labels))
        ax.set_xticks(ticks, list(labels), rotation=90, fontsize=8)
        ax.set_yticks(ticks, list(labels), fontsize=8)
        ax.set(xlabel="key (attended to)", ylabel="query (attending)", title=title)
    fig.colorbar(image, ax=axes[0].tolist(), shrink=0.8, label="attention weight")
    fig.suptitle(suptitle)
    return fig


def seed_bars(
    data: Mapping[str, Mapping[str, Sequence[float]]],
    ylabel: str,
    title: str,
    baseline: float | None = None,
    baseline_label: str = "",
    ax: plt.Axes | None = None,
) -> Figure:
    """Grouped bars: ``data[series][category]`` is one value per seed; each bar is the mean over seeds, with every
    seed's value as a dot on it. Categories on the x axis, one colour per series; an optional horizontal baseline."""
    fig = ax.figure if ax is not None else plt.figure(figsize=(8.5, 3.6))
    ax = ax if ax is not None else fig.add_subplot()
    series = list(data)
    categories = list(dict.fromkeys(c for s in series for c in data[s]))
    width = 0.8 / len(series)
    colours = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    for k, name in enumerate(series):
        for i, category in enumerate(categories):
            values = np.asarray(data[name].get(category, []), dtype=float)
            if values.size == 0:
                continue
            x = i - 0.4 + width * (k + 0.5)
            ax.bar(x, values.mean(), width * 0.9, color=colours[k % len(colours)], label=name if i == 0 else None)
            ax.plot(np.full(values.size, x), values, "o", color="black", markersize=3)
    if baseline is not None:
        ax.axhline(baseline, color="grey", linestyle=":", label=baseline_label or None)
    ax.axhline(0.0, color="black", linewidth=0.8)
    ax.set_xticks(range(len(categories)), [textwrap.fill(c, 14) for c in categories])
    ax.set(ylabel=ylabel, title=title)
    if len(series) > 1 or baseline_label:
        ax.legend(fontsize="small", loc="best")
    fig.tight_layout()
    return fig


def circuit_heatmaps(
    matrices: Sequence[object], titles: Sequence[str], xlabel: str, ylabel: str, suptitle: str, cmap: str = "viridis"
) -> Figure:
    """Square matrices ``(k, k)`` (a slice of a circuit over token ids 0..k-1) side by side, each with its colorbar;
    ticks every 4 ids."""
    fig, axes = plt.subplots(1, len(matrices), figsize=(5.6 * len(matrices), 4.8), squeeze=False)
    for ax, matrix, title in zip(axes[0], matrices, titles, strict=True):
        values = to_numpy(matrix)
        image = ax.imshow(values, cmap=cmap)
        ax.grid(False)
        ticks = np.arange(0, values.shape[0], 4)
        ax.set_xticks(ticks, [str(t) for t in ticks])
        ax.set_yticks(ticks, [str(t) for t in ticks])
        ax.set(xlabel=xlabel, ylabel=ylabel, title=title)
        fig.colorbar(image, ax=ax, shrink=0.85)
    fig.suptitle(suptitle)
    fig.tight_layout()
    return fig
