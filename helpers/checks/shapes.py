"""Checks of notebook 01 (attention shapes): shape answers, layouts, head splits and parameter counts.

Shape answers are tuples of ints (``(3, 5)``); a ``torch.Size`` or a list is
accepted too. Each check knows the sizes its exercise states and names the
typical wrong values: a transposed shape, a weight matrix's shape given for an
activation's, ``d_model`` where ``d_k`` belongs, ``Q K^T`` in the column layout
(a features-by-features matrix), and so on. The checks take the answers as
arguments and never read notebook globals.
"""

from __future__ import annotations

import math
import numbers
import operator
from collections.abc import Mapping

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from helpers.attention import attention_column_layout, mha_parameter_count
from helpers.checks._core import (
    ExerciseFailed,
    NotAttempted,
    call_attempt,
    exercise,
    expect_close,
    expect_tensor,
    is_unattempted,
    require_attempt,
)

__all__ = [
    "check_matmul_shape",
    "check_row_layout_shapes",
    "check_column_layout_shapes",
    "check_attention_column_layout",
    "check_numerator_layout",
    "check_multi_head_shapes",
    "check_mha_parameter_count",
]

call = call_attempt  # a stub's NotImplementedError left in one branch of a written function is a named failure


# ---------------------------------------------------------------- references (used by the notebook after an unattempted exercise)

# The references live in helpers.attention; the old names stay importable from here.
reference_attention_column_layout = attention_column_layout
reference_mha_parameter_count = mha_parameter_count


# ---------------------------------------------------------------- shape answers


def _as_shape(answer: object, what: str) -> tuple[int, ...]:
    """Normalise a shape answer (tuple, list, torch.Size) or explain why it is not one."""
    require_attempt(answer, what)
    if isinstance(answer, Tensor):
        raise ExerciseFailed(
            f"{what} should be a shape such as (2, 3), not a tensor; write the sizes as a tuple (or use tensor.shape)"
        )
    if isinstance(answer, bool) or isinstance(answer, numbers.Number):
        raise ExerciseFailed(
            f"{what} should be a tuple of sizes such as (2, 3), got the number {answer!r}"
            " (note that (3) is just the number 3; a tuple needs a comma)"
        )
    if isinstance(answer, str):
        raise ExerciseFailed(f"{what} should be a tuple of ints such as (2, 3), got the string {answer!r}")
    if isinstance(answer, (tuple, list, torch.Size)):
        sizes = []
        for size in answer:
            if is_unattempted(size):
                raise NotAttempted(f"replace the `...` inside {what} with a size")
            try:
                if isinstance(size, bool):
                    raise TypeError
                sizes.append(operator.index(size))
            except TypeError:
                raise ExerciseFailed(f"{what} should hold whole numbers (ints), got {size!r} in {answer!r}") from None
        return tuple(sizes)
    raise ExerciseFailed(f"{what} should be a tuple of ints such as (2, 3), got {type(answer).__name__} {answer!r}")


def _generic_shape_message(got: tuple[int, ...], want: tuple[int, ...], what: str) -> str:
    """Which axis is wrong, without giving the answer away."""
    if len(got) != len(want):
        return f"{what}, {got}, has {len(got)} axes; it should have {len(want)}"
    if sorted(got) == sorted(want):
        return f"{what}, {got}, has the right sizes in the wrong order: {'it is transposed' if len(got) == 2 else 'axes are swapped'}"
    bad = [i for i, (g, w) in enumerate(zip(got, want, strict=True)) if g != w]
    sizes = " and ".join(f"axis {i} (size {got[i]})" for i in bad)
    return f"{what}, {got}, is not right: {sizes} {'is' if len(bad) == 1 else 'are'} wrong"


def _check_shape(
    answer: object, expected: tuple[int, ...], what: str, hints: Mapping[tuple[int, ...], str], recall: str = ""
) -> None:
    """Equal, or the hint for a known wrong value, or which axis is wrong (with a reminder of the sizes)."""
    got = _as_shape(answer, what)
    if got == expected:
        return
    if got in hints:
        raise ExerciseFailed(f"{what}, {got}, is not right: {hints[got]}")
    raise ExerciseFailed(_generic_shape_message(got, expected, what) + (f". Recall: {recall}" if recall else ""))


def _check_all(answers: list[tuple[object, tuple[int, ...], str, Mapping[tuple[int, ...], str]]], recall: str) -> None:
    """Check several shape answers in order; all `...` is 'not attempted'."""
    if all(is_unattempted(a) for a, *_ in answers):
        raise NotAttempted("replace each `...` in the answer cell with your answer")
    for answer, expected, what, hints in answers:
        _check_shape(answer, expected, what, hints, recall)


@exercise("shape of a matrix product")
def check_matmul_shape(product_shape) -> None:
    """Warm-up: the shape of ``X @ W`` with X ``(3, 8)`` and W ``(8, 5)``."""
    hints = {
        (5, 3): "that is the transpose; (a x b)(b x c) is a x c: rows from the left factor, columns from the right",
        (3, 8): "that is the shape of X; the product keeps X's 3 rows but takes W's 5 columns",
        (8, 5): "that is the shape of W; the product keeps X's 3 rows and W's 5 columns",
        (8, 8): "the shared size 8 is summed over and disappears; it does not survive in the result",
        (3, 8, 5): "the shared (inner) size 8 is summed over and disappears: (a x b)(b x c) is a x c",
        (3, 5, 8): "the shared (inner) size 8 is summed over and disappears: (a x b)(b x c) is a x c",
        (15,): "a matrix product is a matrix: (a x b)(b x c) is a x c, two sizes",
        (3, 3): "the product takes its rows from X (3) and its columns from W (5)",
        (5, 5): "the product takes its rows from X (3) and its columns from W (5)",
        (5, 8): "that is the shape of W transposed; the product X @ W is (3 x 8)(8 x 5): X's rows, W's columns",
        (8, 3): "that is the shape of X transposed; the product X @ W is (3 x 8)(8 x 5): X's rows, W's columns",
        (1, 3, 5): "a product of two matrices is a matrix, with two axes; there is no batch axis here",
        (3,): "that is only the number of rows (from X); the product also has W's 5 columns: give both sizes",
        (5,): "that is only the number of columns (from W); the product also has X's 3 rows: give both sizes",
        (8,): "the shared size 8 is summed over and disappears; the product has X's 3 rows and W's 5 columns",
    }
    _check_shape(product_shape, (3, 5), "the shape of X @ W", hints, "(a x b)(b x c) = a x c")


# ---------------------------------------------------------------- row layout (cross-attention)

#: Sizes of Exercise 1.2: queries from X (n x d_model), keys and values from Z (m x d_model).
ROW = dict(n=3, m=4, d_model=8, d_k=5, d_v=6)


@exercise("row layout shapes (cross-attention)")
def check_row_layout_shapes(q_shape, k_shape, v_shape, scores_shape, out_shape) -> None:
    """Row layout: X ``(3, 8)`` (3 query tokens), Z ``(4, 8)`` (4 key tokens), W_Q, W_K ``(8, 5)``, W_V ``(8, 6)``.

    The answers are the shapes of Q = X W_Q, K = Z W_K, V = Z W_V, the scores Q K^T / sqrt(d_k) and the output.
    """
    recall = "X is (3, 8) with the 3 query tokens as rows, Z is (4, 8) with the 4 key/value tokens, W_Q and W_K are (8, 5), W_V is (8, 6)"
    q_hints = {
        (5, 3): "transposed: in the row layout tokens are rows, so Q = X W_Q has one row per query token (3) and d_k = 5 columns",
        (3, 8): "that is X's shape; W_Q maps each token's d_model = 8 features to d_k = 5",
        (8, 5): "that is the shape of the weight W_Q, not of the queries Q = X W_Q",
        (4, 5): "the queries come from X's 3 tokens; the 4 tokens of Z give the keys and values",
        (3, 6): "Q has d_k = 5 columns (W_Q is 8 x 5); 6 is d_v, the width of the values",
        (3, 4): "that is the shape of the scores (queries by keys); Q = X W_Q is (3 x 8)(8 x 5)",
        (8, 3): "that is X transposed; in the row layout Q = X W_Q keeps X's 3 token rows and has d_k = 5 columns",
    }
    k_hints = {
        (3, 5): "the keys come from Z (4 tokens), not from X: this is cross-attention, m = 4 keys",
        (5, 4): "that is K^T; K = Z W_K itself has one row per key token",
        (4, 6): "keys have d_k = 5 features, the same as the queries, so that q . k is defined; 6 is d_v",
        (4, 8): "that is Z's shape; W_K maps d_model = 8 to d_k = 5",
        (8, 5): "that is the shape of the weight W_K, not of the keys K = Z W_K",
        (4, 4): "K has one row per key token (4) and d_k = 5 columns (W_K is 8 x 5): (4 x 8)(8 x 5)",
        (3, 4): "that is the shape of the scores; K = Z W_K is (4 x 8)(8 x 5)",
    }
    v_hints = {
        (4, 5): "V = Z W_V has d_v = 6 columns (W_V is 8 x 6): d_v need not equal d_k",
        (3, 6): "the values come from Z (4 tokens), one value per key, not from X",
        (6, 4): "transposed: tokens are rows, V = Z W_V is (4, 6)",
        (4, 8): "that is Z's shape; W_V maps d_model = 8 to d_v = 6",
        (8, 6): "that is the shape of the weight W_V, not of the values V = Z W_V",
        (4, 4): "V has one row per key token (4) and d_v = 6 columns (W_V is 8 x 6): (4 x 8)(8 x 6)",
        (3, 4): "that is the shape of the scores and the weights (queries by keys); V = Z W_V is (4 x 8)(8 x 6)",
    }
    s_hints = {
        (4, 3): "transposed: Q K^T has one row per query (3) and one column per key (4); each row is one query's scores",
        (3, 3): "n x n holds only for self-attention; here the 3 queries attend to Z's 4 keys, so the scores are 3 x 4",
        (4, 4): "the rows are the 3 queries (from X), the columns the 4 keys (from Z)",
        (5, 5): "Q^T K is d_k x d_k and relates features, not tokens; the scores Q K^T relate each query to each key",
        (3, 5): "that is Q's shape; the scores Q K^T are (3 x 5)(5 x 4)",
        (3, 6): "that is the output's shape; the scores Q K^T come before multiplying by V",
        (4, 5): "that is K's shape; the scores Q K^T are (3 x 5)(5 x 4): one row per query, one column per key",
        (5, 4): "that is the shape of K^T alone; the scores multiply Q (3 x 5) by it: (3 x 5)(5 x 4)",
    }
    o_hints = {
        (3, 5): "the output takes the values' width d_v = 6, not d_k = 5: softmax(Q K^T) V is (3 x 4)(4 x 6)",
        (4, 6): "one output row per query (3), not per key: (3 x 4)(4 x 6)",
        (3, 8): "no W_O here: softmax(Q K^T / sqrt(d_k)) V has d_v = 6 columns",
        (3, 4): "that is the attention matrix; the output multiplies it by V (4 x 6)",
        (6, 3): "transposed: tokens are rows, the output is (n queries, d_v)",
        (4, 5): "one output row per query, with d_v = 6 columns: (3 x 4)(4 x 6)",
        (4, 4): "the output has one row per query (3) and d_v = 6 columns: softmax(Q K^T) V is (3 x 4)(4 x 6)",
        (4, 3): "that is the shape of the weights transposed; the output multiplies the weights (3 x 4) by V (4 x 6)",
    }
    _check_all(
        [
            (q_shape, (3, 5), "the shape of Q", q_hints),
            (k_shape, (4, 5), "the shape of K", k_hints),
            (v_shape, (4, 6), "the shape of V", v_hints),
            (scores_shape, (3, 4), "the shape of the scores", s_hints),
            (out_shape, (3, 6), "the shape of the output", o_hints),
        ],
        recall,
    )


# ---------------------------------------------------------------- column layout (the coursework question)

_FEATURE_MIXING = (
    "Q K^T is 768 x 768: it sums over the 6 tokens and relates feature a of the queries to feature b of the keys, "
    "so it mixes features instead of relating tokens. The attention matrix relates tokens: K^T Q (6 x 768)(768 x 6) = 6 x 6"
)


@exercise("column layout shapes (tokens as columns)")
def check_column_layout_shapes(q_shape, k_shape, v_shape, attn_shape, out_shape) -> None:
    """Column layout: X ``(768, 6)`` (6 tokens as columns), W^Q, W^K, W^V ``(768, 768)``, Q = W^Q X.

    The answers are the shapes of Q, K, V, the token-to-token attention matrix and the output H.
    """
    recall = "X is (768, 6) with the 6 tokens as columns and every W is (768, 768); Q = W^Q X keeps tokens as columns"

    def qkv_hints(name: str) -> dict[tuple[int, ...], str]:
        return {
            (6, 768): f"that is the row layout; here {name} = W^{name} X is (768 x 768)(768 x 6): one column per token",
            (768, 768): f"that is the shape of the weight W^{name}; {name} = W^{name} X keeps X's 6 token columns",
            (6, 6): f"{name} holds 768 features for each of the 6 tokens: (768 x 768)(768 x 6)",
            (64, 6): f"there is one head here: W^{name} is 768 x 768, so d_k = 768",
            (6, 64): f"that is one of 12 heads in the row layout; here there is one head (d_k = 768) and tokens are "
            f"columns: {name} = W^{name} X is (768 x 768)(768 x 6)",
            (768, 1): f"that is one token's column; {name} = W^{name} X holds all 6 tokens, one column each",
        }

    a_hints = {
        (768, 768): _FEATURE_MIXING,
        (6, 768): "the attention matrix relates tokens to tokens: K^T Q is (6 x 768)(768 x 6) = 6 x 6",
        (768, 6): "that is the shape of Q, K and V; the attention matrix K^T Q relates the 6 tokens to each other: 6 x 6",
        (1, 6): "one query's weights form a column of 6; the matrix holds all 6 queries: 6 x 6",
        (6, 1): "one query's weights form a column of 6; the matrix holds all 6 queries: 6 x 6",
        (12, 6, 6): "there is one head here (W^Q is 768 x 768, d_k = 768), so one 6 x 6 attention matrix",
        (64, 64): "the attention matrix relates tokens to tokens (6 x 6); 64 x 64 would relate the features of a "
        "64-wide head, and here there is one head of 768",
    }
    o_hints = {
        (6, 768): "transposed: in this layout the output keeps tokens as columns, H = V A is (768 x 6)(6 x 6) = 768 x 6",
        (6, 6): "that is the attention matrix; the output H = V A multiplies the values (768 x 6) by it",
        (768, 768): "H = V A is (768 x 6)(6 x 6) = 768 x 6: one output column per token. A 768 x 768 result comes from "
        "the feature-mixing product Q K^T",
        (64, 6): "one head here: W^V is 768 x 768, so each output column has 768 features",
        (768, 1): "that is one token's output column; H = V A holds all 6 tokens: (768 x 6)(6 x 6)",
    }
    _check_all(
        [
            (q_shape, (768, 6), "the shape of Q", qkv_hints("Q")),
            (k_shape, (768, 6), "the shape of K", qkv_hints("K")),
            (v_shape, (768, 6), "the shape of V", qkv_hints("V")),
            (attn_shape, (6, 6), "the shape of the attention matrix", a_hints),
            (out_shape, (768, 6), "the shape of the output H", o_hints),
        ],
        recall,
    )


def _column_variants(X: Tensor, W_q: Tensor, W_k: Tensor, W_v: Tensor) -> dict[str, Tensor | None]:
    """Outputs of typical wrong column-layout implementations (only those computable for these sizes)."""
    Q, K, V = W_q @ X, W_k @ X, W_v @ X
    d_k, d_model, n = Q.shape[0], X.shape[0], X.shape[1]
    raw = K.T @ Q  # (n keys, n queries)
    scaled = raw / math.sqrt(d_k)
    variants: dict[str, Tensor | None] = {
        "softmax over the wrong axis: in this layout each column of K^T Q is one query, so softmax over the keys "
        "is along axis 0 (dim=0), making every column sum to 1": V @ torch.softmax(scaled, dim=1),
        "the attention matrix is used transposed: with A = softmax(K^T Q, dim=0), A[j, i] is the weight of key j "
        "for query i, and H = V A (not V A^T)": V @ torch.softmax(scaled, dim=0).T,
        "the attention matrix is used transposed and normalised over the wrong axis: H = V A with "
        "A = softmax(K^T Q / sqrt(d_k), dim=0)": V @ torch.softmax(scaled, dim=1).T,
        "the scores are not divided by sqrt(d_k) (the missing 1/sqrt(d_k) scale)": V @ torch.softmax(raw, dim=0),
        "the scores are divided by d_k; divide by sqrt(d_k)": V @ torch.softmax(raw / d_k, dim=0),
        "the scores are multiplied by sqrt(d_k); divide by it": V @ torch.softmax(raw * math.sqrt(d_k), dim=0),
        "the values are X itself: project them first, V = W_v X": X @ torch.softmax(scaled, dim=0)
        if X.shape[0] == V.shape[0]
        else None,
        "the queries were used as values: H = V A with V = W_v X": Q @ torch.softmax(scaled, dim=0)
        if Q.shape[0] == V.shape[0]
        else None,
        f"the scores are divided by sqrt(n) (n = {n} tokens); the scale is 1/sqrt(d_k), d_k = W_q.shape[0]": V
        @ torch.softmax(raw / math.sqrt(n), dim=0),
        "no softmax: the attention weights must be softmax(K^T Q / sqrt(d_k)) along axis 0": V @ scaled,
        "softmax over the whole matrix: normalise each column (one query) separately, dim=0": V
        @ (torch.exp(scaled) / torch.exp(scaled).sum()),
        "the keys were computed with W_q: K = W_k X": V @ torch.softmax(Q.T @ Q / math.sqrt(d_k), dim=0),
        "the values were computed with W_k: V = W_v X": (W_k @ X) @ torch.softmax(scaled, dim=0)
        if W_k.shape[0] == W_v.shape[0]
        else None,
        "the scores are divided by d_k / 2: d_k ** 1/2 is (d_k ** 1) / 2, since ** binds tighter than /; write d_k ** 0.5 "
        "or math.sqrt(d_k)": V @ torch.softmax(raw / (d_k / 2), dim=0),
    }
    if d_k != d_model:
        variants[
            f"the scores are divided by sqrt(d_model) = sqrt({d_model}) (X.shape[0]); the scale is 1/sqrt(d_k) "
            f"with d_k = W_q.shape[0] = {d_k}"
        ] = V @ torch.softmax(raw / math.sqrt(d_model), dim=0)
    if V.shape[0] != d_k:
        variants[
            f"the scores are scaled with d_v = {V.shape[0]} (W_v.shape[0]); the scale is 1/sqrt(d_k), d_k = W_q.shape[0] = {d_k}"
        ] = V @ torch.softmax(raw / math.sqrt(V.shape[0]), dim=0)
    if W_q.shape[0] == W_q.shape[1]:
        Qt, Kt, Vt = W_q.T @ X, W_k.T @ X, W_v.T @ X
        variants["the weights are transposed: in the column layout Q = W^Q X (W^Q is d_k x d_model), not (W^Q)^T X"] = (
            Vt @ torch.softmax(Kt.T @ Qt / math.sqrt(d_k), dim=0)
        )
    if d_k == V.shape[0]:  # Q K^T (d_k x d_k) times V is defined: the feature-mixing product
        mix = Q @ K.T / math.sqrt(d_k)  # (d_k, d_k)
        message = (
            "Q K^T relates features, not tokens: in the column layout it is d_k x d_k and sums over the tokens. "
            "The token-to-token scores are K^T Q (n x n), and H = V softmax(K^T Q / sqrt(d_k), dim=0)"
        )
        for dim in (0, 1):
            variants[f"{message} [you computed softmax(Q K^T / sqrt(d_k), dim={dim}) V]"] = torch.softmax(mix, dim) @ V
            variants[f"{message} [you computed softmax(Q K^T / sqrt(d_k), dim={dim})^T V]"] = torch.softmax(mix, dim).T @ V
            variants[f"{message} [you computed softmax(Q K^T, dim={dim}) V, also without the scale]"] = (
                torch.softmax(Q @ K.T, dim) @ V
            )
    return variants


@exercise("attention in the column layout")
def check_attention_column_layout(attention_column_layout) -> None:
    """Check ``attention_column_layout(X, W_q, W_k, W_v) -> H`` against ``F.scaled_dot_product_attention``.

    X ``(d_model, n)`` holds tokens as columns, W_q and W_k ``(d_k, d_model)``, W_v ``(d_v, d_model)``;
    H ``(d_v, n)``. The reference transposes to the row layout and back.
    """
    cases = []
    X = torch.randn(8, 5, dtype=torch.float64)
    square = [torch.randn(8, 8, dtype=torch.float64) / math.sqrt(8) for _ in range(3)]
    cases.append(("X (8, 5) with W_q, W_k, W_v all (8, 8), as in the coursework (d_model = d_k = d_v)", X, *square))
    W_q, W_k = torch.randn(4, 8, dtype=torch.float64), torch.randn(4, 8, dtype=torch.float64)
    W_v = torch.randn(6, 8, dtype=torch.float64)
    cases.append(("X (8, 5), W_q and W_k (4, 8) (d_k = 4), W_v (6, 8) (d_v = 6)", X, W_q, W_k, W_v))
    X_big = torch.randn(8, 3, dtype=torch.float64) * 6
    cases.append(
        (
            "X (8, 3) with large entries (scores up to about ±1000, beyond float64 exp's range), W_q, W_k (4, 8), W_v (6, 8)",
            X_big,
            W_q,
            W_k,
            W_v,
        )
    )
    X32 = torch.randn(8, 5) * 3  # float32 scores of a few hundred: exp overflows float32 above 88
    cases.append(
        (
            "float32 X (8, 5) with large entries (scores of a few hundred), float32 W_q, W_k (4, 8), W_v (6, 8)",
            X32,
            W_q.float(),
            W_k.float(),
            W_v.float(),
        )
    )

    for label, X, W_q, W_k, W_v in cases:
        H = expect_tensor(call(attention_column_layout, X, W_q, W_k, W_v, what=label), f"H with {label}")
        X, W_q, W_k, W_v = (
            X.double(),
            W_q.double(),
            W_k.double(),
            W_v.double(),
        )  # the reference in float64, float32 inputs included
        expected = F.scaled_dot_product_attention((W_q @ X).T, (W_k @ X).T, (W_v @ X).T).T  # (d_v, n)
        if tuple(H.shape) == tuple(expected.T.shape) and expected.shape[0] != expected.shape[1]:
            raise ExerciseFailed(
                f"with {label}: H has shape {tuple(H.shape)}, tokens as rows; in the column layout H = V A keeps "
                f"tokens as columns: (d_v, n) = {tuple(expected.shape)}"
            )
        if H.dim() == 2 and H.shape[0] == H.shape[1] == X.shape[0] != X.shape[1]:
            raise ExerciseFailed(
                f"with {label}: H is {tuple(H.shape)}, features by features. That is what Q K^T gives in this layout: it "
                "sums over the tokens and mixes features. The token-to-token matrix is K^T Q (n x n), and H = V A is (d_v, n)"
            )
        expect_close(
            H,
            expected,
            f"H with {label}",
            atol=1e-10,
            rtol=1e-8,
            mistakes=_column_variants(X, W_q, W_k, W_v),
            float32_path=True,
            nonfinite_hint="exp overflowed on large scores (above 88 in float32, 709 in float64): use torch.softmax, "
            "or subtract each column's maximum before exp",
        )


# ---------------------------------------------------------------- numerator layout (NYU)


@exercise("numerator layout (softargmax over columns)")
def check_numerator_layout(scores_shape, h_shape, beta) -> None:
    """Q ``(5, 3)`` (d = 5, n = 3 queries), K ``(5, 4)`` (m = 4 keys), V ``(6, 4)`` (t = 6).

    The answers are the shapes of K^T Q and of H = V softargmax_beta(K^T Q), and the usual value of beta.
    """
    recall = "Q is (d, n) = (5, 3), K is (d, m) = (5, 4), V is (t, m) = (6, 4); queries, keys and values are columns"
    s_hints = {
        (3, 4): "that is Q^T K (the row-layout orientation); in this notation the scores are K^T Q: one row per key, "
        "one column per query, and softargmax runs down each column",
        (5, 5): "Q K^T would be d x d and relate features, and K Q^T too; the scores K^T Q are (4 x 5)(5 x 3)",
        (4, 4): "the columns are the n = 3 queries: K^T Q is (4 x 5)(5 x 3)",
        (3, 3): "the rows are the m = 4 keys: K^T Q is (4 x 5)(5 x 3)",
        (6, 3): "that is H's shape; the scores K^T Q come first: (4 x 5)(5 x 3)",
        (4, 5): "that is the shape of K^T itself; the scores multiply it by Q: K^T Q is (4 x 5)(5 x 3)",
        (5, 3): "that is Q's shape; the scores are K^T Q, (4 x 5)(5 x 3): one row per key, one column per query",
        (5, 4): "that is K's shape; the scores are K^T Q, (4 x 5)(5 x 3): one row per key, one column per query",
    }
    h_hints = {
        (3, 6): "transposed: in this layout H keeps one column per query, H = V A is (6 x 4)(4 x 3)",
        (6, 4): "one output column per query (n = 3), not per key: (6 x 4)(4 x 3)",
        (5, 3): "H takes the values' height t = 6, not d = 5: (6 x 4)(4 x 3)",
        (4, 3): "that is the attention matrix; H multiplies V (6 x 4) by it",
        (6, 6): "H = V A is (6 x 4)(4 x 3) = 6 x 3",
        (4, 6): "that is V transposed; in this layout H = V A is (6 x 4)(4 x 3): one column per query",
    }
    _check_all([(scores_shape, (4, 3), "the shape of K^T Q", s_hints), (h_shape, (6, 3), "the shape of H", h_hints)], recall)
    require_attempt(beta, "beta")
    try:
        value = float(beta)
    except (TypeError, ValueError):
        raise ExerciseFailed(f"beta should be a number, got {type(beta).__name__} {beta!r}") from None
    want = 1 / math.sqrt(5)
    if math.isclose(value, want, rel_tol=1e-4):
        return
    beta_hints = [
        (
            math.sqrt(5),
            "that is sqrt(d), the inverse: beta multiplies the scores, so dividing by sqrt(d) means beta = 1 / sqrt(d)",
        ),
        (1 / 5, "beta = 1 / sqrt(d), not 1 / d: the square root keeps the scores' variance near 1"),
        (1.0, "beta = 1 would leave the scores unscaled; their variance then grows with d. The usual value is 1 / sqrt(d)"),
        (1 / math.sqrt(6), "d is the size of the queries and keys (5), not t, the size of the values (6)"),
        (1 / math.sqrt(3), "d is the size of the queries and keys (5), not n, the number of queries (3)"),
        (1 / math.sqrt(4), "d is the size of the queries and keys (5), not m, the number of keys (4)"),
        (math.sqrt(6), "beta multiplies the scores and is 1 / sqrt(d) with d = 5, the size of queries and keys"),
        (0.0, "beta = 0 makes every weight equal (a plain average); the usual value is 1 / sqrt(d)"),
        (5.0, "that is d itself; beta multiplies the scores and is 1 / sqrt(d): the scores are divided by sqrt(d)"),
        (1 / 25, "that is 1 / d^2; beta = 1 / sqrt(d), the inverse of the square root of d = 5"),
        (-1 / math.sqrt(5), "beta is positive: a negative beta would give the most weight to the *least* similar key"),
    ]
    tolerance = (
        "the check accepts a relative error of 1e-4, so give beta with at least 4 decimals, or as an expression "
        "(math.sqrt is available)"
    )
    for wrong, hint in beta_hints:
        if math.isclose(value, wrong, rel_tol=1e-4):
            raise ExerciseFailed(f"beta = {value!r} is not right: {hint}")
    if math.isclose(value, want, rel_tol=1e-2):
        raise ExerciseFailed(
            f"beta = {value!r} is the right idea but too coarse: it is {abs(value - want) / want:.1e} away from the "
            f"usual value in relative terms; {tolerance}"
        )
    for wrong, hint in beta_hints:
        if math.isclose(value, wrong, rel_tol=1e-2):
            raise ExerciseFailed(f"beta = {value!r} is not right (and rounded too coarsely for the check: {tolerance}): {hint}")
    raise ExerciseFailed(
        f"beta = {value!r} is not right: beta is the inverse temperature that multiplies the scores; "
        f"the usual value is 1 / sqrt(d) with d the size of queries and keys (here {want:.4f}; {tolerance})"
    )


# ---------------------------------------------------------------- multi-head shapes


@exercise("multi-head shapes")
def check_multi_head_shapes(d_k, q_head_shape, scores_head_shape, head_out_shape, concat_shape) -> None:
    """One sequence of 10 tokens, X ``(10, 512)``, 8 heads.

    The answers are d_k and the shapes of one head's Q_i, scores and output, and of the concatenated heads.
    """
    if all(is_unattempted(a) for a in (d_k, q_head_shape, scores_head_shape, head_out_shape, concat_shape)):
        raise NotAttempted("replace each `...` in the answer cell with your answer")
    require_attempt(d_k, "d_k")
    if isinstance(d_k, (tuple, list)):
        raise ExerciseFailed(f"d_k is one number (the size of each head's queries and keys), got {d_k!r}")
    try:
        if isinstance(d_k, bool):
            raise TypeError
        d_k_value = operator.index(d_k) if not isinstance(d_k, float) else d_k
    except TypeError:
        raise ExerciseFailed(f"d_k should be a whole number, got {type(d_k).__name__} {d_k!r}") from None
    d_k_hints = {
        512: "that is d_model; each head works on d_k = d_model / h features",
        4096: "d_k = d_model / h, not d_model * h: the heads split the 512 features",
        8: "that is the number of heads h; d_k = d_model / h",
        16: "d_k = d_model / h = 512 / 8",
        128: "d_k = d_model / h = 512 / 8",
        10: "that is n, the number of tokens; d_k = d_model / h is a number of features",
        51.2: "d_k = d_model / h divides the features among the h = 8 heads, not by the n = 10 tokens",
        80: "d_k = d_model / h = 512 / 8; n * h = 10 * 8 has nothing to do with it",
    }
    if d_k_value != 64:
        hint = d_k_hints.get(d_k_value, "d_k = d_model / h, with d_model = 512 and h = 8")
        raise ExerciseFailed(f"d_k = {d_k!r} is not right: {hint}")
    recall = "X is (10, 512): 10 tokens, d_model = 512, h = 8 heads, so d_k = d_v = 64; each head projects X with its own (512, 64) matrices"
    q_hints = {
        (10, 512): "that is Q before splitting into heads; one head's Q_i = X W_i^Q has d_k = 64 columns",
        (64, 10): "transposed: tokens are rows, Q_i = X W_i^Q is (10 x 512)(512 x 64)",
        (8, 10, 64): "that is all 8 heads stacked; one head's Q_i is (10, 64)",
        (1, 10, 64): "there is no batch axis here: one sequence, X is (10, 512)",
        (10, 8, 64): "that is all 8 heads in the split view; one head's Q_i is a matrix with one row per token",
        (512, 64): "that is the shape of the weight W_i^Q; Q_i = X W_i^Q has one row per token",
        (10, 8): "each head has d_k = 64 features per token, not h",
    }
    s_hints = {
        (64, 64): "d_k x d_k would relate features; the scores Q_i K_i^T relate the 10 tokens: (10 x 64)(64 x 10)",
        (8, 10, 10): "that is all 8 heads stacked; one head's scores are (10, 10)",
        (10, 64): "that is Q_i's shape; the scores are Q_i K_i^T, (10 x 64)(64 x 10)",
        (512, 512): "the scores relate tokens, not features: Q_i K_i^T is 10 x 10",
        (1, 10, 10): "there is no batch axis here: one sequence, X is (10, 512)",
    }
    h_hints = {
        (10, 512): "one head outputs d_v = 64 features per token; 512 appears only after concatenating the 8 heads",
        (10, 10): "that is the head's attention matrix; the output multiplies it by V_i (10 x 64)",
        (64, 10): "transposed: tokens are rows, softmax(...) V_i is (10 x 10)(10 x 64)",
        (8, 10, 64): "that is all heads stacked; one head's output is (10, 64)",
        (1, 10, 64): "there is no batch axis here: one sequence, X is (10, 512)",
    }
    c_hints = {
        (10, 64): "concatenating the 8 head outputs along the feature axis gives 8 * 64 = 512 features per token",
        (8, 10, 64): "stacked, not concatenated: the heads are concatenated along the feature axis, (10, 8 * 64)",
        (80, 64): "concatenated along the wrong axis: the tokens stay 10 rows, the features become 8 * 64 = 512",
        (10, 4096): "8 heads of 64 features give 8 * 64 = 512 features, not 8 * 512",
        (10, 8, 64): "that is the split view; concatenating merges the last two axes into 8 * 64 = 512",
        (512, 10): "transposed: tokens are rows, one row per token and 8 * 64 features",
        (1, 10, 512): "there is no batch axis here: one sequence, X is (10, 512)",
    }
    for answer, expected, what, hints in [
        (q_head_shape, (10, 64), "the shape of one head's Q_i", q_hints),
        (scores_head_shape, (10, 10), "the shape of one head's scores", s_hints),
        (head_out_shape, (10, 64), "the shape of one head's output", h_hints),
        (concat_shape, (10, 512), "the shape of the concatenation", c_hints),
    ]:
        _check_shape(answer, expected, what, hints, recall)


# ---------------------------------------------------------------- parameter count


def _torch_count(d_model: int, num_heads: int, bias: bool) -> int:
    return sum(p.numel() for p in nn.MultiheadAttention(d_model, num_heads, bias=bias).parameters())


def _count_mistakes(d: int, h: int, bias: bool) -> dict[str, int]:
    b = 4 * d if bias else 0
    d_k = d // h
    return {
        "the output projection W_O is missing: there are four matrices, W_Q, W_K, W_V and W_O": 3 * d * d
        + (3 * d if bias else 0),
        "the biases are missing: with bias=True each of the four projections has a bias vector of d_model entries": 4 * d * d,
        "the bias argument is ignored: with bias=False there are no bias vectors": 4 * d * d + 4 * d,
        "the count was multiplied by the number of heads: the heads split d_model into h slices of d_k = d_model / h, "
        "so the total does not depend on num_heads": h * (4 * d * d + b),
        "the weights were counted for one head only (or as h heads of d_k x d_k): each head's W_i^Q is d_model x d_k, "
        "and the h heads together form one d_model x d_model matrix": 4 * h * d_k * d_k + b,
        "the weights were counted for one head only (d_model x d_k each): the h heads together form one d_model x d_model "
        "matrix per projection": 4 * d * d_k + (4 * d_k if bias else 0),
        "the biases were counted per head (h entries): each projection's bias has d_model entries": 4 * d * d
        + (4 * h if bias else 0),
        "each bias was counted as a d_model x d_model matrix: a bias is a vector of d_model entries": 8 * d * d
        if bias
        else 4 * d * d,
        "only one bias vector was counted: each of the four projections has its own (4 * d_model bias entries)": 4 * d * d
        + (d if bias else 0),
        "the bias of W_O is missing: W_Q, W_K, W_V and W_O each have a bias of d_model entries": 4 * d * d
        + (3 * d if bias else 0),
        "the biases were counted per head with d_k entries but only once: each projection's bias has d_model entries": 4 * d * d
        + (4 * d_k if bias else 0),
        "the square covers 4 * d_model: (4 * d_model) ** 2 is 16 d_model^2; write 4 * d_model ** 2 (** binds tighter than *)": (
            4 * d
        )
        ** 2
        + b,
        "each bias was counted as one number: a bias vector has d_model entries, 4 * d_model for the four projections": 4 * d * d
        + (4 if bias else 0),
        "the biases were counted once per head (h vectors of d_model entries per projection); each projection has one bias "
        "of d_model entries, however many heads": 4 * d * d + (4 * d * h if bias else 0),
        "five d_model x d_model matrices were counted: there are four projections, W_Q, W_K, W_V and W_O (each with one bias "
        "of d_model entries)": 5 * d * d + (5 * d if bias else 0),
        "each bias was counted twice (8 * d_model): the four projections have one bias vector of d_model entries each": 4 * d * d
        + (8 * d if bias else 0),
        "W_Q, W_K and W_V were counted per head as d_k x d_k (h * d_k^2 each) and only W_O as d_model x d_model: each head's "
        "projection is d_model x d_k, so each of the four matrices is d_model x d_model": 3 * h * d_k * d_k + d * d + b,
    }


@exercise("parameter count of multi-head attention")
def check_mha_parameter_count(mha_parameter_count) -> None:
    """Check ``mha_parameter_count(d_model, num_heads, bias=True) -> int`` against ``nn.MultiheadAttention``."""
    cases = [(12, 3, True), (12, 3, False), (20, 4, True), (20, 4, False), (768, 12, True), (768, 12, False), (30, 5, True)]
    answers: dict[tuple[int, int, bool], int] = {}
    for d, h, bias in cases:
        label = f"d_model={d}, num_heads={h}, bias={bias}"
        result = call(mha_parameter_count, d, h, bias=bias, what=label)
        if isinstance(result, Tensor) and result.numel() == 1:
            result = result.item()
        if isinstance(result, bool) or not isinstance(result, numbers.Real):
            raise ExerciseFailed(f"mha_parameter_count({label}) should return an int, got {type(result).__name__} {result!r}")
        if isinstance(result, numbers.Integral):
            result = int(result)
        elif float(result).is_integer():
            result = int(result)
        else:
            raise ExerciseFailed(
                f"mha_parameter_count({label}) returned {result!r}, not a whole number: a count of parameters is an int"
                " (use // for d_model // num_heads)"
            )
        answers[(d, h, bias)] = result
    expected = {case: _torch_count(*case) for case in cases}
    wrong = [case for case in cases if answers[case] != expected[case]]
    if not wrong:
        return
    for message in _count_mistakes(12, 3, True):
        formula = {case: _count_mistakes(*case)[message] for case in cases}
        if all(answers[case] == formula[case] for case in wrong):
            d, h, bias = wrong[0]
            raise ExerciseFailed(
                f"{message} (for d_model={d}, num_heads={h}, bias={bias} you returned {answers[wrong[0]]:,}, "
                f"nn.MultiheadAttention has {expected[wrong[0]]:,})"
            )
    d, h, bias = wrong[0]
    got, want = answers[wrong[0]], expected[wrong[0]]
    raise ExerciseFailed(
        f"for d_model={d}, num_heads={h}, bias={bias} you returned {got:,}, nn.MultiheadAttention has {want:,} "
        f"(off by {got - want:+,}). Count four d_model x d_model matrices (4 * {d}^2 = {4 * d * d:,})"
        f"{' and four bias vectors of d_model entries (4 * ' + str(d) + ' = ' + str(4 * d) + ')' if bias else '; bias=False has no bias vectors'}"
    )
