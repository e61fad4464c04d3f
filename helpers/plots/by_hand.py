"""Figures of notebooks 01-03 (attention shapes, attention by hand, softmax temperature).

- ``query_and_keys``: a query and the keys as arrows in the plane, each key labelled with its score ``q . k``;
- ``values_and_output``: 2-D values as discs sized by their weights, and their weighted average (the output);
- ``bipartite_attention``: inputs on one side, outputs on the other, one line per
  (output, input) pair with its width set by the attention weight; each output's
  strongest input is drawn solid, its second strongest dashed, the rest faint;
- ``product_shapes``: the matrices of a product drawn to scale, one square per entry;
- ``plain_log_ticks``: log-scale axes labelled 0.001, 0.01, 0.1 rather than powers of ten;
- ``beta_slider``: in Jupyter, a slider for the inverse temperature that redraws ``values_and_output`` (notebook 03).
"""

from __future__ import annotations

import io
from collections.abc import Callable, Sequence

import matplotlib.pyplot as plt
import numpy as np
import seaborn as sns
from matplotlib.axes import Axes
from matplotlib.lines import Line2D
from matplotlib.patches import Rectangle

from helpers.plots.core import to_numpy

__all__ = ["bipartite_attention", "values_and_output", "query_and_keys", "product_shapes", "plain_log_ticks", "beta_slider"]


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
    xlabel: str = "value feature 1",
    ylabel: str = "value feature 2",
    output_label: str = "output H",
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
    ax.scatter(*out, marker="*", s=220, color="black", zorder=4, label=output_label)
    span = np.abs(v).max() * 1.75 or 1.0
    ax.set_xlim(-span, span)
    ax.set_ylim(-span, span)
    ax.set_aspect("equal")
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    if title:
        ax.set_title(title)
    return ax


def query_and_keys(
    query: object,
    keys: object,
    ax: Axes | None = None,
    title: str | None = None,
    labels: Sequence[str] | None = None,
) -> Axes:
    """Draw a 2-D query ``(2,)`` and keys ``(m, 2)`` as arrows from the origin, each key labelled with ``q . k``.

    The query is black and thick; key j has the colour of value j in ``values_and_output``. Returns the axes; call
    ``plt.show()`` after it.
    """
    q = to_numpy(query).astype(float).reshape(-1)
    k = to_numpy(keys).astype(float)
    if q.shape != (2,) or k.ndim != 2 or k.shape[1] != 2:
        raise ValueError(f"query_and_keys expects a query (2,) and keys (m, 2), got {q.shape} and {k.shape}")
    ax = ax if ax is not None else plt.gca()
    labels = list(labels) if labels is not None else [f"k{j + 1}" for j in range(k.shape[0])]
    colors = sns.color_palette(n_colors=max(k.shape[0], 3))
    arrow = dict(length_includes_head=True, head_width=0.12, head_length=0.18)

    def label(text: str, tip: np.ndarray, color: object, **kwargs: object) -> None:
        """Write ``text`` just beyond the arrow's tip, on the side it points to."""
        unit = tip / (np.linalg.norm(tip) or 1.0)
        ha = "left" if unit[0] > 0.3 else "right" if unit[0] < -0.3 else "center"
        va = "bottom" if unit[1] > 0.3 else "top" if unit[1] < -0.3 else "center"
        ax.annotate(
            text, tip, textcoords="offset points", xytext=tuple(8 * unit), ha=ha, va=va, fontsize="small", color=color, **kwargs
        )

    for j, key in enumerate(k):
        ax.arrow(0, 0, *key, color=colors[j], width=0.03, **arrow)
        label(f"{labels[j]}: q·k = {q @ key:g}", key, colors[j])
    ax.arrow(0, 0, *q, color="black", width=0.06, **arrow)
    label("query q", q, "black", weight="bold")
    span = max(np.abs(k).max(), np.abs(q).max()) * 1.45 or 1.0
    ax.set_xlim(-span, span)
    ax.set_ylim(-span, span)
    ax.set_aspect("equal")
    ax.set_xlabel("feature 1")
    ax.set_ylabel("feature 2")
    if title:
        ax.set_title(title)
    return ax


def product_shapes(ax: Axes, items: Sequence[object], title: str | None = None, width: float = 20) -> Axes:
    """Draw a matrix product to scale, left to right: one square per entry, so the sizes that meet are visible.

    ``items`` are ``(label, rows, cols, colour)`` tuples for matrices and strings for operators (``"·"``, ``"="``).
    Axes drawn with the same ``width`` share one scale. Returns the axes; call ``plt.show()`` after the figure.
    """
    boxes = [item for item in items if not isinstance(item, str)]
    if not boxes or any(len(item) != 4 for item in boxes):  # type: ignore[arg-type]
        raise ValueError("product_shapes expects (label, rows, cols, colour) tuples and operator strings")
    tallest = max(item[1] for item in boxes)  # type: ignore[index]
    x = 0.0
    for item in items:
        if isinstance(item, str):
            ax.text(x + 0.6, -tallest / 2, item, ha="center", va="center", fontsize=16)
            x += 1.2
            continue
        label, rows, cols, colour = item  # type: ignore[misc]
        ax.add_patch(Rectangle((x, -rows), cols, rows, facecolor=colour, edgecolor="black", alpha=0.5))
        ax.text(x + cols / 2, -rows / 2, f"{label}\n{rows}×{cols}", ha="center", va="center", fontsize=9)
        x += cols + 0.4
    ax.set_xlim(-0.5, width)
    ax.set_ylim(-tallest - 0.5, 0.5)
    ax.set_aspect("equal")
    ax.axis("off")
    if title:
        ax.set_title(title)
    return ax


def plain_log_ticks(*axes: Axes) -> None:
    """Label the log-scale axes of ``axes`` with plain numbers (0.001, 0.1, 10, 1e-14), no minor-tick labels."""
    from matplotlib.ticker import FuncFormatter, NullFormatter

    for ax in axes:
        for axis, scale in ((ax.xaxis, ax.get_xscale()), (ax.yaxis, ax.get_yscale())):
            if scale == "log":
                axis.set_major_formatter(FuncFormatter(lambda value, _: f"{value:g}"))
                axis.set_minor_formatter(NullFormatter())


def beta_slider(attend: Callable[..., tuple[object, object]], K: object, V: object, q: object) -> None:
    """In Jupyter, a slider for beta and the picture of ``values_and_output`` at that beta, redrawn as it moves.

    ``attend(beta, K, V, q)`` returns ``(H, weights)`` in the numerator layout: ``K`` ``(d, m)``, ``V`` ``(2, m)``
    (2-D values), ``q`` ``(d, 1)``, ``weights`` ``(m, 1)``. The slider runs over beta from 0.01 to about 30 on a log
    scale. Built from explicit controls (a slider driving an image), so that it works without a live kernel's
    ``interact``. Displays the widget; without ipywidgets it displays nothing (the static figure shows the same thing).
    """
    try:
        import ipywidgets as widgets
        from IPython.display import display
    except ImportError:
        return

    def picture(beta: float) -> bytes:
        H, weights = attend(beta, K, V, q)  # (2, 1), (m, 1)
        fig, ax = plt.subplots(figsize=(3.6, 3.6))
        output = np.round(to_numpy(H)[:, 0], 2) + 0.0
        values_and_output(to_numpy(V).T, to_numpy(weights)[:, 0], ax=ax, title=f"beta = {beta:.2f}, H = {output}")
        buffer = io.BytesIO()
        fig.savefig(buffer, format="png")
        plt.close(fig)
        return buffer.getvalue()

    slider = widgets.FloatLogSlider(value=1.0, base=10, min=-2, max=1.5, step=0.05, description="beta")
    image = widgets.Image(value=picture(slider.value), format="png")
    slider.observe(lambda change: setattr(image, "value", picture(change["new"])), names="value")
    display(widgets.VBox([slider, image]))
