"""The check of notebook 04's exercise 4.1: every head's scores from the un-split projections (check_head_scores)."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from helpers.checks import check_head_scores, check_multi_head_columns
from tests.conftest import assert_caught, assert_not_attempted


def scores_einsum(q, k, num_heads):  # the notebook's solution
    return torch.einsum("bnhk,bmhk->bhnm", q.unflatten(-1, (num_heads, -1)), k.unflatten(-1, (num_heads, -1))) / math.sqrt(
        q.shape[-1] // num_heads
    )


def scores_view_transpose(q, k, num_heads):  # another right answer
    b, n, d = q.shape
    m = k.shape[1]
    qh = q.view(b, n, num_heads, d // num_heads).transpose(1, 2)
    kh = k.view(b, m, num_heads, d // num_heads).transpose(1, 2)
    return qh @ kh.transpose(-2, -1) / (d // num_heads) ** 0.5


def scores_loop(q, k, num_heads):  # a loop over heads is right too
    d_k = q.shape[-1] // num_heads
    return torch.stack(
        [q[..., h * d_k : (h + 1) * d_k] @ k[..., h * d_k : (h + 1) * d_k].transpose(-2, -1) for h in range(num_heads)], dim=1
    ) / math.sqrt(d_k)


def stub(q, k, num_heads):
    raise NotImplementedError("Exercise: replace this line with your code")


def _sdk(q, h):
    return math.sqrt(q.shape[-1] // h)


def _u(x, h):
    return x.unflatten(-1, (h, -1))


WRONG = {
    "no_scale": (lambda q, k, h: torch.einsum("bnhk,bmhk->bhnm", _u(q, h), _u(k, h)), ["not scaled", "sqrt(d_k)"]),
    "sqrt_d_model": (
        lambda q, k, h: torch.einsum("bnhk,bmhk->bhnm", _u(q, h), _u(k, h)) / math.sqrt(q.shape[-1]),
        ["1/sqrt(d_model)"],
    ),
    "divided_by_d_k": (
        lambda q, k, h: torch.einsum("bnhk,bmhk->bhnm", _u(q, h), _u(k, h)) / (q.shape[-1] // h),
        ["divided by d_k instead of sqrt"],
    ),
    "multiplied": (lambda q, k, h: torch.einsum("bnhk,bmhk->bhnm", _u(q, h), _u(k, h)) * _sdk(q, h), ["multiplied by sqrt(d_k)"]),
    "softmax": (lambda q, k, h: torch.softmax(scores_einsum(q, k, h), dim=-1), ["attention weights", "before any softmax"]),
    "softmax_queries": (lambda q, k, h: torch.softmax(scores_einsum(q, k, h), dim=-2), ["before any softmax"]),
    "swapped": (lambda q, k, h: scores_einsum(k, q, h), ["queries and keys are swapped"]),
    "summed_heads": (lambda q, k, h: torch.einsum("bnhk,bmhk->bnm", _u(q, h), _u(k, h)) / _sdk(q, h), ["heads were summed"]),
    "order_bnhm": (lambda q, k, h: torch.einsum("bnhk,bmhk->bnhm", _u(q, h), _u(k, h)) / _sdk(q, h), ["wrong order"]),
    "merged_batch_heads": (lambda q, k, h: scores_einsum(q, k, h).flatten(0, 1), ["batch and heads are merged"]),
    "trap": (
        lambda q, k, h: (
            q.reshape(q.shape[0], h, q.shape[1], -1) @ k.reshape(k.shape[0], h, k.shape[1], -1).transpose(-2, -1) / _sdk(q, h)
        ),
        ["view-versus-transpose trap"],
    ),
    "strided": (
        lambda q, k, h: torch.einsum("bnkh,bmkh->bhnm", q.unflatten(-1, (-1, h)), k.unflatten(-1, (-1, h))) / _sdk(q, h),
        ["strided"],
    ),
    "reversed": (lambda q, k, h: scores_einsum(q, k, h).flip(1), ["reverse order"]),
    "not_split": (lambda q, k, h: (q @ k.transpose(-2, -1) / _sdk(q, h))[:, None].expand(-1, h, -1, -1), ["not split"]),
    "queries_twice": (lambda q, k, h: scores_einsum(q, q, h), ["queries were compared with themselves"]),
    "hard_coded_heads": (lambda q, k, h: scores_einsum(q, k, 3), ["do not hard-code"]),
    "hard_coded_walkthrough": (lambda q, k, h: scores_einsum(q, k, 12), ["raised RuntimeError"]),
    "numpy": (lambda q, k, h: scores_einsum(q, k, h).numpy(), ["torch.Tensor", "ndarray"]),
    "float_cast": (lambda q, k, h: scores_einsum(q.float(), k.float(), h), ["dtype"]),
    "nan": (lambda q, k, h: scores_einsum(q, k, h) * float("nan"), ["NaN"]),
    "in_place": (lambda q, k, h: scores_einsum(q.mul_(1.0).div_(2.0), k, h), ["in place"]),
}


@pytest.mark.parametrize("answer", [scores_einsum, scores_view_transpose, scores_loop])
def test_right_answers_pass(answer):
    assert check_head_scores(answer) is True


def test_not_attempted(capsys):
    assert_not_attempted(check_head_scores, stub, capsys)
    assert_not_attempted(check_head_scores, ..., capsys)


@pytest.mark.parametrize("name", WRONG)
def test_wrong_answers_caught(name):
    fn, phrases = WRONG[name]
    assert_caught(check_head_scores, fn, *phrases)


def test_catalogue_size():
    assert len(WRONG) >= 6


def test_check_leaves_the_notebook_random_stream_alone():
    torch.manual_seed(0)
    before = torch.rand(3)
    torch.manual_seed(0)
    check_head_scores(scores_einsum)
    assert torch.equal(torch.rand(3), before)
    assert np.isfinite(before.numpy()).all()


# ------------------------------------------------------------------ multi-head attention in the numerator layout


def columns_ok(X, W_q, W_k, W_v, W_o, num_heads):  # the notebook's solution
    d_k = X.shape[0] // num_heads
    stacked = []
    for i in range(num_heads):
        rows = slice(i * d_k, (i + 1) * d_k)
        Q_i, K_i, V_i = W_q[rows] @ X, W_k[rows] @ X, W_v[rows] @ X
        stacked.append(V_i @ torch.softmax(K_i.T @ Q_i / math.sqrt(d_k), dim=0))
    return W_o @ torch.cat(stacked, dim=0)


def columns_by_rows(X, W_q, W_k, W_v, W_o, num_heads):  # another right answer: the row layout, transposed twice
    d_model, n = X.shape
    d_k = d_model // num_heads
    q, k, v = ((X.T @ W.T).view(n, num_heads, d_k).transpose(0, 1) for W in (W_q, W_k, W_v))
    heads = torch.softmax(q @ k.transpose(-2, -1) / math.sqrt(d_k), dim=-1) @ v  # (h, n, d_k)
    return (heads.transpose(0, 1).reshape(n, d_model) @ W_o.T).T


def columns_from_column_blocks(X, W_q, W_k, W_v, W_o, num_heads):  # W^Q_i read as columns, transposed to fit
    d_k = X.shape[0] // num_heads
    stacked = []
    for i in range(num_heads):
        cols = slice(i * d_k, (i + 1) * d_k)
        Q_i, K_i, V_i = W_q[:, cols].T @ X, W_k[:, cols].T @ X, W_v[:, cols].T @ X
        stacked.append(V_i @ torch.softmax(K_i.T @ Q_i / math.sqrt(d_k), dim=0))
    return W_o @ torch.cat(stacked, dim=0)


def columns_stub(X, W_q, W_k, W_v, W_o, num_heads):
    raise NotImplementedError("Exercise: replace this line with your code")


def _cols(**knobs):
    from helpers.checks.heads import _columns

    return lambda X, W_q, W_k, W_v, W_o, h: _columns(X, W_q, W_k, W_v, W_o, h, **knobs)


COLUMNS_WRONG = {
    "softmax_rows": (_cols(dim=1), ["over each row", "dim 0"]),
    "no_scale": (_cols(scale=1.0), ["not scaled"]),
    "sqrt_d_model": (_cols(scale="d_model"), ["1/sqrt(d_model)"]),
    "q_t_k": (_cols(order="qk"), ["Q_i^T K_i instead of K_i^T Q_i"]),
    "row_layout_weights": (_cols(order="qk", dim=1), ["row layout"]),
    "no_w_o": (_cols(use_wo="none"), ["W_o is missing"]),
    "w_o_transposed": (_cols(use_wo="wo_t"), ["W_o is transposed"]),
    "strided": (_cols(rows="strided"), ["strided"]),
    "column_blocks": (columns_from_column_blocks, ["block of d_k *columns*", "consecutive rows"]),
    "values_from_w_k": (_cols(values="k"), ["values were computed with W_k"]),
    "keys_from_w_q": (_cols(keys="q"), ["keys were computed with W_q"]),
    "transposed_output": (lambda *a: columns_ok(*a).T, ["H is transposed"]),
    "heads_summed": (
        lambda X, W_q, W_k, W_v, W_o, h: sum(_cols(use_wo="none")(X, W_q, W_k, W_v, W_o, h).chunk(h, dim=0)),
        ["heads' outputs were added"],
    ),
    "side_by_side": (
        lambda X, W_q, W_k, W_v, W_o, h: torch.cat(_cols(use_wo="none")(X, W_q, W_k, W_v, W_o, h).chunk(h, dim=0), dim=1),
        ["side by side"],
    ),
    "numpy": (lambda *a: columns_ok(*a).numpy(), ["ndarray"]),
}


@pytest.mark.parametrize("answer", [columns_ok, columns_by_rows])
def test_columns_right_answers_pass(answer):
    assert check_multi_head_columns(answer) is True


def test_columns_not_attempted(capsys):
    assert_not_attempted(check_multi_head_columns, columns_stub, capsys)
    assert_not_attempted(check_multi_head_columns, ..., capsys)


@pytest.mark.parametrize("name", COLUMNS_WRONG)
def test_columns_wrong_answers_caught(name):
    fn, phrases = COLUMNS_WRONG[name]
    assert_caught(check_multi_head_columns, fn, *phrases)


# ------------------------------------------------------------------ issue 25: the likeliest mistakes the catalogues lacked


def _es(q, k, h, d_k=None, divisor=None):
    d_k = d_k or q.shape[-1] // h
    scores = torch.einsum("bnhk,bmhk->bhnm", q.unflatten(-1, (h, d_k)), k.unflatten(-1, (h, d_k)))
    return scores / (divisor if divisor is not None else math.sqrt(d_k))


WRONG_MORE = {
    "unflatten_tokens": (
        lambda q, k, h: torch.einsum("bhnk,bhmk->bhnm", q.unflatten(1, (h, -1)), k.unflatten(1, (h, -1))),
        ["unflatten(1, ...) splits the tokens axis"],
    ),
    "float_d_k": (lambda q, k, h: _es(q, k, h, d_k=q.shape[-1] / h), ["integer division"]),
    "hard_coded_64": (lambda q, k, h: _es(q, k, h, d_k=64), ["instead of hard-coding"]),
    "keys_not_transposed": (
        lambda q, k, h: q.view(*q.shape[:2], h, -1).transpose(1, 2) @ k.view(*k.shape[:2], h, -1).transpose(1, 2),
        ["transpose the keys' last two axes"],
    ),
    "sqrt_num_heads": (lambda q, k, h: _es(q, k, h, divisor=math.sqrt(h)), ["divided by sqrt(num_heads)"]),
    "half_d_k": (lambda q, k, h: _es(q, k, h, divisor=(q.shape[-1] // h) ** 1 / 2), ["d_k ** 1/2 is (d_k ** 1) / 2"]),
}


@pytest.mark.parametrize("name", WRONG_MORE)
def test_likeliest_wrong_answers_caught(name):
    fn, phrases = WRONG_MORE[name]
    assert_caught(check_head_scores, fn, *phrases)


def test_other_right_answers_pass():
    def chunks(q, k, h):
        return torch.stack([qi @ ki.mT for qi, ki in zip(q.chunk(h, -1), k.chunk(h, -1), strict=True)], 1) / math.sqrt(
            q.shape[-1] // h
        )

    def queries_scaled_first(q, k, h):
        d_k = q.shape[-1] // h
        return torch.einsum("bnhk,bmhk->bhnm", (q / d_k**0.5).unflatten(-1, (h, d_k)), k.unflatten(-1, (h, d_k)))

    assert check_head_scores(chunks) is True
    assert check_head_scores(queries_scaled_first) is True


def _columns_by(slicer="rows", combine="cat", d_k_of=lambda d, h: d // h):
    def fn(X, W_q, W_k, W_v, W_o, h):
        d_k = d_k_of(X.shape[0], h)
        heads = []
        for i in range(h):
            r = slice(i * d_k, (i + 1) * d_k)
            Q_i, K_i, V_i = (W[:, r] @ X if slicer == "columns" else W[r] @ X for W in (W_q, W_k, W_v))
            heads.append(V_i @ torch.softmax(K_i.T @ Q_i / math.sqrt(d_k), dim=0))
        return W_o @ (torch.stack(heads) if combine == "stack" else torch.cat(heads, 0))

    return fn


COLUMNS_MORE_WRONG = {
    "columns_not_rows": (_columns_by(slicer="columns"), ["blocks of d_k consecutive *rows*"]),
    "stacked": (_columns_by(combine="stack"), ["torch.stack puts the heads on a new axis", "torch.cat(heads, dim=0)"]),
    "float_d_k": (_columns_by(d_k_of=lambda d, h: d / h), ["integer division"]),
    "no_softmax": (_cols(softmax=False), ["softmax is missing"]),
    "divided_by_d_k": (_cols(scale="d_k"), ["divided by d_k instead of sqrt(d_k)"]),
    "half_d_k": (_cols(scale="half_d_k"), ["d_k ** 1/2 is (d_k ** 1) / 2"]),
}


@pytest.mark.parametrize("name", COLUMNS_MORE_WRONG)
def test_columns_likeliest_wrong_answers_caught(name):
    fn, phrases = COLUMNS_MORE_WRONG[name]
    assert_caught(check_multi_head_columns, fn, *phrases)


def test_columns_other_right_answers_pass():
    def viewed(X, W_q, W_k, W_v, W_o, h):  # every head at once: (d_model, n) viewed as (h, d_k, n)
        d_model, n = X.shape
        d_k = d_model // h
        Q, K, V = ((W @ X).view(h, d_k, n) for W in (W_q, W_k, W_v))
        return W_o @ (V @ torch.softmax(K.transpose(1, 2) @ Q / math.sqrt(d_k), dim=1)).reshape(d_model, n)

    def w_o_per_head(X, W_q, W_k, W_v, W_o, h):  # W_o @ [H_1; ...; H_h] is the sum of W_o's column blocks times H_i
        d_k = X.shape[0] // h
        heads = _cols(use_wo="none")(X, W_q, W_k, W_v, W_o, h).split(d_k, dim=0)
        return sum(W_o[:, i * d_k : (i + 1) * d_k] @ H_i for i, H_i in enumerate(heads))

    assert check_multi_head_columns(viewed) is True
    assert check_multi_head_columns(w_o_per_head) is True


# ------------------------------------------------------------------ issue 36: partial work is an attempt, not "not attempted"


def scores_partial(queries, keys, num_heads):
    if queries.dtype == torch.float32:
        raise NotImplementedError  # an unfinished branch; the rest is written
    d_k = queries.shape[-1] // num_heads
    q, k = queries.unflatten(-1, (num_heads, d_k)), keys.unflatten(-1, (num_heads, d_k))
    return torch.einsum("bnhk,bmhk->bhnm", q, k) / math.sqrt(d_k)


def columns_partial(X, W_q, W_k, W_v, W_o, num_heads):
    if num_heads > 2:
        raise NotImplementedError
    import helpers.attention

    return helpers.attention.multi_head_columns(X, W_q, W_k, W_v, W_o, num_heads)


@pytest.mark.parametrize("check, answer", [(check_head_scores, scores_partial), (check_multi_head_columns, columns_partial)])
def test_an_unfinished_branch_is_named_not_called_unattempted(check, answer):
    assert_caught(check, answer, "unfinished branch")


# ------------------------------------------------------------------ catalogue of 2026-11-27: more slips, more right answers


def _split_last(t, h):
    return t.unflatten(-1, (h, t.shape[-1] // h)).transpose(1, 2)  # (batch, heads, n, d_k)


def scores_by_two_d_k(queries, keys, num_heads):  # scores / d_k ** 1 / 2: divided by d_k, then by 2
    d_k = queries.shape[-1] // num_heads
    return _split_last(queries, num_heads) @ _split_last(keys, num_heads).transpose(-2, -1) / d_k**1 / 2


def scores_masked(queries, keys, num_heads):  # a causal mask where none belongs
    d_k = queries.shape[-1] // num_heads
    s = _split_last(queries, num_heads) @ _split_last(keys, num_heads).transpose(-2, -1) / math.sqrt(d_k)
    return s.masked_fill(torch.ones(s.shape[-2:], dtype=torch.bool).triu(1), float("-inf"))


def scores_work_above_the_stub(queries, keys, num_heads):
    d_k = queries.shape[-1] // num_heads  # noqa: F841 - real work above the stub's raise
    raise NotImplementedError("Exercise: replace this line with your code")


SCORES_CATALOGUE_WRONG = {
    "divided by 2 d_k": (scores_by_two_d_k, "divided by 2 * d_k"),
    "masked": (scores_masked, "a mask was applied"),
    "work above the stub": (scores_work_above_the_stub, "partial work"),
}


@pytest.mark.parametrize("name", SCORES_CATALOGUE_WRONG)
def test_head_scores_more_wrong_answers_named(name):
    answer, phrase = SCORES_CATALOGUE_WRONG[name]
    assert_caught(check_head_scores, answer, phrase)


def scores_view_transpose_matmul(q, k, h):
    (b, n, d), m = q.shape, k.shape[1]
    return q.view(b, n, h, d // h).transpose(1, 2) @ k.view(b, m, h, d // h).permute(0, 2, 3, 1) / (d // h) ** 0.5


def scores_loop_over_heads(q, k, h):
    d_k = q.shape[-1] // h
    parts = [q[..., i * d_k : (i + 1) * d_k] @ k[..., i * d_k : (i + 1) * d_k].transpose(-2, -1) for i in range(h)]
    return torch.stack(parts, 1) * d_k**-0.5


def scores_queries_scaled_first(q, k, h):
    d_k = q.shape[-1] // h
    return torch.einsum("bnhd,bmhd->bhnm", q.unflatten(-1, (h, d_k)) / math.sqrt(d_k), k.unflatten(-1, (h, d_k)))


@pytest.mark.parametrize("answer", [scores_view_transpose_matmul, scores_loop_over_heads, scores_queries_scaled_first])
def test_head_scores_more_right_answers_pass(answer):
    assert check_head_scores(answer) is True


def _columns_by_hand(X, W_q, W_k, W_v, W_o, h, *, after=False, causal=False):
    d_k, n = X.shape[0] // h, X.shape[1]
    stacked = []
    for i in range(h):
        r = slice(i * d_k, (i + 1) * d_k)
        Q, K, V = W_q[r] @ X, W_k[r] @ X, W_v[r] @ X  # (d_k, n) each
        s = K.T @ Q  # (n keys, n queries)
        if causal:
            s = s.masked_fill(torch.ones(n, n, dtype=torch.bool).tril(-1), float("-inf"))
        A = torch.softmax(s, 0) / math.sqrt(d_k) if after else torch.softmax(s / math.sqrt(d_k), 0)
        stacked.append(V @ A)
    return W_o @ torch.cat(stacked, 0)


def columns_scale_after_softmax(X, W_q, W_k, W_v, W_o, h):
    return _columns_by_hand(X, W_q, W_k, W_v, W_o, h, after=True)


def columns_causal(X, W_q, W_k, W_v, W_o, h):
    return _columns_by_hand(X, W_q, W_k, W_v, W_o, h, causal=True)


def columns_work_above_the_stub(X, W_q, W_k, W_v, W_o, num_heads):
    d_k = X.shape[0] // num_heads  # noqa: F841 - real work above the stub's raise
    raise NotImplementedError("Exercise: replace this line with your code")


COLUMNS_CATALOGUE_WRONG = {
    "scale after softmax": (columns_scale_after_softmax, "applied after the softmax"),
    "causal mask": (columns_causal, "a causal mask was applied"),
    "work above the stub": (columns_work_above_the_stub, "partial work"),
}


@pytest.mark.parametrize("name", COLUMNS_CATALOGUE_WRONG)
def test_columns_more_wrong_answers_named(name):
    answer, phrase = COLUMNS_CATALOGUE_WRONG[name]
    assert_caught(check_multi_head_columns, answer, phrase)


def columns_batched(X, W_q, W_k, W_v, W_o, h):
    (d, n), d_k = X.shape, X.shape[0] // h
    Q, K, V = ((W @ X).view(h, d_k, n) for W in (W_q, W_k, W_v))  # (h, d_k, n) each
    return W_o @ (V @ torch.softmax(K.transpose(1, 2) @ Q / d_k**0.5, dim=1)).reshape(d, n)


def columns_sdpa_on_rows(X, W_q, W_k, W_v, W_o, h):
    (d, n), d_k = X.shape, X.shape[0] // h
    q, k, v = ((W @ X).T.view(n, h, d_k).transpose(0, 1) for W in (W_q, W_k, W_v))  # (h, n, d_k) each
    return W_o @ torch.nn.functional.scaled_dot_product_attention(q, k, v).transpose(0, 1).reshape(n, d).T


def columns_row_weights_transposed(X, W_q, W_k, W_v, W_o, h):
    d_k = X.shape[0] // h
    stacked = []
    for i in range(h):
        r = slice(i * d_k, (i + 1) * d_k)
        Q, K, V = W_q[r] @ X, W_k[r] @ X, W_v[r] @ X
        stacked.append(V @ torch.softmax(Q.T @ K / math.sqrt(d_k), -1).T)
    return W_o @ torch.cat(stacked)


@pytest.mark.parametrize("answer", [columns_batched, columns_sdpa_on_rows, columns_row_weights_transposed])
def test_columns_more_right_answers_pass(answer):
    assert check_multi_head_columns(answer) is True
