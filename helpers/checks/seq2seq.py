"""Checks of notebook 09: teacher forcing's shift, the source padding mask, greedy decoding, additive attention.

Each runs the student's code on fresh random inputs next to the reference in ``helpers.models.seq2seq``
(itself tested against ``helpers.attention`` and PyTorch) and names the typical mistakes: an off-by-one
shift, a mask that hides the queries instead of the keys, a decoding loop that does not feed the model its
own output, a missing tanh or a softmax over the wrong axis.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from helpers.attention import AdditiveAttention
from helpers.checks._core import (
    ExerciseFailed,
    call,
    exercise,
    expect_close,
    expect_tensor,
    forbid_forward,
    require_attempt,
)
from helpers.data.translation import BOS, EOS, PAD
from helpers.models.seq2seq import additive_attention, cut_at_eos, greedy_decode, shift_right

__all__ = ["check_shift_right", "check_source_padding_mask", "check_greedy_decode", "check_additive_attention"]


def _random_targets(batch: int, lengths: list[int], vocab: int = 20) -> Tensor:
    """Padded targets ``(batch, max(lengths))``: random words, ``<eos>`` at the end of each row, then ``<pad>``."""
    n = max(lengths)
    tgt = torch.full((batch, n), PAD, dtype=torch.long)
    for row, length in enumerate(lengths):
        tgt[row, : length - 1] = torch.randint(3, vocab, (length - 1,))
        tgt[row, length - 1] = EOS
    return tgt


# ---------------------------------------------------------------- shift right


def _shift_mistakes(tgt: Tensor) -> dict[str, Tensor]:
    bos = torch.full_like(tgt[:, :1], BOS)
    return {
        "the target is not shifted: position t of the decoder would read word t, the very word it must predict "
        "(an off-by-one: put <bos> first and drop the last position)": tgt,
        "the target is shifted the wrong way (to the left): the decoder input starts with <bos> and is the target "
        "moved one position to the right": torch.cat([tgt[:, 1:], torch.full_like(tgt[:, :1], PAD)], 1),
        "torch.roll wraps the last position around to the front: set the first column to <bos>": tgt.roll(1, dims=1),
        "the first word is dropped instead of the last (an off-by-one): keep tgt[:, :-1] behind <bos>": torch.cat(
            [bos, tgt[:, 1:]], 1
        ),
        "the first position holds <pad> instead of the start token <bos>": torch.cat([torch.full_like(bos, PAD), tgt[:, :-1]], 1),
        "the first position holds <eos> instead of the start token <bos>": torch.cat([torch.full_like(bos, EOS), tgt[:, :-1]], 1),
        "the target is shifted by two positions (an off-by-one): shift by exactly one": torch.cat([bos, bos, tgt[:, :-2]], 1),
    }


@exercise("shift right for teacher forcing")
def check_shift_right(shift_right_fn) -> None:
    """Check ``shift_right(tgt) -> (batch, n)``: ``<bos>``, then the target without its last position."""
    require_attempt(shift_right_fn, "shift_right")
    for lengths in ([4, 7, 2], [5, 5, 3, 6, 1]):
        tgt = _random_targets(len(lengths), lengths)
        out = expect_tensor(call(shift_right_fn, tgt, what=f"tgt of shape {tuple(tgt.shape)}"), "the decoder input")
        n = tgt.shape[1]
        if out.shape == (tgt.shape[0], n + 1):
            raise ExerciseFailed(
                f"the decoder input has {n + 1} positions for a target of {n}: <bos> was put in front but the last "
                "position was not dropped (tgt[:, :-1]); the decoder input and the target must have the same length, "
                "since position t of one predicts position t of the other"
            )
        if out.is_floating_point() or out.dtype == torch.bool:
            raise ExerciseFailed(f"the decoder input has dtype {out.dtype}; token ids are integers (torch.long), as tgt")
        expect_close(out.long(), shift_right(tgt), "the decoder input", atol=0, rtol=0, mistakes=_shift_mistakes(tgt))
        if out.dtype != torch.long:
            raise ExerciseFailed(f"the decoder input has dtype {out.dtype}; nn.Embedding needs torch.long ids, as tgt has")


# ---------------------------------------------------------------- padding mask


def _random_sources(lengths: list[int], vocab: int = 20) -> Tensor:
    return _random_targets(len(lengths), lengths, vocab)


@exercise("source padding mask")
def check_source_padding_mask(mask_fn) -> None:
    """Check ``source_padding_mask(src) -> bool (batch, 1, m)`` (or ``(batch, 1, 1, m)``), ``True`` = a real token."""
    require_attempt(mask_fn, "source_padding_mask")
    for lengths in ([3, 6, 4, 2], [5, 1, 5]):
        src = _random_sources(lengths)
        batch, m = src.shape
        out = expect_tensor(call(mask_fn, src, what=f"src of shape {tuple(src.shape)}"), "the mask")
        real = src != PAD  # (batch, m)
        if out.dtype != torch.bool:
            kind = "a float" if out.is_floating_point() else "an integer"
            raise ExerciseFailed(
                f"the mask has dtype {out.dtype} ({kind} mask); the course's masks are boolean, True = may attend "
                "(compare with ==/!=, which gives booleans, and do not convert it)"
            )
        shape = tuple(out.shape)
        if shape in ((batch, m, 1), (batch, 1, m, 1)) and m != 1:
            raise ExerciseFailed(
                f"the mask has shape {shape}: it hides the queries instead of the keys. Padding must not be *attended to*, "
                f"so the mask runs along the last axis of the scores (batch, n, m), the keys: shape (batch, 1, m)"
            )
        if shape == (batch, m):
            raise ExerciseFailed(
                f"the mask has shape {shape}; against scores (batch, heads, n, m) it would be read as (n, m), one row per query, "
                "not per sentence: add the query axis, mask[:, None, :] -> (batch, 1, m)"
            )
        if shape == (batch, m, m):
            both = real[:, :, None] & real[:, None, :]
            if torch.equal(out, both):
                raise ExerciseFailed(
                    "the mask hides the padded queries as well as the keys: a padded query's row is then all False and its "
                    "softmax is 0/0 = NaN. Mask the keys only, (src != pad)[:, None, :] of shape (batch, 1, m)"
                )
        if shape not in ((batch, 1, m), (batch, 1, 1, m)):
            raise ExerciseFailed(
                f"the mask has shape {shape}; expected (batch, 1, m) = {(batch, 1, m)}: one row per sentence that broadcasts "
                "over the queries (MultiHeadAttention adds the head axis itself; (batch, 1, 1, m) is accepted too)"
            )
        flat = out.reshape(batch, m)
        if torch.equal(flat, ~real):
            raise ExerciseFailed(
                "the mask is inverted: True marks the padding. The course's convention (F.scaled_dot_product_attention's) "
                "is True = may attend, so True on the real tokens: src != pad"
            )
        if torch.equal(flat, src != EOS) or torch.equal(flat, (src != PAD) & (src != EOS)):
            raise ExerciseFailed("the mask hides <eos>: only <pad> (id 0) is padding; <eos> is a real source token")
        if not torch.equal(flat, real):
            bad = int((flat != real).sum())
            raise ExerciseFailed(f"the mask is wrong at {bad} of {flat.numel()} source positions: it should be src != pad")


# ---------------------------------------------------------------- greedy decoding


class _Recorder(nn.Module):
    """Wraps the check's model: records every decoder input the student's loop feeds it, and stops a foreign one."""

    def __init__(self, model: nn.Module, batch: int) -> None:
        super().__init__()
        self.model = model
        self.batch = batch
        self.inputs: list[Tensor] = []
        self.encoded = 0

    def encode(self, src: Tensor) -> tuple[Tensor, ...]:
        self.encoded += 1
        return self.model.encode(src)

    def decode(self, tgt_in: Tensor, state: tuple[Tensor, ...]) -> Tensor:
        if not isinstance(tgt_in, Tensor) or tgt_in.dim() != 2:
            got = tuple(tgt_in.shape) if isinstance(tgt_in, Tensor) else type(tgt_in).__name__
            raise ExerciseFailed(f"the decoder input should be (batch, t) token ids, got {got}")
        if tgt_in.shape[0] != self.batch:
            raise ExerciseFailed(
                f"the decoder was fed {tgt_in.shape[0]} rows for a source batch of {self.batch}: the decoder input must "
                "be built inside the loop from <bos> and the model's own predictions, not taken from a variable outside "
                "the function (such as a target from the cells above: at translation time there is no target)"
            )
        self.inputs.append(tgt_in.detach().clone())
        return self.model.decode(tgt_in, state)

    def forward(self, src: Tensor, tgt_in: Tensor) -> Tensor:
        return self.decode(tgt_in, self.encode(src))


class _ToyTranslator(nn.Module):
    """A tiny causal model with the seq2seq interface whose next word depends on the last word fed and the source.

    ``logits[b, t] = A[tgt_in[b, t]] + B[src[b, t]] + C[t]`` (random tables): a loop that feeds the wrong
    words, or reads the wrong position, produces other sentences. Rows end (``<eos>``) at different steps.
    """

    def __init__(self, src_vocab: int = 12, tgt_vocab: int = 9, max_len: int = 16) -> None:
        super().__init__()
        self.A = nn.Parameter(torch.randn(tgt_vocab, tgt_vocab, dtype=torch.float64) * 2)
        self.B = nn.Parameter(torch.randn(src_vocab, tgt_vocab, dtype=torch.float64) * 2)
        self.C = nn.Parameter(torch.randn(max_len, tgt_vocab, dtype=torch.float64))
        with torch.no_grad():
            self.A[:, PAD] = self.A[:, BOS] = -20.0  # never generated
            self.C[:, EOS] += torch.linspace(-2.0, 4.0, max_len, dtype=torch.float64)  # <eos> grows likelier

    def encode(self, src: Tensor) -> tuple[Tensor]:
        return (src,)

    def decode(self, tgt_in: Tensor, state: tuple[Tensor, ...]) -> Tensor:
        src = state[0]
        n = tgt_in.shape[1]
        cols = torch.arange(n).clamp(max=src.shape[1] - 1)
        return self.A[tgt_in] + self.B[src[:, cols]] + self.C[:n]  # (batch, n, tgt_vocab)

    def forward(self, src: Tensor, tgt_in: Tensor) -> Tensor:
        return self.decode(tgt_in, self.encode(src))


def _decoder_model() -> tuple[_ToyTranslator, Tensor]:
    """The toy model and a batch of sources."""
    model = _ToyTranslator().eval()
    src = _random_targets(6, [6, 3, 5, 2, 6, 4], vocab=12)
    return model, src


def _compare_rows(out: Tensor, expected: Tensor, max_len: int) -> list[int]:
    out, expected = cut_at_eos(out), cut_at_eos(expected)
    length = max(out.shape[1], expected.shape[1])
    pad = torch.nn.functional.pad
    out = pad(out, (0, length - out.shape[1]), value=PAD)
    expected = pad(expected, (0, length - expected.shape[1]), value=PAD)
    return [i for i in range(len(out)) if not torch.equal(out[i], expected[i])]


@exercise("greedy decoding")
def check_greedy_decode(decode_fn, max_len: int = 7) -> None:
    """Check ``greedy_decode(model, src, max_len) -> (batch, L)`` tokens without ``<bos>``, each row up to its ``<eos>``.

    The rows are compared up to their first ``<eos>``, so a loop may stop when every row has ended or run all
    ``max_len`` steps, and may leave anything after a row's ``<eos>``.
    """
    require_attempt(decode_fn, "greedy_decode")
    model, src = _decoder_model()
    recorder = _Recorder(model, src.shape[0])
    expected = greedy_decode(model, src, max_len)  # (6, L)
    with torch.no_grad():
        out = call(decode_fn, recorder, src.clone(), max_len, what=f"a small model, src {tuple(src.shape)}, max_len={max_len}")
    out = expect_tensor(out, "the decoded tokens")
    if out.dim() != 2 or out.shape[0] != src.shape[0]:
        raise ExerciseFailed(f"the decoded tokens have shape {tuple(out.shape)}; expected (batch, L) = ({src.shape[0]}, L)")
    if out.is_floating_point():
        raise ExerciseFailed("the decoded tokens are floats: return the ids (argmax gives torch.long)")
    out = out.long()
    if not recorder.inputs:
        raise ExerciseFailed("the loop never called model.decode (or the model): each step runs the decoder on the words so far")
    if out.shape[1] > max_len:
        raise ExerciseFailed(
            f"{out.shape[1]} tokens per row for max_len={max_len}: return at most max_len generated tokens, without <bos>"
            + (" (the first column is <bos>: drop it, ys[:, 1:])" if bool((out[:, 0] == BOS).all()) else "")
        )
    if bool((out[:, 0] == BOS).all()):
        raise ExerciseFailed("every row starts with <bos>: return the generated words only, ys[:, 1:]")
    if not _compare_rows(out, expected, max_len):
        return
    # wrong: say why, from what the loop fed the decoder
    for x in recorder.inputs:
        if not bool((x[:, 0] == BOS).all()):
            raise ExerciseFailed("the decoder input does not start with <bos> (id 1): every row begins with the start token")
    lengths = {x.shape[1] for x in recorder.inputs}
    if lengths == {1}:
        raise ExerciseFailed(
            "the decoder was fed <bos> alone at every step: append each predicted word to the decoder input "
            "(ys = torch.cat([ys, next_word[:, None]], dim=1)), so that step t sees the words before it"
        )
    own = cut_at_eos(out)
    for x in recorder.inputs:
        t = x.shape[1] - 1
        if t == 0 or t > own.shape[1]:
            continue
        fed, mine = x[:, 1:], own[:, :t]
        live = ~((mine == EOS).cumsum(1) - (mine == EOS).long()).bool()  # positions up to each row's first <eos>
        if not torch.equal(fed[live], mine[live]):
            raise ExerciseFailed(
                "the decoder is not fed its own output: at each step the input must be <bos> followed by the words the "
                "model itself chose at the steps before (at translation time there is no target to feed)"
            )
    first = _first_position_decode(model, src, max_len)
    if not _compare_rows(out, first, max_len):
        raise ExerciseFailed(
            "the next word is read from the first position's logits (logits[:, 0]); the prediction for the next word "
            "is at the last position, logits[:, -1]"
        )
    rows = _compare_rows(out, expected, max_len)
    raise ExerciseFailed(
        f"rows {rows} differ from greedy decoding: at each step take the most likely word, logits[:, -1].argmax(-1) "
        "(not a sample), and append it to the decoder input"
    )


@torch.no_grad()
def _first_position_decode(model: nn.Module, src: Tensor, max_len: int) -> Tensor:
    """The typical mistake: read the next word from position 0's logits instead of the last position's."""
    state = model.encode(src)
    ys = torch.full((src.shape[0], 1), BOS, dtype=torch.long)
    for _ in range(max_len):
        ys = torch.cat([ys, model.decode(ys, state)[:, 0].argmax(-1)[:, None]], 1)
    return ys[:, 1:]


# ---------------------------------------------------------------- additive attention


def _additive_mistakes(att: AdditiveAttention, s: Tensor, h: Tensor, mask: Tensor) -> dict[str, tuple[Tensor, Tensor]]:
    w1h, w2s = att.W1(h), att.W2(s).unsqueeze(1)  # (batch, m, d_att), (batch, 1, d_att)

    def finish(scores: Tensor, dim: int = -1, masked: Tensor | None = mask, softmax: bool = True) -> tuple[Tensor, Tensor]:
        if masked is not None:
            scores = scores.masked_fill(~masked, float("-inf"))
        weights = torch.softmax(scores, dim=dim) if softmax else scores
        return (weights.unsqueeze(1) @ h).squeeze(1), weights

    def score(hidden: Tensor) -> Tensor:
        return att.v(hidden).squeeze(-1)  # (batch, m)

    right = score(torch.tanh(w1h + w2s))
    return {
        "the tanh is missing: the scores are v^T tanh(W1 h_i + W2 s); without the tanh they are linear in h_i "
        "and s, and the decoder state cannot change which word is preferred": finish(score(w1h + w2s)),
        "the non-linearity is a ReLU; Bahdanau's score uses tanh": finish(score(torch.relu(w1h + w2s))),
        "the non-linearity is a sigmoid; Bahdanau's score uses tanh": finish(score(torch.sigmoid(w1h + w2s))),
        "the decoder state is missing from the score (W2 s): without it the weights are the same at every step": finish(
            score(torch.tanh(w1h))
        ),
        "the softmax runs over the wrong axis (the batch, dim=0): each sentence's weights over its source words "
        "must sum to 1, softmax(scores, dim=-1)": finish(right, dim=0),
        "the weights are the raw scores: take a softmax over the source positions": finish(right, softmax=False),
        "the padding mask is ignored: fill the scores of padded positions with -inf before the softmax": finish(
            right, masked=None
        ),
        "the padding mask is inverted: fill the scores where mask is False (the padding) with -inf": finish(right, masked=~mask),
    }


@exercise("additive (Bahdanau) attention")
def check_additive_attention(attention_fn) -> None:
    """Check ``additive_attention(att, s, h, mask) -> (context (batch, d_h), weights (batch, m))``."""
    require_attempt(attention_fn, "additive_attention")
    batch, m, d_s, d_h, d_att = 3, 5, 4, 6, 7
    att = AdditiveAttention(d_s, d_h, d_att).double()
    s = torch.randn(batch, d_s, dtype=torch.float64)
    h = torch.randn(batch, m, d_h, dtype=torch.float64)
    mask = torch.arange(m)[None, :] < torch.tensor([5, 3, 2])[:, None]  # (batch, m)
    shortcut = "your function calls att(s, h), which computes the scores for you; write them with att.W1, att.W2, att.v"
    with torch.no_grad(), forbid_forward(att, shortcut):
        result = call(attention_fn, att, s, h, mask, what=f"s {tuple(s.shape)}, h {tuple(h.shape)}, mask {tuple(mask.shape)}")
    if not isinstance(result, tuple) or len(result) != 2:
        raise ExerciseFailed(f"return a pair (context, weights); got {type(result).__name__}")
    context, weights = (expect_tensor(x, name) for x, name in zip(result, ("context", "weights"), strict=True))
    if tuple(context.shape) == (batch, m) and tuple(weights.shape) == (batch, d_h):
        raise ExerciseFailed("the pair is swapped: return (context, weights), the context (batch, d_h) first")
    with torch.no_grad():
        want_context, want_weights = additive_attention(att, s, h, mask)
        mistakes = _additive_mistakes(att, s, h, mask)
    if weights.dim() == 3 and weights.shape[-1] == 1:
        weights = weights.squeeze(-1)
    expect_close(
        weights,
        want_weights,
        "the weights",
        atol=1e-9,
        rtol=1e-7,
        mistakes={message: wrong[1] for message, wrong in mistakes.items()},
        nonfinite_hint="a row whose every score is -inf gives NaN; mask only the padding (where mask is False)",
    )
    if tuple(context.shape) == (batch, m):
        raise ExerciseFailed(
            "the context has shape (batch, m): the weighted encoder states were summed over the features instead of the "
            "source positions; c = sum_i a_i h_i is (batch, d_h): (weights.unsqueeze(1) @ h).squeeze(1) or (weights[..., None] * h).sum(1)"
        )
    expect_close(
        context,
        want_context,
        "the context",
        atol=1e-9,
        rtol=1e-7,
        mistakes={"the context is the plain mean of the encoder states: weight them by the attention weights": h.mean(1)},
    )
