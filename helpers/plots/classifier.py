"""Figures of notebook 07: MNIST-1D examples, patches, the choice of learning rates, the results bar chart, attention
over a signal."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import matplotlib.pyplot as plt
import numpy as np
import seaborn as sns
from matplotlib.figure import Figure
from matplotlib.ticker import MaxNLocator

from helpers.plots.core import to_numpy

__all__ = [
    "signal_examples",
    "patch_windows",
    "augmented_signals",
    "lr_selection",
    "results_bars",
    "per_class_accuracy",
    "validation_accuracy_curves",
    "attention_over_signal",
]


def signal_examples(x: object, y: object, num_classes: int = 10, per_class: int = 3) -> Figure:
    """A grid with one panel per class, ``per_class`` example signals in each: x ``(n, length)``, y ``(n,)``."""
    x, y = to_numpy(x), to_numpy(y)
    ncols = 5
    nrows = -(-num_classes // ncols)
    fig, axes = plt.subplots(nrows, ncols, figsize=(2.3 * ncols, 1.9 * nrows), sharex=True, sharey=True, squeeze=False)
    for label, ax in enumerate(axes.flat):
        if label >= num_classes:
            ax.axis("off")
            continue
        for k, idx in enumerate(np.flatnonzero(y == label)[:per_class]):
            ax.plot(x[idx], lw=1.2, alpha=1.0 if k == 0 else 0.5)
        ax.set_title(f"class {label}")
    fig.supxlabel("position in the signal")
    fig.tight_layout()
    return fig


def patch_windows(signal: object, patch_size: int, stride: int, highlight: Sequence[int] = (0, 1, 2)) -> Figure:
    """A signal with the windows that become tokens: every window as a bar, a few highlighted."""
    s = to_numpy(signal)
    n = (len(s) - patch_size) // stride + 1
    fig, (ax_sig, ax_win) = plt.subplots(2, 1, figsize=(8, 3.6), sharex=True, gridspec_kw={"height_ratios": [2, 1.4]})
    ax_sig.plot(np.arange(len(s)), s, marker=".", color="black", lw=1)
    colors = sns.color_palette(n_colors=len(highlight))
    for color, i in zip(colors, highlight, strict=True):
        ax_sig.axvspan(i * stride - 0.5, i * stride + patch_size - 0.5, color=color, alpha=0.25)
    ax_sig.set(ylabel="value", title=f"{n} overlapping patches of {patch_size} samples, one every {stride}")
    for i in range(n):
        color = colors[list(highlight).index(i)] if i in highlight else "lightgrey"
        ax_win.barh(i, patch_size, left=i * stride - 0.5, color=color, height=0.8)
    ax_win.set(xlabel="position in the signal", ylabel="token", ylim=(n, -1))
    fig.tight_layout()
    return fig


def augmented_signals(signals: object, versions: object, labels: Sequence[int] | None = None) -> Figure:
    """One panel per signal: the signal (black) and random versions of it (thin, coloured) over the same axis.

    ``signals`` ``(k, length)``, ``versions`` ``(k, m, length)``: ``m`` versions of each signal.
    """
    s, v = to_numpy(signals), to_numpy(versions)
    k = len(s)
    fig, axes = plt.subplots(1, k, figsize=(3.4 * k, 2.6), sharey=True, squeeze=False)
    colors = sns.color_palette(n_colors=v.shape[1])
    for j, ax in enumerate(axes[0]):
        for m, color in enumerate(colors):
            ax.plot(v[j, m], color=color, lw=1, alpha=0.8)
        ax.plot(s[j], color="black", lw=1.8)
        ax.set(xlabel="position in the signal", title=f"class {labels[j]}" if labels is not None else None)
    fig.tight_layout()
    return fig


def lr_selection(runs: Mapping[str, Mapping[float, object]], chosen: Mapping[str, float], title: str | None = None) -> Figure:
    """One panel per model: the validation loss of each learning rate's run against the epoch, the chosen one bold.

    ``runs`` maps a model's name to ``{learning rate: History}`` (anything with a ``val_loss`` list); ``chosen`` maps
    the name to the learning rate its rule chose.
    """
    names = list(runs)
    fig, axes = plt.subplots(1, len(names), figsize=(3.2 * len(names), 3.0), squeeze=False)
    for ax, name in zip(axes[0], names, strict=True):
        colors = sns.color_palette(n_colors=max(3, len(runs[name])))
        for color, (lr, run) in zip(colors, runs[name].items(), strict=False):
            losses = np.asarray(run.val_loss, dtype=float)
            best = lr == chosen.get(name)
            ax.plot(
                np.arange(1, len(losses) + 1),
                losses,
                color=color,
                lw=2.4 if best else 1.2,
                ls="-" if best else "--",
                marker="o" if best else None,
                ms=3,
                label=f"lr {lr:g}" + (" (chosen)" if best else ""),
            )
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.set(xlabel="epoch", title=f"{name}: lr {chosen[name]:g} chosen" if name in chosen else name)
        ax.legend(fontsize="small")
    axes[0, 0].set_ylabel("validation loss")
    if title:
        fig.suptitle(title)
    fig.tight_layout()
    return fig


def results_bars(measured: Mapping[str, float], published: Mapping[str, float] | None = None, title: str | None = None) -> Figure:
    """Test accuracy (%) per model, measured next to published figures (``None`` where there is none)."""
    names = list(dict.fromkeys([*measured, *(published or {})]))
    pos = np.arange(len(names))
    fig, ax = plt.subplots(figsize=(8, 4))
    got = [measured.get(n, np.nan) for n in names]
    ax.bar(pos - 0.2, got, width=0.4, label="measured here")
    if published:
        ax.bar(pos + 0.2, [published.get(n, np.nan) for n in names], width=0.4, label="published (Greydanus, 2020)")
    for p, v in zip(pos, got, strict=True):
        if not np.isnan(v):
            ax.text(p - 0.2, v + 1, f"{v:.1f}", ha="center", fontsize="small")
    ax.set(xticks=pos, ylabel="test accuracy (%)", ylim=(0, 105))
    ax.set_xticklabels([n.replace(" ", "\n") for n in names])
    ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.22), ncol=2, frameon=False)
    if title:
        ax.set_title(title)
    fig.tight_layout()
    return fig


def per_class_accuracy(predicted: Mapping[str, object], y: object, title: str | None = None) -> Figure:
    """A heatmap of test accuracy (%) per class (rows) and model (columns): ``predicted`` maps a model's name to its
    predicted classes ``(n,)``, ``y`` ``(n,)`` the true ones. Each cell is annotated with its accuracy."""
    if not predicted:
        raise ValueError("per_class_accuracy needs at least one model's predictions")
    labels = to_numpy(y).astype(int)
    names = list(predicted)
    classes = np.arange(int(labels.max()) + 1)
    acc = np.array(
        [[100 * np.mean(to_numpy(predicted[m])[labels == c] == c) for m in names] for c in classes]
    )  # (classes, models)
    fig, ax = plt.subplots(figsize=(1.3 * len(names) + 2.5, 4.6))
    sns.heatmap(
        acc,
        ax=ax,
        cmap="viridis",
        vmin=0.0,
        vmax=100.0,
        annot=True,
        fmt=".0f",
        annot_kws={"fontsize": "small"},
        xticklabels=names,
        yticklabels=[f"{c} ({int(np.sum(labels == c))})" for c in classes],
        cbar_kws={"label": "test accuracy (%)"},
    )
    ax.set(xlabel="model", ylabel="true class (number of test signals)")
    ax.tick_params(axis="y", rotation=0)
    if title:
        ax.set_title(title)
    fig.tight_layout()
    return fig


def validation_accuracy_curves(runs: Mapping[str, object], title: str | None = None) -> Figure:
    """Validation accuracy (%) against the epoch, one line per run (``History`` objects or mappings with ``val_acc``);
    a dot marks the epoch whose weights a run keeps (``best_epoch`` when it has one, else its last epoch)."""
    if not runs:
        raise ValueError("validation_accuracy_curves needs at least one run")
    fig, ax = plt.subplots(figsize=(7, 3.6))
    for name, run in runs.items():
        val_acc = 100 * np.asarray(run["val_acc"] if isinstance(run, Mapping) else run.val_acc, dtype=float)
        best = run.get("best_epoch") if isinstance(run, Mapping) else getattr(run, "best_epoch", None)
        kept = len(val_acc) - 1 if best is None else int(best)
        epochs = np.arange(1, len(val_acc) + 1)
        (line,) = ax.plot(epochs, val_acc, label=name)
        ax.plot(kept + 1, val_acc[kept], "o", color=line.get_color())
    ax.set(xlabel="epoch", ylabel="validation accuracy (%)")
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.legend(fontsize="small", loc="lower right")
    if title:
        ax.set_title(title)
    fig.tight_layout()
    return fig


def attention_over_signal(
    signals: object, weights: object, patch_size: int, stride: int, titles: Sequence[str] | None = None
) -> Figure:
    """Per example: the signal, the attention each patch receives (bars) and the attention map ``(tokens, tokens)``.

    ``signals`` ``(k, length)``, ``weights`` ``(k, tokens, tokens)`` (averaged over heads).
    The received attention (column means) is drawn as a bar over the centre of each patch, on its own labelled axis;
    the maps share one colour scale, shown by a colorbar.
    """
    s, w = to_numpy(signals), to_numpy(weights)
    k = len(s)
    fig, axes = plt.subplots(
        2, k, figsize=(3.9 * k, 6.4), squeeze=False, gridspec_kw={"height_ratios": [1, 1.5]}, layout="constrained"
    )
    vmax = float(w.max())
    top = max(float(w[j].mean(0).max()) for j in range(k))
    for j in range(k):
        n = w[j].shape[-1]
        centres = np.arange(n) * stride + (patch_size - 1) / 2
        received = w[j].mean(0)  # (tokens,) attention each patch receives, averaged over queries
        ax = axes[0, j]
        ax2 = ax.twinx()
        ax2.bar(centres, received, width=stride * 0.9, alpha=0.4, color="tab:orange")
        ax2.set_ylim(0, 1.15 * top)
        ax2.tick_params(axis="y", colors="tab:orange", labelsize="small")
        ax2.grid(False)
        if j == k - 1:
            ax2.set_ylabel("attention received (bars)", color="tab:orange")
        ax.plot(s[j], color="black", lw=1.2)
        ax.set_zorder(ax2.get_zorder() + 1)  # the signal in front of the bars
        ax.patch.set_visible(False)
        ax.set(title=titles[j] if titles else None, xlabel="position in the signal")
        if j == 0:
            ax.set_ylabel("signal value (line)")
        sns.heatmap(
            w[j], ax=axes[1, j], cmap="viridis", vmin=0.0, vmax=vmax, cbar=False, square=True, xticklabels=4, yticklabels=4
        )
        axes[1, j].set(xlabel="key patch (attended to)", ylabel="query patch (attending)" if j == 0 else None)
    fig.colorbar(axes[1, 0].collections[0], ax=list(axes[1]), shrink=0.85, label="attention weight")
    return fig
