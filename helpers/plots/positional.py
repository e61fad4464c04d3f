"""Figures of notebooks 04-05 (multi-head attention, positional encoding, layer norm).

Every function draws one idea and returns the figure; call ``plt.show()`` after it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import matplotlib.pyplot as plt
import numpy as np
import seaborn as sns
from matplotlib.figure import Figure
from matplotlib.patches import Rectangle

from helpers.plots.core import attention_heatmap, to_numpy

__all__ = [
    "head_split_sources",
    "mask_and_attention",
    "attention_cost",
    "positional_encoding_heatmap",
    "wavelengths",
    "encoding_similarity",
    "rotation_circles",
    "norm_axes",
]


# ------------------------------------------------------------------ notebook 04


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
            cmap="Set2",
            cbar=False,
            vmin=0,
            vmax=max(n - 1, 1),
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
    attention_heatmap(w, labels, labels, ax=ax_w, title="attention weights", cbar=False)
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
    for ax, data, ylabel in zip(
        axes[0], [seconds] + ([megabytes] if megabytes is not None else []), ["time (s)", "peak memory (MB)"], strict=False
    ):
        for name, values in data.items():
            ax.loglog(n, values, "o-", label=name)
        first = np.asarray(next(iter(data.values())), dtype=float)
        ax.loglog(n, first[-1] * (n / n[-1]) ** 2, "k:", label="slope 2 (n²)")
        ax.set(xlabel="sequence length n", ylabel=ylabel)
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


def wavelengths(d_model: int, base: float = 10000.0) -> Figure:
    """Wavelength 2 pi base^(2i/d_model) of each sin/cos pair i, on a log axis: a geometric progression."""
    i = np.arange(d_model // 2)
    lam = 2 * np.pi * base ** (2 * i / d_model)
    fig, ax = plt.subplots(figsize=(6, 3.6))
    ax.semilogy(i, lam, "o-", ms=3)
    ax.axhline(2 * np.pi, color="gray", ls=":", label="2π")
    ax.axhline(2 * np.pi * base, color="gray", ls="--", label=f"{base:g} · 2π")
    ax.set(xlabel="pair index i (features 2i, 2i+1)", ylabel="wavelength (positions)", title=f"wavelengths, d_model = {d_model}")
    ax.legend(fontsize="small")
    fig.tight_layout()
    return fig


def encoding_similarity(
    offsets: object, dots: Mapping[str, object], title: str = "PE(p) · PE(p + k) against the distance k"
) -> Figure:
    """Dot products of two encodings against their distance ``k``, one line per reference position or variant."""
    k = to_numpy(offsets)
    fig, ax = plt.subplots(figsize=(7, 3.6))
    for name, values in dots.items():
        ax.plot(k, to_numpy(values), label=name)
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
