"""The checks of notebook 09 pass right answers (written several ways), spot the stub and name the typical mistakes."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from helpers.checks.seq2seq import check_additive_attention, check_greedy_decode, check_shift_right, check_source_padding_mask
from helpers.data.translation import BOS, EOS, PAD
from helpers.models.seq2seq import additive_attention, greedy_decode, shift_right, source_padding_mask
from tests.conftest import assert_caught, assert_not_attempted


def stub(*args):
    raise NotImplementedError("Exercise: replace this line with your code")


# ---------------------------------------------------------------- shift right


def shift_with_roll(tgt):
    out = tgt.roll(1, dims=1)
    out[:, 0] = BOS
    return out


def shift_with_pad(tgt):
    return F.pad(tgt[:, :-1], (1, 0), value=BOS)


@pytest.mark.parametrize("right", [shift_right, shift_with_roll, shift_with_pad])
def test_shift_right_answers_pass(right):
    assert check_shift_right(right) is True


def test_shift_right_stub_not_attempted(capsys):
    assert_not_attempted(check_shift_right, stub, capsys)
    assert_not_attempted(check_shift_right, ..., capsys)


def in_place(tgt):
    tgt[:, 1:] = tgt[:, :-1].clone()
    tgt[:, 0] = BOS
    return tgt


@pytest.mark.parametrize(
    "wrong, phrases",
    [
        (lambda tgt: tgt, ["not shifted", "off-by-one"]),
        (lambda tgt: torch.cat([torch.full_like(tgt[:, :1], BOS), tgt], 1), ["last position was not dropped"]),
        (lambda tgt: torch.cat([tgt[:, 1:], torch.full_like(tgt[:, :1], PAD)], 1), ["wrong way"]),
        (lambda tgt: tgt.roll(1, dims=1), ["torch.roll wraps"]),
        (lambda tgt: torch.cat([torch.full_like(tgt[:, :1], BOS), tgt[:, 1:]], 1), ["first word is dropped"]),
        (lambda tgt: torch.cat([torch.full_like(tgt[:, :1], PAD), tgt[:, :-1]], 1), ["<pad> instead of the start token"]),
        (lambda tgt: torch.cat([torch.full_like(tgt[:, :1], EOS), tgt[:, :-1]], 1), ["<eos> instead of the start token"]),
        (lambda tgt: torch.cat([torch.full_like(tgt[:, :2], BOS), tgt[:, :-2]], 1), ["two positions"]),
        (lambda tgt: shift_right(tgt).float(), ["dtype", "torch.long"]),
        (in_place, ["in place"]),
        (lambda tgt: None, ["None"]),
    ],
)
def test_shift_right_mistakes_are_named(wrong, phrases):
    assert_caught(check_shift_right, wrong, *phrases)


# ---------------------------------------------------------------- padding mask


@pytest.mark.parametrize(
    "right",
    [
        source_padding_mask,
        lambda src: (src != PAD)[:, None, :],
        lambda src: (src != PAD).unsqueeze(1).unsqueeze(1),  # (batch, 1, 1, m), with the head axis
        lambda src: ~(src == PAD)[:, None],
        lambda src: (src > 0).reshape(src.shape[0], 1, -1),
    ],
)
def test_padding_mask_answers_pass(right):
    assert check_source_padding_mask(right) is True


def test_padding_mask_stub_not_attempted(capsys):
    assert_not_attempted(check_source_padding_mask, stub, capsys)


@pytest.mark.parametrize(
    "wrong, phrases",
    [
        (lambda src: (src == PAD)[:, None, :], ["inverted", "True = may attend"]),
        (lambda src: (src != PAD)[:, :, None], ["hides the queries instead of the keys"]),
        (lambda src: (src != PAD)[:, None, :, None], ["hides the queries instead of the keys"]),
        (lambda src: src != PAD, ["(n, m)", "mask[:, None, :]"]),
        (lambda src: (src != PAD)[:, :, None] & (src != PAD)[:, None, :], ["padded queries", "NaN"]),
        (lambda src: (src != PAD).float()[:, None, :], ["dtype", "float"]),
        (lambda src: torch.where(src == PAD, float("-inf"), 0.0)[:, None, :], ["float"]),
        (lambda src: ((src != PAD) & (src != EOS))[:, None, :], ["hides <eos>"]),
        (lambda src: torch.ones_like(src, dtype=torch.bool)[:, None, :], ["wrong at", "src != pad"]),
    ],
)
def test_padding_mask_mistakes_are_named(wrong, phrases):
    assert_caught(check_source_padding_mask, wrong, *phrases)


# ---------------------------------------------------------------- greedy decoding


def greedy_full_length(model, src, max_len):
    """Runs all max_len steps and keeps generating after <eos> (the check compares up to <eos>)."""
    state = model.encode(src)
    ys = torch.full((src.shape[0], 1), BOS, dtype=torch.long)
    for _ in range(max_len):
        next_word = model.decode(ys, state)[:, -1].argmax(-1)
        ys = torch.cat([ys, next_word[:, None]], dim=1)
    return ys[:, 1:]


def greedy_calling_model(model, src, max_len):
    """Calls model(src, ys) at each step (encoding again every time): slower, right."""
    ys = torch.full((src.shape[0], 1), BOS, dtype=torch.long)
    for _ in range(max_len):
        ys = torch.cat([ys, model(src, ys).argmax(-1)[:, -1:]], dim=1)
    return ys[:, 1:]


@pytest.mark.parametrize("right", [greedy_decode, greedy_full_length, greedy_calling_model])
def test_greedy_answers_pass(right):
    assert check_greedy_decode(right) is True


def test_greedy_stub_not_attempted(capsys):
    assert_not_attempted(check_greedy_decode, stub, capsys)


OUTSIDE_TARGET = torch.randint(3, 9, (10, 7))  # a target from the notebook's cells, not the check's batch


def feeds_outside_target(model, src, max_len):
    return model(src, shift_right(OUTSIDE_TARGET)).argmax(-1)


def feeds_random_words(model, src, max_len):
    """Right batch size, but the decoder reads words that are not its own predictions."""
    ys = torch.full((src.shape[0], 1), BOS, dtype=torch.long)
    out = []
    for t in range(max_len):
        word = model.decode(ys, model.encode(src))[:, -1].argmax(-1)
        out.append(word)
        ys = torch.cat([ys, src[:, t % src.shape[1], None].clamp(3, 8)], dim=1)  # feeds (clamped) source words instead
    return torch.stack(out, 1)


def feeds_bos_only(model, src, max_len):
    ys = torch.full((src.shape[0], 1), BOS, dtype=torch.long)
    out = [model.decode(ys, model.encode(src))[:, -1].argmax(-1) for _ in range(max_len)]
    return torch.stack(out, 1)


def reads_first_position(model, src, max_len):
    ys = torch.full((src.shape[0], 1), BOS, dtype=torch.long)
    for _ in range(max_len):
        ys = torch.cat([ys, model.decode(ys, model.encode(src))[:, 0].argmax(-1)[:, None]], dim=1)
    return ys[:, 1:]


def keeps_bos(model, src, max_len):
    return torch.cat([torch.full((src.shape[0], 1), BOS), greedy_decode(model, src, max_len)], dim=1)[:, :max_len]


def samples(model, src, max_len):
    ys = torch.full((src.shape[0], 1), BOS, dtype=torch.long)
    for _ in range(max_len):
        probs = torch.softmax(model.decode(ys, model.encode(src))[:, -1], -1)
        ys = torch.cat([ys, torch.multinomial(probs, 1)], dim=1)
    return ys[:, 1:]


def too_many_steps(model, src, max_len):
    return greedy_full_length(model, src, max_len + 3)


@pytest.mark.parametrize(
    "wrong, phrases",
    [
        (feeds_outside_target, ["not taken from a variable outside", "no target"]),
        (feeds_random_words, ["not fed its own output"]),
        (feeds_bos_only, ["<bos> alone", "append"]),
        (reads_first_position, ["first position", "logits[:, -1]"]),
        (keeps_bos, ["starts with <bos>", "ys[:, 1:]"]),
        (samples, ["differ from greedy", "not a sample"]),
        (too_many_steps, ["at most max_len"]),
        (lambda model, src, max_len: greedy_decode(model, src, max_len).float(), ["floats"]),
    ],
)
def test_greedy_mistakes_are_named(wrong, phrases):
    assert_caught(check_greedy_decode, wrong, *phrases)


# ---------------------------------------------------------------- additive attention


def additive_other_way(att, s, h, mask):
    hidden = torch.tanh(att.W1(h) + att.W2(s)[:, None, :])  # (batch, m, d_att)
    scores = (hidden @ att.v.weight.T)[..., 0]  # (batch, m)
    scores = torch.where(mask, scores, torch.tensor(-1e9, dtype=scores.dtype))
    weights = F.softmax(scores, dim=1)
    return (weights[..., None] * h).sum(1), weights


def additive_einsum(att, s, h, mask):
    hidden = torch.tanh(torch.einsum("bmh,ah->bma", h, att.W1.weight) + torch.einsum("bs,as->ba", s, att.W2.weight)[:, None])
    scores = torch.einsum("bma,a->bm", hidden, att.v.weight[0]).masked_fill(~mask, float("-inf"))
    weights = scores.softmax(-1)
    return torch.einsum("bm,bmh->bh", weights, h), weights


@pytest.mark.parametrize("right", [additive_attention, additive_other_way, additive_einsum])
def test_additive_answers_pass(right):
    assert check_additive_attention(right) is True


def test_additive_stub_not_attempted(capsys):
    assert_not_attempted(check_additive_attention, stub, capsys)


def make_additive(act=torch.tanh, use_s=True, dim=-1, softmax=True, mask_mode="right", context="right", swap=False):
    def fn(att, s, h, mask):
        pre = att.W1(h) + (att.W2(s).unsqueeze(1) if use_s else 0)
        scores = att.v(act(pre)).squeeze(-1)
        if mask_mode == "right":
            scores = scores.masked_fill(~mask, float("-inf"))
        elif mask_mode == "inverted":
            scores = scores.masked_fill(mask, float("-inf"))
        weights = torch.softmax(scores, dim=dim) if softmax else scores
        if context == "right":
            c = (weights.unsqueeze(1) @ h).squeeze(1)
        elif context == "features":
            c = (weights[..., None] * h).sum(-1)
        else:
            c = h.mean(1)
        return (weights, c) if swap else (c, weights)

    return fn


@pytest.mark.parametrize(
    "wrong, phrases",
    [
        (make_additive(act=lambda x: x), ["tanh is missing"]),
        (make_additive(act=torch.relu), ["ReLU"]),
        (make_additive(act=torch.sigmoid), ["sigmoid"]),
        (make_additive(use_s=False), ["decoder state is missing"]),
        (make_additive(dim=0), ["wrong axis"]),
        (make_additive(softmax=False), ["raw scores"]),
        (make_additive(mask_mode="none"), ["mask is ignored"]),
        (make_additive(mask_mode="inverted"), ["inverted"]),
        (make_additive(context="features"), ["over the features"]),
        (make_additive(context="mean"), ["plain mean"]),
        (make_additive(swap=True), ["swapped"]),
        (lambda att, s, h, mask: (torch.zeros(3, 6), torch.zeros(3, 5)), ["differs from the reference"]),
        (lambda att, s, h, mask: att(s, h), ["att(s, h)"]),
        (lambda att, s, h, mask: att.v(torch.tanh(att.W1(h) + att.W2(s).unsqueeze(0))), ["raised"]),
    ],
)
def test_additive_mistakes_are_named(wrong, phrases):
    assert_caught(check_additive_attention, wrong, *phrases)
