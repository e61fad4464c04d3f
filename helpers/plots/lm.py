"""Figures of notebook 11: validation loss against the count baselines, loss by position, time per generated token.

Import this module by its full path (``import helpers.plots.lm as lm_plots``).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

import matplotlib.pyplot as plt
import numpy as np
import seaborn as sns
from matplotlib.figure import Figure

__all__ = ["loss_curves", "loss_by_position_plot", "decode_time_plot"]


def loss_curves(histories: Mapping[str, object], baselines: Mapping[str, float], title: str = "") -> Figure:
    """Validation loss (nats per character) against the training step for each model (``LMHistory``), with the
    loss of each baseline (name -> nats) as a horizontal line; a second axis on the right reads perplexity."""
    fig, ax = plt.subplots(figsize=(6.5, 3.8))
    palette = sns.color_palette(n_colors=max(3, len(histories)))
    for color, (name, hist) in zip(palette, histories.items(), strict=False):
        ax.plot(hist.steps, hist.val_loss, marker="o", color=color, label=name)  # type: ignore[attr-defined]
    styles = [":", "--", "-."]
    for i, (name, loss) in enumerate(baselines.items()):
        ax.axhline(loss, color="grey", linestyle=styles[i % len(styles)], label=name)
    ax.set(xlabel="training step", ylabel="validation loss (nats per character)", title=title)
    low, high = ax.get_ylim()
    right = ax.twinx()
    right.set_ylim(low, high)
    ticks = [p for p in (4, 6, 8, 10, 15, 25, 50, 100) if low <= math.log(p) <= high]
    right.set_yticks([math.log(p) for p in ticks], [str(p) for p in ticks])
    right.set_ylabel("perplexity")
    ax.legend(fontsize="small", loc="center right", bbox_to_anchor=(0.88, 0.6))
    fig.tight_layout()
    return fig


def loss_by_position_plot(curves: Mapping[str, Sequence[float]], trained: int, bucket: int = 8) -> Figure:
    """Mean loss at each position (averaged over ``bucket`` neighbouring positions) for each model; the context the
    models were trained on (``trained`` positions) is shaded."""
    fig, ax = plt.subplots(figsize=(6.5, 3.5))
    for name, curve in curves.items():
        values = np.asarray(curve, dtype=float)
        n = len(values) // bucket * bucket
        means = values[:n].reshape(-1, bucket).mean(1)
        ax.plot(np.arange(len(means)) * bucket + bucket / 2, means, marker=".", label=name)
    ax.axvspan(0, trained, color="grey", alpha=0.15, label=f"trained context ({trained})")
    ax.set(xlabel="position in the window", ylabel="test loss (nats per character)", title="how far the models carry")
    ax.legend(fontsize="small")
    fig.tight_layout()
    return fig


def decode_time_plot(
    contexts: Sequence[int], cached: Sequence[float], uncached: Sequence[float], fit: tuple[float, float] | None = None
) -> Figure:
    """Milliseconds per generated token against the context t. Left, with the cache, on linear axes, with the
    least-squares line ``fit`` = (seconds at t = 0, seconds per cached position); right, with and without the cache
    (``uncached`` covers the first contexts only) on logarithmic axes."""
    fig, (left, right) = plt.subplots(1, 2, figsize=(10, 3.6))
    ms_cached = [1000 * s for s in cached]
    left.plot(contexts, ms_cached, marker="o", label="with the KV cache")
    if fit is not None:
        xs = np.linspace(0, max(contexts), 50)
        left.plot(xs, 1000 * (fit[0] + fit[1] * xs), color="grey", linestyle=":", label="a + b t (least squares)")
    left.set(xlabel="context t (cached positions)", ylabel="ms per generated token", title="with the cache: linear in t")
    left.set_ylim(bottom=0)
    left.legend(fontsize="small")
    right.loglog(contexts, ms_cached, marker="o", label="with the KV cache")
    right.loglog(contexts[: len(uncached)], [1000 * s for s in uncached], marker="o", label="without (the whole sequence)")
    right.set(xlabel="context t (log scale)", ylabel="ms per generated token (log scale)", title="with and without the cache")
    right.legend(fontsize="small")
    fig.tight_layout()
    return fig
