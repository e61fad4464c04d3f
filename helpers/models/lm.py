"""Notebook 11: a decoder-only (GPT-style) language model, with the block of 2017 or of 2025.

Both styles embed tokens, run a stack of causal self-attention blocks and read the
logits with a head tied to the token embedding (``logits = h @ embed.weight.T``).

- ``style="2017"``: the block of "Attention Is All You Need" as it was: the input
  embedding scaled by ``sqrt(d_model)`` plus the fixed sinusoidal encoding, post-LN
  blocks (``helpers.blocks.EncoderBlock(norm_first=False, activation="relu")``: LayerNorm
  after each residual addition, a ReLU feed-forward, biases) under ``causal_mask``; the
  last block's LayerNorm is the final norm. No KV cache.
- ``style="2025"``: no position embedding but rotary embeddings (RoPE) inside attention,
  pre-norm RMSNorm, a SwiGLU feed-forward, grouped-query attention (fewer key/value heads
  than query heads), no biases, a final RMSNorm: ``ModernBlock``. It keeps a KV cache.

The 2025 model runs its small functions through a ``Parts`` object (``rms_norm``,
``apply_rope``, ``repeat_kv``, ``swiglu``, ``cached_attention``, ``cache_update``): by
default the references of this module; notebook 11 hands in the learner's own versions
once their checks pass (``DecoderLM(..., parts=Parts(...))`` or ``model.set_parts``).

Between the two, ``DecoderLM(upgrades=...)`` builds the model with any of the four changes (``UPGRADES``: ``"rmsnorm"``,
``"rope"``, ``"swiglu"``, ``"gqa"``; ``StagedBlock``), and ``UPGRADE_RUNS`` holds the validation losses that
``benchmarks/search_lm.py`` measured for each stage of notebook 11's staircase.

The exercises' loss and generation loop: ``next_token_loss(logits, ids)`` (the shift done inside) and ``sample(model,
ids, steps, window, logits_filter, generator)`` (a sliding window, no cache); ``train_lm(loss_fn=...)`` trains with a
learner's loss. Sampling: ``temperature_top_k`` and ``top_p_filter`` (the exercises' references),
``filter_logits`` (all rules at once), ``sample_next`` and ``generate`` (optionally with
the learner's own ``logits_filter``). Costs: ``decode_flops`` and ``cache_bytes`` (the cost
model of one generated token against the context), ``count_decode_flops`` (the same counted
by PyTorch's ``FlopCounterMode``), ``time_per_token`` and ``decode_times`` (measured).
Evaluation: ``evaluate_lm``, ``loss_by_position``, ``ngram_loss`` (unigram and bigram
baselines). Shapes: batch ``b``, heads ``h``, key/value heads ``g``, sequence ``n``, keys
``m``, head width ``d``.
"""

from __future__ import annotations

import math
import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, fields, replace

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from helpers.attention import causal_mask, merge_heads, split_heads
from helpers.blocks import EncoderBlock, FeedForward, sinusoidal_positional_encoding
from helpers.runtime.smoke import capped
from helpers.training import warmup_cosine

__all__ = [
    "STYLES",
    "UPGRADES",
    "UPGRADE_RUNS",
    "rms_norm",
    "RMSNorm",
    "rope_angles",
    "apply_rope",
    "apply_rope_complex",
    "repeat_kv",
    "swiglu",
    "cached_attention",
    "cached_attention_math",
    "cache_update",
    "Parts",
    "SwiGLU",
    "GQAttention",
    "ModernBlock",
    "StagedBlock",
    "DecoderLM",
    "temperature_top_k",
    "top_p_filter",
    "filter_logits",
    "sample_next",
    "generate",
    "LMHistory",
    "lm_batches",
    "lm_loss",
    "next_token_loss",
    "sample",
    "train_lm",
    "evaluate_lm",
    "validation_windows",
    "loss_by_position",
    "ngram_loss",
    "decode_flops",
    "cache_bytes",
    "count_decode_flops",
    "random_caches",
    "time_per_token",
    "decode_times",
]

#: The two block styles of ``DecoderLM``.
STYLES = ("2017", "2025")
#: The four changes from the 2017 block to the 2025 block, in the order notebook 11 makes them (``DecoderLM(upgrades=)``).
UPGRADES = ("rmsnorm", "rope", "swiglu", "gqa")

#: Notebook 11's stages, each one change further (``benchmarks/search_lm.py``): the validation loss (nats per
#: character, on the 64 fixed validation windows ``train_lm`` measures) after the notebook's recipe, one value per run
#: (seeds 0-9, PyTorch's native kernels then its AVX2 kernels, on an AMD EPYC; ``benchmarks/results/11_language_model.md``).
# fmt: off
UPGRADE_RUNS: dict[str, tuple[float, ...]] = {
    "2017": (
        1.983, 2.014, 2.055, 1.990, 1.980, 1.912, 1.969, 2.055, 1.980, 1.962,  # native
        1.974, 2.011, 2.064, 1.983, 1.978, 1.911, 1.968, 2.025, 1.996, 1.956,  # avx2
    ),
    "+ RMSNorm": (
        1.998, 2.066, 2.019, 2.029, 2.029, 2.007, 2.048, 2.067, 1.994, 2.071,  # native
        2.002, 2.073, 2.012, 2.020, 2.026, 2.004, 2.053, 2.059, 1.994, 2.063,  # avx2
    ),
    "+ RoPE": (
        1.902, 1.855, 1.880, 1.940, 1.888, 1.884, 1.863, 1.911, 1.883, 1.830,  # native
        1.881, 1.846, 1.883, 1.937, 1.893, 1.886, 1.866, 1.905, 1.894, 1.843,  # avx2
    ),
    "+ SwiGLU": (
        1.788, 1.809, 1.786, 1.821, 1.813, 1.797, 1.863, 1.844, 1.786, 1.820,  # native
        1.788, 1.809, 1.790, 1.821, 1.816, 1.797, 1.862, 1.844, 1.786, 1.819,  # avx2
    ),
    "2025": (
        1.856, 1.815, 1.834, 1.834, 1.812, 1.885, 1.873, 1.892, 1.869, 1.838,  # native
        1.856, 1.815, 1.834, 1.834, 1.812, 1.886, 1.873, 1.892, 1.869, 1.838,  # avx2
    ),
}
# fmt: on


# ---------------------------------------------------------------- components (the exercises' references)


def rms_norm(x: Tensor, weight: Tensor, eps: float = 1e-6) -> Tensor:
    """RMSNorm over the last axis: ``x / sqrt(mean(x**2) + eps) * weight``; x ``(..., d)``, weight ``(d,)``."""
    return x * torch.rsqrt(x.pow(2).mean(dim=-1, keepdim=True) + eps) * weight


def rope_angles(n: int, d: int, base: float = 10000.0, start: int = 0) -> Tensor:
    """Rotation angles ``(n, d // 2)``, float64: position ``start + t`` times frequency ``base ** (-2i / d)``."""
    if d % 2:
        raise ValueError(f"RoPE rotates pairs of features: the head width must be even, got {d}")
    freqs = base ** (-torch.arange(0, d, 2, dtype=torch.float64) / d)  # (d/2,)
    positions = torch.arange(start, start + n, dtype=torch.float64)  # (n,)
    return torch.outer(positions, freqs)  # (n, d/2)


def apply_rope(x: Tensor, angles: Tensor) -> Tensor:
    """Rotate each pair of features ``(x[..., 2i], x[..., 2i+1])`` of position t by ``angles[t, i]``.

    x ``(..., n, d)``, angles ``(n, d // 2)`` -> ``(..., n, d)``, in x's dtype.
    """
    cos, sin = angles.cos().to(x.dtype), angles.sin().to(x.dtype)  # (n, d/2)
    x_even, x_odd = x[..., 0::2], x[..., 1::2]  # (..., n, d/2)
    out_even = x_even * cos - x_odd * sin  # (..., n, d/2)
    out_odd = x_even * sin + x_odd * cos  # (..., n, d/2)
    return torch.stack([out_even, out_odd], dim=-1).flatten(-2)  # (..., n, d)


def apply_rope_complex(x: Tensor, angles: Tensor) -> Tensor:
    """The same rotation with complex numbers: pair i is ``x[2i] + 1j * x[2i+1]``, times ``exp(1j * angle)``."""
    z = torch.view_as_complex(x.double().reshape(*x.shape[:-1], -1, 2).contiguous())  # (..., n, d/2)
    rotated = z * torch.polar(torch.ones_like(angles), angles)  # (..., n, d/2)
    return torch.view_as_real(rotated).flatten(-2).to(x.dtype)  # (..., n, d)


def repeat_kv(kv: Tensor, groups: int) -> Tensor:
    """Share each key/value head with ``groups`` consecutive query heads: ``(b, g, n, d)`` -> ``(b, g * groups, n, d)``.

    Query head j reads key/value head ``j // groups``, as ``F.scaled_dot_product_attention(..., enable_gqa=True)``.
    """
    return kv.repeat_interleave(groups, dim=1)


def swiglu(x: Tensor, w_gate: Tensor, w_up: Tensor, w_down: Tensor) -> Tensor:
    """The gated feed-forward of LLaMA-style blocks: ``(silu(x W_gate^T) * x W_up^T) W_down^T``.

    x ``(..., d)``; weights in ``nn.Linear``'s layout (out, in): w_gate and w_up ``(h, d)``, w_down ``(d, h)``.
    """
    return (F.silu(x @ w_gate.T) * (x @ w_up.T)) @ w_down.T  # (..., d)


def cached_attention(q: Tensor, k: Tensor, v: Tensor) -> Tensor:
    """Causal attention of the **last** ``n`` positions over all ``m`` keys (``m >= n``), with PyTorch's fused kernel.

    q ``(..., n, d)``, k and v ``(..., m, d)``: query i is position ``m - n + i`` and sees keys ``0 .. m - n + i``
    (the "bottom-right" causal mask; with ``m == n`` the ordinary one). Returns ``(..., n, d)``.
    """
    n, m = q.shape[-2], k.shape[-2]
    if m < n:
        raise ValueError(f"there are fewer keys ({m}) than queries ({n}): the queries are the last n of the m positions")
    if m == n:
        return F.scaled_dot_product_attention(q, k, v, is_causal=True)
    if n == 1:  # one new query sees every cached key
        return F.scaled_dot_product_attention(q, k, v)
    mask = torch.ones(n, m, dtype=torch.bool, device=q.device).tril(diagonal=m - n)  # (n, m): bottom-right aligned
    return F.scaled_dot_product_attention(q, k, v, attn_mask=mask)


def cached_attention_math(q: Tensor, k: Tensor, v: Tensor) -> Tensor:
    """``cached_attention`` written out: scores, the bottom-right causal mask, softmax, weighted sum (for counting FLOPs)."""
    n, m = q.shape[-2], k.shape[-2]
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])  # (..., n, m)
    visible = torch.ones(n, m, dtype=torch.bool, device=q.device).tril(diagonal=m - n)  # (n, m), never an (m, m) one
    return scores.masked_fill(~visible, float("-inf")).softmax(-1) @ v  # (..., n, d)


def cache_update(cache_k: Tensor, cache_v: Tensor, k: Tensor, v: Tensor) -> tuple[Tensor, Tensor]:
    """Append the new keys and values to the cache along the sequence axis.

    cache ``(b, g, m, d)`` (m may be 0), new ``(b, g, n, d)`` -> ``(b, g, m + n, d)`` each.
    """
    return torch.cat([cache_k, k], dim=2), torch.cat([cache_v, v], dim=2)


@dataclass(frozen=True)
class Parts:
    """The functions a 2025 model runs, each with the signature of its exercise in notebook 11.

    The defaults are this module's references; ``Parts(rms_norm=my_rms_norm, ...)`` swaps in others.
    ``sources()`` says which are the references.
    """

    rms_norm: Callable[..., Tensor] = rms_norm
    apply_rope: Callable[..., Tensor] = apply_rope
    repeat_kv: Callable[..., Tensor] = repeat_kv
    swiglu: Callable[..., Tensor] = swiglu
    cached_attention: Callable[..., Tensor] = cached_attention
    cache_update: Callable[..., tuple[Tensor, Tensor]] = cache_update

    def sources(self) -> dict[str, str]:
        """``{part: "reference" or "yours"}``: a part is "yours" when it is not this module's function."""
        references = Parts()
        return {f.name: "reference" if getattr(self, f.name) is getattr(references, f.name) else "yours" for f in fields(self)}


class RMSNorm(nn.Module):
    """RMSNorm with a learned gain and no bias (as ``nn.RMSNorm(d, eps)``), computed by ``parts.rms_norm``."""

    def __init__(self, d: int, eps: float = 1e-6, parts: Parts | None = None) -> None:
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(d))
        self.parts = parts or Parts()

    def forward(self, x: Tensor) -> Tensor:
        return self.parts.rms_norm(x, self.weight, self.eps)


class SwiGLU(nn.Module):
    """The gated feed-forward ``w2(silu(w1 x) * w3 x)`` (LLaMA's names: w1 the gate, w3 the up, w2 the down
    projection), no biases, computed by ``parts.swiglu(x, w1.weight, w3.weight, w2.weight)``."""

    def __init__(self, d_model: int, d_hidden: int, parts: Parts | None = None) -> None:
        super().__init__()
        self.w1 = nn.Linear(d_model, d_hidden, bias=False)
        self.w3 = nn.Linear(d_model, d_hidden, bias=False)
        self.w2 = nn.Linear(d_hidden, d_model, bias=False)
        self.parts = parts or Parts()

    def forward(self, x: Tensor) -> Tensor:
        return self.parts.swiglu(x, self.w1.weight, self.w3.weight, self.w2.weight)


def _cache_length(cache: tuple[Tensor, Tensor] | None) -> int:
    return 0 if cache is None else cache[0].shape[2]


class GQAttention(nn.Module):
    """Causal grouped-query attention with RoPE and an optional KV cache; no biases (``bias=True`` adds them, and
    ``rope=False`` leaves the queries and keys unrotated: the steps between the 2017 and the 2025 block).

    ``forward(x, start=None, cache=None)``: x ``(b, n, d_model)`` holds positions ``start .. start + n - 1``;
    ``cache`` is ``None`` or a pair ``(k, v)`` of ``(b, kv_heads, start, head_dim)`` (rotated keys), so ``start``
    must equal the cache's length (it is inferred when left out; a wrong one raises ``ValueError``, since it
    would rotate the new queries and keys by the wrong positions). Returns ``(out, (k, v))`` with the cache
    grown by n positions.
    """

    def __init__(
        self,
        d_model: int,
        num_heads: int,
        kv_heads: int,
        base: float = 10000.0,
        parts: Parts | None = None,
        bias: bool = False,
        rope: bool = True,
    ) -> None:
        super().__init__()
        if d_model % num_heads or num_heads % kv_heads:
            raise ValueError(
                f"d_model ({d_model}) must divide into num_heads ({num_heads}) heads, and num_heads into groups of "
                f"kv_heads ({kv_heads})"
            )
        self.num_heads, self.kv_heads, self.head_dim, self.base = num_heads, kv_heads, d_model // num_heads, base
        self.rope = rope
        self.w_q = nn.Linear(d_model, d_model, bias=bias)
        self.w_k = nn.Linear(d_model, kv_heads * self.head_dim, bias=bias)
        self.w_v = nn.Linear(d_model, kv_heads * self.head_dim, bias=bias)
        self.w_o = nn.Linear(d_model, d_model, bias=bias)
        self.parts = parts or Parts()

    def forward(
        self, x: Tensor, start: int | None = None, cache: tuple[Tensor, Tensor] | None = None
    ) -> tuple[Tensor, tuple[Tensor, Tensor]]:
        n, past = x.shape[1], _cache_length(cache)
        if start is None:
            start = past
        elif cache is not None and start != past:
            raise ValueError(
                f"start={start} but the cache holds {past} positions: the new tokens are positions {past} onwards "
                "(leave start out to infer it from the cache)"
            )
        parts = self.parts
        q = split_heads(self.w_q(x), self.num_heads)  # (b, h, n, d)
        k = split_heads(self.w_k(x), self.kv_heads)  # (b, g, n, d)
        v = split_heads(self.w_v(x), self.kv_heads)  # (b, g, n, d)
        if self.rope:
            angles = rope_angles(n, self.head_dim, self.base, start).to(x.device)  # (n, d/2)
            q, k = parts.apply_rope(q, angles), parts.apply_rope(k, angles)
        if cache is not None:
            k, v = parts.cache_update(cache[0], cache[1], k, v)  # (b, g, start + n, d)
        groups = self.num_heads // self.kv_heads
        keys, values = parts.repeat_kv(k, groups), parts.repeat_kv(v, groups)  # (b, h, start + n, d)
        out = parts.cached_attention(q, keys, values)  # (b, h, n, d): query t (position start + t) sees keys 0 .. start + t
        return self.w_o(merge_heads(out)), (k, v)  # (b, n, d_model)


class ModernBlock(nn.Module):
    """A 2025 decoder block: pre-norm RMSNorm, GQA with RoPE, SwiGLU, no biases."""

    def __init__(self, d_model: int, num_heads: int, kv_heads: int, d_hidden: int, parts: Parts | None = None) -> None:
        super().__init__()
        self.norm1 = RMSNorm(d_model, parts=parts)
        self.attn = GQAttention(d_model, num_heads, kv_heads, parts=parts)
        self.norm2 = RMSNorm(d_model, parts=parts)
        self.ff = SwiGLU(d_model, d_hidden, parts=parts)

    def forward(
        self, x: Tensor, start: int | None = None, cache: tuple[Tensor, Tensor] | None = None
    ) -> tuple[Tensor, tuple[Tensor, Tensor]]:
        attn, cache = self.attn(self.norm1(x), start, cache)
        x = x + attn
        return x + self.ff(self.norm2(x)), cache


class StagedBlock(nn.Module):
    """A block between the 2017 and the 2025 one: ``upgrades`` (a subset of ``UPGRADES``) says which changes it has.

    ``"rmsnorm"``: RMSNorm before each sub-layer (pre-norm) instead of LayerNorm after each residual addition
    (post-LN); ``"rope"``: queries and keys rotated (the model then adds no sinusoidal encoding); ``"swiglu"``: a
    SwiGLU feed-forward of width ``d_ff`` instead of a ReLU one with biases; ``"gqa"``: ``kv_heads`` key/value heads
    and no biases in attention (otherwise ``num_heads`` of each, with biases). Same call as ``ModernBlock``.
    """

    def __init__(
        self, d_model: int, num_heads: int, d_ff: int, upgrades: Sequence[str], kv_heads: int = 2, parts: Parts | None = None
    ) -> None:
        super().__init__()
        self.pre_norm = "rmsnorm" in upgrades
        gqa = "gqa" in upgrades
        self.norm1: nn.Module = RMSNorm(d_model, parts=parts) if self.pre_norm else nn.LayerNorm(d_model)
        self.norm2: nn.Module = RMSNorm(d_model, parts=parts) if self.pre_norm else nn.LayerNorm(d_model)
        self.attn = GQAttention(
            d_model, num_heads, kv_heads if gqa else num_heads, parts=parts, bias=not gqa, rope="rope" in upgrades
        )
        self.ff: nn.Module = SwiGLU(d_model, d_ff, parts=parts) if "swiglu" in upgrades else FeedForward(d_model, d_ff)

    def forward(
        self, x: Tensor, start: int | None = None, cache: tuple[Tensor, Tensor] | None = None
    ) -> tuple[Tensor, tuple[Tensor, Tensor]]:
        if self.pre_norm:
            attn, cache = self.attn(self.norm1(x), start, cache)
            x = x + attn
            return x + self.ff(self.norm2(x)), cache
        attn, cache = self.attn(x, start, cache)
        x = self.norm1(x + attn)
        return self.norm2(x + self.ff(x)), cache


# ---------------------------------------------------------------- the model


class DecoderLM(nn.Module):
    """A decoder-only language model; ``forward(ids)``: ``(b, n)`` int64 -> logits ``(b, n, vocab)``.

    ``style="2017"``: embedding times ``sqrt(d_model)`` plus the sinusoidal encoding (any length), post-LN
    ``EncoderBlock`` (ReLU feed-forward of width ``d_ff``, biases) under a causal mask; no KV cache.
    ``style="2025"``: RoPE, ``ModernBlock`` (RMSNorm, GQA with ``kv_heads``, SwiGLU of width ``d_ff``), final
    RMSNorm, no biases, its functions taken from ``parts``. The head is tied to the token embedding.
    ``max_len`` is the context the model is meant to be trained on (neither style has a position table).

    ``upgrades`` (a subset of ``UPGRADES``: ``"rmsnorm"``, ``"rope"``, ``"swiglu"``, ``"gqa"``), when given, builds the
    model between the two that has those changes (``StagedBlock``; ``style`` is then ignored): none of them is the
    2017 model, all four the 2025 one. Without ``"rope"`` the embedding is scaled and the sinusoidal encoding added
    as in 2017; with it, neither. ``self.upgrades`` says which a model has; ``self.style`` is ``"2017"``, ``"2025"``
    or, in between, ``"2017 + rmsnorm + rope"`` and so on.

    ``init`` sets the token embedding's initialisation and input scale on their own: ``"2017"`` (std
    ``d_model ** -0.5``, the embedded input multiplied by ``sqrt(d_model)``: unit scale, comparable to the
    sinusoidal encoding added to it) or ``"2025"`` (std 0.02, unscaled, as GPT-2 and LLaMA). The head being tied
    (``logits = h @ embed.weight.T``), it also sets the scale of the first logits. ``None`` (the default) takes the
    model's own: ``"2017"`` while it adds the sinusoidal encoding (no ``"rope"``), ``"2025"`` once it has RoPE.
    ``self.init`` says which a model has, ``self.embed_scale`` its input scale.
    """

    def __init__(
        self,
        vocab_size: int,
        d_model: int = 64,
        num_heads: int = 4,
        num_layers: int = 2,
        d_ff: int = 128,
        max_len: int = 128,
        style: str = "2025",
        kv_heads: int = 2,
        parts: Parts | None = None,
        upgrades: Sequence[str] | None = None,
        init: str | None = None,
    ) -> None:
        super().__init__()
        if init not in (None, *STYLES):
            raise ValueError(f"init must be None, '2017' or '2025', got {init!r}")
        if upgrades is not None:
            unknown = [u for u in upgrades if u not in UPGRADES]
            if unknown or isinstance(upgrades, str):
                raise ValueError(f"upgrades must be a list of names from {UPGRADES}, got {upgrades!r}")
            upgrades = tuple(u for u in UPGRADES if u in upgrades)  # in the course's order
            style = "2017" if not upgrades else "2025" if upgrades == UPGRADES else " + ".join(("2017", *upgrades))
        elif style not in STYLES:
            raise ValueError(f"style must be one of {STYLES}, got {style!r}")
        else:
            upgrades = () if style == "2017" else UPGRADES
        if style == "2017" and parts is not None:
            raise ValueError("`parts` are the functions of the 2025 block; the 2017 model is built from helpers.blocks")
        self.style, self.max_len, self.d_model, self.upgrades = style, max_len, d_model, upgrades
        self.init = init if init is not None else "2025" if "rope" in upgrades else "2017"
        self.embed_scale = math.sqrt(d_model) if self.init == "2017" else 1.0
        embed_std = d_model**-0.5 if self.init == "2017" else 0.02
        self.embed = nn.Embedding(vocab_size, d_model)
        if style not in STYLES:  # between 2017 and 2025
            self.parts = parts or Parts()
            nn.init.normal_(self.embed.weight, std=embed_std)
            self.blocks = nn.ModuleList(
                StagedBlock(d_model, num_heads, d_ff, upgrades, kv_heads, self.parts) for _ in range(num_layers)
            )
            self.norm = RMSNorm(d_model, parts=self.parts) if "rmsnorm" in upgrades else nn.Identity()
        elif style == "2017":
            nn.init.normal_(self.embed.weight, std=embed_std)  # "2017": times sqrt(d_model) in forward, unit scale
            self.blocks = nn.ModuleList(
                EncoderBlock(d_model, num_heads, d_ff, norm_first=False, activation="relu") for _ in range(num_layers)
            )
            self.norm: nn.Module = nn.Identity()  # post-LN: every block already ends with a LayerNorm
        else:
            nn.init.normal_(self.embed.weight, std=embed_std)
            self.parts = parts or Parts()
            self.blocks = nn.ModuleList(ModernBlock(d_model, num_heads, kv_heads, d_ff, self.parts) for _ in range(num_layers))
            self.norm = RMSNorm(d_model, parts=self.parts)

    def set_parts(self, parts: Parts) -> DecoderLM:
        """Run the 2025 model (or one between 2017 and 2025) with other functions from now on (the weights are
        untouched); returns the model."""
        if self.style == "2017":
            raise ValueError("only the 2025 model runs on `parts`")
        self.parts = parts
        for module in self.modules():
            if isinstance(module, (RMSNorm, SwiGLU, GQAttention)):
                module.parts = parts
        return self

    def head(self, h: Tensor) -> Tensor:
        """Tied output head: ``(..., d_model)`` -> ``(..., vocab)``."""
        return h @ self.embed.weight.T

    def forward(self, ids: Tensor, start: int | None = None, caches: list | None = None) -> Tensor:
        """Logits ``(b, n, vocab)``. With ``caches`` (2025 only: a list with one entry per block, each ``None`` or a
        ``(k, v)`` pair, updated in place), ``ids`` are the positions after the cached ones; ``start``, if given,
        must equal the cache length."""
        if ids.dim() != 2:
            raise ValueError(f"ids must be (batch, n) token ids, got shape {tuple(ids.shape)}")
        n = ids.shape[1]
        x = self.embed(ids)  # (b, n, d_model)
        if self.style == "2017":
            if caches is not None:
                raise ValueError("the 2017 model has no KV cache: call it without `caches`")
            first = start or 0
            pe = sinusoidal_positional_encoding(first + n, self.d_model)[first:]  # (n, d_model)
            x = x * self.embed_scale + pe.to(device=x.device, dtype=x.dtype)
            mask = causal_mask(n, device=ids.device)  # (n, n)
            for block in self.blocks:
                x = block(x, mask)
            return self.head(self.norm(x))
        if "rope" not in self.upgrades:  # a model between 2017 and 2025 that still adds the sinusoidal encoding
            first = _cache_length(caches[0]) if caches else (start or 0)
            pe = sinusoidal_positional_encoding(first + n, self.d_model)[first:]  # (n, d_model)
            x = x * self.embed_scale + pe.to(device=x.device, dtype=x.dtype)
        elif self.embed_scale != 1.0:  # RoPE with the 2017 initialisation: the input keeps its sqrt(d_model) scale
            x = x * self.embed_scale
        if caches is not None:
            if len(caches) != len(self.blocks):
                raise ValueError(f"caches must hold one entry per block ({len(self.blocks)}), got {len(caches)}")
            lengths = {_cache_length(c) for c in caches}
            if len(lengths) != 1:
                raise ValueError(f"the blocks' caches hold different numbers of positions: {sorted(lengths)}")
            past = lengths.pop()
            if start is not None and start != past:
                raise ValueError(
                    f"start={start} but the caches hold {past} positions: the new tokens are positions {past} onwards "
                    "(leave start out to infer it from the caches)"
                )
            start = past
        for i, block in enumerate(self.blocks):
            x, kv = block(x, start, None if caches is None else caches[i])
            if caches is not None:
                caches[i] = kv
        return self.head(self.norm(x))


# ---------------------------------------------------------------- sampling


def temperature_top_k(logits: Tensor, temperature: float = 1.0, k: int | None = None) -> Tensor:
    """Divide by the temperature, then keep the ``k`` largest logits (all of them for ``k=None``); the others get
    ``-inf``. logits ``(..., vocab)`` -> ``(..., vocab)``. Ties with the k-th largest are kept (as transformers'
    ``TopKLogitsWarper``)."""
    if temperature <= 0:
        raise ValueError(f"temperature must be positive (use greedy=True for the most likely token), got {temperature}")
    logits = logits / temperature
    if k is None:
        return logits
    if k < 1:
        raise ValueError(f"top-k keeps at least one token: k must be at least 1, got {k}")
    kth = logits.topk(min(k, logits.shape[-1]), dim=-1).values[..., -1:]  # (..., 1)
    return logits.masked_fill(logits < kth, float("-inf"))


def top_p_filter(logits: Tensor, p: float) -> Tensor:
    """Keep the smallest set of most likely tokens whose probabilities reach ``p`` (always at least the most likely
    one, as transformers' ``TopPLogitsWarper``); the others get ``-inf``. ``p >= 1`` keeps every token.
    logits ``(..., vocab)`` -> ``(..., vocab)``."""
    if not 0.0 <= p <= 1.0:
        raise ValueError(f"top_p must be between 0 and 1, got {p}")
    if p >= 1.0:  # everything: in float32 a running sum can reach 1 before the last tokens, so do not compute it
        return logits
    sorted_logits, order = logits.sort(dim=-1, descending=True)  # (..., vocab)
    probs = sorted_logits.double().softmax(-1)  # float64: the running sum rounds less
    above = probs.cumsum(-1) - probs  # (..., vocab): probability of the tokens ranked above each one
    keep_sorted = above < p
    keep_sorted[..., 0] = True  # the most likely token always stays (p = 0 too)
    keep = keep_sorted.scatter(-1, order, keep_sorted)  # (..., vocab), back in vocabulary order
    return logits.masked_fill(~keep, float("-inf"))


def filter_logits(logits: Tensor, temperature: float = 1.0, top_k: int | None = None, top_p: float | None = None) -> Tensor:
    """Temperature, then top-k, then top-p (``temperature_top_k``, ``top_p_filter``): the dropped tokens get ``-inf``.

    logits ``(..., vocab)`` -> ``(..., vocab)``; the most likely token is always kept.
    """
    logits = temperature_top_k(logits, temperature, top_k)
    return logits if top_p is None else top_p_filter(logits, top_p)


def sample_next(
    logits: Tensor,
    greedy: bool = False,
    temperature: float = 1.0,
    top_k: int | None = None,
    top_p: float | None = None,
    generator: torch.Generator | None = None,
    logits_filter: Callable[[Tensor], Tensor] | None = None,
) -> Tensor:
    """The next token ids ``(b,)`` from the last logits ``(b, vocab)``.

    ``logits_filter`` (logits -> filtered logits, e.g. ``lambda z: my_top_p_filter(z, 0.9)``) replaces the
    temperature, top_k and top_p arguments.
    """
    if greedy:
        return logits.argmax(-1)
    if logits_filter is not None:
        if temperature != 1.0 or top_k is not None or top_p is not None:
            raise ValueError("give either logits_filter or temperature/top_k/top_p, not both")
        filtered = logits_filter(logits)
    else:
        filtered = filter_logits(logits, temperature, top_k, top_p)
    probs = filtered.float().softmax(-1)  # (b, vocab)
    if not torch.isfinite(probs).all():
        raise ValueError("the filtered logits keep no token (every logit is -inf): a filter must keep at least one")
    return torch.multinomial(probs, 1, generator=generator).squeeze(-1)


@torch.no_grad()
def generate(
    model: DecoderLM, prompt: Tensor, steps: int, use_cache: bool = True, window: int | None = None, **sampling
) -> Tensor:
    """Extend ``prompt`` ``(b, n)`` by ``steps`` tokens; returns ``(b, n + steps)``.

    With the cache (2025 only), the prompt runs once and each step runs only the newest token, at its position
    in the growing sequence. Without it (``use_cache=False``, and always for the 2017 model), each step re-runs
    the whole sequence, or only its last ``window`` tokens (positions 0 .. window - 1 each time: a sliding window,
    which a cache cannot follow, since every kept token's position changes). ``sampling`` goes to ``sample_next``.
    """
    if window is not None:
        if use_cache and model.style == "2025":
            raise ValueError("a sliding window re-runs the last `window` tokens at every step: call with use_cache=False")
        if window < 1:
            raise ValueError(f"window must be at least 1, got {window}")
    model.eval()
    ids = prompt.to(_device_of(model))
    if use_cache and model.style == "2025":
        caches: list = [None] * len(model.blocks)
        logits = model(ids, 0, caches)[:, -1]  # (b, vocab)
        for _ in range(steps):
            nxt = sample_next(logits, **sampling)  # (b,)
            ids = torch.cat([ids, nxt[:, None]], 1)
            logits = model(nxt[:, None], ids.shape[1] - 1, caches)[:, -1]
        return ids
    for _ in range(steps):
        context = ids if window is None else ids[:, -window:]
        nxt = sample_next(model(context)[:, -1], **sampling)  # (b,)
        ids = torch.cat([ids, nxt[:, None]], 1)
    return ids


# ---------------------------------------------------------------- training and evaluation


@dataclass
class LMHistory:
    """Training steps at which the validation loss was measured, the losses (nats per token), the seconds (wall
    clock) and the CPU seconds of this process (``time.process_time``, which other work on a shared machine
    disturbs far less)."""

    steps: list[int] = field(default_factory=list)
    val_loss: list[float] = field(default_factory=list)
    train_loss: list[float] = field(default_factory=list)
    seconds: float = 0.0
    cpu_seconds: float = 0.0

    @property
    def bits_per_char(self) -> float:
        """The final validation loss in bits per character (nats / ln 2)."""
        return self.val_loss[-1] / math.log(2)


def lm_batches(ids: Tensor, context: int, batch_size: int, generator: torch.Generator) -> tuple[Tensor, Tensor]:
    """A random batch of windows: inputs ``(batch, context)`` and targets shifted by one ``(batch, context)``."""
    if len(ids) <= context:
        raise ValueError(f"the text has {len(ids)} tokens, fewer than context + 1 = {context + 1}")
    starts = torch.randint(0, len(ids) - context, (batch_size,), generator=generator)  # (batch,)
    offsets = torch.arange(context + 1)  # (context + 1,)
    windows = ids[starts[:, None] + offsets]  # (batch, context + 1)
    return windows[:, :-1], windows[:, 1:]


def lm_loss(model: nn.Module, x: Tensor, y: Tensor) -> Tensor:
    """Mean cross-entropy of next-token prediction: logits ``(b, n, V)`` against targets ``(b, n)``."""
    logits = model(x)
    return F.cross_entropy(logits.flatten(0, 1), y.flatten())


def next_token_loss(logits: Tensor, ids: Tensor) -> Tensor:
    """The next-token loss of a window (notebook 11's exercise): position t's logits predict token t + 1.

    logits ``(b, n, V)``, the model's output on ids ``(b, n)`` -> the mean cross-entropy (nats) over the ``b (n - 1)``
    predictions that have a target (the last position has none).
    """
    return F.cross_entropy(logits[:, :-1].flatten(0, 1), ids[:, 1:].flatten())


@torch.no_grad()
def sample(
    model: nn.Module,
    ids: Tensor,
    steps: int,
    window: int = 64,
    logits_filter: Callable[[Tensor], Tensor] | None = None,
    generator: torch.Generator | None = None,
) -> Tensor:
    """The generation loop (notebook 11's exercise): ``steps`` times, run the model on the last ``window`` tokens,
    filter its last position's logits, sample a token from their softmax and append it. ids ``(b, n)`` ->
    ``(b, n + steps)``, on the model's device (ids are moved there). The same tokens as ``generate(model, ids, steps,
    use_cache=False, window=window, logits_filter=logits_filter, generator=generator)``."""
    ids = ids.to(_device_of(model))
    for _ in range(steps):
        logits = model(ids[:, -window:])[:, -1]  # (b, V): after the last token
        if logits_filter is not None:
            logits = logits_filter(logits)
        probs = logits.float().softmax(-1)  # (b, V)
        nxt = torch.multinomial(probs, 1, generator=generator)  # (b, 1)
        ids = torch.cat([ids, nxt], dim=1)  # (b, n + 1)
    return ids


def _device_of(model: nn.Module) -> torch.device:
    """The device of the model's parameters (the CPU for a model without any)."""
    parameter = next(model.parameters(), None)
    return torch.device("cpu") if parameter is None else parameter.device


@torch.no_grad()
def _val_loss(model: nn.Module, val_windows: tuple[Tensor, Tensor]) -> float:
    model.eval()
    return lm_loss(model, *val_windows).item()


def train_lm(
    model: DecoderLM,
    train_ids: Tensor,
    val_ids: Tensor,
    steps: int = 600,
    context: int = 64,
    batch_size: int = 32,
    lr: float = 3e-3,
    eval_every: int = 100,
    val_windows: int = 64,
    seed: int = 0,
    callback=None,
    loss_fn: Callable[[Tensor, Tensor], Tensor] | None = None,
    warmup: int | None = None,
    eval_at_start: bool = False,
) -> LMHistory:
    """AdamW with warm-up then cosine decay (``helpers.training.warmup_cosine``) on random windows of ``train_ids``.

    Every ``eval_every`` steps (and at the end) the validation loss is measured on ``val_windows`` fixed,
    evenly spaced windows of ``val_ids`` (the same for every model) and ``callback(step, model)`` is called.
    ``loss_fn(logits, ids)`` (``next_token_loss``'s signature: a learner's own), when given, computes the training
    loss: the model runs on the window of ``context + 1`` tokens and ``loss_fn`` shifts the targets itself (the
    logits of the first ``context`` positions are the same, the model being causal). The validation loss is always
    the course's. ``warmup``: the steps of the linear warm-up (``steps // 20`` by default). ``eval_at_start``: also
    measure the validation loss before the first step (recorded as step 0, with a training loss of NaN; the training
    itself is unchanged). The batches go to the model's device (the windows are drawn on the CPU, so a seed gives
    the same windows everywhere).
    """
    steps = capped(steps, 5)  # every step (five in a smoke test: helpers.runtime.smoke)
    generator = torch.Generator().manual_seed(seed)
    windows = validation_windows(val_ids, context, val_windows)  # (val_windows, context + 1)
    device = _device_of(model)
    val = (windows[:, :-1].to(device), windows[:, 1:].to(device))
    optimizer = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.01, betas=(0.9, 0.99))
    warm = max(1, steps // 20) if warmup is None else max(1, min(warmup, steps))
    scheduler = warmup_cosine(optimizer, warm, steps)
    history = LMHistory()
    begin, cpu = time.perf_counter(), time.process_time()
    if eval_at_start:
        history.steps.append(0)
        history.train_loss.append(math.nan)
        history.val_loss.append(_val_loss(model, val))
    for step in range(1, steps + 1):
        model.train()
        x, y = lm_batches(train_ids, context, batch_size, generator)
        x, y = x.to(device), y.to(device)
        optimizer.zero_grad()
        if loss_fn is None:
            loss = lm_loss(model, x, y)
        else:
            window = torch.cat([x, y[:, -1:]], dim=1)  # (batch, context + 1)
            loss = loss_fn(model(window), window)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        scheduler.step()
        if step % eval_every == 0 or step == steps:
            history.steps.append(step)
            history.train_loss.append(loss.item())
            history.val_loss.append(_val_loss(model, val))
            if callback is not None:
                callback(step, model)
    history.seconds = time.perf_counter() - begin
    history.cpu_seconds = time.process_time() - cpu
    return history


def validation_windows(ids: Tensor, context: int = 64, count: int = 64) -> Tensor:
    """The ``count`` windows of ``context + 1`` tokens, evenly spaced over ``ids``, on which ``train_lm`` measures
    the validation loss: ``(count, context + 1)`` (each gives ``context`` predictions with their targets)."""
    if len(ids) <= context:
        raise ValueError(f"the text has {len(ids)} tokens, fewer than context + 1 = {context + 1}")
    starts = torch.linspace(0, len(ids) - context - 1, count).long()  # (count,)
    return ids[starts[:, None] + torch.arange(context + 1)]  # (count, context + 1)


def _windows(ids: Tensor, context: int) -> tuple[Tensor, Tensor]:
    """Every non-overlapping window of ``context + 1`` tokens (overlapping by one): inputs and targets ``(w, context)``."""
    count = (len(ids) - 1) // context
    if count < 1:
        raise ValueError(f"the text has {len(ids)} tokens, fewer than context + 1 = {context + 1}")
    starts = torch.arange(count, device=ids.device) * context  # (w,)
    windows = ids[starts[:, None] + torch.arange(context + 1, device=ids.device)]  # (w, context + 1)
    return windows[:, :-1], windows[:, 1:]


@torch.no_grad()
def evaluate_lm(model: nn.Module, ids: Tensor, context: int = 64, batch_size: int = 256) -> float:
    """Mean next-token loss (nats) over every character of ``ids`` that ends a full window: the text is cut into
    consecutive windows of ``context`` predictions, so each prediction sees 0 to ``context - 1`` earlier characters."""
    model.eval()
    x, y = _windows(ids.to(_device_of(model)), context)
    total = 0.0
    for i in range(0, len(x), batch_size):
        logits = model(x[i : i + batch_size])  # (b, context, V)
        total += F.cross_entropy(logits.flatten(0, 1), y[i : i + batch_size].flatten(), reduction="sum").item()
    return total / y.numel()


@torch.no_grad()
def loss_by_position(model: nn.Module, ids: Tensor, length: int, batch_size: int = 64) -> Tensor:
    """Mean next-token loss at each position ``(length,)`` over every non-overlapping window of ``length`` of ``ids``.

    Position t predicts character t + 1 from the t + 1 characters before it; past the context the model was
    trained on, this shows whether it still works there (it need not: that is length extrapolation).
    """
    model.eval()
    x, y = _windows(ids.to(_device_of(model)), length)
    total = torch.zeros(length, dtype=torch.float64, device=x.device)
    for i in range(0, len(x), batch_size):
        logits = model(x[i : i + batch_size])  # (b, length, V)
        losses = F.cross_entropy(logits.transpose(1, 2), y[i : i + batch_size], reduction="none")  # (b, length)
        total += losses.double().sum(0)
    return (total / len(x)).cpu()


def ngram_loss(train_ids: Tensor, val_ids: Tensor, vocab_size: int, order: int = 2, alpha: float = 1.0) -> float:
    """Validation loss (nats per character) of a count model with add-``alpha`` smoothing.

    ``order=1``: character frequencies alone, ``p(c) = (count(c) + alpha) / (N + alpha V)``; ``order=2``: a bigram
    table, ``p(c | prev) = (count(prev, c) + alpha) / (count(prev) + alpha V)``, scored on every validation
    character after the first. ``val_ids`` may also be windows ``(w, n)`` (``validation_windows``): then every
    character of a window after its first is scored, the predictions a language model makes on the same windows.
    """
    if order not in (1, 2):
        raise ValueError(f"order must be 1 (unigram) or 2 (bigram), got {order}")
    if val_ids.dim() == 2:  # windows: score each window's characters after its first
        previous, targets = val_ids[:, :-1].reshape(-1), val_ids[:, 1:].reshape(-1)
    else:
        previous, targets = val_ids[:-1], val_ids[1:]
    if order == 1:
        counts = torch.bincount(train_ids, minlength=vocab_size).double() + alpha  # (V,)
        scored = targets if val_ids.dim() == 2 else val_ids  # a whole text: every character, the first too
        return -(counts / counts.sum()).log()[scored].mean().item()
    pairs = torch.bincount(train_ids[:-1] * vocab_size + train_ids[1:], minlength=vocab_size**2)  # (V * V,)
    counts = pairs.view(vocab_size, vocab_size).double() + alpha  # (V, V): row = previous character
    log_p = (counts / counts.sum(-1, keepdim=True)).log()  # (V, V)
    return -log_p[previous, targets].mean().item()


# ---------------------------------------------------------------- the cost of one more token


def _config(model: DecoderLM) -> dict[str, int]:
    if model.style != "2025":
        raise ValueError("the cost model is written for the 2025 model (its KV cache); the 2017 model has none")
    attn = model.blocks[0].attn
    return {
        "layers": len(model.blocks),
        "d_model": model.d_model,
        "heads": attn.num_heads,
        "kv_heads": attn.kv_heads,
        "head_dim": attn.head_dim,
        "d_ff": model.blocks[0].ff.w1.out_features,
        "vocab": model.embed.num_embeddings,
    }


def decode_flops(model: DecoderLM, context: int) -> dict[str, int]:
    """Floating-point operations of the matrix products of one generated token with ``context`` cached positions.

    A product of ``(1, a)`` by ``(a, b)`` costs ``2ab`` (a multiply and an add each). Per layer: the projections
    ``2 d (d + 2 g d_h + d)`` and the SwiGLU ``2 * 3 d d_ff`` do not depend on the context; the attention over the
    ``t = context + 1`` keys (scores and weighted sum, every query head) costs ``2 * 2 h d_h t``: linear in t.
    Plus the tied head ``2 d V`` once. Returns ``{"fixed", "attention", "total"}``.
    """
    c = _config(model)
    d, g, dh, t = c["d_model"], c["kv_heads"], c["head_dim"], context + 1
    per_layer_fixed = 2 * d * (d + 2 * g * dh + d) + 2 * 3 * d * c["d_ff"]
    fixed = c["layers"] * per_layer_fixed + 2 * d * c["vocab"]
    attention = c["layers"] * 2 * 2 * c["heads"] * dh * t
    return {"fixed": fixed, "attention": attention, "total": fixed + attention}


def cache_bytes(model: DecoderLM, context: int, bytes_per_value: int | None = None) -> int:
    """Bytes of the KV cache for ``context`` positions, batch 1: ``2 (keys and values) x layers x g x d_h x context``
    values, at ``bytes_per_value`` (the model's own: 4 for float32)."""
    c = _config(model)
    size = bytes_per_value if bytes_per_value is not None else model.embed.weight.element_size()
    return 2 * c["layers"] * c["kv_heads"] * c["head_dim"] * context * size


def random_caches(model: DecoderLM, context: int, batch: int = 1, seed: int = 0) -> list[tuple[Tensor, Tensor]]:
    """A cache of ``context`` random positions for every block (what one step costs does not depend on what the
    cache holds, so long contexts are timed without running a long prompt first)."""
    c = _config(model)
    weight = model.embed.weight
    gen = torch.Generator().manual_seed(seed)
    shape = (batch, c["kv_heads"], context, c["head_dim"])
    return [
        (
            torch.randn(shape, generator=gen).to(device=weight.device, dtype=weight.dtype),
            torch.randn(shape, generator=gen).to(device=weight.device, dtype=weight.dtype),
        )
        for _ in model.blocks
    ]


@torch.no_grad()
def count_decode_flops(model: DecoderLM, context: int) -> int:
    """The FLOPs of one cached step after ``context`` positions, counted by ``torch.utils.flop_counter.FlopCounterMode``.

    The fused attention kernel is invisible to the counter on a CPU, so the step runs with the written-out
    ``cached_attention_math`` (the model's own parts are restored afterwards).
    """
    from torch.utils.flop_counter import FlopCounterMode

    _config(model)  # the 2025 model only
    saved = model.parts
    model.set_parts(replace(saved, cached_attention=cached_attention_math))
    try:
        model.eval()
        caches: list = random_caches(model, context)
        token = torch.zeros(1, 1, dtype=torch.long, device=model.embed.weight.device)
        with FlopCounterMode(display=False) as counter:
            model(token, context, caches)
    finally:
        model.set_parts(saved)
    return int(counter.get_total_flops())


@torch.no_grad()
def time_per_token(
    model: DecoderLM,
    context: int,
    steps: int = 8,
    use_cache: bool = True,
    repeats: int = 1,
    seed: int = 0,
    prefill: bool = True,
    clock: Callable[[], float] = time.perf_counter,
) -> float:
    """Seconds per generated token (greedy, batch 1) after a context of ``context`` tokens; the best of ``repeats``.

    With the cache, the context is in the cache before the clock starts: by running a random prompt
    (``prefill=True``) or, much faster for long contexts, as random keys and values (``prefill=False``; a step
    costs the same), followed by one untimed step. Without it, every step re-runs the whole sequence (the 2017
    model too). ``clock``: wall time by default; ``time.process_time`` counts only this process's CPU time, which
    other work on a shared machine disturbs far less.
    """
    if use_cache and model.style != "2025":
        raise ValueError("time_per_token with use_cache=True needs the 2025 model (the 2017 model has no KV cache)")
    if steps < 1 or repeats < 1:
        raise ValueError(f"steps and repeats must be at least 1, got {steps} and {repeats}")
    model.eval()
    device = model.embed.weight.device
    prompt = torch.randint(0, model.embed.num_embeddings, (1, context), generator=torch.Generator().manual_seed(seed))
    best = math.inf
    for _ in range(repeats):
        ids = prompt.to(device)  # (1, context)
        if use_cache:
            if prefill:
                caches: list = [None] * len(model.blocks)
                logits = model(ids, 0, caches)[:, -1]  # (1, vocab)
            else:
                caches = random_caches(model, context, seed=seed)
                logits = torch.zeros(1, model.embed.num_embeddings, device=device)
            logits = model(logits.argmax(-1)[:, None], context, caches)[:, -1]  # one untimed step: first allocations
            begin = clock()
            for step in range(steps):
                nxt = logits.argmax(-1)  # (1,)
                logits = model(nxt[:, None], context + 1 + step, caches)[:, -1]
        else:
            begin = clock()
            for _ in range(steps):
                nxt = model(ids)[:, -1].argmax(-1)  # (1,)
                ids = torch.cat([ids, nxt[:, None]], 1)
        best = min(best, (clock() - begin) / steps)
    return best


def decode_times(
    model: DecoderLM,
    contexts: Sequence[int],
    steps: int = 16,
    repeats: int = 5,
    use_cache: bool = True,
    warmup: int = 1,
    clock: Callable[[], float] = time.process_time,
) -> list[float]:
    """Median CPU seconds per generated token at each context, the way ``benchmarks/`` measures: ``warmup`` untimed
    rounds, then ``repeats`` rounds that each time every context once (interleaved, so a change of the machine's
    load hits every context alike); cached steps start from random caches (``time_per_token(prefill=False)``).
    The clock is this process's CPU time (``time.process_time``), which other processes on a shared machine
    disturb far less than the wall clock; pass ``clock=time.perf_counter`` for wall time."""
    times: dict[int, list[float]] = {n: [] for n in contexts}
    for round_ in range(warmup + repeats):
        for n in contexts:
            seconds = time_per_token(model, n, steps, use_cache, repeats=1, seed=round_, prefill=False, clock=clock)
            if round_ >= warmup:
                times[n].append(seconds)
    return [statistics.median(times[n]) for n in contexts]
