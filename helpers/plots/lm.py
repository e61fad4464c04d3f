"""Figures of notebook 11: validation loss against the count baselines, each upgrade of the block measured, RoPE's
scores, what each sampling rule samples from, loss by position, the mask of attention over a KV cache, time per
generated token.

Import this module by its full path (``import helpers.plots.lm as lm_plots``).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

import matplotlib
import matplotlib.pyplot as plt
import numpy as np
import seaborn as sns
from matplotlib.figure import Figure
from matplotlib.ticker import NullLocator

__all__ = [
    "loss_curves",
    "upgrades_plot",
    "rope_scores_plot",
    "sampling_rules_plot",
    "loss_by_position_plot",
    "decode_time_plot",
    "cached_mask_plot",
]


def loss_curves(
    histories: Mapping[str, object],
    baselines: Mapping[str, float],
    title: str = "",
    ylabel: str = "validation loss (nats per character)",
) -> Figure:
    """Validation loss (nats per character) against the training step for each model (``LMHistory``), with the
    loss of each baseline (name -> nats) as a horizontal line; a second axis on the right reads perplexity."""
    fig, ax = plt.subplots(figsize=(6.5, 3.8))
    palette = sns.color_palette(n_colors=max(3, len(histories)))
    for color, (name, hist) in zip(palette, histories.items(), strict=False):
        ax.plot(hist.steps, hist.val_loss, marker="o", color=color, label=name)  # type: ignore[attr-defined]
    styles = [":", "--", "-."]
    for i, (name, loss) in enumerate(baselines.items()):
        ax.axhline(loss, color="grey", linestyle=styles[i % len(styles)], label=name)
    ax.set(xlabel="training step", ylabel=ylabel, title=title)
    low, high = ax.get_ylim()
    right = ax.twinx()
    right.set_ylim(low, high)
    ticks = [p for p in (4, 6, 8, 10, 15, 25, 50, 100) if low <= math.log(p) <= high]
    right.set_yticks([math.log(p) for p in ticks], [str(p) for p in ticks])
    right.set_ylabel("perplexity")
    ax.legend(fontsize="small", loc="center right", bbox_to_anchor=(0.88, 0.6))
    fig.tight_layout()
    return fig


def loss_by_position_plot(
    curves: Mapping[str, Sequence[float]], trained: int, bucket: int = 8, title: str = "how far the models carry"
) -> Figure:
    """Mean loss at each position (averaged over ``bucket`` neighbouring positions, as the y label says) for each
    model; the context the models were trained on (``trained`` positions) is shaded."""
    fig, ax = plt.subplots(figsize=(6.5, 3.5))
    for name, curve in curves.items():
        values = np.asarray(curve, dtype=float)
        n = len(values) // bucket * bucket
        means = values[:n].reshape(-1, bucket).mean(1)
        ax.plot(np.arange(len(means)) * bucket + bucket / 2, means, marker=".", label=name)
    ax.axvspan(0, trained, color="grey", alpha=0.15, label=f"trained context ({trained})")
    ylabel = "test loss (nats per character)" + (f"\nmean over {bucket} positions" if bucket > 1 else "")
    ax.set(xlabel="position in the window", ylabel=ylabel, title=title)
    ax.legend(fontsize="small")
    fig.tight_layout()
    return fig


def decode_time_plot(
    contexts: Sequence[int],
    cached: Sequence[float],
    uncached: Sequence[float],
    fit: tuple[float, float] | None = None,
    ylabel: str = "ms per generated token",
) -> Figure:
    """Milliseconds per generated token against the context t. Left, with the cache, on linear axes, with the
    least-squares line ``fit`` = (seconds at t = 0, seconds per cached position); right, with and without the cache
    (``uncached`` covers the first contexts only) on logarithmic axes. ``ylabel`` names the clock and the device."""
    fig, (left, right) = plt.subplots(1, 2, figsize=(10, 3.6))
    ms_cached = [1000 * s for s in cached]
    left.plot(contexts, ms_cached, marker="o", label="with the KV cache")
    if fit is not None:
        xs = np.linspace(0, max(contexts), 50)
        left.plot(xs, 1000 * (fit[0] + fit[1] * xs), color="grey", linestyle=":", label="a + b t (least squares)")
    left.set(xlabel="context t (cached positions)", ylabel=ylabel, title="with the cache: linear in t")
    left.set_ylim(bottom=0)
    left.legend(fontsize="small")
    right.loglog(contexts, ms_cached, marker="o", label="with the KV cache")
    right.loglog(contexts[: len(uncached)], [1000 * s for s in uncached], marker="o", label="without (the whole sequence)")
    right.set(xlabel="context t (log scale)", ylabel=f"{ylabel} (log scale)", title="with and without the cache")
    right.set_xticks(list(contexts), [f"{t:,}" for t in contexts])
    right.xaxis.set_minor_locator(NullLocator())
    low = min(ms_cached + [1000 * s for s in uncached])
    high = max(ms_cached + [1000 * s for s in uncached])
    ticks = [v for v in (0.1, 0.2, 0.5, 1, 2, 5, 10, 20, 50, 100, 200, 500, 1000) if low / 1.5 <= v <= high * 1.5]
    right.set_yticks(ticks, [f"{v:g}" for v in ticks])
    right.yaxis.set_minor_locator(NullLocator())
    right.legend(fontsize="small")
    fig.tight_layout()
    return fig


def upgrades_plot(
    measured: Mapping[str, Sequence[float]],
    yours: Mapping[str, float],
    baselines: Mapping[str, float] | None = None,
    title: str = "each upgrade, measured",
    labels: Mapping[str, str] | None = None,
) -> Figure:
    """Validation loss (nats per character) of each stage, from the 2017 block to the 2025 block: every run of
    ``measured`` (stage -> losses, one per seed and kernel family) a small dot, their median a bar, and this
    notebook's own runs (``yours``: stage -> loss, any subset of the stages) a large marker; ``baselines`` (name ->
    loss) as horizontal lines; ``labels`` (stage -> tick label) say what each stage changed."""
    stages = list(measured)
    fig, ax = plt.subplots(figsize=(8.5 if labels else 7.5, 4.2 if labels else 3.8))
    rng = np.random.default_rng(0)
    for i, stage in enumerate(stages):
        values = np.asarray(measured[stage], dtype=float)
        jitter = rng.uniform(-0.12, 0.12, len(values))
        ax.scatter(i + jitter, values, s=14, color="tab:blue", alpha=0.55, label="measured runs" if i == 0 else None)
        ax.hlines(
            np.median(values), i - 0.25, i + 0.25, color="tab:blue", linewidth=2.5, label="their median" if i == 0 else None
        )
    mine = [(stages.index(stage), loss) for stage, loss in yours.items() if stage in stages]
    if mine:
        xs, ys = zip(*mine, strict=True)
        ax.scatter(xs, ys, s=90, marker="*", color="tab:red", zorder=3, label="this notebook's run")
    styles = [":", "--", "-."]
    for i, (name, loss) in enumerate((baselines or {}).items()):
        ax.axhline(loss, color="grey", linestyle=styles[i % len(styles)], label=name)
    ax.set_xticks(range(len(stages)), [(labels or {}).get(stage, stage) for stage in stages])
    ax.set(xlabel="the block, one change at a time", ylabel="validation loss (nats per character)", title=title)
    ax.legend(fontsize="small", loc="upper right")
    fig.tight_layout()
    return fig


def rope_scores_plot(scores: object, offsets: Sequence[int] = (), title: str = "") -> Figure:
    """The score of a rotated query at position s (rows) against a rotated key at position t (columns), ``(n, n)``:
    with RoPE it is constant along every diagonal (it depends on s - t only). ``offsets`` marks diagonals s - t."""
    values = np.asarray(scores, dtype=float)
    n = values.shape[0]
    fig, ax = plt.subplots(figsize=(4.8, 4.0))
    image = ax.imshow(values, cmap="coolwarm", origin="upper")
    ax.grid(False)
    fig.colorbar(image, ax=ax, label="score q(s) . k(t)")
    for offset in offsets:
        t = np.arange(max(0, -offset), min(n, n - offset))
        ax.plot(t, t + offset, color="black", linewidth=0.8, linestyle="--")
    ax.set(xlabel="key position t", ylabel="query position s", title=title or "RoPE: the score depends on s - t only")
    fig.tight_layout()
    return fig


def sampling_rules_plot(probabilities: Mapping[str, Sequence[float]], title: str = "") -> Figure:
    """One panel per decoding rule (name -> the probability of each token after the rule), the tokens in the order of
    their logits; a dropped token (probability 0) shows as an empty slot marked with a cross."""
    names = list(probabilities)
    fig, axes = plt.subplots(1, len(names), figsize=(2.2 * len(names), 2.9), sharey=True)
    axes = np.atleast_1d(axes)
    for ax, name in zip(axes, names, strict=True):
        p = np.asarray(probabilities[name], dtype=float)
        tokens = np.arange(len(p))
        ax.bar(tokens, p, color=["tab:blue" if v > 0 else "lightgrey" for v in p])
        dropped = tokens[p == 0]
        ax.scatter(dropped, np.zeros(len(dropped)), marker="x", color="grey", zorder=3)
        ax.set_xticks(tokens)
        ax.set(title=name, xlabel="token (by logit)")
    axes[0].set_ylabel("probability")
    axes[0].set_ylim(0, 1)
    fig.suptitle(title or "what each rule samples from (x: dropped)")
    fig.tight_layout()
    return fig


def cached_mask_plot(n: int, m: int, title: str = "") -> Figure:
    """Which keys each of the last ``n`` of ``m`` positions sees (attention over a KV cache): query i is position
    ``m - n + i`` and sees keys 0 .. m - n + i, the "bottom-right" causal mask, ``(n, m)``."""
    if not 1 <= n <= m:
        raise ValueError(f"the queries are the last n of the m positions: need 1 <= n <= m, got n={n}, m={m}")
    visible = np.arange(m)[None, :] <= np.arange(m - n, m)[:, None]  # (n, m)
    fig, ax = plt.subplots(figsize=(0.75 * m + 2.2, 0.75 * n + 1.6))
    cmap = matplotlib.colors.ListedColormap(["whitesmoke", "tab:blue"])
    image = ax.imshow(visible, cmap=cmap, vmin=0, vmax=1)
    ax.grid(False)
    for i in range(n):
        for j in range(m):
            ax.text(
                j,
                i,
                "sees" if visible[i, j] else "-",
                ha="center",
                va="center",
                color="white" if visible[i, j] else "grey",
                fontsize="small",
            )
    bar = fig.colorbar(image, ax=ax, ticks=[0.25, 0.75], shrink=0.9)
    bar.ax.set_yticklabels(["hidden", "visible"])
    ax.set_xticks(range(m), [str(j) for j in range(m)])
    ax.set_yticks(range(n), [f"query {i}\n(position {m - n + i})" for i in range(n)])
    ax.set(xlabel="key position", title=title or f"the last {n} of {m} positions as queries:\nquery i sees keys 0 .. {m - n} + i")
    fig.tight_layout()
    return fig
