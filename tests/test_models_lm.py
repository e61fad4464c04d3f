"""The language model of notebook 11: its parts against PyTorch, causality, the KV cache, sampling and training."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from helpers.models.lm import (
    DecoderLM,
    apply_rope,
    apply_rope_complex,
    cache_update,
    filter_logits,
    generate,
    repeat_kv,
    rms_norm,
    rope_angles,
    sample_next,
    time_per_token,
    train_lm,
)


def test_rms_norm_matches_torch():
    x = torch.randn(2, 3, 8, dtype=torch.float64)
    ref = nn.RMSNorm(8, eps=1e-6).double()
    with torch.no_grad():
        ref.weight.uniform_(0.5, 1.5)
    assert torch.allclose(rms_norm(x, ref.weight, 1e-6), ref(x), atol=1e-12)


def test_rope_matches_complex_and_depends_on_offset_only():
    x = torch.randn(2, 5, 7, 8, dtype=torch.float64)
    angles = rope_angles(7, 8)  # (7, 4)
    assert angles.shape == (7, 4)
    assert torch.allclose(apply_rope(x, angles), apply_rope_complex(x, angles), atol=1e-12)
    q, k = torch.randn(8, dtype=torch.float64), torch.randn(8, dtype=torch.float64)
    a = rope_angles(30, 8)
    rq, rk = apply_rope(q.expand(30, 8), a), apply_rope(k.expand(30, 8), a)
    scores = torch.stack([rq[t + 4] @ rk[t] for t in range(26)])
    assert (scores.max() - scores.min()).item() < 1e-12
    assert not torch.allclose(rq[5] @ rk[0], rq[0] @ rk[0])  # a different offset scores differently
    with pytest.raises(ValueError, match="even"):
        rope_angles(4, 7)


def test_repeat_kv_matches_enable_gqa():
    q = torch.randn(2, 6, 5, 4, dtype=torch.float64)
    k, v = torch.randn(2, 2, 5, 4, dtype=torch.float64), torch.randn(2, 2, 5, 4, dtype=torch.float64)
    ours = F.scaled_dot_product_attention(q, repeat_kv(k, 3), repeat_kv(v, 3), is_causal=True)
    theirs = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
    assert torch.allclose(ours, theirs, atol=1e-12)


def test_cache_update_appends_on_the_sequence_axis():
    ck, k = torch.randn(1, 2, 3, 4), torch.randn(1, 2, 1, 4)
    k_all, v_all = cache_update(ck, ck, k, k)
    assert k_all.shape == (1, 2, 4, 4) and torch.equal(k_all[:, :, -1:], k) and torch.equal(v_all, k_all)


@pytest.mark.parametrize("style", ["2017", "2025"])
def test_model_shapes_causality_and_tied_head(style):
    torch.manual_seed(0)
    model = DecoderLM(20, d_model=16, num_heads=4, num_layers=2, d_ff=24, max_len=12, style=style, kv_heads=2).eval()
    x = torch.randint(0, 20, (3, 12))
    logits = model(x)
    assert logits.shape == (3, 12, 20)
    y = x.clone()
    y[:, 7] = (y[:, 7] + 1) % 20
    with torch.no_grad():
        assert torch.equal(model(x)[:, :7], model(y)[:, :7])  # positions before 7 never see it
        assert not torch.allclose(model(x)[:, 7:], model(y)[:, 7:])
    assert not any("head" in name for name, _ in model.named_parameters())  # tied: no separate head matrix
    with pytest.raises(ValueError, match="batch, n"):
        model(x[0])


def test_2025_model_has_no_biases_and_bad_arguments_are_named():
    model = DecoderLM(20, d_model=16, num_heads=4, num_layers=1, d_ff=24, style="2025", kv_heads=2)
    assert not any(name.endswith("bias") for name, _ in model.named_parameters())
    with pytest.raises(ValueError, match="style"):
        DecoderLM(20, style="2030")
    with pytest.raises(ValueError, match="kv_heads"):
        DecoderLM(20, d_model=16, num_heads=4, kv_heads=3)
    old = DecoderLM(20, d_model=16, num_heads=4, num_layers=1, d_ff=24, max_len=8, style="2017")
    with pytest.raises(ValueError, match="8 positions"):
        old(torch.zeros(1, 9, dtype=torch.long))
    with pytest.raises(ValueError, match="2025"):
        time_per_token(old, 4)


@pytest.mark.parametrize("rule", [{"greedy": True}, {"temperature": 0.9, "top_p": 0.8}, {"top_k": 5}])
def test_cached_and_uncached_generation_agree(rule):
    torch.manual_seed(3)
    model = DecoderLM(30, d_model=16, num_heads=4, num_layers=2, d_ff=24, style="2025", kv_heads=2).double()
    prompt = torch.randint(0, 30, (2, 5))
    runs = [generate(model, prompt, 20, use_cache=c, generator=torch.Generator().manual_seed(0), **rule) for c in (True, False)]
    assert runs[0].shape == (2, 25)
    assert torch.equal(runs[0], runs[1])
    assert torch.equal(runs[0][:, :5], prompt)


def test_2017_generation_slides_its_window():
    model = DecoderLM(10, d_model=8, num_heads=2, num_layers=1, d_ff=8, max_len=6, style="2017")
    out = generate(model, torch.zeros(1, 4, dtype=torch.long), 10, greedy=True)
    assert out.shape == (1, 14)


def test_filter_logits_top_k_top_p_and_temperature():
    z = torch.tensor([[2.0, 1.0, 0.5, 0.0, -1.0, -2.0]])
    assert torch.isinf(filter_logits(z, top_k=3)[0, 3:]).all() and torch.isfinite(filter_logits(z, top_k=3)[0, :3]).all()
    kept = torch.isfinite(filter_logits(z, top_p=0.9))[0].tolist()
    assert kept == [True, True, True, True, False, False]  # 0.557 + 0.205 + 0.124 = 0.886 < 0.9
    assert torch.isfinite(filter_logits(z, top_p=1e-9))[0].tolist() == [True] + [False] * 5  # the top token always stays
    assert torch.allclose(filter_logits(z, temperature=0.5), 2 * z)
    with pytest.raises(ValueError, match="temperature"):
        filter_logits(z, temperature=0.0)
    assert sample_next(z, greedy=True).tolist() == [0]
    draws = torch.stack([sample_next(z, top_k=2, generator=torch.Generator().manual_seed(s)) for s in range(50)])
    assert set(draws.flatten().tolist()) <= {0, 1}


def test_train_lm_lowers_the_validation_loss():
    torch.manual_seed(0)
    ids = torch.tensor([0, 1, 2, 3, 4, 5, 6, 7] * 100)  # a repeating sequence: easy to learn
    model = DecoderLM(8, d_model=16, num_heads=2, num_layers=1, d_ff=16, max_len=16, style="2025", kv_heads=1)
    seen = []
    history = train_lm(
        model,
        ids[:600],
        ids[600:],
        steps=60,
        context=16,
        batch_size=8,
        lr=1e-2,
        eval_every=20,
        callback=lambda s, m: seen.append(s),
    )
    assert history.steps == [20, 40, 60] == seen
    assert history.val_loss[-1] < 0.5 * history.val_loss[0]
    assert history.bits_per_char == pytest.approx(history.val_loss[-1] / 0.6931471805599453)


def test_time_per_token_is_positive():
    model = DecoderLM(10, d_model=8, num_heads=2, num_layers=1, d_ff=8, style="2025", kv_heads=1)
    assert time_per_token(model, 16, steps=2, use_cache=True) > 0
    assert time_per_token(model, 16, steps=2, use_cache=False, repeats=2) > 0
    with pytest.raises(ValueError, match="at least 1"):
        time_per_token(model, 16, steps=0)
