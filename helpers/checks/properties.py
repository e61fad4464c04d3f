"""Checks of notebook 03 (softmax temperature, properties of attention): the weight constructions.

Notebook 03 gives every token a one-hot position: the input of attention is
``[X | I_n]`` (content features, then n position features). The checks build the
attention from the student's weights and compare its output with the target
operation (a permutation of the tokens, ``nn.Conv1d``) on fresh random inputs.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from helpers.attention import attention_with_positions
from helpers.checks._core import (
    ExerciseFailed,
    NotAttempted,
    call_attempt,
    exercise,
    expect_close,
    expect_tensor,
    is_unattempted,
)

# The references (hard_attention_beta, permutation_projections, conv_head_weights, attention_with_positions,
# helpers.attention's softargmax_attention and softmax_backward) stay module attributes: exported, a star import would
# overwrite a student's function of the same name.
__all__ = [
    "check_attend",
    "check_hard_attention_beta",
    "check_softmax_backward",
    "check_permutation_projections",
    "check_conv_head_weights",
]

call = call_attempt  # a stub's NotImplementedError left in one branch of a written function is a named failure


def permutation_projections(perm: Tensor, d: int, strength: float = 30.0) -> tuple[Tensor, Tensor, Tensor]:
    """Reference: W_Q, W_K ``(d + n, n)`` and W_V ``(d + n, d)`` so that attention on ``[X | I_n]`` returns ``X[perm]``.

    Query i is ``strength * e_perm[i]``, key j is ``strength * e_j``: only the pair
    (i, perm[i]) scores high. W_V copies the content features and drops the positions.
    """
    perm = torch.as_tensor(perm)
    n, like = perm.numel(), {"dtype": torch.float64, "device": perm.device}
    W_Q = torch.zeros(d + n, n, **like)
    W_Q[d + torch.arange(n, device=perm.device), perm] = strength  # position i -> e_perm[i]
    W_K = torch.zeros(d + n, n, **like)
    W_K[d:] = strength * torch.eye(n, **like)  # position j -> e_j
    W_V = torch.zeros(d + n, d, **like)
    W_V[:d] = torch.eye(d, **like)  # content only
    return W_Q, W_K, W_V


def conv_head_weights(conv: nn.Conv1d) -> tuple[Tensor, Tensor]:
    """Reference: the value weights ``(kernel_size, d_in, d_out)`` of the heads that rebuild ``conv``, and its bias ``(d_out,)``.

    Head h attends to offset ``h - kernel_size // 2``; its values are ``x @ conv.weight[:, :, h].T``.
    """
    weight = conv.weight.detach()  # (d_out, d_in, kernel_size)
    bias = conv.bias.detach() if conv.bias is not None else torch.zeros(weight.shape[0], dtype=weight.dtype, device=weight.device)
    return weight.permute(2, 1, 0), bias  # (kernel_size, d_in, d_out), (d_out,)


def hard_attention_beta(scores: Tensor, eps: float = 0.01) -> float:
    """Reference: the beta from notebook 03 that puts weight >= 1 - eps on the best key.

    scores ``(m,)``; ``beta = ln((m - 1) / eps) / gap`` with ``gap`` the largest score
    minus the second largest; ``math.inf`` when the two best scores tie.
    """
    top2 = torch.as_tensor(scores, dtype=torch.float64).topk(2).values
    gap = (top2[0] - top2[1]).item()
    if gap == 0:
        return math.inf
    return math.log((len(scores) - 1) / eps) / gap


# ---------------------------------------------------------------- attention with an inverse temperature

_ATTEND_SHAPES = (
    "In this layout keys, values and queries are columns: K (..., d, m), V (..., d_v, m), Q (..., d, n); the scores are "
    "K^T Q, (..., m, n): transpose the last two axes of K with K.mT or K.transpose(-2, -1) (K.T reverses every axis of a "
    "batched tensor), and H = V @ weights is (..., d_v, n)"
)


def _attend_variants(beta: float, K: Tensor, V: Tensor, Q: Tensor) -> dict[str, Tensor | None]:
    """Weights ``(..., m, n)`` that the typical wrong versions of ``attend`` give (float64; None where undefined)."""
    S = K.mT @ Q  # (..., m, n)
    d = K.shape[-2]

    def over_keys(scores: Tensor) -> Tensor:
        return torch.softmax(scores, dim=-2)

    exps = torch.exp(beta * S)
    shift_rows = torch.exp(beta * S - (beta * S).amax(-1, keepdim=True))  # the maximum over the queries
    variants: dict[str, Tensor | None] = {
        "exp overflowed at a large beta (beyond 709 in float64, 88 in float32): subtract each column's maximum before exp, "
        "or use torch.softmax(beta * scores, dim=-2)": exps / exps.sum(-2, keepdim=True),
        "the softmax runs over the queries (dim=-1), so each key's weights sum to 1; in this layout each column is one "
        "query, and its weights over the keys (the rows) must sum to 1: softmax(..., dim=-2)": torch.softmax(beta * S, dim=-1),
        "beta is ignored: it multiplies the scores, softmax(beta * K^T Q)": over_keys(S) if beta != 1 else None,
        "the scores are divided by beta; beta is an inverse temperature and multiplies them, softmax(beta * K^T Q)": (
            over_keys(S / beta) if beta not in (0.0, 1.0) else None
        ),
        "the scores are scaled twice: beta already is the scale (a transformer's beta is 1/sqrt(d)), so do not also divide "
        "by sqrt(d); softmax(beta * K^T Q)": over_keys(beta * S / math.sqrt(d)),
        "the scores are divided by sqrt(d) instead of multiplied by beta: use the `beta` you are given": over_keys(
            S / math.sqrt(d)
        ),
        "the sign of beta is flipped: softmax(-beta * K^T Q) favours the keys that match the query least": (
            over_keys(-beta * S) if beta != 0 else None
        ),
        "the softmax normalises the whole matrix at once (exp(s) / exp(s).sum()); each column (one query) is normalised "
        "on its own, over the keys: dim=-2": exps / exps.sum(dim=(-2, -1), keepdim=True),
        "there is no softmax: the weights are the scores beta * K^T Q themselves; apply softmax over the keys (dim=-2)": beta * S,
        "the exponentials are not normalised: divide by their sum over the keys (or use torch.softmax(..., dim=-2))": exps,
        "the exponential is missing: softmax divides exp(beta s) by its sum over the keys, not beta s by its sum": (
            (beta * S) / (beta * S).sum(-2, keepdim=True) if beta != 0 else None
        ),
        "the maximum subtracted before exp is taken over the queries (a different constant for every key), which changes "
        "the weights; subtract each column's maximum over the keys, .amax(dim=-2, keepdim=True), or use torch.softmax": (
            shift_rows / shift_rows.sum(-2, keepdim=True)
        ),
    }
    if S.dim() == 3:
        variants[
            "the softmax runs over axis 0, the batch axis of a batched input; count the axes from the end: the keys are "
            "axis -2 (dim=-2)"
        ] = torch.softmax(beta * S, dim=0)
    return variants


def _call_attend(attend, beta: float, K: Tensor, V: Tensor, Q: Tensor, label: str, passed_2d: bool) -> object:
    """The student's attend, with the batched-transpose slip named (K.T reverses every axis of a 3-D tensor)."""
    import warnings

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            result = call(attend, beta, K.clone(), V.clone(), Q.clone(), what=label)
        except ExerciseFailed as err:
            message = str(err)
            uses_T = any("x.T" in str(w.message) for w in caught)
            if "raised" in message and (uses_T or "must match the size" in message or "multiplied" in message):
                where = (
                    " Your function works for single matrices but not for a batch: K.T reverses every axis of a batched "
                    "tensor (PyTorch warns about it); use K.mT or K.transpose(-2, -1)"
                    if passed_2d and K.dim() == 3
                    else ""
                )
                raise ExerciseFailed(f"{message}.{where} {_ATTEND_SHAPES}") from None
            raise
    if any("x.T" in str(w.message) for w in caught) and K.dim() == 3:
        result = ("x.T", result)  # checked below: a batched K.T never gives the right scores
    return result


@exercise("attention with an inverse temperature")
def check_attend(attend) -> None:
    """Check ``attend(beta, K, V, Q) -> (H, weights)``: ``H = V softargmax_beta(K^T Q)``, vectors as columns.

    K ``(..., d, m)``, V ``(..., d_v, m)``, Q ``(..., d, n)``; the weights ``(..., m, n)`` are a softmax over the keys
    (each column sums to 1) of ``beta * K^T Q``. Compared with ``F.scaled_dot_product_attention`` on the transposes.
    """
    if is_unattempted(attend):
        raise NotAttempted("attend is still `...`")
    d, m, d_v, n = 3, 5, 4, 2  # distinct sizes, so that a swapped axis shows
    K, V, Q = (torch.randn(*shape, dtype=torch.float64) for shape in ((d, m), (d_v, m), (d, n)))
    Kb, Vb, Qb = (torch.randn(2, *shape, dtype=torch.float64) for shape in ((d, m), (d_v, m), (d, n)))
    K_big = torch.randn(d, m, dtype=torch.float64) * 4
    cases = [
        (f"beta = 0.7, K ({d}, {m}), V ({d_v}, {m}), Q ({d}, {n})", 0.7, K, V, Q),
        (f"beta = 1.3 and a batch: K (2, {d}, {m}), V (2, {d_v}, {m}), Q (2, {d}, {n})", 1.3, Kb, Vb, Qb),
        ("beta = 0 (every weight should be 1/m)", 0.0, K, V, Q),
        ("beta = 60 with scores of about ±20 (beta times a score beyond exp's range)", 60.0, K_big, V, Q * 3),
        ("beta = 0.5 and float32 tensors (a batch)", 0.5, Kb.float(), Vb.float(), Qb.float()),
    ]
    passed_2d = False
    for label, beta, K, V, Q in cases:
        result = _call_attend(attend, beta, K, V, Q, f"{label}", passed_2d)
        used_T = isinstance(result, tuple) and len(result) == 2 and isinstance(result[0], str)
        if used_T:
            result = result[1]
        if not (isinstance(result, (tuple, list)) and len(result) == 2):
            raise ExerciseFailed(f"with {label}: return the pair (H, weights), got {type(result).__name__}")
        H, weights = (expect_tensor(t, name) for t, name in zip(result, ("H", "weights"), strict=True))
        K64, V64, Q64 = K.double(), V.double(), Q.double()
        expected_w = torch.softmax(beta * (K64.mT @ Q64), dim=-2)  # (..., m, n)
        expected_H = F.scaled_dot_product_attention(Q64.mT, K64.mT, V64.mT, scale=beta).mT  # (..., d_v, n)
        mm, nn_, dv = K.shape[-1], Q.shape[-1], V.shape[-2]
        if tuple(H.shape) == tuple(expected_w.shape) and tuple(weights.shape) == tuple(expected_H.shape):
            raise ExerciseFailed(f"with {label}: H and weights are swapped; return (H, weights)")
        if tuple(weights.shape) == tuple(expected_w.mT.shape) and mm != nn_:
            extra = (
                "; they are the right numbers, transposed"
                if torch.allclose(weights.double(), expected_w.mT, atol=1e-5, rtol=1e-4)
                else ""
            )
            raise ExerciseFailed(
                f"with {label}: the weights have shape {tuple(weights.shape)}, queries by keys (the rows layout){extra}; in "
                f"this layout they are K^T Q's shape, (..., m, n) = {tuple(expected_w.shape)}: one row per key, one column "
                "per query"
            )
        if tuple(H.shape) == tuple(expected_H.mT.shape) and dv != nn_:
            raise ExerciseFailed(
                f"with {label}: H has shape {tuple(H.shape)}, one row per query (the rows layout); in this layout H keeps "
                f"one column per query, (..., d_v, n) = {tuple(expected_H.shape)}: H = V @ weights"
            )
        if used_T and not torch.allclose(weights.double(), expected_w, atol=1e-5, rtol=1e-4):
            raise ExerciseFailed(
                f"with {label}: your function uses .T on a batched tensor, which reverses every axis (batch included), "
                "so the scores pair the wrong numbers; transpose the last two axes only: K.mT or K.transpose(-2, -1)"
            )
        zero_beta_nan = beta == 0 and not torch.isfinite(weights.double()).all()
        if zero_beta_nan:
            raise ExerciseFailed(
                f"with {label}: the weights hold NaN or inf; at beta = 0, dividing by beta divides by zero. beta is an "
                "inverse temperature: it multiplies the scores, softmax(beta * K^T Q, dim=-2), and beta = 0 gives the "
                "plain average"
            )
        variants = _attend_variants(beta, K64, V64, Q64)
        expect_close(
            weights,
            expected_w,
            f"the weights with {label}",
            atol=1e-10,
            rtol=1e-8,
            mistakes=variants,
            float32_path=True,
            nonfinite_hint="exp overflowed at a large beta: use torch.softmax(beta * scores, dim=-2), or subtract each "
            "column's maximum (over the keys) before exp",
        )
        mistakes_H = {
            "H uses the keys in place of the values: H = V @ weights": K64 @ expected_w if K.shape[-2] == dv else None,
            "H is the sum of the values, not their weighted average: H = V @ weights": V64.sum(-1, keepdim=True).expand_as(
                expected_H
            ),
        }
        expect_close(H, expected_H, f"H with {label}", atol=1e-10, rtol=1e-8, mistakes=mistakes_H, float32_path=True)
        passed_2d = passed_2d or K.dim() == 2


# ---------------------------------------------------------------- hard attention


@exercise("the beta for hard attention")
def check_hard_attention_beta(hard_attention_beta) -> None:
    """Check ``hard_attention_beta(scores, eps) -> float``: ``ln((m - 1) / eps) / gap``, ``inf`` for a tie."""
    if is_unattempted(hard_attention_beta):
        raise NotAttempted("hard_attention_beta is still `...`")
    cases = [
        (torch.randn(5, dtype=torch.float64) * 2, 0.01),
        (torch.randn(7, dtype=torch.float64), 0.05),
        (torch.tensor([0.5, 3.0, -1.0, 2.0], dtype=torch.float64), 0.001),
    ]
    for scores, eps in cases:
        label = f"scores {[round(v, 4) for v in scores.tolist()]} and eps={eps}"
        answer = _call_beta(hard_attention_beta, scores, eps, label)
        beta = _as_beta(answer, label)
        m = scores.numel()
        ordered = scores.sort(descending=True).values
        gap, spread = (ordered[0] - ordered[1]).item(), (ordered[0] - ordered[-1]).item()
        right = math.log((m - 1) / eps) / gap
        if math.isclose(beta, right, rel_tol=1e-6):
            weight = torch.softmax(beta * scores, 0).max().item()
            if weight < 1 - eps - 1e-12:  # cannot happen for the bound; kept as a guard
                raise ExerciseFailed(f"with {label}: at beta={beta:.4g} the largest weight is only {weight:.4f}")
            continue
        mistakes = {
            "the (m - 1) other keys are missing: the weight left for them is at most (m - 1) exp(-beta gap), so beta = ln((m - 1) / eps) / gap": math.log(
                1 / eps
            )
            / gap,
            "that uses m; the bound counts the m - 1 *other* keys: beta = ln((m - 1) / eps) / gap": math.log(m / eps) / gap,
            "that uses log base 10; the bound needs the natural logarithm (math.log)": math.log10((m - 1) / eps) / gap,
            "the gap is the largest score minus the *second* largest, not minus the smallest": math.log((m - 1) / eps) / spread,
            "that is the temperature 1/beta; return beta = ln((m - 1) / eps) / gap": gap / math.log((m - 1) / eps),
            "beta is negative: the gap is the largest score minus the second largest (sort in descending order)": -right,
            "eps and m - 1 are swapped inside the logarithm: ln((m - 1) / eps)": math.log(eps / (m - 1)) / gap,
            "the logarithm is missing: beta = ln((m - 1) / eps) / gap": ((m - 1) / eps) / gap,
            "that multiplies by the gap; divide by it: beta = ln((m - 1) / eps) / gap": math.log((m - 1) / eps) * gap,
            "that is ln(m - 1) / eps / gap: eps belongs inside the logarithm, beta = ln((m - 1) / eps) / gap": math.log(m - 1)
            / eps
            / gap,
            "that is ln((m - 1) * eps) / gap; the weight left for the other keys must be at most eps, so "
            "beta = ln((m - 1) / eps) / gap": math.log((m - 1) * eps) / gap,
        }
        if eps != 0.01:
            mistakes[f"that uses eps = 0.01 whatever the argument (here eps = {eps}): use the `eps` you are given"] = (
                math.log((m - 1) / 0.01) / gap
            )
        for message, wrong in mistakes.items():
            if math.isclose(beta, wrong, rel_tol=1e-6):
                raise ExerciseFailed(f"with {label}: {message}")
        raise ExerciseFailed(
            f"with {label}: beta = {beta:.6g}, expected ln((m - 1) / eps) / gap = {right:.6g} (m = {m}, gap = {gap:.4f})"
        )
    tie = torch.tensor([1.0, 3.0, 3.0, 0.0], dtype=torch.float64)
    answer = _call_beta(hard_attention_beta, tie, 0.01, "scores [1, 3, 3, 0] with a tie and eps=0.01")
    if answer is None:
        raise ExerciseFailed(
            "with the tied scores [1, 3, 3, 0] your function returns None: no beta is large enough there, "
            "and the exercise asks for math.inf (return math.inf when the gap is 0)"
        )
    beta = _as_beta(answer, "a tie")
    if not math.isinf(beta) or beta < 0:
        raise ExerciseFailed(
            f"with the tied scores [1, 3, 3, 0] no beta makes one weight reach 1 - eps (the gap is 0): "
            f"return math.inf, got {beta:.6g}"
        )


def _call_beta(hard_attention_beta, scores: Tensor, eps: float, label: str) -> object:
    """The student's beta, with hints for the slips whose error message hides them."""
    try:
        return call(hard_attention_beta, scores.clone(), eps, what=label)
    except ExerciseFailed as err:
        message = str(err)
        if "math domain error" in message:
            raise ExerciseFailed(
                f"{message}: the logarithm got a number <= 0. Mind the parentheses: math.log((m - 1) / eps), "
                "since math.log(m - 1 / eps) computes m - (1 / eps), which is negative"
            ) from None
        if "elements cannot be converted to Scalar" in message or "only one element tensors" in message:
            raise ExerciseFailed(f"{message}. {_TOPK_HINT}") from None
        raise


_TOPK_HINT = (
    "scores.topk(2) returns a pair (values, indices), so `best, second = scores.topk(2)` gives the two values as "
    "`best` and their indices as `second`; take the values: best, second = scores.topk(2).values.tolist()"
)


def _as_beta(answer: object, label: str) -> float:
    """The answer as a float, or a named failure."""
    if isinstance(answer, Tensor) and answer.numel() == 2:
        raise ExerciseFailed(f"with {label}: your beta is a tensor of 2 numbers, {answer.tolist()}; {_TOPK_HINT}")
    try:
        return float(answer)
    except (TypeError, ValueError, RuntimeError):
        extra = f": {_TOPK_HINT}" if type(answer).__module__ == "torch.return_types" else ""
        raise ExerciseFailed(f"with {label}: return beta as a number (a float), got {type(answer).__name__}{extra}") from None


# ---------------------------------------------------------------- the gradient through softmax

_GRAD_FORMULA = "dL/dz = (diag(a) - a a^T) g = a * (g - (a * g).sum(dim=-1, keepdim=True))"


def _grad_variants(a: Tensor, g: Tensor) -> dict[str, Tensor | None]:
    """What the typical wrong versions of ``softmax_backward`` return (float64; None where undefined)."""
    dot = (a * g).sum(-1, keepdim=True)  # (..., 1)
    variants: dict[str, Tensor | None] = {
        f"that is only the diagonal part diag(a) g of the Jacobian diag(a) - a a^T; the term - a (a . g) is missing: "
        f"{_GRAD_FORMULA}": a * g,
        "that uses only the diagonal of the Jacobian, a_j (1 - a_j), the effect of z_j on its own weight a_j; every "
        f"score moves every weight (the weights sum to 1), so the off-diagonal terms - a_j a_k count too: {_GRAD_FORMULA}": a
        * (1 - a)
        * g,
        f"the sign is flipped: the Jacobian is diag(a) - a a^T, so {_GRAD_FORMULA}": a * (dot - g),
        f"the diagonal term is missing: that is - a a^T g alone; the Jacobian is diag(a) - a a^T, {_GRAD_FORMULA}": -a * dot,
        "the subtracted term is the plain sum of g; it is g averaged with the weights a, a . g = (a * g).sum(dim=-1, "
        f"keepdim=True): {_GRAD_FORMULA}": a * (g - g.sum(-1, keepdim=True)),
        f"a . g is a sum over the keys, not a mean: {_GRAD_FORMULA}": a * (g - (a * g).mean(-1, keepdim=True)),
        f"the result is not multiplied by a (the diag(a) in front): {_GRAD_FORMULA}": g - dot,
        f"that is g itself, the gradient arriving at the weights a; return the gradient with respect to the scores z: "
        f"{_GRAD_FORMULA}": g,
        "a . g is summed over the whole tensor; it is one number per row (one per query): sum over the last axis, "
        f"(a * g).sum(dim=-1, keepdim=True): {_GRAD_FORMULA}": a * (g - (a * g).sum()),
    }
    if a.dim() >= 2:
        variants[
            "a . g is summed over axis 0; it is one number per row, a sum over the last axis (the keys): "
            "(a * g).sum(dim=-1, keepdim=True)"
        ] = a * (g - (a * g).sum(0, keepdim=True))
        if a.shape[-1] == a.shape[-2]:
            variants[
                "keepdim=True is missing: (a * g).sum(dim=-1) drops the last axis, so it lines up with the wrong axis of "
                "a and g when it broadcasts back; keep it: (a * g).sum(dim=-1, keepdim=True)"
            ] = a * (g - (a * g).sum(-1)[..., None, :])
    return variants


def _torch_softmax_backward(a: Tensor, g: Tensor) -> Tensor:
    """PyTorch's own backward kernel of softmax over the last axis (what autograd runs), without autograd's start-up."""
    try:
        return torch._softmax_backward_data(g, a, -1, a.dtype)
    except (AttributeError, RuntimeError, TypeError):  # pragma: no cover - a PyTorch without the private kernel
        z = a.log().detach().requires_grad_(True)
        return torch.autograd.grad(torch.softmax(z, dim=-1), z, g)[0]


@exercise("the gradient through softmax")
def check_softmax_backward(softmax_backward) -> None:
    """Check ``softmax_backward(a, g) -> dL/dz`` for ``a = softmax(z)`` over the last axis and ``g = dL/da``, against PyTorch's kernel."""
    if is_unattempted(softmax_backward):
        raise NotAttempted("softmax_backward is still `...`")
    cases = [
        ("a and g of shape (4, 6), float64", torch.randn(4, 6, dtype=torch.float64) * 2, torch.randn(4, 6, dtype=torch.float64)),
        ("a and g of shape (5,), one row", torch.randn(5, dtype=torch.float64), torch.randn(5, dtype=torch.float64)),
        (
            "a batch of shape (2, 5, 5) (5 queries, 5 keys each)",
            torch.randn(2, 5, 5, dtype=torch.float64),
            torch.randn(2, 5, 5, dtype=torch.float64),
        ),
        (
            "nearly one-hot a (scores of about ±30), shape (3, 4)",
            torch.randn(3, 4, dtype=torch.float64) * 30,
            torch.randn(3, 4, dtype=torch.float64),
        ),
        ("float32 a and g of shape (4, 6)", torch.randn(4, 6) * 2, torch.randn(4, 6)),
    ]
    for label, z, g in cases:
        a = torch.softmax(z, dim=-1)
        expected = _torch_softmax_backward(a, g)
        try:
            out = call(softmax_backward, a.clone(), g.clone(), what=label)
        except ExerciseFailed as err:
            message = str(err)
            if "must match the size" in message or "broadcast" in message:
                raise ExerciseFailed(
                    f"{message}. A sum over the last axis drops it unless you pass keepdim=True: "
                    "(a * g).sum(dim=-1, keepdim=True) has shape (..., 1) and lines up with a and g"
                ) from None
            raise
        out = expect_tensor(out, f"softmax_backward with {label}")
        if out.dim() == a.dim() + 1 and tuple(out.shape[-2:]) == (a.shape[-1], a.shape[-1]):
            raise ExerciseFailed(
                f"with {label}: your result has shape {tuple(out.shape)}: that is the Jacobian diag(a) - a a^T itself; "
                f"apply it to g to get the gradient with respect to the scores, shape {tuple(a.shape)}: {_GRAD_FORMULA}"
            )
        if out.dtype != a.dtype and out.dtype in (torch.float16, torch.bfloat16):
            raise ExerciseFailed(f"with {label}: the result is {out.dtype}; keep the inputs' dtype ({a.dtype})")
        expect_close(
            out,
            expected,
            f"softmax_backward with {label}",
            atol=1e-12,
            rtol=1e-9,
            mistakes=_grad_variants(a.double(), g.double()),
            float32_path=True,
        )


# ---------------------------------------------------------------- permutation


def _nearest_rows(out: Tensor, X: Tensor) -> list[int]:
    return torch.cdist(out.double(), X.double()).argmin(dim=1).tolist()


def _centred_scores(X: Tensor, W_Q: Tensor, W_K: Tensor) -> Tensor:
    """The scores of ``attention_with_positions`` minus each row's mean."""
    X_pos = torch.cat([X, torch.eye(X.shape[0], dtype=X.dtype, device=X.device)], dim=1)  # (n, d + n)
    scores = (X_pos @ W_Q) @ (X_pos @ W_K).T  # (n, n)
    return scores - scores.mean(dim=1, keepdim=True)


@exercise("attention as a permutation")
def check_permutation_projections(permutation_projections) -> None:
    """Check ``permutation_projections(perm, d, strength=30.0) -> (W_Q, W_K, W_V)``: attention on ``[X | I_n]`` gives ``X[perm]``."""
    if is_unattempted(permutation_projections):
        raise NotAttempted("permutation_projections is still `...`")
    for n, d in ((5, 3), (4, 6)):
        perm = torch.randperm(n)
        while torch.equal(perm, torch.arange(n)) or torch.equal(perm, perm.argsort()):
            perm = torch.randperm(n)  # neither the identity nor its own inverse, so mistakes show
        label = f"perm={perm.tolist()}, d={d}"
        result = call(permutation_projections, perm, d, what=label)
        if not (isinstance(result, (tuple, list)) and len(result) == 3):
            raise ExerciseFailed(f"with {label}: return a tuple (W_Q, W_K, W_V), got {type(result).__name__}")
        W_Q, W_K, W_V = (expect_tensor(w, name).double() for w, name in zip(result, ("W_Q", "W_K", "W_V"), strict=True))
        for name, w in (("W_Q", W_Q), ("W_K", W_K), ("W_V", W_V)):
            if w.dim() != 2 or w.shape[0] != d + n:
                extra = ""
                if w.dim() == 2 and w.shape[1] == d + n:
                    extra = "; it looks transposed: rows are the input features (d content + n positions), as in X_pos @ W"
                raise ExerciseFailed(
                    f"with {label}: {name} has shape {tuple(w.shape)}; it must have d + n = {d + n} rows, "
                    f"one per input feature (d content features, then n position features){extra}"
                )
        if W_Q.shape[1] != W_K.shape[1]:
            raise ExerciseFailed(
                f"with {label}: W_Q has {W_Q.shape[1]} columns and W_K {W_K.shape[1]}; queries and keys must have the same size d_k"
            )
        if W_V.shape[1] != d:
            hint = (
                " (W_V keeps the position features too: the output should hold the content only, W_V = [I_d; 0])"
                if W_V.shape[1] == d + n
                else ""
            )
            raise ExerciseFailed(
                f"with {label}: W_V has {W_V.shape[1]} columns; the output has the d = {d} content features{hint}"
            )
        for name, w in (("W_Q", W_Q), ("W_K", W_K)):
            if not w[n:].any() and bool(w[:n].any(dim=1).all()):
                raise ExerciseFailed(
                    f"with {label}: the position block of {name} sits in rows 0 .. n - 1 = {n - 1}, and its last rows are "
                    f"zero: in [X | I_n] the one-hot position of token i is feature d + i, after the d = {d} content "
                    f"features, so the position rows are d .. d + n - 1 = {d} .. {d + n - 1}: index them with d + i "
                    "(e.g. W[d + torch.arange(n), ...]) and leave the first d rows (the content) zero"
                )
        X = torch.randn(n, d, dtype=torch.float64)
        out, weights = attention_with_positions(X, W_Q, W_K, W_V)
        target = X[perm]
        if not torch.isfinite(out).all():
            raise ExerciseFailed(f"with {label}: the attention output holds NaN or inf; are the scores too large or NaN?")
        # Q4: which token a query picks must not depend on what the tokens contain (even when the output happens to be right)
        # compared on the scores (the weights of a near one-hot answer round to the same 0s and 1s), each row up to a constant
        # (softmax ignores a shift common to a whole row)
        base = _centred_scores(X, W_Q, W_K)
        for other in (torch.zeros_like(X), torch.randn_like(X), 10 * torch.randn_like(X)):
            if not torch.allclose(_centred_scores(other, W_Q, W_K), base, atol=1e-8 * (1 + base.abs().max().item()), rtol=0):
                raise ExerciseFailed(
                    f"with {label}: the attention scores, and so the weights, change when the content X changes (even if this "
                    "X happens to come out right, another would not), so W_Q or W_K reads the content features; the queries "
                    f"and keys should read only the position features: the first d = {d} rows of W_Q and W_K (the content rows) "
                    "must be zero"
                )
        if torch.allclose(out, target, atol=1e-6):
            continue
        hard = weights.max(dim=1).values
        mistakes = {
            "the output is the inverse permutation: row i should be x[perm[i]], so query i must match key perm[i] "
            "(you matched query perm[i] with key i); transpose the permutation in W_Q": X[perm.argsort()],
            "the output is X itself (the identity): query i matches key i, so the queries and keys ignore perm (or both "
            "apply it, which cancels); only the queries apply it: query i = strength * e_perm[i], key j = strength * e_j": X,
        }
        for message, wrong in mistakes.items():
            if wrong is not None and torch.allclose(out, wrong, atol=1e-4):
                raise ExerciseFailed(f"with {label}: {message}")
        pos_only = attention_with_positions(torch.zeros_like(X), W_Q, W_K, W_V)[0]
        if torch.allclose(out, pos_only, atol=1e-6) and not torch.allclose(out, torch.zeros_like(out)):
            raise ExerciseFailed(
                f"with {label}: the output does not depend on the content X: W_V must copy the d content "
                "features (identity in its first d rows) and ignore the positions"
            )
        content_weights = attention_with_positions(torch.randn_like(X), W_Q, W_K, W_V)[1]
        if not torch.allclose(content_weights, weights, atol=1e-6):
            raise ExerciseFailed(
                f"with {label}: the attention weights change when the content X changes; the queries and keys "
                "should read only the position features (zero in the first d rows of W_Q and W_K)"
            )
        off_target = weights.clone()
        off_target[torch.arange(n), perm] = 0
        if weights.argmax(dim=1).tolist() == perm.tolist() and off_target.max().item() < 1e-9:
            raise ExerciseFailed(
                f"with {label}: each query picks the right token with a one-hot weight, so W_Q and W_K are right; the "
                f"output is still wrong (off by up to {(out - target).abs().max().item():.2g}), so W_V is: it should copy "
                f"the d = {d} content features and drop the positions, W_V = [I_d; 0] (an identity in its first d rows)"
            )
        if weights.argmax(dim=1).tolist() == perm.tolist():
            raise ExerciseFailed(
                f"with {label}: each query picks the right token, but the weights are not one-hot (the largest weight of some row "
                f"is {hard.min().item():.6f}, another token still gets {off_target.max().item():.2g}), so the output is a blur "
                f"(off by up to {(out - target).abs().max().item():.2g}); make the matching score much larger than the others: "
                "multiply the position parts of both W_Q and W_K by `strength`"
            )
        got = _nearest_rows(out, X)
        raise ExerciseFailed(
            f"with {label}: output row i should be x[perm[i]], i.e. rows {perm.tolist()} of X; your rows are closest to rows "
            f"{got} of X (largest difference {(out - target).abs().max().item():.4g})"
        )


# ---------------------------------------------------------------- convolution


@exercise("a convolution as attention heads")
def check_conv_head_weights(conv_head_weights) -> None:
    """Check ``conv_head_weights(conv) -> (W_heads (kernel_size, d_in, d_out), bias (d_out,))`` against the Conv1d's own weights."""
    if is_unattempted(conv_head_weights):
        raise NotAttempted("conv_head_weights is still `...`")
    for d_in, d_out, size in ((3, 5, 3), (4, 2, 1), (2, 3, 5)):
        conv = nn.Conv1d(d_in, d_out, size, padding=size // 2, padding_mode="circular").double()
        label = f"nn.Conv1d({d_in}, {d_out}, kernel_size={size})"
        result = call(conv_head_weights, conv, what=label)
        if not (isinstance(result, (tuple, list)) and len(result) == 2):
            raise ExerciseFailed(f"with {label}: return a tuple (W_heads, bias), got {type(result).__name__}")
        W_heads, bias = result
        if isinstance(W_heads, Tensor) and isinstance(bias, Tensor) and W_heads.dim() == 1 and bias.dim() == 3:
            raise ExerciseFailed(f"with {label}: the two are swapped, (bias, W_heads); return (W_heads, bias)")
        if isinstance(W_heads, (list, tuple)) and W_heads and all(isinstance(w, Tensor) for w in W_heads):
            W_heads = torch.stack(list(W_heads))  # a list of per-head matrices is fine
        if bias is None:
            raise ExerciseFailed(f"with {label}: the bias is None; return conv.bias, shape (d_out,) = ({d_out},)")
        W = conv.weight.detach()  # (d_out, d_in, size)
        right = W.permute(2, 1, 0)  # (size, d_in, d_out)
        W_heads = expect_tensor(W_heads, "W_heads")
        if tuple(W_heads.shape) == tuple(W.shape) and tuple(W.shape) != tuple(right.shape):
            raise ExerciseFailed(
                f"with {label}: W_heads is conv.weight itself, shape (d_out, d_in, kernel_size) = {tuple(W.shape)}; "
                f"one (d_in, d_out) matrix per head: shape (kernel_size, d_in, d_out) = {tuple(right.shape)}"
            )
        if tuple(W_heads.shape) == (size, d_out, d_in) and d_in != d_out:
            raise ExerciseFailed(
                f"with {label}: each head's matrix is (d_out, d_in) = ({d_out}, {d_in}); values are x @ W_h with x "
                f"a row of d_in = {d_in} features, so W_h = conv.weight[:, :, h].T, shape ({d_in}, {d_out})"
            )
        mistakes = {
            "the kernel is flipped: nn.Conv1d is a cross-correlation, tap h multiplies x[i + h - kernel_size // 2], so head h "
            "uses conv.weight[:, :, h] (no flip)": right.flip(0),
            "only the centre tap is used: every head h needs its own conv.weight[:, :, h].T": torch.stack(
                [right[h] if h == size // 2 else torch.zeros_like(right[h]) for h in range(size)]
            ),
            "each head's matrix is not transposed: use conv.weight[:, :, h].T, shape (d_in, d_out)": W.permute(2, 0, 1),
            "every head uses the same matrix (the centre tap): head h needs its own conv.weight[:, :, h].T": right[
                size // 2
            ].expand(size, -1, -1),
            "the weights are divided by the kernel size: the heads' outputs are added, not averaged": right / size,
            "conv.weight was reshaped, not permuted: reshape (or view) keeps the order of the numbers in memory and only "
            "regroups them, so each 'matrix' mixes taps and channels; move the axes with conv.weight.permute(2, 1, 0)": (
                W.reshape(size, d_in, d_out)
            ),
        }
        for axes in ((0, 1, 2), (0, 2, 1), (1, 0, 2), (1, 2, 0)):  # the other orders of (d_out, d_in, kernel_size)
            mistakes[
                f"that is conv.weight.permute{axes}: the axes are in the wrong order. W_heads[h] is tap h's matrix "
                "conv.weight[:, :, h].T, (d_in, d_out), so the tap axis (2) comes first, then d_in (1), then d_out (0): "
                "permute(2, 1, 0)"
            ] = W.permute(*axes)
        expect_close(W_heads, right, f"W_heads with {label}", atol=1e-10, rtol=1e-8, mistakes=mistakes)
        bias = expect_tensor(bias, "bias")
        if bias.dim() == 2 and bias.shape[0] == size and bias.shape[1] == d_out and size > 1:
            raise ExerciseFailed(
                f"with {label}: bias has shape {tuple(bias.shape)}, one per head; the heads' outputs are summed and the "
                f"bias is added once: return conv.bias, shape ({d_out},)"
            )
        if bias.numel() == 1 and d_out != 1:
            raise ExerciseFailed(f"with {label}: bias should have d_out = {d_out} entries, got a single number")
        expect_close(
            bias.reshape(-1) if bias.numel() == d_out else bias,
            conv.bias.detach(),
            f"bias with {label}",
            atol=1e-10,
            rtol=1e-8,
            mistakes={
                "the bias is zero: return conv.bias (added once, after the heads are summed)": torch.zeros(
                    d_out, dtype=torch.float64
                ),
                "the bias is divided by the kernel size: it is added once to the sum of the heads": conv.bias.detach() / size,
                "the bias has the wrong sign": -conv.bias.detach(),
            },
        )
