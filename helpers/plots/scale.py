"""Figures of notebook 12 (attention at scale): the tiles of FlashAttention, costs against sequence length, and what a
window costs a small language model.

Imported by its full path (``import helpers.plots.scale as scale_plots``). Every axis has labelled ticks: on a log
axis each tick carries its value in readable units (``KiB``/``MiB``, ``ms``), so a 1.8x rise does not pass for an
order of magnitude.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence

import matplotlib.pyplot as plt
import numpy as np
from matplotlib.colors import ListedColormap
from matplotlib.patches import Patch
from matplotlib.ticker import FixedLocator, FuncFormatter, NullLocator

__all__ = ["tile_map", "cost_curves", "memory_and_time", "window_losses", "format_seconds", "format_size"]


def tile_map(
    n: int,
    block_q: int,
    block_k: int,
    causal: bool = True,
    ax: plt.Axes | None = None,
    tile_mask: Callable[[int, int, int, int], object] | None = None,
) -> plt.Axes:
    """The (query block, key block) tiles of an ``(n, n)`` score matrix: skipped, computed whole, computed with a mask.

    ``tile_mask(i0, i1, j0, j1)`` (default: the causal rule) gives None for a skipped tile, else the tile's boolean
    mask; a tile whose mask is all True is computed whole.
    """
    rows, cols = math.ceil(n / block_q), math.ceil(n / block_k)
    kinds = np.zeros((rows, cols))
    for r in range(rows):
        i0, i1 = r * block_q, min((r + 1) * block_q, n)
        for c in range(cols):
            j0, j1 = c * block_k, min((c + 1) * block_k, n)
            if tile_mask is not None:
                keep = tile_mask(i0, i1, j0, j1)
                kinds[r, c] = 0 if keep is None else 1 if bool(np.asarray(keep).all()) else 2
            elif not causal or j1 - 1 <= i0:
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
    computed = int((kinds > 0).sum())
    ax.set(
        xlabel="key position",
        ylabel="query position",
        title=f"n = {n:,}, tiles of {block_q} x {block_k}: {computed} of {kinds.size} computed",
    )
    ax.grid(False)
    labels = ["skipped", "computed", "computed, masked"]
    ax.legend(
        handles=[Patch(color=c, label=label) for c, label in zip(colours, labels, strict=True)],
        loc="upper right",
        fontsize=8,
        framealpha=0.9,
    )
    return ax


def format_seconds(seconds: float) -> str:
    """A time as a tick label: ``"20 ms"``, ``"0.3 ms"``, ``"1.5 s"``."""
    if seconds >= 1:
        return f"{seconds:g} s"
    ms = 1000 * seconds
    return f"{ms:.0f} ms" if ms >= 10 else f"{ms:.2g} ms"


def format_size(n: float) -> str:
    """Bytes as a tick label, in binary units: ``"64 MiB"``, ``"512 KiB"``."""
    for unit, size in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if abs(n) >= size:
            return f"{n / size:.3g} {unit}"
    return f"{n:.0f} B"


_FORMATTERS: dict[str, Callable[[float], str]] = {"seconds": format_seconds, "bytes": format_size}


def _log_ticks(ax: plt.Axes, values: Sequence[float], unit: str) -> None:
    """Label a log y axis at 1, 2 and 5 times each power of ten (of two, for bytes) inside the data's range."""
    positive = [v for v in values if v > 0 and math.isfinite(v)]
    if not positive:
        return
    low, high = min(positive), max(positive)
    if unit == "bytes":
        ticks = [2.0**e for e in range(math.floor(math.log2(low)), math.ceil(math.log2(high)) + 1)]
        step = max(1, math.ceil(len(ticks) / 7))
        ticks = ticks[::step]
    else:
        ticks = [m * 10.0**e for e in range(math.floor(math.log10(low)) - 1, math.ceil(math.log10(high)) + 1) for m in (1, 2, 5)]
        ticks = [t for t in ticks if low / 2.5 <= t <= high * 2.5]
    ax.yaxis.set_major_locator(FixedLocator(ticks))
    ax.yaxis.set_minor_locator(NullLocator())
    ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _: _FORMATTERS[unit](v)))
    ax.set_ylim(min(low, ticks[0]) / 1.3, max(high, ticks[-1]) * 1.3)


def cost_curves(
    sizes: Sequence[int],
    curves: Mapping[str, Sequence[float]],
    ylabel: str,
    title: str,
    ax: plt.Axes | None = None,
    reference: tuple[str, Sequence[float]] | None = None,
    unit: str = "seconds",
    log_y: bool = True,
    xlabel: str = "sequence length n",
) -> plt.Axes:
    """Costs (``unit``: ``"seconds"`` or ``"bytes"``) against the sequence length, one line per method.

    Log-log by default, every y tick labelled in readable units; ``log_y=False`` draws a linear y axis from 0 (for a
    cost that grows by a small factor). ``reference`` is drawn dashed.
    """
    if unit not in _FORMATTERS:
        raise ValueError(f"unit must be one of {sorted(_FORMATTERS)}, not {unit!r}")
    if ax is None:
        _, ax = plt.subplots(figsize=(5.5, 3.6))
    styles = [("o", "-", 6), ("s", "--", 8), ("^", "-.", 7), ("D", ":", 6), ("v", "-", 7)]
    for (label, values), (marker, line, size) in zip(
        curves.items(), styles * len(curves), strict=False
    ):  # overlapping curves stay visible
        ax.plot(sizes[: len(values)], values, marker=marker, linestyle=line, markersize=size, markerfacecolor="none", label=label)
    if reference is not None:
        ax.plot(sizes, reference[1], linestyle="--", color="grey", label=reference[0])
    ax.set(xscale="log", xlabel=xlabel, ylabel=ylabel, title=title)
    ax.set_xticks(list(sizes), [f"{s:,}" for s in sizes])
    ax.xaxis.set_minor_locator(NullLocator())
    values = [v for vs in curves.values() for v in vs] + (list(reference[1]) if reference else [])
    if log_y:
        ax.set_yscale("log")
        _log_ticks(ax, values, unit)
    else:
        ax.set_ylim(0, max(values) * 1.15)
        ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _: _FORMATTERS[unit](v) if v > 0 else "0"))
    ax.legend(fontsize=8)
    return ax


def memory_and_time(
    memory_sizes: Sequence[int],
    peaks: Mapping[str, Sequence[float]],
    time_sizes: Sequence[int],
    times: Mapping[str, Sequence[float]],
    title: str = "causal attention, one head, d = 64, float32, on the CPU",
) -> plt.Figure:
    """Two panels side by side: peak extra memory (with one score matrix, 4 n^2 bytes, dashed) and time, against n."""
    fig, (left, right) = plt.subplots(1, 2, figsize=(10.5, 4.6))
    matrix = ("one n x n score matrix", [4.0 * n * n for n in memory_sizes])
    cost_curves(memory_sizes, peaks, "peak extra memory", "memory: what the call adds at its peak", left, matrix, "bytes")
    cost_curves(time_sizes, times, "CPU time per call (best of 3)", "time: CPU time of one call", right, unit="seconds")
    handles, labels = left.get_legend_handles_labels()
    for ax in (left, right):
        ax.get_legend().remove()
    fig.suptitle(title)
    fig.tight_layout(rect=(0, 0.14, 1, 1))
    fig.legend(handles, labels, loc="lower center", ncol=3, fontsize=8, frameon=False)
    return fig


def window_losses(
    read_through: Mapping[int, float],
    full_loss: float,
    trained_window: tuple[int, float] | None = None,
    ax: plt.Axes | None = None,
    title: str = "how much of its context the model uses",
) -> plt.Axes:
    """Validation loss of a model read through windows of growing width, against its own loss with full attention."""
    if ax is None:
        _, ax = plt.subplots(figsize=(5.5, 3.6))
    widths = sorted(read_through)
    ax.plot(widths, [read_through[w] for w in widths], marker="o", label="trained with full attention, read through a window")
    ax.axhline(full_loss, color="grey", linestyle="--", label="the same model, full attention")
    if trained_window is not None:
        ax.plot(
            [trained_window[0]],
            [trained_window[1]],
            marker="*",
            markersize=14,
            linestyle="none",
            color="#c44e52",
            label=f"trained with a window of {trained_window[0]}",
        )
    ax.set(
        xscale="log",
        xlabel="window w (characters each position sees)",
        ylabel="validation loss (nats per character)",
        title=title,
    )
    ax.set_xticks(widths, [str(w) for w in widths])
    ax.xaxis.set_minor_locator(NullLocator())
    ax.legend(fontsize=8)
    return ax
