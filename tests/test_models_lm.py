"""The language model of notebook 11: its parts against PyTorch, the 2017 block as it was, causality, the KV cache and
its checks of `start`, sampling (top-p at its ends against transformers), the cost model, training and evaluation."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F
from torch import nn

import helpers.models.lm as lm
from helpers.blocks import EncoderBlock, sinusoidal_positional_encoding
from helpers.models.lm import (
    UPGRADE_RUNS,
    UPGRADES,
    DecoderLM,
    GQAttention,
    Parts,
    StagedBlock,
    apply_rope,
    apply_rope_complex,
    cache_bytes,
    cache_update,
    cached_attention,
    cached_attention_math,
    count_decode_flops,
    decode_flops,
    decode_times,
    evaluate_lm,
    filter_logits,
    generate,
    lm_loss,
    loss_by_position,
    next_token_loss,
    ngram_loss,
    random_caches,
    repeat_kv,
    rms_norm,
    rope_angles,
    sample_next,
    swiglu,
    temperature_top_k,
    time_per_token,
    top_p_filter,
    train_lm,
)
from helpers.training import count_parameters


def small(style="2025", **kwargs):
    torch.manual_seed(0)
    options = dict(d_model=16, num_heads=4, num_layers=2, d_ff=24, max_len=12, style=style)
    if style == "2025":
        options["kv_heads"] = 2
    return DecoderLM(20, **{**options, **kwargs})


# ---------------------------------------------------------------- the parts


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


def test_swiglu_matches_linear_layers():
    x = torch.randn(2, 3, 6, dtype=torch.float64)
    w1, w3, w2 = (nn.Linear(*shape, bias=False).double() for shape in ((6, 10), (6, 10), (10, 6)))
    assert torch.allclose(swiglu(x, w1.weight, w3.weight, w2.weight), w2(F.silu(w1(x)) * w3(x)), atol=1e-12)


@pytest.mark.parametrize("n, m", [(3, 3), (1, 6), (2, 6)])
def test_cached_attention_sees_its_own_past_only(n, m):
    q, k, v = (
        torch.randn(2, 3, n, 4, dtype=torch.float64),
        torch.randn(2, 3, m, 4, dtype=torch.float64),
        torch.randn(2, 3, m, 5, dtype=torch.float64),
    )
    out = cached_attention(q, k, v)
    assert out.shape == (2, 3, n, 5)
    assert torch.allclose(out, cached_attention_math(q, k, v), atol=1e-12)
    # the last query is position m - 1 and sees every key; query 0 is position m - n and sees keys 0 .. m - n
    assert torch.allclose(out[..., -1, :], F.scaled_dot_product_attention(q[..., -1:, :], k, v)[..., 0, :], atol=1e-12)
    first = F.scaled_dot_product_attention(q[..., :1, :], k[..., : m - n + 1, :], v[..., : m - n + 1, :])
    assert torch.allclose(out[..., :1, :], first, atol=1e-12)
    with pytest.raises(ValueError, match="fewer keys"):
        cached_attention(k, q[..., :1, :], v)


def test_cache_update_appends_on_the_sequence_axis():
    ck, k = torch.randn(1, 2, 3, 4), torch.randn(1, 2, 1, 4)
    k_all, v_all = cache_update(ck, ck, k, k)
    assert k_all.shape == (1, 2, 4, 4) and torch.equal(k_all[:, :, -1:], k) and torch.equal(v_all, k_all)


# ---------------------------------------------------------------- the models


@pytest.mark.parametrize("style", ["2017", "2025"])
def test_model_shapes_causality_and_tied_head(style):
    model = small(style).eval()
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


def test_the_2017_model_is_the_2017_block():
    model = small("2017").eval()
    assert all(isinstance(b, EncoderBlock) and not b.norm_first and b.ff.activation == "relu" for b in model.blocks)
    assert isinstance(model.norm, nn.Identity)  # post-LN: the last block's LayerNorm is the final norm
    assert not any("pos" in name for name, _ in model.named_parameters())  # fixed sinusoidal positions, no table
    ids = torch.randint(0, 20, (2, 5))
    x = model.embed(ids) * 4.0 + sinusoidal_positional_encoding(5, 16)  # sqrt(16) = 4
    for block in model.blocks:
        x = block(x, torch.ones(5, 5, dtype=torch.bool).tril())
    with torch.no_grad():
        assert torch.allclose(model(ids), x @ model.embed.weight.T, atol=1e-5)
        assert model(torch.randint(0, 20, (1, 40))).shape == (1, 40, 20)  # past max_len: the encoding has no end
    with pytest.raises(ValueError, match="no KV cache"):
        model(ids, 0, [None, None])


def test_the_2025_model_has_no_biases_and_bad_arguments_are_named():
    model = small()
    assert not any(name.endswith("bias") for name, _ in model.named_parameters())
    with pytest.raises(ValueError, match="style"):
        DecoderLM(20, style="2030")
    with pytest.raises(ValueError, match="kv_heads"):
        DecoderLM(20, d_model=16, num_heads=4, kv_heads=3)
    with pytest.raises(ValueError, match="parts"):
        DecoderLM(20, style="2017", parts=Parts())
    with pytest.raises(ValueError, match="use_cache=True needs the 2025 model"):
        time_per_token(small("2017"), 4)
    assert time_per_token(small("2017"), 4, steps=1, use_cache=False) > 0


def test_equal_parameter_counts_of_the_notebook_models():
    old = DecoderLM(103, 64, 4, 2, d_ff=128, style="2017")
    new = DecoderLM(103, 64, 4, 2, d_ff=110, style="2025", kv_heads=2)
    assert (count_parameters(old), count_parameters(new)) == (73_536, 73_728)


def test_parts_run_the_model_and_say_whose_they_are():
    model = small().double().eval()
    ids = torch.randint(0, 20, (2, 9))
    with torch.no_grad():
        before = model(ids)
        mine = Parts(cached_attention=cached_attention_math, rms_norm=lambda x, w, eps: rms_norm(x, w, eps))
        model.set_parts(mine)
        assert all(m.parts is mine for m in model.modules() if hasattr(m, "parts"))
        assert torch.allclose(model(ids), before, atol=1e-12)
    assert mine.sources() == {
        "rms_norm": "yours",
        "apply_rope": "reference",
        "repeat_kv": "reference",
        "swiglu": "reference",
        "cached_attention": "yours",
        "cache_update": "reference",
    }
    with pytest.raises(ValueError, match="2025"):
        small("2017").set_parts(Parts())


def test_a_wrong_start_is_refused():
    model = small().eval()
    caches: list = [None, None]
    with torch.no_grad():
        model(torch.randint(0, 20, (1, 5)), 0, caches)
        with pytest.raises(ValueError, match="start=4 but the caches hold 5"):
            model(torch.randint(0, 20, (1, 1)), 4, caches)
        with pytest.raises(ValueError, match="start=3 but the caches hold 0"):
            model(torch.randint(0, 20, (1, 1)), 3, [None, None])
        with pytest.raises(ValueError, match="one entry per block"):
            model(torch.randint(0, 20, (1, 1)), None, [None])
        model(torch.randint(0, 20, (1, 1)), None, caches)  # inferred: position 5
        assert caches[0][0].shape[2] == 6
        attn = GQAttention(16, 4, 2)
        x = torch.randn(1, 1, 16)
        with pytest.raises(ValueError, match="start=2 but the cache holds 3"):
            attn(x, 2, (torch.randn(1, 2, 3, 4), torch.randn(1, 2, 3, 4)))


def test_cached_steps_equal_a_full_run():
    model = small().double().eval()
    ids = torch.randint(0, 20, (2, 10))
    caches: list = [None, None]
    with torch.no_grad():
        full = model(ids)
        parts = [model(ids[:, :4], 0, caches), model(ids[:, 4:5], 4, caches), model(ids[:, 5:], 5, caches)]
    assert torch.allclose(torch.cat(parts, 1), full, atol=1e-12)


@pytest.mark.parametrize("rule", [{"greedy": True}, {"temperature": 0.9, "top_p": 0.8}, {"top_k": 5}])
def test_cached_and_uncached_generation_agree(rule):
    torch.manual_seed(3)
    model = DecoderLM(30, d_model=16, num_heads=4, num_layers=2, d_ff=24, style="2025", kv_heads=2).double()
    prompt = torch.randint(0, 30, (2, 5))
    runs = [generate(model, prompt, 20, use_cache=c, generator=torch.Generator().manual_seed(0), **rule) for c in (True, False)]
    assert runs[0].shape == (2, 25)
    assert torch.equal(runs[0], runs[1])
    assert torch.equal(runs[0][:, :5], prompt)


@pytest.mark.parametrize("style", ["2017", "2025"])
def test_generation_with_a_sliding_window(style):
    model = small(style)
    out = generate(model, torch.zeros(1, 4, dtype=torch.long), 10, use_cache=False, window=6, greedy=True)
    assert out.shape == (1, 14)
    with torch.no_grad():  # the last step saw only the last 6 tokens, as positions 0 .. 5
        assert out[0, -1].item() == model(out[:, -7:-1])[0, -1].argmax().item()
    if style == "2025":
        with pytest.raises(ValueError, match="use_cache=False"):
            generate(model, torch.zeros(1, 4, dtype=torch.long), 3, window=6)
    with pytest.raises(ValueError, match="at least 1"):
        generate(model, torch.zeros(1, 4, dtype=torch.long), 3, use_cache=False, window=0)


# ---------------------------------------------------------------- sampling


def test_filter_logits_top_k_top_p_and_temperature():
    z = torch.tensor([[2.0, 1.0, 0.5, 0.0, -1.0, -2.0]])
    assert torch.isinf(filter_logits(z, top_k=3)[0, 3:]).all() and torch.isfinite(filter_logits(z, top_k=3)[0, :3]).all()
    kept = torch.isfinite(filter_logits(z, top_p=0.9))[0].tolist()
    assert kept == [True, True, True, True, False, False]  # 0.557 + 0.205 + 0.124 = 0.886 < 0.9
    assert torch.isfinite(filter_logits(z, top_p=1e-9))[0].tolist() == [True] + [False] * 5  # the top token always stays
    assert torch.allclose(filter_logits(z, temperature=0.5), 2 * z)
    with pytest.raises(ValueError, match="temperature"):
        filter_logits(z, temperature=0.0)
    with pytest.raises(ValueError, match="at least 1"):
        temperature_top_k(z, 1.0, 0)
    with pytest.raises(ValueError, match="between 0 and 1"):
        top_p_filter(z, 1.5)
    assert sample_next(z, greedy=True).tolist() == [0]
    draws = torch.stack([sample_next(z, top_k=2, generator=torch.Generator().manual_seed(s)) for s in range(50)])
    assert set(draws.flatten().tolist()) <= {0, 1}


def test_top_p_zero_keeps_the_top_token_and_samples_it():
    z = torch.randn(4, 30)
    kept = torch.isfinite(filter_logits(z, top_p=0.0))
    assert kept.sum(-1).tolist() == [1, 1, 1, 1] and torch.equal(kept.float().argmax(-1), z.argmax(-1))
    draws = sample_next(z, top_p=0.0, generator=torch.Generator().manual_seed(0))
    assert torch.equal(draws, z.argmax(-1))  # no NaN: the most likely token, every time


def test_top_p_one_is_a_no_op_in_float32():
    z = torch.randn(2, 6400) * 4.0  # float32: a running sum of the sorted probabilities reaches 1 before the end
    assert torch.equal(top_p_filter(z, 1.0), z)
    sorted_probs = z.softmax(-1).sort(descending=True).values
    textbook = (sorted_probs.cumsum(-1) - sorted_probs) < 1.0  # the float32 running sum drops tail tokens
    assert (~textbook).sum() > 1000  # thousands of tokens of non-zero probability


def test_top_p_agrees_with_transformers():
    transformers = pytest.importorskip("transformers")
    z = torch.randn(6, 50) * 2.0
    for p in (0.0, 0.1, 0.5, 0.9, 0.99, 1.0):
        theirs = transformers.TopPLogitsWarper(p)(None, z.clone()) if p > 0 else None
        ours = top_p_filter(z, p)
        if theirs is not None:
            assert torch.equal(torch.isfinite(ours), torch.isfinite(theirs)), p
        assert torch.isfinite(ours).any(-1).all()


def test_sample_next_with_a_logits_filter():
    z = torch.randn(3, 12)
    draws = sample_next(z, logits_filter=lambda logits: temperature_top_k(logits, 1.0, 1))
    assert torch.equal(draws, z.argmax(-1))
    with pytest.raises(ValueError, match="not both"):
        sample_next(z, top_k=3, logits_filter=lambda logits: logits)
    with pytest.raises(ValueError, match="keep no token"):
        sample_next(z, logits_filter=lambda logits: torch.full_like(logits, float("-inf")))


# ---------------------------------------------------------------- training, evaluation, baselines


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
    assert evaluate_lm(model, ids[600:], context=16) < history.val_loss[0]


def test_evaluate_lm_and_loss_by_position_agree():
    model = small().double()
    ids = torch.randint(0, 20, (12 * 8 + 1,))
    by_position = loss_by_position(model, ids, 12)
    assert by_position.shape == (12,)
    assert by_position.mean().item() == pytest.approx(evaluate_lm(model, ids, context=12, batch_size=3))
    with pytest.raises(ValueError, match="fewer than"):
        evaluate_lm(model, ids[:5], context=12)


def test_ngram_losses():
    train = torch.tensor([0, 1, 0, 1, 0, 1, 2])
    val = torch.tensor([0, 1, 2])
    counts = torch.tensor([3.0, 3.0, 1.0]) + 1.0
    assert ngram_loss(train, val, 3, order=1) == pytest.approx(-(counts / counts.sum()).log()[val].mean().item())
    # bigram: after 0 always 1 (3 of 3), after 1: 0 twice and 2 once; add-one over 3 characters
    expected = -(math.log(4 / 6) + math.log(2 / 6)) / 2
    assert ngram_loss(train, val, 3, order=2) == pytest.approx(expected)
    with pytest.raises(ValueError, match="order"):
        ngram_loss(train, val, 3, order=3)


# ---------------------------------------------------------------- the cost of one more token


@pytest.mark.parametrize("kv_heads", [4, 2, 1])
def test_the_cost_model_matches_flop_counter_and_cache_sizes(kv_heads):
    model = DecoderLM(30, d_model=16, num_heads=4, num_layers=2, d_ff=24, style="2025", kv_heads=kv_heads)
    for context in (0, 7, 100):
        assert decode_flops(model, context)["total"] == count_decode_flops(model, context)
    flops = decode_flops(model, 100)
    assert flops["attention"] == 2 * 2 * 2 * 16 * 101  # layers x (scores + sum) x 2 FLOPs x d_model x keys
    assert cache_bytes(model, 100) == 2 * 2 * kv_heads * 4 * 100 * 4
    assert model.parts.cached_attention is cached_attention  # counting left the model's parts as they were
    caches = random_caches(model, 9)
    assert len(caches) == 2 and caches[0][0].shape == (1, kv_heads, 9, 4)
    with pytest.raises(ValueError, match="2025"):
        decode_flops(small("2017"), 4)
    with pytest.raises(ValueError, match="2025"):
        count_decode_flops(small("2017"), 4)


def test_time_per_token_and_decode_times():
    model = DecoderLM(10, d_model=8, num_heads=2, num_layers=1, d_ff=8, style="2025", kv_heads=1)
    assert time_per_token(model, 16, steps=2, use_cache=True) > 0
    assert time_per_token(model, 16, steps=2, use_cache=True, prefill=False) > 0
    assert time_per_token(model, 16, steps=2, use_cache=False, repeats=2) > 0
    with pytest.raises(ValueError, match="at least 1"):
        time_per_token(model, 16, steps=0)
    times = decode_times(model, [8, 32], steps=2, repeats=2)
    assert len(times) == 2 and all(t > 0 for t in times)


# ---------------------------------------------------------------- the stages between 2017 and 2025, the exercises' loss and loop


def staged(upgrades, **kwargs):
    torch.manual_seed(0)
    return DecoderLM(20, d_model=16, num_heads=4, num_layers=2, d_ff=24, max_len=12, kv_heads=2, upgrades=upgrades, **kwargs)


def test_no_upgrade_is_the_2017_model_and_all_four_the_2025_model():
    x = torch.randint(0, 20, (2, 9))
    with torch.no_grad():
        assert torch.equal(staged(()).eval()(x), small("2017").eval()(x))
        assert torch.equal(staged(UPGRADES).eval()(x), small("2025").eval()(x))
    assert staged(()).style == "2017" and staged(list(reversed(UPGRADES))).style == "2025"
    assert staged(["rope", "rmsnorm"]).style == "2017 + rmsnorm + rope"  # in the course's order
    assert staged(UPGRADES).upgrades == UPGRADES and small("2017").upgrades == ()


@pytest.mark.parametrize("count", [1, 2, 3])
def test_each_stage_is_causal_and_has_its_parts(count):
    upgrades = UPGRADES[:count]
    model = staged(upgrades).double().eval()
    x = torch.randint(0, 20, (2, 9))
    y = x.clone()
    y[:, -1] = (y[:, -1] + 1) % 20
    with torch.no_grad():
        assert torch.equal(model(x)[:, :-1], model(y)[:, :-1])
    block = model.blocks[0]
    assert isinstance(block, StagedBlock)
    assert isinstance(block.norm1, lm.RMSNorm) and isinstance(model.norm, lm.RMSNorm)  # "rmsnorm" comes first
    assert block.attn.rope == ("rope" in upgrades)
    assert isinstance(block.ff, lm.SwiGLU) == ("swiglu" in upgrades)
    assert block.attn.kv_heads == 4 and block.attn.w_q.bias is not None  # no GQA yet: 4 key/value heads, biases


def test_a_stage_without_rope_adds_the_sinusoidal_encoding_and_caches_like_a_full_run():
    model = staged(["rmsnorm"]).double().eval()
    ids = torch.randint(0, 20, (1, 7))
    with torch.no_grad():
        full = model(ids)
        caches = [None, None]
        first = model(ids[:, :4], 0, caches)
        rest = model(ids[:, 4:], 4, caches)
    assert torch.allclose(torch.cat([first, rest], 1), full, atol=1e-12)
    with pytest.raises(ValueError, match="upgrades"):
        staged(["rmsnorm", "alibi"])
    with pytest.raises(ValueError, match="upgrades"):
        staged("rope")


def test_stage_parameter_counts_of_the_notebook():
    counts = []
    for upgrades, d_ff in (((), 128), (UPGRADES[:1], 128), (UPGRADES[:2], 128), (UPGRADES[:3], 86), (UPGRADES, 110)):
        model = DecoderLM(103, d_model=64, num_heads=4, num_layers=2, d_ff=d_ff, max_len=64, kv_heads=2, upgrades=upgrades)
        counts.append(count_parameters(model))
    assert counts == [73_536, 73_344, 73_344, 73_216, 73_728]


def test_upgrade_runs_cover_every_stage():
    assert list(UPGRADE_RUNS) == ["2017", "+ RMSNorm", "+ RoPE", "+ SwiGLU", "2025"]
    assert all(len(runs) >= 10 and all(1.0 < v < 3.0 for v in runs) for runs in UPGRADE_RUNS.values())


def test_next_token_loss_is_the_course_loss_of_the_shifted_window():
    torch.manual_seed(0)
    model = small().double()
    window = torch.randint(0, 20, (3, 9))
    expected = lm_loss(model, window[:, :-1], window[:, 1:])
    assert torch.allclose(next_token_loss(model(window), window), expected, atol=1e-12)


def test_train_lm_with_a_loss_function_and_a_warm_up():
    ids = torch.tensor([0, 1, 2, 3, 4, 5, 6, 7] * 100)
    calls = []

    def loss_fn(logits, window):
        calls.append((tuple(logits.shape), tuple(window.shape)))
        return next_token_loss(logits, window)

    torch.manual_seed(0)
    model = DecoderLM(8, d_model=16, num_heads=2, num_layers=1, d_ff=16, max_len=16, style="2025", kv_heads=1)
    history = train_lm(
        model, ids[:600], ids[600:], steps=60, context=16, batch_size=8, lr=1e-2, eval_every=20, loss_fn=loss_fn, warmup=30
    )
    assert calls[0] == ((8, 17, 8), (8, 17)) and len(calls) == 60
    assert history.val_loss[-1] < 0.5 * history.val_loss[0]


def test_sample_is_generate_with_a_sliding_window():
    model = small().double()
    prompt = torch.randint(0, 20, (2, 5))
    for rule in (None, lambda z: temperature_top_k(z, 0.7, 4)):
        ours = lm.sample(model, prompt, 20, window=8, logits_filter=rule, generator=torch.Generator().manual_seed(3))
        theirs = generate(
            model,
            prompt,
            20,
            use_cache=False,
            window=8,
            generator=torch.Generator().manual_seed(3),
            **({"logits_filter": rule} if rule else {}),
        )
        assert torch.equal(ours, theirs) and ours.shape == (2, 25)


def test_init_sets_the_embedding_scale_on_its_own():
    assert small("2017").init == "2017" and small("2017").embed_scale == 4.0  # sqrt(16)
    assert small("2025").init == "2025" and small("2025").embed_scale == 1.0
    assert staged(["rmsnorm"]).init == "2017" and staged(["rmsnorm", "rope"]).init == "2025"  # the model's own
    inputs = []
    for init, scale, std in (("2017", 4.0, 0.25), ("2025", 1.0, 0.02)):
        torch.manual_seed(0)
        model = DecoderLM(20, d_model=16, num_heads=4, num_layers=2, d_ff=24, upgrades=["rmsnorm", "rope"], init=init)
        assert model.embed_scale == scale and abs(model.embed.weight.std().item() - std) < 0.3 * std
        handle = model.blocks[0].register_forward_pre_hook(lambda module, args: inputs.append(args[0]))
        ids = torch.randint(0, 20, (2, 5))
        with torch.no_grad():
            model(ids)
        handle.remove()
        assert torch.equal(inputs[-1], model.embed(ids) * scale)
    with pytest.raises(ValueError, match="init"):
        DecoderLM(20, d_model=16, init="2020")


def test_train_lm_can_measure_before_the_first_step_without_changing_the_run():
    ids = torch.tensor([0, 1, 2, 3, 4, 5, 6, 7] * 100)
    histories = []
    for eval_at_start in (False, True):
        torch.manual_seed(0)
        model = DecoderLM(8, d_model=16, num_heads=2, num_layers=1, d_ff=16, max_len=16, style="2017")
        histories.append(
            train_lm(model, ids[:600], ids[600:], steps=40, context=16, batch_size=8, eval_every=20, eval_at_start=eval_at_start)
        )
    plain, measured = histories
    assert measured.steps == [0, 20, 40] and math.isnan(measured.train_loss[0])
    assert measured.val_loss[1:] == plain.val_loss and measured.val_loss[0] > plain.val_loss[0]
    assert measured.cpu_seconds > 0 and plain.cpu_seconds > 0
