"""Checks of notebook 02 (attention by hand): projections, scores with and without scaling, the flawed hand solution.

The functions of notebook 02 work on numpy arrays and torch tensors alike
(``@`` and ``.swapaxes(-2, -1)`` exist in both); the checks call them with
float64 torch tensors of small distinct sizes and then with numpy arrays.
"""

from __future__ import annotations

import inspect
import math
import re
from collections.abc import Callable
from typing import Any

import numpy as np
import torch
from torch import Tensor

from helpers.checks._core import (
    ExerciseFailed,
    call_attempt,
    exercise,
    expect_close,
    expect_equal_answer,
    require_attempt,
)

__all__ = ["check_projections", "check_scores", "check_spot_the_mistakes"]

call = call_attempt  # a stub's NotImplementedError left in one branch of a written function is a named failure


_MATMUL_ERRORS = ("cannot be multiplied", "size mismatch", "mismatch in its core dimension", "shapes", "must match", "dimension")


def _as_tensor(x: object, name: str) -> Tensor:
    """Accept a torch tensor or a numpy array (converted); anything else is named."""
    if isinstance(x, Tensor):
        return x
    if isinstance(x, np.ndarray):
        return torch.from_numpy(np.asarray(x, dtype=np.float64))
    raise ExerciseFailed(f"{name} should be an array (numpy) or a tensor (torch), got {type(x).__name__}")


def _call_with_hint(fn: Callable[..., Any], *args: Any, what: str, hint: str, **kwargs: Any) -> Any:
    """``call``, adding ``hint`` when the student's code failed on a shape mismatch."""
    try:
        return call(fn, *args, what=what, **kwargs)
    except ExerciseFailed as err:
        message = str(err)
        if "The cause is the type" in message or "return_types" in message:
            raise
        if "raised" in message and any(s in message for s in _MATMUL_ERRORS):
            raise ExerciseFailed(f"{message}. Hint: {hint}") from None
        raise


# ---------------------------------------------------------------- projections

_PROJECTION_HINT = (
    "rows of X are tokens and columns are features, so each projection is X @ W: "
    "(n, d_model) @ (d_model, d_k) -> (n, d_k); W @ X, X @ W.T or W.T @ X do not fit these shapes"
)


def _projection_mistakes(X: Tensor, W_q: Tensor, W_k: Tensor, W_v: Tensor) -> dict[str, dict[str, Tensor]]:
    """For each of Q, K, V: message -> what a typical mistake returns in that slot."""
    Q, K, V = X @ W_q, X @ W_k, X @ W_v
    t = lambda a: a.swapaxes(-2, -1)  # noqa: E731
    d_k = W_q.shape[-1]
    transposed = "is transposed: it should be (n_tokens, d) with one row per token; compute X @ W, not (X @ W).T or W.T @ X.T"
    return {
        "Q": {
            f"Q {transposed}": t(Q),
            "Q was computed with W_k: the queries come from W_q": K,
            "Q was computed with W_v: the queries come from W_q": V,
            "Q is divided by sqrt(d_k): the projection is only X @ W_q; the 1/sqrt(d_k) scale belongs to the scores": Q
            / math.sqrt(d_k),
            "Q is the input X itself: project it, Q = X @ W_q": X,
        },
        "K": {
            "K is transposed (K^T, ready for Q @ K^T?): return K itself, (n_tokens, d_k), one row per token; "
            "transpose it in the score step": t(K),
            "K was computed with W_q: the keys come from W_k": Q,
            "K was computed with W_v: the keys come from W_k": V,
            "K is divided by sqrt(d_k): the projection is only X @ W_k; the 1/sqrt(d_k) scale belongs to the scores": K
            / math.sqrt(d_k),
            "K is the input X itself: project it, K = X @ W_k": X,
        },
        "V": {
            f"V {transposed}": t(V),
            "V was computed with W_k: the values come from W_v": K,
            "V was computed with W_q: the values come from W_v": Q,
            "V is the input X itself: project it, V = X @ W_v": X,
        },
    }


@exercise("the three projections")
def check_projections(project) -> None:
    """Check ``project(X, W_q, W_k, W_v) -> (Q, K, V)`` with rows as tokens: Q = X @ W_q, and so on."""
    n, d_model, d_k, d_v = 3, 5, 4, 6
    X2 = torch.randn(n, d_model, dtype=torch.float64)
    W_q, W_k, W_v = (torch.randn(d_model, d, dtype=torch.float64) for d in (d_k, d_k, d_v))
    cases = [
        (f"X ({n}, {d_model}), W_q ({d_model}, {d_k}), W_k ({d_model}, {d_k}), W_v ({d_model}, {d_v})", X2, False),
        (f"a batch X (2, {n}, {d_model}) with the same weights", torch.randn(2, n, d_model, dtype=torch.float64), False),
        (f"numpy arrays X ({n}, {d_model}) and weights of the same shapes", X2, True),
    ]
    for label, X, as_numpy in cases:
        args = (X, W_q, W_k, W_v)
        if as_numpy:
            args = tuple(a.numpy() for a in args)
        result = _call_with_hint(project, *args, what=label, hint=_PROJECTION_HINT)
        if not (isinstance(result, (tuple, list)) and len(result) == 3):
            raise ExerciseFailed(f"with {label}: return the three projections as a tuple (Q, K, V), got {type(result).__name__}")
        Q, K, V = (_as_tensor(r, name) for r, name in zip(result, "QKV", strict=True))
        expected = {"Q": X @ W_q, "K": X @ W_k, "V": X @ W_v}
        got = {"Q": Q, "K": K, "V": V}
        if (
            all(g.shape == e.shape for g, e in zip((Q, V, K), expected.values(), strict=True))
            and torch.allclose(Q.double(), expected["Q"])
            and torch.allclose(K.double(), expected["V"])
            and torch.allclose(V.double(), expected["K"])
        ):
            raise ExerciseFailed(f"with {label}: K and V are swapped: return (Q, K, V) in this order")
        mistakes = _projection_mistakes(X, W_q, W_k, W_v)
        for name in "QKV":
            expect_close(
                got[name],
                expected[name],
                f"{name} with {label}",
                atol=1e-10,
                rtol=1e-8,
                mistakes=mistakes[name],
                float32_path=True,
            )


# ---------------------------------------------------------------- scores

_SCORES_HINT = (
    "the score of query i and key j is the dot product of row i of Q and row j of K, so the matrix is "
    "Q @ K^T: (n, d_k) @ (d_k, m) -> (n, m). Transpose K with K.swapaxes(-2, -1), which works for numpy and torch "
    "and for batches (.T reverses *all* axes of a 3-D array, and K.transpose(0, 1) swaps the batch axis with the keys)"
)


def _score_mistakes(Q: Tensor, K: Tensor, scale: bool) -> dict[str, Tensor]:
    raw = Q @ K.swapaxes(-2, -1)  # (..., n, m)
    d_k, m, n = Q.shape[-1], K.shape[-2], Q.shape[-2]
    right = raw / math.sqrt(d_k) if scale else raw
    mistakes = {
        "the scores are transposed: rows must be queries and columns keys, Q @ K^T, not K @ Q^T": right.swapaxes(-2, -1),
        "the scores are divided by d_k; divide by sqrt(d_k)": raw / d_k,
        "the scores are multiplied by sqrt(d_k); divide by it": raw * math.sqrt(d_k),
        "the scores are divided by the square root of the number of keys; the scale is 1/sqrt(d_k), d_k = Q.shape[-1]": raw
        / math.sqrt(m),
        "the scores are divided by the square root of the number of queries; the scale is 1/sqrt(d_k), d_k = Q.shape[-1] "
        "(for a batch Q (batch, n, d_k), Q.shape[1] and len(Q[0]) count the queries; count from the end)": raw / math.sqrt(n),
        "the scores are divided by d_k / 2: d_k ** 1/2 is (d_k ** 1) / 2, since ** binds tighter than /; "
        "write d_k ** 0.5 or math.sqrt(d_k)": raw / (d_k / 2),
        "softmax was applied: this function returns the scores, before softmax": torch.softmax(right, -1),
        "softmax (over the keys) of the scores was applied: return the scores themselves": torch.softmax(raw, -1),
    }
    if Q.dim() == 3:
        mistakes[
            "the scores are divided by the square root of the batch size, Q.shape[0]; the scale is 1/sqrt(d_k) with "
            "d_k = Q.shape[-1], the last axis (counting from the end works for a matrix and a batch alike)"
        ] = raw / math.sqrt(Q.shape[0])
    if scale:
        mistakes["with scale=True the scores are not divided by sqrt(d_k) (the missing 1/sqrt(d_k) scale)"] = raw
    else:
        mistakes["with scale=False the scores are still divided by sqrt(d_k): scale=False means plain dot products Q @ K^T"] = (
            raw / math.sqrt(d_k)
        )
    return mistakes


def _numpy_only_message(fn: Callable[..., Any], message: str) -> str | None:
    """One short line for a scores function that is right on torch tensors and breaks on numpy arrays at the product.

    The likeliest cause is torch's ``K.transpose(-2, -1)``: numpy's ``transpose`` takes the order of all the axes, so
    on a 2-D array ``transpose(-2, -1)`` changes nothing and the product fails with a raw gufunc error. ``None`` where
    the message is already specific (a torch-only function or method is named by ``call``'s own hint).
    """
    try:
        source = inspect.getsource(fn)
    except (OSError, TypeError):
        source = ""
    transposed = re.search(r"\.transpose\(\s*-[12]\s*,\s*-[12]\s*\)", source) is not None
    if not transposed and "mismatch in its core dimension" not in message:
        return None
    return (
        "right on torch tensors, but on numpy arrays K.transpose(-2, -1) does not swap the last two axes (numpy's "
        "transpose takes the order of all the axes, so on a 2-D array it changes nothing): use K.swapaxes(-2, -1), "
        "which numpy and torch share"
        if transposed
        else "right on torch tensors, but the product fails on numpy arrays: the last two axes of K were not swapped "
        "there (numpy's transpose takes the order of all the axes); use K.swapaxes(-2, -1), which numpy and torch share"
    )


@exercise("the score matrix")
def check_scores(scores_fn) -> None:
    """Check ``scores_fn(Q, K, scale=True)``: ``Q @ K^T``, divided by ``sqrt(d_k)`` when ``scale``."""
    n, m, d_k = 3, 5, 6  # d_k / 2 != sqrt(d_k) != sqrt(n) != sqrt(m): each wrong scale shows
    Q2, K2 = torch.randn(n, d_k, dtype=torch.float64), torch.randn(m, d_k, dtype=torch.float64)
    Qb, Kb = torch.randn(2, n, d_k, dtype=torch.float64), torch.randn(2, m, d_k, dtype=torch.float64)
    cases = [
        (f"Q ({n}, {d_k}), K ({m}, {d_k})", Q2, K2, False),
        (f"a batch Q (2, {n}, {d_k}), K (2, {m}, {d_k})", Qb, Kb, False),
        (f"numpy arrays Q ({n}, {d_k}), K ({m}, {d_k})", Q2, K2, True),
    ]
    for label, Q, K, as_numpy in cases:
        args = (Q.numpy(), K.numpy()) if as_numpy else (Q, K)
        raw = Q @ K.swapaxes(-2, -1)
        for scale in (True, False):
            what = f"{label} and scale={scale}"
            try:
                out = _as_tensor(_call_with_hint(scores_fn, *args, scale=scale, what=what, hint=_SCORES_HINT), "the scores")
            except ExerciseFailed as err:
                short = _numpy_only_message(scores_fn, str(err)) if as_numpy else None
                if short is None:  # right on torch tensors (the cases before), broken on numpy by K.transpose(-2, -1)
                    raise
                raise ExerciseFailed(short) from None
            expected = raw / math.sqrt(d_k) if scale else raw
            expect_close(
                out,
                expected,
                f"scores with {what}",
                atol=1e-10,
                rtol=1e-8,
                mistakes=_score_mistakes(Q, K, scale),
                float32_path=True,
            )
        out = _call_with_hint(scores_fn, *args, what=f"{label} and no scale argument", hint=_SCORES_HINT)
        expect_close(
            _as_tensor(out, "the scores"),
            raw / math.sqrt(d_k),
            f"scores with {label} and the default scale",
            atol=1e-10,
            rtol=1e-8,
            mistakes={"the default should be scale=True (a transformer divides by sqrt(d_k))": raw},
        )


# ---------------------------------------------------------------- spot the mistakes


def _flawed_facts() -> dict[str, Any]:
    """What the flawed hand solution of notebook 02 gets wrong, computed from the fixtures."""
    from helpers.data import load_fixture

    example, hand = load_fixture("self_attention_example"), load_fixture("flawed_hand_solution")
    X = np.array(example["X"], dtype=float)
    Q, K = X @ np.array(example["W_Q"], dtype=float), X @ np.array(example["W_K"], dtype=float)
    Q_hand, K_hand = np.array(hand["Q"]), np.array(hand["K"])
    S_hand, W_hand = np.array(hand["scores"]), np.array(hand["weights"])
    q_entry = tuple(int(i) for i in np.argwhere(~np.isclose(Q_hand, Q))[0])
    k_row = int(np.argwhere(~np.isclose(K_hand, K).all(axis=1))[0, 0])
    scale_used = float(np.median((Q_hand @ K_hand.T)[S_hand != 0] / S_hand[S_hand != 0]))
    e = np.exp(S_hand - S_hand.max(1, keepdims=True))
    soft = e / e.sum(1, keepdims=True)
    dropped = float(soft[W_hand == 0].max())
    raw = Q @ K.T
    right_scores = {
        "the correct scores Q @ K^T / sqrt(d_k)": raw / math.sqrt(Q.shape[1]),
        "the correct unscaled scores Q @ K^T": raw,
    }
    return {
        "right_scores": right_scores,
        "q_entry": q_entry,
        "k_row": k_row,
        "scale_used": scale_used,
        "dropped": dropped,
        "shape": (X.shape[0], np.array(example["W_V"]).shape[1]),
        "d_k": Q.shape[1],
        "soft": soft,
        "hand_weights": W_hand,
    }


def _largest_dropped(scores: np.ndarray, hand_weights: np.ndarray) -> float:
    """The largest softmax weight of ``scores`` where the hand solution wrote 0."""
    e = np.exp(scores - scores.max(1, keepdims=True))
    return float((e / e.sum(1, keepdims=True))[hand_weights == 0].max())


def _is_boolean_mask(answer: object) -> bool:
    """A numpy or torch array of booleans (a comparison's result) given where an index belongs."""
    if isinstance(answer, np.ndarray):
        return answer.dtype == bool and answer.size > 1
    return isinstance(answer, Tensor) and answer.dtype == torch.bool and answer.numel() > 1


def _plain(answer: object) -> object:
    """numpy/torch scalars and arrays, lists and shapes -> Python ints, floats and tuples (for comparisons)."""
    if isinstance(answer, (np.ndarray, Tensor)):
        answer = answer.tolist()
    elif isinstance(answer, np.generic):
        answer = answer.item()
    if isinstance(answer, (list, tuple, torch.Size)):
        return tuple(_plain(a) for a in answer)
    if isinstance(answer, float) and answer.is_integer():
        return int(answer)
    return answer


def _index(answer: object) -> object:
    """An index as the student may compute it -> a plain int or tuple of ints.

    ``np.argwhere(mask)`` finding one entry gives ``[[r, c]]`` (or ``[[k]]``), ``np.where(mask)`` gives
    ``(array([r]), array([c]))`` (or ``(array([k]),)``): both are accepted as that one index.
    """
    a = _plain(answer)
    if isinstance(a, tuple) and a and all(isinstance(x, tuple) and len(x) == 1 for x in a):
        a = tuple(x[0] for x in a)  # np.where: one array per axis, each holding one index
    while isinstance(a, tuple) and len(a) == 1 and isinstance(a[0], tuple):
        a = a[0]  # np.argwhere: one row holding the index
    return a


def _several(answer: object) -> bool:
    """True for an np.argwhere / np.where result that found more than one entry."""
    return isinstance(answer, tuple) and len(answer) > 0 and all(isinstance(x, tuple) for x in answer)


@exercise("spot the mistakes")
def check_spot_the_mistakes(slipped_q_entry, miscopied_k_row, scale_used, largest_dropped_weight, output_shape) -> None:
    """Check the five findings about the flawed hand solution of notebook 02 (0-based indices)."""
    facts = _flawed_facts()
    require_attempt(slipped_q_entry, "slipped_q_entry")
    require_attempt(miscopied_k_row, "miscopied_k_row")
    if _is_boolean_mask(slipped_q_entry):
        raise ExerciseFailed(
            "slipped_q_entry is a boolean mask of the entries (what ~np.isclose(...) gives), not an index: give the "
            "(row, column) of its True entry, e.g. tuple(np.argwhere(mask)[0]) (np.argwhere(mask) itself is accepted)"
        )
    if _is_boolean_mask(miscopied_k_row):
        raise ExerciseFailed(
            "miscopied_k_row is a boolean mask of the rows, not a row number: give the index of its True entry, "
            "e.g. int(np.flatnonzero(mask)[0]) (np.argwhere(mask) itself is accepted)"
        )
    slipped_q_entry, miscopied_k_row = _index(slipped_q_entry), _index(miscopied_k_row)
    if isinstance(slipped_q_entry, int) and not isinstance(slipped_q_entry, bool):
        raise ExerciseFailed(
            f"slipped_q_entry is the single number {slipped_q_entry}: a flat index (np.argmax or np.flatnonzero count "
            "the entries row after row) does not say the row and the column; give the pair (row, column), e.g. "
            "np.unravel_index(i, Q.shape) or tuple(np.argwhere(...)[0])"
        )
    output_shape = _plain(output_shape)
    if isinstance(miscopied_k_row, tuple) and len(miscopied_k_row) == 1:
        miscopied_k_row = miscopied_k_row[0]
    r, c = facts["q_entry"]
    if _several(slipped_q_entry):
        raise ExerciseFailed(
            f"slipped_q_entry: {slipped_q_entry!r} lists several entries (np.where gives one array per axis, np.argwhere one row "
            "per entry); exactly one entry of Q has a slipped sign: compare Q_hand with your Q using np.isclose, and give that "
            "one (row, column) pair, e.g. tuple(np.argwhere(...)[0]); a single-entry result of np.argwhere or np.where is fine as it is"
        )
    if _several(miscopied_k_row) or (isinstance(miscopied_k_row, tuple) and len(miscopied_k_row) > 1):
        rows = sorted({x[0] for x in miscopied_k_row if isinstance(x, tuple) and x}) if _several(miscopied_k_row) else None
        which = f" (all in row {rows[0]})" if rows is not None and len(rows) == 1 else ""
        raise ExerciseFailed(
            f"miscopied_k_row: {miscopied_k_row!r} is not one row number: it lists several indices{which}. Give the row as an int: "
            "reduce the comparison over each row first, e.g. np.argwhere(~np.isclose(K_hand, X @ W_K).all(axis=1)), "
            "which finds one row (and is accepted as it is)"
        )
    expect_equal_answer(
        slipped_q_entry,
        (r, c),
        "slipped_q_entry (row, column) of Q",
        hints={
            (c, r): "that is (column, row): a row of Q is a token, a column is a feature",
            (r + 1, c + 1): "Python counts from 0: the first token is row 0",
        },
    )
    k = facts["k_row"]
    hints_k = {k + 1: "Python counts from 0: the first key is row 0"}
    hints_k.update(
        {
            j: f"row {j} of K is x{j + 1} @ W_K, as it should be; compare every row of the hand K with X @ W_K"
            for j in range(3)
            if j != k
        }
    )
    expect_equal_answer(
        miscopied_k_row, k, "miscopied_k_row (the row of K computed with a differently copied W_K)", hints=hints_k
    )
    require_attempt(scale_used, "scale_used")
    sqrt_dk = math.sqrt(facts["d_k"])
    if isinstance(scale_used, (np.ndarray, Tensor, list, tuple)) and np.size(np.asarray(scale_used, dtype=object)) > 1:
        raise ExerciseFailed(
            "scale_used holds one ratio per entry; give one number: the ratios are all the same (apart from the 0 / 0 "
            "entry, which is nan), so reduce them, e.g. float(np.median(ratios[scores_hand != 0]))"
        )
    try:
        value = float(scale_used)
    except (TypeError, ValueError):
        raise ExerciseFailed(f"scale_used should be a number, got {type(scale_used).__name__}") from None
    if not math.isclose(value, facts["scale_used"], rel_tol=1e-6):
        if math.isnan(value):
            raise ExerciseFailed("scale_used is nan: one hand score is 0, and 0 / 0 is nan; divide only where scores_hand != 0")
        if math.isclose(value, sqrt_dk, rel_tol=1e-3):
            raise ExerciseFailed(
                "scale_used: sqrt(d_k) is what the formula *says*; divide the hand solution's own Q_hand @ K_hand.T "
                "by its score matrix to see what its numbers were really divided by"
            )
        if math.isclose(value, facts["d_k"], rel_tol=1e-3) or math.isclose(value, 1 / sqrt_dk, rel_tol=1e-3):
            raise ExerciseFailed(
                f"scale_used: {value:.4g} is not it; compare the hand scores with Q_hand @ K_hand.T entry by entry"
            )
        raise ExerciseFailed(
            f"scale_used: {value:.4g} is not right; the ratio (Q_hand @ K_hand.T) / scores is the same in every entry"
        )
    require_attempt(largest_dropped_weight, "largest_dropped_weight")
    try:
        dropped = float(largest_dropped_weight)
    except (TypeError, ValueError):
        raise ExerciseFailed(f"largest_dropped_weight should be a number, got {type(largest_dropped_weight).__name__}") from None
    if not math.isclose(dropped, facts["dropped"], abs_tol=5e-5):
        soft = facts["soft"]
        if math.isclose(dropped, float(soft.max()), abs_tol=5e-5) or math.isclose(dropped, 1.0, abs_tol=5e-5):
            raise ExerciseFailed(
                "largest_dropped_weight: that is a weight the rounding turned into 1; look at the entries it set to 0"
            )
        if math.isclose(dropped, float(soft[facts["hand_weights"] == 0].sum()), abs_tol=5e-5):
            raise ExerciseFailed(
                "largest_dropped_weight: that is the sum of all the weights set to 0; give the largest single one"
            )
        for name, right_scores in facts["right_scores"].items():
            if math.isclose(dropped, _largest_dropped(right_scores, facts["hand_weights"]), abs_tol=5e-5):
                raise ExerciseFailed(
                    f"largest_dropped_weight: that comes from {name}; the question is what the hand solution threw away, "
                    "so apply softmax to its own scores_hand, as written, and look where its weights are 0"
                )
        if math.isclose(dropped, facts["dropped"], abs_tol=5e-3):
            raise ExerciseFailed(
                f"largest_dropped_weight: {dropped!r} is rounded too coarsely (the check accepts a difference of 5e-5): "
                "give the value your code computes, or at least 4 decimals"
            )
        raise ExerciseFailed(
            f"largest_dropped_weight: {dropped:.4f} is not right; apply softmax to each row of the hand scores "
            "(as written) and take the largest value where the hand weights are 0"
        )
    expect_equal_answer(
        output_shape,
        facts["shape"],
        "output_shape (the shape of the self-attention output)",
        hints={
            (
                facts["shape"][1],
            ): "that is the shape of the hand solution's single vector; every query (token) gets its own output row",
            tuple(reversed(facts["shape"])): "rows are tokens: (number of queries, d_v)",
            (facts["shape"][0], facts["shape"][0]): "that is the shape of the attention weights (one row per query, one "
            "column per key); the output multiplies them by V: (queries, keys) @ (keys, d_v)",
            (facts["shape"][0],): "each output row is a vector of size d_v, not a number",
        },
    )
