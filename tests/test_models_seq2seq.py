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
    exact_match_by_digits,
    exact_matches,
    greedy_decode,
    never_special,
    seq2seq_loss,
    sequence_accuracy,
    sequence_log_prob,
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


class PrefersSpecials(torch.nn.Module):
    """A model whose most likely next word is <pad> at even steps and <bos> at odd ones; <eos> comes after 3 words."""

    def encode(self, src):
        return (src,)

    def decode(self, tgt_in, state):
        batch, n = tgt_in.shape
        logits = torch.zeros(batch, n, 8, dtype=torch.float64)
        logits[torch.arange(batch), :, 3 + torch.arange(batch) % 4] = 1.0  # the best real word, different per row
        logits[:, torch.arange(n) % 2 == 0, PAD] = 5.0
        logits[:, torch.arange(n) % 2 == 1, BOS] = 5.0
        logits[:, 3:, EOS] = 3.0
        return logits

    def forward(self, src, tgt_in):
        return self.decode(tgt_in, self.encode(src))


def test_decoders_never_choose_pad_or_bos():
    model, src = PrefersSpecials(), torch.ones(3, 4, dtype=torch.long)
    for tokens in (greedy_decode(model, src, 6), beam_search(model, src, 6, width=1), beam_search(model, src, 6, width=3)):
        words = cut_at_eos(tokens)
        assert not ((words == BOS).any() or ((words == PAD) & ((tokens == EOS).cumsum(1) == 0)).any())
        assert (tokens == EOS).any(1).all()  # every row ends
    assert greedy_decode(model, src, 6)[:, :3].tolist() == [[3, 3, 3], [4, 4, 4], [5, 5, 5]]
    assert never_special(torch.zeros(2, 5))[:, [PAD, BOS]].eq(float("-inf")).all()


def test_the_models_take_a_learners_mask_function(pairs):
    calls = []

    def my_mask(src):
        calls.append(src.shape)
        return (src != PAD)[:, None, None, :]  # (batch, 1, 1, m): the check accepts this form too

    torch.manual_seed(0)
    ours = Seq2SeqTransformer(SRC_V, TGT_V, d_model=16, num_heads=2, d_ff=24, source_padding_mask=my_mask).double().eval()
    reference = small_transformer()
    with torch.no_grad():
        torch.testing.assert_close(ours(pairs.src, shift_right(pairs.tgt)), reference(pairs.src, shift_right(pairs.tgt)))
    assert calls == [pairs.src.shape]
    torch.manual_seed(0)
    gru = Seq2SeqGRU(SRC_V, TGT_V, embed=8, hidden=12, source_padding_mask=my_mask).double().eval()
    torch.manual_seed(0)
    gru_reference = Seq2SeqGRU(SRC_V, TGT_V, embed=8, hidden=12).double().eval()
    with torch.no_grad():
        torch.testing.assert_close(gru(pairs.src, shift_right(pairs.tgt)), gru_reference(pairs.src, shift_right(pairs.tgt)))


def test_training_uses_the_shift_it_is_given(pairs):
    seen = []

    def my_shift(tgt):
        seen.append(tgt.shape)
        return shift_right(tgt)

    torch.manual_seed(0)
    model = Seq2SeqTransformer(SRC_V, TGT_V, d_model=16, num_heads=2, d_ff=24)
    train_seq2seq(model, pairs, pairs, epochs=2, batch_size=3, shift=my_shift)
    assert len(seen) == 2 * (2 + 1)  # two batches and one validation pass per epoch


def test_early_stopping_keeps_the_best_epoch(pairs, monkeypatch):
    import helpers.models.seq2seq as seq2seq

    accuracies = iter([0.5, 0.7, 0.9, 0.9005, 0.85, 0.95, 0.99])
    monkeypatch.setattr(seq2seq, "_evaluate_teacher_forced", lambda model, data, shift=None: (1.0, next(accuracies)))
    torch.manual_seed(0)
    model = Seq2SeqTransformer(SRC_V, TGT_V, d_model=16, num_heads=2, d_ff=24)
    history = train_seq2seq(model, pairs, pairs, epochs=7, batch_size=3, patience=2, min_delta=0.001)
    # 0.9005 is not 0.1 point above 0.9 and 0.85 is below: two epochs without progress after epoch 3
    assert history.epochs == 5 and history.stopped_early and history.best_epoch == 4
    assert history.val_token_acc == [0.5, 0.7, 0.9, 0.9005, 0.85]
    with pytest.raises(ValueError, match="validation split"):
        train_seq2seq(model, pairs, None, epochs=2, patience=2)


def test_early_stopping_restores_the_weights_of_the_best_epoch(pairs, monkeypatch):
    import helpers.models.seq2seq as seq2seq

    snapshots, accuracies = [], iter([0.5, 0.9, 0.6, 0.7])

    def fake_evaluate(model, data, shift=None):
        snapshots.append({k: v.clone() for k, v in model.state_dict().items()})
        return 1.0, next(accuracies)

    monkeypatch.setattr(seq2seq, "_evaluate_teacher_forced", fake_evaluate)
    torch.manual_seed(0)
    model = Seq2SeqTransformer(SRC_V, TGT_V, d_model=16, num_heads=2, d_ff=24)
    history = train_seq2seq(model, pairs, pairs, epochs=6, lr=1e-2, batch_size=3, patience=2)
    assert history.epochs == 4 and history.best_epoch == 2
    for name, value in model.state_dict().items():
        torch.testing.assert_close(value, snapshots[1][name], atol=0, rtol=0)
    assert history.cpu_seconds > 0 and history.seconds > 0


def test_keep_best_runs_every_epoch_and_keeps_the_best_one(pairs, monkeypatch):
    import helpers.models.seq2seq as seq2seq

    snapshots, accuracies = [], iter([0.5, 0.9, 0.6, 0.7, 0.8])

    def fake_evaluate(model, data, shift=None):
        snapshots.append({k: v.clone() for k, v in model.state_dict().items()})
        return 1.0, next(accuracies)

    monkeypatch.setattr(seq2seq, "_evaluate_teacher_forced", fake_evaluate)
    torch.manual_seed(0)
    model = Seq2SeqTransformer(SRC_V, TGT_V, d_model=16, num_heads=2, d_ff=24)
    history = train_seq2seq(model, pairs, pairs, epochs=5, lr=1e-2, batch_size=3, keep_best=True, betas=(0.9, 0.98))
    assert history.epochs == 5 and not history.stopped_early and history.best_epoch == 2
    for name, value in model.state_dict().items():
        torch.testing.assert_close(value, snapshots[1][name], atol=0, rtol=0)
    with pytest.raises(ValueError, match="keep_best needs a validation split"):
        train_seq2seq(model, pairs, None, epochs=2, keep_best=True)


def test_betas_reach_the_optimiser(pairs, monkeypatch):
    seen = []
    original = torch.optim.AdamW

    def spy(params, **kwargs):
        seen.append(kwargs["betas"])
        return original(params, **kwargs)

    monkeypatch.setattr(torch.optim, "AdamW", spy)
    torch.manual_seed(0)
    model = Seq2SeqTransformer(SRC_V, TGT_V, d_model=16, num_heads=2, d_ff=24)
    train_seq2seq(model, pairs, None, epochs=1, batch_size=3, betas=(0.9, 0.98))
    train_seq2seq(model, pairs, None, epochs=1, batch_size=3)
    assert seen == [(0.9, 0.98), (0.9, 0.999)]


def test_exact_match_by_digits():
    numbers = torch.tensor([7, 42, 512, 1005, 999_999])
    tgt = torch.tensor([[5, EOS], [6, EOS], [7, EOS], [8, EOS], [9, EOS]])
    pred = torch.tensor([[5, EOS], [6, 6], [7, EOS], [8, EOS], [4, EOS]])
    assert exact_matches(pred, tgt).tolist() == [True, False, True, True, False]
    assert exact_match_by_digits(pred, tgt, numbers) == {
        "1": (1.0, 1),
        "2": (0.0, 1),
        "3": (1.0, 1),
        "4": (1.0, 1),
        "6": (0.0, 1),
    }
    assert exact_match_by_digits(pred, tgt, numbers, merge_up_to=3) == {"1-3": (2 / 3, 3), "4": (1.0, 1), "6": (0.0, 1)}


def test_sequence_log_prob_sums_the_words_up_to_eos(pairs):
    model = small_transformer()
    logp = sequence_log_prob(model, pairs.src, pairs.tgt)
    with torch.no_grad():
        full = torch.log_softmax(never_special(model(pairs.src, shift_right(pairs.tgt)).double()), -1)
    by_hand = torch.stack(
        [sum(full[b, t, pairs.tgt[b, t]] for t in range(int((pairs.tgt[b] != PAD).sum()))) for b in range(len(pairs.tgt))]
    )
    torch.testing.assert_close(logp, by_hand, atol=1e-12, rtol=0)
    assert (logp < 0).all()
    # what comes after a row's first <eos> does not count
    longer = torch.cat([pairs.tgt, torch.full((6, 2), 9)], 1)
    torch.testing.assert_close(sequence_log_prob(model, pairs.src, longer), logp, atol=1e-12, rtol=0)
