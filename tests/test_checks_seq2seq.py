"""The checks of notebook 09 pass right answers (written several ways), spot the stub and name the typical mistakes."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch import nn

import helpers.checks.seq2seq as checks_seq2seq
from helpers.checks.seq2seq import (
    check_additive_attention,
    check_alignment_accuracy,
    check_greedy_decode,
    check_shift_right,
    check_source_padding_mask,
)
from helpers.data.translation import BOS, EOS, PAD
from helpers.models.seq2seq import (
    additive_attention,
    alignment_accuracy,
    exact_matches,
    greedy_decode,
    shift_right,
    source_padding_mask,
)
from tests.conftest import assert_caught, assert_not_attempted


def stub(*args):
    raise NotImplementedError("Exercise: replace this line with your code")


def calls_a_module_list(*args):
    return nn.ModuleList([nn.Identity()])(args[0])  # PyTorch's own NotImplementedError: a real attempt


@pytest.mark.parametrize(
    "check",
    [check_shift_right, check_source_padding_mask, check_greedy_decode, check_additive_attention, check_alignment_accuracy],
)
def test_only_the_stub_is_not_attempted(check, capsys):
    assert_not_attempted(check, stub, capsys)
    assert_not_attempted(check, ..., capsys)
    assert "not attempted" not in assert_caught(check, calls_a_module_list, "not the exercise's stub")


# ---------------------------------------------------------------- shift right


def shift_with_roll(tgt):
    out = tgt.roll(1, dims=1)
    out[:, 0] = BOS
    return out


def shift_with_pad(tgt):
    return F.pad(tgt[:, :-1], (1, 0), value=BOS)


def shift_row_by_row(tgt):
    return torch.stack([torch.cat([torch.tensor([BOS]), row[:-1]]) for row in tgt])


def shift_with_new_tensor(tgt):
    out = torch.full_like(tgt, BOS)
    out[:, 1:] = tgt[:, :-1]
    return out


@pytest.mark.parametrize("right", [shift_right, shift_with_roll, shift_with_pad, shift_row_by_row, shift_with_new_tensor])
def test_shift_right_answers_pass(right):
    assert check_shift_right(right) is True


def in_place(tgt):
    tgt[:, 1:] = tgt[:, :-1].clone()
    tgt[:, 0] = BOS
    return tgt


def bos(tgt):
    return torch.full_like(tgt[:, :1], BOS)


SHIFT_MISTAKES = [
    (lambda tgt: tgt, ["not shifted", "off-by-one"]),
    (lambda tgt: torch.cat([bos(tgt), tgt], 1), ["last position was not dropped"]),
    (lambda tgt: tgt[:, :-1], ["<bos> was not put in front"]),
    (lambda tgt: torch.cat([tgt[:, 1:], torch.full_like(tgt[:, :1], PAD)], 1), ["wrong way"]),
    (lambda tgt: tgt.roll(1, dims=1), ["torch.roll wraps"]),
    (lambda tgt: torch.cat([bos(tgt), tgt[:, 1:]], 1), ["first word is dropped"]),
    (lambda tgt: torch.cat([torch.full_like(tgt[:, :1], PAD), tgt[:, :-1]], 1), ["<pad> instead of the start token"]),
    (lambda tgt: torch.cat([torch.full_like(tgt[:, :1], EOS), tgt[:, :-1]], 1), ["<eos> instead of the start token"]),
    (lambda tgt: torch.cat([torch.full_like(tgt[:, :2], BOS), tgt[:, :-2]], 1), ["two positions"]),
    # along the batch axis (torch.cat's default dim=0)
    (lambda tgt: torch.cat([torch.full_like(tgt[:1], BOS), tgt[:-1]]), ["rows were shifted", "dim=0", "dim=1"]),
    (lambda tgt: torch.cat([torch.full_like(tgt[:1], BOS), tgt]), ["rows for a batch", "dim=0"]),
    (lambda tgt: torch.cat([bos(tgt), tgt[:, :-1]]), ["torch.cat joins along dim=0", "dim=1"]),
    (lambda tgt: shift_right(tgt).T, ["transposed"]),
    # <bos> at the end
    (lambda tgt: torch.cat([tgt[:, 1:], bos(tgt)], 1), ["<bos> is at the end", "goes first"]),
    (lambda tgt: torch.cat([tgt[:, :-1], bos(tgt)], 1), ["<bos> is at the end"]),
    # the <bos> column built wrong
    (lambda tgt: torch.cat([torch.full((tgt.shape[0],), BOS), tgt[:, :-1]], 1), ["(batch, 1)"]),
    (lambda tgt: torch.cat([BOS, tgt[:, :-1]], 1), ["torch.cat joins tensors"]),
    (lambda tgt: shift_right(tgt).float(), ["dtype", "torch.long"]),
    (lambda tgt: torch.cat([torch.ones(tgt.shape[0], 1), tgt[:, :-1]], 1), ["dtype", "torch.long"]),
    (in_place, ["in place"]),
    (lambda tgt: None, ["None"]),
]


@pytest.mark.parametrize("wrong, phrases", SHIFT_MISTAKES)
def test_shift_right_mistakes_are_named(wrong, phrases):
    assert_caught(check_shift_right, wrong, *phrases)


# ---------------------------------------------------------------- padding mask


def mask_from_lengths(src):
    lengths = (src != PAD).sum(1)
    return (torch.arange(src.shape[1])[None, :] < lengths[:, None]).unsqueeze(1)


@pytest.mark.parametrize(
    "right",
    [
        source_padding_mask,
        mask_from_lengths,
        lambda src: (src != PAD)[:, None, :],
        lambda src: (src != PAD).unsqueeze(1).unsqueeze(1),  # (batch, 1, 1, m), with the head axis
        lambda src: ~(src == PAD)[:, None],
        lambda src: (src > 0).reshape(src.shape[0], 1, -1),
        lambda src: src.bool()[:, None, :],  # <pad> is 0
        lambda src: src.ne(PAD).view(src.shape[0], 1, src.shape[1]),
    ],
)
def test_padding_mask_answers_pass(right):
    assert check_source_padding_mask(right) is True


def lengths_mask(offset=0, strict=True):
    def fn(src):
        lengths = (src != PAD).sum(1) + offset
        positions = torch.arange(src.shape[1])[None, :]
        return ((positions < lengths[:, None]) if strict else (positions <= lengths[:, None]))[:, None, :]

    return fn


MASK_MISTAKES = [
    (lambda src: (src == PAD)[:, None, :], ["inverted", "True = may attend"]),
    (lambda src: (src != PAD)[:, :, None], ["hides the queries instead of the keys"]),
    (lambda src: (src != PAD)[:, None, :, None], ["hides the queries instead of the keys"]),
    (lambda src: src != PAD, ["(n, m)", "mask[:, None, :]"]),
    (lambda src: (src != PAD)[None], ["went in front", "[:, None, :]"]),
    (lambda src: (src != PAD)[:, :, None] & (src != PAD)[:, None, :], ["padded queries", "NaN"]),
    (lambda src: (src != PAD)[:, None, :].expand(-1, src.shape[1], -1), ["exactly m", "size 1"]),
    (lambda src: (src != PAD).float()[:, None, :], ["dtype", "float"]),
    (lambda src: (src != PAD).long()[:, None, :], ["dtype", "integer"]),
    (lambda src: torch.where(src == PAD, float("-inf"), 0.0)[:, None, :], ["float"]),
    (lambda src: ((src != PAD) & (src != EOS))[:, None, :], ["last real token, <eos>", "only <pad>"]),
    (lengths_mask(offset=-1), ["last real token, <eos>", "off-by-one"]),
    (lengths_mask(strict=False), ["one padding position", "off-by-one", "not <="]),
    (lengths_mask(offset=1), ["one padding position", "off-by-one"]),
    (lambda src: (src != BOS)[:, None, :], ["True everywhere", "<bos>", "src != PAD"]),
    (lambda src: torch.ones_like(src, dtype=torch.bool)[:, None, :], ["True everywhere"]),
    (lambda src: torch.zeros_like(src, dtype=torch.bool)[:, None, :], ["False everywhere"]),
    (lambda src: (src != EOS)[:, None, :], ["compares with <eos>"]),
    (lambda src: (src > EOS)[:, None, :], ["last real token, <eos>"]),
]


@pytest.mark.parametrize("wrong, phrases", MASK_MISTAKES)
def test_padding_mask_mistakes_are_named(wrong, phrases):
    assert_caught(check_source_padding_mask, wrong, *phrases)


# ---------------------------------------------------------------- greedy decoding


def greedy_full_length(model, src, max_len):
    """Runs all max_len steps and keeps generating after <eos> (the check compares up to <eos>)."""
    state = model.encode(src)
    ys = torch.full((src.shape[0], 1), BOS, dtype=torch.long)
    for _ in range(max_len):
        logits = model.decode(ys, state)[:, -1].clone()
        logits[:, [PAD, BOS]] = float("-inf")
        ys = torch.cat([ys, logits.argmax(-1)[:, None]], dim=1)
    return ys[:, 1:]


def greedy_calling_model(model, src, max_len):
    """Calls model(src, ys) at each step (encoding again every time) and skips <pad>, <bos> by slicing: slower, right."""
    ys = torch.full((src.shape[0], 1), BOS, dtype=torch.long)
    for _ in range(max_len):
        ys = torch.cat([ys, model(src, ys)[:, -1, 2:].argmax(-1, keepdim=True) + 2], dim=1)
    return ys[:, 1:]


def greedy_one_sentence_at_a_time(model, src, max_len):
    """A batch of one per row, stopping at each row's <eos>, padded to a common length: right."""
    rows = []
    for i in range(src.shape[0]):
        state = model.encode(src[i : i + 1])
        ys = torch.tensor([[BOS]])
        for _ in range(max_len):
            logits = model.decode(ys, state)[0, -1].clone()  # (vocab,)
            logits[[PAD, BOS]] = -1e9
            word = int(logits.argmax())
            ys = torch.cat([ys, torch.tensor([[word]])], dim=1)
            if word == EOS:
                break
        rows.append(ys[0, 1:])
    return nn.utils.rnn.pad_sequence(rows, batch_first=True, padding_value=PAD)


def greedy_trimmed_sentences(model, src, max_len):
    """One sentence at a time with its padding cut off, stopping early with a `done` mask: right."""
    out = torch.full((src.shape[0], max_len), PAD)
    for i, row in enumerate(src):
        state = model.encode(row[row != PAD][None])
        ys = torch.tensor([[BOS]])
        for t in range(max_len):
            logits = model.decode(ys, state)[:, -1]
            logits = logits.index_fill(-1, torch.tensor([PAD, BOS]), float("-inf"))
            ys = torch.cat([ys, logits.max(-1).indices[:, None]], dim=1)
            out[i, t] = ys[0, -1]
            if ys[0, -1] == EOS:
                break
    return out


def greedy_rebuilding_the_input(model, src, max_len):
    """Re-feeds all the decoder's predictions each step ([<bos>, argmax of every position]): right for a causal model."""
    state = model.encode(src)
    ys = torch.full((src.shape[0], 1), BOS, dtype=torch.long)
    for _ in range(max_len):
        pred = never_pad_or_bos(model.decode(ys, state)).argmax(-1)  # (batch, t)
        ys = torch.cat([ys[:, :1], pred], dim=1)
        if (pred == EOS).any(1).all():
            break
    return ys[:, 1:]


def greedy_with_topk(model, src, max_len):
    state = model.encode(src)
    ys = torch.full((src.shape[0], 1), BOS, dtype=torch.long)
    done = torch.zeros(src.shape[0], dtype=torch.bool)
    while ys.shape[1] <= max_len and not done.all():
        logits = model.decode(ys, state)[:, -1].masked_fill(torch.isin(torch.arange(9), torch.tensor([PAD, BOS])), -1e9)
        word = logits.topk(1, dim=-1).indices  # (batch, 1)
        ys = torch.cat([ys, word], dim=1)
        done |= word[:, 0] == EOS
    return ys[:, 1:]


@pytest.mark.parametrize(
    "right",
    [
        greedy_decode,
        greedy_full_length,
        greedy_calling_model,
        greedy_one_sentence_at_a_time,
        greedy_trimmed_sentences,
        greedy_rebuilding_the_input,
        greedy_with_topk,
    ],
)
def test_greedy_answers_pass(right):
    assert check_greedy_decode(right) is True


def test_the_greedy_check_model_tells_every_named_mistake_apart():
    """The toy model and sources of the check make each named mistake change some row, and each differently."""
    model, src = checks_seq2seq._decoder_model()
    assert len({tuple(row.tolist()) for row in src}) == len(src)  # distinct sources: rows are found by content
    max_len = checks_seq2seq._MAX_LEN
    expected = greedy_decode(model, src, max_len)
    outputs = [expected, *checks_seq2seq._greedy_mistakes(model, src, max_len).values()]
    for i, a in enumerate(outputs):
        for b in outputs[i + 1 :]:
            assert not exact_matches(a, b).all()
    ends = (expected == EOS).float().argmax(1)
    assert len(set(ends.tolist())) > 1 and int(ends.max()) == max_len - 1  # rows end apart, one at the last step


OUTSIDE_TARGET = torch.randint(3, 9, (10, 7))  # a target from the notebook's cells, not the check's batch


def feeds_outside_target(model, src, max_len):
    return model(src, shift_right(OUTSIDE_TARGET)).argmax(-1)


def make_greedy(
    position=-1, steps=None, stop="all", special=True, feed="own", softmax_dim=None, start=BOS, keep_bos=False, pick="argmax"
):
    """A greedy loop with one mistake switched on."""

    def fn(model, src, max_len):
        state = model.encode(src)
        ys = torch.full((src.shape[0], 1), start, dtype=torch.long)
        out = []
        for t in range(max_len if steps is None else steps(max_len)):
            logits = model.decode(ys, state)[:, position]
            if softmax_dim is not None:
                logits = torch.softmax(logits, dim=softmax_dim)
            if special:
                logits = logits.index_fill(-1, torch.tensor([PAD, BOS]), float("-inf"))
            if pick == "argmax":
                word = logits.argmax(-1)
            else:
                word = torch.multinomial(torch.softmax(logits, -1), 1)[:, 0]
            out.append(word)
            if feed == "own":
                ys = torch.cat([ys, word[:, None]], dim=1)
            elif feed == "source":
                ys = torch.cat([ys, src[:, t % src.shape[1], None].clamp(3, 8)], dim=1)
            ended = (torch.stack(out, 1) == EOS).any(1)
            if (stop == "any" and ended.any()) or (stop == "all" and ended.all()):
                break
        result = torch.stack(out, 1)
        return torch.cat([torch.full((src.shape[0], 1), BOS), result], 1)[:, :max_len] if keep_bos else result

    return fn


def returns_inside_the_loop(model, src, max_len):
    state = model.encode(src)
    ys = torch.full((src.shape[0], 1), BOS, dtype=torch.long)
    for _ in range(max_len):
        logits = never_pad_or_bos(model.decode(ys, state)[:, -1])
        ys = torch.cat([ys, logits.argmax(-1)[:, None]], dim=1)
        return ys[:, 1:]


def never_pad_or_bos(logits):
    return logits.index_fill(-1, torch.tensor([PAD, BOS]), float("-inf"))


def max_without_indices(model, src, max_len):
    state = model.encode(src)
    ys = torch.full((src.shape[0], 1), BOS, dtype=torch.long)
    for _ in range(max_len):
        word = never_pad_or_bos(model.decode(ys, state)[:, -1]).max(-1)
        ys = torch.cat([ys, word[:, None]], dim=1)
    return ys[:, 1:]


def max_with_unsqueeze(model, src, max_len):
    state = model.encode(src)
    ys = torch.full((src.shape[0], 1), BOS, dtype=torch.long)
    for _ in range(max_len):
        word = never_pad_or_bos(model.decode(ys, state)[:, -1]).max(dim=-1)
        ys = torch.cat([ys, word.unsqueeze(1)], dim=1)
    return ys[:, 1:]


def appends_along_the_batch(model, src, max_len):
    state = model.encode(src)
    ys = torch.full((src.shape[0], 1), BOS, dtype=torch.long)
    for _ in range(max_len):
        ys = torch.cat([ys, never_pad_or_bos(model.decode(ys, state)[:, -1]).argmax(-1)[:, None]], dim=0)
    return ys[:, 1:]


def appends_a_row(model, src, max_len):
    state = model.encode(src)
    ys = torch.full((src.shape[0], 1), BOS, dtype=torch.long)
    for _ in range(max_len):
        ys = torch.cat([ys, never_pad_or_bos(model.decode(ys, state)[:, -1]).argmax(-1)[None]])
    return ys[:, 1:]


def argmax_over_the_batch(model, src, max_len):
    state = model.encode(src)
    ys = torch.full((src.shape[0], 1), BOS, dtype=torch.long)
    for _ in range(max_len):
        ys = torch.cat([ys, never_pad_or_bos(model.decode(ys, state)[:, -1]).argmax(0)[:, None]], dim=1)
    return ys[:, 1:]


def float_decoder_input(model, src, max_len):
    state = model.encode(src)
    ys = torch.ones(src.shape[0], 1) * BOS
    for _ in range(max_len):
        ys = torch.cat([ys, never_pad_or_bos(model.decode(ys, state)[:, -1]).argmax(-1)[:, None]], dim=1)
    return ys[:, 1:].long()


def never_decodes(model, src, max_len):
    return torch.full((src.shape[0], max_len), EOS)


def returns_inside_the_loop_unmasked(model, src, max_len):  # the return inside the loop, <pad> and <bos> not masked either
    state = model.encode(src)
    ys = torch.full((src.shape[0], 1), BOS, dtype=torch.long)
    for _ in range(max_len):
        ys = torch.cat([ys, model.decode(ys, state)[:, -1].argmax(-1)[:, None]], dim=1)
        return ys[:, 1:]


def returns_inside_the_loop_preallocated(model, src, max_len):  # the words go into a (batch, max_len) tensor of <pad>
    state = model.encode(src)
    out = torch.full((src.shape[0], max_len), PAD)
    ys = torch.full((src.shape[0], 1), BOS, dtype=torch.long)
    for t in range(max_len):
        word = never_pad_or_bos(model.decode(ys, state)[:, -1]).argmax(-1)
        out[:, t] = word
        ys = torch.cat([ys, word[:, None]], dim=1)
        return out


def returns_inside_the_sentence_loop(model, src, max_len):  # one sentence at a time, the return inside the outer loop
    rows = []
    for i in range(src.shape[0]):
        state = model.encode(src[i : i + 1])
        ys = torch.tensor([[BOS]])
        for _ in range(max_len):
            ys = torch.cat([ys, never_pad_or_bos(model.decode(ys, state)[:, -1]).argmax(-1)[:, None]], dim=1)
            if ys[0, -1] == EOS:
                break
        rows.append(ys[0, 1:])
        return nn.utils.rnn.pad_sequence(rows, batch_first=True, padding_value=PAD)


def stops_on_a_tensor(model, src, max_len):  # `if word == EOS` on a batch
    state = model.encode(src)
    ys = torch.full((src.shape[0], 1), BOS, dtype=torch.long)
    for _ in range(max_len):
        word = never_pad_or_bos(model.decode(ys, state)[:, -1]).argmax(-1)
        ys = torch.cat([ys, word[:, None]], dim=1)
        if word == EOS:
            break
    return ys[:, 1:]


def decodes_from_the_source(model, src, max_len):  # model.decode(ys, src): the state never encoded
    ys = torch.full((src.shape[0], 1), BOS, dtype=torch.long)
    for _ in range(max_len):
        ys = torch.cat([ys, never_pad_or_bos(model.decode(ys, src)[:, -1]).argmax(-1)[:, None]], dim=1)
    return ys[:, 1:]


def masks_one_special(token):
    def fn(model, src, max_len):
        state = model.encode(src)
        ys = torch.full((src.shape[0], 1), BOS, dtype=torch.long)
        for _ in range(max_len):
            logits = model.decode(ys, state)[:, -1].clone()
            logits[:, token] = float("-inf")
            ys = torch.cat([ys, logits.argmax(-1)[:, None]], dim=1)
            if (ys == EOS).any(1).all():
                break
        return ys[:, 1:]

    return fn


GREEDY_MISTAKES = [
    (feeds_outside_target, ["not taken from a variable outside", "no target"]),
    (make_greedy(feed="source"), ["not fed its own output"]),
    (make_greedy(feed="bos"), ["<bos> alone", "append"]),
    (make_greedy(feed="bos", special=False), ["<bos> alone"]),
    (returns_inside_the_loop, ["first step", "`return`", "inside the `for` loop"]),
    (make_greedy(position=0), ["first position", "logits[:, -1]"]),
    (make_greedy(position=0, special=False), ["first position", "set the logits of <pad> and <bos> to -inf"]),
    (make_greedy(keep_bos=True), ["starts with <bos>", "ys[:, 1:]"]),
    (make_greedy(pick="sample"), ["differ from greedy", "not a sample"]),
    (make_greedy(steps=lambda n: n + 3, stop="never"), ["at most max_len"]),
    (make_greedy(steps=lambda n: n - 1, stop="never"), ["one step short", "range(max_len)"]),
    (make_greedy(steps=lambda n: n - 1, stop="never", special=False), ["one step short"]),
    (make_greedy(stop="any"), ["as soon as one row", ".all()"]),
    (make_greedy(stop="any", special=False), ["as soon as one row"]),
    (make_greedy(softmax_dim=0), ["softmax over the batch axis", "dim=0"]),
    (make_greedy(softmax_dim=0, special=False), ["softmax over the batch axis"]),
    (make_greedy(special=False), ["<pad> or <bos>", "-inf"]),
    (make_greedy(special=False, stop="never"), ["<pad> or <bos>"]),
    (make_greedy(start=PAD), ["does not start with <bos>"]),
    (make_greedy(start=EOS), ["does not start with <bos>"]),
    (max_without_indices, ["(values, indices)", "argmax(-1)"]),
    (max_with_unsqueeze, ["(values, indices)", ".indices"]),
    (argmax_over_the_batch, ["over the vocabulary, the last axis"]),
    (appends_along_the_batch, ["as new rows", "dim=0", "dim=1"]),
    (appends_a_row, ["along dim=1", "torch.cat joins along dim=0"]),
    (float_decoder_input, ["dtype", "torch.long"]),
    (never_decodes, ["never called model.decode"]),
    (lambda model, src, max_len: greedy_decode(model, src, max_len).float(), ["floats"]),
    # issue 36: the return inside the loop, whatever else the loop does
    (returns_inside_the_loop_unmasked, ["first step", "`return`", "inside the `for` loop"]),
    (returns_inside_the_loop_preallocated, ["first step", "`return`"]),
    (returns_inside_the_sentence_loop, ["only the first sentence", "`return`", "loop over the sentences"]),
    (stops_on_a_tensor, ["no single truth value", "(ys == EOS).any(dim=1).all()"]),
    (decodes_from_the_source, ["state = model.encode(src)", "model.decode(ys, state)"]),
    (masks_one_special(PAD), ["chose <bos>", "both <pad> and <bos>"]),
    (masks_one_special(BOS), ["chose <pad>", "both <pad> and <bos>"]),
]


@pytest.mark.parametrize("wrong, phrases", GREEDY_MISTAKES)
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


def additive_minus_1e9(att, s, h, mask):
    scores = att.v(torch.tanh(att.W1(h) + att.W2(s).unsqueeze(1))).squeeze(-1)
    weights = torch.softmax(scores.masked_fill(~mask, -1e9), dim=-1)
    return torch.bmm(weights.unsqueeze(1), h).squeeze(1), weights


def additive_additive_mask(att, s, h, mask):
    scores = att.v(torch.tanh(att.W1(h) + att.W2(s).unsqueeze(1))).squeeze(-1)
    weights = torch.softmax(scores + (~mask) * -1e9, dim=-1)
    return (weights.unsqueeze(1) @ h).squeeze(1), weights


def additive_renormalised_after_softmax(att, s, h, mask):
    scores = att.v(torch.tanh(att.W1(h) + att.W2(s).unsqueeze(1))).squeeze(-1)
    weights = torch.softmax(scores, dim=-1) * mask
    weights = weights / weights.sum(-1, keepdim=True)
    return (weights.unsqueeze(1) @ h).squeeze(1), weights


def additive_stable_softmax_by_hand(att, s, h, mask):
    scores = att.v(torch.tanh(att.W1(h) + att.W2(s).unsqueeze(1))).squeeze(-1).masked_fill(~mask, float("-inf"))
    exps = torch.exp(scores - scores.max(-1, keepdim=True).values)
    weights = exps / exps.sum(-1, keepdim=True)
    return (weights.unsqueeze(1) @ h).squeeze(1), weights


def additive_in_float32(att, s, h, mask):
    """Builds its scores in a float32 buffer (as in the course's float32 model): right at float32's precision."""
    scores = torch.zeros(s.shape[0], h.shape[1])  # float32
    for i in range(h.shape[1]):
        scores[:, i] = att.v(torch.tanh(att.W1(h[:, i]) + att.W2(s))).squeeze(-1)
    weights = torch.softmax(scores.masked_fill(~mask, float("-inf")), dim=-1)
    return (weights.unsqueeze(1) @ h).squeeze(1), weights


def additive_loop_float32_context(att, s, h, mask):
    """A float32 context accumulated in a loop from float64 weights: right at float32's precision."""
    scores = att.v(torch.tanh(att.W1(h) + att.W2(s).unsqueeze(1))).squeeze(-1)
    weights = torch.softmax(scores.masked_fill(~mask, float("-inf")), dim=-1)
    context = torch.zeros(h.shape[0], h.shape[2])
    for i in range(h.shape[1]):
        context += weights[:, i, None] * h[:, i]
    return context, weights.float()


@pytest.mark.parametrize(
    "right",
    [
        additive_attention,
        additive_other_way,
        additive_einsum,
        additive_minus_1e9,
        additive_additive_mask,
        additive_renormalised_after_softmax,
        additive_stable_softmax_by_hand,
        additive_in_float32,
        additive_loop_float32_context,
    ],
)
def test_additive_answers_pass(right):
    assert check_additive_attention(right) is True


def make_additive(
    act=torch.tanh,
    use_s=True,
    use_v=True,
    v_after=False,
    scale=1.0,
    dim=-1,
    norm="softmax",
    mask_mode="right",
    fill=float("-inf"),
    context="right",
    swap=False,
):
    def fn(att, s, h, mask):
        pre = att.W1(h) + (att.W2(s).unsqueeze(1) if use_s else 0)
        if v_after:
            scores = act(att.v(pre)).squeeze(-1)
        elif use_v:
            scores = att.v(act(pre)).squeeze(-1)
        else:
            scores = act(pre).sum(-1)
        scores = scores / scale
        if mask_mode == "right":
            scores = scores.masked_fill(~mask, fill)
        elif mask_mode == "inverted":
            scores = scores.masked_fill(mask, fill)
        if norm == "softmax":
            weights = torch.softmax(scores, dim=dim)
        elif norm == "log_softmax":
            weights = torch.log_softmax(scores, dim=dim)
        else:
            weights = scores
        if mask_mode == "after":
            weights = weights * mask
        elif mask_mode == "after -inf":
            weights = weights.masked_fill(~mask, float("-inf"))
        if context == "right":
            c = (weights.unsqueeze(1) @ h).squeeze(1)
        elif context == "features":
            c = (weights[..., None] * h).sum(-1)
        elif context == "keepdim":
            c = weights.unsqueeze(1) @ h
        else:
            c = h.mean(1)
        return (weights, c) if swap else (c, weights)

    return fn


def w1_on_s(att, s, h, mask):
    scores = att.v(torch.tanh(att.W1(s).unsqueeze(1) + att.W2(h))).squeeze(-1)
    weights = torch.softmax(scores.masked_fill(~mask, float("-inf")), -1)
    return (weights.unsqueeze(1) @ h).squeeze(1), weights


def w2s_without_source_axis(att, s, h, mask):
    scores = att.v(torch.tanh(att.W1(h) + att.W2(s))).squeeze(-1)
    weights = torch.softmax(scores.masked_fill(~mask, float("-inf")), -1)
    return (weights.unsqueeze(1) @ h).squeeze(1), weights


def weights_without_trailing_axis(att, s, h, mask):
    scores = att.v(torch.tanh(att.W1(h) + att.W2(s).unsqueeze(1))).squeeze(-1)
    weights = torch.softmax(scores.masked_fill(~mask, float("-inf")), -1)
    return (weights * h).sum(1), weights


def stable_softmax_with_a_tuple(att, s, h, mask):
    scores = att.v(torch.tanh(att.W1(h) + att.W2(s).unsqueeze(1))).squeeze(-1).masked_fill(~mask, float("-inf"))
    largest = scores.max(-1)
    exps = torch.exp(scores - largest[:, None])
    weights = exps / exps.sum(-1, keepdim=True)
    return (weights.unsqueeze(1) @ h).squeeze(1), weights


def weights_keep_an_axis(att, s, h, mask):
    context, weights = additive_attention(att, s, h, mask)
    return context, weights.unsqueeze(-1)


def weights_from(normalise):
    """An additive attention whose weights are normalise(scores, mask) instead of the masked softmax."""

    def fn(att, s, h, mask):
        scores = att.v(torch.tanh(att.W1(h) + att.W2(s).unsqueeze(1))).squeeze(-1)
        weights = normalise(scores, mask)
        return (weights.unsqueeze(1) @ h).squeeze(1), weights

    return fn


def softmax_flat(scores):
    return torch.softmax(scores.flatten(), 0).reshape(scores.shape)


ADDITIVE_MISTAKES = [
    (make_additive(act=lambda x: x), ["tanh is missing"]),
    (make_additive(act=torch.relu), ["ReLU"]),
    (make_additive(act=torch.sigmoid), ["sigmoid"]),
    (make_additive(v_after=True), ["tanh is applied after v"]),
    (make_additive(use_v=False), ["v is missing", "att.v"]),
    (make_additive(use_s=False), ["decoder state is missing"]),
    (make_additive(scale=7**0.5), ["divided by sqrt(d)", "not scaled"]),
    (make_additive(scale=6**0.5), ["divided by sqrt(d)"]),
    (make_additive(scale=4**0.5), ["divided by sqrt(d)"]),
    (make_additive(dim=0), ["wrong axis"]),
    (make_additive(norm=None), ["raw scores"]),
    (make_additive(norm="log_softmax"), ["log_softmax", "take the softmax"]),
    (make_additive(norm="log_softmax", mask_mode="none"), ["log_softmax"]),
    (make_additive(mask_mode="none"), ["mask is ignored"]),
    (make_additive(mask_mode="inverted"), ["inverted"]),
    (make_additive(fill=0.0), ["set to 0", "-inf"]),
    (make_additive(fill=-10.0), ["still get some weight", "-inf"]),
    (make_additive(fill=-3.0), ["still get some weight", "-1e9"]),
    (make_additive(mask_mode="after"), ["after the softmax", "no longer sum to 1"]),
    (make_additive(mask_mode="after -inf"), ["after the softmax, with -inf"]),
    (make_additive(context="features"), ["over the features"]),
    (make_additive(context="keepdim"), ["drop the middle axis", "squeeze(1)"]),
    (make_additive(context="mean"), ["plain mean"]),
    (make_additive(swap=True), ["swapped"]),
    (weights_keep_an_axis, ["return them as (batch, m)"]),
    (w1_on_s, ["att.W1 takes the encoder states h"]),
    (w2s_without_source_axis, ["unsqueeze(1)", "every source position"]),
    (weights_without_trailing_axis, ["weights[..., None] * h"]),
    (stable_softmax_with_a_tuple, ["(values, indices)", ".values"]),
    (lambda att, s, h, mask: (torch.zeros(3, 6), torch.zeros(3, 5)), ["differs from the reference"]),
    (lambda att, s, h, mask: att(s, h), ["att(s, h)"]),
    (lambda att, s, h, mask: att.v(torch.tanh(att.W1(h) + att.W2(s).unsqueeze(0))), ["raised"]),
    # issue 36: no softmax, whatever happens to the padding, or another normalisation in its place
    (make_additive(norm=None, mask_mode="none"), ["raw scores", "softmax is missing"]),
    (make_additive(norm=None, fill=0.0), ["raw scores", "softmax is missing"]),
    (make_additive(norm=None, fill=-1e9), ["raw scores", "softmax is missing"]),
    (make_additive(norm=None, mask_mode="after"), ["raw scores", "softmax is missing"]),
    (weights_from(lambda scores, mask: scores.masked_fill(~mask, float("-inf")).exp()), ["exp(scores)", "not divided"]),
    (weights_from(lambda scores, mask: (scores * mask) / (scores * mask).sum(-1, keepdim=True)), ["divided by their sum"]),
    (weights_from(lambda scores, mask: torch.sigmoid(scores) * mask), ["squashed", "softmax"]),
    (weights_from(lambda scores, mask: softmax_flat(scores.masked_fill(~mask, float("-inf")))), ["whole batch", "dim=-1"]),
]


@pytest.mark.parametrize("wrong, phrases", ADDITIVE_MISTAKES)
def test_additive_mistakes_are_named(wrong, phrases):
    assert_caught(check_additive_attention, wrong, *phrases)


# ---------------------------------------------------------------- alignment accuracy


def alignment_by_mask(weights, align):
    has_word = align >= 0
    return ((weights.argmax(-1) == align) & has_word).sum() / has_word.sum()


def alignment_as_float(weights, align):
    hits, total = 0, 0
    for row_w, row_a in zip(weights, align, strict=True):
        for w, a in zip(row_w, row_a, strict=True):
            if a >= 0:
                total += 1
                hits += int(w.argmax()) == int(a)
    return hits / total


def alignment_with_max(weights, align):
    _, where = weights.max(dim=-1)
    keep = align != -1
    return (where[keep] == align[keep]).double().mean()


ALIGNMENT_RIGHT = [
    alignment_accuracy,
    alignment_by_mask,
    alignment_as_float,
    alignment_with_max,
    lambda weights, align: (weights.argmax(-1) == align)[align >= 0].float().mean(),
    lambda weights, align: torch.mean((weights.argmax(2)[align > -1] == align[align > -1]).to(weights.dtype)),
    lambda weights, align: ((weights.argmax(-1) == align) & (align >= 0)).sum().item() / (align >= 0).sum().item(),
    lambda weights, align: ((weights.argmax(-1) == align) & (align >= 0)).sum(dtype=torch.float64) / (align >= 0).sum(),
    lambda weights, align: ((weights.argmax(-1) == align)[align >= 0].float().mean()).reshape(1),
    lambda weights, align: (weights.argmax(-1) == align).sum() / (align >= 0).sum(),  # argmax is never -1: no mask needed
]


@pytest.mark.parametrize("right", ALIGNMENT_RIGHT)
def test_alignment_answers_pass(right):
    assert check_alignment_accuracy(right) is True


def hits(weights, align):
    return weights.argmax(-1) == align


ALIGNMENT_MISTAKES = [
    (lambda w, a: hits(w, a).float().mean(), ["counted as misses", "align >= 0"]),
    (lambda w, a: (hits(w, a) | (a < 0)).float().mean(), ["counted as hits"]),
    (lambda w, a: hits(w, a)[a > 0].float().mean(), ["position 0 is left out", "align >= 0"]),
    (lambda w, a: torch.stack([hits(w, a)[i][a[i] >= 0].float().mean() for i in range(len(a))]).mean(), ["each sentence"]),
    (lambda w, a: 100 * hits(w, a)[a >= 0].float().mean(), ["percentage", "between 0 and 1"]),
    (lambda w, a: hits(w, a)[a >= 0].sum(), ["number of hits", "divide"]),
    (lambda w, a: (w.argmin(-1) == a)[a >= 0].float().mean(), ["argmin", "argmax"]),
    (lambda w, a: (w.argmax(-2) == a)[a >= 0].float().mean(), ["the last axis", "argmax(-1)"]),  # n != m: shapes clash
    (lambda w, a: (w.argmax(1) == a)[a >= 0].float().mean(), ["argmax(-1)"]),
    (lambda w, a: (w.max(-1) == a)[a >= 0].float().mean(), ["pair", "argmax(-1)"]),
    (lambda w, a: hits(w, a)[a >= 0].float().mean(-1), ["one number"]),  # the mean of a 1-d selection is fine: see below
    (lambda w, a: (hits(w, a) & (a >= 0)).sum(1) / (a >= 0).sum(1), ["one share per sentence"]),
    (lambda w, a: hits(w, a) & (a >= 0), ["one entry per target position"]),
    (lambda w, a: bool(hits(w, a)[a >= 0].all()), ["bool"]),
    (lambda w, a: (hits(w, a) & (a >= 0)).sum() / (a < 0).sum() * 0, ["should be"]),
    (lambda w, a: None, ["None"]),
]


@pytest.mark.parametrize("wrong, phrases", ALIGNMENT_MISTAKES)
def test_alignment_mistakes_are_named(wrong, phrases):
    if phrases == ["one number"]:  # a mean over the last axis of a 1-d selection is one number: right
        assert check_alignment_accuracy(wrong) is True
        return
    assert_caught(check_alignment_accuracy, wrong, *phrases)


def test_catalogue_sizes():
    """At least the classes of issues 25 and 36 and the next likeliest mistakes, per check (the report quotes these counts)."""
    sizes = (len(SHIFT_MISTAKES), len(MASK_MISTAKES), len(GREEDY_MISTAKES), len(ADDITIVE_MISTAKES), len(ALIGNMENT_MISTAKES))
    assert all(size >= least for size, least in zip(sizes, (21, 19, 35, 40, 15), strict=True)), sizes


def additive_through_float32(att, s, h, mask):
    """Computes in float32 and hands back float64: the check names the precision problem."""
    w1, w2, v = (layer.weight.float() for layer in (att.W1, att.W2, att.v))
    scores = (torch.tanh(h.float() @ w1.T + (s.float() @ w2.T)[:, None]) @ v.T)[..., 0]
    weights = torch.softmax(scores.masked_fill(~mask, float("-inf")), -1).double()
    return (weights.unsqueeze(1) @ h).squeeze(1), weights


def test_a_float64_answer_computed_in_float32_is_a_named_precision_problem():
    assert_caught(check_additive_attention, additive_through_float32, "precision problem", "float32")


# ---------------------------------------------------------------- the outside review's catalogue: partial work


def shift_right_partial(tgt):
    bos = torch.full_like(tgt[:, :1], BOS)  # noqa: F841
    raise NotImplementedError("Exercise: replace this line with your code")


def padding_mask_partial(src):
    real = src != PAD  # noqa: F841
    raise NotImplementedError("Exercise: replace this line with your code")


@torch.no_grad()
def greedy_partial(model, src, max_len):
    state = model.encode(src)  # noqa: F841
    raise NotImplementedError("Exercise: replace this line with your code")


def additive_partial(att, s, h, mask):
    scores = att.v(torch.tanh(att.W1(h) + att.W2(s).unsqueeze(1))).squeeze(-1)  # noqa: F841
    raise NotImplementedError("Exercise: replace this line with your code")


def alignment_partial(weights, align):
    has_word = align >= 0  # noqa: F841
    raise NotImplementedError("Exercise: replace this line with your code")


@pytest.mark.parametrize(
    "check, partial",
    [
        (check_shift_right, shift_right_partial),
        (check_source_padding_mask, padding_mask_partial),
        (check_greedy_decode, greedy_partial),
        (check_additive_attention, additive_partial),
        (check_alignment_accuracy, alignment_partial),
    ],
)
def test_partial_work_is_not_called_not_attempted(check, partial):
    assert_caught(check, partial, "partial work", "unfinished branch")


def shift_with_where(tgt):
    first = torch.arange(tgt.shape[1], device=tgt.device)[None] == 0  # (1, n)
    return torch.where(first, torch.full_like(tgt, BOS), tgt.roll(1, dims=1))  # (batch, n)


def alignment_with_masked_select(weights, align):
    keep = align >= 0  # (batch, n)
    return torch.masked_select(weights.max(dim=-1).indices == align, keep).to(torch.float64).mean().item()


def test_review_right_answers_pass():
    assert check_shift_right(shift_with_where) is True
    assert check_source_padding_mask(lambda src: torch.logical_not(src.eq(PAD)).view(src.shape[0], 1, src.shape[1])) is True
    assert check_alignment_accuracy(alignment_with_masked_select) is True


def _greedy_loop(model, src, max_len, pick, steps=None):
    state = model.encode(src)
    ys = torch.full((src.shape[0], 1), BOS, dtype=torch.long, device=src.device)  # (batch, 1)
    for _ in range(max_len if steps is None else steps):
        logits = model.decode(ys, state).clone()  # (batch, t, vocab)
        logits[..., [PAD, BOS]] = float("-inf")
        ys = torch.cat([ys, pick(logits).reshape(-1, 1)], dim=1)  # (batch, t + 1)
        if (ys == EOS).any(dim=1).all():
            break
    return ys[:, 1:]


def test_greedy_one_step_too_many_is_named():
    wrong = lambda model, src, max_len: _greedy_loop(model, src, max_len, lambda x: x[:, -1].argmax(-1), steps=max_len + 1)  # noqa: E731
    assert_caught(check_greedy_decode, wrong, "step(s) too many", "range(max_len)")


def test_greedy_argmax_over_the_positions_is_named():
    wrong = lambda model, src, max_len: _greedy_loop(model, src, max_len, lambda x: x.argmax(1)[:, -1])  # noqa: E731
    assert_caught(check_greedy_decode, wrong, "argmax runs over the positions", "logits[:, -1].argmax(-1)")


def test_greedy_argmax_over_the_batch_is_named():
    wrong = lambda model, src, max_len: _greedy_loop(model, src, max_len, lambda x: x[:, -1].argmax(0))  # noqa: E731
    assert_caught(check_greedy_decode, wrong, "maximum over the vocabulary")


@torch.no_grad()
def greedy_preallocated(model, src, max_len):
    state = model.encode(src)
    ys = torch.full((src.shape[0], max_len + 1), PAD, dtype=torch.long, device=src.device)  # (batch, max_len + 1)
    ys[:, 0] = BOS
    for t in range(max_len):
        logits = model.decode(ys[:, : t + 1], state)[:, t]  # (batch, vocab)
        logits[:, PAD] = logits[:, BOS] = -float("inf")
        ys[:, t + 1] = logits.argmax(-1)
    return ys[:, 1:]


def test_greedy_preallocated_answer_passes():
    assert check_greedy_decode(greedy_preallocated) is True


def additive_multiplicative(att, s, h, mask):
    scores = (att.W1(h) * att.W2(s).unsqueeze(1)).sum(-1)  # (batch, m): a dot product, not an additive score
    weights = torch.softmax(scores.masked_fill(~mask, float("-inf")), -1)  # (batch, m)
    return (weights.unsqueeze(1) @ h).squeeze(1), weights


def test_additive_multiplicative_score_is_named():
    assert_caught(check_additive_attention, additive_multiplicative, "multiplicative", "tanh")


def test_shift_right_removing_eos_is_named():
    def wrong(tgt):
        shifted = torch.cat([torch.full_like(tgt[:, :1], BOS), tgt[:, :-1]], dim=1)  # (batch, n)
        return shifted.masked_fill(shifted == EOS, PAD)

    assert_caught(check_shift_right, wrong, "<eos> was removed instead of the last position")


# A tensor made on the notebook's `device` instead of the inputs': "meta" stands in for CUDA on a CPU-only machine.
_OTHER = "meta"


@torch.no_grad()
def greedy_on_another_device(model, src, max_len):
    return torch.full((src.shape[0], 1), EOS, dtype=torch.long, device=_OTHER)


def additive_on_another_device(att, s, h, mask):
    scores = att.v(torch.tanh(att.W1(h) + att.W2(s).unsqueeze(1))).squeeze(-1)  # (batch, m)
    weights = torch.softmax(scores.masked_fill(~mask, float("-inf")) + torch.zeros(1, dtype=h.dtype, device=_OTHER), -1)
    return (weights.unsqueeze(1) @ h).squeeze(1), weights


@pytest.mark.parametrize(
    "check, wrong",
    [
        (check_shift_right, lambda tgt: torch.cat([torch.full((tgt.shape[0], 1), BOS, device=_OTHER), tgt[:, :-1]], 1)),
        (check_shift_right, lambda tgt: torch.full(tgt.shape, BOS, dtype=torch.long, device=_OTHER)),
        (check_source_padding_mask, lambda src: (src != torch.tensor(PAD, device=_OTHER))[:, None]),
        (check_source_padding_mask, lambda src: torch.ones(src.shape[0], 1, src.shape[1], dtype=torch.bool, device=_OTHER)),
        (check_greedy_decode, greedy_on_another_device),
        (check_additive_attention, additive_on_another_device),
    ],
)
def test_a_tensor_made_on_another_device_is_named(check, wrong):
    assert_caught(check, wrong, "device")
