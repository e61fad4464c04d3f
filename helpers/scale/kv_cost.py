"""Notebook 12: the bytes of a KV cache, for multi-head, grouped-query, multi-query and latent attention.

During generation a decoder keeps, for every layer and every past position, what its attention needs again:

- multi-head attention (MHA): a key and a value per head, ``2 * heads * head_dim`` numbers per layer and token;
- grouped-query attention (GQA, Ainslie et al., 2023): a key and a value per key/value head, ``2 * kv_heads * head_dim``;
- multi-query attention (MQA, Shazeer, 2019): one key/value head shared by all query heads, ``2 * head_dim``;
- multi-head latent attention (MLA, DeepSeek-V2, 2024): one compressed latent vector of ``latent_dim`` numbers, from
  which every head's key and value are re-expanded, plus one ``rope_dim`` key part that carries the rotary position,
  ``latent_dim + rope_dim``;
- with a sliding window (Mistral 7B), at most ``window`` positions are kept, whatever the context.

Everything here is exact integer arithmetic. ``PUBLISHED`` holds configurations from their papers and model cards
(``source`` says which); ``cache_bytes_of`` reads the bytes of the caches a ``helpers.models.lm.DecoderLM`` really
holds after a prompt.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

__all__ = ["AttentionConfig", "PUBLISHED", "cache_bytes_of"]


@dataclass(frozen=True)
class AttentionConfig:
    """The attention of a decoder, as far as its KV cache is concerned.

    ``kv_heads`` equal to ``heads`` is MHA, 1 is MQA, in between GQA; ``latent_dim`` > 0 makes it MLA (then
    ``kv_heads`` is not used). ``window`` is a sliding window (None: every past position is kept).
    """

    name: str
    layers: int
    heads: int
    kv_heads: int
    head_dim: int
    latent_dim: int = 0
    rope_dim: int = 0
    window: int | None = None
    context: int | None = None
    source: str = ""

    def __post_init__(self) -> None:
        if self.latent_dim == 0 and (self.kv_heads < 1 or self.heads % self.kv_heads):
            raise ValueError(f"{self.name}: kv_heads ({self.kv_heads}) must divide heads ({self.heads})")

    @property
    def kind(self) -> str:
        """``"MLA"``, ``"MHA"``, ``"MQA"`` or ``"GQA"``."""
        if self.latent_dim:
            return "MLA"
        if self.kv_heads == self.heads:
            return "MHA"
        return "MQA" if self.kv_heads == 1 else "GQA"

    def values_per_token(self) -> int:
        """Numbers cached per token, all layers together."""
        per_layer = self.latent_dim + self.rope_dim if self.latent_dim else 2 * self.kv_heads * self.head_dim
        return self.layers * per_layer

    def bytes_per_token(self, bytes_per_value: int = 2) -> int:
        """Bytes cached per token (default 2: float16 or bfloat16)."""
        return self.values_per_token() * bytes_per_value

    def cache_bytes(self, context: int, batch: int = 1, bytes_per_value: int = 2) -> int:
        """The whole cache after ``context`` tokens, for ``batch`` sequences: a window caps the positions kept."""
        kept = context if self.window is None else min(context, self.window)
        return batch * kept * self.bytes_per_token(bytes_per_value)

    def as_mha(self) -> AttentionConfig:
        """The same model with plain multi-head attention (every query head its own key and value)."""
        return AttentionConfig(f"{self.name} as MHA", self.layers, self.heads, self.heads, self.head_dim, context=self.context)


#: Published configurations, each with its source. Numbers per model: layers, query heads, key/value heads,
#: head width; MLA: latent and rotary widths; a sliding window; the context length it was trained or released for.
PUBLISHED: dict[str, AttentionConfig] = {
    c.name: c
    for c in (
        AttentionConfig(
            "GPT-3 175B",
            96,
            96,
            96,
            128,
            context=2048,
            source="Brown et al. 2020, Table 2.1 and section 2.1: 96 layers, d_model 12288, 96 heads of 128, context 2048; "
            "its layers alternate dense and locally banded sparse attention, so a dense cache in every layer overstates it",
        ),
        AttentionConfig(
            "Llama 2 7B",
            32,
            32,
            32,
            128,
            context=4096,
            source="Touvron et al. 2023 and its config.json: 32 layers, 32 heads of 128",
        ),
        AttentionConfig(
            "Llama 2 70B",
            80,
            64,
            8,
            128,
            context=4096,
            source="Touvron et al. 2023 (GQA for 34B and 70B) and its config.json: 80 layers, 64 heads of 128, 8 key/value heads",
        ),
        AttentionConfig(
            "Mistral 7B",
            32,
            32,
            8,
            128,
            window=4096,
            context=8192,
            source="Jiang et al. 2023, Table 1: 32 layers, 32 heads of 128, 8 key/value heads, window 4096, context 8192",
        ),
        AttentionConfig(
            "Falcon-7B",
            32,
            71,
            1,
            64,
            context=2048,
            source="TII's model card and config.json: 32 layers, d_model 4544, 71 heads of 64, multi-query",
        ),
        AttentionConfig(
            "DeepSeek-V2",
            60,
            128,
            128,
            128,
            latent_dim=512,
            rope_dim=64,
            context=131072,
            source="DeepSeek-AI 2024, sections 2.1 and 3.1.2: 60 layers, 128 heads of 128, KV latent 512, decoupled RoPE key 64; "
            "context 128K",
        ),
    )
}


@torch.no_grad()
def cache_bytes_of(model: torch.nn.Module, context: int, seed: int = 0) -> int:
    """The bytes a 2025-style ``DecoderLM`` holds in its KV caches after a prompt of ``context`` random tokens."""
    if getattr(model, "style", None) != "2025":
        raise ValueError("cache_bytes_of needs the 2025 DecoderLM (the 2017 model has no KV cache)")
    model.eval()
    device = model.embed.weight.device
    ids = torch.randint(0, model.embed.num_embeddings, (1, context), generator=torch.Generator().manual_seed(seed))
    caches: list = [None] * len(model.blocks)
    model(ids.to(device), 0, caches)
    return sum(k.nbytes + v.nbytes for k, v in caches)
