"""Checks of notebook 06: encoder and decoder block forward passes.

The student writes the forward pass of a post-LN block from its submodules
(``block.self_attn``, ``block.cross_attn``, ``block.ff``, ``block.norm1``...);
the check copies the block's weights into ``nn.TransformerEncoderLayer`` /
``nn.TransformerDecoderLayer`` (``norm_first=False``, dropout 0) and compares
on fresh random inputs, naming the typical mistakes.
"""

from __future__ import annotations

import copy

import torch
from torch import Tensor, nn

from helpers.attention import causal_mask
from helpers.blocks import (
    DecoderBlock,
    EncoderBlock,
    copy_decoder_block_to_torch,
    copy_encoder_block_to_torch,
    randomise_layer_norms,
)
from helpers.checks._core import ExerciseFailed, call, expect_close, expect_tensor, exercise

__all__ = ["check_encoder_block_forward", "check_decoder_block_forward"]

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
        "both residual connections are missing: add the sub-layer's input before each norm, norm1(x + self_attn(x))": n2(ff(n1(sa(x)))),
        "the residual connection around self-attention is missing: norm1(x + self_attn(x))": (lambda p: n2(p + ff(p)))(n1(sa(x))),
        "the residual connection around the feed-forward network is missing: norm2(h + ff(h))": n2(ff(h)),
        "the norm is applied to the sub-layer output only, before the residual addition (x + norm(sublayer(x))); "
        "post-LN normalises the sum: norm(x + sublayer(x))": (lambda p: p + n2(ff(p)))(x + n1(sa(x))),
        "the norm is applied to the residual input only (norm(x) + sublayer(x)); post-LN normalises the sum: norm(x + sublayer(x))":
            (lambda p: n2(p) + ff(p))(n1(x) + sa(x)),
        "the feed-forward network has no activation between its two linear layers: use block.ff(h) (or relu after linear1)": n2(h + _ff_linear(block, h)),
        "the final layer norm (norm2) is missing after the feed-forward residual": h + ff(h),
        "norm1 is used twice; the feed-forward sub-layer has its own norm, norm2": n1(h + ff(h)),
        "the norms are swapped: norm1 belongs to self-attention, norm2 to the feed-forward network": (lambda p: n1(p + ff(p)))(n2(x + sa(x))),
        "the feed-forward residual adds the block's input x instead of the attention sub-layer's output h: norm2(h + ff(h))": n2(x + ff(h)),
        "the feed-forward network reads the block's input x instead of the attention sub-layer's output h": n2(h + ff(x)),
        "the sub-layers are in the wrong order: self-attention comes first, then the feed-forward network":
            (lambda p: n2(p + sa(p)))(n1(x + ff(x))),
    }
    if mask is not None:
        wrong["the mask is ignored: pass it to block.self_attn(x, x, x, mask)"] = (lambda p: n2(p + ff(p)))(n1(x + sa(x, None)))
        wrong["the mask is inverted: True means *may attend*; pass it unchanged"] = (lambda p: n2(p + ff(p)))(n1(x + sa(x, ~mask)))
        wrong["the mask is inverted: True means *may attend*; pass it unchanged (rows that may attend to nothing give NaN)"] = (
            (lambda p: n2(p + ff(p)))(n1(x + sa(x, ~mask, True))))
    return wrong


@exercise("encoder block forward (post-LN)")
def check_encoder_block_forward(encoder_block_forward) -> None:
    """Check ``encoder_block_forward(block, x, mask=None) -> (batch, n, d_model)`` against ``nn.TransformerEncoderLayer``."""
    block = EncoderBlock(D_MODEL, HEADS, D_FF, norm_first=False).double().eval()
    randomise_layer_norms(block)
    theirs = nn.TransformerEncoderLayer(D_MODEL, HEADS, D_FF, dropout=0.0, batch_first=True, norm_first=False, dtype=torch.float64)
    copy_encoder_block_to_torch(block, theirs).eval()
    before = copy.deepcopy(block.state_dict())
    x = torch.randn(2, 5, D_MODEL, dtype=torch.float64)
    padding = torch.ones(2, 1, 5, dtype=torch.bool)
    padding[0, 0, 3:] = False  # the first sequence has 3 real tokens, 2 of padding
    cases = [("no mask", None, None), ("a causal mask (5, 5)", causal_mask(5), ~causal_mask(5)),
             ("a padding mask (2, 1, 5)", padding, None)]
    for label, mask, torch_mask in cases:
        with torch.no_grad():
            if label.startswith("a padding"):
                expected = theirs(x, src_key_padding_mask=~padding[:, 0])
            else:
                expected = theirs(x, src_mask=torch_mask)
            args = (block, x.clone()) if mask is None else (block, x.clone(), mask.clone())  # clones: in-place edits stay local
            out = call(encoder_block_forward, *args, what=f"x of shape (2, 5, {D_MODEL}) and {label}", inplace_ok=True)
            out = expect_tensor(out, "the output")
            if label.startswith("a padding"):  # padded query rows are meaningless: compare the real tokens
                keep = padding[:, 0, :, None].expand_as(expected)
                out_cmp, expected_cmp = out.masked_fill(~keep, 0.0) if out.shape == expected.shape else out, expected.masked_fill(~keep, 0.0)
                mistakes = {m: w.masked_fill(~keep, 0.0) for m, w in _encoder_mistakes(block, x, mask).items()}
            else:
                out_cmp, expected_cmp, mistakes = out, expected, _encoder_mistakes(block, x, mask)
            expect_close(out_cmp, expected_cmp, f"the output with {label}", atol=ATOL, rtol=RTOL, mistakes=mistakes)
    _same_params(before, block, "encoder_block_forward")


def _decoder_mistakes(block: DecoderBlock, x: Tensor, memory: Tensor, mask: Tensor) -> dict[str, Tensor]:
    n1, n2, n3, ff = block.norm1, block.norm2, block.norm3, block.ff
    sa = lambda h, m=mask, mha=block.self_attn, fused=False: _attn(mha, h, h, m, fused)  # noqa: E731
    ca = lambda h, mha=block.cross_attn: _attn(mha, h, memory, None)  # noqa: E731
    h1 = n1(x + sa(x))
    h2 = n2(h1 + ca(h1))
    tail = lambda p: n3(p + ff(p))  # noqa: E731
    wrong: dict[str, Tensor] = {
        "cross-attention uses the decoder state as keys and values (that is a second self-attention); "
        "keys and values come from the encoder output: block.cross_attn(h, memory, memory)": tail(n2(h1 + _attn(block.cross_attn, h1, h1, None))),
        "the causal mask is missing in the masked self-attention: pass tgt_mask to block.self_attn": tail(n2((lambda p: p + ca(p))(n1(x + sa(x, None))))),
        "the mask is inverted: True means *may attend*; pass tgt_mask unchanged": tail(n2((lambda p: p + ca(p))(n1(x + sa(x, ~mask))))),
        "the mask is inverted: True means *may attend*; pass tgt_mask unchanged (rows that may attend to nothing give NaN)":
            tail(n2((lambda p: p + ca(p))(n1(x + sa(x, ~mask, fused=True))))),
        "the sub-layers are in the wrong order: masked self-attention, then cross-attention, then the feed-forward network":
            tail(n2((lambda p: p + sa(p))(n1(x + ca(x))))),
        "that is pre-LN (x + sublayer(norm(x))); this exercise is the post-LN block: norm1(x + self_attn(x)), "
        "norm2(h + cross_attn(h, memory)), norm3(h + ff(h))":
            (lambda p: p + ff(n3(p)))((lambda p: p + ca(n2(p)))(x + sa(n1(x)))),
        "the residual connections are missing: add each sub-layer's input before its norm": n3(ff(n2(ca(n1(sa(x)))))),
        "the residual connection around cross-attention is missing: norm2(h + cross_attn(h, memory))": tail(n2(ca(h1))),
        "the residual connection around self-attention is missing: norm1(x + self_attn(x))": tail(n2((lambda p: p + ca(p))(n1(sa(x))))),
        "cross-attention reads the block's input x instead of the self-attention sub-layer's output": tail(n2(h1 + ca(x))),
        "the cross-attention sub-layer is missing (memory is never used)": tail(h1),
        "cross-attention uses block.self_attn's weights; use block.cross_attn": tail(n2(h1 + _attn(block.self_attn, h1, memory, None))),
        "self-attention uses block.cross_attn's weights; use block.self_attn": tail(n2((lambda p: p + ca(p))(n1(x + sa(x, mha=block.cross_attn))))),
        "the self- and cross-attention modules are swapped": tail(n2((lambda p: p + _attn(block.self_attn, p, memory, None))(n1(x + sa(x, mha=block.cross_attn))))),
        "the feed-forward network has no activation between its two linear layers: use block.ff(h)": n3(h2 + _ff_linear(block, h2)),
        "the final layer norm (norm3) is missing": h2 + ff(h2),
        "the norms are in the wrong order: norm1 after self-attention, norm2 after cross-attention, norm3 after the feed-forward network":
            (lambda p: n1(p + ff(p)))(n3((lambda p: p + ca(p))(n2(x + sa(x))))),
    }
    return wrong


@exercise("decoder block forward (post-LN)")
def check_decoder_block_forward(decoder_block_forward) -> None:
    """Check ``decoder_block_forward(block, x, memory, tgt_mask) -> (batch, n, d_model)`` against ``nn.TransformerDecoderLayer``."""
    block = DecoderBlock(D_MODEL, HEADS, D_FF, norm_first=False).double().eval()
    randomise_layer_norms(block)
    theirs = nn.TransformerDecoderLayer(D_MODEL, HEADS, D_FF, dropout=0.0, batch_first=True, norm_first=False, dtype=torch.float64)
    copy_decoder_block_to_torch(block, theirs).eval()
    before = copy.deepcopy(block.state_dict())
    n, m = 4, 6
    x, memory = torch.randn(2, n, D_MODEL, dtype=torch.float64), torch.randn(2, m, D_MODEL, dtype=torch.float64)
    mask = causal_mask(n)
    label = f"x (2, {n}, {D_MODEL}), memory (2, {m}, {D_MODEL}) and tgt_mask = causal_mask({n})"
    with torch.no_grad():
        expected = theirs(x, memory, tgt_mask=~mask)
        try:
            out = call(decoder_block_forward, block, x.clone(), memory.clone(), mask.clone(), what=label, inplace_ok=True)
        except ExerciseFailed as err:
            if any(word in str(err) for word in ("size", "shape", "match")):
                raise ExerciseFailed(f"{err}. If you passed tgt_mask to the cross-attention: it is ({n}, {n}), but the cross-attention "
                                     f"scores are ({n}, {m}); tgt_mask belongs to the masked self-attention only") from None
            raise
        out = expect_tensor(out, "the output")
        if out.dim() == 3 and out.shape[1] == m and out.shape[1] != n:
            raise ExerciseFailed(
                f"the output has shape {tuple(out.shape)}: one row per encoder position (memory has {m}). In cross-attention the "
                "queries come from the decoder, the keys and values from memory: block.cross_attn(h, memory, memory)"
            )
        expect_close(out, expected, "the output", atol=ATOL, rtol=RTOL, mistakes=_decoder_mistakes(block, x, memory, mask))
        # causality, stated on its own: a future target token must not change earlier outputs
        changed = x.clone()
        changed[:, 2] += 3.0
        out_changed = expect_tensor(call(decoder_block_forward, block, changed, memory.clone(), mask.clone(), what=label, inplace_ok=True), "the output")
        if not torch.allclose(out[:, :2], out_changed[:, :2], atol=1e-9):
            raise ExerciseFailed("changing target token 2 changed the outputs at positions 0 and 1: the causal mask is not applied")
    _same_params(before, block, "decoder_block_forward")
