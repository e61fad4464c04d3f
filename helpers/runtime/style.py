"""The course's plot style, applied by ``setup()`` (and re-exported as ``helpers.plots.set_style``)."""

from __future__ import annotations

__all__ = ["set_style"]


def set_style() -> None:
    """The course's plot style: seaborn's white grid, readable fonts, PNG output."""
    import matplotlib.pyplot as plt
    import seaborn as sns

    sns.set_theme(style="whitegrid", context="notebook")
    plt.rcParams.update({"figure.dpi": 90, "figure.figsize": (6, 4), "axes.titlesize": "medium"})
    try:  # inline backend: PNG only (SVG embeds dates and would break nbval)
        from matplotlib_inline.backend_inline import set_matplotlib_formats

        set_matplotlib_formats("png")
    except ImportError:  # pragma: no cover - outside Jupyter
        pass
