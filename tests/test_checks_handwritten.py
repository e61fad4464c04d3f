"""The checks of notebook 14 accept the reference weights and other right ones, and name the typical wrong ones."""

from __future__ import annotations

import math

import pytest
import torch

import helpers.handwritten.program as H
from helpers.checks import (
    check_copy_value,
    check_count_one_hot,
    check_count_steps,
    check_count_table,
    check_output_map,
    check_reverse_selector,
    check_same_token_selector,
    check_target_selector,
)
from tests.conftest import assert_caught, assert_not_attempted

# ---------------------------------------------------------------- helpers for wrong answers


def _gain(attn, scale):
    return scale * math.sqrt(attn.d_k)


def _stub(*args):
    raise NotImplementedError("Exercise: replace this line with your code")


def _transpose(module_attr):
    """Wrap a reference writer: write it, then transpose the named weights (w_q, w_k, w_v, w_o)."""

    def wrap(reference):
        def writer(attn, *args):
            reference(attn, *args)
            with torch.no_grad():
                for name in module_attr:
                    w = getattr(attn, name).weight
                    w.copy_(w.T.clone())

        return writer

    return wrap


def _plus(reference, extra):
    """The reference, then ``extra(attn, layout, scale)`` on top."""

    def writer(attn, layout, *rest):
        reference(attn, layout, *rest)
        with torch.no_grad():
            extra(attn, layout, *rest)

    return writer


def _quadratic_selector(target_one, target_pos, *, gain=None, sign=1.0, with_square=True):
    """Query i attends to t = target_one + target_pos * i by the quadratic score c (2 t j - j^2)."""

    def writer(attn, layout, scale):
        c = _gain(attn, scale) if gain is None else gain(attn, scale)
        with torch.no_grad():
            attn.w_q.weight[0, layout.one] = sign * 2 * target_one * c
            attn.w_q.weight[0, layout.pos] = sign * 2 * target_pos * c
            attn.w_k.weight[0, layout.pos] = 1.0
            if with_square:
                attn.w_q.weight[1, layout.one] = -sign * c
                attn.w_k.weight[1, layout.pos2] = 1.0

    return writer


# ---------------------------------------------------------------- the reverse selector


def test_reverse_selector_reference_passes_and_attends_to_the_mirror_position():
    assert check_reverse_selector(H.write_reverse_selector) is True
    block = H.hand_block()
    H.write_reverse_selector(block.self_attn)
    block(H.embed(torch.tensor([[3, 1, 4, 1, 5]])))
    assert block.attn_weights[0, 0, 1:].argmax(-1).tolist() == [5, 4, 3, 2, 1]


def test_reverse_selector_stub_is_not_attempted(capsys):
    assert_not_attempted(check_reverse_selector, _stub, capsys)
    assert_not_attempted(check_reverse_selector, ..., capsys)


def _reverse_on_keys(attn, layout, scale):
    """The gain on the keys instead of the queries."""
    c = _gain(attn, scale)
    with torch.no_grad():
        attn.w_q.weight[3, layout.one] = 2 * (H.LENGTH + 1)
        attn.w_q.weight[3, layout.pos] = -2
        attn.w_q.weight[7, layout.one] = -1
        attn.w_k.weight[3, layout.pos] = c
        attn.w_k.weight[7, layout.pos2] = c


def _reverse_with_bias(attn, layout, scale):
    """The constant part of the query from w_q.bias instead of layout.one, split gain, float64 arithmetic."""
    c = torch.tensor(scale, dtype=torch.float64) * attn.d_k**0.5
    root = c.sqrt().float()
    with torch.no_grad():
        attn.w_q.bias[0] = 12 * root
        attn.w_q.weight[0, layout.pos] = -2 * root
        attn.w_q.bias[1] = -root
        attn.w_k.weight[0, layout.pos] = root
        attn.w_k.weight[1, layout.pos2] = root


def _reverse_full_square(attn, layout, scale):
    """-c (j - t)^2 in full, with the -c t^2 term the softmax ignores: q = c [2t, -1, -t^2], k = [j, j^2, 1]."""
    c = _gain(attn, scale)
    with torch.no_grad():
        attn.w_q.weight[0, layout.one] = 12 * c
        attn.w_q.weight[0, layout.pos] = -2 * c
        attn.w_q.weight[1, layout.one] = -c
        attn.w_q.weight[2, layout.one] = -36 * c  # -(6 - i)^2 = -36 + 12 i - i^2
        attn.w_q.weight[2, layout.pos] = 12 * c
        attn.w_q.weight[2, layout.pos2] = -c
        attn.w_k.weight[0, layout.pos] = 1.0
        attn.w_k.weight[1, layout.pos2] = 1.0
        attn.w_k.weight[2, layout.one] = 1.0


def _reverse_with_data(attn, layout, scale):
    """Through .data, without torch.no_grad(): works too."""
    c = _gain(attn, scale)
    attn.w_q.weight.data[0, layout.one] = 12 * c
    attn.w_q.weight.data[0, layout.pos] = -2 * c
    attn.w_q.weight.data[1, layout.one] = -c
    attn.w_k.weight.data[0, layout.pos] = 1.0
    attn.w_k.weight.data[1, layout.pos2] = 1.0


@pytest.mark.parametrize("writer", [_reverse_on_keys, _reverse_with_bias, _reverse_full_square, _reverse_with_data])
def test_reverse_selector_other_right_answers_pass(writer):
    assert check_reverse_selector(writer) is True


def _reverse_hard_coded(attn, layout, scale):
    c = _gain(attn, scale)
    with torch.no_grad():
        attn.w_q.weight[0, 11] = 12 * c
        attn.w_q.weight[0, 12] = -2 * c
        attn.w_q.weight[1, 11] = -c
        attn.w_k.weight[0, 12] = 1.0
        attn.w_k.weight[1, 13] = 1.0


def _reverse_without_no_grad(attn, layout, scale):
    attn.w_q.weight[0, layout.one] = 12 * _gain(attn, scale)


def _reverse_reads_tokens(attn, layout, scale):
    H.write_reverse_selector(attn, layout, scale)
    with torch.no_grad():
        attn.w_q.weight[5, layout.tok] = torch.arange(10.0)
        attn.w_k.weight[5, layout.tok] = 1.0


def _reverse_writes_values(attn, layout, scale):
    H.write_reverse_selector(attn, layout, scale)
    H.write_copy_value(attn, layout)


def _reverse_nan(attn, layout, scale):
    H.write_reverse_selector(attn, layout, scale)
    with torch.no_grad():
        attn.w_q.weight[0, layout.one] = float("nan")


def _reverse_indices_swapped(attn, layout, scale):  # [feature, coordinate]: the columns 0 and 1 read token slots
    c = scale * math.sqrt(attn.d_k)
    with torch.no_grad():
        attn.w_q.weight[layout.one, 0] = 12 * c
        attn.w_q.weight[layout.pos, 0] = -2 * c
        attn.w_q.weight[layout.one, 1] = -c
        attn.w_k.weight[layout.pos, 0] = 1.0
        attn.w_k.weight[layout.pos2, 1] = 1.0


def _reverse_square_sign(attn, layout, scale):
    """Only the j² coefficient's sign flipped: the parabola opens upwards."""
    H.write_reverse_selector(attn, layout, scale)
    with torch.no_grad():
        attn.w_q.weight[1, layout.one] *= -1


def _reverse_gain_twice(attn, layout, scale):
    H.write_reverse_selector(attn, layout, scale)
    with torch.no_grad():
        attn.w_k.weight[0, layout.pos] = _gain(attn, scale)
        attn.w_k.weight[1, layout.pos2] = _gain(attn, scale)


def _reverse_no_square_query(attn, layout, scale):
    """The key reads [j, j²], but the query has no -c coordinate."""
    H.write_reverse_selector(attn, layout, scale)
    with torch.no_grad():
        attn.w_q.weight[1, layout.one] = 0.0


REVERSE_MISTAKES = {
    "mirrored around 2.5": (_quadratic_selector(5, -1), ["off by one", "5 - i", "6 - i"]),
    "mirrored around 3.5": (_quadratic_selector(7, -1), ["off by one", "7 - i"]),
    "its own position": (_quadratic_selector(0, 1), ["its own position"]),
    "previous token": (_quadratic_selector(-1, 1), ["previous position", "6 - i"]),
    "sign flipped": (_quadratic_selector(6, -1, sign=-1.0), ["wrong sign", "farthest"]),
    "no j^2": (_quadratic_selector(6, -1, with_square=False), ["ends", "pos2"]),
    "constant target": (_quadratic_selector(3, 0), ["every query attends to position 3", "layout.pos"]),
    "w_q transposed": (
        _transpose(["w_q"])(H.write_reverse_selector),
        ["w_q.weight", "transposed", "(out_features, in_features)"],
    ),
    "w_k transposed": (_transpose(["w_k"])(H.write_reverse_selector), ["w_k.weight", "transposed"]),
    "indices swapped, (in, out)": (_reverse_indices_swapped, ["w_q.weight and w_k.weight", "transposed"]),
    "forgot sqrt(d_k)": (_quadratic_selector(6, -1, gain=lambda a, s: s), ["sqrt(d_k)", "leaks"]),
    "scale too small": (_quadratic_selector(6, -1, gain=lambda a, s: s), ["only"]),
    "a quarter of the gain": (
        _quadratic_selector(6, -1, gain=lambda a, s: s * math.sqrt(a.d_k) / 4),
        ["lead the runner-up by only 5", "soft", "leaks"],
    ),
    "d_k instead of sqrt(d_k)": (_quadratic_selector(6, -1, gain=lambda a, s: s * a.d_k), ["d_k instead of sqrt(d_k)"]),
    "hard-coded scale": (_quadratic_selector(6, -1, gain=lambda a, s: 20 * math.sqrt(a.d_k)), ["scale=7.5", "`scale` argument"]),
    "hard-coded indices": (_reverse_hard_coded, ["another order", "layout.one"]),
    "no torch.no_grad": (_reverse_without_no_grad, ["torch.no_grad()"]),
    "reads the tokens": (_reverse_reads_tokens, ["change with the tokens", "layout.tok"]),
    "writes the value path too": (_reverse_writes_values, ["also writes", "w_v.weight"]),
    "does nothing": (lambda attn, layout, scale: None, ["still zero", "averages"]),
    "NaN": (_reverse_nan, ["NaN"]),
    "factor 2 forgotten": (_quadratic_selector(3, -0.5), ["factor 2 is missing", "t / 2"]),
    "factor 2 doubled": (_quadratic_selector(12, -2), ["factor 2 is doubled"]),
    "j² sign only": (_reverse_square_sign, ["opens upwards", "farthest", "-c"]),
    "gain in both w_q and w_k": (_reverse_gain_twice, ["both w_q and w_k", "twice"]),
    "key reads j², query ignores it": (_reverse_no_square_query, ["reads j²", "no weight"]),
}


@pytest.mark.parametrize("name", list(REVERSE_MISTAKES))
def test_reverse_selector_mistakes_are_named(name):
    writer, phrases = REVERSE_MISTAKES[name]
    message = assert_caught(check_reverse_selector, writer, "the selector (w_q, w_k)", *phrases)
    assert "Traceback" not in message


# ---------------------------------------------------------------- the value path


def test_copy_value_reference_passes():
    assert check_copy_value(H.write_copy_value) is True


def test_copy_value_stub_is_not_attempted(capsys):
    assert_not_attempted(check_copy_value, _stub, capsys)


def _copy_direct(attn, layout):
    """w_v writes the token straight into the out coordinates, w_o is the identity there."""
    with torch.no_grad():
        attn.w_v.weight[layout.out, layout.tok] = torch.eye(10)
        attn.w_o.weight[layout.out, layout.out] = torch.eye(10)


def _copy_through_other_coordinates(attn, layout):
    with torch.no_grad():
        perm = torch.randperm(31, generator=torch.Generator().manual_seed(0))[:10]
        attn.w_v.weight[perm, layout.tok] = 2 * torch.eye(10)
        attn.w_o.weight[layout.out, perm] = 0.5 * torch.eye(10)


@pytest.mark.parametrize("writer", [_copy_direct, _copy_through_other_coordinates])
def test_copy_value_other_right_answers_pass(writer):
    assert check_copy_value(writer) is True


def _copy(read="tok", write="out", factor=1.0, roll=0, flip=False):
    def writer(attn, layout):
        eye = torch.eye(10).roll(roll, dims=0)
        eye = eye.flip(0) if flip else eye
        with torch.no_grad():
            attn.w_v.weight[:10, getattr(layout, read)] = eye
            attn.w_o.weight[getattr(layout, write), :10] = factor * torch.eye(10)

    return writer


def _copy_hard_coded(attn, layout):
    with torch.no_grad():
        attn.w_v.weight[:10, 0:10] = torch.eye(10)
        attn.w_o.weight[21:31, :10] = torch.eye(10)


def _copy_w_v_transposed_in_shuffled(attn, layout):
    """w_v written as [tok, coordinates]: the same matrix in the standard layout (tok at 0..9), wrong elsewhere."""
    with torch.no_grad():
        attn.w_v.weight[layout.tok, :10] = torch.eye(10)
        attn.w_o.weight[layout.out, :10] = torch.eye(10)


def _copy_with_bias(attn, layout):
    H.write_copy_value(attn, layout)
    with torch.no_grad():
        attn.w_o.bias[layout.out] = 0.1


def _copy_and_select(attn, layout):
    H.write_copy_value(attn, layout)
    H.write_reverse_selector(attn, layout)


def _copy_also_onto_tok(attn, layout):
    H.write_copy_value(attn, layout)
    with torch.no_grad():
        attn.w_o.weight[layout.tok, :10] = torch.eye(10)


def _copy_one_row_late(attn, layout):
    with torch.no_grad():
        attn.w_v.weight[1:11, layout.tok] = torch.eye(10)
        attn.w_o.weight[layout.out, :10] = torch.eye(10)


COPY_MISTAKES = {
    "writes into tok": (_copy(write="tok"), ["into layout.tok", "layout.out"]),
    "reads out": (_copy(read="out"), ["reads layout.out instead of layout.tok"]),
    "off by one": (_copy(roll=1), ["off by one"]),
    "flipped": (_copy(flip=True), ["9 - a"]),
    "factor 2": (_copy(factor=2.0), ["factor 2"]),
    "w_o transposed": (_transpose(["w_o"])(H.write_copy_value), ["w_o.weight", "transposed"]),
    "both transposed": (_transpose(["w_v", "w_o"])(H.write_copy_value), ["transposed"]),
    "w_v transposed (shows in another layout)": (_copy_w_v_transposed_in_shuffled, ["w_v.weight", "transposed"]),
    "w_o still zero": (lambda attn, layout: attn.w_v.weight.data[:10, layout.tok].copy_(torch.eye(10)), ["w_o is still zero"]),
    "w_v still zero": (lambda attn, layout: attn.w_o.weight.data[layout.out, :10].copy_(torch.eye(10)), ["w_v is still zero"]),
    "hard-coded indices": (_copy_hard_coded, ["another order", "layout.tok"]),
    "a bias": (_copy_with_bias, ["biases", "out"]),
    "writes the selector too": (_copy_and_select, ["also writes", "w_q.weight"]),
    "also onto tok": (_copy_also_onto_tok, ["also writes", "tok <- tok"]),
    "does nothing": (lambda attn, layout: None, ["still zero"]),
    "identity one row late": (_copy_one_row_late, ["one row late", "token 9 is lost"]),
}


@pytest.mark.parametrize("name", list(COPY_MISTAKES))
def test_copy_value_mistakes_are_named(name):
    writer, phrases = COPY_MISTAKES[name]
    assert_caught(check_copy_value, writer, "the value path (w_v, w_o)", *phrases)


# ---------------------------------------------------------------- the output map


def test_output_map_reference_passes():
    assert check_output_map(H.write_output_map) is True


def test_output_map_stub_is_not_attempted(capsys):
    assert_not_attempted(check_output_map, _stub, capsys)


def _output_by_rows(unembed, slot):
    with torch.no_grad():
        for k, feature in enumerate(range(slot.start, slot.stop)):
            unembed.weight[k, feature] = 1.0


def _output_copy(unembed, slot):
    weight = torch.zeros_like(unembed.weight)
    weight[:, slot] = torch.eye(unembed.out_features)
    with torch.no_grad():
        unembed.weight.copy_(weight)


@pytest.mark.parametrize("writer", [_output_by_rows, _output_copy])
def test_output_map_other_right_answers_pass(writer):
    assert check_output_map(writer) is True


def _output(transform):
    def writer(unembed, slot):
        with torch.no_grad():
            unembed.weight[:, slot] = transform(torch.eye(slot.stop - slot.start))

    return writer


def _output_reads_tok(unembed, slot):
    with torch.no_grad():
        unembed.weight[:, H.LAYOUT.tok] = torch.eye(10)


def _output_transposed(unembed, slot):
    with torch.no_grad():
        unembed.weight[slot, :] = torch.eye(10)


def _output_fixed_width(unembed, slot):
    with torch.no_grad():
        unembed.weight[:, slot] = torch.eye(10)


def _output_hard_coded_slot(unembed, slot):
    with torch.no_grad():
        unembed.weight[:, 21 : 21 + unembed.out_features] = torch.eye(unembed.out_features)


def _output_one_early(unembed, slot):
    with torch.no_grad():
        unembed.weight[:, slot.start - 1 : slot.stop - 1] = torch.eye(slot.stop - slot.start)


def _output_whole_slot(unembed, slot):
    with torch.no_grad():
        unembed.weight[:, slot] = 1.0


def _output_hard_coded_ten(unembed, slot):
    with torch.no_grad():
        unembed.weight[:, 21:31] = torch.eye(10)


OUTPUT_MISTAKES = {
    "reads the input token": (_output_reads_tok, ["decodes layout.tok", "input unchanged"]),
    "transposed": (_output_transposed, ["(out_features, in_features)"]),
    "off by one": (_output(lambda e: e.roll(1, dims=0)), ["off by one"]),
    "negated": (_output(lambda e: -e), ["negated"]),
    "flipped": (_output(lambda e: e.flip(0)), ["flipped"]),
    "scaled": (_output(lambda e: 10 * e), ["10 times feature k"]),
    "fixed width": (_output_fixed_width, ["layout.count", "torch.eye(slot.stop - slot.start)"]),
    "ignores slot": (_output_hard_coded_slot, ["ignores its `slot` argument"]),
    "ignores slot, 10 wide": (_output_hard_coded_ten, ["ignores its `slot` argument"]),
    "one feature early": (_output_one_early, ["one feature early", "column 20"]),
    "whole slot filled": (_output_whole_slot, ["every logit reads every feature", "torch.eye"]),
    "does nothing": (lambda unembed, slot: None, ["still zero"]),
}


@pytest.mark.parametrize("name", list(OUTPUT_MISTAKES))
def test_output_map_mistakes_are_named(name):
    writer, phrases = OUTPUT_MISTAKES[name]
    assert_caught(check_output_map, writer, "the output map (unembed)", *phrases)


# ---------------------------------------------------------------- the histogram's selector


def test_same_token_selector_reference_passes():
    assert check_same_token_selector(H.write_same_token_selector) is True


def test_same_token_selector_stub_is_not_attempted(capsys):
    assert_not_attempted(check_same_token_selector, _stub, capsys)


def _same_token_with_bias(attn, layout, scale):
    """BOS's query coordinate from w_q.bias, the gain on the keys, other coordinates."""
    c = _gain(attn, scale)
    with torch.no_grad():
        attn.w_q.weight[20:30, layout.tok] = torch.eye(10)
        attn.w_q.bias[3] = 1.0
        attn.w_k.weight[20:30, layout.tok] = c * torch.eye(10)
        attn.w_k.weight[3, layout.bos] = c


def test_same_token_selector_other_right_answers_pass():
    assert check_same_token_selector(_same_token_with_bias) is True


def _same_token(token_block, bos_query=1.0, bos_key="bos", gain=None):
    def writer(attn, layout, scale):
        c = _gain(attn, scale) if gain is None else gain(attn, scale)
        with torch.no_grad():
            attn.w_q.weight[:10, layout.tok] = c * token_block
            attn.w_k.weight[:10, layout.tok] = torch.eye(10)
            if bos_query:
                attn.w_q.weight[10, layout.one] = bos_query * c
                attn.w_k.weight[10, getattr(layout, bos_key)] = 1.0

    return writer


def _same_token_bos_on_token_0(attn, layout, scale):
    """BOS's coordinate is row 0, which token 0 uses too."""
    c = _gain(attn, scale)
    with torch.no_grad():
        attn.w_q.weight[:10, layout.tok] = c * torch.eye(10)
        attn.w_k.weight[:10, layout.tok] = torch.eye(10)
        attn.w_q.weight[0, layout.one] = c
        attn.w_k.weight[0, layout.bos] = 1.0


def _same_token_gain_twice(attn, layout, scale):
    H.write_same_token_selector(attn, layout, scale)
    with torch.no_grad():
        attn.w_k.weight.mul_(_gain(attn, scale))


SAME_TOKEN_MISTAKES = {
    "no BOS": (_same_token(torch.eye(10), bos_query=0.0), ["BOS scores", "below", "1 / (1 + count)"]),
    "BOS twice as strong": (_same_token(torch.eye(10), bos_query=2.0), ["BOS scores", "above"]),
    "BOS key reads one": (_same_token(torch.eye(10), bos_key="one"), ["BOS scores", "below"]),
    "different tokens": (_same_token(1 - torch.eye(10)), ["*different* token"]),
    "own position": (_quadratic_selector(0, 1), ["its own position"]),
    "w_q transposed": (
        _transpose(["w_q"])(H.write_same_token_selector),
        ["w_q.weight", "transposed"],
    ),
    "both transposed": (_transpose(["w_q", "w_k"])(H.write_same_token_selector), ["transposed"]),
    "forgot sqrt(d_k)": (_same_token(torch.eye(10), gain=lambda a, s: s), ["sqrt(d_k)"]),
    "the smaller selector": (H.write_smaller_selector, ["should be BOS and every position holding its token"]),
    "hard-coded indices": (lambda attn, layout, scale: H.write_same_token_selector(attn, H.LAYOUT, scale), ["another order"]),
    "hard-coded scale": (lambda attn, layout, scale: H.write_same_token_selector(attn, layout, 20.0), ["`scale` argument"]),
    "BOS shares token 0's coordinate": (_same_token_bos_on_token_0, ["BOS shares query/key coordinate 0 with token 0", "own"]),
    "gain in both w_q and w_k": (_same_token_gain_twice, ["both w_q and w_k"]),
}


@pytest.mark.parametrize("name", list(SAME_TOKEN_MISTAKES))
def test_same_token_selector_mistakes_are_named(name):
    writer, phrases = SAME_TOKEN_MISTAKES[name]
    assert_caught(check_same_token_selector, writer, "the selector (w_q, w_k)", *phrases)


# ---------------------------------------------------------------- the count table


def test_count_table_reference_passes_and_decodes_every_count():
    assert check_count_table(H.write_count_table) is True
    ff = H.hand_block().ff
    H.write_count_table(ff)
    x = torch.zeros(6, H.LAYOUT.d_model)
    x[:, H.LAYOUT.frac] = H.table_values().float()
    assert ff(x)[:, H.LAYOUT.count].argmax(-1).tolist() == list(range(6))


def test_count_table_stub_is_not_attempted(capsys):
    assert_not_attempted(check_count_table, _stub, capsys)


def _table_permuted_units(ff, layout):
    """The same table with the hidden units in another order."""
    H.write_count_table(ff, layout)
    perm = torch.randperm(H.D_FF, generator=torch.Generator().manual_seed(3))
    with torch.no_grad():
        ff.linear1.weight.copy_(ff.linear1.weight[perm].clone())
        ff.linear1.bias.copy_(ff.linear1.bias[perm].clone())
        ff.linear2.weight.copy_(ff.linear2.weight[:, perm].clone())


@pytest.mark.parametrize(
    "writer",
    [
        lambda ff, layout: H.write_count_table(ff, layout, sharpness=50.0),
        lambda ff, layout: H.write_count_table(ff, layout, sharpness=1000.0),
        _table_permuted_units,
    ],
)
def test_count_table_other_right_answers_pass(writer):
    assert check_count_table(writer) is True


def _table(thresholds=None, sharpness=100.0, shift=0, reverse=False, bias=True, read="frac", write="count", direction=1.0):
    def writer(ff, layout):
        cut = H.table_thresholds().tolist() if thresholds is None else thresholds
        rows = list(range(getattr(layout, write).start, getattr(layout, write).stop))
        rows = rows[::-1] if reverse else rows
        rows = rows[-shift:] + rows[:-shift] if shift else rows
        with torch.no_grad():
            for k, threshold in enumerate(cut):
                up, down = 2 * k, 2 * k + 1
                ff.linear1.weight[up, getattr(layout, read)] = -sharpness * direction
                ff.linear1.bias[up] = direction * sharpness * threshold + 0.5
                ff.linear1.weight[down, getattr(layout, read)] = -sharpness * direction
                ff.linear1.bias[down] = direction * sharpness * threshold - 0.5
                ff.linear2.weight[rows[k], up] -= 1.0
                ff.linear2.weight[rows[k], down] += 1.0
                ff.linear2.weight[rows[k + 1], up] += 1.0
                ff.linear2.weight[rows[k + 1], down] -= 1.0
            if bias:
                ff.linear2.bias[rows[0]] = 1.0

    return writer


def _table_variant(
    *, weight_sign=1.0, shifts=(0.5, -0.5), reverse_thresholds=False, out_sign=1.0, one_relu=False, rows_shift=0, as_number=False
):
    """A count table with one mistake: the steps (linear1) and the one-hot (linear2) written out."""

    def writer(ff, layout):
        cut = H.table_thresholds().tolist()
        cut = cut[::-1] if reverse_thresholds else cut
        first = layout.count.start + rows_shift
        with torch.no_grad():
            for k, threshold in enumerate(cut):
                for unit, shift in ((2 * k, shifts[0]), (2 * k + 1, shifts[1])):
                    if one_relu and unit % 2:
                        continue
                    ff.linear1.weight[unit, layout.frac] = -100.0 * weight_sign
                    ff.linear1.bias[unit] = weight_sign * 100.0 * threshold + shift
            for k in range(H.LENGTH):
                for unit, sign in ((2 * k, 1.0), (2 * k + 1, -1.0)):
                    if as_number:
                        ff.linear2.weight[layout.count.start, unit] = sign
                        continue
                    ff.linear2.weight[first + k, unit] = -sign * out_sign
                    ff.linear2.weight[first + k + 1, unit] = sign * out_sign
            if not as_number:
                ff.linear2.bias[first] = 1.0

    return writer


def _table_transposed(ff, layout):
    with torch.no_grad():
        ff.linear1.weight[layout.frac, 0] = -100.0


def _table_hard_coded(ff, layout):
    H.write_count_table(ff, H.LAYOUT)


TABLE_MISTAKES = {
    "thresholds on the values": (_table(thresholds=H.table_values()[1:].tolist()), ["1/2", "halfway"]),
    "ramps too gentle": (_table(sharpness=10.0), ["too gentle", "SHARPNESS = 100"]),
    "misaligned by one": (_table(shift=1), ["misaligned by one", "c - 1"]),
    "misaligned the other way": (_table(shift=-1), ["misaligned by one", "c + 1"]),
    "reversed": (_table(reverse=True), ["reversed"]),
    "no bias for count 0": (_table(bias=False), ["count 0", "bias"]),
    "reads pos": (_table(read="pos"), ["read layout.pos", "must read layout.frac"]),
    "writes into out": (_table(write="out"), ["writes into layout.out"]),
    "linear1 transposed": (_table_transposed, ["(out_features, in_features)"]),
    "hard-coded indices": (_table_hard_coded, ["another order", "layout.frac"]),
    "does nothing": (lambda ff, layout: None, ["still zero"]),
    "inverted steps": (_table_variant(weight_sign=-1.0, shifts=(0.5, -0.5)), ["inverted", "-SHARPNESS"]),
    "one ReLU per threshold": (_table_variant(one_relu=True), ["one ReLU per threshold"]),
    "output signs swapped": (_table_variant(out_sign=-1.0), ["signs in linear2 are swapped"]),
    "count written as a number": (_table_variant(as_number=True), ["count as a number", "one-hot"]),
    "thresholds reversed": (_table_variant(reverse_thresholds=True), ["thresholds are reversed"]),
    "two ReLUs that cancel": (_table_variant(shifts=(0.5, 0.5)), ["cancel", "same weight and bias"]),
    "one-hot one slot too far": (_table_variant(rows_shift=1), ["one slot too far", "layout.out"]),
}


@pytest.mark.parametrize("name", list(TABLE_MISTAKES))
def test_count_table_mistakes_are_named(name):
    writer, phrases = TABLE_MISTAKES[name]
    assert_caught(check_count_table, writer, "the lookup table (ff.linear1, ff.linear2)", *phrases)


# ---------------------------------------------------------------- sort's second selector


def test_target_selector_reference_passes():
    assert check_target_selector(H.write_target_selector) is True


def test_target_selector_stub_is_not_attempted(capsys):
    assert_not_attempted(check_target_selector, _stub, capsys)


def _target(offset=1, descending=False, bos_penalty=1.0, gain=None, two=2, sign=1.0, key="count"):
    """Query i attends to count m where m + offset = i (descending: m = 5 - i)."""

    def writer(attn, layout, scale):
        c = _gain(attn, scale) if gain is None else gain(attn, scale)
        slot = layout.slot(key)
        with torch.no_grad():
            for m in range(H.LENGTH + 1):
                t = (H.LENGTH - m) if descending else m + offset
                attn.w_q.weight[m, layout.pos] = sign * two * t * c
                attn.w_q.weight[m, layout.one] = -sign * (t**2) * c
                attn.w_k.weight[m, slot.start + m] = 1.0
            attn.w_q.weight[H.LENGTH + 1, layout.one] = -bos_penalty * c
            attn.w_k.weight[H.LENGTH + 1, layout.bos] = 1.0

    return writer


def _target_one_hot_positions(attn, layout, scale):
    """Another right construction: score c [m = i - 1] from a lookup of pos (one query row per count, exact at 1..5)."""
    c = _gain(attn, scale)
    count = layout.count
    with torch.no_grad():
        for m in range(H.LENGTH + 1):
            t = m + 1
            # -(i - t)^2 + const in the query, paired with count m in the key: the same scores up to a constant per query
            attn.w_q.weight[m, layout.pos] = 2 * t * c
            attn.w_q.weight[m, layout.one] = -(t**2) * c + 5 * c
            attn.w_k.weight[m, count.start + m] = 1.0
        attn.w_q.weight[H.LENGTH + 1, layout.one] = -6 * c
        attn.w_k.weight[H.LENGTH + 1, layout.bos] = 1.0


def test_target_selector_other_right_answers_pass():
    assert check_target_selector(_target_one_hot_positions) is True


TARGET_MISTAKES = {
    "off by one": (_target(offset=0), ["off by one", "i - 1"]),
    "descending": (_target(descending=True), ["reversed", "5 - i"]),
    "BOS not excluded": (_target(bos_penalty=0.0), ["ties BOS", "layout.bos"]),
    "BOS favoured": (_target(bos_penalty=-2.0), ["attend to BOS"]),
    "BOS penalty too small": (_target(bos_penalty=0.5), ["BOS trails by only 10", "penalty"]),
    "own position": (_quadratic_selector(0, 1), ["own position", "layout.count"]),
    "w_q transposed": (_transpose(["w_q"])(H.write_target_selector), ["w_q.weight", "transposed"]),
    "forgot sqrt(d_k)": (_target(gain=lambda a, s: s), ["sqrt(d_k)"]),
    "hard-coded scale": (_target(gain=lambda a, s: 20 * math.sqrt(a.d_k)), ["`scale` argument"]),
    "hard-coded indices": (lambda attn, layout, scale: H.write_target_selector(attn, H.LAYOUT, scale), ["another order"]),
    "off by one the other way": (_target(offset=2), ["off by one", "count i - 2"]),
    "factor 2 forgotten": (_target(two=1), ["factor 2 is missing"]),
    "parabola upside down": (_target(sign=-1.0), ["opens upwards", "signs"]),
    "key reads tok": (_target(key="tok"), ["key reads layout.tok", "layout.count"]),
}


@pytest.mark.parametrize("name", list(TARGET_MISTAKES))
def test_target_selector_mistakes_are_named(name):
    writer, phrases = TARGET_MISTAKES[name]
    assert_caught(check_target_selector, writer, "the selector (w_q, w_k)", *phrases)


# ---------------------------------------------------------------- the count table in two steps: linear1, then linear2


def test_count_steps_reference_passes():
    assert check_count_steps(H.write_steps) is True


def test_count_steps_stub_is_not_attempted(capsys):
    assert_not_attempted(check_count_steps, _stub, capsys)


def _steps_only(writer):
    """linear1 of a whole-table writer, linear2 left at zero."""

    def write(ff, layout):
        writer(ff, layout)
        with torch.no_grad():
            ff.linear2.weight.zero_()
            ff.linear2.bias.zero_()

    return write


def _steps_in_loop(ff, layout):
    """Another way: the weights as one tensor assignment, the biases from table_thresholds() as a tensor."""
    thresholds = H.table_thresholds().float()
    with torch.no_grad():
        ff.linear1.weight[:, layout.frac] = -100.0
        ff.linear1.bias[0::2] = 100.0 * thresholds + 0.5
        ff.linear1.bias[1::2] = 100.0 * thresholds - 0.5


@pytest.mark.parametrize(
    "writer",
    [
        lambda ff, layout: H.write_steps(ff, layout, sharpness=50.0),
        lambda ff, layout: H.write_steps(ff, layout, sharpness=1000.0),
        _steps_in_loop,
    ],
)
def test_count_steps_other_right_answers_pass(writer):
    assert check_count_steps(writer) is True


def _steps_no_threshold(ff, layout):
    """The biases without SHARPNESS * threshold: every step switches near frac = 0."""
    with torch.no_grad():
        for k in range(H.LENGTH):
            ff.linear1.weight[2 * k : 2 * k + 2, layout.frac] = -100.0
            ff.linear1.bias[2 * k] = 0.5
            ff.linear1.bias[2 * k + 1] = -0.5


STEPS_MISTAKES = {
    "inverted steps": (_steps_only(_table_variant(weight_sign=-1.0)), ["inverted"]),
    "one ReLU per threshold": (_steps_only(_table_variant(one_relu=True)), ["one ReLU per threshold", "relu(u - 1/2)"]),
    "thresholds reversed": (_steps_only(_table_variant(reverse_thresholds=True)), ["thresholds are reversed"]),
    "two ReLUs that cancel": (_steps_only(_table_variant(shifts=(0.5, 0.5))), ["cancel"]),
    "pair swapped": (_steps_only(_table_variant(shifts=(-0.5, 0.5))), ["upside down", "swapped"]),
    "thresholds on the values": (_steps_only(_table(thresholds=H.table_values()[1:].tolist())), ["table value"]),
    "ramps too gentle": (_steps_only(_table(sharpness=10.0)), ["too gentle"]),
    "reads pos": (_steps_only(_table(read="pos")), ["must read layout.frac"]),
    "no threshold in the bias": (_steps_no_threshold, ["never switches", "bias"]),
    "hard-coded indices": (lambda ff, layout: H.write_steps(ff, H.LAYOUT), ["another order", "layout.frac"]),
    "writes linear2 too": (H.write_count_table, ["also writes linear2"]),
    "does nothing": (lambda ff, layout: None, ["still zero"]),
}


@pytest.mark.parametrize("name", list(STEPS_MISTAKES))
def test_count_steps_mistakes_are_named(name):
    writer, phrases = STEPS_MISTAKES[name]
    assert_caught(check_count_steps, writer, "the steps (ff.linear1)", *phrases)


def test_count_one_hot_reference_passes():
    assert check_count_one_hot(H.write_one_hot) is True


def test_count_one_hot_stub_is_not_attempted(capsys):
    assert_not_attempted(check_count_one_hot, _stub, capsys)


def _one_hot_accumulated(ff, layout):
    """With += and -=, step by step, and the bias through a one-hot vector."""
    first = layout.count.start
    with torch.no_grad():
        for k in range(H.LENGTH):
            ff.linear2.weight[first + k, 2 * k] -= 1.0
            ff.linear2.weight[first + k, 2 * k + 1] += 1.0
            ff.linear2.weight[first + k + 1, 2 * k] += 1.0
            ff.linear2.weight[first + k + 1, 2 * k + 1] -= 1.0
        ff.linear2.bias += torch.nn.functional.one_hot(torch.tensor(first), layout.d_model).float()


def test_count_one_hot_other_right_answers_pass():
    assert check_count_one_hot(_one_hot_accumulated) is True


def _linear2_only(writer):
    """linear2 of a whole-table writer, on top of the reference steps."""

    def write(ff, layout):
        scratch = H.hand_block(layout).ff
        writer(scratch, layout)
        with torch.no_grad():
            ff.linear2.weight.copy_(scratch.linear2.weight)
            ff.linear2.bias.copy_(scratch.linear2.bias)

    return write


ONE_HOT_MISTAKES = {
    "signs swapped": (_linear2_only(_table_variant(out_sign=-1.0)), ["signs in linear2 are swapped"]),
    "count as a number": (_linear2_only(_table_variant(as_number=True)), ["count as a number"]),
    "one slot too far": (_linear2_only(_table_variant(rows_shift=1)), ["one slot too far", "layout.out"]),
    "no bias": (_linear2_only(_table(bias=False)), ["count 0", "bias"]),
    "reversed": (_linear2_only(_table(reverse=True)), ["reversed"]),
    "writes into out": (_linear2_only(_table(write="out")), ["writes into layout.out"]),
    "hard-coded indices": (lambda ff, layout: H.write_one_hot(ff, H.LAYOUT), ["another order", "layout.count"]),
    "changes linear1": (lambda ff, layout: H.write_count_table(ff, layout, sharpness=50.0), ["changes linear1"]),
    "does nothing": (lambda ff, layout: None, ["linear2 is still zero"]),
}


@pytest.mark.parametrize("name", list(ONE_HOT_MISTAKES))
def test_count_one_hot_mistakes_are_named(name):
    writer, phrases = ONE_HOT_MISTAKES[name]
    assert_caught(check_count_one_hot, writer, "the one-hot (ff.linear2)", *phrases)
