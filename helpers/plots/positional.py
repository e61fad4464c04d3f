"""Figures of notebooks 04-06 (multi-head attention, positional encoding, layer norm, transformer blocks).

Every function draws one idea and returns the figure; call ``plt.show()`` after it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import matplotlib.pyplot as plt
import numpy as np
import seaborn as sns
from matplotlib.colors import ListedColormap
from matplotlib.figure import Figure
from matplotlib.patches import Rectangle

from helpers.plots.core import attention_heatmap, to_numpy

__all__ = [
    "heads_side_by_side",
    "head_mosaic",
    "head_split_sources",
    "mask_and_attention",
    "attention_cost",
    "positional_encoding_heatmap",
    "wavelengths",
    "encoding_similarity",
    "rotation_circles",
    "norm_axes",
    "position_waves",
    "sublayer_reach",
    "block_diagrams",
    "lr_schedule",
    "sorter_losses",
]


# ------------------------------------------------------------------ notebook 04


def heads_side_by_side(
    weights: object,
    query_labels: Sequence[str],
    key_labels: Sequence[str] | None = None,
    titles: Sequence[str] | None = None,
    suptitle: str | None = None,
    ncols: int | None = None,
    annot: bool = False,
) -> Figure:
    """Attention weights of several heads ``(heads, n, m)``, one panel each, with one shared colorbar.

    Rows are queries, columns keys; ``titles`` names each head (default ``head h``).
    """
    w = to_numpy(weights)
    if w.ndim != 3:
        raise ValueError(f"heads_side_by_side expects (heads, queries, keys), got shape {tuple(w.shape)}")
    heads, n, m = w.shape
    key_labels = list(query_labels) if key_labels is None else list(key_labels)
    ncols = heads if ncols is None else min(ncols, heads)
    nrows = -(-heads // ncols)
    size = 0.32 * max(n, m) + 1.0
    fig, axes = plt.subplots(nrows, ncols, figsize=(size * ncols + 1.2, size * nrows + 0.6), squeeze=False, layout="constrained")
    image = None
    for h, ax in enumerate(axes.flat):
        if h >= heads:
            ax.axis("off")
            continue
        image = ax.imshow(w[h], vmin=0.0, vmax=1.0, cmap="viridis")
        ax.set_xticks(range(m), key_labels, rotation=90 if max(len(k) for k in key_labels) > 2 else 0)
        ax.set_yticks(range(n), list(query_labels))
        ax.set_title(titles[h] if titles is not None else f"head {h}", fontsize="medium")
        if annot:
            for i in range(n):
                for j in range(m):
                    ax.text(
                        j,
                        i,
                        f"{w[h, i, j]:.2f}",
                        ha="center",
                        va="center",
                        fontsize="x-small",
                        color="white" if w[h, i, j] < 0.6 else "black",
                    )
        if h % ncols == 0:
            ax.set_ylabel("query (attending)")
        if h // ncols == nrows - 1 or h + ncols >= heads:
            ax.set_xlabel("key (attended to)")
    fig.colorbar(image, ax=axes, label="attention weight", shrink=0.9)
    if suptitle:
        fig.suptitle(suptitle)
    return fig


def head_mosaic(weights: object, labels: Sequence[str], ncols: int = 6, suptitle: str | None = None) -> Figure:
    """Many heads' attention weights ``(heads, n, n)`` as one mosaic of tiles (one image: quick to draw), one colorbar.

    Tile ``h`` (row-major, ``ncols`` per row) is head ``h``: rows are queries, columns keys, both labelled ``labels``.
    """
    w = to_numpy(weights)
    if w.ndim != 3:
        raise ValueError(f"head_mosaic expects (heads, queries, keys), got shape {tuple(w.shape)}")
    heads, n, m = w.shape
    ncols = min(ncols, heads)
    nrows = -(-heads // ncols)
    mosaic = np.full((nrows * (n + 1) - 1, ncols * (m + 1) - 1), np.nan)
    for h in range(heads):
        r, c = divmod(h, ncols)
        mosaic[r * (n + 1) : r * (n + 1) + n, c * (m + 1) : c * (m + 1) + m] = w[h]
    cmap = plt.get_cmap("viridis").with_extremes(bad="white")
    fig, ax = plt.subplots(figsize=(0.42 * mosaic.shape[1] + 1.6, 0.42 * mosaic.shape[0] + 1.2))
    image = ax.imshow(mosaic, vmin=0.0, vmax=1.0, cmap=cmap)
    for h in range(heads):
        r, c = divmod(h, ncols)
        ax.text(c * (m + 1) + (m - 1) / 2, r * (n + 1) - 0.7, f"head {h}", ha="center", va="bottom", fontsize="small")
    ax.set_xticks([c * (m + 1) + j for c in range(ncols) for j in range(m)], list(labels) * ncols, fontsize="x-small")
    ax.set_yticks([r * (n + 1) + i for r in range(nrows) for i in range(n)], list(labels) * nrows, fontsize="x-small")
    ax.set(xlabel="key (attended to), in each tile", ylabel="query (attending)")
    ax.grid(False)
    for side in ax.spines.values():
        side.set_visible(False)
    fig.colorbar(image, ax=ax, label="attention weight", shrink=0.8)
    if suptitle:
        ax.set_title(suptitle, pad=26)
    fig.tight_layout()
    return fig


def head_split_sources(
    right: object, wrong: object, titles: Sequence[str] = ("view, then transpose", "reshape straight to (heads, n, d_k)")
) -> Figure:
    """Which input token each (head, position) slot holds, for a right and a wrong head split.

    ``right`` and ``wrong`` are ``(heads, n)`` arrays of source-token numbers; a
    cell holding tokens from more than one source (a mix) can be passed as a
    float (e.g. 1.5) and is annotated with one decimal.
    """
    panels = [to_numpy(right), to_numpy(wrong)]
    heads, n = panels[0].shape
    fig, axes = plt.subplots(1, 2, figsize=(9, 0.35 * heads + 1.6), sharey=True)
    for ax, data, title in zip(axes, panels, titles, strict=True):
        fmt = ".0f" if np.allclose(data, np.round(data)) else ".1f"
        sns.heatmap(
            data,
            ax=ax,
            annot=True,
            fmt=fmt,
            cmap=ListedColormap(sns.color_palette("Set2", n)),
            cbar=ax is axes[1],
            cbar_kws={"label": "input token", "ticks": range(n)},
            vmin=-0.5,
            vmax=n - 0.5,
            xticklabels=[f"pos {t}" for t in range(n)],
            yticklabels=[f"head {h}" for h in range(heads)],
        )
        ax.set_title(title)
        ax.set_xlabel("position inside the head")
        ax.tick_params(axis="y", labelrotation=0)
    axes[0].set_ylabel("head")
    fig.suptitle("which input token each head sees at each position", y=1.0)
    fig.tight_layout()
    return fig


def mask_and_attention(mask: object, weights: object, labels: Sequence[str] | None = None, title: str | None = None) -> Figure:
    """A boolean mask ``(n, m)`` (True = may attend) next to the attention weights ``(n, m)`` it produces."""
    m = to_numpy(mask).astype(float)
    w = to_numpy(weights)
    fig, (ax_m, ax_w) = plt.subplots(1, 2, figsize=(9, 3.8))
    sns.heatmap(
        m,
        ax=ax_m,
        cmap=sns.color_palette(["#d9d9d9", "#4c72b0"], as_cmap=True),
        cbar=False,
        linewidths=0.5,
        linecolor="white",
        square=True,
        annot=np.where(m > 0, "T", "F"),
        fmt="",
        xticklabels=labels if labels is not None else "auto",
        yticklabels=labels if labels is not None else "auto",
    )
    ax_m.set(title="mask (T = may attend)", xlabel="keys (attended to)", ylabel="queries (attending)")
    ax_m.tick_params(axis="y", labelrotation=0)
    attention_heatmap(w, labels, labels, ax=ax_w, title="attention weights", cbar=True)
    ax_w.collections[0].colorbar.set_label("attention weight")
    if title:
        fig.suptitle(title)
    fig.tight_layout()
    return fig


def attention_cost(
    lengths: Sequence[int], seconds: Mapping[str, Sequence[float]], megabytes: Mapping[str, Sequence[float]] | None = None
) -> Figure:
    """Log-log time (and peak memory) against sequence length, with an n^2 guide line."""
    n = np.asarray(lengths, dtype=float)
    panels = 1 if megabytes is None else 2
    fig, axes = plt.subplots(1, panels, figsize=(5 * panels, 3.8), squeeze=False)
    for ax, data, ylabel, title in zip(
        axes[0],
        [seconds] + ([megabytes] if megabytes is not None else []),
        ["CPU time per call (s)", "memory added by the call (MiB)"],
        ["both times follow the slope-2 guide (n²)", "naive memory grows like n², fused like n"],
        strict=False,
    ):
        for name, values in data.items():
            ax.loglog(n, values, "o-", label=name)
        first = np.asarray(next(iter(data.values())), dtype=float)
        ax.loglog(n, first[-1] * (n / n[-1]) ** 2, "k:", label="slope 2 (n²)")
        ax.set(xlabel="sequence length n", ylabel=ylabel, title=title)
        ax.set_xticks(n, [f"{int(v)}" for v in n])  # the measured lengths, written out
        ax.xaxis.set_minor_locator(plt.NullLocator())
        ax.legend(fontsize="small")
    fig.tight_layout()
    return fig


# ------------------------------------------------------------------ notebook 05


def positional_encoding_heatmap(pe: object, title: str = "sinusoidal positional encoding") -> Figure:
    """Heatmap of an encoding ``(max_len, d_model)``: positions down, features across."""
    p = to_numpy(pe)
    fig, ax = plt.subplots(figsize=(8, 4))
    sns.heatmap(
        p,
        ax=ax,
        cmap="RdBu_r",
        vmin=-1,
        vmax=1,
        xticklabels=max(1, p.shape[1] // 8),
        yticklabels=max(1, p.shape[0] // 8),
        cbar_kws={"label": "PE[pos, feature]"},
    )
    ax.set(xlabel="feature (even: sin, odd: cos)", ylabel="position", title=title)
    ax.tick_params(axis="y", labelrotation=0)
    fig.tight_layout()
    return fig


def wavelengths(d_model: int, base: float = 10000.0, title: str | None = None) -> Figure:
    """Wavelength 2 pi base^(2i/d_model) of each sin/cos pair i, on a log axis: a geometric progression."""
    i = np.arange(d_model // 2)
    lam = 2 * np.pi * base ** (2 * i / d_model)
    fig, ax = plt.subplots(figsize=(6, 3.6))
    ax.semilogy(i, lam, "o-", ms=3)
    ax.axhline(2 * np.pi, color="gray", ls=":", label="2π")
    ax.axhline(2 * np.pi * base, color="gray", ls="--", label=f"{base:g} · 2π")
    ax.set(
        xlabel="pair index i (features 2i, 2i+1)",
        ylabel="wavelength (positions)",
        title=title or f"wavelengths, d_model = {d_model}",
    )
    ax.legend(fontsize="small")
    fig.tight_layout()
    return fig


def encoding_similarity(
    offsets: object, dots: Mapping[str, object], title: str = "PE(p) · PE(p + k) against the distance k"
) -> Figure:
    """Dot products of two encodings against their distance ``k``, one line per reference position or variant.

    Each line has its own style (solid and wide, dashed, dotted with markers), so that lines that coincide stay visible.
    """
    k = to_numpy(offsets)
    fig, ax = plt.subplots(figsize=(7, 3.6))
    styles = [dict(ls="-", lw=5, alpha=0.35), dict(ls="--", lw=2), dict(ls=":", lw=2, marker="o", ms=3)]
    for i, (name, values) in enumerate(dots.items()):
        ax.plot(k, to_numpy(values), label=name, **styles[i % len(styles)])
    ax.set(xlabel="distance k", ylabel="dot product", title=title)
    ax.legend(fontsize="small")
    fig.tight_layout()
    return fig


def rotation_circles(pe: object, pairs: Sequence[int], shift: int) -> Figure:
    """Each sin/cos pair traces a circle; shifting the position by ``shift`` rotates it by a fixed angle."""
    p = to_numpy(pe)
    fig, axes = plt.subplots(1, len(pairs), figsize=(3.2 * len(pairs), 3.4), squeeze=False)
    for ax, i in zip(axes[0], pairs, strict=True):
        s, c = p[:, 2 * i], p[:, 2 * i + 1]
        ax.plot(s, c, ".", color="#9aa5b8", ms=4)
        for pos in range(0, min(len(s) - shift, 3)):
            ax.annotate(
                "",
                xy=(s[pos + shift], c[pos + shift]),
                xytext=(s[pos], c[pos]),
                arrowprops=dict(arrowstyle="->", color=sns.color_palette()[pos]),
            )
            ax.plot(s[pos], c[pos], "o", color=sns.color_palette()[pos], label=f"pos {pos} → {pos + shift}")
        ax.set(xlabel=f"sin (feature {2 * i})", ylabel=f"cos (feature {2 * i + 1})", title=f"pair i = {i}", aspect="equal")
        ax.set_xlim(-1.2, 1.2)
        ax.set_ylim(-1.2, 1.2)
    axes[0][0].legend(fontsize="x-small", loc="lower left")
    fig.suptitle(f"PE(pos + {shift}) is PE(pos) rotated, pair by pair")
    fig.tight_layout()
    return fig


def norm_axes(batch: int = 3, tokens: int = 4, features: int = 6) -> Figure:
    """Which entries of a (batch, tokens, features) tensor share one mean and variance, layer norm vs batch norm."""
    fig, axes = plt.subplots(1, 2, figsize=(10, 3.6))
    for ax, kind in zip(axes, ("layer norm", "batch norm"), strict=True):
        groups = batch * tokens if kind == "layer norm" else features
        palette = sns.color_palette("husl" if groups > 8 else "Set2", groups)
        gap = 1.0
        for b in range(batch):
            x0 = b * (features + gap)
            for t in range(tokens):
                for f in range(features):
                    if kind == "layer norm":
                        color = palette[b * tokens + t]  # one group per token
                    else:
                        color = palette[f]  # one group per feature, across batch and tokens
                    ax.add_patch(Rectangle((x0 + f, tokens - 1 - t), 1, 1, facecolor=color, edgecolor="white", lw=1.5))
            ax.text(x0 + features / 2, tokens + 0.3, f"sequence {b}", ha="center", va="bottom", fontsize="small")
        ax.set_xlim(-0.3, batch * (features + gap) - gap + 0.3)
        ax.set_ylim(-0.6, tokens + 1.2)
        ax.set_aspect("equal")
        ax.axis("off")
        how = (
            "one colour = one token: statistics over its features"
            if kind == "layer norm"
            else "one colour = one feature: statistics over batch and tokens"
        )
        ax.set_title(f"{kind}\n{how}", fontsize="medium")
        ax.text(-0.3, -0.5, "rows: tokens, columns: features", fontsize="x-small", color="gray")
    fig.tight_layout()
    return fig


def position_waves(pe: object, features: Sequence[int] = (0, 2, 4, 6)) -> Figure:
    """The idea of the sinusoidal encoding: each feature is a wave over the positions, each row a unique pattern.

    Left: the chosen (sine) features of ``pe`` ``(max_len, d_model)`` against the position; right: the whole table.
    """
    p = to_numpy(pe)
    n, d = p.shape
    fig, (ax_w, ax_h) = plt.subplots(1, 2, figsize=(10, 3.4), width_ratios=(1.3, 1))
    for f in features:
        ax_w.plot(np.arange(n), p[:, f], "o-", ms=2.5, lw=1.2, label=f"feature {f}")
    ax_w.set(xlabel="position", ylabel="value", title="each feature is a wave with its own speed", ylim=(-1.15, 1.4))
    ax_w.legend(fontsize="x-small", ncol=len(features), loc="upper center")
    image = ax_h.imshow(p, aspect="auto", cmap="RdBu_r", vmin=-1, vmax=1, interpolation="nearest")
    ax_h.set(xlabel="feature (even: sin, odd: cos)", ylabel="position", title="each position gets its own row")
    ax_h.set_xticks(range(d))
    fig.colorbar(image, ax=ax_h, label="PE[position, feature]")
    fig.tight_layout()
    return fig


# ------------------------------------------------------------------ notebook 06


def sublayer_reach(panels: Mapping[str, object], labels: Mapping[str, tuple[Sequence[str], Sequence[str]]]) -> Figure:
    """How strongly each output token of a sub-layer depends on each input token, one panel per sub-layer.

    ``panels`` maps a title to an ``(n_out, n_in)`` matrix (rows: output tokens, columns: input tokens), scaled so
    that each row's largest entry is 1; ``labels`` gives each panel's (row labels, column labels).
    """
    fig, axes = plt.subplots(1, len(panels), figsize=(3.0 * len(panels) + 1.0, 3.3), squeeze=False, layout="constrained")
    image = None
    for ax, (title, matrix) in zip(axes[0], panels.items(), strict=True):
        r = to_numpy(matrix)
        rows, cols = labels[title]
        image = ax.imshow(r, vmin=0.0, vmax=1.0, cmap="magma")
        ax.set_xticks(range(r.shape[1]), list(cols))
        ax.set_yticks(range(r.shape[0]), list(rows))
        ax.set(title=title, xlabel="input token (read)")
    axes[0][0].set_ylabel("output token")
    fig.colorbar(image, ax=axes, label="|d output / d input| (row max = 1)", shrink=0.9)
    fig.suptitle("which tokens each sub-layer lets a token read")
    return fig


def _draw_block(ax: plt.Axes, items: Sequence[tuple[str, str]], skips: Sequence[tuple[int, int]], title: str) -> None:
    """One encoder block as a column of boxes from the input (bottom) to the output (top), residuals on the left."""
    colors = {"attn": "#c6dbef", "ff": "#fdd0a2", "norm": "#c7e9c0", "io": "white"}
    gap = 1.0
    ys = [i * gap for i in range(len(items))]
    for (label, kind), y in zip(items, ys, strict=True):
        if kind == "add":
            ax.plot(0.5, y, marker="o", ms=20, mfc="white", mec="0.2", mew=1.2, zorder=3)
            ax.text(0.5, y, "+", ha="center", va="center", fontsize=14, zorder=4)
        elif kind == "io":
            ax.text(0.5, y, label, ha="center", va="center", fontsize=13, fontstyle="italic", zorder=4)
        else:
            ax.add_patch(Rectangle((0.22, y - 0.3), 0.56, 0.6, facecolor=colors[kind], edgecolor="0.3", lw=1.0, zorder=3))
            ax.text(0.5, y, label, ha="center", va="center", fontsize="small", zorder=4)
    for below, above in zip(ys[:-1], ys[1:], strict=True):
        ax.annotate(
            "", xy=(0.5, above - 0.32), xytext=(0.5, below + 0.32), arrowprops=dict(arrowstyle="->", color="0.3"), zorder=2
        )
    for start, end in skips:
        y0, y1 = ys[start] + 0.5, ys[end]
        ax.plot([0.5, 0.08, 0.08], [y0, y0, y1], color="#b2182b", lw=1.6, zorder=1)
        ax.annotate("", xy=(0.42, y1), xytext=(0.08, y1), arrowprops=dict(arrowstyle="->", color="#b2182b", lw=1.6), zorder=2)
    ax.set_xlim(-0.05, 1.05)
    ax.set_ylim(-0.6, ys[-1] + 0.6)
    ax.axis("off")
    ax.set_title(title, fontsize="medium")


def block_diagrams() -> Figure:
    """The post-LN and the pre-LN encoder block side by side, the residual connections in red."""
    post = [
        ("x", "io"),
        ("self-attention", "attn"),
        ("+", "add"),
        ("layer norm 1", "norm"),
        ("feed-forward", "ff"),
        ("+", "add"),
        ("layer norm 2", "norm"),
        ("y", "io"),
    ]
    pre = [
        ("x", "io"),
        ("layer norm 1", "norm"),
        ("self-attention", "attn"),
        ("+", "add"),
        ("layer norm 2", "norm"),
        ("feed-forward", "ff"),
        ("+", "add"),
        ("y", "io"),
    ]
    fig, (ax_post, ax_pre) = plt.subplots(1, 2, figsize=(8, 6.4))
    _draw_block(ax_post, post, [(0, 2), (3, 5)], "post-LN (the paper, BERT):\na norm on the residual path")
    _draw_block(ax_pre, pre, [(0, 3), (3, 6)], "pre-LN (GPT-2, ViT):\nthe residual path is additions only")
    fig.suptitle("Where the layer norm sits: after each sum (post-LN) or before each sub-layer (pre-LN)")
    fig.tight_layout()
    return fig


def lr_schedule(steps: object, rates: object, warmup_steps: int, title: str) -> Figure:
    """A learning-rate schedule against the step, with the end of the warm-up marked."""
    fig, ax = plt.subplots(figsize=(6.5, 3.2))
    ax.plot(to_numpy(steps), to_numpy(rates))
    ax.axvline(warmup_steps, color="gray", ls=":", label=f"end of warm-up (step {warmup_steps:,})")
    ax.set(xlabel="training step", ylabel="learning rate", title=title)
    ax.ticklabel_format(axis="y", style="sci", scilimits=(-3, 3))
    ax.legend(fontsize="small")
    fig.tight_layout()
    return fig


def sorter_losses(runs: Mapping[str, object], chance: float, title: str) -> Figure:
    """Training loss against the step, one line per run, with the chance level."""
    fig, ax = plt.subplots(figsize=(7, 3.4))
    for name, losses in runs.items():
        values = to_numpy(losses)
        ax.plot(np.arange(1, len(values) + 1), values, label=name)
    ax.axhline(chance, color="gray", ls=":", label=f"chance (ln 10 = {chance:.2f})")
    ax.set(xlabel="training step", ylabel="cross-entropy", title=title)
    ax.legend(fontsize="small")
    fig.tight_layout()
    return fig
