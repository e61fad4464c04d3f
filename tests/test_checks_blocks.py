"""The checks of notebook 06 pass the reference, spot the stub and name the typical mistakes."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from helpers.checks.blocks import (
    check_decoder_block_forward,
    check_encoder_block_forward,
    check_pre_ln_encoder_block_forward,
    check_transformer_lr,
)
from tests.conftest import assert_caught, assert_not_attempted


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
        (enc_relu_after_ff, ["an extra ReLU"]),
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


# ---------------------------------------------------------------- shortcuts, dropout, real NotImplementedError, norms


def enc_shortcut(block, x, mask=None):
    return block(x, mask)


def enc_shortcut_forward(block, x, mask=None):
    return block.forward(x, mask)


def enc_shortcut_swallowed(block, x, mask=None):
    try:
        return block(x, mask)
    except Exception:
        return encoder_reference(block, x, mask)


def enc_dropout_active(block, x, mask=None):
    h = block.norm1(x + F.dropout(sa(block, x, mask), block.dropout1.p))
    return block.norm2(h + block.ff(h))


def enc_uses_dropout_modules(block, x, mask=None):  # right: the block's dropouts follow eval()
    h = block.norm1(x + block.dropout1(sa(block, x, mask)))
    return block.norm2(h + block.dropout2(block.ff(h)))


def enc_gelu(block, x, mask=None):
    h = block.norm1(x + sa(block, x, mask))
    return block.norm2(h + block.ff.linear2(F.gelu(block.ff.linear1(h))))


def enc_fresh_layer_norm(block, x, mask=None):
    d = x.shape[-1]
    h = F.layer_norm(x + sa(block, x, mask), (d,))
    return F.layer_norm(h + block.ff(h), (d,))


def enc_batch_norm(block, x, mask=None):
    bn = torch.nn.BatchNorm1d(x.shape[-1], affine=False).double()
    norm = lambda t: bn(t.transpose(1, 2)).transpose(1, 2)  # noqa: E731
    h = norm(x + sa(block, x, mask))
    return norm(h + block.ff(h))


def enc_torch_not_implemented(block, x, mask=None):
    layers = torch.nn.ModuleList([block.norm1])
    return layers(x)


def test_encoder_right_variants_pass():
    assert check_encoder_block_forward(enc_uses_dropout_modules) is True


@pytest.mark.parametrize(
    "wrong, phrases",
    [
        (enc_shortcut, ["calls the block itself", "write its steps"]),
        (enc_shortcut_forward, ["calls the block itself"]),
        (enc_shortcut_swallowed, ["calls the block itself"]),
        (enc_dropout_active, ["dropout is left active"]),
        (enc_gelu, ["uses GELU", "ReLU"]),
        (enc_fresh_layer_norm, ["fresh layer norm"]),
        (enc_batch_norm, ["batch norm"]),
        (enc_torch_not_implemented, ["NotImplementedError", "not the exercise's stub", "loop over it"]),
    ],
    ids=lambda v: getattr(v, "__name__", ""),
)
def test_encoder_more_mistakes_are_named(wrong, phrases):
    assert_caught(check_encoder_block_forward, wrong, *phrases)


def test_generator_stub_is_not_attempted(capsys):
    def stub(block, x, mask=None):
        raise NotImplementedError("Exercise: replace this line with your code")

    assert_not_attempted(check_encoder_block_forward, stub, capsys)


def test_the_shortcut_guard_is_removed_afterwards():
    from helpers.blocks import EncoderBlock

    assert_caught(check_encoder_block_forward, enc_shortcut, "calls the block itself")
    block = EncoderBlock(12, 3, 20).eval()
    assert block(torch.randn(1, 4, 12)).shape == (1, 4, 12)
    assert "forward" in EncoderBlock.__dict__


def dec_shortcut(block, x, memory, tgt_mask=None):
    return block(x, memory, tgt_mask)


def dec_dropout_active(block, x, memory, tgt_mask=None):
    h = block.norm1(x + F.dropout(sa(block, x, tgt_mask), 0.1))
    h = block.norm2(h + ca(block, h, memory))
    return block.norm3(h + block.ff(h))


def dec_gelu(block, x, memory, tgt_mask=None):
    h = block.norm1(x + sa(block, x, tgt_mask))
    h = block.norm2(h + ca(block, h, memory))
    return block.norm3(h + block.ff.linear2(F.gelu(block.ff.linear1(h))))


def dec_no_ff_residual(block, x, memory, tgt_mask=None):
    h = block.norm1(x + sa(block, x, tgt_mask))
    h = block.norm2(h + ca(block, h, memory))
    return block.norm3(block.ff(h))


def dec_fresh_layer_norm(block, x, memory, tgt_mask=None):
    ln = lambda t: F.layer_norm(t, t.shape[-1:])  # noqa: E731
    h = ln(x + sa(block, x, tgt_mask))
    h = ln(h + ca(block, h, memory))
    return ln(h + block.ff(h))


def dec_keys_from_state(block, x, memory, tgt_mask=None):
    h = block.norm1(x + sa(block, x, tgt_mask))
    h = block.norm2(h + block.cross_attn(h, h, memory)[0])
    return block.norm3(h + block.ff(h))


def dec_values_from_state(block, x, memory, tgt_mask=None):
    h = block.norm1(x + sa(block, x, tgt_mask))
    h = block.norm2(h + block.cross_attn(h, memory, h)[0])
    return block.norm3(h + block.ff(h))


@pytest.mark.parametrize(
    "wrong, phrases",
    [
        (dec_keys_from_state, ["keys or values of the cross-attention", "block.cross_attn(h, memory, memory)"]),
        (dec_values_from_state, ["keys or values of the cross-attention"]),
        (dec_shortcut, ["calls the block itself", "block.cross_attn"]),
        (dec_dropout_active, ["dropout is left active"]),
        (dec_gelu, ["uses GELU"]),
        (dec_no_ff_residual, ["residual connection around the feed-forward network is missing"]),
        (dec_fresh_layer_norm, ["fresh layer norm"]),
    ],
    ids=lambda v: getattr(v, "__name__", ""),
)
def test_decoder_more_mistakes_are_named(wrong, phrases):
    assert_caught(check_decoder_block_forward, wrong, *phrases)


# ---------------------------------------------------------------- pre-LN encoder block (notebooks 07 and 08)


def pre_ln_reference(block, x, mask=None):
    h = block.norm1(x)  # (batch, n, d_model)
    x = x + block.self_attn(h, h, h, mask)[0]
    return x + block.ff(block.norm2(x))


def pre_ln_with_dropouts(block, x, mask=None):
    h = block.norm1(x)
    x = x + block.dropout1(block.self_attn(h, h, h, mask, need_weights=False)[0])
    return x + block.dropout2(block.ff(block.norm2(x)))


def test_pre_ln_reference_passes():
    assert check_pre_ln_encoder_block_forward(pre_ln_reference) is True
    assert check_pre_ln_encoder_block_forward(pre_ln_with_dropouts) is True


def test_pre_ln_stub_not_attempted(capsys):
    def stub(block, x, mask=None):
        raise NotImplementedError("Exercise: replace this line with your code")

    assert_not_attempted(check_pre_ln_encoder_block_forward, stub, capsys)
    assert_not_attempted(check_pre_ln_encoder_block_forward, ..., capsys)


def pre_post_ln(block, x, mask=None):
    h = block.norm1(x + sa(block, x, mask))
    return block.norm2(h + block.ff(h))


def pre_norm_after_residual(block, x, mask=None):
    x = block.norm1(x + sa(block, block.norm1(x), mask))
    return block.norm2(x + block.ff(block.norm2(x)))


def pre_no_attn_residual(block, x, mask=None):
    x = sa(block, block.norm1(x), mask)
    return x + block.ff(block.norm2(x))


def pre_no_ff_residual(block, x, mask=None):
    x = x + sa(block, block.norm1(x), mask)
    return block.ff(block.norm2(x))


def pre_no_residuals(block, x, mask=None):
    return block.ff(block.norm2(sa(block, block.norm1(x), mask)))


def pre_norm_reused(block, x, mask=None):
    h = block.norm1(x)
    x = x + sa(block, h, mask)
    return x + block.ff(h)


def pre_norm1_twice(block, x, mask=None):
    x = x + sa(block, block.norm1(x), mask)
    return x + block.ff(block.norm1(x))


def pre_norms_swapped(block, x, mask=None):
    x = x + sa(block, block.norm2(x), mask)
    return x + block.ff(block.norm1(x))


def pre_residual_normalised(block, x, mask=None):
    h = block.norm1(x)
    x = h + sa(block, h, mask)
    return x + block.ff(block.norm2(x))


def pre_ff_unnormalised(block, x, mask=None):
    x = x + sa(block, block.norm1(x), mask)
    return x + block.ff(x)


def pre_keys_raw(block, x, mask=None):
    x = x + block.self_attn(block.norm1(x), x, x, mask)[0]
    return x + block.ff(block.norm2(x))


def pre_wrong_order(block, x, mask=None):
    x = x + block.ff(block.norm1(x))
    return x + sa(block, block.norm2(x), mask)


def pre_final_norm(block, x, mask=None):
    return block.norm2(pre_ln_reference(block, x, mask))


def pre_mask_ignored(block, x, mask=None):
    return pre_ln_reference(block, x, None)


def pre_mask_inverted(block, x, mask=None):
    return pre_ln_reference(block, x, None if mask is None else ~mask)


def pre_dropout_active(block, x, mask=None):
    x = x + F.dropout(sa(block, block.norm1(x), mask), 0.1)
    return x + block.ff(block.norm2(x))


def pre_relu(block, x, mask=None):
    x = x + sa(block, block.norm1(x), mask)
    h = block.norm2(x)
    return x + block.ff.linear2(F.relu(block.ff.linear1(h)))


def pre_no_activation(block, x, mask=None):
    x = x + sa(block, block.norm1(x), mask)
    h = block.norm2(x)
    return x + block.ff.linear2(block.ff.linear1(h))


def pre_fresh_layer_norm(block, x, mask=None):
    ln = torch.nn.LayerNorm(x.shape[-1]).double()
    x = x + sa(block, ln(x), mask)
    return x + block.ff(ln(x))


def pre_batch_norm(block, x, mask=None):
    bn = torch.nn.BatchNorm1d(x.shape[-1], affine=False).double()
    norm = lambda t: bn(t.transpose(1, 2)).transpose(1, 2)  # noqa: E731
    x = x + sa(block, norm(x), mask)
    return x + block.ff(norm(x))


def pre_shortcut(block, x, mask=None):
    return block(x, mask)


def pre_switches_to_train(block, x, mask=None):
    block.train()
    return pre_ln_reference(block, x, mask)


def pre_model_list(block, x, mask=None):
    return torch.nn.ModuleList([block])(x)


@pytest.mark.parametrize(
    "wrong, phrases",
    [
        (pre_post_ln, ["that is post-LN"]),
        (pre_norm_after_residual, ["normalised again after the residual"]),
        (pre_no_attn_residual, ["residual connection around self-attention is missing"]),
        (pre_no_ff_residual, ["residual connection around the feed-forward network is missing"]),
        (pre_no_residuals, ["both residual connections are missing"]),
        (pre_norm_reused, ["computed once and reused"]),
        (pre_norm1_twice, ["norm1 is used twice"]),
        (pre_norms_swapped, ["norms are swapped"]),
        (pre_residual_normalised, ["adds the normalised input"]),
        (pre_ff_unnormalised, ["feed-forward network reads the un-normalised x"]),
        (pre_keys_raw, ["keys and values read the raw x"]),
        (pre_wrong_order, ["wrong order"]),
        (pre_final_norm, ["no layer norm at its end"]),
        (pre_mask_ignored, ["mask is ignored"]),
        (pre_mask_inverted, ["mask is inverted"]),
        (pre_dropout_active, ["dropout is left active"]),
        (pre_relu, ["uses ReLU", "GELU"]),
        (pre_no_activation, ["no activation"]),
        (pre_fresh_layer_norm, ["fresh layer norm"]),
        (pre_batch_norm, ["batch norm"]),
        (pre_shortcut, ["calls the block itself"]),
        (pre_model_list, ["NotImplementedError", "not the exercise's stub"]),
        (pre_switches_to_train, ["training mode"]),
    ],
    ids=lambda v: getattr(v, "__name__", ""),
)
def test_pre_ln_mistakes_are_named(wrong, phrases):
    assert_caught(check_pre_ln_encoder_block_forward, wrong, *phrases)


def test_pre_ln_is_exported():
    import helpers.checks

    assert helpers.checks.check_pre_ln_encoder_block_forward is check_pre_ln_encoder_block_forward


# ---------------------------------------------------------------- issue 25: the likeliest mistakes the catalogues lacked


def enc_tuple_not_unpacked(block, x, mask=None):
    h = block.norm1(x + block.self_attn(x, x, x, mask))  # (out, weights) added to x
    return block.norm2(h + block.ff(h))


def enc_weights_not_output(block, x, mask=None):
    h = block.norm1(x + block.self_attn(x, x, x, mask)[1])
    return block.norm2(h + block.ff(h))


def enc_extra_relu(block, x, mask=None):
    h = block.norm1(x + sa(block, x, mask))
    return block.norm2(h + F.relu(block.ff(h)))


def enc_no_norm1(block, x, mask=None):
    h = x + sa(block, x, mask)
    return block.norm2(h + block.ff(h))


def enc_self_attn_one_argument(block, x, mask=None):
    h = block.norm1(x + block.self_attn(x)[0])
    return block.norm2(h + block.ff(h))


def enc_mask_keyword_of_torch(block, x, mask=None):
    h = block.norm1(x + block.self_attn(x, x, x, attn_mask=mask)[0])
    return block.norm2(h + block.ff(h))


@pytest.mark.parametrize(
    "wrong, phrases",
    [
        (enc_tuple_not_unpacked, ["One operand is a tuple", "out, _ = block.self_attn"]),
        (enc_weights_not_output, ["[1]: that is the attention weights"]),
        (enc_extra_relu, ["an extra ReLU"]),
        (enc_no_norm1, ["norm1) is missing"]),
        (enc_self_attn_one_argument, ["block.self_attn(x, x, x, mask)"]),
        (enc_mask_keyword_of_torch, ["fourth argument"]),
    ],
    ids=lambda v: getattr(v, "__name__", ""),
)
def test_encoder_likeliest_mistakes_are_named(wrong, phrases):
    message = assert_caught(check_encoder_block_forward, wrong, *phrases)
    assert "differs from the reference in" not in message


def enc_mask_by_keyword(block, x, mask=None):
    h = block.norm1(x + block.self_attn(query=x, key=x, value=x, mask=mask)[0])
    return block.norm2(h + block.ff(h))


def enc_ff_by_hand(block, x, mask=None):  # the feed-forward network's own steps: the same as block.ff
    h = block.norm1(x + sa(block, x, mask))
    return block.norm2(h + block.ff.linear2(F.relu(block.ff.linear1(h))))


def test_encoder_other_right_answers_pass():
    assert check_encoder_block_forward(enc_mask_by_keyword) is True
    assert check_encoder_block_forward(enc_ff_by_hand) is True


def pre_tuple_not_unpacked(block, x, mask=None):
    h = block.norm1(x)
    x = x + block.self_attn(h, h, h, mask)
    return x + block.ff(block.norm2(x))


def pre_extra_relu(block, x, mask=None):
    x = x + sa(block, block.norm1(x), mask)
    return x + F.relu(block.ff(block.norm2(x)))


def pre_ff_residual_from_block_input(block, x, mask=None):
    y = x + sa(block, block.norm1(x), mask)
    return x + block.ff(block.norm2(y))


def pre_ff_residual_normalised(block, x, mask=None):
    x = x + sa(block, block.norm1(x), mask)
    h = block.norm2(x)
    return h + block.ff(h)


def pre_weights_not_output(block, x, mask=None):
    h = block.norm1(x)
    x = x + block.self_attn(h, h, h, mask)[1]
    return x + block.ff(block.norm2(x))


@pytest.mark.parametrize(
    "wrong, phrases",
    [
        (pre_tuple_not_unpacked, ["One operand is a tuple"]),
        (pre_extra_relu, ["an extra ReLU"]),
        (pre_ff_residual_from_block_input, ["feed-forward residual adds the block's input x"]),
        (pre_ff_residual_normalised, ["adds norm2(x)"]),
        (pre_weights_not_output, ["[1]: that is the attention weights"]),
    ],
    ids=lambda v: getattr(v, "__name__", ""),
)
def test_pre_ln_likeliest_mistakes_are_named(wrong, phrases):
    message = assert_caught(check_pre_ln_encoder_block_forward, wrong, *phrases)
    assert "differs from the reference in" not in message


def pre_ln_two_names(block, x, mask=None):  # a new name for each step: right
    normed = block.norm1(x)
    attended = block.self_attn(normed, normed, normed, mask)[0]
    y = x + attended
    return y + block.ff(block.norm2(y))


def test_pre_ln_other_right_answers_pass():
    assert check_pre_ln_encoder_block_forward(pre_ln_two_names) is True


def _decoder(variant):
    def forward(block, x, memory, tgt_mask=None):
        h1 = block.norm1(x + sa(block, x, tgt_mask))
        h2 = block.norm2((x if variant == "cross_residual_from_x" else h1) + ca(block, h1, memory))
        if variant == "ff_residual_from_h1":
            return block.norm3(h1 + block.ff(h2))
        if variant == "ff_reads_h1":
            return block.norm3(h2 + block.ff(h1))
        if variant == "extra_relu":
            return block.norm3(h2 + F.relu(block.ff(h2)))
        return block.norm3(h2 + block.ff(h2))

    forward.__name__ = f"dec_{variant}"
    return forward


def dec_tuple_not_unpacked(block, x, memory, tgt_mask=None):
    h = block.norm1(x + block.self_attn(x, x, x, tgt_mask))
    h = block.norm2(h + ca(block, h, memory))
    return block.norm3(h + block.ff(h))


def dec_weights_not_output(block, x, memory, tgt_mask=None):
    h = block.norm1(x + block.self_attn(x, x, x, tgt_mask)[1])
    h = block.norm2(h + ca(block, h, memory))
    return block.norm3(h + block.ff(h))


def dec_cross_attn_one_argument(block, x, memory, tgt_mask=None):
    h = block.norm1(x + sa(block, x, tgt_mask))
    h = block.norm2(h + block.cross_attn(memory)[0])
    return block.norm3(h + block.ff(h))


@pytest.mark.parametrize(
    "wrong, phrases",
    [
        (_decoder("cross_residual_from_x"), ["cross-attention residual adds the block's input x"]),
        (_decoder("ff_residual_from_h1"), ["feed-forward residual adds the self-attention sub-layer's output"]),
        (_decoder("ff_reads_h1"), ["feed-forward network reads the self-attention sub-layer's output"]),
        (_decoder("extra_relu"), ["an extra ReLU"]),
        (dec_tuple_not_unpacked, ["One operand is a tuple"]),
        (dec_weights_not_output, ["that is its weights; the output is [0]"]),
        (dec_cross_attn_one_argument, ["take query, key and value"]),
    ],
    ids=lambda v: getattr(v, "__name__", ""),
)
def test_decoder_likeliest_mistakes_are_named(wrong, phrases):
    message = assert_caught(check_decoder_block_forward, wrong, *phrases)
    assert "differs from the reference in" not in message


def dec_own_causal_mask(block, x, memory, tgt_mask=None):  # builds the same causal mask itself: right
    from helpers.attention import causal_mask

    return decoder_reference(block, x, memory, causal_mask(x.shape[1]))


def dec_with_dropout_modules(block, x, memory, tgt_mask=None):  # the block's dropouts follow eval(): right
    h = block.norm1(x + block.dropout1(sa(block, x, tgt_mask)))
    h = block.norm2(h + block.dropout2(ca(block, h, memory)))
    return block.norm3(h + block.dropout3(block.ff(h)))


def test_decoder_other_right_answers_pass():
    assert check_decoder_block_forward(dec_own_causal_mask) is True
    assert check_decoder_block_forward(dec_with_dropout_modules) is True


# ------------------------------------------------------------------ exercise 6.4: the learning-rate schedule of the paper


def lr_right(step, d_model, warmup_steps):
    return d_model**-0.5 * min(step**-0.5, step * warmup_steps**-1.5)


def lr_with(rise=lambda s, w: s * w**-1.5, decay=lambda s, w: s**-0.5, combine=min, scale=lambda d: d**-0.5):
    def fn(step, d_model, warmup_steps):
        return scale(d_model) * combine(rise(step, warmup_steps), decay(step, warmup_steps))

    return fn


def lr_if_else(step, d_model, warmup_steps):  # the two branches written out: right
    if step < warmup_steps:
        return step / warmup_steps * (d_model * warmup_steps) ** -0.5
    return (d_model * step) ** -0.5


def lr_torch_float64(step, d_model, warmup_steps):
    s = torch.tensor(float(step), dtype=torch.float64)
    return d_model**-0.5 * torch.minimum(s.rsqrt(), s * warmup_steps**-1.5)


def lr_torch_float32(step, d_model, warmup_steps):  # a float32 tensor: judged at float32's precision
    s = torch.tensor(float(step))
    return d_model**-0.5 * torch.minimum(s.rsqrt(), s * warmup_steps**-1.5)


def lr_peak_times_shape(step, d_model, warmup_steps):
    import math

    return (d_model * warmup_steps) ** -0.5 * min(step / warmup_steps, math.sqrt(warmup_steps / step))


LR_RIGHT = [lr_right, lr_if_else, lr_torch_float64, lr_torch_float32, lr_peak_times_shape]


@pytest.mark.parametrize("answer", LR_RIGHT, ids=lambda f: f.__name__)
def test_transformer_lr_right_answers_pass(answer):
    assert check_transformer_lr(answer) is True


def test_transformer_lr_reference_and_stub(capsys):
    import helpers.blocks

    assert check_transformer_lr(helpers.blocks.transformer_lr) is True

    def stub(step, d_model, warmup_steps):
        raise NotImplementedError("Exercise: replace this line with your code")

    assert_not_attempted(check_transformer_lr, stub, capsys)
    assert_not_attempted(check_transformer_lr, ..., capsys)


LR_WRONG = {
    "max_for_min": (lr_with(combine=max), ["max instead of min"]),
    "warmup_to_minus_half": (lr_with(rise=lambda s, w: s * w**-0.5), ["warmup^-0.5"]),
    "no_d_model": (lr_with(scale=lambda d: 1.0), ["d_model^-0.5 is missing"]),
    "times_sqrt_d_model": (lr_with(scale=lambda d: d**0.5), ["d_model^+0.5"]),
    "d_model_to_minus_1": (lr_with(scale=lambda d: 1 / d), ["d_model^-1"]),
    "decay_plus_half": (lr_with(decay=lambda s, w: s**0.5), ["step^+0.5"]),
    "warmup_precedence": (lr_with(rise=lambda s, w: s * w**-3 / 2), ["warmup_steps ** -3/2", "binds tighter"]),
    "step_precedence": (lr_with(decay=lambda s, w: s**-1 / 2), ["step ** -1/2", "binds tighter"]),
    "d_model_precedence": (lr_with(scale=lambda d: d**-1 / 2), ["d_model ** -1/2"]),
    "no_decay": (lr_with(decay=lambda s, w: w**-0.5), ["decay after the warm-up is missing"]),
    "no_warmup": (lambda s, d, w: d**-0.5 * s**-0.5, ["warm-up is missing"]),
    "warmup_plus_1_5": (lr_with(rise=lambda s, w: s * w**1.5), ["warm-up is missing", "warmup_steps^+1.5"]),
    "step_plus_1": (lambda s, d, w: lr_right(s + 1, d, w), ["shifted by one (step + 1)"]),
    "step_minus_1": (lambda s, d, w: lr_right(s - 1, d, w), ["ZeroDivisionError", "did you subtract 1"]),
    "tensor_of_steps": (lambda s, d, w: torch.full((3,), lr_right(s, d, w)), ["shape (3,)", "one number per step"]),
    "returns_none": (lambda s, d, w: None, ["return the learning rate as a number"]),
    "wrong_peak": (lambda s, d, w: lr_right(s, d, w) * (1.1 if s == w else 1.0), ["at steps", "peak"]),
    "decay_only_wrong": (lambda s, d, w: lr_right(s, d, w) * (1.0 if s <= w else 0.9), ["the decay, after warmup_steps"]),
}


@pytest.mark.parametrize("name", LR_WRONG)
def test_transformer_lr_wrong_answers_caught(name):
    fn, phrases = LR_WRONG[name]
    message = assert_caught(check_transformer_lr, fn, *phrases)
    if name not in ("wrong_peak", "decay_only_wrong"):
        assert "differs from the paper's schedule" not in message, message


# ------------------------------------------------------------------ issue 36: partial work is an attempt, not "not attempted"


def enc_partial(block, x, mask=None):
    if mask is not None:
        raise NotImplementedError  # an unfinished branch; the rest is written
    h = block.norm1(x + block.self_attn(x, x, x)[0])
    return block.norm2(h + block.ff(h))


def pre_partial(block, x, mask=None):
    if mask is not None:
        raise NotImplementedError
    h = block.norm1(x)
    x = x + block.self_attn(h, h, h)[0]
    return x + block.ff(block.norm2(x))


def lr_partial(step, d_model, warmup_steps):
    if step > warmup_steps:
        raise NotImplementedError
    return d_model**-0.5 * step * warmup_steps**-1.5


@pytest.mark.parametrize(
    "check, answer",
    [
        (check_encoder_block_forward, enc_partial),
        (check_pre_ln_encoder_block_forward, pre_partial),
        (check_transformer_lr, lr_partial),
    ],
    ids=["encoder", "pre_ln", "transformer_lr"],
)
def test_an_unfinished_branch_is_named_not_called_unattempted(check, answer):
    assert_caught(check, answer, "unfinished branch")


# ------------------------------------------------------------------ catalogue of 2026-11-27: more slips, more right answers


def _cat_sa(block, h, mask=None):
    return block.self_attn(h, h, h, mask)[0]


def enc_work_above_the_stub(block, x, mask=None):
    attn_out, _ = block.self_attn(x, x, x, mask)  # noqa: F841 - real work above the stub's raise
    raise NotImplementedError("Exercise: replace this line with your code")


def pre_ln_work_above_the_stub(block, x, mask=None):
    h = block.norm1(x)  # noqa: F841
    raise NotImplementedError("Exercise: replace this line with your code")


def dec_work_above_the_stub(block, x, memory, tgt_mask=None):
    h = block.norm1(x + _cat_sa(block, x, tgt_mask))  # noqa: F841
    raise NotImplementedError("Exercise: replace this line with your code")


def lr_work_above_the_stub(step, d_model, warmup_steps):
    scale = d_model**-0.5  # noqa: F841
    raise NotImplementedError("Exercise: replace this line with your code")


@pytest.mark.parametrize(
    "check, answer, phrase",
    [
        (check_encoder_block_forward, enc_work_above_the_stub, "partial work"),
        (check_pre_ln_encoder_block_forward, pre_ln_work_above_the_stub, "partial work"),
        (check_decoder_block_forward, dec_work_above_the_stub, "partial work"),
        (check_transformer_lr, lr_work_above_the_stub, "partial work"),
        (check_transformer_lr, lambda s, d, w: d**-0.5 * min(s**-0.5, s / w), "rises to 1 at the peak"),
        (check_transformer_lr, lambda s, d, w: d**-0.5 * min(s**-0.5, (s + 1) * w**-1.5), "(step + 1) * warmup_steps^-1.5"),
        (check_transformer_lr, lambda s, d, w: d**-0.5 * min(s**-0.5, (s - 1) * w**-1.5), "(step - 1) * warmup_steps^-1.5"),
        (check_transformer_lr, lambda s, d, w: d**-0.5 * min((s + 1) ** -0.5, s * w**-1.5), "(step + 1)^-0.5"),
        (
            check_transformer_lr,
            lambda s, d, w: d**-0.5 * min(max(s - 1, 1) ** -0.5, (s - 1) * w**-1.5),
            "is 0 at step 1",
        ),
    ],
)
def test_catalogue_more_wrong_answers_named(check, answer, phrase):
    assert_caught(check, answer, phrase)


def enc_functional_norms(block, x, mask=None):
    def ln(norm, t):
        return F.layer_norm(t, t.shape[-1:], norm.weight, norm.bias, norm.eps)

    h = ln(block.norm1, x + _cat_sa(block, x, mask))
    return ln(block.norm2, h + block.ff(h))


def pre_ln_loop(block, x, mask=None):
    for norm, sublayer in ((block.norm1, lambda h: _cat_sa(block, h, mask)), (block.norm2, block.ff)):
        x = x + sublayer(norm(x))
    return x


def dec_keywords(block, x, memory, tgt_mask=None):
    a, _ = block.self_attn(x, x, x, mask=tgt_mask)
    x = block.norm1(x + a)
    c, _ = block.cross_attn(query=x, key=memory, value=memory)
    x = block.norm2(x + c)
    return block.norm3(x + block.ff(x))


@pytest.mark.parametrize(
    "check, answer",
    [
        (check_encoder_block_forward, enc_functional_norms),
        (check_pre_ln_encoder_block_forward, pre_ln_loop),
        (check_decoder_block_forward, dec_keywords),
        (check_transformer_lr, lambda s, d, w: (d**-0.5) * (s * w**-1.5 if s < w else s**-0.5)),
        (
            check_transformer_lr,
            lambda s, d, w: d**-0.5 * torch.minimum(torch.tensor(float(s)).rsqrt(), torch.tensor(s * w**-1.5)),
        ),
    ],
)
def test_catalogue_more_right_answers_pass(check, answer):
    assert check(answer) is True
