"""The checks of notebook 01 (attention shapes): right answers pass, stubs are 'not attempted', typical mistakes are named."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from torch import nn

from helpers.attention import attention_column_layout as reference_attention_column_layout
from helpers.attention import mha_parameter_count as reference_mha_parameter_count
from helpers.attention import split_heads as reference_split_heads
from helpers.checks import ExerciseFailed
from helpers.checks.multihead import check_split_heads
from helpers.checks.shapes import (
    check_attention_column_layout,
    check_column_layout_shapes,
    check_matmul_shape,
    check_mha_parameter_count,
    check_multi_head_shapes,
    check_numerator_layout,
    check_row_layout_shapes,
)
from tests.conftest import assert_caught, assert_not_attempted


def star(check):
    """A one-argument version of a check that takes several answers (for assert_caught)."""
    return lambda answers: check(*answers)


# ---------------------------------------------------------------- warm-up: matrix product


def test_matmul_shape(capsys):
    assert check_matmul_shape((3, 5)) is True
    assert check_matmul_shape(torch.Size([3, 5])) is True
    assert check_matmul_shape([3, 5]) is True
    assert_not_attempted(check_matmul_shape, ..., capsys)


@pytest.mark.parametrize(
    "answer, phrase",
    [
        ((5, 3), "transpose"),
        ((3, 8), "shape of X"),
        ((8, 5), "shape of W"),
        ((3, 8, 5), "inner"),
        ((3, 3), "columns from W"),
        ((15,), "two sizes"),
        (15, "the number 15"),
        ((7,), "has 1 axes; it should have 2"),
        ("(3, 5)", "string"),
        ((3, 5.0), "whole numbers"),
        ((4, 5), "axis 0 (size 4) is wrong"),
    ],
)
def test_matmul_shape_mistakes(answer, phrase):
    assert_caught(check_matmul_shape, answer, phrase)


# ---------------------------------------------------------------- row layout

ROW_RIGHT = ((3, 5), (4, 5), (4, 6), (3, 4), (3, 6))


def test_row_layout(capsys):
    assert check_row_layout_shapes(*ROW_RIGHT) is True
    assert_not_attempted(star(check_row_layout_shapes), (...,) * 5, capsys)
    assert_not_attempted(star(check_row_layout_shapes), ((3, 5), ..., ..., ..., ...), capsys)


def _row(**changes):
    names = ["q", "k", "v", "scores", "out"]
    return tuple(changes.get(name, right) for name, right in zip(names, ROW_RIGHT, strict=True))


@pytest.mark.parametrize(
    "answers, phrases",
    [
        (_row(q=(5, 3)), ["shape of Q", "transposed", "tokens are rows"]),
        (_row(q=(8, 5)), ["shape of Q", "weight W_Q"]),
        (_row(k=(3, 5)), ["shape of K", "cross-attention"]),
        (_row(k=(5, 4)), ["shape of K", "K^T"]),
        (_row(v=(4, 5)), ["shape of V", "d_v need not equal d_k"]),
        (_row(scores=(4, 3)), ["shape of the scores", "transposed"]),
        (_row(scores=(3, 3)), ["shape of the scores", "only for self-attention"]),
        (_row(scores=(5, 5)), ["shape of the scores", "relates features"]),
        (_row(out=(3, 5)), ["shape of the output", "d_v = 6, not d_k = 5"]),
        (_row(out=(3, 8)), ["shape of the output", "no W_O"]),
        (_row(out=(4, 6)), ["shape of the output", "one output row per query"]),
        (_row(out=(2, 6)), ["shape of the output", "axis 0 (size 2) is wrong", "Recall"]),
    ],
)
def test_row_layout_mistakes(answers, phrases):
    assert_caught(star(check_row_layout_shapes), answers, *phrases)


def test_generic_shape_messages_do_not_give_the_answer_away():
    for answers, right in [(_row(out=(2, 6)), "(3, 6)"), (_row(q=(3, 7)), "(3, 5)"), (_row(scores=(3, 4, 1)), "(3, 4)")]:
        message = assert_caught(star(check_row_layout_shapes), answers)
        assert right not in message, message


# ---------------------------------------------------------------- column layout

COL_RIGHT = ((768, 6), (768, 6), (768, 6), (6, 6), (768, 6))


def test_column_layout(capsys):
    assert check_column_layout_shapes(*COL_RIGHT) is True
    assert_not_attempted(star(check_column_layout_shapes), (...,) * 5, capsys)


def _col(**changes):
    names = ["q", "k", "v", "attn", "out"]
    return tuple(changes.get(name, right) for name, right in zip(names, COL_RIGHT, strict=True))


@pytest.mark.parametrize(
    "answers, phrases",
    [
        (_col(attn=(768, 768)), ["shape of the attention matrix", "mixes features", "K^T Q"]),
        (_col(q=(6, 768)), ["shape of Q", "row layout"]),
        (_col(k=(768, 768)), ["shape of K", "shape of the weight W^K"]),
        (_col(out=(6, 768)), ["shape of the output", "transposed", "tokens as columns"]),
        (_col(out=(6, 6)), ["shape of the output", "attention matrix"]),
        (_col(out=(768, 768)), ["shape of the output", "feature-mixing"]),
        (_col(attn=(6, 768)), ["shape of the attention matrix", "relates tokens to tokens"]),
        (_col(v=(64, 6)), ["shape of V", "one head"]),
        (_col(attn=(5, 5)), ["shape of the attention matrix", "axis 0 (size 5) and axis 1 (size 5) are wrong"]),
    ],
)
def test_column_layout_mistakes(answers, phrases):
    assert_caught(star(check_column_layout_shapes), answers, *phrases)


# ---------------------------------------------------------------- attention in the column layout


def test_attention_column_layout(capsys):
    assert check_attention_column_layout(reference_attention_column_layout) is True
    assert check_attention_column_layout(_col_attn("float32 result")) is True  # a float32 answer, judged at float32 precision
    # a float64 answer computed in float32 is named as the precision problem it is (one dtype rule, issue 36)
    assert_caught(check_attention_column_layout, _col_attn("float32"), "precision problem", "dtype=x.dtype")

    def stub(X, W_q, W_k, W_v):
        raise NotImplementedError

    assert_not_attempted(check_attention_column_layout, stub, capsys)
    assert_not_attempted(check_attention_column_layout, ..., capsys)


def _col_attn(mistake):
    def fn(X, W_q, W_k, W_v):
        Q, K, V = W_q @ X, W_k @ X, W_v @ X
        d_k = Q.shape[0]
        if mistake == "wrong_axis":
            return V @ torch.softmax(K.T @ Q / math.sqrt(d_k), dim=1)
        if mistake == "no_scale":
            return V @ torch.softmax(K.T @ Q, dim=0)
        if mistake == "transposed_A":
            return V @ torch.softmax(Q.T @ K / math.sqrt(d_k), dim=1)
        if mistake == "feature_mixing":
            return torch.softmax(Q @ K.T / math.sqrt(d_k), dim=-1) @ V
        if mistake == "row_output":
            return (V @ torch.softmax(K.T @ Q / math.sqrt(d_k), dim=0)).T
        if mistake == "scale_d_model":
            return V @ torch.softmax(K.T @ Q / math.sqrt(X.shape[0]), dim=0)
        if mistake == "no_softmax":
            return V @ (K.T @ Q / math.sqrt(d_k))
        if mistake == "w_transposed":
            Q, K, V = W_q.T @ X, W_k.T @ X, W_v.T @ X
            return V @ torch.softmax(K.T @ Q / math.sqrt(d_k), dim=0)
        if mistake == "x_as_values":
            return X @ torch.softmax(K.T @ Q / math.sqrt(d_k), dim=0)
        if mistake == "scale_d_v":
            return V @ torch.softmax(K.T @ Q / math.sqrt(V.shape[0]), dim=0)
        if mistake == "float32":
            return (V.float() @ torch.softmax(K.T.float() @ Q.float() / math.sqrt(d_k), dim=0)).double()
        if mistake == "float32 result":
            return V.float() @ torch.softmax(K.T.float() @ Q.float() / math.sqrt(d_k), dim=0)
        if mistake == "attn_matrix":
            return Q @ K.T
        if mistake == "scaled_by_100":
            scores = K.T @ Q / math.sqrt(d_k) * 100
            return V @ (torch.exp(scores) / torch.exp(scores).sum(0))
        if mistake == "numpy":
            return (V @ torch.softmax(K.T @ Q / math.sqrt(d_k), dim=0)).numpy()
        if mistake == "naive_softmax":
            e = torch.exp(K.T @ Q / math.sqrt(d_k))
            return V @ (e / e.sum(0, keepdim=True))
        raise AssertionError(mistake)

    fn.__name__ = "attention_column_layout"
    return fn


@pytest.mark.parametrize(
    "mistake, phrases",
    [
        ("wrong_axis", ["wrong axis", "dim=0"]),
        ("no_scale", ["missing 1/sqrt(d_k) scale"]),
        ("transposed_A", ["transposed"]),
        ("feature_mixing", ["relates features, not tokens", "K^T Q"]),
        ("row_output", ["tokens as rows"]),
        ("scale_d_model", ["sqrt(d_model)", "d_k = W_q.shape[0]"]),
        ("no_softmax", ["no softmax"]),
        ("w_transposed", ["Q = W^Q X"]),
        ("attn_matrix", ["features by features"]),
        ("x_as_values", ["values are X itself"]),
        ("scale_d_v", ["scaled with d_v"]),
        ("scaled_by_100", ["differs from the reference"]),
        ("numpy", ["torch.Tensor", "ndarray"]),
        ("naive_softmax", ["NaN", "exp overflowed"]),
    ],
)
def test_attention_column_layout_mistakes(mistake, phrases):
    assert_caught(check_attention_column_layout, _col_attn(mistake), *phrases)


def test_attention_column_layout_student_error_is_reported():
    def broken(X, W_q, W_k, W_v):
        return (W_q @ X) @ (W_k @ X)  # shapes do not match: a RuntimeError inside the student's code

    assert_caught(check_attention_column_layout, broken, "raised RuntimeError")


# ---------------------------------------------------------------- numerator layout


def test_numerator_layout(capsys):
    assert check_numerator_layout((4, 3), (6, 3), 1 / math.sqrt(5)) is True
    assert check_numerator_layout((4, 3), (6, 3), 0.4472) is True
    assert check_numerator_layout((4, 3), (6, 3), torch.tensor(5.0).rsqrt()) is True
    assert_not_attempted(star(check_numerator_layout), (..., ..., ...), capsys)
    assert_not_attempted(star(check_numerator_layout), ((4, 3), (6, 3), ...), capsys)


@pytest.mark.parametrize(
    "answers, phrases",
    [
        (((3, 4), (6, 3), 0.4472), ["shape of K^T Q", "Q^T K"]),
        (((5, 5), (6, 3), 0.4472), ["shape of K^T Q", "features"]),
        (((4, 3), (3, 6), 0.4472), ["shape of H", "transposed"]),
        (((4, 3), (5, 3), 0.4472), ["shape of H", "t = 6, not d = 5"]),
        (((4, 3), (6, 4), 0.4472), ["shape of H", "per query"]),
        (((4, 3), (6, 3), math.sqrt(5)), ["beta", "inverse"]),
        (((4, 3), (6, 3), 0.2), ["beta", "not 1 / d"]),
        (((4, 3), (6, 3), 1), ["beta", "unscaled"]),
        (((4, 3), (6, 3), 1 / math.sqrt(6)), ["beta", "not t"]),
        (((4, 3), (6, 3), 0.7), ["beta", "inverse temperature", "0.4472"]),
        (((4, 3), (6, 3), "1/sqrt(5)"), ["beta should be a number"]),
        (((4, 3), (6, 3), 0.447), ["too coarse", "relative error of 1e-4", "at least 4 decimals"]),
        (((4, 3), (6, 3), 0.45), ["too coarse", "1e-4"]),
        (((4, 3), (6, 3), 2.24), ["sqrt(d), the inverse", "rounded too coarsely"]),
    ],
)
def test_numerator_layout_mistakes(answers, phrases):
    assert_caught(star(check_numerator_layout), answers, *phrases)


# ---------------------------------------------------------------- multi-head shapes

MH_RIGHT = (64, (10, 64), (10, 10), (10, 64), (10, 512))


def test_multi_head_shapes(capsys):
    assert check_multi_head_shapes(*MH_RIGHT) is True
    assert_not_attempted(star(check_multi_head_shapes), (...,) * 5, capsys)


def _mh(**changes):
    names = ["d_k", "q", "scores", "out", "concat"]
    return tuple(changes.get(name, right) for name, right in zip(names, MH_RIGHT, strict=True))


@pytest.mark.parametrize(
    "answers, phrases",
    [
        (_mh(d_k=512), ["d_k", "that is d_model"]),
        (_mh(d_k=8), ["number of heads"]),
        (_mh(d_k=4096), ["not d_model * h"]),
        (_mh(q=(10, 512)), ["one head's Q_i", "before splitting"]),
        (_mh(q=(8, 10, 64)), ["one head's Q_i", "all 8 heads"]),
        (_mh(q=(1, 10, 64)), ["one head's Q_i", "no batch axis"]),
        (_mh(q=(10, 3)), ["one head's Q_i", "axis 1 (size 3) is wrong"]),
        (_mh(scores=(64, 64)), ["one head's scores", "relate features"]),
        (_mh(out=(10, 512)), ["one head's output", "after concatenating"]),
        (_mh(concat=(10, 64)), ["shape of the concatenation", "8 * 64 = 512"]),
        (_mh(concat=(8, 10, 64)), ["shape of the concatenation", "stacked, not concatenated"]),
        (_mh(concat=(80, 64)), ["shape of the concatenation", "wrong axis"]),
        (_mh(d_k=(64,)), ["d_k is one number"]),
    ],
)
def test_multi_head_shapes_mistakes(answers, phrases):
    assert_caught(star(check_multi_head_shapes), answers, *phrases)


# ---------------------------------------------------------------- split heads


def test_head_split(capsys):
    assert check_split_heads(reference_split_heads) is True
    assert check_split_heads(lambda x, h: x.unflatten(-1, (h, -1)).permute(0, 2, 1, 3)) is True
    assert check_split_heads(lambda x, h: x.transpose(1, 2).reshape(x.shape[0], h, -1, x.shape[1]).transpose(2, 3)) is True

    def stub(x, num_heads):
        raise NotImplementedError

    assert_not_attempted(check_split_heads, stub, capsys)


def _split(mistake):
    def split_heads(x, num_heads):
        b, n, d = x.shape
        d_k = d // num_heads
        return {
            "no_transpose_reshape": lambda: x.reshape(b, num_heads, n, d_k),
            "no_transpose_view": lambda: x.view(b, n, num_heads, d_k),
            "interleaved": lambda: x.view(b, n, d_k, num_heads).permute(0, 3, 1, 2),
            "merged_batch": lambda: x.view(b, n, num_heads, d_k).transpose(1, 2).reshape(b * num_heads, n, d_k),
            "features_tokens": lambda: x.view(b, n, num_heads, d_k).permute(0, 2, 3, 1),
            "hard_coded_heads": lambda: x.view(b, n, 3, d // 3).transpose(1, 2),
            "transpose_first": lambda: x.transpose(1, 2).reshape(b, num_heads, n, d_k),
            "flipped": lambda: x.flip(1).view(b, n, num_heads, d_k).transpose(1, 2),
            "off_by_one": lambda: x.view(b, n, num_heads, d_k).transpose(1, 2) + 1e-3,
        }[mistake]()

    return split_heads


@pytest.mark.parametrize(
    "mistake, phrases",
    [
        ("no_transpose_reshape", ["view-versus-transpose trap", "transpose(1, 2)"]),
        ("no_transpose_view", ["did not transpose(1, 2)"]),
        ("interleaved", ["every `heads`-th feature"]),
        ("merged_batch", ["batch and heads merged"]),
        ("features_tokens", ["last two axes are swapped"]),
        ("hard_coded_heads", ["do not hard-code it"]),
        ("transpose_first", ["to (batch, d_model, n) before splitting"]),
        ("flipped", ["holds token 4 instead of token 0"]),
        ("off_by_one", ["values were changed"]),
    ],
)
def test_head_split_mistakes(mistake, phrases):
    assert_caught(check_split_heads, _split(mistake), *phrases)


# ---------------------------------------------------------------- parameter count


@pytest.mark.parametrize("d_model, heads, bias", [(12, 3, True), (12, 3, False), (768, 12, True), (768, 12, False)])
def test_reference_count_matches_torch(d_model, heads, bias):
    torch_count = sum(p.numel() for p in nn.MultiheadAttention(d_model, heads, bias=bias).parameters())
    assert reference_mha_parameter_count(d_model, heads, bias) == torch_count


def test_mha_parameter_count(capsys):
    assert check_mha_parameter_count(reference_mha_parameter_count) is True
    assert check_mha_parameter_count(lambda d, h, bias=True: float(4 * d * d + 4 * d * bias)) is True

    def stub(d_model, num_heads, bias=True):
        raise NotImplementedError

    assert_not_attempted(check_mha_parameter_count, stub, capsys)


@pytest.mark.parametrize(
    "fn, phrases",
    [
        (lambda d, h, bias=True: 3 * d * d + 3 * d * bias, ["W_O is missing"]),
        (lambda d, h, bias=True: 4 * d * d, ["biases are missing"]),
        (lambda d, h, bias=True: 4 * d * d + 4 * d, ["bias argument is ignored"]),
        (lambda d, h, bias=True: h * (4 * d * d + 4 * d * bias), ["multiplied by the number of heads"]),
        (lambda d, h, bias=True: 4 * h * (d // h) ** 2 + 4 * d * bias, ["one head only", "d_model x d_model"]),
        (lambda d, h, bias=True: 4 * d * (d // h) + 4 * (d // h) * bias, ["one head only"]),
        (lambda d, h, bias=True: 4 * d * d + 4 * h * bias, ["biases were counted per head"]),
        (lambda d, h, bias=True: 4 * d * d + 3 * d * bias, ["bias of W_O is missing"]),
        (lambda d, h, bias=True: 4 * d * d + d * bias, ["only one bias vector"]),
        (lambda d, h, bias=True: 4 * d * d * (2 if bias else 1), ["d_model x d_model matrix"]),
        (lambda d, h, bias=True: 4 * d * d + 4 * d * bias + 1, ["off by +1"]),
        (lambda d, h, bias=True: (4 * d * d + 4 * d * bias) / 1.5, ["not a whole number"]),
        (lambda d, h, bias=True: "2362368", ["should return an int"]),
    ],
)
def test_mha_parameter_count_mistakes(fn, phrases):
    fn.__name__ = "mha_parameter_count"
    assert_caught(check_mha_parameter_count, fn, *phrases)


def test_checks_never_leak_internal_errors():
    """Odd answers give ExerciseFailed or 'not attempted', never another exception."""
    for answer in [None, object(), (None, None), {"a": 1}, torch.zeros(3, 5), 3.5, (3, -5)]:
        try:
            check_matmul_shape(answer)
        except ExerciseFailed:
            pass
    for fn in [lambda *a: None, lambda *a: 1 / 0, lambda: 0, lambda x, h: torch.zeros(1)]:
        for check in (check_attention_column_layout, check_split_heads, check_mha_parameter_count):
            try:
                check(fn)
            except ExerciseFailed:
                pass


# ---------------------------------------------------------------- issue 25: the likeliest mistakes the catalogues lacked


@pytest.mark.parametrize(
    "answer, phrase",
    [
        ((5, 8), "W transposed"),
        ((8, 3), "X transposed"),
        ((1, 3, 5), "no batch axis"),
        ((3,), "only the number of rows"),
        ((5,), "only the number of columns"),
        ((8,), "summed over and disappears"),
    ],
)
def test_matmul_shape_likeliest_mistakes(answer, phrase):
    assert_caught(check_matmul_shape, answer, phrase)


def test_matmul_shape_other_right_answers():
    assert check_matmul_shape((torch.zeros(3, 8) @ torch.zeros(8, 5)).shape) is True
    assert check_matmul_shape(tuple(np.int64(v) for v in (3, 5))) is True


@pytest.mark.parametrize(
    "answers, phrases",
    [
        (_row(q=(3, 4)), ["shape of Q", "shape of the scores"]),
        (_row(q=(8, 3)), ["shape of Q", "X transposed"]),
        (_row(k=(4, 4)), ["shape of K", "d_k = 5 columns"]),
        (_row(k=(3, 4)), ["shape of K", "shape of the scores"]),
        (_row(v=(4, 4)), ["shape of V", "d_v = 6 columns"]),
        (_row(scores=(4, 5)), ["shape of the scores", "K's shape"]),
        (_row(out=(4, 4)), ["shape of the output", "one row per query"]),
    ],
)
def test_row_layout_likeliest_mistakes(answers, phrases):
    assert_caught(star(check_row_layout_shapes), answers, *phrases)


@pytest.mark.parametrize(
    "answers, phrases",
    [
        (_col(q=(6, 64)), ["shape of Q", "one head"]),
        (_col(k=(768, 1)), ["shape of K", "one token's column"]),
        (_col(attn=(12, 6, 6)), ["attention matrix", "one head here"]),
        (_col(attn=(64, 64)), ["attention matrix", "relates tokens to tokens"]),
        (_col(out=(768, 1)), ["shape of the output", "one token's output column"]),
    ],
)
def test_column_layout_likeliest_mistakes(answers, phrases):
    assert_caught(star(check_column_layout_shapes), answers, *phrases)


def test_column_layout_shapes_from_tensors_pass():
    X, W = torch.zeros(768, 6), torch.zeros(768, 768)
    Q = W @ X
    assert check_column_layout_shapes(Q.shape, Q.shape, Q.shape, (Q.T @ Q).shape, (Q @ (Q.T @ Q)).shape) is True


def _col_attn_more(mistake):
    def fn(X, W_q, W_k, W_v):
        Q, K, V = W_q @ X, W_k @ X, W_v @ X
        d_k = Q.shape[0]
        scores = K.T @ Q / math.sqrt(d_k)
        return {
            "whole_matrix": lambda: V @ (torch.exp(scores) / torch.exp(scores).sum()),
            "queries_as_values": lambda: Q @ torch.softmax(scores, dim=0),
            "scale_sqrt_n": lambda: V @ torch.softmax(K.T @ Q / math.sqrt(X.shape[1]), dim=0),
            "keys_from_w_q": lambda: V @ torch.softmax(Q.T @ Q / math.sqrt(d_k), dim=0),
            "values_from_w_k": lambda: K @ torch.softmax(scores, dim=0),
            "dim_minus_1": lambda: V @ torch.softmax(scores, dim=-1),
            "half_d_k": lambda: V @ torch.softmax(K.T @ Q / (d_k**1 / 2), dim=0),
        }[mistake]()

    fn.__name__ = "attention_column_layout"
    return fn


@pytest.mark.parametrize(
    "mistake, phrases",
    [
        ("whole_matrix", ["softmax over the whole matrix"]),
        ("queries_as_values", ["queries were used as values"]),
        ("scale_sqrt_n", ["divided by sqrt(n)"]),
        ("keys_from_w_q", ["keys were computed with W_q"]),
        ("values_from_w_k", ["values were computed with W_k"]),
        ("dim_minus_1", ["wrong axis", "dim=0"]),
        ("half_d_k", ["d_k ** 1/2 is (d_k ** 1) / 2"]),
    ],
)
def test_attention_column_layout_likeliest_mistakes(mistake, phrases):
    assert_caught(check_attention_column_layout, _col_attn_more(mistake), *phrases)


def test_attention_column_layout_other_right_answers():
    def via_rows(X, W_q, W_k, W_v):  # the row layout, transposed back
        Q, K, V = X.T @ W_q.T, X.T @ W_k.T, X.T @ W_v.T
        return (torch.softmax(Q @ K.T / math.sqrt(Q.shape[1]), dim=-1) @ V).T

    def queries_scaled(X, W_q, W_k, W_v):
        Q, K, V = W_q @ X, W_k @ X, W_v @ X
        return V @ F.softmax(K.T @ (Q / Q.shape[0] ** 0.5), dim=0)

    def sdpa(X, W_q, W_k, W_v):
        return F.scaled_dot_product_attention((W_q @ X).T, (W_k @ X).T, (W_v @ X).T).T

    for answer in (via_rows, queries_scaled, sdpa):
        assert check_attention_column_layout(answer) is True


@pytest.mark.parametrize(
    "answers, phrases",
    [
        (((4, 5), (6, 3), 0.4472), ["shape of K^T Q", "K^T itself"]),
        (((5, 3), (6, 3), 0.4472), ["shape of K^T Q", "Q's shape"]),
        (((4, 3), (6, 3), 5), ["beta", "d itself"]),
        (((4, 3), (6, 3), 1 / 25), ["beta", "1 / d^2"]),
        (((4, 3), (6, 3), -1 / math.sqrt(5)), ["beta is positive"]),
    ],
)
def test_numerator_layout_likeliest_mistakes(answers, phrases):
    assert_caught(star(check_numerator_layout), answers, *phrases)


def test_numerator_layout_other_right_answers():
    assert check_numerator_layout((4, 3), (6, 3), math.sqrt(5) / 5) is True
    assert check_numerator_layout((4, 3), (6, 3), 5**-0.5) is True
    assert check_numerator_layout((4, 3), (6, 3), np.float64(0.44721)) is True


@pytest.mark.parametrize(
    "answers, phrases",
    [
        (_mh(d_k=10), ["d_k", "number of tokens"]),
        (_mh(d_k=51.2), ["d_k", "not by the n = 10 tokens"]),
        (_mh(d_k=80), ["d_k", "n * h"]),
        (_mh(scores=(1, 10, 10)), ["one head's scores", "no batch axis"]),
        (_mh(out=(1, 10, 64)), ["one head's output", "no batch axis"]),
    ],
)
def test_multi_head_shapes_likeliest_mistakes(answers, phrases):
    assert_caught(star(check_multi_head_shapes), answers, *phrases)


def test_multi_head_shapes_other_right_answers():
    assert check_multi_head_shapes(512 // 8, (10, 64), (10, 10), (10, 64), (10, 8 * 64)) is True
    assert check_multi_head_shapes(64.0, torch.Size([10, 64]), [10, 10], (10, 64), (10, 512)) is True


@pytest.mark.parametrize(
    "fn, phrases",
    [
        (lambda d, h, bias=True: (4 * d) ** 2 + 4 * d * bias, ["(4 * d_model) ** 2"]),
        (lambda d, h, bias=True: 4 * d * d + 4 * bias, ["counted as one number"]),
        (lambda d, h, bias=True: 4 * d * d + 4 * d * h * bias, ["once per head"]),
        (lambda d, h, bias=True: 3 * h * (d // h) ** 2 + d * d + 4 * d * bias, ["only W_O as d_model x d_model"]),
        (lambda d, h, bias=True: 4 * d * d + 3 * d * bias, ["bias of W_O is missing"]),
    ],
)
def test_mha_parameter_count_likeliest_mistakes(fn, phrases):
    fn.__name__ = "mha_parameter_count"
    assert_caught(check_mha_parameter_count, fn, *phrases)


def test_mha_parameter_count_other_right_answers():
    def from_torch(d_model, num_heads, bias=True):
        return sum(p.numel() for p in nn.MultiheadAttention(d_model, num_heads, bias=bias).parameters())

    def from_linears(d_model, num_heads, bias=True):
        return 4 * sum(p.numel() for p in nn.Linear(d_model, d_model, bias=bias).parameters())

    for answer in (
        from_torch,
        from_linears,
        lambda d, h, bias=True: 4 * d * (d + 1) if bias else 4 * d * d,
        lambda d, h, bias=True: np.int64(4 * d * d + 4 * d * bias),
        lambda d, h, bias=True: torch.tensor(4 * d * d + 4 * d * bias),
    ):
        assert check_mha_parameter_count(answer) is True


def test_row_layout_shapes_from_tensors_pass():
    X, Z = torch.zeros(3, 8), torch.zeros(4, 8)
    Q, K, V = X @ torch.zeros(8, 5), Z @ torch.zeros(8, 5), Z @ torch.zeros(8, 6)
    assert check_row_layout_shapes(Q.shape, K.shape, list(V.shape), (Q @ K.T).shape, (Q @ K.T @ V).shape) is True


# ------------------------------------------------------------------ issues 34 and 36: more classes named, more right answers


@pytest.mark.parametrize(
    "slot, wrong, phrase",
    [(3, (5, 4), "K^T alone"), (2, (3, 4), "shape of the scores and the weights"), (4, (4, 3), "weights transposed")],
)
def test_row_layout_more_shapes_are_named(slot, wrong, phrase):
    answers = [(3, 5), (4, 5), (4, 6), (3, 4), (3, 6)]
    answers[slot] = wrong
    assert_caught(lambda a: check_row_layout_shapes(*a), answers, phrase)


@pytest.mark.parametrize("slot, wrong, phrase", [(0, (5, 4), "that is K's shape"), (1, (4, 6), "V transposed")])
def test_numerator_layout_more_shapes_are_named(slot, wrong, phrase):
    answers = [(4, 3), (6, 3), 1 / math.sqrt(5)]
    answers[slot] = wrong
    assert_caught(lambda a: check_numerator_layout(*a), answers, phrase)


@pytest.mark.parametrize(
    "wrong, phrase",
    [
        (lambda d, h, bias=True: 5 * d * d + (5 * d if bias else 0), "five d_model x d_model matrices"),
        (lambda d, h, bias=True: 4 * d * d + (8 * d if bias else 0), "each bias was counted twice"),
    ],
)
def test_mha_parameter_count_more_mistakes_are_named(wrong, phrase):
    assert_caught(check_mha_parameter_count, wrong, phrase)


def test_unfinished_branches_are_not_called_not_attempted():
    def count(d_model, num_heads, bias=True):
        if not bias:
            raise NotImplementedError
        return 4 * d_model * d_model + 4 * d_model

    def column(X, W_q, W_k, W_v):
        if X.dtype == torch.float32:
            raise NotImplementedError
        return reference_attention_column_layout(X, W_q, W_k, W_v)

    assert_caught(check_mha_parameter_count, count, "unfinished branch", "bias=False")
    assert_caught(check_attention_column_layout, column, "unfinished branch", "float32")


def test_more_right_answers_pass():
    def rows_then_back(X, W_q, W_k, W_v):
        Q, K, V = (W @ X for W in (W_q, W_k, W_v))
        return (torch.softmax(Q.T @ K / math.sqrt(Q.shape[0]), dim=-1) @ V.T).T

    def x_t_times_w_t(X, W_q, W_k, W_v):
        Qr, Kr, Vr = (X.T @ W.T for W in (W_q, W_k, W_v))  # rows layout
        return (F.scaled_dot_product_attention(Qr, Kr, Vr)).T

    assert check_attention_column_layout(rows_then_back) is True
    assert check_attention_column_layout(x_t_times_w_t) is True
    assert check_mha_parameter_count(
        lambda d, h, bias=True: sum(p.numel() for p in nn.MultiheadAttention(d, h, bias=bias).parameters())
    )
    assert check_mha_parameter_count(lambda d, h, bias=True: torch.tensor(4 * d * d + (4 * d if bias else 0)))
    assert check_mha_parameter_count(lambda d, h, bias=True: h * 3 * d * (d // h) + d * d + (4 * d if bias else 0))
