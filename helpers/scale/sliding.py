"""Notebook 12: sliding-window attention, a KV cache that stops growing, and notebook 11's model with a window.

In sliding-window attention (Longformer's local attention; Mistral 7B's "SWA", window 4,096) query ``i`` sees
only the ``window`` most recent keys, ``i - window + 1 .. i``. A stack of ``L`` such layers still carries
information from ``L * (window - 1)`` positions back, one window per layer.

- ``sliding_window_mask(n, window)``: the boolean ``(n, n)`` mask, True = may attend;
- ``sliding_window_attention(q, k, v, window)``: attention under it;
- ``RollingKVCache``: the keys and values of the last ``window`` positions only, in a ring buffer (Mistral's
  "rolling buffer cache"): it grows until it holds ``window`` positions, then each new position overwrites the
  oldest in place, so its bytes stop growing;
- ``WindowedLM``: a 2025-style ``helpers.models.lm.DecoderLM`` run with a sliding window, for training
  (``forward``) and for generation with rolling caches (``step``); ``receptive_field`` measures how far back a
  change of the input reaches.

Shapes: batch ``b``, query heads ``h``, key/value heads ``g``, positions ``n``, head width ``d``.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from helpers.attention import merge_heads, split_heads
from helpers.models.lm import DecoderLM, apply_rope, repeat_kv, rope_angles
from helpers.runtime import smoke

__all__ = [
    "sliding_window_mask",
    "sliding_window_attention",
    "RollingKVCache",
    "WindowedLM",
    "receptive_field",
    "time_per_token",
]


def sliding_window_mask(n: int, window: int, device: torch.device | str | None = None) -> Tensor:
    """``(n, n)`` boolean, ``True`` where query i may see key j: ``0 <= i - j < window`` (itself and window - 1 before)."""
    if window < 1:
        raise ValueError(f"the window must hold at least one position (the query's own), got {window}")
    i = torch.arange(n, device=device)
    offset = i[:, None] - i[None, :]  # (n, n): how far key j lies before query i
    return (offset >= 0) & (offset < window)


def sliding_window_attention(q: Tensor, k: Tensor, v: Tensor, window: int) -> Tensor:
    """Causal self-attention in which each query sees the last ``window`` positions: q, k ``(..., n, d)``, v ``(..., n, d_v)``."""
    return F.scaled_dot_product_attention(q, k, v, attn_mask=sliding_window_mask(q.shape[-2], window, q.device))


class RollingKVCache:
    """The keys and values of the last ``window`` positions, ``(b, g, min(seen, window), d)`` each.

    Position ``p`` is stored in slot ``p % window``: while fewer than ``window`` positions were seen the cache grows;
    after that a new position overwrites the oldest in place, so ``nbytes`` stays constant. The slots are not in
    position order once the buffer wraps, which attention does not mind: it is a weighted sum over a set of keys
    (their positions are already in them, rotated by RoPE).
    """

    def __init__(self, window: int) -> None:
        if window < 1:
            raise ValueError(f"the window must be at least 1, got {window}")
        self.window = window
        self.seen = 0  # positions appended so far
        self.k: Tensor | None = None
        self.v: Tensor | None = None

    def append(self, k: Tensor, v: Tensor) -> tuple[Tensor, Tensor]:
        """Store the keys and values of the next ``n`` positions ``(b, g, n, d)``; return the whole cache."""
        n = k.shape[2]
        filled = 0 if self.k is None else self.k.shape[2]
        grow = min(n, self.window - filled)  # the part that fills empty slots
        if grow > 0:
            self.k = k[:, :, :grow] if self.k is None else torch.cat([self.k, k[:, :, :grow]], dim=2)
            self.v = v[:, :, :grow] if self.v is None else torch.cat([self.v, v[:, :, :grow]], dim=2)
            self.k, self.v = self.k.contiguous(), self.v.contiguous()
        rest_k, rest_v = k[:, :, grow:], v[:, :, grow:]
        first = self.seen + grow  # the position of rest_k[:, :, 0]
        if rest_k.shape[2] > self.window:  # only the last `window` of them survive
            first += rest_k.shape[2] - self.window
            rest_k, rest_v = rest_k[:, :, -self.window :], rest_v[:, :, -self.window :]
        if rest_k.shape[2]:
            slots = torch.arange(first, first + rest_k.shape[2], device=k.device) % self.window
            self.k[:, :, slots] = rest_k  # in place: the oldest positions are overwritten
            self.v[:, :, slots] = rest_v
        self.seen += n
        return self.k, self.v

    @property
    def positions(self) -> int:
        """How many positions the cache holds now: ``min(seen, window)``."""
        return 0 if self.k is None else self.k.shape[2]

    @property
    def nbytes(self) -> int:
        """The bytes of the stored keys and values."""
        return 0 if self.k is None else self.k.nbytes + self.v.nbytes


class WindowedLM(nn.Module):
    """A 2025-style ``DecoderLM`` whose attention sees the last ``window`` positions only (its weights, shared).

    ``forward(ids)``: ``(b, n)`` -> logits ``(b, n, vocab)`` under ``mask_fn(n, window)`` (default
    ``sliding_window_mask``; the notebook passes the learner's where it passed its check). Train it with
    ``helpers.models.train_lm``, which trains this module's parameters, the wrapped model's. ``step(ids, start,
    caches)``: positions ``start ..`` with one ``RollingKVCache`` per block, for generation: a prompt (``start == 0``)
    may hold several positions, later calls one.
    """

    def __init__(self, model: DecoderLM, window: int, mask_fn: Callable[[int, int], Tensor] | None = None) -> None:
        super().__init__()
        if getattr(model, "style", None) != "2025":
            raise ValueError("WindowedLM needs a 2025-style DecoderLM (RoPE and grouped-query attention)")
        if window < 1:
            raise ValueError(f"the window must be at least 1, got {window}")
        self.model, self.window = model, window
        self.mask_fn = sliding_window_mask if mask_fn is None else mask_fn  # (n, window) -> (n, n) boolean

    def _attention(self, attn: nn.Module, h: Tensor, start: int, cache: RollingKVCache | None) -> Tensor:
        """One GQAttention layer under the window: h ``(b, n, d_model)`` -> ``(b, n, d_model)``."""
        n = h.shape[1]
        q = split_heads(attn.w_q(h), attn.num_heads)  # (b, h, n, d)
        k = split_heads(attn.w_k(h), attn.kv_heads)  # (b, g, n, d)
        v = split_heads(attn.w_v(h), attn.kv_heads)  # (b, g, n, d)
        angles = rope_angles(n, attn.head_dim, attn.base, start).to(h.device)  # (n, d/2)
        q, k = apply_rope(q, angles), apply_rope(k, angles)
        groups = attn.num_heads // attn.kv_heads
        if cache is not None:
            if n > 1 and start != 0:
                raise ValueError("after the prompt, step() takes one position at a time")
            cached_k, cached_v = cache.append(k, v)  # (b, g, min(seen, window), d)
            if n == 1:  # the cache holds exactly the window of the newest position
                out = F.scaled_dot_product_attention(q, repeat_kv(cached_k, groups), repeat_kv(cached_v, groups))
                return attn.w_o(merge_heads(out))
        mask = self.mask_fn(n, self.window).to(h.device)  # (n, n)
        out = F.scaled_dot_product_attention(q, repeat_kv(k, groups), repeat_kv(v, groups), attn_mask=mask)  # (b, h, n, d)
        return attn.w_o(merge_heads(out))  # (b, n, d_model)

    def _run(self, ids: Tensor, start: int, caches: list[RollingKVCache] | None) -> Tensor:
        if ids.dim() != 2:
            raise ValueError(f"ids must be (batch, n) token ids, got shape {tuple(ids.shape)}")
        m = self.model
        x = m.embed(ids)  # (b, n, d_model)
        for i, block in enumerate(m.blocks):
            x = x + self._attention(block.attn, block.norm1(x), start, None if caches is None else caches[i])
            x = x + block.ff(block.norm2(x))
        return m.head(m.norm(x))  # (b, n, vocab)

    def forward(self, ids: Tensor) -> Tensor:
        """Logits ``(b, n, vocab)`` with every position seeing its last ``window`` positions."""
        return self._run(ids, 0, None)

    def new_caches(self) -> list[RollingKVCache]:
        """One empty rolling cache per block."""
        return [RollingKVCache(self.window) for _ in self.model.blocks]

    def step(self, ids: Tensor, start: int, caches: list[RollingKVCache]) -> Tensor:
        """Logits ``(b, n, vocab)`` of positions ``start ..``, reading and updating the rolling caches."""
        return self._run(ids, start, caches)


@torch.no_grad()
def receptive_field(model: nn.Module, n: int, vocab_size: int, position: int = 0, seed: int = 0) -> list[int]:
    """The positions whose logits change when the token at ``position`` changes (run ``model`` on random ids ``(1, n)``)."""
    ids = torch.randint(0, vocab_size, (1, n), generator=torch.Generator().manual_seed(seed))  # (1, n)
    changed = ids.clone()
    changed[0, position] = (changed[0, position] + 1) % vocab_size
    model.eval()
    difference = (model(ids) - model(changed)).abs().amax(dim=-1)[0]  # (n,)
    return [t for t in range(n) if difference[t] > 0]


@torch.no_grad()
def time_per_token(model: DecoderLM | WindowedLM, context: int, steps: int = 32, seed: int = 0) -> float:
    """Seconds per generated token (greedy, batch 1) after a prompt of ``context`` random tokens: the fastest step.

    ``model`` is a 2025-style ``DecoderLM`` (its full KV cache, which grows by one position per token) or a
    ``WindowedLM`` (its rolling caches). The prompt runs once, untimed; then each of ``steps`` tokens is timed on its
    own, in CPU time (``time.process_time``), and the shortest is returned: a step takes well under a millisecond, so
    on a busy machine some steps run undisturbed, and the fastest is the cost of the step itself (an average over
    steps would add the machine's load).
    """
    if steps < 1:
        raise ValueError(f"steps must be at least 1, got {steps}")
    steps = smoke.capped(steps, 2)  # a smoke run (helpers.runtime.smoke) times two steps: its numbers support no claim
    windowed = isinstance(model, WindowedLM)
    inner = model.model if windowed else model
    if getattr(inner, "style", None) != "2025":
        raise ValueError("time_per_token needs a 2025-style DecoderLM (the 2017 model has no KV cache)")
    model.eval()
    prompt = torch.randint(0, inner.embed.num_embeddings, (1, context), generator=torch.Generator().manual_seed(seed))
    prompt = prompt.to(inner.embed.weight.device)
    caches: list = model.new_caches() if windowed else [None] * len(inner.blocks)
    run = model.step if windowed else inner
    logits = run(prompt, 0, caches)[:, -1]  # (1, vocab)
    best = math.inf
    for position in range(context, context + steps):
        nxt = logits.argmax(-1)  # (1,)
        begin = time.process_time()
        logits = run(nxt[:, None], position, caches)[:, -1]
        best = min(best, time.process_time() - begin)
    return best
