"""The attention-only transformer of notebook 13 and its tools (helpers.models.induction)."""

from __future__ import annotations

import math

import pytest
import torch

from helpers.attention import merge_heads, scaled_dot_product_attention, split_heads
from helpers.data.induction import held_out_set, repeated_half_mask, repeated_tokens
from helpers.models.induction import (
    AttentionOnlyLM,
    InductionHistory,
    ablate_head,
    composition_baseline,
    composition_scores,
    copying_score,
    direct_logit_attribution,
    duplicate_token_score,
    head_ablation_losses,
    head_weights,
    ideal_patterns,
    induction_qk_circuit,
    induction_score,
    lm_patterns,
    ov_circuit,
    path_ablation_losses,
    per_position_loss,
    phase_change,
    positional_pattern,
    prev_token_score,
    qk_circuit,
    repeated_half_loss,
    train_induction,
)


def model64(heads=(2, 1), seed=0, positions="learned"):
    torch.manual_seed(seed)
    return AttentionOnlyLM(11, d_model=8, num_heads=heads, num_layers=len(heads), max_len=21, positions=positions).double()


def test_shapes_and_patterns():
    model = model64()
    ids = repeated_tokens(3, 6, 10)  # (3, 13)
    logits, patterns = model.run_with_patterns(ids)
    assert logits.shape == (3, 13, 11)
    assert [tuple(p.shape) for p in patterns] == [(3, 2, 13, 13), (3, 1, 13, 13)]
    for p in patterns:
        torch.testing.assert_close(p.sum(-1), torch.ones(p.shape[:-1], dtype=p.dtype), atol=1e-12, rtol=0)
        assert (p.triu(1) == 0).all()  # causal


@pytest.mark.parametrize("positions", ["learned", "sinusoidal"])
def test_fused_forward_matches_the_decomposed_one(positions):
    model = model64(positions=positions)
    ids = repeated_tokens(2, 5, 10)
    with torch.no_grad():
        torch.testing.assert_close(model(ids), model.run_with_patterns(ids)[0], atol=1e-12, rtol=0)
        # an edit that changes nothing, and empty paths, give the same logits
        torch.testing.assert_close(model(ids, edit={0: lambda z: z}), model(ids), atol=1e-12, rtol=0)
        torch.testing.assert_close(model(ids, paths={(1, "k"): []}), model(ids), atol=1e-12, rtol=0)


def test_each_layer_is_the_course_attention():
    model = model64(heads=(2, 2))
    ids = repeated_tokens(2, 5, 10)
    x = model.embed_ids(ids)
    mask = torch.ones(11, 11, dtype=torch.bool).tril()
    with torch.no_grad():
        out, weights = model.layers[0](x, x, x, mask)
        _, patterns = model.run_with_patterns(ids)
        torch.testing.assert_close(patterns[0], weights, atol=1e-12, rtol=0)
        attn = model.layers[0]
        z, _ = scaled_dot_product_attention(
            split_heads(attn.w_q(x), 2), split_heads(attn.w_k(x), 2), split_heads(attn.w_v(x), 2), mask
        )
        torch.testing.assert_close(model.head_outputs(0, z).sum(1), attn.w_o(merge_heads(z)), atol=1e-12, rtol=0)
        torch.testing.assert_close(out, attn.w_o(merge_heads(z)), atol=1e-12, rtol=0)


def test_zero_ablation_removes_the_head_from_the_stream():
    model = model64(heads=(2, 1))
    ids = repeated_tokens(2, 5, 10)
    with torch.no_grad():
        ablated = model(ids, edit={0: lambda z: ablate_head(z, 1, "zero")})
        w_o = model.layers[0].w_o.weight.clone()
        model.layers[0].w_o.weight[:, 4:] = 0  # head 1's columns of W_O (d_k = 4)
        torch.testing.assert_close(ablated, model(ids), atol=1e-12, rtol=0)
        model.layers[0].w_o.weight.copy_(w_o)


def test_paths_remove_a_head_from_one_input_only():
    model = model64(heads=(2, 1))
    ids = repeated_tokens(2, 5, 10)
    with torch.no_grad():
        # removing both layer-0 heads from all of layer 1's inputs: layer 1 reads the embeddings alone
        both = [(0, 0), (0, 1)]
        logits = model(ids, paths={(1, p): both for p in "qkv"})
        x0 = model.embed_ids(ids)
        mask = torch.ones(11, 11, dtype=torch.bool).tril()
        layer0 = model.layers[0](x0, x0, x0, mask)[0]
        layer1 = model.layers[1](x0, x0, x0, mask)[0]
        torch.testing.assert_close(logits, model.unembed(x0 + layer0 + layer1), atol=1e-12, rtol=0)
        with pytest.raises(ValueError, match="earlier layer"):
            model(ids, paths={(0, "k"): [(0, 1)]})
        losses = path_ablation_losses(model, ids, 5, (0, 0))
        assert set(losses) == {"none", "q", "k", "v", "qkv"}


def test_scores_of_perfect_heads():
    n, period = 9, 4
    prev = torch.zeros(1, 1, n, n, dtype=torch.float64)
    prev[0, 0, 0, 0] = 1
    prev[0, 0, torch.arange(1, n), torch.arange(n - 1)] = 1
    assert prev_token_score(prev).tolist() == [1.0]
    ind = torch.zeros(1, 1, n, n, dtype=torch.float64)
    ind[0, 0, :, 0] = 1  # BOS
    queries = torch.arange(n - period, n)
    ind[0, 0, queries] = 0
    ind[0, 0, queries, queries - period + 1] = 1
    assert induction_score(ind, period).tolist() == [1.0]
    assert duplicate_token_score(ind, period).tolist() == [0.0]
    assert prev_token_score(ind).item() < 0.2


def test_scores_loop_definition():
    torch.manual_seed(0)
    p = torch.randn(2, 3, 11, 11, dtype=torch.float64).masked_fill(~torch.ones(11, 11).tril().bool(), -math.inf).softmax(-1)
    loop_prev = torch.stack([torch.stack([p[:, h, i, i - 1] for i in range(1, 11)]).mean() for h in range(3)])
    torch.testing.assert_close(prev_token_score(p), loop_prev, atol=1e-14, rtol=0)
    period = 5
    loop_ind = torch.stack([torch.stack([p[:, h, i, i - period + 1] for i in range(11 - period, 11)]).mean() for h in range(3)])
    torch.testing.assert_close(induction_score(p, period), loop_ind, atol=1e-14, rtol=0)


def test_ablate_head_semantics():
    z = torch.randn(3, 4, 5, 6, dtype=torch.float64)
    before = z.clone()
    zero, mean = ablate_head(z, 2, "zero"), ablate_head(z, 2, "mean")
    assert torch.equal(z, before)  # not in place
    assert (zero[:, 2] == 0).all() and torch.equal(zero[:, [0, 1, 3]], z[:, [0, 1, 3]])
    torch.testing.assert_close(mean[:, 2], z[:, 2].mean(0, keepdim=True).expand(3, 5, 6))
    assert torch.equal(mean[:, [0, 1, 3]], z[:, [0, 1, 3]])
    with pytest.raises(ValueError, match="how"):
        ablate_head(z, 0, "random")


def test_losses_and_ablation_table():
    model = model64(heads=(2, 1))
    ids = held_out_set(4, 5, 10)
    with torch.no_grad():
        logits = model(ids)
    per_pos = per_position_loss(logits, ids)
    assert per_pos.shape == (4, 10)
    torch.testing.assert_close(repeated_half_loss(logits, ids, 5), per_pos[:, 6:].mean())
    table = head_ablation_losses(model, ids, 5, "zero")
    assert table.shape == (2, 2) and torch.isnan(table[1, 1]) and not torch.isnan(table[:, 0]).any()


def test_composition_scores_are_bounded():
    model = model64(heads=(2, 2))
    for kind in "qkv":
        scores = composition_scores(model, kind)
        assert scores.shape == (2, 2) and (scores >= 0).all() and (scores <= 1 + 1e-12).all()


def test_composition_baseline_is_what_random_matrices_score():
    baseline = composition_baseline(32, 16, 32, samples=50)
    assert 0.1 < baseline < 0.3  # about 1 / sqrt(32) for full-rank products
    assert composition_baseline(32, 16, 32, samples=50) == baseline  # seeded


def test_head_weights_are_the_heads_slices():
    model = model64(heads=(2, 1))
    w = head_weights(model, 0, 1)
    attn = model.layers[0]
    assert w["w_q"].shape == (4, 8) and w["w_o"].shape == (8, 4)
    assert torch.equal(w["w_v"], attn.w_v.weight[4:8]) and torch.equal(w["w_o"], attn.w_o.weight[:, 4:8])


def test_qk_circuit_is_the_score_of_a_key_whose_previous_token_is_b():
    torch.manual_seed(0)
    embed, w_q, w_k = (
        torch.randn(5, 6, dtype=torch.float64),
        torch.randn(3, 6, dtype=torch.float64),
        torch.randn(3, 6, dtype=torch.float64),
    )
    w_v, w_o = torch.randn(2, 6, dtype=torch.float64), torch.randn(6, 2, dtype=torch.float64)
    scores = qk_circuit(embed, w_q, w_k, w_v, w_o)
    a, b = 3, 1
    want = (w_q @ embed[a]) @ (w_k @ (w_o @ (w_v @ embed[b]))) / math.sqrt(3)
    assert scores.shape == (5, 5) and scores[a, b].item() == pytest.approx(want.item(), abs=1e-12)
    model = model64(heads=(2, 1))
    full = induction_qk_circuit(model, prev_head=1)
    assert full.shape == (11, 11) and full.dtype == torch.float64


def test_ov_circuit_and_copying_score():
    model = model64(heads=(2, 1))
    circuit = ov_circuit(model)
    assert circuit.shape == (11, 11)
    with torch.no_grad():  # a head that copies: U W_O W_V E^T = identity when all are the identity
        model.embed.weight.copy_(torch.eye(11, 8))
        model.unembed.weight.copy_(torch.eye(11, 8))
        model.layers[1].w_v.weight.copy_(torch.eye(8))
        model.layers[1].w_o.weight.copy_(torch.eye(8))
    assert copying_score(ov_circuit(model), tokens=8) == 1.0
    assert copying_score(-torch.eye(4)) == 0.0


def test_direct_logit_attribution_sums_to_the_centred_right_logit():
    model = model64(heads=(2, 1))
    ids = repeated_tokens(4, 5, 10)  # (4, 11)
    parts = direct_logit_attribution(model, ids, 5)
    assert set(parts) == {"embeddings", "L0H0", "L0H1", "L1H0"}
    with torch.no_grad():
        logits = model(ids)[:, :-1]  # (4, 10, 11)
        centred = logits - logits.mean(-1, keepdim=True)
        right = centred.gather(-1, ids[:, 1:, None])[..., 0][:, repeated_half_mask(11, 5)].mean().item()
    assert sum(parts.values()) == pytest.approx(right, abs=1e-10)


def test_train_induction_smoke(monkeypatch):
    monkeypatch.setenv("COURSE_SMOKE_TEST", "1")
    torch.manual_seed(0)
    model = AttentionOnlyLM(17, d_model=8, num_heads=(2, 1), num_layers=2, max_len=13)
    history = train_induction(model, steps=100, batch_size=4, min_period=3, max_period=6, val_period=4, eval_every=2)
    assert history.steps == [0, 2, 4, 5] and len(history.val_loss) == 4
    assert all(math.isfinite(v) for v in history.val_loss) and history.cpu_seconds >= 0


def test_phase_change():
    steps = list(range(0, 110, 10))
    losses = [4.0, 4.0, 4.0, 3.9, 3.0, 1.0, 0.5, 0.1, 0.0, 0.0, 0.0]
    change = phase_change(steps, losses)
    assert change["start"] == 40 and change["end"] == 70 and change["drop"] == 4.0
    assert change["fraction"] == pytest.approx(0.3)
    with pytest.raises(ValueError):
        phase_change([0], [1.0])


def test_bad_arguments():
    with pytest.raises(ValueError, match="positions"):
        AttentionOnlyLM(5, positions="rotary")
    with pytest.raises(ValueError, match="head counts"):
        AttentionOnlyLM(5, num_heads=(2, 2, 2), num_layers=2)
    model = model64()
    with pytest.raises(ValueError, match="positions"):
        model(torch.zeros(1, 22, dtype=torch.long))
    with pytest.raises(ValueError, match="batch, n"):
        model(torch.zeros(22, dtype=torch.long))


def test_lm_patterns_reproduce_notebook_11s_attention():
    from helpers.models.lm import DecoderLM, repeat_kv

    torch.manual_seed(0)
    model = DecoderLM(
        vocab_size=12, d_model=16, num_heads=4, num_layers=2, d_ff=24, max_len=32, style="2025", kv_heads=2
    ).double()
    ids = repeated_tokens(2, 6, 12, bos=False)
    patterns = lm_patterns(model, ids)
    assert [tuple(p.shape) for p in patterns] == [(2, 4, 12, 12)] * 2
    # the pattern times the values, through W_O, is what the model's attention layer outputs
    seen = []
    handles = [b.attn.register_forward_hook(lambda m, args, out: seen.append((args[0], out[0]))) for b in model.blocks]
    with torch.no_grad():
        model(ids)
    for h in handles:
        h.remove()
    for block, pattern, (x, out) in zip(model.blocks, patterns, seen, strict=True):
        attn = block.attn
        v = repeat_kv(split_heads(attn.w_v(x), attn.kv_heads), attn.num_heads // attn.kv_heads)  # (b, h, n, d)
        torch.testing.assert_close(attn.w_o(merge_heads(pattern @ v)), out, atol=1e-12, rtol=0)


def test_figures_draw():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    import helpers.plots.induction as induction_plots

    fig = induction_plots.pattern_grid([torch.eye(4), torch.eye(4)], list("abcd"), ["x", "y"], "title")
    assert len(fig.axes) == 3  # two patterns and one colorbar
    fig2 = induction_plots.seed_bars(
        {"s": {"a": [1.0, 2.0], "b": [0.5]}, "t": {"a": [0.1]}}, "y", "t", baseline=0.3, baseline_label="b"
    )
    fig3 = induction_plots.circuit_heatmaps([torch.rand(8, 8), -torch.rand(8, 8)], ["m", "n"], "x", "y", "t")
    assert len(fig3.axes) == 3  # two circuits and one shared colorbar
    limits = {tuple(image.get_clim()) for ax in fig3.axes[:2] for image in ax.get_images()}
    assert len(limits) == 1  # one colour scale for both
    history = InductionHistory(steps=[0, 10], val_loss=[4.8, 0.1])
    history.prev_score = {"L0H0": [0.1, 0.6], "L0H1": [0.1, 0.1], "L1H0": [0.1, 0.0]}
    history.induction_score = {"L0H0": [0.0, 0.0], "L0H1": [0.0, 0.0], "L1H0": [0.05, 0.9]}
    fig4 = induction_plots.formation_curves({"run": history}, {"run": "L0H0"}, 4.85, control=history, title="t")
    fig5 = induction_plots.loss_by_position({"a": torch.rand(24)}, 12, 4.85, "t")
    for f in (fig, fig2, fig3, fig4, fig5):
        plt.close(f)


def test_ideal_patterns():
    previous, induction = ideal_patterns(11, 5)  # BOS, 5 tokens, the same 5 again
    assert previous.shape == induction.shape == (11, 11)
    assert torch.equal(previous.sum(-1), torch.ones(11)) and torch.equal(induction.sum(-1), torch.ones(11))
    assert torch.equal(prev_token_score(previous[None, None]), torch.ones(1))
    assert torch.equal(induction_score(induction[None, None], 5), torch.ones(1))
    with pytest.raises(ValueError, match="positions"):
        ideal_patterns(10, 5)


def test_training_tracks_the_heads_scores():
    torch.manual_seed(0)
    model = AttentionOnlyLM(17, d_model=16, num_heads=(2, 1), num_layers=2, max_len=17)
    history = train_induction(model, steps=20, eval_every=10, min_period=4, max_period=8, val_period=6, track_heads=True)
    assert history.steps == [0, 10, 20]
    assert sorted(history.prev_score) == sorted(history.induction_score) == ["L0H0", "L0H1", "L1H0"]
    assert all(len(v) == 3 and all(0.0 <= x <= 1.0 for x in v) for v in history.prev_score.values())
    torch.manual_seed(0)
    plain = train_induction(
        AttentionOnlyLM(17, d_model=16, num_heads=(2, 1), num_layers=2, max_len=17),
        steps=20,
        eval_every=10,
        min_period=4,
        max_period=8,
        val_period=6,
    )
    assert plain.prev_score == {} and plain.val_loss == pytest.approx(history.val_loss, abs=1e-5)


def test_positional_pattern():
    model = model64()
    pattern = positional_pattern(model, head=1)
    assert pattern.shape == (model.max_len, model.max_len) and pattern.dtype == torch.float64
    torch.testing.assert_close(pattern.sum(-1), torch.ones(model.max_len, dtype=torch.float64))
    assert torch.equal(pattern.triu(1), torch.zeros_like(pattern))  # causal: no weight on later positions
    with pytest.raises(ValueError, match="no head"):
        positional_pattern(model, head=2)
