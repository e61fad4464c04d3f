"""Figures of notebook 15: text cut into tokens, drawn as coloured boxes; bars of what a tokenizer costs."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import matplotlib.pyplot as plt
import numpy as np
from matplotlib.axes import Axes

__all__ = ["token_label", "show_tokens", "token_cost_bars"]

_PALETTE = ("#a6cee3", "#b2df8a", "#fdbf6f", "#cab2d6", "#fb9a99", "#ffff99")


def token_label(token: bytes) -> str:
    """How a token is written in a figure: its text, with a space shown as ``·``, a newline as ``\\n``, a tab as
    ``\\t``, and bytes that are not a whole UTF-8 character as ``\\xNN``."""
    if not isinstance(token, (bytes, bytearray)):
        raise TypeError(f"a token is bytes, not {type(token).__name__}")
    text = bytes(token).decode("utf-8", errors="backslashreplace")
    text = text.replace(" ", "·").replace("\n", "\\n").replace("\t", "\\t").replace("\r", "\\r")
    return "".join(ch if ch.isprintable() else ch.encode("unicode_escape").decode("ascii") for ch in text)


def show_tokens(
    rows: Sequence[tuple[str, Sequence[bytes]]] | Sequence[tuple[str, Sequence[bytes], Sequence[int]]],
    title: str,
    width: int = 62,
    ids: bool = True,
    ax: Axes | None = None,
) -> Axes:
    """Each row a text cut into tokens: ``(label, tokens)`` or ``(label, tokens, ids)``; one coloured box per token
    (colours alternate so that neighbours differ), its id below it when given and ``ids``. A row longer than ``width``
    characters wraps. Returns the axes; call ``plt.show()`` after it."""
    if not rows:
        raise ValueError("show_tokens needs at least one row (label, tokens)")
    lines: list[tuple[str, list[tuple[int, str, int | None, int]]]] = []  # (label, [(x, text, id, colour)])
    for row in rows:
        label, tokens = row[0], list(row[1])
        token_ids = list(row[2]) if len(row) > 2 else [None] * len(tokens)  # type: ignore[misc]
        if len(token_ids) != len(tokens):
            raise ValueError(f"row {label!r}: {len(tokens)} tokens but {len(token_ids)} ids")
        line: list[tuple[int, str, int | None, int]] = []
        x = 0
        for k, (token, token_id) in enumerate(zip(tokens, token_ids, strict=False)):
            text = token_label(token)
            cells = max(len(text), len(str(token_id)) if ids and token_id is not None else 0)
            if x and x + cells > width:
                lines.append((label, line))
                label, line, x = "", [], 0
            line.append((x, text, token_id, k % len(_PALETTE)))
            x += cells + 1
        lines.append((label, line))
    step = 2.2 if ids else 1.4
    if ax is None:
        _, ax = plt.subplots(figsize=(0.155 * width + 2.2, 0.38 * step * len(lines) + 0.9))
    for n, (label, line) in enumerate(lines):
        y = -n * step
        if label:
            ax.text(-1.0, y, label, ha="right", va="center", fontsize=10, fontweight="bold")
        for x, text, token_id, colour in line:
            cells = max(len(text), len(str(token_id)) if ids and token_id is not None else 0)
            ax.add_patch(
                plt.Rectangle((x - 0.05, y - 0.55), cells + 0.1, 1.1, facecolor=_PALETTE[colour], edgecolor="0.35", lw=0.8)
            )
            ax.text(x + cells / 2, y, text, ha="center", va="center", family="DejaVu Sans Mono", fontsize=10)
            if ids and token_id is not None:
                ax.text(
                    x + cells / 2,
                    y - 0.95,
                    str(token_id),
                    ha="center",
                    va="center",
                    family="DejaVu Sans Mono",
                    fontsize=7,
                    color="0.3",
                )
    ax.set_xlim(-1.2, width + 0.5)
    ax.set_ylim(-(len(lines) - 1) * step - (1.4 if ids else 0.8), 0.9)
    ax.set_axis_off()
    ax.set_title(title)
    return ax


def token_cost_bars(
    counts: Mapping[str, Mapping[str, float]],
    ylabel: str,
    title: str,
    ax: Axes | None = None,
) -> Axes:
    """Grouped bars: ``counts[tokenizer][text] -> value`` (tokens needed, bytes per token...), one group per text.
    Returns the axes; call ``plt.show()`` after it."""
    tokenizers = list(counts)
    if not tokenizers:
        raise ValueError("token_cost_bars needs at least one tokenizer's values")
    texts = list(counts[tokenizers[0]])
    if any(list(counts[t]) != texts for t in tokenizers):
        raise ValueError("every tokenizer needs a value for the same texts, in the same order")
    if ax is None:
        _, ax = plt.subplots(figsize=(max(6.0, 0.75 * len(texts) + 2), 3.8))
    positions = np.arange(len(texts))
    width = 0.8 / len(tokenizers)
    for k, name in enumerate(tokenizers):
        values = [counts[name][t] for t in texts]
        ax.bar(positions + (k - (len(tokenizers) - 1) / 2) * width, values, width, label=name)
    top = max(float(v) for values in counts.values() for v in values.values())
    ax.set_ylim(0, 1.35 * top)  # room for the legend above the bars
    ax.set_xticks(positions, texts, rotation=30, ha="right")
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    ax.legend(loc="upper left")
    return ax
