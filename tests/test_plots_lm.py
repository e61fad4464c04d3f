"""The figures of notebook 11 (helpers.plots.lm) draw from the numbers the notebook passes them."""

from __future__ import annotations

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import torch  # noqa: E402

import helpers.plots.lm as lm_plots  # noqa: E402
from helpers.models.lm import LMHistory  # noqa: E402


def test_loss_curves_draw_every_model_and_baseline():
    histories = {"a": LMHistory(steps=[50, 100], val_loss=[2.5, 2.0]), "b": LMHistory(steps=[50, 100], val_loss=[2.7, 1.9])}
    fig = lm_plots.loss_curves(histories, {"uniform": 4.6, "bigram": 2.3}, "title")
    ax = fig.axes[0]
    assert len(ax.lines) == 4 and ax.get_title() == "title"
    assert fig.axes[1].get_ylabel() == "perplexity"
    plt.close(fig)


def test_loss_by_position_plot_averages_buckets():
    fig = lm_plots.loss_by_position_plot({"m": torch.arange(16.0)}, trained=8, bucket=4)
    (line,) = fig.axes[0].lines
    assert list(line.get_ydata()) == [1.5, 5.5, 9.5, 13.5]
    plt.close(fig)


def test_decode_time_plot_has_a_linear_and_a_log_panel():
    fig = lm_plots.decode_time_plot([256, 1024, 4096], [4e-4, 5e-4, 8e-4], [3e-3, 4e-2], fit=(3.8e-4, 1e-7))
    left, right = fig.axes
    assert len(left.lines) == 2 and right.get_xscale() == "log" and len(right.lines[1].get_xdata()) == 2
    plt.close(fig)
