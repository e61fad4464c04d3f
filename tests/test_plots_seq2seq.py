"""helpers.plots.seq2seq: the figures of notebook 09 draw what they are given and refuse what they cannot draw."""

from __future__ import annotations

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import pytest  # noqa: E402
import torch  # noqa: E402

from helpers.models.seq2seq import Seq2SeqHistory  # noqa: E402
from helpers.plots.seq2seq import alignment_maps, exact_match_by_length, seq2seq_curves  # noqa: E402


def test_curves_mark_the_kept_epoch():
    runs = {
        "short": Seq2SeqHistory([1.0, 0.5, 0.4], [1.1, 0.6, 0.5], [0.5, 0.9, 0.95], best_epoch=3),
        "long": Seq2SeqHistory([1.0, 0.8, 0.6, 0.5, 0.45], [1.2, 0.9, 0.7, 0.6, 0.6], [0.4, 0.6, 0.8, 0.9, 0.88], best_epoch=4),
    }
    fig = seq2seq_curves(runs)
    accuracy = fig.axes[1]
    dots = [line for line in accuracy.lines if line.get_marker() == "o" and len(line.get_xdata())]
    assert [tuple(d.get_xdata()) for d in dots] == [(3,), (4,)]
    assert [tuple(d.get_ydata()) for d in dots] == [(95.0,), (90.0,)]
    assert "epoch whose weights were kept" in [t.get_text() for t in accuracy.get_legend().get_texts()]
    plt.close(fig)


def test_exact_match_by_length():
    groups = {"1-3": (1.0, 162), "4": (1.0, 273), "5": (0.975, 281), "6": (0.908, 284)}
    fig = exact_match_by_length({"with attention": groups, "without": {k: (v[0] - 0.05, v[1]) for k, v in groups.items()}})
    ax = fig.axes[0]
    assert [t.get_text() for t in ax.get_xticklabels()] == ["1-3\n(162)", "4\n(273)", "5\n(281)", "6\n(284)"]
    assert list(ax.lines[0].get_ydata()) == pytest.approx([100.0, 100.0, 97.5, 90.8])
    plt.close(fig)
    with pytest.raises(ValueError, match="same length groups"):
        exact_match_by_length({"a": groups, "b": {"4": (1.0, 273)}})


def test_alignment_maps_need_one_of_everything_per_panel():
    with pytest.raises(ValueError, match="as many maps"):
        alignment_maps([torch.eye(3)], [torch.tensor([0, 1, 2])], [["a", "b", "c"]], [["x", "y", "z"]], [])
    fig = alignment_maps([torch.eye(3)], [torch.tensor([0, -1, 2])], [["a", "b", "c"]], [["x", "y", "z"]], ["one"])
    assert len(fig.axes[0].patches) == 2  # the two aligned words ringed
    plt.close(fig)


def test_alignment_maps_share_one_labelled_colorbar():
    fig = alignment_maps(
        [torch.eye(3), torch.eye(3)], [torch.tensor([0, 1, 2])] * 2, [["a", "b", "c"]] * 2, [["x", "y", "z"]] * 2, ["1", "2"]
    )
    assert len(fig.axes) == 3 and fig.axes[-1].get_ylabel() == "attention weight"
    assert fig.axes[0].get_ylabel() == "German word predicted" and fig.axes[0].get_xlabel() == "English word read"
    plt.close(fig)
    fig = alignment_maps([torch.eye(3)], [torch.tensor([0, 1, 2])], [["a", "b", "c"]], [["x", "y", "z"]], ["1"], cbar_label=None)
    assert len(fig.axes) == 1
    plt.close(fig)
