"""helpers.models.seq2seq: shapes, masks, tying, decoding, metrics, and the GRU's scoring variants."""

from __future__ import annotations

import pytest
import torch

from helpers.attention import AdditiveAttention
from helpers.data.translation import BOS, EOS, PAD, encode_pairs
from helpers.models.seq2seq import (
    Seq2SeqGRU,
    Seq2SeqTransformer,
    additive_attention,
    alignment_accuracy,
    beam_search,
    cross_attention_weights,
    cut_at_eos,
    greedy_decode,
    seq2seq_loss,
    sequence_accuracy,
    shift_right,
    source_padding_mask,
    train_seq2seq,
)

SRC_V, TGT_V = 33, 34


@pytest.fixture(scope="module")
def pairs():
    return encode_pairs([21, 421_507, 7, 1005, 999_999, 310_000])


def small_transformer(**kwargs):
    torch.manual_seed(0)
    return Seq2SeqTransformer(SRC_V, TGT_V, d_model=16, num_heads=2, d_ff=24, **kwargs).double().eval()


def test_shift_right_and_mask():
    tgt = torch.tensor([[5, 6, EOS, PAD], [7, 8, 9, EOS]])
    assert shift_right(tgt).tolist() == [[BOS, 5, 6, EOS], [BOS, 7, 8, 9]]
    mask = source_padding_mask(tgt)
    assert mask.shape == (2, 1, 4) and mask.dtype == torch.bool
    assert mask[:, 0].tolist() == [[True, True, True, False], [True, True, True, True]]
    with pytest.raises(ValueError, match="token ids"):
        shift_right(tgt.float())


def test_transformer_shapes_tying_and_parameters(pairs):
    model = small_transformer()
    memory, mask = model.encode(pairs.src)
    assert memory.shape == (6, 12, 16) and mask.shape == (6, 1, 12)
    logits = model(pairs.src, shift_right(pairs.tgt))
    assert logits.shape == (6, pairs.tgt.shape[1], TGT_V)
    assert model.out.weight is model.tgt_embed.weight
    untied = small_transformer(tie_output=False)
    n = sum(p.numel() for p in model.parameters())
    assert sum(p.numel() for p in untied.parameters()) == n + TGT_V * 16
    with pytest.raises(ValueError, match="position embeddings"):
        model.encode(torch.ones(1, 40, dtype=torch.long))


def test_transformer_padding_and_causality(pairs):
    model = small_transformer()
    with torch.no_grad():
        full = model(pairs.src, shift_right(pairs.tgt))
        # padding the source further changes nothing for the real positions
        wider = torch.cat([pairs.src, torch.full((6, 3), PAD)], 1)
        torch.testing.assert_close(model(wider, shift_right(pairs.tgt)), full, atol=1e-12, rtol=0)
        # a later target word does not change an earlier prediction
        changed = pairs.tgt.clone()
        changed[:, 5] = 9
        torch.testing.assert_close(model(pairs.src, shift_right(changed))[:, :6], full[:, :6], atol=1e-12, rtol=0)


def test_cross_attention_weights_are_the_blocks_own(pairs):
    model = small_transformer(num_decoder_layers=2)
    maps = cross_attention_weights(model, pairs.src, shift_right(pairs.tgt))
    assert len(maps) == 2 and maps[0].shape == (6, 2, pairs.tgt.shape[1], 12)
    torch.testing.assert_close(maps[1].sum(-1), torch.ones(6, 2, pairs.tgt.shape[1], dtype=torch.float64))
    real = pairs.src != PAD
    assert (maps[0].masked_select(~real[:, None, None, :].expand_as(maps[0])) == 0).all()  # padding never attended to
    # the hooks are removed and the output is unchanged by asking for weights
    assert all(not b.cross_attn._forward_hooks and not b.cross_attn._forward_pre_hooks for b in model.decoder)
    with torch.no_grad():
        block = model.decoder[0]
        memory, mask = model.encode(pairs.src)
        x = torch.randn(6, pairs.tgt.shape[1], 16, dtype=torch.float64)
        _, w = block.cross_attn(block.norm2(x), memory, memory, mask)  # (6, 2, n, 12)
    assert w.shape == maps[0].shape


@pytest.mark.parametrize("attention", ["additive", "multiplicative", "dot", None])
def test_gru_variants(pairs, attention):
    torch.manual_seed(0)
    model = Seq2SeqGRU(SRC_V, TGT_V, embed=8, hidden=12, attention=attention, d_att=10).double().eval()
    logits = model(pairs.src, shift_right(pairs.tgt))
    assert logits.shape == (6, pairs.tgt.shape[1], TGT_V)
    with torch.no_grad():  # padding the source changes nothing (packed encoder, masked attention)
        wider = torch.cat([pairs.src, torch.full((6, 2), PAD)], 1)
        torch.testing.assert_close(model(wider, shift_right(pairs.tgt)), logits, atol=1e-12, rtol=0)
    if attention is None:
        with pytest.raises(ValueError, match="no attention"):
            model.attention_weights(pairs.src, shift_right(pairs.tgt))
    else:
        w = model.attention_weights(pairs.src, shift_right(pairs.tgt))
        assert w.shape == (6, pairs.tgt.shape[1], 12)
        assert (w[~(pairs.src != PAD)[:, None, :].expand_as(w)] == 0).all()
    with pytest.raises(ValueError, match="attention must be"):
        Seq2SeqGRU(SRC_V, TGT_V, attention="cosine")


def test_additive_attention_matches_the_module():
    torch.manual_seed(0)
    att = AdditiveAttention(4, 6, 7).double()
    s, h = torch.randn(3, 4, dtype=torch.float64), torch.randn(3, 5, 6, dtype=torch.float64)
    mask = torch.tensor([[1, 1, 1, 1, 1], [1, 1, 1, 0, 0], [1, 0, 0, 0, 0]], dtype=torch.bool)
    context, weights = additive_attention(att, s, h, mask)
    scores = att(s, h).masked_fill(~mask, float("-inf"))
    torch.testing.assert_close(weights, torch.softmax(scores, -1), atol=1e-12, rtol=0)
    torch.testing.assert_close(context, torch.einsum("bm,bmd->bd", weights, h), atol=1e-12, rtol=0)


def test_greedy_equals_beam_of_width_one_and_beam_is_at_least_as_likely(pairs):
    model = small_transformer()
    greedy = greedy_decode(model, pairs.src, 8)
    beam1 = beam_search(model, pairs.src, 8, width=1)
    assert torch.equal(cut_at_eos(greedy), cut_at_eos(beam1[:, : greedy.shape[1]]))

    def logp(tokens):
        tokens = cut_at_eos(tokens)
        with torch.no_grad():
            lp = torch.log_softmax(model(pairs.src, shift_right(tokens)), -1).gather(-1, tokens[..., None])[..., 0]
        real = (tokens != PAD) & ((tokens == EOS).cumsum(1) - (tokens == EOS).long() == 0)
        return (lp * real).sum(1)

    beam4 = beam_search(model, pairs.src, 8, width=4, alpha=0.0)  # no normalisation: the most probable hypothesis
    finished = (greedy == EOS).any(1) & (beam4 == EOS).any(1)
    assert (logp(beam4)[finished] >= logp(greedy)[finished] - 1e-9).all()


def test_metrics():
    pred = torch.tensor([[5, 6, EOS, 9], [5, 7, EOS, PAD], [5, 6, 7, 8]])
    tgt = torch.tensor([[5, 6, EOS], [5, 6, EOS], [5, 6, EOS]])
    exact, token = sequence_accuracy(pred, tgt)
    assert exact == pytest.approx(1 / 3) and token == pytest.approx(7 / 9)
    weights = torch.zeros(2, 3, 4)
    weights[0, 0, 1] = weights[0, 1, 0] = weights[1, 0, 2] = weights[1, 2, 3] = 1.0
    align = torch.tensor([[1, 2, -1], [2, -1, 0]])
    assert alignment_accuracy(weights, align).item() == pytest.approx(2 / 4)
    per_head = alignment_accuracy(weights[:, None].expand(2, 3, 3, 4), align)
    assert per_head.shape == (3,)
    with pytest.raises(ValueError, match="do not match"):
        alignment_accuracy(weights, align[:, :2])


def test_loss_ignores_padding_and_training_learns(pairs):
    logits = torch.randn(2, 3, 5)
    tgt = torch.tensor([[3, EOS, PAD], [4, 3, EOS]])
    full = torch.nn.functional.cross_entropy(logits[tgt != PAD], tgt[tgt != PAD])
    torch.testing.assert_close(seq2seq_loss(logits, tgt), full)
    torch.manual_seed(0)
    model = Seq2SeqTransformer(SRC_V, TGT_V, d_model=16, num_heads=2, d_ff=32)
    history = train_seq2seq(model, pairs, pairs, epochs=60, lr=1e-2, batch_size=3, seed=0)
    assert len(history.train_loss) == 60 and history.val_loss[-1] < history.val_loss[0] / 5
    exact, _ = sequence_accuracy(greedy_decode(model, pairs.src, 12), pairs.tgt)
    assert exact == 1.0  # six pairs memorised
