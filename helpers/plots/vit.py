"""Figures of notebook 08 (Vision Transformer): patch grids, position-embedding similarity, attention overlays."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import matplotlib.pyplot as plt
import numpy as np
import seaborn as sns
from matplotlib.axes import Axes
from matplotlib.figure import Figure

from helpers.plots.core import to_numpy

__all__ = [
    "image_patches",
    "digit_gallery",
    "position_similarity_grid",
    "rollout_overlays",
    "confusion_heatmap",
    "validation_curves",
    "shift_accuracy",
]


def _grid_lines(ax: Axes, size: int, patch_size: int, color: str = "tab:red") -> None:
    for k in range(0, size + 1, patch_size):
        ax.axhline(k - 0.5, color=color, lw=1.5)
        ax.axvline(k - 0.5, color=color, lw=1.5)


def image_patches(image: object, patch_size: int, patches: object | None = None, title: str | None = None) -> Figure:
    """An image ``(H, W)`` with its patch grid and numbers, and (given ``patches`` ``(N, p*p)``) the patch rows.

    Left: the image with the grid, each patch labelled with its index (row-major).
    Right: the matrix of patch vectors, one row per patch, as ``patchify`` returns it.
    """
    img = to_numpy(image)
    height, width = img.shape
    grid_w = width // patch_size
    ncols = 1 if patches is None else 2
    fig, axes = plt.subplots(1, ncols, figsize=(3.6 * ncols + (1.2 if patches is not None else 0), 3.6), squeeze=False)
    ax = axes[0, 0]
    ax.imshow(img, cmap="gray_r", vmin=0, vmax=1)
    _grid_lines(ax, height, patch_size)
    for n in range((height // patch_size) * grid_w):
        r, c = divmod(n, grid_w)
        ax.text(
            c * patch_size + patch_size / 2 - 0.5,
            r * patch_size + patch_size / 2 - 0.5,
            str(n),
            ha="center",
            va="center",
            color="tab:red",
            fontsize=9,
            fontweight="bold",
            bbox=dict(boxstyle="round,pad=0.15", fc="white", ec="none", alpha=0.85),
        )
    ax.set(xticks=[], yticks=[], title=f"{height} x {width} image, {patch_size} x {patch_size} patches")
    ax.grid(False)
    if patches is not None:
        mat = to_numpy(patches)
        ax2 = axes[0, 1]
        sns.heatmap(
            mat,
            ax=ax2,
            cmap="gray_r",
            vmin=0,
            vmax=1,
            cbar=True,
            cbar_kws={"label": "pixel value"},
            linewidths=0.5,
            linecolor="white",
            yticklabels=list(range(mat.shape[0])),
            xticklabels=list(range(mat.shape[1])),
        )
        ax2.set(xlabel="value within the patch (row-major)", ylabel="patch", title=f"patchify: ({mat.shape[0]}, {mat.shape[1]})")
        ax2.tick_params(axis="y", labelrotation=0, labelsize=7)
    if title:
        fig.suptitle(title)
    fig.tight_layout()
    return fig


def digit_gallery(
    images: object, titles: Sequence[str], ncols: int = 8, suptitle: str | None = None, size: float = 1.35
) -> Figure:
    """Small grey images ``(B, H, W)`` in a grid, each with a title (e.g. "true 3, predicted 8"); ``size`` inches per image."""
    imgs = to_numpy(images)
    count = len(imgs)
    ncols = max(1, min(ncols, count))
    nrows = max(1, -(-count // ncols))
    fig, axes = plt.subplots(nrows, ncols, figsize=(size * ncols, (size + 0.2) * nrows), squeeze=False)
    for i, ax in enumerate(axes.flat):
        ax.axis("off")
        if i < count:
            ax.imshow(imgs[i], cmap="gray_r", vmin=0, vmax=1)
            ax.set_title(titles[i], fontsize=8)
    if suptitle:
        fig.suptitle(suptitle)
    fig.tight_layout()
    return fig


def position_similarity_grid(similarity: object, title: str | None = None) -> Figure:
    """Cosine similarity of position embeddings drawn on the patch grid.

    ``similarity`` is ``(N, g, g)``: panel ``n`` (placed at patch ``n``'s own place
    in a ``g x g`` grid of panels) shows how similar patch ``n``'s embedding is
    to every patch; the patch itself is outlined. A learned 2-D layout shows as
    each panel being bright around its own position.
    """
    sim = to_numpy(similarity)
    n, g, _ = sim.shape
    fig, axes = plt.subplots(g, g, figsize=(1.25 * g + 0.9, 1.25 * g), squeeze=False)
    image = None
    for k in range(n):
        r, c = divmod(k, g)
        ax = axes[r, c]
        image = ax.imshow(sim[k], cmap="RdBu_r", vmin=-1, vmax=1)
        ax.add_patch(plt.Rectangle((c - 0.5, r - 0.5), 1, 1, fill=False, ec="black", lw=1.5))
        ax.set(xticks=[], yticks=[])
        ax.grid(False)
        ax.set_title(f"patch {k}", fontsize=7, pad=2)
    fig.subplots_adjust(right=0.84, wspace=0.08, hspace=0.3, left=0.08, bottom=0.08)
    cax = fig.add_axes((0.87, 0.15, 0.03, 0.7))
    fig.colorbar(image, cax=cax, label="cosine similarity")
    fig.supxlabel("grid column of the other patch (each panel: one patch, outlined)", fontsize=9)
    fig.supylabel("grid row", fontsize=9)
    if title:
        fig.suptitle(title)
    return fig


def rollout_overlays(images: object, maps: object, titles: Sequence[str], ncols: int = 6, suptitle: str | None = None) -> Figure:
    """Each image ``(H, W)`` above its attention map ``(g, g)`` upsampled to ``H x W``.

    Two rows per group: the digit, then the map (nearest-neighbour upsampling, one colour scale for all maps, shown
    by the colour bar) with the digit's strokes outlined on top, so one sees which patches the map favours.
    """
    imgs, attn = to_numpy(images), to_numpy(maps)
    count, height, width = imgs.shape
    g = attn.shape[-1]
    ncols = min(ncols, count)
    groups = -(-count // ncols)
    fig, axes = plt.subplots(2 * groups, ncols, figsize=(1.6 * ncols + 0.8, 3.3 * groups), squeeze=False)
    for ax in axes.flat:
        ax.axis("off")
    low, top = float(attn.min()), float(attn.max())
    image = None
    for i in range(count):
        r, c = divmod(i, ncols)
        up = np.kron(attn[i], np.ones((height // g, width // g)))  # (H, W)
        axes[2 * r, c].imshow(imgs[i], cmap="gray_r", vmin=0, vmax=1)
        axes[2 * r, c].set_title(titles[i], fontsize=8)
        image = axes[2 * r + 1, c].imshow(up, cmap="magma", vmin=low, vmax=top)
        axes[2 * r + 1, c].contour(imgs[i], levels=[0.35], colors="cyan", linewidths=1.2)
        axes[2 * r + 1, c].set_title("rollout", fontsize=8)
    if suptitle:
        fig.suptitle(suptitle)
    fig.tight_layout(rect=(0, 0, 0.9, 1))
    if image is not None:
        cax = fig.add_axes((0.92, 0.15, 0.02, 0.7))
        fig.colorbar(image, cax=cax, label="share of the rollout per patch")
    return fig


def confusion_heatmap(
    y_true: object, y_pred: object, num_classes: int = 10, ax: Axes | None = None, title: str | None = None
) -> Axes:
    """Seaborn heatmap of the confusion matrix: rows true classes, columns predictions, counts annotated."""
    t, p = to_numpy(y_true).astype(int), to_numpy(y_pred).astype(int)
    counts = np.zeros((num_classes, num_classes), dtype=int)
    np.add.at(counts, (t, p), 1)
    ax = ax if ax is not None else plt.gca()
    sns.heatmap(
        counts,
        annot=True,
        fmt="d",
        cmap="Blues",
        cbar=True,
        cbar_kws={"label": "test images"},
        ax=ax,
        square=True,
        mask=counts == 0,
        linewidths=0.5,
        linecolor="0.9",
    )
    ax.set(xlabel="predicted digit", ylabel="true digit")
    ax.grid(False)
    ax.tick_params(axis="y", labelrotation=0)
    if title:
        ax.set_title(title)
    return ax


def validation_curves(
    histories: Mapping[str, object], baselines: Mapping[str, float] | None = None, title: str | None = None, zoom: float = 95.0
) -> Figure:
    """Validation accuracy (%) after every epoch, one line per run; ``baselines`` (name -> %) as dashed horizontal lines.

    ``histories`` maps a name to a ``helpers.training.History`` (or anything with a ``val_acc`` list of fractions).
    Left: every epoch on the full scale; right: the same curves from ``zoom`` % up, where the runs end.
    """
    baselines = dict(baselines or {})
    fig, axes = plt.subplots(1, 2, figsize=(10, 3.6))
    palette = sns.color_palette(n_colors=max(3, len(histories) + len(baselines)))
    for ax, low in zip(axes, (0.0, zoom), strict=True):
        for color, (name, history) in zip(palette, histories.items(), strict=False):
            acc = 100 * np.asarray(history["val_acc"], dtype=float)  # type: ignore[index]
            ax.plot(np.arange(1, len(acc) + 1), acc, color=color, lw=1.8, label=name)
        for color, (name, value) in zip(palette[len(histories) :], baselines.items(), strict=False):
            ax.axhline(value, color=color, ls="--", lw=1.4, label=name)
        ax.set(xlabel="epoch", ylabel="validation accuracy (%)", ylim=(low, 100.5))
    axes[0].set_title("every epoch")
    axes[1].set_title(f"the same, from {zoom:g}% up")
    axes[1].legend(fontsize="small", loc="lower right")
    if title:
        fig.suptitle(title)
    fig.tight_layout()
    return fig


def shift_accuracy(table: object, title: str | None = None) -> Figure:
    """Grouped bars: test accuracy (%) per shift (rows of ``table``) for each model (its columns).

    ``table`` is a pandas DataFrame indexed by the shift ("none", "right", ...) with one column per model.
    """
    shifts = [str(s) for s in table.index]  # type: ignore[attr-defined]
    models = [str(m) for m in table.columns]  # type: ignore[attr-defined]
    values = np.asarray(table, dtype=float)  # (shifts, models)
    fig, ax = plt.subplots(figsize=(8.4, 3.6))
    width = 0.8 / len(models)
    palette = sns.color_palette(n_colors=max(3, len(models)))
    for k, (model, color) in enumerate(zip(models, palette, strict=False)):
        positions = np.arange(len(shifts)) + (k - (len(models) - 1) / 2) * width
        ax.bar(positions, values[:, k], width=width * 0.95, color=color, label=model, hatch="//" if "shift" in model else None)
    ax.set_xticks(np.arange(len(shifts)), shifts)
    ax.set(xlabel="shift of the test digits by one pixel", ylabel="test accuracy (%)", ylim=(0, 115))
    ax.set_yticks(range(0, 101, 20))
    ax.legend(fontsize="small", ncol=len(models), loc="upper center", frameon=False)
    if title:
        ax.set_title(title)
    fig.tight_layout()
    return fig
