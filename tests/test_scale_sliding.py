"""helpers.scale.sliding: the window mask, the rolling KV cache, and notebook 11's model run under a window."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from helpers.models import DecoderLM
from helpers.scale.sliding import (
    RollingKVCache,
    WindowedLM,
    receptive_field,
    sliding_window_attention,
    sliding_window_mask,
    time_per_token,
)

CONFIG = dict(vocab_size=23, d_model=32, num_heads=4, num_layers=2, d_ff=48, max_len=64, style="2025", kv_heads=2)


def _model(dtype=torch.float64, seed=0):
    torch.manual_seed(seed)
    return DecoderLM(**CONFIG).to(dtype)


def test_mask_is_the_definition():
    mask = sliding_window_mask(6, 3)
    assert mask.dtype == torch.bool and mask.shape == (6, 6)
    for i in range(6):
        assert torch.nonzero(mask[i]).flatten().tolist() == list(range(max(0, i - 2), i + 1))
    assert torch.equal(sliding_window_mask(5, 1), torch.eye(5, dtype=torch.bool))
    assert torch.equal(sliding_window_mask(5, 5), torch.ones(5, 5, dtype=torch.bool).tril())
    with pytest.raises(ValueError, match="at least one"):
        sliding_window_mask(4, 0)


@pytest.mark.parametrize("dtype, tol", [(torch.float32, 1e-6), (torch.float64, 1e-12)])
def test_a_window_covering_the_sequence_is_causal_attention(dtype, tol):
    q, k, v = (torch.randn(2, 3, 50, 8, dtype=dtype) for _ in range(3))
    full = F.scaled_dot_product_attention(q, k, v, is_causal=True)
    for window in (50, 51, 1000):
        assert (sliding_window_attention(q, k, v, window) - full).abs().max().item() < tol


def test_rolling_cache_grows_to_the_window_then_stays():
    cache = RollingKVCache(4)
    sizes, held = [], []
    for t in range(10):
        k = torch.full((1, 2, 1, 3), float(t))
        cache.append(k, -k)
        sizes.append(cache.nbytes)
        held.append(sorted(cache.k[0, 0, :, 0].tolist()))
    per_position = 2 * (2 * 3 * 4)  # keys and values, 2 heads of 3 float32 numbers
    assert sizes == [per_position * min(t + 1, 4) for t in range(10)]
    assert held[-1] == [6.0, 7.0, 8.0, 9.0] and cache.positions == 4 and cache.seen == 10
    assert sorted(cache.v[0, 0, :, 0].tolist()) == [-9.0, -8.0, -7.0, -6.0]
    assert cache.k[0, 0, 9 % 4, 0].item() == 9.0  # position p in slot p % window


@pytest.mark.parametrize("first, then", [(2, [3, 1, 5]), (7, [1, 1]), (4, [4, 9]), (11, [])])
def test_rolling_cache_appends_several_positions_at_once(first, then):
    window, positions = 4, [first, *then]
    cache = RollingKVCache(window)
    seen = 0
    for count in positions:
        k = torch.arange(seen, seen + count, dtype=torch.float64).view(1, 1, count, 1)
        cache.append(k, k)
        seen += count
    kept = cache.k.flatten().tolist()
    assert sorted(kept) == list(range(max(0, seen - window), seen))
    assert all(kept[int(p) % window] == p for p in kept)


def test_windowed_model_equals_the_model_when_the_window_covers_it():
    model = _model()
    ids = torch.randint(0, 23, (2, 30))
    with torch.no_grad():
        torch.testing.assert_close(WindowedLM(model, 30)(ids), model(ids), atol=1e-12, rtol=0)
        torch.testing.assert_close(WindowedLM(model, 100)(ids), model(ids), atol=1e-12, rtol=0)
        assert (WindowedLM(model, 3)(ids) - model(ids)).abs().max() > 1e-6


def test_windowed_model_uses_the_mask_it_is_given():
    model = _model()
    ids = torch.randint(0, 23, (1, 12))
    calls = []

    def mask_fn(n, window):
        calls.append((n, window))
        return sliding_window_mask(n, window)

    with torch.no_grad():
        torch.testing.assert_close(WindowedLM(model, 5, mask_fn)(ids), WindowedLM(model, 5)(ids), atol=0, rtol=0)
    assert calls == [(12, 5), (12, 5)]  # one per block


@pytest.mark.parametrize("window, prompt", [(5, 8), (5, 3), (1, 4), (40, 6)])
def test_generation_with_rolling_caches_equals_the_whole_sequence(window, prompt):
    windowed = WindowedLM(_model(), window)
    ids = torch.randint(0, 23, (2, 25))
    caches = windowed.new_caches()
    with torch.no_grad():
        steps = [windowed.step(ids[:, :prompt], 0, caches)]
        steps += [windowed.step(ids[:, t : t + 1], t, caches) for t in range(prompt, 25)]
        torch.testing.assert_close(torch.cat(steps, 1), windowed(ids), atol=1e-12, rtol=0)
    assert all(c.positions == min(window, 25) for c in caches)
    with pytest.raises(ValueError, match="one position at a time"), torch.no_grad():
        windowed.step(ids[:, :2], 25, caches)


def test_receptive_field_grows_by_window_minus_one_per_layer():
    model = _model()
    assert receptive_field(WindowedLM(model, 4), 12, 23) == list(range(7))  # 2 layers x (4 - 1) + 1
    assert receptive_field(WindowedLM(model, 2), 12, 23) == list(range(3))
    assert receptive_field(model, 12, 23) == list(range(12))
    assert receptive_field(WindowedLM(model, 4), 12, 23, position=5) == list(range(5, 12))


def test_windowed_model_trains_its_models_parameters():
    model = _model(torch.float32)
    windowed = WindowedLM(model, 4)
    assert [p for p in windowed.parameters()] == [p for p in model.parameters()]


def test_windowed_model_refuses_the_2017_model_and_a_zero_window():
    old = DecoderLM(**{**CONFIG, "style": "2017"})
    with pytest.raises(ValueError, match="2025"):
        WindowedLM(old, 4)
    with pytest.raises(ValueError, match="window"):
        WindowedLM(_model(), 0)
    with pytest.raises(ValueError, match="window"):
        RollingKVCache(0)


def test_time_per_token_runs():
    seconds = time_per_token(WindowedLM(_model(torch.float32), 8), 20, steps=2)
    assert time_per_token(_model(torch.float32), 20, steps=2) > 0
    assert seconds > 0
    with pytest.raises(ValueError, match="at least 1"):
        time_per_token(WindowedLM(_model(torch.float32), 8), 20, steps=0)
