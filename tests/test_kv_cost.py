"""helpers.scale.kv_cost: the KV cache's bytes for MHA, GQA, MQA and MLA, exact, and measured on notebook 11's model."""

from __future__ import annotations

import pytest
import torch

from helpers.models import DecoderLM
from helpers.scale.kv_cost import PUBLISHED, AttentionConfig, cache_bytes_of


def test_kinds_and_per_token_numbers():
    mha = AttentionConfig("mha", layers=2, heads=8, kv_heads=8, head_dim=16)
    gqa = AttentionConfig("gqa", layers=2, heads=8, kv_heads=2, head_dim=16)
    mqa = AttentionConfig("mqa", layers=2, heads=8, kv_heads=1, head_dim=16)
    mla = AttentionConfig("mla", layers=2, heads=8, kv_heads=8, head_dim=16, latent_dim=32, rope_dim=8)
    assert [c.kind for c in (mha, gqa, mqa, mla)] == ["MHA", "GQA", "MQA", "MLA"]
    assert [c.values_per_token() for c in (mha, gqa, mqa, mla)] == [2 * 2 * 8 * 16, 2 * 2 * 2 * 16, 2 * 2 * 16, 2 * 40]
    assert gqa.bytes_per_token() == 2 * gqa.values_per_token() and gqa.bytes_per_token(4) == 4 * gqa.values_per_token()
    assert gqa.cache_bytes(100, batch=3) == 300 * gqa.bytes_per_token()
    assert mla.as_mha().values_per_token() == mha.values_per_token()


def test_a_window_caps_the_cache():
    swa = AttentionConfig("swa", layers=1, heads=2, kv_heads=2, head_dim=4, window=10)
    assert [swa.cache_bytes(t) for t in (5, 10, 11, 1000)] == [swa.bytes_per_token() * t for t in (5, 10, 10, 10)]


def test_kv_heads_must_divide_heads():
    with pytest.raises(ValueError, match="divide"):
        AttentionConfig("bad", layers=1, heads=6, kv_heads=4, head_dim=8)


@pytest.mark.parametrize(
    "name, kind, bytes_per_token",
    [
        ("GPT-3 175B", "MHA", 96 * 2 * 96 * 128 * 2),  # 4,718,592 = 4.5 MiB
        ("Llama 2 7B", "MHA", 32 * 2 * 32 * 128 * 2),  # 512 KiB
        ("Llama 2 70B", "GQA", 80 * 2 * 8 * 128 * 2),  # 320 KiB
        ("Mistral 7B", "GQA", 32 * 2 * 8 * 128 * 2),  # 128 KiB
        ("Falcon-7B", "MQA", 32 * 2 * 1 * 64 * 2),  # 8 KiB
        ("DeepSeek-V2", "MLA", 60 * (512 + 64) * 2),  # 67.5 KiB
    ],
)
def test_published_configurations(name, kind, bytes_per_token):
    config = PUBLISHED[name]
    assert config.kind == kind and config.bytes_per_token() == bytes_per_token and config.source


def test_published_ratios_against_mha():
    assert PUBLISHED["Llama 2 70B"].as_mha().bytes_per_token() == 8 * PUBLISHED["Llama 2 70B"].bytes_per_token()
    assert PUBLISHED["Falcon-7B"].as_mha().bytes_per_token() == 71 * PUBLISHED["Falcon-7B"].bytes_per_token()
    assert PUBLISHED["Mistral 7B"].cache_bytes(32768) == 4096 * 131072 == 512 * 2**20


@pytest.mark.parametrize("context", [1, 17, 300])
def test_measured_cache_of_notebook_11s_model_equals_the_formula(context):
    torch.manual_seed(0)
    model = DecoderLM(vocab_size=30, d_model=64, num_heads=4, num_layers=2, d_ff=96, style="2025", kv_heads=2)
    formula = AttentionConfig("11", layers=2, heads=4, kv_heads=2, head_dim=16).bytes_per_token(4)
    assert formula == 512
    assert cache_bytes_of(model, context) == context * formula
    assert cache_bytes_of(model.double(), context) == 2 * context * formula


def test_cache_bytes_of_refuses_the_2017_model():
    with pytest.raises(ValueError, match="2025"):
        cache_bytes_of(DecoderLM(vocab_size=10, d_model=16, num_heads=2, style="2017"), 4)


def test_every_published_model_states_its_context_and_gpt3s_cache_at_2048_is_9_gib():
    """GPT-3's context is 2,048 tokens (Brown et al. 2020): its dense cache there is 9 GiB, not 18 GiB at 4,096."""
    assert all(config.context for config in PUBLISHED.values())
    gpt3 = PUBLISHED["GPT-3 175B"]
    assert gpt3.context == 2048 and gpt3.cache_bytes(gpt3.context) == 9 * 2**30
    assert "sparse" in gpt3.source
    assert PUBLISHED["DeepSeek-V2"].cache_bytes(PUBLISHED["DeepSeek-V2"].context) == 60 * 576 * 2 * 131072
