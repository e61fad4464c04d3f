"""Notebook 11: a decoder-only (GPT-style) language model, in a 2017 and a 2025 flavour.

Both flavours embed tokens, run a stack of causal self-attention blocks, apply a
final norm and read the logits with a head tied to the token embedding
(``logits = h @ embed.weight.T``).

- ``style="2017"``: learned position embeddings and ``helpers.blocks.EncoderBlock``
  (pre-LN LayerNorm, GELU feed-forward, biases) under ``causal_mask``.
- ``style="2025"``: no position embedding but rotary embeddings (RoPE) inside
  attention, RMSNorm, a SwiGLU feed-forward, grouped-query attention (fewer key/value
  heads than query heads) and no biases: ``ModernBlock``. Only this flavour keeps a
  KV cache for generation.

The small functions the notebook's exercises re-derive live here as the
references: ``rms_norm``, ``rope_angles`` / ``apply_rope``, ``repeat_kv``,
``cache_update``; and the samplers ``sample_next`` (greedy, temperature, top-k,
top-p) and ``generate``. Shapes: batch ``b``, heads ``h``, key/value heads ``g``,
sequence ``n``, head width ``d``.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from helpers.attention import causal_mask, merge_heads, split_heads
from helpers.blocks import EncoderBlock
from helpers.smoke import capped
from helpers.training import warmup_cosine

__all__ = [
    "rms_norm",
    "RMSNorm",
    "rope_angles",
    "apply_rope",
    "apply_rope_complex",
    "repeat_kv",
    "cache_update",
    "SwiGLU",
    "GQAttention",
    "ModernBlock",
    "DecoderLM",
    "filter_logits",
    "sample_next",
    "generate",
    "LMHistory",
    "lm_batches",
    "lm_loss",
    "train_lm",
    "time_per_token",
]


# ---------------------------------------------------------------- components


def rms_norm(x: Tensor, weight: Tensor, eps: float = 1e-6) -> Tensor:
    """RMSNorm over the last axis: ``x / sqrt(mean(x**2) + eps) * weight``; x ``(..., d)``, weight ``(d,)``."""
    return x * torch.rsqrt(x.pow(2).mean(dim=-1, keepdim=True) + eps) * weight


class RMSNorm(nn.Module):
    """RMSNorm with a learned gain and no bias (as ``nn.RMSNorm(d, eps)``)."""

    def __init__(self, d: int, eps: float = 1e-6) -> None:
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(d))

    def forward(self, x: Tensor) -> Tensor:
        return rms_norm(x, self.weight, self.eps)


def rope_angles(n: int, d: int, base: float = 10000.0, start: int = 0) -> Tensor:
    """Rotation angles ``(n, d // 2)``: position ``start + t`` times frequency ``base ** (-2i / d)``."""
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


def cache_update(cache_k: Tensor, cache_v: Tensor, k: Tensor, v: Tensor) -> tuple[Tensor, Tensor]:
    """Append the new keys and values to the cache along the sequence axis.

    cache ``(b, g, m, d)`` (m may be 0), new ``(b, g, n, d)`` -> ``(b, g, m + n, d)`` each.
    """
    return torch.cat([cache_k, k], dim=2), torch.cat([cache_v, v], dim=2)


class SwiGLU(nn.Module):
    """The gated feed-forward of LLaMA-style blocks: ``w2(silu(w1 x) * w3 x)``, no biases."""

    def __init__(self, d_model: int, d_hidden: int) -> None:
        super().__init__()
        self.w1 = nn.Linear(d_model, d_hidden, bias=False)
        self.w3 = nn.Linear(d_model, d_hidden, bias=False)
        self.w2 = nn.Linear(d_hidden, d_model, bias=False)

    def forward(self, x: Tensor) -> Tensor:
        return self.w2(F.silu(self.w1(x)) * self.w3(x))


class GQAttention(nn.Module):
    """Causal grouped-query attention with RoPE and an optional KV cache; no biases.

    ``forward(x, start=0, cache=None)``: x ``(b, n, d_model)`` holds positions
    ``start .. start + n - 1``; ``cache`` is ``None`` or a pair ``(k, v)`` of
    ``(b, kv_heads, start, head_dim)`` (rotated keys). Returns ``(out, (k, v))``
    with the cache grown by n positions.
    """

    def __init__(self, d_model: int, num_heads: int, kv_heads: int, base: float = 10000.0) -> None:
        super().__init__()
        if d_model % num_heads or num_heads % kv_heads:
            raise ValueError(
                f"d_model ({d_model}) must divide into num_heads ({num_heads}), and num_heads into kv_heads ({kv_heads})"
            )
        self.num_heads, self.kv_heads, self.head_dim, self.base = num_heads, kv_heads, d_model // num_heads, base
        self.w_q = nn.Linear(d_model, d_model, bias=False)
        self.w_k = nn.Linear(d_model, kv_heads * self.head_dim, bias=False)
        self.w_v = nn.Linear(d_model, kv_heads * self.head_dim, bias=False)
        self.w_o = nn.Linear(d_model, d_model, bias=False)

    def forward(
        self, x: Tensor, start: int = 0, cache: tuple[Tensor, Tensor] | None = None
    ) -> tuple[Tensor, tuple[Tensor, Tensor]]:
        n = x.shape[1]
        q = split_heads(self.w_q(x), self.num_heads)  # (b, h, n, d)
        k = split_heads(self.w_k(x), self.kv_heads)  # (b, g, n, d)
        v = split_heads(self.w_v(x), self.kv_heads)  # (b, g, n, d)
        angles = rope_angles(n, self.head_dim, self.base, start).to(x.device)  # (n, d/2)
        q, k = apply_rope(q, angles), apply_rope(k, angles)
        if cache is not None:
            k, v = cache_update(cache[0], cache[1], k, v)  # (b, g, start + n, d)
        groups = self.num_heads // self.kv_heads
        keys, values = repeat_kv(k, groups), repeat_kv(v, groups)  # (b, h, start + n, d)
        m = keys.shape[2]
        if m == n:  # no cache before this call: the plain causal mask
            out = F.scaled_dot_product_attention(q, keys, values, is_causal=True)  # (b, h, n, d)
        elif n == 1:
            out = F.scaled_dot_product_attention(q, keys, values)  # one new query sees every cached key
        else:  # query t (position start + t) sees keys 0 .. start + t
            mask = causal_mask(m, device=x.device)[m - n :]  # (n, m)
            out = F.scaled_dot_product_attention(q, keys, values, attn_mask=mask)  # (b, h, n, d)
        out = merge_heads(out)  # (b, n, d_model)
        return self.w_o(out), (k, v)


class ModernBlock(nn.Module):
    """A 2025 decoder block: pre-norm RMSNorm, GQA with RoPE, SwiGLU, no biases."""

    def __init__(self, d_model: int, num_heads: int, kv_heads: int, d_hidden: int) -> None:
        super().__init__()
        self.norm1 = RMSNorm(d_model)
        self.attn = GQAttention(d_model, num_heads, kv_heads)
        self.norm2 = RMSNorm(d_model)
        self.ff = SwiGLU(d_model, d_hidden)

    def forward(
        self, x: Tensor, start: int = 0, cache: tuple[Tensor, Tensor] | None = None
    ) -> tuple[Tensor, tuple[Tensor, Tensor]]:
        attn, cache = self.attn(self.norm1(x), start, cache)
        x = x + attn
        return x + self.ff(self.norm2(x)), cache


# ---------------------------------------------------------------- the model


class DecoderLM(nn.Module):
    """A decoder-only language model; ``forward(ids)``: ``(b, n)`` int64 -> logits ``(b, n, vocab)``.

    ``style="2017"``: learned positions (up to ``max_len``), ``EncoderBlock`` (pre-LN, GELU, ``d_ff``) under a
    causal mask, final LayerNorm. ``style="2025"``: RoPE, ``ModernBlock`` (RMSNorm, GQA with ``kv_heads``,
    SwiGLU of width ``d_ff``), final RMSNorm, no biases. The head is tied to the token embedding.
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
    ) -> None:
        super().__init__()
        if style not in ("2017", "2025"):
            raise ValueError(f"style must be '2017' or '2025', got {style!r}")
        self.style, self.max_len = style, max_len
        self.embed = nn.Embedding(vocab_size, d_model)
        nn.init.normal_(self.embed.weight, std=0.02)
        if style == "2017":
            self.pos = nn.Parameter(torch.randn(max_len, d_model) * 0.02)
            self.blocks = nn.ModuleList(
                EncoderBlock(d_model, num_heads, d_ff, norm_first=True, activation="gelu") for _ in range(num_layers)
            )
            self.norm: nn.Module = nn.LayerNorm(d_model)
        else:
            self.pos = None
            self.blocks = nn.ModuleList(ModernBlock(d_model, num_heads, kv_heads, d_ff) for _ in range(num_layers))
            self.norm = RMSNorm(d_model)

    def head(self, h: Tensor) -> Tensor:
        """Tied output head: ``(..., d_model)`` -> ``(..., vocab)``."""
        return h @ self.embed.weight.T

    def forward(self, ids: Tensor, start: int = 0, caches: list | None = None) -> Tensor:
        """Logits ``(b, n, vocab)``. With ``caches`` (2025 only, a list with one entry per block, each ``None`` or a
        ``(k, v)`` pair), ``ids`` are positions ``start ..`` and the list is updated in place."""
        if ids.dim() != 2:
            raise ValueError(f"ids must be (batch, n) token ids, got shape {tuple(ids.shape)}")
        n = ids.shape[1]
        x = self.embed(ids)  # (b, n, d_model)
        if self.style == "2017":
            if caches is not None:
                raise ValueError("the 2017 model has no KV cache: call it without `caches`")
            if n > self.max_len:
                raise ValueError(f"the 2017 model knows {self.max_len} positions; got a sequence of {n}")
            x = x + self.pos[:n]
            mask = causal_mask(n, device=ids.device)  # (n, n)
            for block in self.blocks:
                x = block(x, mask)
        else:
            for i, block in enumerate(self.blocks):
                x, kv = block(x, start, None if caches is None else caches[i])
                if caches is not None:
                    caches[i] = kv
        return self.head(self.norm(x))


# ---------------------------------------------------------------- sampling


def filter_logits(logits: Tensor, temperature: float = 1.0, top_k: int | None = None, top_p: float | None = None) -> Tensor:
    """Divide by the temperature, keep the ``top_k`` largest and/or the smallest set of most likely tokens whose
    probabilities reach ``top_p``; the others get ``-inf``. logits ``(..., vocab)`` -> ``(..., vocab)``."""
    if temperature <= 0:
        raise ValueError(f"temperature must be positive (use greedy=True for the most likely token), got {temperature}")
    logits = logits / temperature
    if top_k is not None:
        kth = logits.topk(min(top_k, logits.shape[-1]), dim=-1).values[..., -1:]  # (..., 1)
        logits = logits.masked_fill(logits < kth, float("-inf"))
    if top_p is not None:
        sorted_logits, order = logits.sort(dim=-1, descending=True)  # (..., vocab)
        probs = sorted_logits.softmax(-1)
        before = probs.cumsum(-1) - probs  # probability of the tokens ranked above each one
        drop_sorted = before >= top_p  # the first token is always kept
        drop = drop_sorted.scatter(-1, order, drop_sorted)
        logits = logits.masked_fill(drop, float("-inf"))
    return logits


def sample_next(
    logits: Tensor,
    greedy: bool = False,
    temperature: float = 1.0,
    top_k: int | None = None,
    top_p: float | None = None,
    generator: torch.Generator | None = None,
) -> Tensor:
    """The next token ids ``(b,)`` from the last logits ``(b, vocab)``."""
    if greedy:
        return logits.argmax(-1)
    probs = filter_logits(logits, temperature, top_k, top_p).softmax(-1)  # (b, vocab)
    return torch.multinomial(probs, 1, generator=generator).squeeze(-1)


@torch.no_grad()
def generate(model: DecoderLM, prompt: Tensor, steps: int, use_cache: bool = True, **sampling) -> Tensor:
    """Extend ``prompt`` ``(b, n)`` by ``steps`` tokens; returns ``(b, n + steps)``.

    Without the cache, each step runs the whole sequence (cut to the model's last ``max_len`` positions for
    the 2017 model); with it (2025 only), the prompt runs once and each step runs only the newest token.
    ``sampling`` goes to ``sample_next``.
    """
    model.eval()
    ids = prompt
    if use_cache and model.style == "2025":
        caches: list = [None] * len(model.blocks)
        logits = model(ids, 0, caches)[:, -1]  # (b, vocab)
        for _ in range(steps):
            nxt = sample_next(logits, **sampling)  # (b,)
            ids = torch.cat([ids, nxt[:, None]], 1)
            logits = model(nxt[:, None], ids.shape[1] - 1, caches)[:, -1]
        return ids
    for _ in range(steps):
        context = ids if model.style == "2025" else ids[:, -model.max_len :]
        nxt = sample_next(model(context)[:, -1], **sampling)  # (b,)
        ids = torch.cat([ids, nxt[:, None]], 1)
    return ids


# ---------------------------------------------------------------- training


@dataclass
class LMHistory:
    """Training steps at which the validation loss was measured, the losses (nats per token), the seconds."""

    steps: list[int] = field(default_factory=list)
    val_loss: list[float] = field(default_factory=list)
    train_loss: list[float] = field(default_factory=list)
    seconds: float = 0.0

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
) -> LMHistory:
    """AdamW with warm-up then cosine decay (``helpers.training.warmup_cosine``) on random windows of ``train_ids``.

    Every ``eval_every`` steps (and at the end) the validation loss is measured on ``val_windows`` fixed,
    evenly spaced windows of ``val_ids`` (the same for every model) and ``callback(step, model)`` is called.
    """
    steps = capped(steps, 5)  # every step (five in a smoke test: helpers.smoke)
    generator = torch.Generator().manual_seed(seed)
    starts = torch.linspace(0, len(val_ids) - context - 1, val_windows).long()  # (val_windows,)
    windows = val_ids[starts[:, None] + torch.arange(context + 1)]  # (val_windows, context + 1)
    val = (windows[:, :-1], windows[:, 1:])
    optimizer = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.01, betas=(0.9, 0.99))
    scheduler = warmup_cosine(optimizer, max(1, steps // 20), steps)
    history = LMHistory()
    begin = time.perf_counter()
    for step in range(1, steps + 1):
        model.train()
        x, y = lm_batches(train_ids, context, batch_size, generator)
        optimizer.zero_grad()
        loss = lm_loss(model, x, y)
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
    return history


@torch.no_grad()
def time_per_token(
    model: DecoderLM,
    context: int,
    steps: int = 8,
    use_cache: bool = True,
    repeats: int = 1,
    seed: int = 0,
) -> float:
    """Seconds per generated token (greedy, batch 1) after a prompt of ``context`` random tokens.

    With the cache, the prompt is run once before the clock starts (its cost is paid once, not per token);
    without it, every step re-runs the whole sequence. The best of ``repeats`` runs is returned (the least
    disturbed by other work on the machine). The 2025 model only (RoPE has no length limit).
    """
    if model.style != "2025":
        raise ValueError("time_per_token needs the 2025 model (the 2017 model has no KV cache)")
    if steps < 1 or repeats < 1:
        raise ValueError(f"steps and repeats must be at least 1, got {steps} and {repeats}")
    model.eval()
    device = model.embed.weight.device
    prompt = torch.randint(0, model.embed.num_embeddings, (1, context), generator=torch.Generator().manual_seed(seed))
    best = math.inf
    for _ in range(repeats):
        ids = prompt.to(device)  # (1, context)
        if use_cache:
            caches: list = [None] * len(model.blocks)
            logits = model(ids, 0, caches)[:, -1]  # (1, vocab)
            begin = time.perf_counter()
            for _ in range(steps):
                nxt = logits.argmax(-1)  # (1,)
                ids = torch.cat([ids, nxt[:, None]], 1)
                logits = model(nxt[:, None], ids.shape[1] - 1, caches)[:, -1]
        else:
            begin = time.perf_counter()
            for _ in range(steps):
                nxt = model(ids)[:, -1].argmax(-1)  # (1,)
                ids = torch.cat([ids, nxt[:, None]], 1)
        best = min(best, (time.perf_counter() - begin) / steps)
    return best
