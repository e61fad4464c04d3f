"""Notebook 13: an attention-only transformer in which induction heads form, and the tools to take it apart.

``AttentionOnlyLM`` embeds tokens, adds a learned position embedding, runs ``num_layers`` layers of the course's
``helpers.attention.MultiHeadAttention`` under a causal mask, each added to the residual stream (no MLP, no norm),
and reads the logits with an unembedding matrix. Because nothing but attention touches the residual stream, it is
exactly the sum of the embeddings and of every head's output, which is what makes the circuit readable:

    x_0 = E[ids] + P                      (b, n, d)
    x_{l+1} = x_l + sum_h  z_{l,h} W_O^{l,h}    where z_{l,h} = softmax(q k^T / sqrt(d_k)) v  (b, n, d_k)
    logits = x_L U^T                      (b, n, V)

``forward(ids, edit=..., paths=...)`` runs the same computation as ``MultiHeadAttention.forward`` (its own projections,
``split_heads``, ``scaled_dot_product_attention``, ``merge_heads``) and can

- change each layer's per-head results ``z`` before ``W_O`` (``edit={layer: fn}``, ``fn(z) -> z``; ablations), and
- remove chosen heads' outputs from the residual stream that feeds the queries, keys or values of a later layer only
  (``paths``; path ablation: K-composition);

``run_with_patterns`` also returns every layer's attention pattern ``(b, heads, n, n)``.

The reference score functions the notebook's exercises re-derive live here: ``prev_token_score``,
``induction_score``, ``ablate_head``; with ``composition_scores`` (Elhage et al., 2021) and the training loop
``train_induction`` (AdamW, steps through ``helpers.runtime.smoke.capped``).
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from helpers.attention import MultiHeadAttention, causal_mask, merge_heads, scaled_dot_product_attention, split_heads
from helpers.blocks import sinusoidal_positional_encoding
from helpers.data.induction import held_out_set, repeated_half_mask, train_batch
from helpers.runtime.smoke import capped

__all__ = [
    "AttentionOnlyLM",
    "prev_token_score",
    "induction_score",
    "duplicate_token_score",
    "ideal_patterns",
    "ablate_head",
    "repeated_half_loss",
    "per_position_loss",
    "head_ablation_losses",
    "path_ablation_losses",
    "composition_scores",
    "composition_baseline",
    "head_weights",
    "qk_circuit",
    "induction_qk_circuit",
    "positional_pattern",
    "ov_circuit",
    "copying_score",
    "direct_logit_attribution",
    "InductionHistory",
    "train_induction",
    "phase_change",
    "lm_patterns",
]

ZEdit = Callable[[Tensor], Tensor]
Head = tuple[int, int]


class AttentionOnlyLM(nn.Module):
    """A decoder made of attention alone: ``forward(ids)``, ids ``(b, n)`` int64 -> logits ``(b, n, vocab_size)``.

    ``num_layers`` layers of ``MultiHeadAttention(d_model, num_heads, bias=False)`` (``self.layers``), each added to
    the residual stream under a causal mask; token embedding ``embed`` ``(vocab_size, d_model)``, learned positions
    ``pos`` ``(max_len, d_model)``, unembedding ``unembed`` (an ``nn.Linear(d_model, vocab_size, bias=False)``).
    No MLP, no layer norm, no biases: the residual stream is the sum of the embeddings and the heads' outputs.
    """

    def __init__(
        self,
        vocab_size: int,
        d_model: int = 32,
        num_heads: int | Sequence[int] = 2,
        num_layers: int = 2,
        max_len: int = 64,
        positions: str = "learned",
    ) -> None:
        super().__init__()
        heads = (num_heads,) * num_layers if isinstance(num_heads, int) else tuple(num_heads)
        if len(heads) != num_layers:
            raise ValueError(f"num_heads gives {len(heads)} head counts for {num_layers} layers")
        self.vocab_size, self.d_model, self.num_layers, self.max_len = vocab_size, d_model, num_layers, max_len
        self.heads = heads  # heads per layer
        self.embed = nn.Embedding(vocab_size, d_model)
        if positions == "learned":
            self.pos = nn.Parameter(torch.randn(max_len, d_model) / math.sqrt(d_model))
        elif positions == "sinusoidal":
            self.register_buffer("pos", sinusoidal_positional_encoding(max_len, d_model), persistent=False)
        else:
            raise ValueError(f"positions must be 'learned' or 'sinusoidal', got {positions!r}")
        self.layers = nn.ModuleList(MultiHeadAttention(d_model, h, bias=False) for h in heads)
        self.unembed = nn.Linear(d_model, vocab_size, bias=False)
        nn.init.normal_(self.embed.weight, std=1 / math.sqrt(d_model))

    def head_outputs(self, layer: int, z: Tensor) -> Tensor:
        """Each head's contribution to the residual stream: z ``(b, heads, n, d_k)`` -> ``(b, heads, n, d_model)``.

        Head h's slice of ``W_O`` (columns ``h*d_k .. (h+1)*d_k - 1`` of ``w_o.weight``) maps its result into the
        stream; summed over heads this is ``w_o(merge_heads(z))``.
        """
        attn = self.layers[layer]
        w_o = attn.w_o.weight.T.unflatten(0, (attn.num_heads, attn.d_k))  # (heads, d_k, d_model)
        return torch.einsum("bhnk,hkd->bhnd", z, w_o)

    def embed_ids(self, ids: Tensor) -> Tensor:
        """``E[ids] + P``: ids ``(b, n)`` -> the residual stream before layer 0, ``(b, n, d_model)``."""
        if ids.dim() != 2:
            raise ValueError(f"ids must be (batch, n) token ids, got shape {tuple(ids.shape)}")
        n = ids.shape[1]
        if n > self.max_len:
            raise ValueError(f"the model knows {self.max_len} positions; got a sequence of {n}")
        return self.embed(ids) + self.pos[:n]

    def run_with_patterns(
        self,
        ids: Tensor,
        edit: Mapping[int, ZEdit] | None = None,
        paths: Mapping[tuple[int, str], Sequence[Head]] | None = None,
        path_value: str = "zero",
    ) -> tuple[Tensor, list[Tensor]]:
        """Logits ``(b, n, V)`` and each layer's attention pattern ``(b, heads, n, n)`` (rows: queries, columns: keys).

        ``edit[layer](z)`` replaces layer ``layer``'s per-head results z ``(b, heads, n, d_k)`` before ``W_O``.
        ``paths[(layer, "q" | "k" | "v")]`` lists heads ``(l, h)`` of earlier layers whose outputs are removed from
        the stream that feeds that input of ``layer`` only (the rest of the model still sees them):
        ``path_value="zero"`` removes the output, ``"mean"`` replaces it by its mean over the batch.
        """
        x = self.embed_ids(ids)  # (b, n, d)
        n = ids.shape[1]
        mask = causal_mask(n, device=ids.device)  # (n, n)
        outputs: dict[Head, Tensor] = {}  # (l, h) -> that head's contribution (b, n, d)
        patterns = []
        for layer, attn in enumerate(self.layers):
            inputs = {}
            for part in ("q", "k", "v"):
                removed = (paths or {}).get((layer, part), ())
                stream = x
                for head in removed:
                    if head[0] >= layer:
                        raise ValueError(f"path {(layer, part)}: head {head} is not in an earlier layer")
                    out = outputs[tuple(head)]
                    stream = stream - out + (out.mean(0, keepdim=True) if path_value == "mean" else 0)
                inputs[part] = stream
            q = split_heads(attn.w_q(inputs["q"]), attn.num_heads)  # (b, heads, n, d_k)
            k = split_heads(attn.w_k(inputs["k"]), attn.num_heads)  # (b, heads, n, d_k)
            v = split_heads(attn.w_v(inputs["v"]), attn.num_heads)  # (b, heads, n, d_k)
            z, pattern = scaled_dot_product_attention(q, k, v, mask)  # (b, heads, n, d_k), (b, heads, n, n)
            if edit is not None and layer in edit:
                z = edit[layer](z)
            patterns.append(pattern)
            if paths:
                per_head = self.head_outputs(layer, z)  # (b, heads, n, d)
                for h in range(attn.num_heads):
                    outputs[(layer, h)] = per_head[:, h]
                x = x + per_head.sum(1)
            else:
                x = x + attn.w_o(merge_heads(z))  # (b, n, d)
        return self.unembed(x), patterns

    def forward(
        self,
        ids: Tensor,
        edit: Mapping[int, ZEdit] | None = None,
        paths: Mapping[tuple[int, str], Sequence[Head]] | None = None,
        path_value: str = "zero",
    ) -> Tensor:
        """Logits ``(b, n, vocab_size)``; ``edit`` and ``paths`` as in ``run_with_patterns``.

        Without them, each layer is the course's ``MultiHeadAttention`` called as is, with the fused kernel
        (``need_weights=False``): the same function, faster for training.
        """
        if edit or paths:
            return self.run_with_patterns(ids, edit, paths, path_value)[0]
        x = self.embed_ids(ids)  # (b, n, d)
        mask = causal_mask(ids.shape[1], device=ids.device)  # (n, n)
        for attn in self.layers:
            x = x + attn(x, x, x, mask, need_weights=False)[0]  # (b, n, d)
        return self.unembed(x)


# ---------------------------------------------------------------- scores (the exercises' references)


def prev_token_score(pattern: Tensor) -> Tensor:
    """How much each head attends to the previous token: pattern ``(b, heads, n, n)`` -> ``(heads,)``.

    The mean over the batch and over queries ``i = 1 .. n-1`` of ``pattern[b, h, i, i-1]`` (query 0 has no
    previous token). 1 for a head that always attends to the previous token.
    """
    return pattern.diagonal(offset=-1, dim1=-2, dim2=-1).mean(dim=(0, -1))  # (heads,)


def induction_score(pattern: Tensor, period: int) -> Tensor:
    """How much each head attends to the token after the earlier occurrence of the current one: -> ``(heads,)``.

    pattern ``(b, heads, n, n)`` of sequences that end in two copies of ``period`` tokens (with or without a token
    before them). A query ``i`` in the second copy (``i = n - period .. n - 1``) holds the token that was at ``i - period``;
    the token after that earlier occurrence is at ``i - period + 1``. The score is the mean of
    ``pattern[b, h, i, i - period + 1]`` over the batch and those ``period`` queries.
    """
    diag = pattern.diagonal(offset=-(period - 1), dim1=-2, dim2=-1)  # (b, heads, n - period + 1): query i, key i - period + 1
    return diag[..., -period:].mean(dim=(0, -1))  # (heads,): the queries n - period .. n - 1


def duplicate_token_score(pattern: Tensor, period: int) -> Tensor:
    """Attention from each query of the second copy to the earlier occurrence of its own token, ``i - period``: ``(heads,)``."""
    diag = pattern.diagonal(offset=-period, dim1=-2, dim2=-1)  # (b, heads, n - period)
    return diag[..., -period:].mean(dim=(0, -1))


def ablate_head(z: Tensor, head: int, how: str = "zero") -> Tensor:
    """z ``(b, heads, n, d_k)`` -> a new tensor in which head ``head``'s results are zero (``how="zero"``) or
    replaced, at each position, by their mean over the batch (``how="mean"``); the other heads unchanged."""
    if how not in ("zero", "mean"):
        raise ValueError(f"how must be 'zero' or 'mean', got {how!r}")
    out = z.clone()
    out[:, head] = 0.0 if how == "zero" else z[:, head].mean(dim=0, keepdim=True)
    return out


def ideal_patterns(n: int, period: int) -> tuple[Tensor, Tensor]:
    """The two attention patterns ``(n, n)`` of an induction circuit on a sequence of one BOS token and two copies of
    ``period`` tokens (``n = 1 + 2 period``), drawn by hand: a previous-token head (query ``i`` on key ``i - 1``, BOS on
    itself) and an induction head (each query of the second copy on the token after the earlier occurrence of its
    own token; the first copy, with nothing to copy, on BOS)."""
    if n != 1 + 2 * period:
        raise ValueError(f"a sequence of one BOS token and two copies of {period} tokens has {1 + 2 * period} positions, not {n}")
    previous = torch.zeros(n, n)
    previous[0, 0] = 1.0
    previous[torch.arange(1, n), torch.arange(n - 1)] = 1.0
    induction = torch.zeros(n, n)
    induction[: n - period, 0] = 1.0
    second = torch.arange(n - period, n)
    induction[second, second - period + 1] = 1.0
    return previous, induction


# ---------------------------------------------------------------- losses


def per_position_loss(logits: Tensor, ids: Tensor) -> Tensor:
    """Cross-entropy of each next-token prediction: logits ``(b, n, V)``, ids ``(b, n)`` -> ``(b, n - 1)`` nats."""
    return F.cross_entropy(logits[:, :-1].flatten(0, 1), ids[:, 1:].flatten(), reduction="none").view(ids.shape[0], -1)


def repeated_half_loss(logits: Tensor, ids: Tensor, period: int) -> Tensor:
    """Mean cross-entropy (nats) over the predictable targets of the second copy (``helpers.data.induction.repeated_half_mask``)."""
    mask = repeated_half_mask(ids.shape[1], period).to(ids.device)  # (n - 1,)
    return per_position_loss(logits, ids)[:, mask].mean()


@torch.no_grad()
def head_ablation_losses(model: AttentionOnlyLM, ids: Tensor, period: int, how: str = "mean", ablate=ablate_head) -> Tensor:
    """The repeated-half loss with each head ablated in turn: ``(num_layers, num_heads)`` nats.

    ``ablate(z, head, how)`` is the ablation (the reference ``ablate_head`` unless the notebook passes its own).
    """
    model.eval()
    losses = torch.full((model.num_layers, max(model.heads)), float("nan"))
    for layer in range(model.num_layers):
        for head in range(model.heads[layer]):
            logits = model(ids, edit={layer: lambda z, h=head: ablate(z, h, how)})
            losses[layer, head] = repeated_half_loss(logits, ids, period)
    return losses


@torch.no_grad()
def path_ablation_losses(
    model: AttentionOnlyLM, ids: Tensor, period: int, head: Head, layer: int = 1, how: str = "mean"
) -> dict[str, float]:
    """Path ablation: the repeated-half loss when ``head``'s output is removed (``how="mean"``: replaced by its mean
    over the batch; ``"zero"``) from the input of ``layer``'s queries, keys or values only (``"q"``, ``"k"``, ``"v"``),
    from all three (``"qkv"``), and with nothing removed (``"none"``). Path *patching* (Wang et al., 2022) would instead
    take that head's output from a run on corrupted inputs."""
    model.eval()
    result = {"none": repeated_half_loss(model(ids), ids, period).item()}
    for parts in ("q", "k", "v", "qkv"):
        paths = {(layer, p): [head] for p in parts}
        result[parts] = repeated_half_loss(model(ids, paths=paths, path_value=how), ids, period).item()
    return result


@torch.no_grad()
def composition_scores(model: AttentionOnlyLM, kind: str = "k") -> Tensor:
    """Elhage et al.'s composition scores between every layer-0 head and every layer-1 head: ``(heads_0, heads_1)``.

    ``|| W_QK^{1,j} W_OV^{0,i} ||_F / (|| W_QK^{1,j} ||_F || W_OV^{0,i} ||_F)`` for K-composition (``kind="k"``),
    with ``W_QK = W_Q^T W_K`` ``(d, d)`` acting on the residual stream and ``W_OV = W_O W_V`` ``(d, d)``;
    ``kind="q"`` uses ``W_QK^T`` (the head's output read by the queries), ``kind="v"`` the product ``W_OV^{1,j} W_OV^{0,i}``.
    Matrices are in ``nn.Linear``'s layout (out, in), so a residual vector is a column: a head writes ``W_OV x``.
    """

    def qk_ov(layer: int, h: int) -> tuple[Tensor, Tensor]:
        attn = model.layers[layer]
        rows = slice(h * attn.d_k, (h + 1) * attn.d_k)
        w_q, w_k, w_v = attn.w_q.weight[rows], attn.w_k.weight[rows], attn.w_v.weight[rows]  # (d_k, d) each
        w_o = attn.w_o.weight[:, rows]  # (d, d_k)
        return (w_q.T @ w_k).double(), (w_o @ w_v).double()  # (d, d): x_q^T W_QK x_k is the score; W_OV x is the output

    scores = torch.zeros(model.heads[0], model.heads[1], dtype=torch.float64)
    for i in range(model.heads[0]):
        _, ov0 = qk_ov(0, i)
        for j in range(model.heads[1]):
            qk1, ov1 = qk_ov(1, j)
            product = {"k": qk1 @ ov0, "q": qk1.T @ ov0, "v": ov1 @ ov0}[kind]
            second = {"k": qk1, "q": qk1, "v": ov1}[kind]
            scores[i, j] = (product.norm() / (second.norm() * ov0.norm())).item()
    return scores


def head_weights(model: AttentionOnlyLM, layer: int, head: int) -> dict[str, Tensor]:
    """One head's slices of its layer's projections, detached, in ``nn.Linear``'s layout (out, in):
    ``w_q``, ``w_k``, ``w_v`` ``(d_k, d_model)`` (the head's rows) and ``w_o`` ``(d_model, d_k)`` (its columns)."""
    attn = model.layers[layer]
    rows = slice(head * attn.d_k, (head + 1) * attn.d_k)
    return {
        "w_q": attn.w_q.weight.detach()[rows],
        "w_k": attn.w_k.weight.detach()[rows],
        "w_v": attn.w_v.weight.detach()[rows],
        "w_o": attn.w_o.weight.detach()[:, rows],
    }


def qk_circuit(embed: Tensor, w_q: Tensor, w_k: Tensor, w_v: Tensor, w_o: Tensor) -> Tensor:
    """The composed QK circuit: the score a head gives from a query holding token ``a`` to a key whose previous token
    is ``b``, when the key reads what an earlier head wrote (K-composition), positions left out: ``(V, V)``.

    embed ``(V, d)``; the later head's ``w_q``, ``w_k`` ``(d_k, d)``; the earlier head's ``w_v`` ``(d_k0, d)`` and
    ``w_o`` ``(d, d_k0)``. ``scores[a, b] = (w_q e_a) . (w_k w_o w_v e_b) / sqrt(d_k)``.
    """
    queries = embed @ w_q.T  # (V, d_k): the query of a position holding token a
    keys = embed @ w_v.T @ w_o.T @ w_k.T  # (V, d_k): the key of a position whose previous token is b
    return queries @ keys.T / math.sqrt(w_q.shape[0])  # (V, V)


@torch.no_grad()
def induction_qk_circuit(model: AttentionOnlyLM, prev_head: int, head: int = 0, layer: int = 1, circuit=qk_circuit) -> Tensor:
    """``qk_circuit`` of ``model``'s layer-``layer`` ``head`` through layer 0's ``prev_head``: ``(V, V)`` float64, on the
    CPU whatever the model's device. ``circuit`` computes it (the reference unless the notebook passes its own).
    An induction head built on that previous-token head scores highest on the diagonal (``b == a``)."""
    later = {k: v.double().cpu() for k, v in head_weights(model, layer, head).items()}
    earlier = {k: v.double().cpu() for k, v in head_weights(model, 0, prev_head).items()}
    embed = model.embed.weight.detach().double().cpu()  # (V, d)
    return circuit(embed, later["w_q"], later["w_k"], earlier["w_v"], earlier["w_o"])


@torch.no_grad()
def positional_pattern(model: AttentionOnlyLM, head: int, layer: int = 0) -> Tensor:
    """Where a head would attend from its position embeddings alone, tokens left out: ``(max_len, max_len)`` float64 on
    the CPU, row ``i`` the softmax over keys ``0 .. i`` of ``(W_Q p_i) . (W_K p_j) / sqrt(d_k)`` (the positional part of
    the head's QK circuit; for a layer-0 head it is the whole of its scores when the token embeddings are left out).
    A previous-token head that finds the previous position by position puts row ``i``'s weight on key ``i - 1``."""
    if not 0 <= layer < model.num_layers or not 0 <= head < model.heads[layer]:
        raise ValueError(f"no head {head} in layer {layer}: the model has {model.heads} heads per layer")
    w = {k: v.double().cpu() for k, v in head_weights(model, layer, head).items()}
    pos = model.pos.detach().double().cpu()  # (max_len, d)
    scores = (pos @ w["w_q"].T) @ (pos @ w["w_k"].T).T / math.sqrt(w["w_q"].shape[0])  # (max_len, max_len)
    n = pos.shape[0]
    return scores.masked_fill(~torch.ones(n, n, dtype=torch.bool).tril(), float("-inf")).softmax(-1)


@torch.no_grad()
def ov_circuit(model: AttentionOnlyLM, layer: int = 1, head: int = 0) -> Tensor:
    """The full OV circuit of one head: ``(V, V)`` float64 on the CPU, ``[out, src] = U W_O W_V e_src``.

    Column ``src`` is what the head adds to the logits when it attends to a position holding token ``src``
    (through its values, read from the token embedding alone). A copying head puts each column's largest entry on
    the diagonal.
    """
    w = {k: v.double().cpu() for k, v in head_weights(model, layer, head).items()}
    embed = model.embed.weight.detach().double().cpu()  # (V, d)
    unembed = model.unembed.weight.detach().double().cpu()  # (V, d)
    return unembed @ w["w_o"] @ w["w_v"] @ embed.T  # (V out, V src)


def copying_score(circuit: Tensor, tokens: int | None = None) -> float:
    """The share of source tokens (the first ``tokens`` columns; all by default) whose largest output is themselves."""
    columns = circuit[:, :tokens] if tokens is not None else circuit
    return (columns.argmax(0) == torch.arange(columns.shape[1], device=columns.device)).double().mean().item()


@torch.no_grad()
def direct_logit_attribution(model: AttentionOnlyLM, ids: Tensor, period: int) -> dict[str, float]:
    """How much each part of the residual stream adds to the right next token's logit on the repeated half, in logit units.

    The final stream is the sum of the embeddings (token and position) and of every head's output (``AttentionOnlyLM``
    has nothing else), so each right logit ``x_final . U[target]`` splits exactly into one term per part. Each term
    is centred (minus that part's mean logit over the vocabulary, which the softmax ignores) and averaged over the
    predictable targets of the second copy. Keys: ``"embeddings"`` and ``"L{layer}H{head}"``; they sum to the mean
    centred right logit.
    """
    model.eval()
    parts: dict[str, Tensor] = {"embeddings": model.embed_ids(ids)}  # (b, n, d) each
    x = parts["embeddings"]
    mask = causal_mask(ids.shape[1], device=ids.device)
    for layer, attn in enumerate(model.layers):
        q, k, v = (split_heads(w(x), attn.num_heads) for w in (attn.w_q, attn.w_k, attn.w_v))  # (b, heads, n, d_k)
        z, _ = scaled_dot_product_attention(q, k, v, mask)
        per_head = model.head_outputs(layer, z)  # (b, heads, n, d)
        for h in range(attn.num_heads):
            parts[f"L{layer}H{h}"] = per_head[:, h]
        x = x + per_head.sum(1)
    unembed = model.unembed.weight  # (V, d)
    targets = ids[:, 1:]  # (b, n - 1): the next token at each position
    keep = repeated_half_mask(ids.shape[1], period).to(ids.device)  # (n - 1,)
    result = {}
    for name, part in parts.items():
        logits = part[:, :-1] @ unembed.T  # (b, n - 1, V)
        centred = logits - logits.mean(-1, keepdim=True)
        right = centred.gather(-1, targets[..., None])[..., 0]  # (b, n - 1)
        result[name] = right[:, keep].mean().item()
    return result


def composition_baseline(d_model: int, rank_first: int, rank_second: int, samples: int = 200, seed: int = 0) -> float:
    """The mean composition score of random Gaussian matrices of the same shapes and ranks as ``composition_scores``'s
    (``W_QK`` or ``W_OV`` of the later head, rank ``rank_second``; the earlier head's ``W_OV``, rank ``rank_first``):
    what the score is when no head reads another."""
    generator = torch.Generator().manual_seed(seed)

    def low_rank(rank: int) -> Tensor:
        a = torch.randn(d_model, rank, generator=generator, dtype=torch.float64)
        return a @ torch.randn(rank, d_model, generator=generator, dtype=torch.float64)

    total = 0.0
    for _ in range(samples):
        second, first = low_rank(rank_second), low_rank(rank_first)
        total += ((second @ first).norm() / (second.norm() * first.norm())).item()
    return total / samples


# ---------------------------------------------------------------- training


@dataclass
class InductionHistory:
    """The repeated-half validation loss (nats) at ``steps``, the training seconds (wall) and CPU seconds.

    With ``train_induction(..., track_heads=True)``, also every head's previous-token score (``prev_score``) and
    induction score (``induction_score``) on the validation sequences at the same steps, keyed ``"L{layer}H{head}"``.
    """

    steps: list[int] = field(default_factory=list)
    val_loss: list[float] = field(default_factory=list)
    seconds: float = 0.0
    cpu_seconds: float = 0.0
    prev_score: dict[str, list[float]] = field(default_factory=dict)
    induction_score: dict[str, list[float]] = field(default_factory=dict)


def train_induction(
    model: AttentionOnlyLM,
    steps: int = 600,
    batch_size: int = 32,
    lr: float = 3e-3,
    min_period: int = 8,
    max_period: int = 24,
    val_period: int = 16,
    val_batch: int = 64,
    eval_every: int = 10,
    weight_decay: float = 0.0,
    warmup: int = 0,
    schedule: str = "constant",
    distinct: bool = False,
    seed: int = 0,
    val_seed: int | None = None,
    track_heads: bool = False,
) -> InductionHistory:
    """AdamW on fresh repeated sequences (a period drawn per batch, ``helpers.data.induction.train_batch``).

    Every ``eval_every`` steps (and before the first) the repeated-half loss is measured on a fixed validation set
    of ``val_batch`` sequences of period ``val_period`` (seed ``VALIDATION_SEED`` unless ``val_seed``). Batches come
    from a generator seeded with ``seed``; the model's initial weights are the caller's. Constant learning rate after
    a linear warm-up of ``warmup`` steps. In a smoke run (``helpers.runtime.smoke``) only a few steps are taken.
    ``track_heads``: measure the validation loss through ``run_with_patterns`` (the same function, head by head) and
    record every head's previous-token and induction scores on the validation sequences as well.
    """
    steps = capped(steps, 5)
    vocab = model.vocab_size - 1  # the last id is BOS
    generator = torch.Generator().manual_seed(seed)
    kwargs = {} if val_seed is None else {"seed": val_seed}
    val_ids = held_out_set(val_batch, val_period, vocab, distinct=distinct, **kwargs).to(model.embed.weight.device)
    optimizer = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=weight_decay, betas=(0.9, 0.99))
    history = InductionHistory()

    def evaluate(step: int) -> None:
        model.eval()
        with torch.no_grad():
            history.steps.append(step)
            if not track_heads:
                history.val_loss.append(repeated_half_loss(model(val_ids), val_ids, val_period).item())
                return
            logits, patterns = model.run_with_patterns(val_ids)  # (b, n, V); one (b, heads, n, n) per layer
            history.val_loss.append(repeated_half_loss(logits, val_ids, val_period).item())
            for layer, pattern in enumerate(patterns):
                prev, ind = prev_token_score(pattern).tolist(), induction_score(pattern, val_period).tolist()
                for h in range(pattern.shape[1]):
                    history.prev_score.setdefault(f"L{layer}H{h}", []).append(prev[h])
                    history.induction_score.setdefault(f"L{layer}H{h}", []).append(ind[h])

    begin, begin_cpu = time.perf_counter(), time.process_time()
    evaluate(0)
    for step in range(1, steps + 1):
        factor = min(1.0, step / warmup) if warmup else 1.0
        if schedule == "cosine":
            factor *= 0.5 * (1 + math.cos(math.pi * (step - 1) / steps))
        for group in optimizer.param_groups:
            group["lr"] = lr * factor
        model.train()
        ids, _ = train_batch(batch_size, min_period, max_period, vocab, generator, distinct)
        ids = ids.to(model.embed.weight.device)
        logits = model(ids)  # (b, n, V)
        loss = F.cross_entropy(logits[:, :-1].flatten(0, 1), ids[:, 1:].flatten())
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        if step % eval_every == 0 or step == steps:
            evaluate(step)
    history.seconds, history.cpu_seconds = time.perf_counter() - begin, time.process_time() - begin_cpu
    return history


def phase_change(steps: Sequence[int], losses: Sequence[float], low: float = 0.1, high: float = 0.9) -> dict[str, float]:
    """Where a loss curve drops: from ``L_0 = losses[0]`` to ``L_end = losses[-1]``, the first step at which
    ``low`` of the drop is done (loss <= L_0 - low * drop) and the first at which ``high`` of it is done.

    Returns ``start``, ``middle`` (half the drop done), ``end`` (steps), ``width`` (``end - start``), ``fraction``
    (``width`` over the last step) and ``drop`` (nats). With the defaults, ``fraction`` is the share of the training steps in which the middle 80% of
    the drop happened.
    """
    if len(steps) != len(losses) or len(steps) < 2:
        raise ValueError("steps and losses must have the same length, at least 2")
    first, last = losses[0], losses[-1]
    drop = first - last

    def done(share: float) -> int:  # the first step at which `share` of the drop is done (the last step always is)
        return next(s for s, v in zip(steps, losses, strict=True) if v <= first - share * drop)

    start, end = done(low), done(high)
    return {
        "start": start,
        "middle": done(0.5),
        "end": end,
        "width": end - start,
        "fraction": (end - start) / steps[-1],
        "drop": drop,
    }


# ---------------------------------------------------------------- notebook 11's model


@torch.no_grad()
def lm_patterns(model: nn.Module, ids: Tensor) -> list[Tensor]:
    """Every layer's attention pattern ``(b, heads, n, n)`` of notebook 11's ``DecoderLM`` (``style="2025"``).

    ``GQAttention`` calls the fused ``F.scaled_dot_product_attention``, which returns no weights, so its input is
    captured with a forward pre-hook and the pattern recomputed from the layer's own projections and RoPE:
    ``softmax(rope(q) rope(k)^T / sqrt(d) + causal)``, with the key heads shared as in the model (``repeat_kv``).
    """
    from helpers.models.lm import apply_rope, repeat_kv, rope_angles

    captured: list[Tensor] = []
    handles = [block.attn.register_forward_pre_hook(lambda m, args: captured.append(args[0])) for block in model.blocks]
    try:
        model.eval()
        model(ids)
    finally:
        for handle in handles:
            handle.remove()
    patterns = []
    n = ids.shape[1]
    mask = causal_mask(n, device=ids.device)
    for block, x in zip(model.blocks, captured, strict=True):
        attn = block.attn
        q = split_heads(attn.w_q(x), attn.num_heads)  # (b, h, n, d)
        k = split_heads(attn.w_k(x), attn.kv_heads)  # (b, g, n, d)
        angles = rope_angles(n, attn.head_dim, attn.base).to(x.device)  # (n, d/2)
        q, k = apply_rope(q, angles), repeat_kv(apply_rope(k, angles), attn.num_heads // attn.kv_heads)
        _, pattern = scaled_dot_product_attention(q, k, torch.zeros_like(k), mask)  # (b, h, n, n)
        patterns.append(pattern)
    return patterns
