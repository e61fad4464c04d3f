"""Check of notebook 04's exercise 4.1: every head's scores from the un-split projections.

- ``check_head_scores(head_scores)``: ``head_scores(queries, keys, num_heads)`` takes the
  projected, not yet split, queries ``(batch, n, d_model)`` and keys ``(batch, m, d_model)``
  and returns the scaled scores of every head, ``(batch, heads, n, m)``:
  ``scores[b, h, i, j] = q_i^(h) . k_j^(h) / sqrt(d_k)``, where ``q_i^(h)`` is features
  ``h*d_k .. (h+1)*d_k - 1`` of query ``i``.

Any right way passes (``unflatten`` + ``einsum``, ``view`` + ``transpose`` + ``@``, a loop over
heads); the usual mistakes are named: a missing or wrong scale, the weights returned instead of
the scores, queries and keys swapped, the view-versus-transpose trap, strided or reversed heads,
heads summed together, the walkthrough's sizes hard-coded.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

from helpers.attention import head_scores as _scores  # the reference: unflatten + einsum
from helpers.checks._core import ExerciseFailed, call_attempt, exercise, expect_close, expect_shape, expect_tensor

__all__ = ["check_head_scores", "check_multi_head_columns"]


def _shape_hint(got: tuple[int, ...], batch: int, heads: int, n: int, m: int) -> str | None:
    hints = [
        (
            (batch, heads, m, n),
            (
                "queries and keys are swapped: the scores have one row per query (n) and one column per key (m), "
                "e.g. einsum 'bnhk,bmhk->bhnm' with the queries first"
            ),
        ),
        (
            (batch, n, m),
            (
                "the heads were summed together (or one dot product over all d_model features was taken): "
                "keep the head axis, (batch, heads, n, m)"
            ),
        ),
        ((batch, n, heads, m), "the axes are in the wrong order: the result is (batch, heads, n, m), heads before the queries"),
        ((batch, n, m, heads), "the head axis is last: the result is (batch, heads, n, m)"),
        ((batch * heads, n, m), "batch and heads are merged into one axis: keep them apart, (batch, heads, n, m)"),
        ((batch, heads, n, n), "the scores are (n, n) per head: the queries were compared with themselves; use the keys"),
        ((batch, heads, m, m), "the scores are (m, m) per head: the keys were compared with themselves; use the queries as rows"),
    ]
    for shape, hint in hints:  # the first that fits wins
        if got == shape:
            return hint
    if len(got) == 4 and got[0] == batch and got[1] != heads and got[2:] == (n, m):
        return f"axis 1 has {got[1]} heads but num_heads is {heads}: use the num_heads argument and the sizes of the inputs, do not hard-code them"
    return None


def _mistakes(q: Tensor, k: Tensor, heads: int) -> dict[str, Tensor | None]:
    batch, n, d_model = q.shape
    m = k.shape[1]
    d_k = d_model // heads
    raw = _scores(q, k, heads) * math.sqrt(d_k)  # unscaled
    trap_q = q.reshape(batch, heads, n, d_k)
    trap_k = k.reshape(batch, heads, m, d_k)
    strided_q = q.view(batch, n, d_k, heads).permute(0, 3, 1, 2)
    strided_k = k.view(batch, m, d_k, heads).permute(0, 3, 1, 2)
    return {
        "the scores are not scaled: divide the dot products by sqrt(d_k)": raw,
        "scaled by 1/sqrt(d_model): each head's dot product has only d_k = d_model / num_heads terms, divide by sqrt(d_k)": raw
        / math.sqrt(d_model),
        "divided by d_k instead of sqrt(d_k)": raw / d_k,
        "multiplied by sqrt(d_k) instead of dividing": raw * math.sqrt(d_k),
        "divided by sqrt(num_heads): each head's dot products have d_k = d_model / num_heads terms, divide by sqrt(d_k)": raw
        / math.sqrt(heads),
        "divided by d_k / 2: d_k ** 1/2 is (d_k ** 1) / 2, since ** binds tighter than /; write d_k ** 0.5 or math.sqrt(d_k)": raw
        / (d_k / 2),
        "divided by 2 * d_k: scores / d_k ** 1/2 divides by d_k and then by 2, since ** binds tighter than /; "
        "write scores / d_k ** 0.5 or scores / math.sqrt(d_k)": raw / (2 * d_k),
        "you returned the attention weights (a softmax was applied); return the scaled scores, before any softmax": torch.softmax(
            raw / math.sqrt(d_k), dim=-1
        ),
        "you returned softmax over the queries' axis; return the scaled scores, before any softmax": torch.softmax(
            raw / math.sqrt(d_k), dim=-2
        ),
        "the view-versus-transpose trap: reshaping (batch, n, d_model) straight to (batch, heads, n, d_k) mixes tokens across heads; "
        "unflatten the LAST axis into (heads, d_k) so that every token keeps its own features": trap_q
        @ trap_k.transpose(-2, -1)
        / math.sqrt(d_k),
        "the heads take every num_heads-th feature (strided) instead of a contiguous block of d_k features: "
        "unflatten the last axis as (heads, d_k), not (d_k, heads)": strided_q @ strided_k.transpose(-2, -1) / math.sqrt(d_k),
        "the heads come out in reverse order: head h uses features h*d_k .. (h+1)*d_k - 1": _scores(q, k, heads).flip(1),
        "every head got the scores over all d_model features (the heads were not split)": (
            q @ k.transpose(-2, -1) / math.sqrt(d_k)
        )[:, None].expand(batch, heads, n, m),
    }


@exercise("every head's scores")
def check_head_scores(head_scores) -> None:
    """Check ``head_scores(queries, keys, num_heads)`` -> ``(batch, heads, n, m)`` scaled scores of every head."""
    cases = (
        (2, 4, 5, 18, 3, torch.float64),
        (1, 5, 2, 12, 2, torch.float64),
        (3, 2, 6, 20, 4, torch.float64),
        (2, 4, 3, 18, 6, torch.float32),
    )
    for batch, n, m, d_model, heads, dtype in cases:
        q = torch.randn(batch, n, d_model, dtype=dtype)
        k = torch.randn(batch, m, d_model, dtype=dtype)
        label = f"queries of shape {(batch, n, d_model)}, keys of shape {(batch, m, d_model)} and num_heads={heads}"
        name = f"head_scores on {label}"
        try:
            out = expect_tensor(call_attempt(head_scores, q, k, heads, what=label), f"head_scores(queries, keys, {heads})")
        except ExerciseFailed as err:
            message = str(err)
            if "unflatten" in message and "dim 1 " in message:
                raise ExerciseFailed(
                    f"{message.split('. The sizes asked for')[0]}. unflatten(1, ...) splits the tokens axis; split the "
                    "features, the last axis: queries.unflatten(-1, (num_heads, d_k))"
                ) from None
            if "batch2 tensor" in message or "cannot be multiplied" in message:
                raise ExerciseFailed(
                    f"{message}. Within each head the scores are q @ k^T: (n, d_k) @ (d_k, m); transpose the keys' last "
                    "two axes, k.transpose(-2, -1), after splitting the heads"
                ) from None
            raise
        expected = _scores(q.double(), k.double(), heads)
        got = tuple(out.shape)
        if got != tuple(expected.shape):
            hint = _shape_hint(got, batch, heads, n, m)
            if hint is not None:
                raise ExerciseFailed(f"{name}: got shape {got}, expected {tuple(expected.shape)}: {hint}")
            expect_shape(out, expected.shape, name)
        if out.dtype != dtype:
            raise ExerciseFailed(
                f"{name}: the result is {out.dtype} for {dtype} inputs; keep the inputs' dtype (no .float() or .double())"
            )
        tol = 1e-10 if dtype == torch.float64 else 1e-5
        if torch.isinf(out).any() and not torch.isinf(expected).any():
            raise ExerciseFailed(
                f"{name}: {int(torch.isinf(out).sum())} scores are -inf or inf: a mask was applied (masked_fill with "
                "-inf), but this exercise has no mask; return every head's scaled scores, q . k / sqrt(d_k), unmasked "
                "(the mask comes later, in the attention itself)"
            )
        expect_close(out, expected, name, atol=tol, rtol=tol, mistakes=_mistakes(q.double(), k.double(), heads))


def _columns(
    x,
    w_q,
    w_k,
    w_v,
    w_o,
    heads,
    *,
    dim=0,
    scale=None,
    order="kq",
    use_wo="wo",
    rows="block",
    values="v",
    keys="k",
    softmax=True,
    scale_after=False,
    causal=False,
):
    """Multi-head self-attention in the numerator (column) layout, with knobs that reproduce typical mistakes."""
    d_model = x.shape[0]
    d_k = d_model // heads
    scale = {None: 1 / math.sqrt(d_k), "d_model": 1 / math.sqrt(d_model), "d_k": 1 / d_k, "half_d_k": 2 / d_k}.get(scale, scale)
    w_keys = {"k": w_k, "q": w_q}[keys]
    w_values = {"v": w_v, "k": w_k}[values]
    stacked = []
    for i in range(heads):
        r = slice(i * d_k, (i + 1) * d_k) if rows in ("block", "columns") else slice(i, d_model, heads)
        if rows == "columns":  # a block of columns, transposed so that the shapes work: the row layout's reading
            q_i, k_i, v_i = w_q[:, r].T @ x, w_keys[:, r].T @ x, w_values[:, r].T @ x  # (d_k, n) each
        else:
            q_i, k_i, v_i = w_q[r] @ x, w_keys[r] @ x, w_values[r] @ x  # (d_k, n) each
        scores = k_i.T @ q_i if order == "kq" else q_i.T @ k_i  # (n, n)
        if causal:  # key j (row) hidden from query i (column) when j > i
            scores = scores.masked_fill(torch.ones_like(scores, dtype=torch.bool).tril(-1), float("-inf"))
        if scale_after:  # the softmax of the unscaled scores, then the scale
            stacked.append(v_i @ (scale * torch.softmax(scores, dim=dim)))  # (d_k, n)
            continue
        stacked.append(v_i @ (torch.softmax(scale * scores, dim=dim) if softmax else scale * scores))  # (d_k, n)
    h = torch.cat(stacked, dim=0)  # (h * d_k, n)
    return {"wo": w_o @ h, "none": h, "wo_t": w_o.T @ h}[use_wo]


def _torch_columns(x: Tensor, w_q: Tensor, w_k: Tensor, w_v: Tensor, w_o: Tensor, heads: int) -> Tensor:
    """nn.MultiheadAttention on the rows X^T, transposed back: the reference in the column layout."""
    d_model = x.shape[0]
    mha = torch.nn.MultiheadAttention(d_model, heads, bias=False, batch_first=True, dtype=torch.float64)
    with torch.no_grad():
        mha.in_proj_weight.copy_(torch.cat([w_q, w_k, w_v]))  # nn.Linear's (out, in) is the column layout's matrix
        mha.out_proj.weight.copy_(w_o)
        out, _ = mha(x.T[None], x.T[None], x.T[None], need_weights=False)  # (1, n, d_model)
    return out[0].T  # (d_model, n)


@exercise("multi-head attention in the numerator layout")
def check_multi_head_columns(multi_head_columns) -> None:
    """Check ``multi_head_columns(X, W_q, W_k, W_v, W_o, num_heads)`` -> ``H`` ``(d_model, n)``, tokens as columns."""
    for d_model, heads, n in ((18, 3, 5), (12, 2, 4), (20, 4, 3)):  # d_k = 6, 6, 5: d_k / 2 != sqrt(d_k)
        d_k = d_model // heads
        x = torch.randn(d_model, n, dtype=torch.float64)
        w_q, w_k, w_v, w_o = (torch.randn(d_model, d_model, dtype=torch.float64) / math.sqrt(d_model) for _ in range(4))
        w_q = w_q * 3  # larger scores, so that a wrong scale or softmax axis shows clearly
        args = (x, w_q, w_k, w_v, w_o)
        label = f"X of shape {(d_model, n)}, four ({d_model}, {d_model}) weights and num_heads={heads}"
        name = f"multi_head_columns on {label}"
        try:
            out = expect_tensor(call_attempt(multi_head_columns, *args, heads, what=label), "H")
        except ExerciseFailed as err:
            message = str(err)
            if "batch2 tensor" in message:
                raise ExerciseFailed(
                    f"{message}. torch.stack puts the heads on a new axis; W_o multiplies their concatenation, "
                    "torch.cat(heads, dim=0), a (d_model, n) matrix with one block of d_k rows per head"
                ) from None
            if "cannot be multiplied" in message:
                raise ExerciseFailed(
                    f"{message}. Head i's matrices are blocks of d_k consecutive *rows*, W_q[i * d_k:(i + 1) * d_k] "
                    "(shape (d_k, d_model), so that W_q[rows] @ X works), not columns W_q[:, ...]"
                ) from None
            raise
        expected = _torch_columns(*args, heads)
        got = tuple(out.shape)
        if got != (d_model, n):
            hints = {
                (n, d_model): "H is transposed: in the numerator layout H has one column per token, (d_model, n)",
                (
                    d_k,
                    n,
                ): "the heads' outputs were added (or only one head kept): stack them vertically, torch.cat(..., dim=0), then W_o",
                (
                    d_k,
                    n * heads,
                ): "the heads were stacked side by side (dim=1): stack them vertically, one block of d_k rows per head",
            }
            if got in hints:
                raise ExerciseFailed(f"{name}: got shape {got}, expected {(d_model, n)}: {hints[got]}")
            expect_shape(out, (d_model, n), name)
        mistakes = {
            "softargmax over each row (over the queries): in the numerator layout K_i^T Q_i has one column per query, "
            "and each column must sum to 1: softmax over dim 0": _columns(*args, heads, dim=1),
            "the scores are not scaled: softargmax_beta with beta = 1/sqrt(d_k)": _columns(*args, heads, scale=1.0),
            "scaled by 1/sqrt(d_model): each head's dot products have d_k terms, beta = 1/sqrt(d_k)": _columns(
                *args, heads, scale="d_model"
            ),
            "Q_i^T K_i instead of K_i^T Q_i: with softmax over dim 0 each column then sums over the queries, not the keys": _columns(
                *args, heads, order="qk"
            ),
            "the weights are in the row layout (one row per query, softmax over dim 1), so V_i A_i mixes the wrong way: "
            "use K_i^T Q_i with the softmax over dim 0, or transpose": _columns(*args, heads, order="qk", dim=1),
            "W_o is missing: H = W_o @ [V_1 A_1; ...; V_h A_h]": _columns(*args, heads, use_wo="none"),
            "W_o is transposed: in the column layout H = W_o @ (stacked heads), the weights act from the left": _columns(
                *args, heads, use_wo="wo_t"
            ),
            "the heads take every num_heads-th row of W_q, W_k, W_v (strided) instead of a block of d_k consecutive rows": _columns(
                *args, heads, rows="strided"
            ),
            "head i took a block of d_k *columns* of W_q, W_k, W_v (W_q[:, rows].T, the row layout's reading); in the "
            "column layout W^Q_i is a block of d_k consecutive rows, W_q[i * d_k:(i + 1) * d_k]": _columns(
                *args, heads, rows="columns"
            ),
            "the values were computed with W_k: V_i = W^V_i X": _columns(*args, heads, values="k"),
            "the keys were computed with W_q: K_i = W^K_i X": _columns(*args, heads, keys="q"),
            "the softmax is missing: A_i = softargmax(K_i^T Q_i / sqrt(d_k)) over dim 0": _columns(*args, heads, softmax=False),
            "divided by d_k instead of sqrt(d_k)": _columns(*args, heads, scale="d_k"),
            "divided by d_k / 2: d_k ** 1/2 is (d_k ** 1) / 2, since ** binds tighter than /; write d_k ** 0.5 or "
            "math.sqrt(d_k)": _columns(*args, heads, scale="half_d_k"),
            "the scale 1/sqrt(d_k) is applied after the softmax (to the weights); it belongs inside, on the scores: "
            "softargmax(K_i^T Q_i / sqrt(d_k)), so the columns of A_i still sum to 1": _columns(*args, heads, scale_after=True),
            "a causal mask was applied: this exercise's self-attention is unmasked, every query sees every key; "
            "leave out the masked_fill": _columns(*args, heads, causal=True),
        }
        expect_close(out, expected, name, atol=1e-10, rtol=1e-10, mistakes=mistakes)
