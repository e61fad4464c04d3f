"""Figures of notebook 14 (a transformer written by hand): the residual stream's slots, the count table,
robustness curves and a training run from the hand-written weights.

Imported by its full path (``import helpers.plots.handwritten as hand_plots``); each function returns the figure,
call ``plt.show()`` after it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import matplotlib.pyplot as plt
import numpy as np
from matplotlib.colors import LogNorm
from matplotlib.figure import Figure

from helpers.handwritten.program import SLOT_WIDTHS, Layout
from helpers.plots.core import to_numpy

__all__ = ["residual_streams", "count_table", "robustness_curves", "fine_tune_curves"]


def _value_label(v: float) -> str:
    """A residual feature as text: an integer as is, a fraction with two decimals and no leading zero."""
    if abs(v - round(v)) < 5e-3:
        return str(int(round(v)))
    return f"{v:.2f}".replace("0.", ".", 1)


def residual_streams(
    streams: Sequence[object], layout: Layout, titles: Sequence[str], row_labels: Sequence[str] | None = None
) -> Figure:
    """One heatmap per residual stream ``(n, d_model)``, stacked: rows are positions, columns the features, grouped
    by slot (a line between slots, the slot's name below). The colour is on a log scale from 0.1 to 25 (the largest
    feature, ``pos2`` at position 5), one colorbar for all; every feature that is not 0 is written in its cell, and a
    feature within 1e-3 of 0 is left white."""
    arrays = [to_numpy(s) for s in streams]
    norm = LogNorm(vmin=0.1, vmax=25.0)
    cmap = plt.get_cmap("YlOrRd").copy()
    cmap.set_bad("white")
    cmap.set_under("#fff7bc")
    fig, axes = plt.subplots(len(arrays), 1, figsize=(12, 1.9 + 1.45 * len(arrays)), squeeze=False, layout="constrained")
    image = None
    for ax, values, title in zip(axes[:, 0], arrays, titles, strict=True):
        shown = np.ma.masked_where(np.abs(values) < 1e-3, values)
        image = ax.imshow(shown, cmap=cmap, norm=norm, aspect="auto", interpolation="nearest")
        ax.grid(False)
        for (r, c), v in np.ndenumerate(values):
            if abs(v) >= 1e-3:
                ax.text(c, r, _value_label(float(v)), ha="center", va="center", fontsize=6.5, color="white" if v > 3 else "black")
        for name in layout.order:
            ax.axvline(layout.slot(name).start - 0.5, color="black", lw=1.0)
        ax.set_yticks(range(values.shape[0]), list(row_labels) if row_labels is not None else range(values.shape[0]))
        ax.set_xticks([])
        ax.set_title(title, loc="left", fontsize="medium")
    bottom = axes[-1, 0]
    centres = [(layout.slot(name).start + layout.slot(name).stop - 1) / 2 for name in layout.order]
    labels = [name if SLOT_WIDTHS[name] == 1 else f"{name}\n({SLOT_WIDTHS[name]})" for name in layout.order]
    bottom.set_xticks(centres, labels, fontsize="small")
    for label, name in zip(bottom.get_xticklabels(), layout.order, strict=True):
        if SLOT_WIDTHS[name] == 1:  # a slot one feature wide: its name upright would run into its neighbours'
            label.set_rotation(90)
    fig.colorbar(
        image,
        ax=axes[:, 0].tolist(),
        shrink=0.9,
        pad=0.01,
        label="feature value (log scale)",
        ticks=[0.1, 0.2, 0.5, 1, 2, 5, 10, 25],
    )
    image.colorbar.ax.set_yticklabels(["0.1", "0.2", "0.5", "1", "2", "5", "10", "25"])
    return fig


def count_table(frac: object, outputs: object, values: object, thresholds: object) -> Figure:
    """The feed-forward layer as a lookup table: its ``count`` outputs ``(G, 6)`` against ``frac`` ``(G,)``, with the
    table's values (dotted) and thresholds (shaded: where the ramps rise)."""
    frac, outputs = to_numpy(frac), to_numpy(outputs)
    fig, ax = plt.subplots(figsize=(9, 3.4))
    for c in range(outputs.shape[1]):
        ax.plot(frac, outputs[:, c], label=f"count slot {c}")
    for c, v in enumerate(to_numpy(values)):
        ax.axvline(v, color="grey", ls=":", lw=1)
        ax.text(v, 1.08, f"1/{c + 1}", ha="center", fontsize="small")
    for t in to_numpy(thresholds):
        ax.axvspan(t - 0.005, t + 0.005, color="orange", alpha=0.4, lw=0)
    ax.set_xscale("log")
    ticks = [0.15, 0.2, 0.3, 0.5, 0.75, 1.0]
    ax.set_xticks(ticks, [f"{t:g}" for t in ticks])
    ax.minorticks_off()
    ax.set(xlabel="frac (the weight the selector gave to BOS, log scale)", ylabel="output", ylim=(-0.1, 1.2))
    ax.legend(loc="center left", bbox_to_anchor=(1.01, 0.5), fontsize="small")
    fig.tight_layout()
    return fig


def robustness_curves(
    scales: Sequence[float],
    by_scale: Mapping[str, Sequence[float]],
    sigmas: Sequence[float],
    by_noise: Mapping[str, object],
) -> Figure:
    """Left: the fraction of sequences right against the selector scale. Right: against the relative noise on every
    weight (mean over seeds, the seeds as dots)."""
    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 3.8))
    for name, accuracy in by_scale.items():
        left.plot(scales, 100 * np.asarray(accuracy), marker="o", label=name)
    left.set(xlabel="scale (score gap of the selectors)", ylabel="sequences exactly right (%)", xscale="log")
    left.set_title("shrinking the scale")
    for name, runs in by_noise.items():
        runs = 100 * to_numpy(runs)  # (len(sigmas), seeds)
        line = right.plot(sigmas, runs.mean(1), marker="o", label=name)[0]
        for j in range(runs.shape[1]):
            right.scatter(sigmas, runs[:, j], color=line.get_color(), s=10, alpha=0.5)
    right.set(xlabel="relative noise sigma on every weight", ylabel="sequences exactly right (%)", xscale="log")
    right.set_title("noisy weights (3 seeds)")
    for ax in (left, right):
        ax.set_ylim(-3, 103)
        ax.legend(fontsize="small")
    fig.tight_layout()
    return fig


def fine_tune_curves(histories: Mapping[str, Mapping[str, Sequence[float]]], total: int, title: str = "") -> Figure:
    """Left: the loss on the scored sequences against the step. Right: the sequences exactly right (of ``total``)."""
    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 3.6))
    for name, history in histories.items():
        left.plot(history["step"], history["domain_loss"], marker="o", label=name)
        right.plot(history["step"], 100 * np.asarray(history["correct"]) / total, marker="o", label=name)
    left.set(xlabel="training step", ylabel="cross-entropy (nats)", title="loss on the scored sequences")
    right.set(xlabel="training step", ylabel="sequences exactly right (%)", title="exactness", ylim=(-3, 103))
    for ax in (left, right):
        ax.legend(fontsize="small")
    if title:
        fig.suptitle(title)
    fig.tight_layout()
    return fig
