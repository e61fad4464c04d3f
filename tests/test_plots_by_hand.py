"""The figures of notebooks 02-03 draw what they promise and refuse malformed input."""

from __future__ import annotations

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402

from helpers.plots import bipartite_attention, values_and_output  # noqa: E402


def test_bipartite_draws_one_line_per_pair_with_solid_and_dashed_best_two():
    weights = np.array([[0.7, 0.2, 0.1, 0.0], [0.1, 0.1, 0.3, 0.5]])
    fig, ax = plt.subplots()
    bipartite_attention(weights, ["z1", "z2"], ["a", "b", "c", "d"], ax=ax)
    pair_lines = [line for line in ax.get_lines() if len(line.get_xdata()) == 2]
    assert len(pair_lines) == weights.size
    styles = [line.get_linestyle() for line in pair_lines]
    assert styles.count("-") == 2 and styles.count("--") == 2
    widths = {round(line.get_linewidth(), 6) for line in pair_lines if line.get_linestyle() == "-"}
    assert widths == {round(8 * 0.7, 6), round(8 * 0.5, 6)}
    plt.close(fig)


def test_bipartite_rejects_wrong_shapes():
    with pytest.raises(ValueError, match="2-D"):
        bipartite_attention(np.ones(3))
    with pytest.raises(ValueError, match="labels"):
        bipartite_attention(np.ones((2, 3)) / 3, ["only one"], ["a", "b", "c"])


def test_values_and_output_marks_the_weighted_average():
    values = np.array([[2.0, 0.0], [0.0, 2.0], [-2.0, 0.0]])
    weights = np.array([0.5, 0.25, 0.25])
    fig, ax = plt.subplots()
    values_and_output(values, weights, ax=ax)
    star = ax.collections[-1].get_offsets()[0]
    np.testing.assert_allclose(star, weights @ values)
    plt.close(fig)
    with pytest.raises(ValueError):
        values_and_output(np.ones((3, 3)), np.ones(3) / 3)
