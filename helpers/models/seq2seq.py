"""Models of notebook 09: an encoder-decoder transformer that translates, and the RNN with attention it grew from.

Both models share one interface, so one training loop and one decoder serve them:

- ``encode(src) -> state``: src ``(batch, m)`` token ids -> a tuple of batch-first tensors (what the decoder reads);
- ``decode(tgt_in, state) -> logits`` ``(batch, n, tgt_vocab)``: the decoder input is the target shifted right
  behind ``<bos>`` (``shift_right``); position ``t``'s logits predict target word ``t``;
- ``forward(src, tgt_in)`` = ``decode(tgt_in, encode(src))``.

``Seq2SeqTransformer`` is made of ``helpers.blocks``' encoder and decoder blocks: token embeddings, learned
positions, an encoder stack with a padding mask on its keys, a decoder stack with causal self-attention and
cross-attention whose keys (the source positions) carry the same padding mask, and an output projection,
optionally tied to the target embedding. ``Seq2SeqGRU`` is the recap model: a bidirectional GRU encoder and a
GRU decoder that, at each step, scores every encoder state (additive, multiplicative or dot-product scores from
``helpers.attention``), takes a softmax and reads the weighted sum; ``attention=None`` gives the model without
attention, whose decoder sees one fixed summary of the source.

Both models take the function that builds the source mask (``source_padding_mask=``), and the training loop the
one that builds the decoder input (``shift=``), so a learner's own versions, once they pass their checks, are what
runs.

Also here: ``shift_right``, ``source_padding_mask``, the training loop ``train_seq2seq`` (AdamW, warm-up then
cosine decay, loss ignoring padding, gradient clipping, and the best validation epoch kept, with or without a stopping rule),
``greedy_decode`` and ``beam_search`` (length-normalised; neither ever generates ``<pad>`` or ``<bos>``:
``never_special``), ``sequence_log_prob`` (a model's probability of a given translation: search errors against
model errors), the metrics ``sequence_accuracy``, ``exact_matches``, ``exact_match_by_digits`` and
``alignment_accuracy``, and ``cross_attention_weights``.
"""

from __future__ import annotations

import copy
import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Protocol

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from helpers.attention import AdditiveAttention, MultiplicativeAttention, causal_mask, dot_product_scores, padding_mask
from helpers.blocks import DecoderBlock, EncoderBlock, LearnedPositionalEmbedding
from helpers.data.translation import BOS, EOS, PAD, TranslationSet
from helpers.runtime.smoke import EPOCHS as SMOKE_EPOCHS
from helpers.runtime.smoke import capped
from helpers.training import warmup_cosine

__all__ = [
    "shift_right",
    "source_padding_mask",
    "Seq2SeqTransformer",
    "Seq2SeqGRU",
    "additive_attention",
    "Seq2SeqHistory",
    "seq2seq_loss",
    "train_seq2seq",
    "never_special",
    "greedy_decode",
    "beam_search",
    "sequence_log_prob",
    "cut_at_eos",
    "exact_matches",
    "exact_match_by_digits",
    "sequence_accuracy",
    "cross_attention_weights",
    "alignment_accuracy",
]


class Seq2SeqModel(Protocol):
    """What the training loop and the decoders need (both models of this module have it)."""

    def encode(self, src: Tensor) -> tuple[Tensor, ...]: ...

    def decode(self, tgt_in: Tensor, state: tuple[Tensor, ...]) -> Tensor: ...

    def __call__(self, src: Tensor, tgt_in: Tensor) -> Tensor: ...


def _require_ids(x: object, name: str) -> Tensor:
    if not isinstance(x, Tensor) or x.dim() != 2 or x.dtype != torch.long:
        got = f"{x.dtype} tensor of shape {tuple(x.shape)}" if isinstance(x, Tensor) else type(x).__name__
        raise ValueError(f"{name} should be a (batch, length) tensor of token ids (torch.long), got a {got}")
    return x


def shift_right(tgt: Tensor, bos: int = BOS) -> Tensor:
    """The decoder input for teacher forcing: ``<bos>`` then the target without its last position.

    tgt ``(batch, n)`` -> ``(batch, n)``: ``out[:, 0] = bos``, ``out[:, t] = tgt[:, t - 1]``. Position t of
    the decoder reads the words before target word t and predicts word t.
    """
    tgt = _require_ids(tgt, "tgt")
    return torch.cat([torch.full_like(tgt[:, :1], bos), tgt[:, :-1]], dim=1)  # (batch, n)


def source_padding_mask(src: Tensor, pad: int = PAD) -> Tensor:
    """Boolean key mask ``(batch, 1, m)``, ``True`` = a real source token (may be attended to).

    Built with ``helpers.attention.padding_mask`` from the lengths (padding sits at the end of each row);
    it broadcasts over the queries (and, after ``MultiHeadAttention``'s ``unsqueeze(1)``, over the heads).
    """
    src = _require_ids(src, "src")
    lengths = (src != pad).sum(dim=1)  # (batch,)
    return padding_mask(lengths, src.shape[1])  # (batch, 1, m)


# ---------------------------------------------------------------- the transformer


class Seq2SeqTransformer(nn.Module):
    """Encoder-decoder transformer (pre-LN blocks from ``helpers.blocks``).

    ``Seq2SeqTransformer(src_vocab_size, tgt_vocab_size, d_model=64, num_heads=4, num_encoder_layers=2,
    num_decoder_layers=2, d_ff=128, dropout=0.0, max_len=32, tie_output=True, source_padding_mask=source_padding_mask)``.

    - ``encode(src)`` -> ``(memory (batch, m, d_model), memory_mask (batch, 1, m))``;
    - ``decode(tgt_in, state)`` -> logits ``(batch, n, tgt_vocab_size)`` (causal self-attention, cross-attention
      to the memory with the padded source positions masked);
    - with ``tie_output`` the output projection's weight *is* the target embedding's (``out.weight is
      tgt_embed.weight``), and the embeddings are scaled by ``sqrt(d_model)`` as in the original paper;
    - ``source_padding_mask(src)`` builds the key mask (this module's ``source_padding_mask`` by default; any
      function with its contract, such as a learner's own that passed its check, can take its place).
    """

    def __init__(
        self,
        src_vocab_size: int,
        tgt_vocab_size: int,
        d_model: int = 64,
        num_heads: int = 4,
        num_encoder_layers: int = 2,
        num_decoder_layers: int = 2,
        d_ff: int = 128,
        dropout: float = 0.0,
        max_len: int = 32,
        tie_output: bool = True,
        source_padding_mask: Callable[[Tensor], Tensor] = source_padding_mask,
    ) -> None:
        super().__init__()
        self.source_padding_mask = source_padding_mask  # src (batch, m) -> key mask (batch, 1, m)
        self.d_model = d_model
        self.max_len = max_len
        self.src_embed = nn.Embedding(src_vocab_size, d_model)
        self.tgt_embed = nn.Embedding(tgt_vocab_size, d_model)
        for embedding in (self.src_embed, self.tgt_embed):
            nn.init.normal_(embedding.weight, std=d_model**-0.5)
        self.src_pos = LearnedPositionalEmbedding(d_model, max_len)
        self.tgt_pos = LearnedPositionalEmbedding(d_model, max_len)
        self.encoder = nn.ModuleList(
            [EncoderBlock(d_model, num_heads, d_ff, dropout, norm_first=True) for _ in range(num_encoder_layers)]
        )
        self.decoder = nn.ModuleList(
            [DecoderBlock(d_model, num_heads, d_ff, dropout, norm_first=True) for _ in range(num_decoder_layers)]
        )
        self.encoder_norm = nn.LayerNorm(d_model)
        self.decoder_norm = nn.LayerNorm(d_model)
        self.out = nn.Linear(d_model, tgt_vocab_size)
        if tie_output:
            self.out.weight = self.tgt_embed.weight
        self.dropout = nn.Dropout(dropout)

    def _check_length(self, x: Tensor, name: str) -> None:
        if x.shape[1] > self.max_len:
            raise ValueError(f"{name} has {x.shape[1]} positions; this model has position embeddings for {self.max_len}")

    def encode(self, src: Tensor) -> tuple[Tensor, Tensor]:
        """src ``(batch, m)`` -> ``(memory (batch, m, d_model), memory_mask (batch, 1, m))``."""
        self._check_length(_require_ids(src, "src"), "src")
        mask = self.source_padding_mask(src)  # (batch, 1, m): the padded keys are hidden
        h = self.dropout(self.src_pos(self.src_embed(src) * math.sqrt(self.d_model)))  # (batch, m, d_model)
        for block in self.encoder:
            h = block(h, mask)
        return self.encoder_norm(h), mask

    def decode(self, tgt_in: Tensor, state: tuple[Tensor, ...]) -> Tensor:
        """tgt_in ``(batch, n)`` and ``encode``'s state -> logits ``(batch, n, tgt_vocab_size)``."""
        self._check_length(_require_ids(tgt_in, "tgt_in"), "tgt_in")
        memory, memory_mask = state
        causal = causal_mask(tgt_in.shape[1], device=tgt_in.device)  # (n, n)
        h = self.dropout(self.tgt_pos(self.tgt_embed(tgt_in) * math.sqrt(self.d_model)))  # (batch, n, d_model)
        for block in self.decoder:
            h = block(h, memory, tgt_mask=causal, memory_mask=memory_mask)
        return self.out(self.decoder_norm(h))  # (batch, n, tgt_vocab_size)

    def forward(self, src: Tensor, tgt_in: Tensor) -> Tensor:
        return self.decode(tgt_in, self.encode(src))


def cross_attention_weights(model: Seq2SeqTransformer, src: Tensor, tgt_in: Tensor) -> list[Tensor]:
    """Every decoder layer's cross-attention weights, each ``(batch, heads, n, m)``, for a teacher-forced pass.

    ``DecoderBlock`` calls its attention with ``need_weights=False`` (the fused kernel); forward hooks on each
    ``cross_attn`` ask for the weights during this one pass and keep them, then are removed. The model is put
    in eval mode; row ``t`` of a map is what the decoder read to predict target word ``t``.
    """
    kept: list[Tensor] = []

    def ask(module: nn.Module, args: tuple, kwargs: dict) -> tuple[tuple, dict]:
        return args, {**kwargs, "need_weights": True}

    def keep(module: nn.Module, args: tuple, output: tuple[Tensor, Tensor]) -> None:
        kept.append(output[1].detach())

    handles = []
    for block in model.decoder:
        handles.append(block.cross_attn.register_forward_pre_hook(ask, with_kwargs=True))
        handles.append(block.cross_attn.register_forward_hook(keep))
    try:
        model.eval()
        with torch.no_grad():
            model(src, tgt_in)
    finally:
        for handle in handles:
            handle.remove()
    return kept


# ---------------------------------------------------------------- the GRU with attention


def additive_attention(att: AdditiveAttention, s: Tensor, h: Tensor, mask: Tensor) -> tuple[Tensor, Tensor]:
    """One step of Bahdanau attention: scores ``v^T tanh(W1 h_i + W2 s)``, masked softmax over the source, weighted sum.

    s ``(batch, d_s)`` the decoder state, h ``(batch, m, d_h)`` the encoder states, mask ``(batch, m)`` boolean
    (``True`` = real token). Returns the context ``(batch, d_h)`` and the weights ``(batch, m)``.
    """
    scores = att.v(torch.tanh(att.W1(h) + att.W2(s).unsqueeze(1))).squeeze(-1)  # (batch, m)
    weights = torch.softmax(scores.masked_fill(~mask, float("-inf")), dim=-1)  # (batch, m)
    return (weights.unsqueeze(1) @ h).squeeze(1), weights  # (batch, d_h), (batch, m)


class Seq2SeqGRU(nn.Module):
    """GRU encoder-decoder with attention (Bahdanau et al., 2015), or without (``attention=None``).

    ``Seq2SeqGRU(src_vocab_size, tgt_vocab_size, embed=32, hidden=64, attention="additive", d_att=64,
    source_padding_mask=source_padding_mask)``:

    - encoder: embeddings, a bidirectional GRU of ``hidden // 2`` units per direction (packed, so padding
      never enters it) -> states ``h_i`` ``(batch, m, hidden)``; the decoder starts from
      ``tanh(W [last forward; first backward])``;
    - decoder, at step t: scores of the previous state ``s_{t-1}`` against every ``h_i`` (``"additive"``:
      ``v^T tanh(W1 h_i + W2 s)``, ``"multiplicative"``: ``s^T W h_i``, ``"dot"``: ``s^T h_i``), a softmax
      over the real source positions, the context ``c_t = sum_i a_ti h_i``; then
      ``s_t = GRUCell([y_{t-1}; c_t], s_{t-1})`` and logits from ``[s_t; c_t; y_{t-1}]``;
    - ``attention=None``: the context is the same at every step, the decoder's initial state (one vector
      for the whole source, as in the encoder-decoders before attention);
    - ``source_padding_mask(src)`` says which source positions are real (``(batch, 1, m)``, read as ``(batch, m)``):
      the lengths that pack the encoder's input and the mask of the attention's softmax come from it.
    """

    SCORES = ("additive", "multiplicative", "dot", None)

    def __init__(
        self,
        src_vocab_size: int,
        tgt_vocab_size: int,
        embed: int = 32,
        hidden: int = 64,
        attention: str | None = "additive",
        d_att: int = 64,
        source_padding_mask: Callable[[Tensor], Tensor] = source_padding_mask,
    ) -> None:
        super().__init__()
        self.source_padding_mask = source_padding_mask  # src (batch, m) -> mask (batch, 1, m), read as (batch, m)
        if attention not in self.SCORES:
            raise ValueError(f"attention must be one of {self.SCORES}, got {attention!r}")
        if hidden % 2:
            raise ValueError(f"hidden must be even (two directions of hidden // 2 units), got {hidden}")
        self.attention = attention
        self.hidden = hidden
        self.src_embed = nn.Embedding(src_vocab_size, embed)
        self.tgt_embed = nn.Embedding(tgt_vocab_size, embed)
        self.encoder = nn.GRU(embed, hidden // 2, batch_first=True, bidirectional=True)
        self.init_state = nn.Linear(hidden, hidden)
        self.score: nn.Module | None = None
        if attention == "additive":
            self.score = AdditiveAttention(hidden, hidden, d_att)
        elif attention == "multiplicative":
            self.score = MultiplicativeAttention(hidden, hidden)
        self.cell = nn.GRUCell(embed + hidden, hidden)
        self.out = nn.Linear(hidden + hidden + embed, tgt_vocab_size)

    def encode(self, src: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        """src ``(batch, m)`` -> ``(states (batch, m, hidden), mask (batch, m), s0 (batch, hidden))``."""
        src = _require_ids(src, "src")
        mask = self.source_padding_mask(src).reshape(src.shape)  # (batch, m): True on the real tokens
        lengths = mask.sum(1).clamp(min=1).cpu()
        packed = nn.utils.rnn.pack_padded_sequence(self.src_embed(src), lengths, batch_first=True, enforce_sorted=False)
        out, last = self.encoder(packed)  # last (2, batch, hidden // 2): forward's last step, backward's first
        states, _ = nn.utils.rnn.pad_packed_sequence(out, batch_first=True, total_length=src.shape[1])  # (batch, m, hidden)
        s0 = torch.tanh(self.init_state(torch.cat([last[0], last[1]], dim=-1)))  # (batch, hidden)
        return states, mask, s0

    def attend(self, s: Tensor, states: Tensor, mask: Tensor) -> tuple[Tensor, Tensor]:
        """Context ``(batch, hidden)`` and weights ``(batch, m)`` of decoder state s ``(batch, hidden)``."""
        if self.attention == "additive":
            return additive_attention(self.score, s, states, mask)
        scores = self.score(s, states) if self.attention == "multiplicative" else dot_product_scores(s, states)  # (batch, m)
        weights = torch.softmax(scores.masked_fill(~mask, float("-inf")), dim=-1)  # (batch, m)
        return (weights.unsqueeze(1) @ states).squeeze(1), weights

    def decode(self, tgt_in: Tensor, state: tuple[Tensor, ...], return_weights: bool = False):
        """tgt_in ``(batch, n)`` -> logits ``(batch, n, tgt_vocab_size)`` (and the weights ``(batch, n, m)``)."""
        states, mask, s = state
        y = self.tgt_embed(_require_ids(tgt_in, "tgt_in"))  # (batch, n, embed)
        outputs, contexts, all_weights = [], [], []
        for t in range(tgt_in.shape[1]):
            if self.attention is None:
                context, weights = state[2], None  # the fixed summary of the source
            else:
                context, weights = self.attend(s, states, mask)  # (batch, hidden), (batch, m)
            s = self.cell(torch.cat([y[:, t], context], dim=-1), s)  # (batch, hidden)
            outputs.append(s)
            contexts.append(context)
            all_weights.append(weights)
        features = torch.cat([torch.stack(outputs, 1), torch.stack(contexts, 1), y], dim=-1)  # (batch, n, 2 hidden + embed)
        logits = self.out(features)  # (batch, n, tgt_vocab_size)
        if return_weights:
            return logits, (torch.stack(all_weights, 1) if self.attention is not None else None)
        return logits

    def forward(self, src: Tensor, tgt_in: Tensor) -> Tensor:
        return self.decode(tgt_in, self.encode(src))

    def attention_weights(self, src: Tensor, tgt_in: Tensor) -> Tensor:
        """The decoder's attention ``(batch, n, m)`` in a teacher-forced pass (eval mode, no gradients)."""
        if self.attention is None:
            raise ValueError("this Seq2SeqGRU has no attention (attention=None)")
        self.eval()
        with torch.no_grad():
            return self.decode(tgt_in, self.encode(src), return_weights=True)[1]


# ---------------------------------------------------------------- training


@dataclass
class Seq2SeqHistory:
    """What ``train_seq2seq`` measured, one entry per epoch run, and where it stopped.

    ``train_loss``, ``val_loss``, ``val_token_acc`` (teacher-forced, a fraction) and, when a decoder was passed,
    ``val_exact`` (greedy exact match, a fraction); ``best_epoch`` (1-based: the weights the model was left
    with), ``stopped_early`` (the stopping rule ended the run before its last epoch), ``seconds`` (wall time) and
    ``cpu_seconds`` (this process's CPU time, steadier than the wall time on a shared machine).
    """

    train_loss: list[float] = field(default_factory=list)
    val_loss: list[float] = field(default_factory=list)
    val_token_acc: list[float] = field(default_factory=list)
    val_exact: list[float] = field(default_factory=list)
    best_epoch: int = 0
    stopped_early: bool = False
    seconds: float = 0.0
    cpu_seconds: float = 0.0

    def __getitem__(self, key: str) -> list[float]:
        return getattr(self, key)

    @property
    def epochs(self) -> int:
        """The number of epochs run."""
        return len(self.train_loss)


def seq2seq_loss(logits: Tensor, tgt: Tensor, label_smoothing: float = 0.0) -> Tensor:
    """Mean cross-entropy over the real target positions: logits ``(batch, n, vocab)``, tgt ``(batch, n)``; padding ignored."""
    return F.cross_entropy(logits.flatten(0, 1), tgt.flatten(), ignore_index=PAD, label_smoothing=label_smoothing)


def _trim(src: Tensor, tgt: Tensor) -> tuple[Tensor, Tensor]:
    """Drop the columns that are padding in every row of the batch."""
    s = int((src != PAD).sum(1).max())
    t = int((tgt != PAD).sum(1).max())
    return src[:, :s], tgt[:, :t]


@torch.no_grad()
def _evaluate_teacher_forced(
    model: nn.Module, data: TranslationSet, batch_size: int = 500, shift: Callable[[Tensor], Tensor] = shift_right
) -> tuple[float, float]:
    model.eval()
    device = next(model.parameters()).device
    total, correct, count = 0.0, 0, 0
    for start in range(0, len(data), batch_size):
        src, tgt = _trim(data.src[start : start + batch_size].to(device), data.tgt[start : start + batch_size].to(device))
        logits = model(src, shift(tgt))
        real = tgt != PAD
        total += F.cross_entropy(logits[real], tgt[real], reduction="sum").item()
        correct += int((logits.argmax(-1) == tgt)[real].sum())
        count += int(real.sum())
    return total / count, correct / count


def train_seq2seq(
    model: nn.Module,
    train: TranslationSet,
    val: TranslationSet | None = None,
    epochs: int = 20,
    lr: float = 3e-3,
    batch_size: int = 64,
    weight_decay: float = 0.01,
    warmup_epochs: float = 1.0,
    betas: tuple[float, float] = (0.9, 0.999),
    label_smoothing: float = 0.0,
    clip: float | None = 1.0,
    seed: int = 0,
    *,
    patience: int | None = None,
    min_delta: float = 0.0,
    keep_best: bool = False,
    shift: Callable[[Tensor], Tensor] = shift_right,
    decode: Callable[[nn.Module, Tensor, int], Tensor] | None = None,
) -> Seq2SeqHistory:
    """Teacher forcing with AdamW (``betas``) and warm-up + cosine decay over ``epochs`` (``helpers.training.warmup_cosine``).

    Each step: the decoder reads ``shift(tgt)`` (``shift_right``, or a learner's own), the loss is
    ``seq2seq_loss`` (padding ignored), gradients are clipped to norm ``clip``. Batches are drawn by a generator
    seeded with ``seed`` and trimmed to their longest row. After every epoch, the teacher-forced loss and token
    accuracy on ``val`` (pass a validation split, never the test set), and, with ``decode`` (a function
    ``decode(model, src, max_len)`` such as ``greedy_decode``), the exact match of its translations of ``val``.

    **Stopping rule** (with ``val`` and ``patience``): the run stops once ``patience`` epochs in a row have failed to
    raise the validation token accuracy more than ``min_delta`` (a fraction: 0.001 is 0.1 point) above the last
    value that did, and the model is left with the weights of its best epoch (highest validation token accuracy; a tie goes to the
    lower validation loss). Without ``patience`` every epoch runs and the model keeps its last weights, or, with
    ``keep_best`` (and ``val``), the weights of its best epoch by the same rule. The device is the model's.
    """
    if epochs < 1 or batch_size < 1:
        raise ValueError(f"epochs and batch_size must be positive, got {epochs} and {batch_size}")
    if patience is not None and (val is None or patience < 1):
        raise ValueError("early stopping needs a validation split and patience >= 1")
    if keep_best and val is None:
        raise ValueError("keep_best needs a validation split to choose the best epoch")
    device = next(model.parameters()).device
    src_all, tgt_all = train.src.to(device), train.tgt.to(device)
    steps_per_epoch = math.ceil(len(train) / batch_size)
    optimizer = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=weight_decay, betas=betas)
    scheduler = warmup_cosine(optimizer, max(1, round(warmup_epochs * steps_per_epoch)), epochs * steps_per_epoch)
    generator = torch.Generator().manual_seed(seed)
    history = Seq2SeqHistory()
    best_key: tuple[float, float] | None = None
    best_state: dict[str, Tensor] | None = None
    threshold, waited = -math.inf, 0  # the accuracy to beat by more than min_delta, epochs since it was beaten
    start, cpu_start = time.perf_counter(), time.process_time()
    for epoch in range(1, capped(epochs, SMOKE_EPOCHS) + 1):  # every epoch (at most four in a smoke test)
        model.train()
        order = torch.randperm(len(train), generator=generator).to(device)
        total, count = 0.0, 0
        for i in range(capped(steps_per_epoch, 1)):  # every batch (one in a smoke test: helpers.runtime.smoke)
            idx = order[i * batch_size : (i + 1) * batch_size]
            src, tgt = _trim(src_all[idx], tgt_all[idx])
            loss = seq2seq_loss(model(src, shift(tgt)), tgt, label_smoothing)
            optimizer.zero_grad()
            loss.backward()
            if clip is not None:
                nn.utils.clip_grad_norm_(model.parameters(), clip)
            optimizer.step()
            scheduler.step()
            total += loss.item() * len(idx)
            count += len(idx)
        history.train_loss.append(total / count)
        history.best_epoch = epoch
        if val is None:
            continue
        held_out = val[: capped(len(val), batch_size)]  # every validation pair (one batch in a smoke test)
        val_loss, val_acc = _evaluate_teacher_forced(model, held_out, shift=shift)
        history.val_loss.append(val_loss)
        history.val_token_acc.append(val_acc)
        if decode is not None:
            with torch.no_grad():
                pred = decode(model, held_out.src.to(device), held_out.tgt.shape[1] + 2)
            history.val_exact.append(sequence_accuracy(pred, held_out.tgt.to(device))[0])
        if patience is None and not keep_best:
            continue
        if best_key is None or (val_acc, -val_loss) > best_key:
            best_key = (val_acc, -val_loss)
            best_state = copy.deepcopy(model.state_dict())
        if patience is None:
            continue
        if val_acc > threshold + min_delta:
            threshold, waited = val_acc, 0
        else:
            waited += 1
            if waited >= patience:
                history.stopped_early = epoch < epochs
                break
    if best_state is not None:
        model.load_state_dict(best_state)
        history.best_epoch = 1 + max(
            range(len(history.val_token_acc)), key=lambda e: (history.val_token_acc[e], -history.val_loss[e])
        )
    history.seconds = time.perf_counter() - start
    history.cpu_seconds = time.process_time() - cpu_start
    return history


# ---------------------------------------------------------------- generation and metrics


def never_special(logits: Tensor) -> Tensor:
    """``logits`` ``(..., vocab)`` with ``<pad>`` and ``<bos>`` set to ``-inf``: a decoder must never choose them."""
    return logits.index_fill(-1, torch.tensor([PAD, BOS], device=logits.device), float("-inf"))


@torch.no_grad()
def greedy_decode(model: Seq2SeqModel, src: Tensor, max_len: int = 16) -> Tensor:
    """Greedy decoding: feed the model its own most likely word, one step at a time.

    src ``(batch, m)`` -> tokens ``(batch, L)`` without ``<bos>``, ``L <= max_len``; a row stops being extended
    at its ``<eos>`` (padded after it); the loop ends when every row has one, or after ``max_len`` steps.
    ``<pad>`` and ``<bos>`` are never generated (``never_special``): they are not words of a translation.
    """
    if isinstance(model, nn.Module):
        model.eval()
    state = model.encode(_require_ids(src, "src"))
    ys = torch.full((src.shape[0], 1), BOS, dtype=torch.long, device=src.device)  # (batch, 1)
    done = torch.zeros(src.shape[0], dtype=torch.bool, device=src.device)  # (batch,)
    for _ in range(max_len):
        logits = model.decode(ys, state)  # (batch, t, vocab)
        next_token = never_special(logits[:, -1]).argmax(-1)  # (batch,): <pad> and <bos> are never chosen
        next_token = next_token.masked_fill(done, PAD)
        ys = torch.cat([ys, next_token[:, None]], dim=1)  # (batch, t + 1)
        done |= next_token == EOS
        if done.all():
            break
    return ys[:, 1:]


@torch.no_grad()
def beam_search(model: Seq2SeqModel, src: Tensor, max_len: int = 16, width: int = 4, alpha: float = 1.0) -> Tensor:
    """Beam search with length normalisation, for a whole batch at once.

    Keeps the ``width`` most probable prefixes of every row (by summed log-probability); a prefix that has
    produced ``<eos>`` stays in the beam, extended by padding at no cost. At the end each row returns the
    hypothesis with the best ``log p(y) / len(y) ** alpha`` (``len`` counts ``<eos>``; ``alpha = 0`` is no
    normalisation, 1 the mean log-probability per word). src ``(batch, m)`` -> tokens ``(batch, L)`` as
    ``greedy_decode``; with ``width=1`` it equals greedy decoding. ``<pad>`` and ``<bos>`` are never generated:
    their probability is set to 0 (``never_special``) before the softmax, so the others sum to 1.
    """
    if width < 1:
        raise ValueError(f"width must be at least 1, got {width}")
    if isinstance(model, nn.Module):
        model.eval()
    batch = _require_ids(src, "src").shape[0]
    state = tuple(t.repeat_interleave(width, dim=0) for t in model.encode(src))  # batch * width rows
    device = src.device
    ys = torch.full((batch * width, 1), BOS, dtype=torch.long, device=device)  # (batch * width, 1)
    scores = torch.full((batch, width), float("-inf"), device=device)
    scores[:, 0] = 0.0  # one live hypothesis per row at the start
    done = torch.zeros(batch * width, dtype=torch.bool, device=device)
    lengths = torch.zeros(batch * width, device=device)
    for _ in range(max_len):
        logp = torch.log_softmax(never_special(model.decode(ys, state)[:, -1].float()), dim=-1)  # (batch * width, vocab)
        vocab = logp.shape[-1]
        logp[done] = float("-inf")
        logp[done, PAD] = 0.0  # a finished hypothesis is extended by padding at no cost
        total = (scores.reshape(-1, 1) + logp).reshape(batch, width * vocab)  # (batch, width * vocab)
        scores, flat = total.topk(width, dim=-1)  # (batch, width)
        parent = (flat // vocab + torch.arange(batch, device=device)[:, None] * width).reshape(-1)  # (batch * width,)
        token = (flat % vocab).reshape(-1)  # (batch * width,)
        lengths = lengths[parent] + (~done[parent]).float()
        done = done[parent] | (token == EOS)
        ys = torch.cat([ys[parent], token[:, None]], dim=1)
        if done.all():
            break
    normalised = scores / lengths.reshape(batch, width).clamp(min=1) ** alpha  # (batch, width)
    normalised = normalised.masked_fill(~done.reshape(batch, width), float("-inf")).where(
        done.reshape(batch, width).any(1, keepdim=True), normalised
    )  # prefer finished hypotheses where a row has one
    best = normalised.argmax(-1) + torch.arange(batch, device=device) * width  # (batch,)
    return ys[best, 1:]


@torch.no_grad()
def sequence_log_prob(
    model: Seq2SeqModel, src: Tensor, tokens: Tensor, shift: Callable[[Tensor], Tensor] = shift_right
) -> Tensor:
    """The model's log-probability of each row of ``tokens`` ``(batch, L)`` given ``src``: ``(batch,)``.

    Teacher-forced: the sum of ``log p(word t | words before t, src)`` over each row's words up to and including its
    first ``<eos>`` (all of them if it has none), with ``<pad>`` and ``<bos>`` excluded from the softmax as the
    decoders exclude them (``never_special``). Comparing it for a reference translation and a decoded one tells a
    *search* error (the model prefers the reference, the search missed it) from a *model* error.
    """
    if isinstance(model, nn.Module):
        model.eval()
    tokens = cut_at_eos(tokens)  # (batch, L): <pad> after each first <eos>
    logp = torch.log_softmax(never_special(model(src, shift(tokens)).double()), dim=-1)  # (batch, L, vocab)
    real = tokens != PAD  # (batch, L)
    return logp.gather(-1, tokens.clamp(min=0)[..., None])[..., 0].masked_fill(~real, 0.0).sum(1)


def cut_at_eos(tokens: Tensor) -> Tensor:
    """Replace everything after each row's first ``<eos>`` by ``<pad>`` (``(batch, L)`` -> same shape)."""
    tokens = _require_ids(tokens, "tokens")
    after = (tokens == EOS).long().cumsum(1) - (tokens == EOS).long()  # (batch, L): >0 after the first eos
    return tokens.masked_fill(after > 0, PAD)


def exact_matches(pred: Tensor, tgt: Tensor) -> Tensor:
    """Per row, whether generated ``pred`` ``(batch, L)`` equals ``tgt`` ``(batch, n)`` up to its ``<eos>``: ``(batch,)`` bool."""
    pred, tgt = cut_at_eos(pred), cut_at_eos(tgt)
    length = max(pred.shape[1], tgt.shape[1])
    pred = F.pad(pred, (0, length - pred.shape[1]), value=PAD)
    tgt = F.pad(tgt, (0, length - tgt.shape[1]), value=PAD)
    return (pred == tgt).all(1)


def exact_match_by_digits(pred: Tensor, tgt: Tensor, numbers: Tensor, merge_up_to: int = 1) -> dict[str, tuple[float, int]]:
    """Exact match per number of digits of ``numbers`` ``(batch,)``: ``{"4": (fraction, how many rows), ...}``.

    The keys are the digit counts in increasing order, as strings; numbers of at most ``merge_up_to`` digits share
    one group (``"1-3"`` for ``merge_up_to=3``), for the short numbers are few (there are only 9 of one digit).
    """
    hits = exact_matches(pred, tgt).cpu()
    digits = torch.tensor([len(str(int(n))) for n in numbers.tolist()]).clamp(min=merge_up_to)
    out = {}
    for d in digits.unique().tolist():
        label = f"1-{d}" if d == merge_up_to and d > 1 else str(d)
        out[label] = (hits[digits == d].double().mean().item(), int((digits == d).sum()))
    return out


def sequence_accuracy(pred: Tensor, tgt: Tensor) -> tuple[float, float]:
    """Exact-match and token accuracy (fractions) of generated ``pred`` ``(batch, L)`` against ``tgt`` ``(batch, n)``.

    Both are cut at their first ``<eos>`` and padded to a common length. Exact match: the whole sentence,
    ``<eos>`` included, is right. Token accuracy: the share of the target's real positions (its ``<eos>``
    included) that hold the right word at the right position.
    """
    exact = exact_matches(pred, tgt).float().mean().item()
    pred, tgt = cut_at_eos(pred), cut_at_eos(tgt)
    length = max(pred.shape[1], tgt.shape[1])
    pred = F.pad(pred, (0, length - pred.shape[1]), value=PAD)
    tgt = F.pad(tgt, (0, length - tgt.shape[1]), value=PAD)
    real = tgt != PAD
    token = ((pred == tgt) & real).sum().item() / real.sum().item()
    return exact, token


def alignment_accuracy(weights: Tensor, align: Tensor) -> Tensor:
    """Share of target words whose most-attended source position is their true one.

    weights ``(batch, ..., n, m)`` (e.g. ``(batch, heads, n, m)`` or ``(batch, n, m)``), align ``(batch, n)``
    with ``-1`` where a target position has no source word (``und``, ``<eos>``, padding; those are skipped).
    Returns a tensor of the middle axes' shape (``(heads,)``, or a scalar).
    """
    if weights.shape[0] != align.shape[0] or weights.shape[-2] != align.shape[1]:
        raise ValueError(
            f"weights {tuple(weights.shape)} do not match align {tuple(align.shape)}: expected (batch, ..., n, m) and (batch, n)"
        )
    middle = weights.dim() - 3
    align = align.reshape(align.shape[0], *([1] * middle), align.shape[1])  # (batch, 1.., n)
    has_word = align >= 0
    hits = (weights.argmax(-1) == align) & has_word  # (batch, ..., n)
    dims = (0, -1)
    return hits.sum(dims).double() / has_word.expand_as(hits).sum(dims).double()
