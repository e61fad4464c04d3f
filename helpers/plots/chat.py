"""Figures of notebook 16 (a real chat model from its GGUF file): what the file holds, one quantized block, the logits
against transformers', the KV cache against the context, the size-against-quality curve.

Imported by its full path (``import helpers.plots.chat as chat_plots``). Each function draws one figure and returns it;
call ``plt.show()`` after it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import matplotlib.pyplot as plt
import numpy as np
from matplotlib.figure import Figure
from matplotlib.ticker import FixedLocator, FuncFormatter, NullLocator

from helpers.chat.gguf import GGUFFile
from helpers.plots.core import to_numpy

__all__ = ["tensor_groups", "file_contents", "block_levels", "logit_errors", "kv_cache_memory", "quality_curve"]

_GROUPS = ("token embedding (tied head)", "attention", "feed-forward", "norms")
_COLOURS = {"token embedding (tied head)": "#4C72B0", "attention": "#DD8452", "feed-forward": "#55A868", "norms": "#C44E52"}


def _group(name: str) -> str:
    if name == "token_embd.weight":
        return _GROUPS[0]
    if "norm" in name:
        return _GROUPS[3]
    return _GROUPS[1] if ".attn_" in name else _GROUPS[2]


def tensor_groups(file: GGUFFile) -> dict[str, dict[str, object]]:
    """``{group: {"tensors", "weights", "file_bytes", "types"}}`` for the embedding, attention, feed-forward and norms."""
    groups: dict[str, dict[str, object]] = {g: {"tensors": 0, "weights": 0, "file_bytes": 0, "types": set()} for g in _GROUPS}
    for info in file.tensors.values():
        g = groups[_group(info.name)]
        g["tensors"] += 1  # type: ignore[operator]
        g["weights"] += info.count  # type: ignore[operator]
        g["file_bytes"] += info.nbytes  # type: ignore[operator]
        g["types"].add(info.kind)  # type: ignore[union-attr]
    return groups


def file_contents(file: GGUFFile) -> Figure:
    """Stacked bars: the weights' bytes in the file and as float16 and float32 in memory, by part of the model."""
    groups = tensor_groups(file)
    rows = {"in the file": "file_bytes", "float16 in memory": 2, "float32 in memory": 4}
    fig, ax = plt.subplots(figsize=(9, 3.4))
    for y, how in enumerate(rows.values()):
        left = 0.0
        for name, g in groups.items():
            size = (g["file_bytes"] if how == "file_bytes" else how * g["weights"]) / 1e6  # type: ignore[operator]
            types = "/".join(sorted(g["types"])) if how == "file_bytes" else ""  # type: ignore[arg-type]
            ax.barh(y, size, left=left, color=_COLOURS[name], edgecolor="white", label=name if y == 0 else None)
            if size > 25:
                ax.text(left + size / 2, y, types or f"{size:.0f}", ha="center", va="center", color="white", fontsize=9)
            left += size
        ax.text(left + 5, y, f"{left:.0f} MB", va="center", fontsize=10)
    ax.set_yticks(range(len(rows)), list(rows))
    ax.invert_yaxis()
    ax.set_xlabel("megabytes (10^6 bytes)")
    ax.set_xlim(0, 640)
    ax.set_title("SmolLM2-135M's 272 tensors: 97 MB in the file (their types in the bars), 5.5 times that as float32")
    ax.legend(loc="upper right", ncol=2, fontsize=9, frameon=True)
    fig.tight_layout()
    return fig


def block_levels(weights: object, scale: float, minimum: float, title: str = "") -> Figure:
    """One Q4_1 block: its 32 weights (dots) on the 16 levels ``minimum + scale * q`` (lines), q = 0..15."""
    w = to_numpy(weights).reshape(-1)
    fig, ax = plt.subplots(figsize=(9, 3.6))
    for q in range(16):
        level = minimum + scale * q
        ax.axhline(level, color="0.8", lw=0.8, zorder=0)
        if q in (0, 15):
            ax.text(len(w) - 0.4, level, f" q = {q}: {level:+.4f}", va="center", fontsize=9)
    ax.plot(range(len(w)), w, "o", color="#4C72B0")
    ax.grid(False, axis="y")  # the only horizontal lines are the block's 16 levels
    ax.set_xlim(-1, len(w) + 5)
    ax.set_xticks(range(0, len(w), 4))
    ax.set_xlabel("weight i of the block")
    ax.set_ylabel("weight value")
    ax.set_title(title or "A block of 32 weights takes 16 evenly spaced values: minimum + scale × code")
    fig.tight_layout()
    return fig


def logit_errors(errors: Mapping[str, float], title: str = "") -> Figure:
    """Horizontal bars on a log axis: the largest |difference| of each model's logits from transformers'."""
    names = list(errors)
    values = [max(float(errors[n]), 1e-9) for n in names]
    fig, ax = plt.subplots(figsize=(9, 0.55 * len(names) + 1.4))
    colours = ["#55A868" if v < 1e-3 else "#C44E52" for v in values]
    ax.barh(range(len(names)), values, color=colours)
    ax.set_xscale("log")
    ax.set_yticks(range(len(names)), names)
    ax.invert_yaxis()
    ax.axvline(1e-4, color="0.3", ls="--", lw=1)
    ax.text(1e-4, len(names) - 0.4, " 1e-4", fontsize=9, va="bottom")
    for y, v in enumerate(values):
        ax.text(v, y, f" {v:.1e}", va="center", fontsize=9)
    ax.set_xlim(min(values) / 3, max(values) * 30)
    ax.set_xlabel("largest |logit difference| from transformers' LlamaForCausalLM (log scale)")
    ax.set_title(title or "The file in notebook 11's block gives transformers' logits; one slip gives another model")
    fig.tight_layout()
    return fig


def _bytes_label(n: float, _pos: object = None) -> str:
    for unit, size in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if n >= size:
            return f"{n / size:g} {unit}"
    return f"{n:g} B"


def kv_cache_memory(contexts: Sequence[int], curves: Mapping[str, Sequence[float]], levels: Mapping[str, float]) -> Figure:
    """Bytes against the context on log-log axes: each cache (a line) against fixed sizes (dashed: the weights)."""
    fig, ax = plt.subplots(figsize=(8, 4.2))
    for name, values in curves.items():
        ax.plot(contexts, values, marker="o", label=name)
    for (name, value), colour in zip(levels.items(), ("0.35", "0.6", "0.8"), strict=False):
        ax.axhline(value, color=colour, ls="--", lw=1)
        ax.text(contexts[0], value * 1.1, name, fontsize=9, color="0.25")
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.xaxis.set_major_locator(FixedLocator(list(contexts)))
    ax.xaxis.set_major_formatter(FuncFormatter(lambda x, _p: f"{int(x):,}"))
    ax.xaxis.set_minor_locator(NullLocator())
    ax.yaxis.set_major_formatter(FuncFormatter(_bytes_label))
    ax.set_xlabel("context (tokens in the cache)")
    ax.set_ylabel("bytes")
    ax.set_title("The KV cache grows with the context: at 8,192 tokens it rivals the weights")
    ax.legend(loc="lower right", fontsize=9)
    fig.tight_layout()
    return fig


def quality_curve(points: Mapping[str, tuple[float, float]], reference: tuple[str, float, float], title: str = "") -> Figure:
    """Loss against bits per weight: one point per quantization (``{name: (bits, loss)}``), the file's weights as a star."""
    fig, ax = plt.subplots(figsize=(8, 4.2))
    names = sorted(points, key=lambda n: points[n][0])
    bits = np.array([points[n][0] for n in names])
    losses = np.array([points[n][1] for n in names])
    ax.plot(bits, losses, "o-", color="#4C72B0", label="the blocks' matrices re-quantized")
    for n, b, loss in zip(names, bits, losses, strict=True):
        ax.annotate(n, (b, loss), textcoords="offset points", xytext=(6, 6), fontsize=9)
    name, ref_bits, ref_loss = reference
    ax.plot([ref_bits], [ref_loss], "*", ms=14, color="#C44E52", label=name)
    ax.axhline(ref_loss, color="#C44E52", lw=0.8, ls="--")
    ax.set_xlabel("bits per weight (codes, scales and minimums)")
    ax.set_ylabel("next-token loss on held-out text (nats)")
    ax.set_xticks(sorted({*bits.tolist(), ref_bits}))
    ax.set_title(title or "Fewer bits, higher loss: 8 bits cost next to nothing, 4 a little, 2 break the model")
    ax.legend(loc="upper right", fontsize=9)
    fig.tight_layout()
    return fig
