"""Notebooks 04-06's small tools: rounded printing, the memory a call adds, and the figures of 05 and 06."""

from __future__ import annotations

import matplotlib

matplotlib.use("Agg")

import sys  # noqa: E402

import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402
import torch  # noqa: E402

import helpers.plots as plots  # noqa: E402
from helpers.plots.memory import resident_peak_mib  # noqa: E402
from helpers.plots.printing import rounded, show_values  # noqa: E402


def test_show_values_prints_a_vector_on_its_label_line_without_dtype_or_grad(capsys):
    x = torch.tensor([0.00244, -0.00001, 0.98781], dtype=torch.float64, requires_grad=True) * 1  # has a grad_fn
    show_values("weights:", x)
    assert capsys.readouterr().out == "weights: [0.0024 0.0000 0.9878]\n"  # -0.0000 printed as 0.0000


def test_show_values_prints_a_matrix_below_its_label_and_booleans_as_such(capsys):
    show_values("mask:", torch.tril(torch.ones(2, 2, dtype=torch.bool)))
    show_values("w:", np.array([[1.0, float("nan")], [-float("inf"), 0.5]]))
    out = capsys.readouterr().out.splitlines()
    assert out[0] == "mask:" and out[1] == "[[ True False]" and out[2] == " [ True  True]]"
    assert out[3] == "w:" and "nan" in out[4] and "-inf" in out[5]


def test_rounded_refuses_what_is_not_a_number():
    assert rounded(torch.arange(3)) == "[0 1 2]"
    with pytest.raises(TypeError, match="numbers or booleans"):
        rounded(np.array(["a", "b"]))


def test_resident_peak_counts_a_large_allocation_or_says_none():
    peak = resident_peak_mib(lambda: torch.ones(4 * 2**20 // 4 * 16))  # 16 MiB of float32, filled
    if not sys.platform.startswith("linux"):
        assert peak is None
    elif peak is not None:  # None where the container forbids writing /proc/self/clear_refs
        assert 15.0 <= peak <= 64.0, peak


def test_resident_peak_returns_none_when_the_system_does_not_say(monkeypatch):
    def forbidden(*args, **kwargs):
        raise PermissionError("/proc/self/clear_refs")

    import builtins

    monkeypatch.setattr(builtins, "open", forbidden)
    assert resident_peak_mib(lambda: torch.ones(10)) is None


def test_resident_peak_lets_the_callers_own_error_through():
    def broken():
        raise ValueError("the caller's own bug")

    if sys.platform.startswith("linux") and resident_peak_mib(lambda: None) is not None:
        with pytest.raises(ValueError, match="own bug"):
            resident_peak_mib(broken)


def test_block_diagrams_draw_both_blocks_with_their_residuals():
    fig = plots.block_diagrams()
    ax_post, ax_pre = fig.axes
    for ax in (ax_post, ax_pre):
        labels = [t.get_text() for t in ax.texts]
        assert labels.count("+") == 2 and "self-attention" in labels and "feed-forward" in labels
        red = [line for line in ax.get_lines() if line.get_color() == "#b2182b"]
        assert len(red) == 2  # one residual around each sub-layer
    assert "post-LN" in ax_post.get_title() and "pre-LN" in ax_pre.get_title()
    plt.close(fig)


def test_encoding_similarity_keeps_coinciding_lines_visible():
    k = torch.arange(5)
    same = torch.linspace(4, 1, 5)
    fig = plots.encoding_similarity(
        k, {"p = 0": same, "p = 10": same, "p = 31": same}, title="three curves, one on top of the other"
    )
    lines = fig.axes[0].get_lines()
    assert len({(line.get_linestyle(), line.get_linewidth()) for line in lines}) == 3
    assert fig.axes[0].get_title() == "three curves, one on top of the other"
    plt.close(fig)


def test_wavelengths_takes_a_title():
    fig = plots.wavelengths(16, title="a straight line on a log scale")
    assert fig.axes[0].get_title() == "a straight line on a log scale"
    plt.close(fig)
