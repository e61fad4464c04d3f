"""The checks of notebook 06 pass the reference, spot the stub and name the typical mistakes."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from tests.conftest import assert_caught, assert_not_attempted
from helpers.checks.blocks import check_decoder_block_forward, check_encoder_block_forward


def sa(block, h, mask=None):
    return block.self_attn(h, h, h, mask)[0]


def encoder_reference(block, x, mask=None):
    h = block.norm1(x + block.self_attn(x, x, x, mask)[0])
    return block.norm2(h + block.ff(h))


def test_encoder_reference_passes():
    assert check_encoder_block_forward(encoder_reference) is True


def test_encoder_stub_not_attempted(capsys):
    def stub(block, x, mask=None):
        raise NotImplementedError

    assert_not_attempted(check_encoder_block_forward, stub, capsys)
    assert_not_attempted(check_encoder_block_forward, ..., capsys)


def enc_pre_ln(block, x, mask=None):
    x = x + sa(block, block.norm1(x), mask)
    return x + block.ff(block.norm2(x))


def enc_no_residual(block, x, mask=None):
    h = block.norm1(sa(block, x, mask))
    return block.norm2(block.ff(h))


def enc_no_attn_residual(block, x, mask=None):
    h = block.norm1(sa(block, x, mask))
    return block.norm2(h + block.ff(h))


def enc_no_ff_residual(block, x, mask=None):
    h = block.norm1(x + sa(block, x, mask))
    return block.norm2(block.ff(h))


def enc_norm_on_sublayer(block, x, mask=None):
    h = x + block.norm1(sa(block, x, mask))
    return h + block.norm2(block.ff(h))


def enc_norm_on_residual(block, x, mask=None):
    h = block.norm1(x) + sa(block, x, mask)
    return block.norm2(h) + block.ff(h)


def enc_no_activation(block, x, mask=None):
    h = block.norm1(x + sa(block, x, mask))
    return block.norm2(h + block.ff.linear2(block.ff.linear1(h)))


def enc_mask_ignored(block, x, mask=None):
    return encoder_reference(block, x, None)


def enc_mask_inverted(block, x, mask=None):
    return encoder_reference(block, x, None if mask is None else ~mask)


def enc_no_final_norm(block, x, mask=None):
    h = block.norm1(x + sa(block, x, mask))
    return h + block.ff(h)


def enc_norm1_twice(block, x, mask=None):
    h = block.norm1(x + sa(block, x, mask))
    return block.norm1(h + block.ff(h))


def enc_residual_from_input(block, x, mask=None):
    h = block.norm1(x + sa(block, x, mask))
    return block.norm2(x + block.ff(h))


def enc_wrong_order(block, x, mask=None):
    h = block.norm1(x + block.ff(x))
    return block.norm2(h + sa(block, h, mask))


def enc_relu_after_ff(block, x, mask=None):
    h = block.norm1(x + sa(block, x, mask))
    return block.norm2(h + F.relu(block.ff(h)))


def enc_returns_tuple(block, x, mask=None):
    return encoder_reference(block, x, mask), None


@pytest.mark.parametrize(
    "wrong, phrases",
    [
        (enc_pre_ln, ["pre-LN"]),
        (enc_no_residual, ["both residual connections are missing"]),
        (enc_no_attn_residual, ["residual connection around self-attention"]),
        (enc_no_ff_residual, ["residual connection around the feed-forward"]),
        (enc_norm_on_sublayer, ["sub-layer output only"]),
        (enc_norm_on_residual, ["residual input only"]),
        (enc_no_activation, ["no activation"]),
        (enc_mask_ignored, ["mask is ignored"]),
        (enc_mask_inverted, ["mask is inverted"]),
        (enc_no_final_norm, ["final layer norm (norm2) is missing"]),
        (enc_norm1_twice, ["norm1 is used twice"]),
        (enc_residual_from_input, ["adds the block's input x"]),
        (enc_wrong_order, ["wrong order"]),
        (enc_relu_after_ff, ["differs from the reference", "largest difference"]),
        (enc_returns_tuple, ["should be a torch.Tensor", "tuple"]),
    ],
    ids=lambda v: getattr(v, "__name__", ""),
)
def test_encoder_mistakes_are_named(wrong, phrases):
    assert_caught(check_encoder_block_forward, wrong, *phrases)


def test_encoder_check_catches_a_crash_and_weight_changes():
    def crashes(block, x, mask=None):
        return block.ff(x.transpose(1, 2))

    assert_caught(check_encoder_block_forward, crashes, "raised RuntimeError")

    def mutates(block, x, mask=None):
        with torch.no_grad():
            block.norm2.weight.fill_(1.0)
        return encoder_reference(block, x, mask)

    assert_caught(check_encoder_block_forward, mutates)


# ---------------------------------------------------------------- decoder


def decoder_reference(block, x, memory, tgt_mask=None):
    h = block.norm1(x + block.self_attn(x, x, x, tgt_mask)[0])
    h = block.norm2(h + block.cross_attn(h, memory, memory)[0])
    return block.norm3(h + block.ff(h))


def ca(block, h, memory):
    return block.cross_attn(h, memory, memory)[0]


def test_decoder_reference_passes():
    assert check_decoder_block_forward(decoder_reference) is True


def test_decoder_stub_not_attempted(capsys):
    def stub(block, x, memory, tgt_mask=None):
        raise NotImplementedError

    assert_not_attempted(check_decoder_block_forward, stub, capsys)


def dec_cross_on_self(block, x, memory, tgt_mask=None):
    h = block.norm1(x + sa(block, x, tgt_mask))
    h = block.norm2(h + block.cross_attn(h, h, h)[0])
    return block.norm3(h + block.ff(h))


def dec_no_causal(block, x, memory, tgt_mask=None):
    return decoder_reference(block, x, memory, None)


def dec_wrong_order(block, x, memory, tgt_mask=None):
    h = block.norm1(x + ca(block, x, memory))
    h = block.norm2(h + sa(block, h, tgt_mask))
    return block.norm3(h + block.ff(h))


def dec_memory_as_query(block, x, memory, tgt_mask=None):
    h = block.norm1(x + sa(block, x, tgt_mask))
    c = block.cross_attn(memory, h, h)[0]
    return block.norm3(c + block.ff(c))


def dec_pre_ln(block, x, memory, tgt_mask=None):
    x = x + sa(block, block.norm1(x), tgt_mask)
    x = x + ca(block, block.norm2(x), memory)
    return x + block.ff(block.norm3(x))


def dec_no_cross_residual(block, x, memory, tgt_mask=None):
    h = block.norm1(x + sa(block, x, tgt_mask))
    h = block.norm2(ca(block, h, memory))
    return block.norm3(h + block.ff(h))


def dec_cross_reads_input(block, x, memory, tgt_mask=None):
    h = block.norm1(x + sa(block, x, tgt_mask))
    h = block.norm2(h + ca(block, x, memory))
    return block.norm3(h + block.ff(h))


def dec_no_cross(block, x, memory, tgt_mask=None):
    h = block.norm1(x + sa(block, x, tgt_mask))
    return block.norm3(h + block.ff(h))


def dec_self_attn_weights_for_cross(block, x, memory, tgt_mask=None):
    h = block.norm1(x + sa(block, x, tgt_mask))
    h = block.norm2(h + block.self_attn(h, memory, memory)[0])
    return block.norm3(h + block.ff(h))


def dec_mask_inverted(block, x, memory, tgt_mask=None):
    return decoder_reference(block, x, memory, ~tgt_mask)


def dec_no_final_norm(block, x, memory, tgt_mask=None):
    h = block.norm1(x + sa(block, x, tgt_mask))
    h = block.norm2(h + ca(block, h, memory))
    return h + block.ff(h)


def dec_future_leak_scaled(block, x, memory, tgt_mask=None):
    # a hand-made mask that lets each position see one step ahead
    n = x.shape[1]
    mask = torch.ones(n, n, dtype=torch.bool).tril(1)
    return decoder_reference(block, x, memory, mask)


def dec_mask_in_cross(block, x, memory, tgt_mask=None):
    h = block.norm1(x + sa(block, x, tgt_mask))
    h = block.norm2(h + block.cross_attn(h, memory, memory, tgt_mask)[0])
    return block.norm3(h + block.ff(h))


def enc_in_place(block, x, mask=None):
    x += sa(block, x, mask)  # in place on the caller's tensor: allowed, the check passes a copy
    x = block.norm1(x)
    return block.norm2(x + block.ff(x))


def test_in_place_updates_of_the_input_are_fine():
    assert check_encoder_block_forward(enc_in_place) is True


@pytest.mark.parametrize(
    "wrong, phrases",
    [
        (dec_mask_in_cross, ["tgt_mask belongs to the masked self-attention only"]),
        (dec_cross_on_self, ["decoder state as keys and values"]),
        (dec_no_causal, ["causal mask is missing"]),
        (dec_wrong_order, ["wrong order"]),
        (dec_memory_as_query, ["one row per encoder position", "queries come from the decoder"]),
        (dec_pre_ln, ["pre-LN"]),
        (dec_no_cross_residual, ["residual connection around cross-attention"]),
        (dec_cross_reads_input, ["reads the block's input x"]),
        (dec_no_cross, ["memory is never used"]),
        (dec_self_attn_weights_for_cross, ["use block.cross_attn"]),
        (dec_mask_inverted, ["mask is inverted"]),
        (dec_no_final_norm, ["norm3"]),
        (dec_future_leak_scaled, ["differs from the reference"]),
    ],
    ids=lambda v: getattr(v, "__name__", ""),
)
def test_decoder_mistakes_are_named(wrong, phrases):
    assert_caught(check_decoder_block_forward, wrong, *phrases)
