"""Checks of notebook 06: encoder and decoder block forward passes.

The student writes the forward pass of a post-LN block (notebook 06) or of the
pre-LN encoder block that notebooks 07 and 08 use, from its submodules
(``block.self_attn``, ``block.cross_attn``, ``block.ff``, ``block.norm1``...);
the check copies the block's weights into ``nn.TransformerEncoderLayer`` /
``nn.TransformerDecoderLayer`` (same ``norm_first``, dropout 0) and compares
on fresh random inputs, naming the typical mistakes. Calling the block itself
(``block(x, mask)``) is caught, and so is dropout left active (the block has
dropout 0.1 and is in eval mode, so two calls must agree).

``check_transformer_lr(transformer_lr)`` checks the learning-rate schedule of "Attention Is All You Need",
``transformer_lr(step, d_model, warmup_steps) = d_model^-0.5 * min(step^-0.5, step * warmup_steps^-1.5)`` (steps from 1),
at steps before, at and after the warm-up, naming the usual slips (max for min, a lost exponent's sign or its
parentheses, the warm-up or the decay missing, steps counted from 0).
"""

from __future__ import annotations

import copy
import math

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from helpers.attention import causal_mask
from helpers.blocks import (
    DecoderBlock,
    EncoderBlock,
    copy_decoder_block_to_torch,
    copy_encoder_block_to_torch,
    randomise_layer_norms,
)
from helpers.checks._core import (
    ExerciseFailed,
    ShortcutUsed,
    call_attempt,
    exercise,
    expect_close,
    expect_deterministic,
    expect_tensor,
    forbid_forward,
)

__all__ = [
    "check_encoder_block_forward",
    "check_decoder_block_forward",
    "check_pre_ln_encoder_block_forward",
    "check_transformer_lr",
]

D_MODEL, HEADS, D_FF = 12, 3, 20
ATOL, RTOL = 1e-8, 1e-6


def _attn(mha: nn.Module, q: Tensor, kv: Tensor, mask: Tensor | None, fused: bool = False) -> Tensor:
    # need_weights=True is the call a student writes; the fused kernel differs only on fully masked rows
    return mha(q, kv, kv, mask, need_weights=not fused)[0]


def _ff_linear(block: nn.Module, h: Tensor) -> Tensor:
    return block.ff.linear2(block.ff.linear1(h))


def _same_params(before: dict[str, Tensor], block: nn.Module, what: str) -> None:
    for name, value in block.state_dict().items():
        if not torch.equal(value, before[name]):
            raise ExerciseFailed(f"your {what} changed the block's parameter `{name}`; a forward pass only reads the weights")


def _encoder_mistakes(block: EncoderBlock, x: Tensor, mask: Tensor | None) -> dict[str, Tensor]:
    n1, n2, ff = block.norm1, block.norm2, block.ff
    sa = lambda h, m=mask, fused=False: _attn(block.self_attn, h, h, m, fused)  # noqa: E731
    h = n1(x + sa(x))
    wrong: dict[str, Tensor] = {
        "that is pre-LN (x + sublayer(norm(x))); this exercise is the original post-LN block: "
        "x = norm1(x + self_attn(x)), then norm2(x + ff(x))": (lambda p: p + ff(n2(p)))(x + sa(n1(x))),
        "both residual connections are missing: add the sub-layer's input before each norm, norm1(x + self_attn(x))": n2(
            ff(n1(sa(x)))
        ),
        "the residual connection around self-attention is missing: norm1(x + self_attn(x))": (lambda p: n2(p + ff(p)))(n1(sa(x))),
        "the residual connection around the feed-forward network is missing: norm2(h + ff(h))": n2(ff(h)),
        "the norm is applied to the sub-layer output only, before the residual addition (x + norm(sublayer(x))); "
        "post-LN normalises the sum: norm(x + sublayer(x))": (lambda p: p + n2(ff(p)))(x + n1(sa(x))),
        "the norm is applied to the residual input only (norm(x) + sublayer(x)); post-LN normalises the sum: norm(x + sublayer(x))": (
            lambda p: n2(p) + ff(p)
        )(n1(x) + sa(x)),
        "the feed-forward network has no activation between its two linear layers: use block.ff(h) (or relu after linear1)": n2(
            h + _ff_linear(block, h)
        ),
        "the final layer norm (norm2) is missing after the feed-forward residual": h + ff(h),
        "norm1 is used twice; the feed-forward sub-layer has its own norm, norm2": n1(h + ff(h)),
        "the norms are swapped: norm1 belongs to self-attention, norm2 to the feed-forward network": (lambda p: n1(p + ff(p)))(
            n2(x + sa(x))
        ),
        "the feed-forward residual adds the block's input x instead of the attention sub-layer's output h: norm2(h + ff(h))": n2(
            x + ff(h)
        ),
        "the feed-forward network reads the block's input x instead of the attention sub-layer's output h": n2(h + ff(x)),
        "the first layer norm (norm1) is missing: h = norm1(x + self_attn(x)), then norm2(h + ff(h))": (lambda p: n2(p + ff(p)))(
            x + sa(x)
        ),
        _EXTRA_RELU: n2(h + F.relu(ff(h))),
        "the sub-layers are in the wrong order: self-attention comes first, then the feed-forward network": (
            lambda p: n2(p + sa(p))
        )(n1(x + ff(x))),
        "the feed-forward network uses GELU; this block's activation is ReLU (the original paper): use block.ff(h), which applies it": n2(
            h + block.ff.linear2(F.gelu(block.ff.linear1(h)))
        ),
        "a fresh layer norm (F.layer_norm, or a new nn.LayerNorm) is used in place of the block's norms: use block.norm1 and "
        "block.norm2, whose gains and biases are learned": (lambda p: F.layer_norm(p + ff(p), p.shape[-1:]))(
            F.layer_norm(x + sa(x), x.shape[-1:])
        ),
        "the sums are normalised over the batch and positions (batch norm); a layer norm normalises each token over its "
        "features: use block.norm1 and block.norm2": (lambda p: _batch_norm(p + ff(p)))(_batch_norm(x + sa(x))),
    }
    if mask is not None:
        wrong["the mask is ignored: pass it to block.self_attn(x, x, x, mask)"] = (lambda p: n2(p + ff(p)))(n1(x + sa(x, None)))
        wrong["the mask is inverted: True means *may attend*; pass it unchanged"] = (lambda p: n2(p + ff(p)))(
            n1(x + sa(x, ~mask))
        )
        wrong["the mask is inverted: True means *may attend*; pass it unchanged (rows that may attend to nothing give NaN)"] = (
            lambda p: n2(p + ff(p))
        )(n1(x + sa(x, ~mask, True)))
    return wrong


def _pre_ln_mistakes(block: EncoderBlock, x: Tensor, mask: Tensor | None) -> dict[str, Tensor]:
    n1, n2, ff = block.norm1, block.norm2, block.ff
    d = x.shape[-1]
    sa = lambda h, m=mask, fused=False: _attn(block.self_attn, h, h, m, fused)  # noqa: E731
    p = x + sa(n1(x))  # the attention half, right
    tail = lambda q: q + ff(n2(q))  # noqa: E731
    ff_by_hand = lambda h, act: block.ff.linear2(act(block.ff.linear1(h)))  # noqa: E731
    other_act, other_name, act_name = (F.relu, "ReLU", "GELU") if block.ff.activation == "gelu" else (F.gelu, "GELU", "ReLU")
    fresh = lambda h: F.layer_norm(h, (d,))  # noqa: E731
    h_post = n1(x + sa(x))
    wrong: dict[str, Tensor] = {
        "that is post-LN (norm(x + sublayer(x))); this block is pre-LN: x = x + self_attn(norm1(x)), then x + ff(norm2(x))": n2(
            h_post + ff(h_post)
        ),
        "the sum is normalised again after the residual addition (norm(x + sublayer(norm(x)))); in pre-LN the residual path "
        "stays un-normalised: x = x + self_attn(norm1(x)), then x + ff(norm2(x))": (lambda q: n2(q + ff(n2(q))))(
            n1(x + sa(n1(x)))
        ),
        "both residual connections are missing: x = x + self_attn(norm1(x)), then x + ff(norm2(x))": ff(n2(sa(n1(x)))),
        "the residual connection around self-attention is missing: x = x + self_attn(norm1(x))": tail(sa(n1(x))),
        "the residual connection around the feed-forward network is missing: return x + ff(norm2(x))": ff(n2(p)),
        "the residual adds the normalised input; add the raw x: x + self_attn(norm1(x)), x + ff(norm2(x))": (
            lambda q: n2(q) + ff(n2(q))
        )(n1(x) + sa(n1(x))),
        "the residual around self-attention adds the normalised input norm1(x); add the raw x: x + self_attn(norm1(x))": tail(
            n1(x) + sa(n1(x))
        ),
        "the norm is computed once and reused for both sub-layers; the feed-forward network normalises the updated x "
        "(after the attention residual) with its own norm: x + ff(norm2(x))": p + ff(n1(x)),
        "the normalised input is reused by the feed-forward network; it must normalise the updated x with norm2: x + ff(norm2(x))": p
        + ff(n2(x)),
        "norm1 is used twice; the feed-forward sub-layer has its own norm, norm2": p + ff(n1(p)),
        "the norms are swapped: norm1 belongs to self-attention, norm2 to the feed-forward network": (lambda q: q + ff(n1(q)))(
            x + sa(n2(x))
        ),
        "the feed-forward network reads the un-normalised x: x + ff(norm2(x))": p + ff(p),
        "the feed-forward residual adds the block's input x; add the updated x (after the attention residual): "
        "y = x + self_attn(norm1(x)), then y + ff(norm2(y))": x + ff(n2(p)),
        "the residual around the feed-forward network adds norm2(x); add the un-normalised x: x + ff(norm2(x))": n2(p)
        + ff(n2(p)),
        _EXTRA_RELU: p + F.relu(ff(n2(p))),
        "self-attention reads the un-normalised x: x + self_attn(norm1(x))": tail(x + sa(x)),
        "the queries are normalised but the keys and values read the raw x; normalise once, h = norm1(x), "
        "then block.self_attn(h, h, h, mask)": tail(x + _attn(block.self_attn, n1(x), x, mask)),
        "the sub-layers are in the wrong order: self-attention comes first, then the feed-forward network": (
            lambda q: q + sa(n2(q))
        )(x + ff(n1(x))),
        "the sub-layers are in the wrong order (feed-forward first): self-attention comes first, then the feed-forward network": (
            lambda q: q + sa(n1(q))
        )(x + ff(n2(x))),
        "a pre-LN block has no layer norm at its end (the model applies one final norm after the last block): return x + ff(norm2(x))": n2(
            tail(p)
        ),
        "the feed-forward network has no activation between its two linear layers: use block.ff(h)": p + _ff_linear(block, n2(p)),
        f"the feed-forward network uses {other_name}; this block's activation is {act_name}: use block.ff(h), which applies it": p
        + ff_by_hand(n2(p), other_act),
        "a fresh layer norm (F.layer_norm, or a new nn.LayerNorm) is used in place of the block's norms: use block.norm1 and "
        "block.norm2, whose gains and biases are learned": (lambda q: q + ff(fresh(q)))(x + sa(fresh(x))),
        "the inputs are normalised over the batch and positions (batch norm); a layer norm normalises each token over its "
        "features: use block.norm1 and block.norm2": (lambda q: q + ff(_batch_norm(q)))(x + sa(_batch_norm(x))),
    }
    if mask is not None:
        wrong["the mask is ignored: pass it to block.self_attn(h, h, h, mask)"] = tail(x + sa(n1(x), None))
        wrong["the mask is inverted: True means *may attend*; pass it unchanged"] = tail(x + sa(n1(x), ~mask))
        wrong["the mask is inverted: True means *may attend*; pass it unchanged (rows that may attend to nothing give NaN)"] = (
            tail(x + sa(n1(x), ~mask, True))
        )
    return wrong


_EXTRA_RELU = (
    "an extra ReLU is applied to the feed-forward network's output: block.ff(h) already holds its activation between its "
    "two linear layers, and its output goes into the residual as it is"
)


def _attention_call_hint(message: str) -> str:
    """A hint for the usual slips in calling the block's attention modules (an empty string if none applies)."""
    if "required positional arguments" in message and "'key'" in message:
        return ". The attention modules take query, key and value: self-attention passes the same tensor three times, block.self_attn(x, x, x, mask)"
    if "unexpected keyword argument" in message:
        return (
            ". This course's attention modules take the boolean mask (True = may attend) as their fourth argument: "
            "block.self_attn(x, x, x, mask)"
        )
    if "must match the size of tensor" in message:
        return (
            ". If you took block.self_attn(...)[1]: that is the attention weights, (batch, heads, n, m); the output is "
            "[0] (out, _ = block.self_attn(...))"
        )
    return ""


def _batch_norm(h: Tensor) -> Tensor:
    """What ``nn.BatchNorm1d(d)`` in training mode does to ``(batch, n, d)`` tokens (after the transposes it needs)."""
    return (h - h.mean((0, 1), keepdim=True)) / torch.sqrt(h.var((0, 1), unbiased=False, keepdim=True) + 1e-5)


_DROPOUT_HINT = (
    "dropout is left active. F.dropout(h, p) drops at random even in eval mode (its default is training=True); "
    "use the block's own modules (block.dropout1, block.dropout2, block.ff), which follow block.eval(), "
    "or leave dropout out of the forward pass"
)


def _shortcut(what: str, call_text: str, parts: str) -> str:
    return (
        f"your {what} calls the block itself (`{call_text}` or `.forward`), which is the forward pass the exercise asks "
        f"you to write; write its steps with the block's parts: {parts}"
    )


def _check_encoder(fn, norm_first: bool, activation: str, name: str) -> None:
    """Both encoder exercises: the student's forward against ``nn.TransformerEncoderLayer`` with the same weights."""
    block = EncoderBlock(D_MODEL, HEADS, D_FF, dropout=0.1, norm_first=norm_first, activation=activation).double().eval()
    randomise_layer_norms(block)
    theirs = nn.TransformerEncoderLayer(
        D_MODEL, HEADS, D_FF, dropout=0.0, activation=activation, batch_first=True, norm_first=norm_first, dtype=torch.float64
    )
    copy_encoder_block_to_torch(block, theirs).eval()
    mistakes_of = _pre_ln_mistakes if norm_first else _encoder_mistakes
    shortcut = _shortcut(name, "block(x, mask)", "block.self_attn, block.norm1, block.ff, block.norm2")
    before = copy.deepcopy(block.state_dict())
    x = torch.randn(2, 5, D_MODEL, dtype=torch.float64)
    padding = torch.ones(2, 1, 5, dtype=torch.bool)
    padding[0, 0, 3:] = False  # the first sequence has 3 real tokens, 2 of padding
    cases = [
        ("no mask", None, None),
        ("a causal mask (5, 5)", causal_mask(5), ~causal_mask(5)),
        ("a padding mask (2, 1, 5)", padding, None),
    ]
    for label, mask, torch_mask in cases:
        with torch.no_grad():
            if label.startswith("a padding"):
                expected = theirs(x, src_key_padding_mask=~padding[:, 0])
            else:
                expected = theirs(x, src_mask=torch_mask)
            args = (block, x.clone()) if mask is None else (block, x.clone(), mask.clone())  # clones: in-place edits stay local
            what = f"x of shape (2, 5, {D_MODEL}) and {label}"
            with forbid_forward(block, shortcut):
                try:
                    out = call_attempt(fn, *args, what=what, inplace_ok=True)
                except ShortcutUsed:
                    raise
                except ExerciseFailed as err:
                    hint = _attention_call_hint(str(err))
                    if hint:
                        raise ExerciseFailed(f"{str(err).rstrip('.')}{hint}") from None
                    raise
                out = expect_tensor(out, "the output")
                again = call_attempt(
                    fn, *((block, x.clone()) if mask is None else (block, x.clone(), mask.clone())), what=what, inplace_ok=True
                )
            if any(m.training for m in block.modules()):
                raise ExerciseFailed(
                    f"your {name} switched the block to training mode (block.train()); a forward pass "
                    "leaves the mode as the caller set it"
                )
            expect_deterministic(out, again, "the output", _DROPOUT_HINT)
            if label.startswith("a padding"):  # padded query rows are meaningless: compare the real tokens
                keep = padding[:, 0, :, None].expand_as(expected)
                out_cmp, expected_cmp = (
                    out.masked_fill(~keep, 0.0) if out.shape == expected.shape else out,
                    expected.masked_fill(~keep, 0.0),
                )
                mistakes = {m: w.masked_fill(~keep, 0.0) for m, w in mistakes_of(block, x, mask).items()}
            else:
                out_cmp, expected_cmp, mistakes = out, expected, mistakes_of(block, x, mask)
            expect_close(out_cmp, expected_cmp, f"the output with {label}", atol=ATOL, rtol=RTOL, mistakes=mistakes)
    _same_params(before, block, name)


@exercise("encoder block forward (post-LN)")
def check_encoder_block_forward(encoder_block_forward) -> None:
    """Check ``encoder_block_forward(block, x, mask=None) -> (batch, n, d_model)`` against ``nn.TransformerEncoderLayer``.

    The block is post-LN (``norm_first=False``) with ReLU, as in notebook 06.
    """
    _check_encoder(encoder_block_forward, norm_first=False, activation="relu", name="encoder_block_forward")


@exercise("pre-LN encoder block forward")
def check_pre_ln_encoder_block_forward(pre_ln_encoder_block_forward) -> None:
    """Check ``pre_ln_encoder_block_forward(block, x, mask=None) -> (batch, n, d_model)``.

    The block is ``helpers.blocks.EncoderBlock(..., norm_first=True, activation="gelu")``, the block of
    notebooks 07 and 08: ``x = x + self_attn(norm1(x))``, then ``x + ff(norm2(x))``; compared with
    ``nn.TransformerEncoderLayer(norm_first=True)`` holding the same weights.
    """
    _check_encoder(pre_ln_encoder_block_forward, norm_first=True, activation="gelu", name="pre_ln_encoder_block_forward")


def _decoder_mistakes(block: DecoderBlock, x: Tensor, memory: Tensor, mask: Tensor) -> dict[str, Tensor]:
    n1, n2, n3, ff = block.norm1, block.norm2, block.norm3, block.ff
    sa = lambda h, m=mask, mha=block.self_attn, fused=False: _attn(mha, h, h, m, fused)  # noqa: E731
    ca = lambda h, mha=block.cross_attn: _attn(mha, h, memory, None)  # noqa: E731
    h1 = n1(x + sa(x))
    h2 = n2(h1 + ca(h1))
    tail = lambda p: n3(p + ff(p))  # noqa: E731
    wrong: dict[str, Tensor] = {
        "cross-attention uses the decoder state as keys and values (that is a second self-attention); "
        "keys and values come from the encoder output: block.cross_attn(h, memory, memory)": tail(
            n2(h1 + _attn(block.cross_attn, h1, h1, None))
        ),
        "the causal mask is missing in the masked self-attention: pass tgt_mask to block.self_attn": tail(
            n2((lambda p: p + ca(p))(n1(x + sa(x, None))))
        ),
        "the mask is inverted: True means *may attend*; pass tgt_mask unchanged": tail(
            n2((lambda p: p + ca(p))(n1(x + sa(x, ~mask))))
        ),
        "the mask is inverted: True means *may attend*; pass tgt_mask unchanged (rows that may attend to nothing give NaN)": tail(
            n2((lambda p: p + ca(p))(n1(x + sa(x, ~mask, fused=True))))
        ),
        "the sub-layers are in the wrong order: masked self-attention, then cross-attention, then the feed-forward network": tail(
            n2((lambda p: p + sa(p))(n1(x + ca(x))))
        ),
        "that is pre-LN (x + sublayer(norm(x))); this exercise is the post-LN block: norm1(x + self_attn(x)), "
        "norm2(h + cross_attn(h, memory)), norm3(h + ff(h))": (lambda p: p + ff(n3(p)))((lambda p: p + ca(n2(p)))(x + sa(n1(x)))),
        "the residual connections are missing: add each sub-layer's input before its norm": n3(ff(n2(ca(n1(sa(x)))))),
        "the residual connection around cross-attention is missing: norm2(h + cross_attn(h, memory))": tail(n2(ca(h1))),
        "the residual connection around self-attention is missing: norm1(x + self_attn(x))": tail(
            n2((lambda p: p + ca(p))(n1(sa(x))))
        ),
        "cross-attention reads the block's input x instead of the self-attention sub-layer's output": tail(n2(h1 + ca(x))),
        "the cross-attention sub-layer is missing (memory is never used)": tail(h1),
        "cross-attention uses block.self_attn's weights; use block.cross_attn": tail(
            n2(h1 + _attn(block.self_attn, h1, memory, None))
        ),
        "self-attention uses block.cross_attn's weights; use block.self_attn": tail(
            n2((lambda p: p + ca(p))(n1(x + sa(x, mha=block.cross_attn))))
        ),
        "the self- and cross-attention modules are swapped": tail(
            n2((lambda p: p + _attn(block.self_attn, p, memory, None))(n1(x + sa(x, mha=block.cross_attn))))
        ),
        "the feed-forward network has no activation between its two linear layers: use block.ff(h)": n3(
            h2 + _ff_linear(block, h2)
        ),
        "the final layer norm (norm3) is missing": h2 + ff(h2),
        "the cross-attention residual adds the block's input x; add the self-attention sub-layer's output h: "
        "norm2(h + cross_attn(h, memory))": tail(n2(x + ca(h1))),
        "the feed-forward residual adds the self-attention sub-layer's output; add the cross-attention sub-layer's "
        "output h, which the feed-forward network reads: norm3(h + ff(h))": n3(h1 + ff(h2)),
        "the feed-forward network reads the self-attention sub-layer's output; it reads the cross-attention sub-layer's "
        "output h: norm3(h + ff(h))": n3(h2 + ff(h1)),
        _EXTRA_RELU: n3(h2 + F.relu(ff(h2))),
        "the residual connection around the feed-forward network is missing: norm3(h + ff(h))": n3(ff(h2)),
        "the feed-forward network uses GELU; this block's activation is ReLU (the original paper): use block.ff(h), which applies it": n3(
            h2 + block.ff.linear2(F.gelu(block.ff.linear1(h2)))
        ),
        "a fresh layer norm (F.layer_norm, or a new nn.LayerNorm) is used in place of the block's norms: use block.norm1, "
        "block.norm2 and block.norm3, whose gains and biases are learned": _decoder_with_norm(
            block, x, memory, mask, lambda h: F.layer_norm(h, h.shape[-1:])
        ),
        "the sums are normalised over the batch and positions (batch norm); a layer norm normalises each token over its "
        "features: use block.norm1, block.norm2 and block.norm3": _decoder_with_norm(block, x, memory, mask, _batch_norm),
        "the norms are in the wrong order: norm1 after self-attention, norm2 after cross-attention, norm3 after the feed-forward network": (
            lambda p: n1(p + ff(p))
        )(n3((lambda p: p + ca(p))(n2(x + sa(x))))),
    }
    return wrong


def _decoder_with_norm(block: DecoderBlock, x: Tensor, memory: Tensor, mask: Tensor, norm) -> Tensor:
    h = norm(x + _attn(block.self_attn, x, x, mask))
    h = norm(h + _attn(block.cross_attn, h, memory, None))
    return norm(h + block.ff(h))


@exercise("decoder block forward (post-LN)")
def check_decoder_block_forward(decoder_block_forward) -> None:
    """Check ``decoder_block_forward(block, x, memory, tgt_mask) -> (batch, n, d_model)`` against ``nn.TransformerDecoderLayer``."""
    block = DecoderBlock(D_MODEL, HEADS, D_FF, dropout=0.1, norm_first=False).double().eval()
    randomise_layer_norms(block)
    theirs = nn.TransformerDecoderLayer(
        D_MODEL, HEADS, D_FF, dropout=0.0, batch_first=True, norm_first=False, dtype=torch.float64
    )
    copy_decoder_block_to_torch(block, theirs).eval()
    before = copy.deepcopy(block.state_dict())
    n, m = 4, 6
    x, memory = torch.randn(2, n, D_MODEL, dtype=torch.float64), torch.randn(2, m, D_MODEL, dtype=torch.float64)
    mask = causal_mask(n)
    label = f"x (2, {n}, {D_MODEL}), memory (2, {m}, {D_MODEL}) and tgt_mask = causal_mask({n})"
    shortcut = _shortcut(
        "decoder_block_forward",
        "block(x, memory, tgt_mask)",
        "block.self_attn, block.norm1, block.cross_attn, block.norm2, block.ff, block.norm3",
    )

    def student(x_in: Tensor) -> Tensor:
        with forbid_forward(block, shortcut):
            try:
                return call_attempt(
                    decoder_block_forward, block, x_in.clone(), memory.clone(), mask.clone(), what=label, inplace_ok=True
                )
            except ShortcutUsed:
                raise
            except ExerciseFailed as err:
                if "required positional arguments" in str(err) or "unexpected keyword argument" in str(err):
                    raise ExerciseFailed(f"{str(err).rstrip('.')}{_attention_call_hint(str(err))}") from None
                if any(word in str(err) for word in ("size", "shape", "match")):
                    raise ExerciseFailed(
                        f"{err}. Here the target has {n} tokens and memory {m}. If you passed tgt_mask to the "
                        f"cross-attention: it is ({n}, {n}), but the cross-attention scores are ({n}, {m}); tgt_mask "
                        "belongs to the masked self-attention only. If the keys or values of the cross-attention "
                        "come from the decoder state: both come from memory, block.cross_attn(h, memory, memory). "
                        "If you took an attention module's [1]: that is its weights; the output is [0]"
                    ) from None
                raise

    with torch.no_grad():
        expected = theirs(x, memory, tgt_mask=~mask)
        out = expect_tensor(student(x), "the output")
        expect_deterministic(
            out, student(x), "the output", _DROPOUT_HINT.replace("block.dropout2", "block.dropout2, block.dropout3")
        )
        if out.dim() == 3 and out.shape[1] == m and out.shape[1] != n:
            raise ExerciseFailed(
                f"the output has shape {tuple(out.shape)}: one row per encoder position (memory has {m}). In cross-attention the "
                "queries come from the decoder, the keys and values from memory: block.cross_attn(h, memory, memory)"
            )
        expect_close(out, expected, "the output", atol=ATOL, rtol=RTOL, mistakes=_decoder_mistakes(block, x, memory, mask))
        # causality, stated on its own: a future target token must not change earlier outputs
        changed = x.clone()
        changed[:, 2] += 3.0
        out_changed = expect_tensor(student(changed), "the output")
        if not torch.allclose(out[:, :2], out_changed[:, :2], atol=1e-9):
            raise ExerciseFailed(
                "changing target token 2 changed the outputs at positions 0 and 1: the causal mask is not applied"
            )
    _same_params(before, block, "decoder_block_forward")


# ------------------------------------------------------------------ the learning-rate schedule of the paper


def _lr_curve(steps, d_model: int, warmup: int, *, rise=None, decay=None, combine=min, scale=None, shift: int = 0) -> list[float]:
    """The schedule at each step, right by default; the keyword arguments reproduce typical slips."""
    rise = rise or (lambda s, w: s * w**-1.5)
    decay = decay or (lambda s, w: s**-0.5)
    scale = d_model**-0.5 if scale is None else scale
    return [scale * combine(rise(s + shift, warmup), decay(s + shift, warmup)) for s in steps]


def _lr_mistakes(steps, d: int, w: int) -> dict[str, list[float]]:
    return {
        "max instead of min: the schedule is the *smaller* of the two branches, the rise step * warmup^-1.5 before "
        "the peak and the decay step^-0.5 after it": _lr_curve(steps, d, w, combine=max),
        "the warm-up branch has warmup^-0.5 where the paper has warmup^-1.5 (step * warmup_steps ** -1.5), so the rise "
        "does not meet the decay at step = warmup_steps": _lr_curve(steps, d, w, rise=lambda s, w: s * w**-0.5),
        "the factor d_model^-0.5 is missing: the whole schedule is multiplied by d_model ** -0.5": _lr_curve(
            steps, d, w, scale=1.0
        ),
        "d_model^+0.5 instead of d_model^-0.5: divide by sqrt(d_model), do not multiply": _lr_curve(steps, d, w, scale=d**0.5),
        "d_model^-1 instead of d_model^-0.5: the factor is 1 / sqrt(d_model)": _lr_curve(steps, d, w, scale=1 / d),
        "the decay is step^+0.5: after the warm-up the rate falls like 1 / sqrt(step), step ** -0.5": _lr_curve(
            steps, d, w, decay=lambda s, w: s**0.5
        ),
        "warmup_steps ** -3/2 is (warmup_steps ** -3) / 2, since ** binds tighter than /: write warmup_steps ** -1.5 or "
        "warmup_steps ** (-3 / 2)": _lr_curve(steps, d, w, rise=lambda s, w: s * w**-3 / 2),
        "step ** -1/2 is (step ** -1) / 2, since ** binds tighter than /: write step ** -0.5 or step ** (-1 / 2)": _lr_curve(
            steps, d, w, decay=lambda s, w: s**-1 / 2
        ),
        "d_model ** -1/2 is (d_model ** -1) / 2, since ** binds tighter than /: write d_model ** -0.5": _lr_curve(
            steps, d, w, scale=d**-1 / 2
        ),
        "the decay after the warm-up is missing: the rate rises linearly to its peak at step = warmup_steps and then "
        "falls like step^-0.5; min(step^-0.5, step * warmup_steps^-1.5) does both": _lr_curve(
            steps, d, w, decay=lambda s, w: w**-0.5
        ),
        "the warm-up is missing (or its branch is never the smaller one, as with warmup_steps^+1.5 instead of "
        "warmup_steps^-1.5): for step < warmup_steps the rate rises linearly, step * warmup_steps^-1.5, and "
        "min(step^-0.5, step * warmup_steps^-1.5) picks it": _lr_curve(steps, d, w, rise=lambda s, w: math.inf),
        "the steps are shifted by one (step + 1): the paper counts steps from 1, and the function receives that step "
        "as it is": _lr_curve(steps, d, w, shift=1),
        "the warm-up branch rises to 1 at the peak (step / warmup_steps); it is step * warmup_steps^-1.5, which meets the "
        "decay step^-0.5 at step = warmup_steps": _lr_curve(steps, d, w, rise=lambda s, w: s / w),
        "the warm-up branch is off by one, (step + 1) * warmup_steps^-1.5: it is step * warmup_steps^-1.5, with the step "
        "as it is (counted from 1)": _lr_curve(steps, d, w, rise=lambda s, w: (s + 1) * w**-1.5),
        "the warm-up branch is off by one, (step - 1) * warmup_steps^-1.5 (0 at step 1): it is step * warmup_steps^-1.5, "
        "with the step as it is (counted from 1)": _lr_curve(steps, d, w, rise=lambda s, w: (s - 1) * w**-1.5),
        "the decay branch is off by one, (step + 1)^-0.5: it is step^-0.5, with the step as it is (counted from 1)": _lr_curve(
            steps, d, w, decay=lambda s, w: (s + 1) ** -0.5
        ),
    }


def _as_number(value: object, what: str) -> tuple[float, bool]:
    """The learner's rate as a float, and whether it was computed in float32 (a tensor or numpy scalar)."""
    if isinstance(value, Tensor):
        if value.numel() != 1:
            raise ExerciseFailed(f"{what} returned a tensor of shape {tuple(value.shape)}; return one number per step")
        return float(value.item()), value.dtype in (torch.float32, torch.float16, torch.bfloat16)
    dtype = getattr(value, "dtype", None)
    try:
        number = float(value)  # Python numbers, numpy scalars
    except (TypeError, ValueError):
        raise ExerciseFailed(f"{what} returned {type(value).__name__}; return the learning rate as a number") from None
    return number, str(dtype) in ("float32", "float16")


@exercise("the learning-rate schedule of the paper")
def check_transformer_lr(transformer_lr) -> None:
    """Check ``transformer_lr(step, d_model, warmup_steps)`` at steps before, at and after the warm-up."""
    for d_model, warmup in ((512, 4000), (64, 10), (16, 3)):
        steps = sorted({1, 2, max(1, warmup // 2), warmup - 1 or 1, warmup, warmup + 1, 2 * warmup, 10 * warmup})
        got, low_precision = [], False
        for step in steps:
            what = f"transformer_lr(step={step}, d_model={d_model}, warmup_steps={warmup})"
            try:
                value, in_float32 = _as_number(call_attempt(transformer_lr, step, d_model, warmup, what=what), what)
            except ExerciseFailed as err:
                if "ZeroDivisionError" in str(err) or "division by zero" in str(err):
                    raise ExerciseFailed(
                        f"{str(err).rstrip('.')}. Steps count from 1 and the function receives the step as it is: "
                        "step ** -0.5 is defined for step = 1 (did you subtract 1 from the step?)"
                    ) from None
                raise
            got.append(value)
            low_precision |= in_float32
        label = f"transformer_lr with d_model={d_model}, warmup_steps={warmup}"
        if any(math.isnan(v) or math.isinf(v) for v in got):
            bad = [s for s, v in zip(steps, got, strict=True) if math.isnan(v) or math.isinf(v)]
            raise ExerciseFailed(f"{label} is NaN or infinite at steps {bad}: steps count from 1, never 0")
        expected = _lr_curve(steps, d_model, warmup)
        rtol = 1e-6 if low_precision else 1e-9

        def close(a: list[float], b: list[float], rtol: float = rtol) -> bool:
            return len(a) == len(b) and all(math.isclose(x, y, rel_tol=rtol, abs_tol=0.0) for x, y in zip(a, b, strict=True))

        if close(got, expected):
            continue
        for message, wrong in _lr_mistakes(steps, d_model, warmup).items():
            if close(got, wrong) and not close(wrong, expected):
                raise ExerciseFailed(f"{label}: {message}")
        rows = [(s, g, e) for s, g, e in zip(steps, got, expected, strict=True) if not math.isclose(g, e, rel_tol=rtol)]
        before = [s for s, _, _ in rows if s < warmup]
        after = [s for s, _, _ in rows if s > warmup]
        part = (
            "the warm-up (steps before warmup_steps) and the decay"
            if before and after
            else "the warm-up, before warmup_steps"
            if before
            else "the decay, after warmup_steps"
            if after
            else "the peak, at step = warmup_steps"
        )
        s, g, e = rows[0]
        if got[0] == 0.0 and steps[0] == 1:
            raise ExerciseFailed(
                f"{label} is 0 at step 1: steps count from 1 and the function receives the step as it is, so the rate at "
                f"step 1 is d_model^-0.5 * warmup_steps^-1.5 = {expected[0]:.6g}; subtract nothing from the step"
            )
        raise ExerciseFailed(
            f"{label} differs from the paper's schedule at steps {[r[0] for r in rows]} ({part}): at step {s} you gave "
            f"{g:.6g}, expected {e:.6g}. The rate is d_model^-0.5 * min(step^-0.5, step * warmup_steps^-1.5), which "
            f"peaks at step = warmup_steps with (d_model * warmup_steps)^-0.5 = {(d_model * warmup) ** -0.5:.6g}"
        )
