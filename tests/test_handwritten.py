"""helpers.handwritten.program and helpers.handwritten.evaluate: the layout, the blocks, the reference programs, the evaluation."""

from __future__ import annotations

import math

import matplotlib
import pytest
import torch

import helpers.handwritten.evaluate as E
import helpers.handwritten.program as H
from helpers.blocks import EncoderBlock

matplotlib.use("Agg")

# ---------------------------------------------------------------- layout and embedding


def test_layout_slots_are_disjoint_and_fill_d_model():
    for layout in (H.LAYOUT, H.Layout.make(("out", "pos2", "count", "tok", "frac", "one", "bos", "pos"))):
        covered = sorted(i for name in layout.order for i in range(layout.slot(name).start, layout.slot(name).stop))
        assert covered == list(range(layout.d_model)) == list(range(31))
        assert all(layout.slot(n).stop - layout.slot(n).start == w for n, w in H.SLOT_WIDTHS.items())
        assert len(layout.labels()) == 31 and "pos²" in layout.labels()
    assert H.LAYOUT.tok == slice(0, 10) and H.LAYOUT.pos == 12 and H.LAYOUT.out == slice(21, 31)


def test_layout_refuses_an_order_that_misses_a_slot():
    with pytest.raises(ValueError, match="each slot once"):
        H.Layout.make(("tok", "bos"))


def test_embed_writes_bos_tokens_and_positions():
    x = H.embed(torch.tensor([[7, 2, 9, 0, 4]]))  # (1, 6, 31)
    L = H.LAYOUT
    assert x.shape == (1, 6, 31) and x.dtype == torch.float32
    assert x[0, :, L.bos].tolist() == [1, 0, 0, 0, 0, 0]
    assert x[0, 0, L.tok].sum() == 0 and x[0, 1:, L.tok].argmax(-1).tolist() == [7, 2, 9, 0, 4]
    assert x[0, :, L.pos].tolist() == [0, 1, 2, 3, 4, 5] and x[0, :, L.pos2].tolist() == [0, 1, 4, 9, 16, 25]
    assert (x[0, :, L.one] == 1).all() and (x[0, :, L.frac] == 0).all() and (x[0, :, L.out] == 0).all()
    assert H.embed(torch.zeros(2, 5, dtype=torch.long), dtype=torch.float64).dtype == torch.float64


@pytest.mark.parametrize("tokens", [torch.zeros(2, 4, dtype=torch.long), torch.full((1, 5), 10), torch.full((1, 5), -1)])
def test_embed_refuses_bad_tokens(tokens):
    with pytest.raises(ValueError):
        H.embed(tokens)


def test_hand_block_is_the_course_block_without_norms_and_with_zero_weights():
    block = H.hand_block()
    assert isinstance(block, EncoderBlock) and block.norm_first and block.self_attn.num_heads == 1
    assert isinstance(block.norm1, torch.nn.Identity) and isinstance(block.norm2, torch.nn.Identity)
    assert all((p == 0).all() for p in block.parameters())
    x = torch.randn(2, 6, 31)
    torch.testing.assert_close(block(x), x, atol=0, rtol=0)  # every sub-layer adds zero


# ---------------------------------------------------------------- the programs, exact on their domains


def test_domains():
    every, distinct = E.all_sequences(), E.distinct_sequences()
    assert every.shape == (100_000, 5) and distinct.shape == (30_240, 5)
    assert every[0].tolist() == [0] * 5 and every[-1].tolist() == [9] * 5 and every[123].tolist() == [0, 0, 1, 2, 3]
    assert len({tuple(r) for r in every.tolist()}) == 100_000
    assert all(len(set(r)) == 5 for r in distinct.tolist())


def test_specs():
    tokens = torch.tensor([[3, 3, 1, 3, 7]])
    assert H.reverse_of(tokens).tolist() == [[7, 3, 1, 3, 3]]
    assert H.histogram_of(tokens).tolist() == [[3, 3, 1, 3, 1]]
    assert H.sort_of(tokens).tolist() == [[1, 3, 3, 3, 7]]


@pytest.mark.parametrize(
    "build, domain, spec",
    [
        (H.build_reverse, "every", H.reverse_of),
        (H.build_histogram, "every", H.histogram_of),
        (H.build_sort, "distinct", H.sort_of),
    ],
)
def test_reference_programs_are_exact_on_their_whole_domain(build, domain, spec):
    tokens = E.all_sequences() if domain == "every" else E.distinct_sequences()
    model = build()
    result = E.evaluate(model, tokens, spec)
    assert result.exact and str(result) == f"{len(tokens)} of {len(tokens)} correct"
    assert result.positions_correct == result.positions_total == 5 * len(tokens)
    assert result.worst_margin > 0.99
    assert E.logit_error(model, tokens[:3000]) < 1e-6


@pytest.mark.parametrize("build", [H.build_reverse, H.build_histogram, H.build_sort])
def test_reference_programs_are_exact_in_another_layout(build):
    layout = H.Layout.make(("out", "pos2", "count", "tok", "frac", "one", "bos", "pos"))
    tokens = E.distinct_sequences()[::7]
    spec = {H.build_reverse: H.reverse_of, H.build_histogram: H.histogram_of, H.build_sort: H.sort_of}[build]
    assert E.evaluate(build(layout=layout), tokens, spec).exact


def test_sort_layer_1_writes_the_number_of_smaller_tokens():
    tokens = E.distinct_sequences()[::97]
    stream = H.build_sort().residuals(tokens)[1]  # (b, 6, 31)
    smaller = (tokens[:, None, :] < tokens[:, :, None]).sum(-1)
    assert torch.equal(stream[:, 1:, H.LAYOUT.count].argmax(-1), smaller)
    torch.testing.assert_close(stream[:, 1:, H.LAYOUT.frac], 1 / (1 + smaller.float()), atol=1e-6, rtol=0)


def test_a_wrong_model_is_counted_and_its_margin_is_negative():
    model = H.build_reverse(selector=lambda attn, layout, scale: None)  # uniform attention: out = the mean token
    result = E.evaluate(model, E.all_sequences()[::50], H.reverse_of)
    assert not result.exact and result.worst_margin < 0


# ---------------------------------------------------------------- the table, the leak, the scale bound


def test_the_count_table_is_its_steps_then_its_one_hot():
    whole, parts = H.hand_block().ff, H.hand_block().ff
    H.write_count_table(whole)
    H.count_table(H.write_steps, H.write_one_hot)(parts)
    for a, b in zip(whole.parameters(), parts.parameters(), strict=True):
        assert torch.equal(a, b)
    steps_only = H.hand_block().ff
    H.write_steps(steps_only)
    assert not steps_only.linear2.weight.any() and steps_only.linear1.weight.any()


def test_describe_rows_names_the_slots():
    block = H.hand_block()
    H.write_reverse_selector(block.self_attn)
    c = H.SCALE * math.sqrt(block.self_attn.d_k)
    assert H.describe_rows(block.self_attn.w_q.weight, H.LAYOUT, c, "c") == ["row 0 = c (12 one - 2 pos)", "row 1 = -c one"]
    assert H.describe_rows(block.self_attn.w_k.weight) == ["row 0 = pos", "row 1 = pos²"]
    block = H.hand_block()
    H.write_same_token_selector(block.self_attn)
    assert H.describe_rows(block.self_attn.w_k.weight) == ["rows 0-9 = tok 0 .. tok 9, one each", "row 10 = bos"]


def test_table_values_and_thresholds():
    assert H.table_values().tolist() == pytest.approx([1, 1 / 2, 1 / 3, 1 / 4, 1 / 5, 1 / 6])
    assert H.table_thresholds().tolist() == pytest.approx([0.75, 5 / 12, 7 / 24, 9 / 40, 11 / 60])


def test_selector_leak_matches_the_module_and_the_bound():
    for scale in (1.0, 5.0, 20.0):
        block = H.hand_block().double()
        H.write_reverse_selector(block.self_attn, H.LAYOUT, scale)
        with torch.no_grad():
            block(H.embed(torch.tensor([[1, 2, 3, 4, 5]]), dtype=torch.float64))
        leak = (1 - block.attn_weights[0, 0, 1:].amax(-1)).max().item()
        assert leak == pytest.approx(E.selector_leak(scale), rel=1e-9)
        assert leak <= 2 * math.exp(-scale) * (1 + 1e-6)


def test_smallest_safe_scale_puts_frac_on_the_edge_of_the_flat_part():
    bound = E.smallest_safe_scale([0])
    frac = 1 / (1 + 5 * math.exp(-bound))  # count 0: BOS alone selected, 5 keys leak
    assert frac == pytest.approx(H.table_thresholds()[0].item() + 1 / (2 * H.SHARPNESS))
    assert E.smallest_safe_scale(range(1, 6)) == pytest.approx(2.3764, abs=1e-4)
    assert E.smallest_safe_scale(range(0, 5)) == pytest.approx(2.7349, abs=1e-4)
    assert E.smallest_safe_scale([5]) == 0.0  # all keys selected: no leak


def test_the_scale_bound_is_where_the_histogram_stays_exact():
    tokens = E.all_sequences()[::13]
    assert E.evaluate(H.build_histogram(2.4), tokens, H.histogram_of).exact
    assert E.evaluate(H.build_sort(2.75), E.distinct_sequences()[::13], H.sort_of).exact


# ---------------------------------------------------------------- robustness and training


def test_perturbed_relative_keeps_zeros_and_absolute_does_not():
    model = H.build_reverse()
    rel = E.perturbed(model, 0.1, torch.Generator().manual_seed(0))
    ab = E.perturbed(model, 0.1, torch.Generator().manual_seed(0), relative=False)
    for (name, p), q, r in zip(model.named_parameters(), rel.parameters(), ab.parameters(), strict=True):
        assert torch.equal(q == 0, p == 0), name
        assert bool((r != 0).all()), name
    same = E.perturbed(model, 0.0, torch.Generator())
    assert all(torch.equal(p, q) for p, q in zip(model.parameters(), same.parameters(), strict=True))


def test_sweeps_have_one_value_per_setting():
    tokens = E.all_sequences()[::500]
    by_scale = E.scale_sweep(H.build_reverse, tokens, H.reverse_of, [0.5, 20.0])
    assert len(by_scale) == 2 and by_scale[1] == 1.0 and by_scale[0] < 1.0
    noise = E.noise_sweep(H.build_reverse(), tokens, H.reverse_of, [0.0, 1.0], seeds=(0, 1))
    assert noise.shape == (2, 2) and (noise[0] == 1.0).all()


def test_evaluate_loss_of_an_exact_program_is_ln_e_plus_9_minus_1():
    result = E.evaluate(H.build_sort(), E.distinct_sequences()[::11], H.sort_of)
    assert result.loss == pytest.approx(math.log(math.e + 9) - 1, abs=1e-6)


def test_fine_tune_records_history_and_is_capped_in_smoke_runs(monkeypatch):
    tokens = E.distinct_sequences()[::31]
    model = H.build_sort()
    history = E.fine_tune(model, tokens, H.sort_of, steps=6, lr=1e-4, eval_every=3)
    assert history["step"] == [0, 3, 6] and len(history["loss"]) == 6
    assert history["correct"][0] == len(tokens) and history["domain_loss"][0] == pytest.approx(1.4612, abs=1e-4)
    sgd = E.fine_tune(H.build_sort(), tokens, H.sort_of, steps=3, lr=1e-3, eval_every=3, optimizer="sgd")
    assert sgd["step"] == [0, 3] and sgd["correct"][0] == len(tokens)
    with pytest.raises(ValueError, match="optimizer"):
        E.fine_tune(H.build_sort(), tokens, H.sort_of, steps=3, optimizer="rmsprop")
    monkeypatch.setenv("COURSE_SMOKE_TEST", "1")
    history = E.fine_tune(H.build_sort(), tokens, H.sort_of, steps=200, eval_every=50)
    assert history["step"] == [0, 4] and len(history["loss"]) == 4


# ---------------------------------------------------------------- figures


def test_figures_draw():
    import matplotlib.pyplot as plt

    import helpers.plots.handwritten as hand_plots

    model = H.build_sort()
    streams = [s[0] for s in model.residuals(torch.tensor([[7, 2, 9, 0, 4]]))]
    fig = hand_plots.residual_streams(streams, H.LAYOUT, ["a", "b", "c"], ["BOS", "1", "2", "3", "4", "5"])
    assert len(fig.axes) == 4  # three streams and their one colorbar
    assert fig.axes[-1].get_ylabel() == "feature value (log scale)"
    grid = torch.linspace(0.1, 1.05, 50)
    fig2 = hand_plots.count_table(grid, torch.rand(50, 6), H.table_values(), H.table_thresholds())
    fig3 = hand_plots.robustness_curves([1, 2], {"a": [0.5, 1.0]}, [0.1, 1.0], {"a": torch.rand(2, 3)})
    fig4 = hand_plots.fine_tune_curves({"a": {"step": [0, 1], "domain_loss": [1.0, 0.5], "correct": [3, 2]}}, 3)
    for f in (fig, fig2, fig3, fig4):
        plt.close(f)
