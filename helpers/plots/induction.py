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

__all__ = ["pattern_grid", "seed_bars", "circuit_heatmaps", "formation_curves", "loss_by_position"]


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
    matrices: Sequence[object],
    titles: Sequence[str],
    xlabel: str,
    ylabel: str,
    suptitle: str,
    cmap: str = "RdBu_r",
    label: str = "score",
) -> Figure:
    """Square matrices ``(k, k)`` (a slice of a circuit over token ids 0..k-1) side by side on one colour scale,
    symmetric around 0, with one colorbar labelled ``label``; ticks every 4 ids."""
    arrays = [to_numpy(m) for m in matrices]
    limit = max(float(np.abs(a).max()) for a in arrays)
    fig, axes = plt.subplots(1, len(arrays), figsize=(5.0 * len(arrays) + 1.4, 4.8), squeeze=False, layout="constrained")
    image = None
    for ax, values, title in zip(axes[0], arrays, titles, strict=True):
        image = ax.imshow(values, cmap=cmap, vmin=-limit, vmax=limit)
        ax.grid(False)
        ticks = np.arange(0, values.shape[0], 4)
        ax.set_xticks(ticks, [str(t) for t in ticks])
        ax.set_yticks(ticks, [str(t) for t in ticks])
        ax.set(xlabel=xlabel, ylabel=ylabel, title=title)
    fig.colorbar(image, ax=axes[0].tolist(), shrink=0.85, label=label)
    fig.suptitle(suptitle)
    return fig


def formation_curves(
    histories: Mapping[str, object],
    prev_heads: Mapping[str, str],
    baseline: float,
    control: object | None = None,
    title: str = "",
) -> Figure:
    """Top: the repeated-half validation loss of each run (``histories[label]``, an ``InductionHistory`` recorded with
    ``track_heads=True``) and of the ``control``; bottom, on the same steps: each run's previous-token score of its
    previous-token head (``prev_heads[label]``, e.g. ``"L0H1"``, solid) and the induction score of its layer-1 head
    (dashed), one colour per run. ``baseline``: ln V, drawn dotted on the loss."""
    fig, (top, bottom) = plt.subplots(2, 1, figsize=(9, 6.2), sharex=True, gridspec_kw={"height_ratios": [1.1, 1]})
    colours = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    for k, (label, hist) in enumerate(histories.items()):
        colour = colours[k % len(colours)]
        top.plot(hist.steps, hist.val_loss, color=colour, label=label)
        bottom.plot(hist.steps, hist.prev_score[prev_heads[label]], color=colour, label=f"{label}: previous-token score")
        bottom.plot(hist.steps, hist.induction_score["L1H0"], color=colour, linestyle="--", label=f"{label}: induction score")
    if control is not None:
        top.plot(control.steps, control.val_loss, color="black", linestyle="--", label="1 layer (control)")
    top.axhline(baseline, color="grey", linestyle=":", label="ln V (uniform guess)")
    top.set(ylabel="repeated-half loss (nats)", title=title)
    top.legend(fontsize="small", loc="upper left", bbox_to_anchor=(1.01, 1))
    bottom.set(
        xlabel="training step",
        ylabel="score on validation sequences",
        ylim=(-0.03, 1.03),
        title="solid: the previous-token head's previous-token score; dashed: the layer-1 head's induction score",
    )
    bottom.title.set_fontsize("small")
    bottom.legend(fontsize="x-small", loc="upper left", bbox_to_anchor=(1.01, 1))
    fig.tight_layout()
    return fig


def loss_by_position(losses: Mapping[str, object], period: int, baseline: float, title: str = "") -> Figure:
    """The mean loss of each next-token prediction along the sequence, ``losses[label]`` ``(n - 1,)`` (target ``t``
    is token ``t``, predicted at position ``t - 1``), with the second copy shaded and ``baseline`` (ln V) dotted."""
    fig, ax = plt.subplots(figsize=(9, 3.4))
    n = None
    for label, values in losses.items():
        values = to_numpy(values)
        n = values.shape[0] + 1
        ax.plot(np.arange(1, n), values, marker="o", markersize=3, label=label)
    ax.axvspan(n - period - 0.5, n - 0.5, color="orange", alpha=0.15, lw=0, label="second copy")
    ax.axhline(baseline, color="grey", linestyle=":", label="ln V (uniform guess)")
    ax.set(xlabel="position of the predicted token", ylabel="mean loss (nats)", title=title, xlim=(0.5, n - 0.5))
    ax.legend(fontsize="small", loc="upper left", bbox_to_anchor=(1.01, 1))
    fig.tight_layout()
    return fig
