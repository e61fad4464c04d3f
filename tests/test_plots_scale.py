"""The figures of notebook 12 draw what they promise: tile kinds, labelled ticks on log axes, the window's losses."""

from __future__ import annotations

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402

import helpers.plots.scale as scale_plots  # noqa: E402
from helpers.scale.flash import causal_tile_mask, tile_counts  # noqa: E402


def test_tile_map_counts_the_tiles_the_loop_computes():
    fig, ax = plt.subplots()
    scale_plots.tile_map(13, 4, 3, ax=ax)
    computed = tile_counts(13, 13, 4, 3, causal=True)[0]
    assert f"{computed} of 20 computed" in ax.get_title()
    kinds = ax.get_images()[0].get_array()
    assert int((np.asarray(kinds) > 0).sum()) == computed
    fig2, ax2 = plt.subplots()
    scale_plots.tile_map(13, 4, 3, ax=ax2, tile_mask=causal_tile_mask)  # the same tiles through a mask function
    assert np.array_equal(np.asarray(ax2.get_images()[0].get_array()), np.asarray(kinds))
    plt.close("all")


def test_log_axes_carry_readable_labels():
    fig = scale_plots.memory_and_time([512, 1024], {"a": [2**20, 4 * 2**20]}, [512, 1024], {"a": [0.001, 0.004]})
    memory, time = fig.axes
    fig.canvas.draw()
    assert any("MiB" in t.get_text() for t in memory.get_yticklabels())
    assert any("ms" in t.get_text() for t in time.get_yticklabels())
    assert memory.get_xlabel() and memory.get_ylabel() and time.get_ylabel()
    plt.close("all")


def test_a_linear_axis_starts_at_zero_and_units_are_checked():
    ax = scale_plots.cost_curves([256, 4096], {"a": [0.0003, 0.0006]}, "seconds", "t", log_y=False)
    assert ax.get_ylim()[0] == 0
    with pytest.raises(ValueError, match="unit"):
        scale_plots.cost_curves([1], {"a": [1.0]}, "y", "t", unit="furlongs")
    plt.close("all")


def test_window_losses_draws_the_reference_and_the_trained_window():
    ax = scale_plots.window_losses({1: 2.5, 4: 2.4, 16: 2.39}, 2.39, (8, 2.3))
    labels = [t.get_text() for t in ax.get_legend().get_texts()]
    assert len(labels) == 3 and any("window of 8" in label for label in labels)
    assert [t.get_text() for t in ax.get_xticklabels()] == ["1", "4", "16"]
    plt.close("all")


@pytest.mark.parametrize("seconds, text", [(0.02, "20 ms"), (0.0003, "0.3 ms"), (1.5, "1.5 s")])
def test_format_seconds(seconds, text):
    assert scale_plots.format_seconds(seconds) == text
