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


def test_values_and_output_labels_its_axes():
    fig, ax = plt.subplots()
    values_and_output(np.array([[1.0, 0.0], [0.0, 1.0]]), np.array([0.5, 0.5]), ax=ax)
    assert ax.get_xlabel() and ax.get_ylabel()
    plt.close(fig)


def test_query_and_keys_draws_one_arrow_per_vector_and_labels_the_scores():
    from helpers.plots import query_and_keys

    keys = np.array([[2.0, 1.0], [0.0, 1.0], [-1.0, -1.0]])
    fig, ax = plt.subplots()
    query_and_keys(np.array([1.0, 1.0]), keys, ax=ax)
    assert len(ax.patches) == 4  # three keys and the query
    texts = [t.get_text() for t in ax.texts]
    assert "k1: q·k = 3" in texts and "k3: q·k = -2" in texts
    assert ax.get_xlabel() and ax.get_ylabel()
    plt.close(fig)
    with pytest.raises(ValueError, match="query"):
        query_and_keys(np.ones(3), keys)


def test_product_shapes_draws_each_matrix_to_scale():
    from helpers.plots import product_shapes

    fig, ax = plt.subplots()
    product_shapes(ax, [("Q", 3, 5, "tab:blue"), "·", ("Kᵀ", 5, 4, "tab:orange"), "=", ("S", 3, 4, "tab:purple")], "scores")
    sizes = [(p.get_height(), p.get_width()) for p in ax.patches]
    assert sizes == [(3, 5), (5, 4), (3, 4)]
    assert ax.get_title() == "scores"
    plt.close(fig)
    with pytest.raises(ValueError):
        product_shapes(ax, ["·"])


def test_plain_log_ticks_label_log_axes_with_plain_numbers():
    from helpers.plots import plain_log_ticks

    fig, ax = plt.subplots()
    ax.loglog([0.001, 1.0], [1.0, 100.0])
    plain_log_ticks(ax)
    fig.canvas.draw()
    labels = {t.get_text() for t in ax.get_xticklabels()}
    assert "0.01" in labels and not any("mathdefault" in label for label in labels)
    plt.close(fig)


def test_beta_slider_displays_a_slider_that_redraws_the_picture(monkeypatch):
    import IPython.display
    import torch

    from helpers.attention import softargmax_attention
    from helpers.plots import beta_slider

    plt.close("all")  # a figure another test of this worker left open is not this one's
    shown = []
    monkeypatch.setattr(IPython.display, "display", shown.append)
    K = torch.tensor([[1.0, 0.0, -1.0, 1.0], [0.0, 1.0, 0.0, 1.0]], dtype=torch.float64)  # (2, 4)
    V = torch.tensor([[2.0, 0.0, -2.0, 0.0], [0.0, 2.0, 0.0, -2.0]], dtype=torch.float64)  # (2, 4)
    q = torch.tensor([[2.0], [1.0]], dtype=torch.float64)  # (2, 1)
    assert beta_slider(softargmax_attention, K, V, q) is None
    (box,) = shown
    slider, image = box.children
    first = bytes(image.value)
    assert first.startswith(b"\x89PNG")
    slider.value = 20.0  # the picture follows the slider
    assert bytes(image.value).startswith(b"\x89PNG") and bytes(image.value) != first
    assert plt.get_fignums() == []  # every picture's figure is closed
