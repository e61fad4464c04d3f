"""Figures of notebook 09: translation training curves, exact match by length, cross-attention against the true alignment."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import matplotlib.pyplot as plt
import numpy as np
import seaborn as sns
from matplotlib.figure import Figure

from helpers.plots.core import to_numpy

__all__ = ["seq2seq_curves", "alignment_maps", "exact_match_by_length"]


def seq2seq_curves(histories: Mapping[str, object], title: str | None = None) -> Figure:
    """Training and validation loss (log scale) and teacher-forced validation token accuracy against epochs.

    ``histories`` maps a model's name to a ``Seq2SeqHistory`` (or a mapping with ``train_loss``, ``val_loss``,
    ``val_token_acc``). Training curves solid, validation dashed; a dot marks the epoch whose weights a run kept
    (``best_epoch``, when the history has one), explained by one legend entry. ``title``: what to look at.
    """
    fig, (ax_loss, ax_acc) = plt.subplots(1, 2, figsize=(10, 3.6))
    palette = sns.color_palette(n_colors=max(3, len(histories)))
    kept_any = False
    for color, (name, hist) in zip(palette, histories.items(), strict=False):
        epochs = np.arange(1, len(hist["train_loss"]) + 1)  # type: ignore[index]
        ax_loss.plot(epochs, hist["train_loss"], color=color, label=f"{name} train")  # type: ignore[index]
        ax_loss.plot(epochs, hist["val_loss"], color=color, ls="--", label=f"{name} validation")  # type: ignore[index]
        ax_acc.plot(epochs, 100 * np.asarray(hist["val_token_acc"]), color=color, ls="--", label=name)  # type: ignore[index]
        best = getattr(hist, "best_epoch", 0)
        if best and hist["val_token_acc"]:  # type: ignore[index]
            ax_acc.plot([best], [100 * hist["val_token_acc"][best - 1]], "o", color=color, ms=6)  # type: ignore[index]
            kept_any = True
    if kept_any:  # one legend entry explains the dots of every model
        ax_acc.plot([], [], "o", color="0.3", ms=6, label="epoch whose weights were kept")
    ax_loss.set(
        xlabel="epoch",
        ylabel="cross-entropy (log scale)",
        yscale="log",
        title="loss per epoch (solid: training, dashed: validation)",
    )
    ax_acc.set(xlabel="epoch", ylabel="token accuracy (%)", title="validation token accuracy, teacher forced")
    ax_loss.legend(fontsize="small")
    ax_acc.legend(fontsize="small")
    if title:
        fig.suptitle(title)
    fig.tight_layout()
    return fig


def alignment_maps(
    maps: Sequence[object],
    alignments: Sequence[object],
    source_words: Sequence[Sequence[str]],
    target_words: Sequence[Sequence[str]],
    titles: Sequence[str],
    ncols: int = 3,
    suptitle: str | None = None,
    cbar_label: str | None = "attention weight",
    xlabel: str = "English word read",
    ylabel: str = "German word predicted",
) -> Figure:
    """Attention maps ``(n, m)`` (rows: target words, columns: source words) with the true alignment ringed in red.

    ``alignments[k][j]`` is the source position of target word ``j`` of panel ``k`` (``-1``: none). Each map is
    cut to its words: ``len(target_words[k])`` rows and ``len(source_words[k])`` columns. One colorbar (0 to 1)
    serves every panel, labelled ``cbar_label`` (``None``: no colorbar); the axes are labelled ``xlabel``, ``ylabel``.
    """
    if not len(maps) == len(alignments) == len(source_words) == len(target_words) == len(titles):
        raise ValueError("alignment_maps needs as many maps, alignments, source and target word lists and titles")
    ncols = min(ncols, len(maps))
    nrows = -(-len(maps) // ncols)
    width = 4.3 * ncols + (0.9 if cbar_label else 0.0)
    fig, axes = plt.subplots(nrows, ncols, figsize=(width, 3.9 * nrows), squeeze=False, layout="constrained")
    for k, ax in enumerate(axes.flat):
        if k >= len(maps):
            ax.axis("off")
            continue
        src, tgt = list(source_words[k]), list(target_words[k])
        w = to_numpy(maps[k])[: len(tgt), : len(src)]
        image = ax.imshow(w, vmin=0, vmax=1, cmap="viridis")  # imshow: a third of seaborn's heatmap's drawing time
        ax.set_xticks(range(len(src)), src, rotation=60, ha="right", rotation_mode="anchor")
        ax.set_yticks(range(len(tgt)), tgt)
        ax.grid(False)
        for j, i in enumerate(to_numpy(alignments[k])[: len(tgt)].tolist()):
            if i >= 0:
                ax.add_patch(plt.Rectangle((i - 0.5, j - 0.5), 1, 1, fill=False, edgecolor="red", lw=2))
        ax.set_title(titles[k], fontsize="small")
        if k % ncols == 0:
            ax.set_ylabel(ylabel)
        if k >= len(maps) - ncols:
            ax.set_xlabel(xlabel)
    if cbar_label:
        fig.colorbar(image, ax=axes.ravel().tolist(), shrink=0.8, label=cbar_label)
    if suptitle:
        fig.suptitle(suptitle)
    return fig


def exact_match_by_length(
    by_digits: Mapping[str, Mapping[str, tuple[float, int]]], title: str | None = None, xlabel: str = "digits in the number"
) -> Figure:
    """Exact match (%) against the length of the source, one line per model (Bahdanau et al., 2015, figure 2).

    ``by_digits`` maps a model's name to ``{length label: (fraction exact, how many sentences)}`` in increasing
    length (``helpers.models.exact_match_by_digits``); the x tick labels say how many sentences each length has.
    """
    fig, ax = plt.subplots(figsize=(6.4, 3.6))
    markers = ("o", "s", "^", "D", "v")
    palette = sns.color_palette(n_colors=max(3, len(by_digits)))
    labels: list[str] = []
    for k, (name, groups) in enumerate(by_digits.items()):
        labels = labels or list(groups)
        if list(groups) != labels:
            raise ValueError(f"every model needs the same length groups: {name} has {list(groups)}, not {labels}")
        ax.plot(
            range(len(labels)),
            [100 * groups[g][0] for g in labels],
            marker=markers[k % len(markers)],
            color=palette[k],
            label=name,
        )
    counts = next(iter(by_digits.values()))
    ax.set_xticks(range(len(labels)), [f"{g}\n({counts[g][1]})" for g in labels])
    ax.set(xlabel=f"{xlabel} (how many test sentences)", ylabel="exact match (%)", title=title or "exact match by length")
    ax.legend(fontsize="small", loc="lower left")
    fig.tight_layout()
    return fig
