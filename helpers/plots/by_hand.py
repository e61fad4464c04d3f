"""Figures of notebooks 02-03 (attention by hand, softmax temperature).

- ``bipartite_attention``: inputs on one side, outputs on the other, one line per
  (output, input) pair with its width set by the attention weight; each output's
  strongest input is drawn solid, its second strongest dashed, the rest faint.
"""

from __future__ import annotations

from collections.abc import Sequence

import matplotlib.pyplot as plt
import numpy as np
import seaborn as sns
from matplotlib.axes import Axes
from matplotlib.lines import Line2D

from helpers.plots.core import to_numpy

__all__ = ["bipartite_attention", "values_and_output"]


def bipartite_attention(
    weights: object,
    output_labels: Sequence[str] | None = None,
    input_labels: Sequence[str] | None = None,
    ax: Axes | None = None,
    title: str | None = None,
    max_width: float = 8.0,
    annotate: bool = True,
) -> Axes:
    """Bipartite diagram of an attention matrix ``(n_outputs, n_inputs)`` (rows are queries).

    Inputs (keys and values) sit in a column on the left, outputs (one per query)
    on the right. Every pair is joined by a line of width ``max_width * weight``
    in the output's colour: solid for the output's strongest input, dashed for its
    second strongest, thin and dotted for the others. With ``annotate`` the solid
    and dashed lines carry their weight (2 decimals). Returns the axes; call
    ``plt.show()`` after it.
    """
    w = to_numpy(weights).astype(float)
    if w.ndim != 2:
        raise ValueError(f"bipartite_attention expects a 2-D (outputs, inputs) matrix, got shape {tuple(w.shape)}")
    n_out, n_in = w.shape
    output_labels = list(output_labels) if output_labels is not None else [f"z{i + 1}" for i in range(n_out)]
    input_labels = list(input_labels) if input_labels is not None else [f"x{j + 1}" for j in range(n_in)]
    if len(output_labels) != n_out or len(input_labels) != n_in:
        raise ValueError(f"{len(output_labels)} output and {len(input_labels)} input labels for weights of shape {w.shape}")
    ax = ax if ax is not None else plt.gca()
    height = max(n_out, n_in) - 1 or 1
    y_in = np.linspace(height, 0, n_in) if n_in > 1 else np.array([height / 2])
    y_out = np.linspace(height, 0, n_out) if n_out > 1 else np.array([height / 2])
    colors = sns.color_palette(n_colors=max(n_out, 3))
    for i in range(n_out):
        order = np.argsort(-w[i], kind="stable")
        for rank, j in enumerate(order):
            style = "-" if rank == 0 else "--" if rank == 1 else ":"
            width = max(max_width * w[i, j], 0.3 if rank < 2 else 0.15)
            alpha = 0.9 if rank < 2 else 0.35
            ax.plot([0, 1], [y_in[j], y_out[i]], ls=style, lw=width, color=colors[i], alpha=alpha, solid_capstyle="round")
            if annotate and rank < 2:
                t = 0.8 if rank == 0 else 0.6
                ax.text(
                    t,
                    y_in[j] + t * (y_out[i] - y_in[j]),
                    f"{w[i, j]:.2f}",
                    color=colors[i],
                    fontsize="small",
                    ha="center",
                    va="center",
                    bbox=dict(boxstyle="round,pad=0.15", fc="white", ec="none", alpha=0.8),
                )
    ax.scatter(np.zeros(n_in), y_in, s=260, color="0.85", edgecolor="0.3", zorder=3)
    ax.scatter(np.ones(n_out), y_out, s=260, color=[colors[i] for i in range(n_out)], edgecolor="0.3", zorder=3)
    for j, label in enumerate(input_labels):
        ax.text(-0.07, y_in[j], label, ha="right", va="center")
    for i, label in enumerate(output_labels):
        ax.text(1.07, y_out[i], label, ha="left", va="center")
    ax.text(0, height + 0.55, "inputs\n(keys, values)", ha="center", va="bottom", fontsize="small")
    ax.text(1, height + 0.55, "outputs\n(one per query)", ha="center", va="bottom", fontsize="small")
    ax.set_xlim(-0.35, 1.35)
    ax.set_ylim(-0.5, height + 1.3)
    ax.axis("off")
    handles = [
        Line2D([], [], color="0.3", ls="-", lw=2, label="strongest input"),
        Line2D([], [], color="0.3", ls="--", lw=2, label="second strongest"),
        Line2D([], [], color="0.3", ls=":", lw=1, label="others"),
    ]
    ax.legend(handles=handles, loc="upper center", bbox_to_anchor=(0.5, -0.02), ncol=3, fontsize="small", frameon=False)
    if title:
        ax.set_title(title)
    return ax


def values_and_output(
    values: object,
    weights: object,
    ax: Axes | None = None,
    title: str | None = None,
    labels: Sequence[str] | None = None,
) -> Axes:
    """Plot 2-D values ``(m, 2)`` (one row per key) sized by ``weights`` ``(m,)``, and their weighted average.

    The output ``weights @ values`` is a black star, the plain average of the values
    a grey cross. Returns the axes; call ``plt.show()`` after it.
    """
    v = to_numpy(values).astype(float)
    w = to_numpy(weights).astype(float)
    if v.ndim != 2 or v.shape[1] != 2 or w.shape != (v.shape[0],):
        raise ValueError(f"values_and_output expects values (m, 2) and weights (m,), got {v.shape} and {w.shape}")
    ax = ax if ax is not None else plt.gca()
    labels = list(labels) if labels is not None else [f"v{j + 1}" for j in range(v.shape[0])]
    colors = sns.color_palette(n_colors=max(v.shape[0], 3))
    ax.scatter(v[:, 0], v[:, 1], s=40 + 900 * w, color=colors[: v.shape[0]], alpha=0.75, edgecolor="0.2", zorder=2)
    for j, label in enumerate(labels):
        below = v[j, 1] < 0  # labels point away from the centre, where the output moves
        gap = 6 + 0.5 * np.sqrt(40 + 900 * w[j])  # clear the disc, whose area grows with the weight
        ax.annotate(
            f"{label}: {w[j]:.2f}",
            v[j],
            textcoords="offset points",
            xytext=(0, -gap if below else gap),
            ha="center",
            va="top" if below else "bottom",
            fontsize="small",
        )
    mean = v.mean(axis=0)
    out = w @ v
    ax.scatter(*mean, marker="x", s=60, color="0.5", zorder=3, label="average of the values")
    ax.scatter(*out, marker="*", s=220, color="black", zorder=4, label="output H")
    span = np.abs(v).max() * 1.75 or 1.0
    ax.set_xlim(-span, span)
    ax.set_ylim(-span, span)
    ax.set_aspect("equal")
    if title:
        ax.set_title(title)
    return ax
