"""Core figures: the course style, attention heatmaps, per-head grids, training curves."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import matplotlib.pyplot as plt
import numpy as np
import seaborn as sns
from matplotlib.axes import Axes
from matplotlib.figure import Figure

from helpers.runtime.style import set_style

__all__ = ["set_style", "attention_heatmap", "head_grid", "training_curves", "to_numpy"]


def to_numpy(x: object) -> np.ndarray:
    """A tensor (any device, with or without grad) or array-like as a numpy array."""
    if hasattr(x, "detach"):
        x = x.detach().cpu().numpy()  # type: ignore[union-attr]
    return np.asarray(x)


def attention_heatmap(
    weights: object,
    query_labels: Sequence[str] | None = None,
    key_labels: Sequence[str] | None = None,
    ax: Axes | None = None,
    title: str | None = None,
    annot: bool | None = None,
    fmt: str = ".2f",
    cmap: str = "viridis",
    cbar: bool = True,
) -> Axes:
    """Heatmap of an attention matrix ``(n_queries, n_keys)``: rows are queries, columns keys.

    Annotated with the weights when the matrix is small (at most 12 x 12) unless
    ``annot`` says otherwise. Returns the axes; call ``plt.show()`` after it.
    """
    w = to_numpy(weights)
    if w.ndim != 2:
        raise ValueError(f"attention_heatmap expects a 2-D (queries, keys) matrix, got shape {tuple(w.shape)}")
    if annot is None:
        annot = max(w.shape) <= 12
    ax = ax if ax is not None else plt.gca()
    sns.heatmap(
        w,
        ax=ax,
        annot=annot,
        fmt=fmt,
        cmap=cmap,
        vmin=0.0,
        vmax=max(1.0, float(np.nanmax(w))) if w.min() >= 0 else None,
        cbar=cbar,
        square=w.shape[0] == w.shape[1],
        xticklabels=list(key_labels) if key_labels is not None else "auto",
        yticklabels=list(query_labels) if query_labels is not None else "auto",
    )
    ax.set_xlabel("keys (attended to)")
    ax.set_ylabel("queries (attending)")
    ax.tick_params(axis="y", labelrotation=0)
    if title:
        ax.set_title(title)
    return ax


def head_grid(
    weights: object,
    query_labels: Sequence[str] | None = None,
    key_labels: Sequence[str] | None = None,
    ncols: int = 4,
    title: str | None = None,
    annot: bool = False,
) -> Figure:
    """Grid of per-head heatmaps from weights ``(heads, n, m)`` (one batch element)."""
    w = to_numpy(weights)
    if w.ndim != 3:
        raise ValueError(f"head_grid expects (heads, queries, keys), got shape {tuple(w.shape)}")
    heads = w.shape[0]
    ncols = min(ncols, heads)
    nrows = -(-heads // ncols)
    fig, axes = plt.subplots(nrows, ncols, figsize=(2.6 * ncols, 2.4 * nrows), squeeze=False)
    for h, ax in enumerate(axes.flat):
        if h >= heads:
            ax.axis("off")
            continue
        attention_heatmap(w[h], query_labels, key_labels, ax=ax, annot=annot, cbar=False, title=f"head {h}")
        ax.set_xlabel("")
        ax.set_ylabel("")
    if title:
        fig.suptitle(title)
    fig.tight_layout()
    return fig


def training_curves(histories: Mapping[str, Mapping[str, Sequence[float]]], title: str | None = None) -> Figure:
    """Loss and accuracy against epochs, one line per run.

    ``histories`` maps a run name to a history with keys ``train_loss``,
    ``val_loss``, ``train_acc``, ``val_acc`` (as ``helpers.training.fit`` returns).
    Training curves are solid, validation curves dashed.
    """
    fig, (ax_loss, ax_acc) = plt.subplots(1, 2, figsize=(10, 3.6))
    palette = sns.color_palette(n_colors=max(3, len(histories)))
    for color, (name, hist) in zip(palette, histories.items(), strict=False):  # at least 3 colours, maybe more
        epochs = np.arange(1, len(hist["train_loss"]) + 1)
        ax_loss.plot(epochs, hist["train_loss"], color=color, label=f"{name} train")
        ax_loss.plot(epochs, hist["val_loss"], color=color, ls="--", label=f"{name} validation")
        ax_acc.plot(epochs, 100 * np.asarray(hist["train_acc"]), color=color, label=f"{name} train")
        ax_acc.plot(epochs, 100 * np.asarray(hist["val_acc"]), color=color, ls="--", label=f"{name} validation")
    ax_loss.set(xlabel="epoch", ylabel="cross-entropy loss", title="loss")
    ax_acc.set(xlabel="epoch", ylabel="accuracy (%)", title="accuracy")
    ax_acc.legend(fontsize="small", ncol=1 if len(histories) < 3 else 2)
    if title:
        fig.suptitle(title)
    fig.tight_layout()
    return fig
