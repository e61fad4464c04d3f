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


def test_upgrades_plot_draws_every_run_the_medians_and_the_notebooks_own():
    measured = {"2017": [2.1, 2.0, 2.05], "+ RoPE": [1.9, 1.95, 1.92], "2025": [1.85, 1.9, 1.88]}
    fig = lm_plots.upgrades_plot(measured, {"2017": 2.02, "2025": 1.87}, {"bigram counts": 2.38})
    ax = fig.axes[0]
    assert [t.get_text() for t in ax.get_xticklabels()] == list(measured)
    assert len(ax.collections) == 3 + 3 + 1  # a scatter and a median bar per stage, the stars
    assert len(ax.lines) == 1 and ax.get_ylabel().startswith("validation loss")
    plt.close(fig)


def test_rope_scores_plot_has_a_colorbar_and_marks_the_diagonals():
    fig = lm_plots.rope_scores_plot(torch.randn(10, 10), offsets=[3, 0])
    assert len(fig.axes) == 2 and len(fig.axes[0].lines) == 2
    (x, y) = fig.axes[0].lines[0].get_data()
    assert list(y - x) == [3] * 7
    plt.close(fig)


def test_sampling_rules_plot_has_a_panel_per_rule_and_marks_dropped_tokens():
    fig = lm_plots.sampling_rules_plot({"T = 1": [0.5, 0.3, 0.2], "top-k, k = 2": [0.6, 0.4, 0.0]})
    assert [ax.get_title() for ax in fig.axes] == ["T = 1", "top-k, k = 2"]
    assert len(fig.axes[1].collections[0].get_offsets()) == 1  # one dropped token marked
    plt.close(fig)


def test_cached_mask_plot_shows_the_bottom_right_mask_with_a_colorbar():
    fig = lm_plots.cached_mask_plot(3, 5)
    ax, bar = fig.axes
    visible = ax.images[0].get_array()
    assert visible.shape == (3, 5) and visible.sum() == 3 + 4 + 5  # query i sees keys 0 .. 2 + i
    assert [t.get_text() for t in bar.get_yticklabels()] == ["hidden", "visible"]
    plt.close(fig)


def test_plots_take_the_labels_the_notebook_gives():
    fig = lm_plots.upgrades_plot({"a": [1.0, 1.1], "b": [0.9, 1.0]}, {}, labels={"a": "a\n(two changes)"})
    assert [t.get_text() for t in fig.axes[0].get_xticklabels()] == ["a\n(two changes)", "b"]
    plt.close(fig)
    fig = lm_plots.decode_time_plot([256, 1024], [4e-4, 5e-4], [3e-3], ylabel="CPU ms per token (one thread)")
    assert fig.axes[0].get_ylabel() == "CPU ms per token (one thread)"
    plt.close(fig)
    fig = lm_plots.loss_by_position_plot({"m": torch.arange(16.0)}, trained=8, bucket=4, title="t")
    assert fig.axes[0].get_title() == "t" and "mean over 4 positions" in fig.axes[0].get_ylabel()
    plt.close(fig)
