"""The checks of notebook 02 accept the right answers and name the typical wrong ones."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from helpers.attention import scaled_dot_product_attention, softmax
from helpers.checks import (
    check_projections,
    check_scaled_dot_product_attention,
    check_scores,
    check_softmax,
    check_spot_the_mistakes,
)
from tests.conftest import assert_caught, assert_not_attempted

# ---------------------------------------------------------------- projections


def project(X, W_q, W_k, W_v):
    return X @ W_q, X @ W_k, X @ W_v


def test_projections_reference_passes(capsys):
    assert check_projections(project) is True
    assert "correct" in capsys.readouterr().out


def test_projections_stub_is_not_attempted(capsys):
    def stub(X, W_q, W_k, W_v):
        raise NotImplementedError

    assert_not_attempted(check_projections, stub, capsys)
    assert_not_attempted(check_projections, ..., capsys)


PROJECTION_MISTAKES = {
    "W @ X": (lambda X, a, b, c: (a @ X, b @ X, c @ X), ["X @ W"]),
    "W.T @ X.T (transposed outputs)": (
        lambda X, a, b, c: (a.swapaxes(-2, -1) @ X.swapaxes(-2, -1), X @ b, X @ c),
        ["Q is transposed"],
    ),
    "Q from W_k": (lambda X, a, b, c: (X @ b, X @ b, X @ c), ["Q was computed with W_k"]),
    "Q and K swapped": (lambda X, a, b, c: (X @ b, X @ a, X @ c), ["Q was computed with W_k"]),
    "K and V swapped": (lambda X, a, b, c: (X @ a, X @ c, X @ b), ["K and V are swapped"]),
    "V from W_q": (lambda X, a, b, c: (X @ a, X @ b, X @ a), ["V", "W_q"]),
    "K returned transposed": (lambda X, a, b, c: (X @ a, (X @ b).swapaxes(-2, -1), X @ c), ["K is transposed"]),
    "Q pre-scaled": (
        lambda X, a, b, c: (X @ a / math.sqrt(a.shape[-1]), X @ b, X @ c),
        ["divided by sqrt(d_k)", "belongs to the scores"],
    ),
    "V not projected": (lambda X, a, b, c: (X @ a, X @ b, X), ["V is the input X itself"]),
    "X @ W.T (nn.Linear layout)": (lambda X, a, b, c: (X @ a.T, X @ b.T, X @ c.T), ["X @ W"]),
    "torch only (fails on numpy)": (
        lambda X, a, b, c: (torch.matmul(X, a), torch.matmul(X, b), torch.matmul(X, c)),
        ["numpy", "cause is the type, not the shapes", "`@` operator"],
    ),
    "returns a list of two": (lambda X, a, b, c: (X @ a, X @ b), ["tuple (Q, K, V)"]),
}


@pytest.mark.parametrize("name", list(PROJECTION_MISTAKES))
def test_projection_mistakes_are_named(name):
    fn, phrases = PROJECTION_MISTAKES[name]
    assert_caught(check_projections, fn, *phrases)


# ---------------------------------------------------------------- scores


def scores(Q, K, scale=True):
    raw = Q @ K.swapaxes(-2, -1)
    return raw / math.sqrt(Q.shape[-1]) if scale else raw


def test_scores_reference_passes():
    assert check_scores(scores) is True


def test_scores_stub_is_not_attempted(capsys):
    def stub(Q, K, scale=True):
        raise NotImplementedError

    assert_not_attempted(check_scores, stub, capsys)


SCORE_MISTAKES = {
    "K not transposed": (lambda Q, K, scale=True: Q @ K / (math.sqrt(Q.shape[-1]) if scale else 1), ["Q @ K^T"]),
    "K @ Q^T": (lambda Q, K, scale=True: scores(K, Q, scale) * (math.sqrt(K.shape[-1]) / math.sqrt(Q.shape[-1])), ["transposed"]),
    "divided by d_k": (lambda Q, K, scale=True: Q @ K.swapaxes(-2, -1) / (Q.shape[-1] if scale else 1), ["divided by d_k"]),
    "multiplied by sqrt(d_k)": (
        lambda Q, K, scale=True: Q @ K.swapaxes(-2, -1) * (math.sqrt(Q.shape[-1]) if scale else 1),
        ["multiplied by sqrt(d_k)"],
    ),
    "scale applied when scale=False": (lambda Q, K, scale=True: Q @ K.swapaxes(-2, -1) / math.sqrt(Q.shape[-1]), ["scale=False"]),
    "never scaled": (lambda Q, K, scale=True: Q @ K.swapaxes(-2, -1), ["not divided by sqrt(d_k)"]),
    "scaled by sqrt(number of keys)": (
        lambda Q, K, scale=True: Q @ K.swapaxes(-2, -1) / (math.sqrt(K.shape[-2]) if scale else 1),
        ["number of keys"],
    ),
    "softmax applied": (lambda Q, K, scale=True: torch.softmax(torch.as_tensor(scores(Q, K, scale)), -1), ["softmax"]),
    "default scale=False": (lambda Q, K, scale=False: scores(Q, K, scale), ["default should be scale=True"]),
    ".T on a batch": (
        lambda Q, K, scale=True: (
            scores(Q, K, scale) if K.ndim == 2 else Q @ np.transpose(K) if isinstance(K, np.ndarray) else Q @ K.permute(2, 1, 0)
        ),
        [".T reverses"],
    ),
    "Q^T K": (lambda Q, K, scale=True: Q.swapaxes(-2, -1) @ K, ["Q @ K^T"]),
}


@pytest.mark.parametrize("name", list(SCORE_MISTAKES))
def test_score_mistakes_are_named(name):
    fn, phrases = SCORE_MISTAKES[name]
    assert_caught(check_scores, fn, *phrases)


# ---------------------------------------------------------------- spot the mistakes

RIGHT = dict(slipped_q_entry=(1, 0), miscopied_k_row=2, scale_used=1.0, largest_dropped_weight=0.3775, output_shape=(3, 2))


def test_spot_the_mistakes_reference_passes():
    assert check_spot_the_mistakes(**RIGHT) is True
    assert check_spot_the_mistakes(**{**RIGHT, "slipped_q_entry": np.array([1, 0]).tolist(), "scale_used": np.float64(1)}) is True
    numpy_style = dict(
        slipped_q_entry=np.argwhere(np.eye(3, 2)[[1, 0, 2]] == 1)[0] * 0 + np.array([1, 0]),
        miscopied_k_row=np.int64(2),
        scale_used=np.float64(1.0),
        largest_dropped_weight=np.float64(0.37754),
        output_shape=np.zeros((3, 2)).shape,
    )
    assert check_spot_the_mistakes(**numpy_style) is True
    assert check_spot_the_mistakes(**{**RIGHT, "output_shape": torch.Size([3, 2]), "miscopied_k_row": np.array([2])}) is True


def _where_forms():
    Q_diff = np.zeros((3, 2), dtype=bool)
    Q_diff[1, 0] = True  # the one slipped entry
    K_rows = np.array([False, False, True])  # the one miscopied row
    return Q_diff, K_rows


def test_spot_the_mistakes_accepts_argwhere_and_where():
    Q_diff, K_rows = _where_forms()
    forms = [
        (np.argwhere(Q_diff), np.argwhere(K_rows)),  # [[1, 0]], [[2]]
        (np.where(Q_diff), np.where(K_rows)),  # (array([1]), array([0])), (array([2]),)
        (np.argwhere(Q_diff)[0], np.argwhere(K_rows)[0]),  # array([1, 0]), array([2])
        (tuple(np.argwhere(Q_diff)[0]), int(np.where(K_rows)[0][0])),
        (torch.nonzero(torch.from_numpy(Q_diff)), torch.nonzero(torch.from_numpy(K_rows))),
    ]
    for q_entry, k_row in forms:
        assert check_spot_the_mistakes(**{**RIGHT, "slipped_q_entry": q_entry, "miscopied_k_row": k_row}) is True


def test_spot_the_mistakes_stub_is_not_attempted(capsys):
    assert check_spot_the_mistakes(..., ..., ..., ..., ...) is False
    assert "not attempted yet" in capsys.readouterr().out


SPOT_MISTAKES = {
    "(column, row)": ({"slipped_q_entry": (0, 1)}, ["(column, row)"]),
    "1-based entry": ({"slipped_q_entry": (2, 1)}, ["counts from 0"]),
    "a right key row": ({"miscopied_k_row": 0}, ["as it should be"]),
    "1-based key row": ({"miscopied_k_row": 3}, ["counts from 0"]),
    "sqrt(d_k) as written": ({"scale_used": math.sqrt(2)}, ["what the formula *says*"]),
    "a kept weight": ({"largest_dropped_weight": 0.9702}, ["turned into 1"]),
    "another number": ({"largest_dropped_weight": 0.1}, ["apply softmax"]),
    "the hand's vector shape": ({"output_shape": (2,)}, ["every query"]),
    "transposed output shape": ({"output_shape": (2, 3)}, ["rows are tokens"]),
    "nan scale": ({"scale_used": float("nan")}, ["nan"]),
    "scale as a string": ({"scale_used": "sqrt(2)"}, ["should be a number"]),
    "sum of the dropped weights": ({"largest_dropped_weight": 0.58596}, ["sum of all the weights"]),
    "argwhere finds several Q entries": (
        {"slipped_q_entry": np.argwhere(np.ones((3, 2)) > 0)},
        ["lists several entries", "np.isclose"],
    ),
    "where finds several Q entries": ({"slipped_q_entry": np.where(np.ones((3, 2)) > 0)}, ["lists several entries"]),
    "argwhere of K entries, not rows": (
        {"miscopied_k_row": np.argwhere(np.array([[0, 0], [0, 0], [1, 1]]) > 0)},
        ["not one row number", "all in row 2", ".all(axis=1)"],
    ),
}


@pytest.mark.parametrize("name", list(SPOT_MISTAKES))
def test_spot_the_mistakes_wrong_answers_are_named(name):
    change, phrases = SPOT_MISTAKES[name]
    assert_caught(lambda _: check_spot_the_mistakes(**{**RIGHT, **change}), None, *phrases)


# ---------------------------------------------------------------- the reused checks on this notebook's solutions


def test_reused_checks_accept_the_references():
    assert check_softmax(softmax) is True
    assert check_scaled_dot_product_attention(scaled_dot_product_attention) is True


def test_references_of_this_module_pass():
    from helpers.attention import qkv_projections, score_matrix

    assert check_projections(qkv_projections) is True
    assert check_scores(score_matrix) is True


# ---------------------------------------------------------------- issue 25: the likeliest mistakes the catalogues lacked

PROJECTION_MORE_MISTAKES = {
    "torch.mm (2-D only)": (lambda X, a, b, c: (torch.mm(X, a), torch.mm(X, b), torch.mm(X, c)), ["torch.mm takes 2-D"]),
    "X * W (entry by entry)": (lambda X, a, b, c: (X * a, X * b, X * c), ["X @ W"]),
    "Tensor.dot": (lambda X, a, b, c: (X.dot(a), X.dot(b), X.dot(c)), ["Tensor.dot is the dot product of two 1-D"]),
    "torch.from_numpy on tensors": (
        lambda X, a, b, c: tuple(torch.from_numpy(X) @ torch.from_numpy(w) for w in (a, b, c)),
        ["torch.from_numpy takes numpy arrays only"],
    ),
    "a dict": (lambda X, a, b, c: {"Q": X @ a, "K": X @ b, "V": X @ c}, ["tuple (Q, K, V)", "dict"]),
    "all three from W_q": (lambda X, a, b, c: (X @ a, X @ a, X @ a), ["K was computed with W_q"]),
}


@pytest.mark.parametrize("name", list(PROJECTION_MORE_MISTAKES))
def test_projection_likeliest_mistakes_are_named(name):
    fn, phrases = PROJECTION_MORE_MISTAKES[name]
    assert_caught(check_projections, fn, *phrases)


PROJECTION_RIGHT = {
    "np.dot": lambda X, a, b, c: (np.dot(X, a), np.dot(X, b), np.dot(X, c)),
    "np.matmul": lambda X, a, b, c: (np.matmul(X, a), np.matmul(X, b), np.matmul(X, c)),
    "a list": lambda X, a, b, c: [X @ a, X @ b, X @ c],
    "float32": lambda X, a, b, c: tuple(
        torch.as_tensor(X, dtype=torch.float32) @ torch.as_tensor(w, dtype=torch.float32) for w in (a, b, c)
    ),
}


@pytest.mark.filterwarnings("ignore::DeprecationWarning")  # numpy functions on torch tensors: numpy 2's notices
@pytest.mark.parametrize("name", list(PROJECTION_RIGHT))
def test_projection_other_right_answers_pass(name):
    assert check_projections(PROJECTION_RIGHT[name]) is True


def _scaled(divisor):
    return lambda Q, K, scale=True: Q @ K.swapaxes(-2, -1) / (divisor(Q) if scale else 1)


SCORE_MORE_MISTAKES = {
    "d_k ** 1/2": (_scaled(lambda Q: Q.shape[-1] ** 1 / 2), ["d_k ** 1/2 is (d_k ** 1) / 2", "d_k ** 0.5"]),
    "Q.shape[1] (queries of a batch)": (_scaled(lambda Q: math.sqrt(Q.shape[1])), ["number of queries", "count from the end"]),
    "Q.shape[0]": (_scaled(lambda Q: math.sqrt(Q.shape[0])), ["number of queries"]),
    "len(Q[0]) on a batch": (_scaled(lambda Q: math.sqrt(len(Q[0]))), ["number of queries"]),
    "K.transpose(0, 1)": (
        lambda Q, K, scale=True: (
            Q @ (K.transpose(0, 1) if isinstance(K, torch.Tensor) else K.T) / (math.sqrt(Q.shape[-1]) if scale else 1)
        ),
        ["K.transpose(0, 1) swaps the batch axis"],
    ),
    "torch's .size(-1) on numpy": (_scaled(lambda Q: math.sqrt(Q.size(-1))), ["x.size(-1) on a numpy array", "x.shape[-1]"]),
    "torch.matmul on numpy": (
        lambda Q, K, scale=True: torch.matmul(Q, K.swapaxes(-2, -1)) / (math.sqrt(Q.shape[-1]) if scale else 1),
        ["cause is the type", "`@` operator"],
    ),
    "Q and K both scaled": (
        lambda Q, K, scale=True: (
            (Q / math.sqrt(Q.shape[-1])) @ (K.swapaxes(-2, -1) / math.sqrt(Q.shape[-1])) if scale else Q @ K.swapaxes(-2, -1)
        ),
        ["divided by d_k"],
    ),
}


@pytest.mark.parametrize("name", list(SCORE_MORE_MISTAKES))
def test_score_likeliest_mistakes_are_named(name):
    fn, phrases = SCORE_MORE_MISTAKES[name]
    assert_caught(check_scores, fn, *phrases)


def _scores_torch_transpose(Q, K, scale=True):
    dot_products = Q @ K.transpose(-2, -1)  # torch's way: on a 2-D numpy array transpose(-2, -1) changes nothing
    return dot_products / math.sqrt(Q.shape[-1]) if scale else dot_products


def test_torch_transpose_on_numpy_is_named_in_one_short_line():
    message = assert_caught(check_scores, _scores_torch_transpose, "numpy", "transpose(-2, -1)", "K.swapaxes(-2, -1)")
    assert len(message) < 320 and "gufunc" not in message, message


SCORE_RIGHT = {
    "np.sqrt": _scaled(lambda Q: np.sqrt(Q.shape[-1])),
    "** 0.5": _scaled(lambda Q: Q.shape[-1] ** 0.5),
    "the queries scaled first": lambda Q, K, scale=True: (Q / math.sqrt(Q.shape[-1]) if scale else Q) @ K.swapaxes(-2, -1),
    "einsum": lambda Q, K, scale=True: (
        torch.einsum("...nd,...md->...nm", torch.as_tensor(Q), torch.as_tensor(K)) / (math.sqrt(Q.shape[-1]) if scale else 1)
    ),
}


@pytest.mark.parametrize("name", list(SCORE_RIGHT))
def test_score_other_right_answers_pass(name):
    assert check_scores(SCORE_RIGHT[name]) is True


_Q_MASK = np.zeros((3, 2), dtype=bool)
_Q_MASK[1, 0] = True

SPOT_MORE_MISTAKES = {
    "the dropped weight of the correct scores": ({"largest_dropped_weight": 0.997587}, ["correct scores", "scores_hand"]),
    "the dropped weight rounded to 3 decimals": ({"largest_dropped_weight": 0.378}, ["rounded too coarsely"]),
    "the attention matrix's shape": ({"output_shape": (3, 3)}, ["shape of the attention weights"]),
    "a flat index": ({"slipped_q_entry": 2}, ["flat index", "np.unravel_index"]),
    "every ratio, not reduced": ({"scale_used": np.ones((3, 3))}, ["one ratio per entry", "np.median"]),
    "a boolean mask of the rows": ({"miscopied_k_row": np.array([False, False, True])}, ["boolean mask of the rows"]),
    "a boolean mask of Q's entries": ({"slipped_q_entry": _Q_MASK}, ["boolean mask of the entries"]),
}


@pytest.mark.parametrize("name", list(SPOT_MORE_MISTAKES))
def test_spot_the_mistakes_likeliest_wrong_answers_are_named(name):
    change, phrases = SPOT_MORE_MISTAKES[name]
    assert_caught(lambda _: check_spot_the_mistakes(**{**RIGHT, **change}), None, *phrases)


def test_spot_the_mistakes_other_right_answers_pass():
    assert check_spot_the_mistakes(**{**RIGHT, "slipped_q_entry": np.unravel_index(2, (3, 2))}) is True
    assert check_spot_the_mistakes(**{**RIGHT, "miscopied_k_row": np.flatnonzero(np.array([False, False, True]))}) is True
    assert check_spot_the_mistakes(**{**RIGHT, "scale_used": np.nanmedian(np.array([[1.0, 1.0], [1.0, np.nan]]))}) is True
    assert check_spot_the_mistakes(**{**RIGHT, "largest_dropped_weight": 0.37754}) is True


# ------------------------------------------------------------------ issues 34 and 36: more classes named, more right answers


def _project_unfinished(X, W_q, W_k, W_v):
    if not isinstance(X, torch.Tensor):
        raise NotImplementedError  # the numpy case left for later
    return X @ W_q, X @ W_k, X @ W_v


def _scores_unfinished(Q, K, scale=True):
    if not scale:
        raise NotImplementedError
    return Q @ K.swapaxes(-2, -1) / math.sqrt(Q.shape[-1])


def _scores_float32_sqrt(Q, K, scale=True):
    dots = Q @ K.swapaxes(-2, -1)
    return dots / torch.sqrt(torch.tensor(Q.shape[-1])).item() if scale else dots  # sqrt taken in float32


def _project_float32(X, W_q, W_k, W_v):
    if isinstance(X, np.ndarray):
        return X @ W_q, X @ W_k, X @ W_v
    return tuple((X.float() @ W.float()).to(X.dtype) for W in (W_q, W_k, W_v))


def test_projections_and_scores_unfinished_branches_are_not_called_not_attempted():
    assert_caught(check_projections, _project_unfinished, "unfinished branch", "numpy")
    assert_caught(check_scores, _scores_unfinished, "unfinished branch", "scale=False")


def test_float32_paths_are_named_as_precision_problems():
    assert_caught(check_scores, _scores_float32_sqrt, "precision problem")
    assert_caught(check_projections, _project_float32, "precision problem", "dtype=x.dtype")


@pytest.mark.filterwarnings("ignore::DeprecationWarning")  # numpy functions on torch tensors
def test_projections_and_scores_other_right_answers_pass():
    assert check_projections(lambda X, W_q, W_k, W_v: [np.dot(X, W) for W in (W_q, W_k, W_v)]) is True  # np.dot, a list
    assert (
        check_scores(lambda Q, K, scale=True: np.matmul(Q, K.swapaxes(-2, -1)) / (np.sqrt(Q.shape[-1]) if scale else 1)) is True
    )
    assert check_scores(lambda Q, K, scale=True: (Q @ K.swapaxes(-2, -1)) * (Q.shape[-1] ** -0.5 if scale else 1.0)) is True
