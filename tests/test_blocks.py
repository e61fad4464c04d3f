"""helpers.blocks equals PyTorch's nn.TransformerEncoderLayer / nn.TransformerDecoderLayer (dropout 0)."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from helpers.attention import causal_mask
from helpers.blocks import (
    DecoderBlock,
    EncoderBlock,
    FeedForward,
    copy_decoder_block_to_torch,
    copy_encoder_block_to_torch,
    randomise_layer_norms,
)

TOL = dict(atol=1e-5, rtol=1e-5)
D_MODEL, HEADS, D_FF = 12, 3, 20


def torch_encoder(ours: EncoderBlock, norm_first: bool, activation: str = "relu") -> nn.TransformerEncoderLayer:
    theirs = nn.TransformerEncoderLayer(
        D_MODEL, HEADS, D_FF, dropout=0.0, activation=activation, batch_first=True, norm_first=norm_first
    )
    return copy_encoder_block_to_torch(ours, theirs).eval()


def torch_decoder(ours: DecoderBlock, norm_first: bool) -> nn.TransformerDecoderLayer:
    theirs = nn.TransformerDecoderLayer(D_MODEL, HEADS, D_FF, dropout=0.0, batch_first=True, norm_first=norm_first)
    return copy_decoder_block_to_torch(ours, theirs).eval()


def test_feed_forward_parameters_and_shape():
    ff = FeedForward(8)
    assert ff.linear1.out_features == 32
    assert sum(p.numel() for p in ff.parameters()) == 2 * 8 * 32 + 32 + 8
    assert ff(torch.randn(2, 3, 8)).shape == (2, 3, 8)


@pytest.mark.parametrize("norm_first", [False, True])
@pytest.mark.parametrize("masked", [False, True])
def test_encoder_block_matches_torch(norm_first, masked):
    torch.manual_seed(0)
    ours = EncoderBlock(D_MODEL, HEADS, D_FF, norm_first=norm_first).eval()
    with torch.no_grad():  # non-trivial layer-norm parameters, so a swapped norm shows
        for norm in (ours.norm1, ours.norm2):
            norm.weight.uniform_(0.5, 1.5)
            norm.bias.normal_(0, 0.1)
    theirs = torch_encoder(ours, norm_first)
    x = torch.randn(2, 5, D_MODEL)
    mask = causal_mask(5) if masked else None
    out = ours(x, mask)
    ref = theirs(x, src_mask=None if mask is None else ~mask)
    assert out.shape == (2, 5, D_MODEL)
    torch.testing.assert_close(out, ref, **TOL)


def test_encoder_block_gelu_pre_ln_matches_torch():
    torch.manual_seed(1)
    ours = EncoderBlock(D_MODEL, HEADS, D_FF, norm_first=True, activation="gelu").eval()
    theirs = torch_encoder(ours, True, activation="gelu")
    x = torch.randn(3, 4, D_MODEL)
    torch.testing.assert_close(ours(x), theirs(x), **TOL)


@pytest.mark.parametrize("norm_first", [False, True])
def test_decoder_block_matches_torch(norm_first):
    torch.manual_seed(2)
    ours = DecoderBlock(D_MODEL, HEADS, D_FF, norm_first=norm_first).eval()
    with torch.no_grad():
        for norm in (ours.norm1, ours.norm2, ours.norm3):
            norm.weight.uniform_(0.5, 1.5)
            norm.bias.normal_(0, 0.1)
    theirs = torch_decoder(ours, norm_first)
    x, memory = torch.randn(2, 4, D_MODEL), torch.randn(2, 6, D_MODEL)
    out = ours(x, memory, tgt_mask=causal_mask(4))
    ref = theirs(x, memory, tgt_mask=~causal_mask(4))
    assert out.shape == (2, 4, D_MODEL)
    torch.testing.assert_close(out, ref, **TOL)


def test_decoder_block_is_causal():
    """Changing a future target token leaves the outputs at earlier positions unchanged."""
    torch.manual_seed(3)
    block = DecoderBlock(D_MODEL, HEADS, D_FF).eval()
    x, memory = torch.randn(1, 5, D_MODEL), torch.randn(1, 6, D_MODEL)
    changed = x.clone()
    changed[:, 3] += 5.0
    out, out_changed = block(x, memory, causal_mask(5)), block(changed, memory, causal_mask(5))
    torch.testing.assert_close(out[:, :3], out_changed[:, :3], atol=1e-6, rtol=0)
    assert (out[:, 3:] - out_changed[:, 3:]).abs().max() > 1e-3
    unmasked, unmasked_changed = block(x, memory), block(changed, memory)
    assert (unmasked[:, :3] - unmasked_changed[:, :3]).abs().max() > 1e-3


def _silent_stack(norm_first: bool, random_norms: bool) -> nn.ModuleList:
    """Three float64 encoder blocks whose sub-layers output zero (their last linear layers are 0)."""
    torch.manual_seed(4)
    blocks = nn.ModuleList(EncoderBlock(D_MODEL, HEADS, D_FF, norm_first=norm_first) for _ in range(3)).double().eval()
    with torch.no_grad():
        for block in blocks:
            for layer in (block.self_attn.w_o, block.ff.linear2):
                layer.weight.zero_()
                layer.bias.zero_()
    return randomise_layer_norms(blocks) if random_norms else blocks


def _run(blocks: nn.ModuleList, x: torch.Tensor) -> torch.Tensor:
    with torch.no_grad():
        for block in blocks:
            x = block(x)
    return x


def test_silent_pre_ln_stack_is_the_identity():
    """Notebook 06, question 4: with zero sub-layers the pre-LN residual stream is x itself."""
    x = torch.randn(2, 5, D_MODEL, dtype=torch.float64)
    assert torch.equal(_run(_silent_stack(norm_first=True, random_norms=True), x), x)


def test_silent_post_ln_stack_is_its_norms_in_turn():
    """Notebook 06, question 4: post-LN gives the 2N norms chained, which is one normalisation only at (1, 0) gains and biases."""
    x = torch.randn(2, 5, D_MODEL, dtype=torch.float64)
    blocks = _silent_stack(norm_first=False, random_norms=True)
    chain = x
    for block in blocks:
        chain = block.norm2(block.norm1(chain))
    torch.testing.assert_close(_run(blocks, x), chain, atol=1e-12, rtol=0)
    last = blocks[-1].norm2
    assert (chain - F.layer_norm(x, (D_MODEL,), last.weight, last.bias)).abs().max() > 0.1
    fresh = _silent_stack(norm_first=False, random_norms=False)
    torch.testing.assert_close(_run(fresh, x), F.layer_norm(x, (D_MODEL,)), atol=1e-4, rtol=0)


def test_shift_matrix_moves_every_encoding_by_k():
    from helpers.blocks import shift_matrix, sinusoidal_positional_encoding

    pe = sinusoidal_positional_encoding(40, 16).double()  # (40, 16)
    for k in (0, 1, 7):
        M = shift_matrix(k, 16)  # (16, 16)
        assert M.dtype == torch.float64
        torch.testing.assert_close(pe[: 40 - k] @ M.T, pe[k:], atol=1e-6, rtol=0)
        torch.testing.assert_close(M @ M.T, torch.eye(16, dtype=torch.float64), atol=1e-12, rtol=0)
    assert shift_matrix(3, 8, dtype=torch.float32).dtype == torch.float32
    with pytest.raises(ValueError, match="even"):
        shift_matrix(1, 5)


def test_batch_norm_equals_batchnorm1d_in_training_mode():
    from helpers.blocks import batch_norm

    x = torch.randn(3, 4, 5, dtype=torch.float64) * 2 + 1  # (3, 4, 5)
    bn = nn.BatchNorm1d(5, affine=False, eps=0.1, dtype=torch.float64).train()
    torch.testing.assert_close(batch_norm(x, eps=0.1), bn(x.transpose(1, 2)).transpose(1, 2), atol=1e-12, rtol=0)
    with pytest.raises(ValueError, match="batch, tokens, features"):
        batch_norm(torch.randn(4, 5))


def test_transformer_lr_rises_peaks_and_decays():
    from helpers.blocks import transformer_lr

    peak = (512 * 4000) ** -0.5
    assert transformer_lr(4000, 512, 4000) == pytest.approx(peak, rel=1e-12)
    assert transformer_lr(2000, 512, 4000) == pytest.approx(peak / 2, rel=1e-12)  # linear rise
    assert transformer_lr(16000, 512, 4000) == pytest.approx(peak / 2, rel=1e-12)  # 1 / sqrt(step) decay
    with pytest.raises(ValueError, match="from 1"):
        transformer_lr(0, 512, 4000)
