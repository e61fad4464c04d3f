"""The checks of notebook 03 accept the right constructions and name the typical wrong ones."""

from __future__ import annotations

import pytest
import torch

from helpers.attention import attention_with_positions
from helpers.checks import check_conv_head_weights, check_permutation_projections
from helpers.checks.properties import conv_head_weights, permutation_projections
from tests.conftest import assert_caught, assert_not_attempted

# ---------------------------------------------------------------- permutation


def test_permutation_reference_passes_and_permutes():
    assert check_permutation_projections(permutation_projections) is True
    perm = torch.tensor([2, 0, 3, 1])
    X = torch.randn(4, 3, dtype=torch.float64)
    out, weights = attention_with_positions(X, *permutation_projections(perm, 3))
    torch.testing.assert_close(out, X[perm], atol=1e-12, rtol=0)
    assert weights.argmax(1).tolist() == perm.tolist()


def test_permutation_stub_is_not_attempted(capsys):
    def stub(perm, d, strength=30.0):
        raise NotImplementedError

    assert_not_attempted(check_permutation_projections, stub, capsys)
    assert_not_attempted(check_permutation_projections, ..., capsys)


def _inverse(perm, d, strength=30.0):
    return permutation_projections(torch.as_tensor(perm).argsort(), d, strength)


def _identity(perm, d, strength=30.0):
    return permutation_projections(torch.arange(len(perm)), d, strength)


def _soft(perm, d, strength=30.0):
    return permutation_projections(perm, d, strength=1.0)


def _strength_once(perm, d, strength=30.0):
    W_Q, W_K, W_V = permutation_projections(perm, d, strength)
    return W_Q, W_K / strength * 0.5, W_V


def _transposed(perm, d, strength=30.0):
    return tuple(w.T for w in permutation_projections(perm, d, strength))


def _values_keep_positions(perm, d, strength=30.0):
    W_Q, W_K, _ = permutation_projections(perm, d, strength)
    return W_Q, W_K, torch.eye(d + len(perm), dtype=torch.float64)


def _values_read_positions(perm, d, strength=30.0):
    W_Q, W_K, W_V = permutation_projections(perm, d, strength)
    n = len(perm)
    W_V = torch.zeros(d + n, d, dtype=torch.float64)
    W_V[d : d + min(n, d), : min(n, d)] = torch.eye(min(n, d), dtype=torch.float64)
    return W_Q, W_K, W_V


def _content_in_queries(perm, d, strength=30.0):
    """Queries and keys compare the content of the tokens instead of their positions."""
    _, _, W_V = permutation_projections(perm, d, strength)
    n = len(perm)
    W_Q = torch.zeros(d + n, n, dtype=torch.float64)
    k = min(d, n)
    W_Q[:k, :k] = strength * torch.eye(k, dtype=torch.float64)
    return W_Q, W_Q.clone(), W_V


def _different_dk(perm, d, strength=30.0):
    W_Q, W_K, W_V = permutation_projections(perm, d, strength)
    return W_Q[:, :-1], W_K, W_V


def _two_only(perm, d, strength=30.0):
    W_Q, W_K, _ = permutation_projections(perm, d, strength)
    return W_Q, W_K


def _content_noise_in_queries(perm, d, strength=30.0):
    """Right on any one input (the position scores dominate), but the queries also read the content: Q4 says no."""
    W_Q, W_K, W_V = permutation_projections(perm, d, strength)
    W_Q[:d] = 0.3 * torch.linspace(-1, 1, d * W_Q.shape[1], dtype=torch.float64).reshape(d, -1)
    return W_Q, W_K, W_V


def _content_noise_in_keys(perm, d, strength=30.0):
    W_Q, W_K, W_V = permutation_projections(perm, d, strength)
    W_K[:d] = 0.2
    return W_Q, W_K, W_V


PERMUTATION_MISTAKES = {
    "queries read the content a little": (_content_noise_in_queries, ["change when the content X changes", "must be zero"]),
    "keys read the content a little": (_content_noise_in_keys, ["change when the content X changes"]),
    "inverse permutation": (_inverse, ["inverse permutation"]),
    "identity": (_identity, ["identity"]),
    "too weak (soft weights)": (_soft, ["not one-hot", "strength"]),
    "strength in W_Q only": (_strength_once, ["not one-hot", "both W_Q and W_K"]),
    "transposed weights": (_transposed, ["looks transposed"]),
    "W_V keeps the positions": (_values_keep_positions, ["W_V keeps the position features"]),
    "W_V reads positions": (_values_read_positions, ["does not depend on the content"]),
    "content in the queries": (_content_in_queries, ["change when the content X changes"]),
    "d_k differs": (_different_dk, ["same size d_k"]),
    "two matrices": (_two_only, ["tuple (W_Q, W_K, W_V)"]),
}


@pytest.mark.parametrize("name", list(PERMUTATION_MISTAKES))
def test_permutation_mistakes_are_named(name):
    fn, phrases = PERMUTATION_MISTAKES[name]
    assert_caught(check_permutation_projections, fn, *phrases)


# ---------------------------------------------------------------- convolution


def test_conv_reference_passes():
    assert check_conv_head_weights(conv_head_weights) is True


def test_conv_accepts_a_list_of_heads():
    assert (
        check_conv_head_weights(
            lambda conv: ([conv.weight.detach()[:, :, h].T for h in range(conv.kernel_size[0])], conv.bias.detach())
        )
        is True
    )


def test_conv_stub_is_not_attempted(capsys):
    def stub(conv):
        raise NotImplementedError

    assert_not_attempted(check_conv_head_weights, stub, capsys)


CONV_MISTAKES = {
    "conv.weight itself": (lambda conv: (conv.weight.detach(), conv.bias.detach()), ["conv.weight itself"]),
    "heads not transposed": (
        lambda conv: (conv.weight.detach().permute(2, 0, 1), conv.bias.detach()),
        ["conv.weight[:, :, h].T"],
    ),
    "flipped kernel": (lambda conv: (conv.weight.detach().permute(2, 1, 0).flip(0), conv.bias.detach()), ["flipped"]),
    "centre tap only": (
        lambda conv: (
            conv.weight.detach()[:, :, conv.kernel_size[0] // 2].T.expand(conv.kernel_size[0], -1, -1),
            conv.bias.detach(),
        ),
        ["same matrix"],
    ),
    "centre tap, others zero": (
        lambda conv: (
            torch.stack([conv.weight.detach()[:, :, h].T * (h == conv.kernel_size[0] // 2) for h in range(conv.kernel_size[0])]),
            conv.bias.detach(),
        ),
        ["only the centre tap"],
    ),
    "averaged heads": (
        lambda conv: (conv.weight.detach().permute(2, 1, 0) / conv.kernel_size[0], conv.bias.detach()),
        ["divided by the kernel size"],
    ),
    "no bias": (lambda conv: (conv.weight.detach().permute(2, 1, 0), None), ["bias is None"]),
    "zero bias": (lambda conv: (conv.weight.detach().permute(2, 1, 0), torch.zeros_like(conv.bias)), ["bias is zero"]),
    "bias per head": (
        lambda conv: (conv.weight.detach().permute(2, 1, 0), conv.bias.detach() / conv.kernel_size[0]),
        ["added once"],
    ),
    "one tensor only": (lambda conv: conv.weight.detach().permute(2, 1, 0), ["tuple (W_heads, bias)"]),
}


@pytest.mark.parametrize("name", list(CONV_MISTAKES))
def test_conv_mistakes_are_named(name):
    fn, phrases = CONV_MISTAKES[name]
    assert_caught(check_conv_head_weights, fn, *phrases)


# ---------------------------------------------------------------- the beta for hard attention

import math  # noqa: E402

from helpers.checks import check_hard_attention_beta  # noqa: E402
from helpers.checks.properties import hard_attention_beta  # noqa: E402


def _gap(scores):
    top = torch.as_tensor(scores).sort(descending=True).values
    return (top[0] - top[1]).item()


def test_hard_beta_reference_passes_and_is_enough():
    assert check_hard_attention_beta(hard_attention_beta) is True
    scores = torch.tensor([2.0, 1.0, -2.0, 3.0], dtype=torch.float64)
    beta = hard_attention_beta(scores, 0.01)
    assert torch.softmax(beta * scores, 0).max() >= 0.99


def test_hard_beta_tensor_answer_passes():
    def as_tensor(scores, eps=0.01):
        top = scores.topk(2).values
        return torch.log(torch.tensor((len(scores) - 1) / eps)) / (top[0] - top[1])

    assert check_hard_attention_beta(as_tensor) is True


def test_hard_beta_stub_is_not_attempted(capsys):
    def stub(scores, eps=0.01):
        raise NotImplementedError

    assert_not_attempted(check_hard_attention_beta, stub, capsys)


def _with_tie(fn):
    def wrapped(scores, eps=0.01):
        return math.inf if _gap(scores) == 0 else fn(scores, eps)

    return wrapped


HARD_BETA_MISTAKES = {
    "no m - 1": (_with_tie(lambda s, eps: math.log(1 / eps) / _gap(s)), ["m - 1) other keys are missing"]),
    "m instead of m - 1": (_with_tie(lambda s, eps: math.log(len(s) / eps) / _gap(s)), ["that uses m"]),
    "log10": (_with_tie(lambda s, eps: math.log10((len(s) - 1) / eps) / _gap(s)), ["base 10"]),
    "spread instead of gap": (
        _with_tie(lambda s, eps: math.log((len(s) - 1) / eps) / (s.max() - s.min()).item()),
        ["not minus the smallest"],
    ),
    "temperature": (_with_tie(lambda s, eps: _gap(s) / math.log((len(s) - 1) / eps)), ["temperature"]),
    "ascending sort": (_with_tie(lambda s, eps: math.log((len(s) - 1) / eps) / -_gap(s)), ["negative"]),
    "no logarithm": (_with_tie(lambda s, eps: ((len(s) - 1) / eps) / _gap(s)), ["logarithm is missing"]),
    "tie not handled": (lambda s, eps=0.01: math.log((len(s) - 1) / eps) / max(_gap(s), 1e-3), ["return math.inf"]),
    "tie divides by zero": (lambda s, eps=0.01: math.log((len(s) - 1) / eps) / _gap(s), ["ZeroDivisionError"]),
    "returns a list": (lambda s, eps=0.01: [1.0, 2.0], ["a number"]),
}


@pytest.mark.parametrize("name", list(HARD_BETA_MISTAKES))
def test_hard_beta_mistakes_are_named(name):
    fn, phrases = HARD_BETA_MISTAKES[name]
    assert_caught(check_hard_attention_beta, fn, *phrases)


# ---------------------------------------------------------------- issue 25: the likeliest mistakes the catalogues lacked


def _topk_unpacked(s, eps=0.01):
    best, second = s.topk(2)  # (values, indices): `second` holds the indices
    return torch.log(torch.tensor((len(s) - 1) / eps)) / (best - second)


def _topk_unpacked_item(s, eps=0.01):
    best, second = s.topk(2)
    return math.log((len(s) - 1) / eps) / (best - second).item()


HARD_BETA_MORE_MISTAKES = {
    "eps ignored": (_with_tie(lambda s, eps: math.log((len(s) - 1) / 0.01) / _gap(s)), ["eps = 0.01 whatever the argument"]),
    "ln(m - 1) / eps": (_with_tie(lambda s, eps: math.log(len(s) - 1) / eps / _gap(s)), ["eps belongs inside the logarithm"]),
    "ln((m - 1) * eps)": (_with_tie(lambda s, eps: math.log((len(s) - 1) * eps) / _gap(s)), ["(m - 1) * eps"]),
    "precedence: ln(m - 1 / eps)": (_with_tie(lambda s, eps: math.log(len(s) - 1 / eps) / _gap(s)), ["Mind the parentheses"]),
    "topk unpacked as two values": (_topk_unpacked, ["(values, indices)", ".values"]),
    "topk unpacked, then .item()": (_topk_unpacked_item, ["(values, indices)"]),
    "None for a tie": (
        lambda s, eps=0.01: None if _gap(s) == 0 else math.log((len(s) - 1) / eps) / _gap(s),
        ["None", "math.inf"],
    ),
    "the topk result itself": (lambda s, eps=0.01: s.topk(2), ["got topk", ".values"]),
}


@pytest.mark.parametrize("name", list(HARD_BETA_MORE_MISTAKES))
def test_hard_beta_likeliest_mistakes_are_named(name):
    fn, phrases = HARD_BETA_MORE_MISTAKES[name]
    assert_caught(check_hard_attention_beta, fn, *phrases)


def test_hard_beta_other_right_answers_pass():
    import numpy as np

    assert check_hard_attention_beta(lambda s, eps=0.01: torch.inf if _gap(s) == 0 else math.log((len(s) - 1) / eps) / _gap(s))
    assert check_hard_attention_beta(lambda s, eps=0.01: np.inf if _gap(s) == 0 else np.log((s.numel() - 1) / eps) / _gap(s))
    assert check_hard_attention_beta(
        lambda s, eps=0.01: float("inf") if _gap(s) == 0 else (math.log(len(s) - 1) - math.log(eps)) / _gap(s)
    )


def _permutation(query_rows="d + i", key_rows="d + j", W_V="copy", dtype=torch.float64, query_strength=30.0, key_strength=30.0):
    def fn(perm, d, strength=30.0):
        perm = torch.as_tensor(perm)
        n = len(perm)
        W_Q, W_K, W_V_ = (torch.zeros(d + n, k, dtype=dtype) for k in (n, n, d))
        rows = torch.arange(n)
        if query_rows == "d + i":
            W_Q[d + rows, perm] = query_strength
        elif query_rows == "i":  # the offset d of the position features forgotten
            W_Q[rows, perm] = strength
        if key_rows == "d + j":
            W_K[d:] = key_strength * torch.eye(n, dtype=dtype)
        elif key_rows == "j":
            W_K[:n] = strength * torch.eye(n, dtype=dtype)
        elif key_rows == "permuted too":
            W_K[d + rows, perm] = strength
        eye = torch.eye(d, dtype=dtype)
        W_V_[:d] = {"copy": eye, "ones": torch.ones_like(eye), "double": 2 * eye}[W_V]
        return W_Q, W_K, W_V_

    return fn


PERMUTATION_MORE_MISTAKES = {
    "the position offset d forgotten": (_permutation(query_rows="i", key_rows="j"), ["position block", "d + i"]),
    "the position offset d forgotten in W_Q only": (_permutation(query_rows="i"), ["position block of W_Q"]),
    "keys permuted too": (_permutation(key_rows="permuted too"), ["identity", "only the queries apply it"]),
    "W_V of ones": (_permutation(W_V="ones"), ["one-hot weight", "so W_V is"]),
    "W_V doubles the content": (_permutation(W_V="double"), ["W_V = [I_d; 0]"]),
}


@pytest.mark.parametrize("name", list(PERMUTATION_MORE_MISTAKES))
def test_permutation_likeliest_mistakes_are_named(name):
    fn, phrases = PERMUTATION_MORE_MISTAKES[name]
    message = assert_caught(check_permutation_projections, fn, *phrases)
    assert "not one-hot" not in message


def test_permutation_other_right_answers_pass():
    def with_identity_rows(perm, d, strength=30.0):
        eye = torch.eye(len(perm), dtype=torch.float64)
        zeros = torch.zeros(d, len(perm), dtype=torch.float64)
        return torch.cat([zeros, strength * eye[perm]]), torch.cat([zeros, strength * eye]), torch.eye(d + len(perm), d).double()

    assert check_permutation_projections(with_identity_rows) is True
    assert check_permutation_projections(_permutation(dtype=torch.float32)) is True  # float32 weights are fine
    assert check_permutation_projections(_permutation(query_strength=900.0, key_strength=1.0)) is True  # c^2 split unevenly


CONV_MORE_MISTAKES = {
    "reshape instead of permute": (
        lambda conv: (conv.weight.detach().reshape(conv.kernel_size[0], conv.in_channels, conv.out_channels), conv.bias.detach()),
        ["reshaped, not permuted"],
    ),
    "view instead of permute": (
        lambda conv: (conv.weight.detach().view(conv.kernel_size[0], conv.in_channels, conv.out_channels), conv.bias.detach()),
        ["reshaped, not permuted"],
    ),
    "permute(1, 2, 0)": (lambda conv: (conv.weight.detach().permute(1, 2, 0), conv.bias.detach()), ["permute(1, 2, 0)"]),
    "a bias per head": (
        lambda conv: (conv.weight.detach().permute(2, 1, 0), conv.bias.detach().expand(conv.kernel_size[0], -1)),
        ["one per head", "added once"],
    ),
    "(bias, W_heads)": (lambda conv: (conv.bias.detach(), conv.weight.detach().permute(2, 1, 0)), ["swapped"]),
    "numpy": (lambda conv: (conv.weight.detach().permute(2, 1, 0).numpy(), conv.bias.detach()), ["torch.Tensor", "ndarray"]),
}


@pytest.mark.parametrize("name", list(CONV_MORE_MISTAKES))
def test_conv_likeliest_mistakes_are_named(name):
    fn, phrases = CONV_MORE_MISTAKES[name]
    assert_caught(check_conv_head_weights, fn, *phrases)


@pytest.mark.filterwarnings("ignore:The use of `x.T`")
def test_conv_other_right_answers_pass():
    assert check_conv_head_weights(lambda conv: (conv.weight.detach().T, conv.bias.detach())) is True  # .T reverses all axes
    assert check_conv_head_weights(lambda conv: (conv.weight.transpose(0, 2), conv.bias)) is True  # parameters, not detached
    assert check_conv_head_weights(lambda conv: (conv.weight.detach().permute(2, 1, 0), conv.bias.detach()[None])) is True


# ---------------------------------------------------------------- attention with an inverse temperature (issue 34)

import torch.nn.functional as F  # noqa: E402

from helpers.attention import softargmax_attention, softmax_backward  # noqa: E402
from helpers.checks import check_attend, check_softmax_backward  # noqa: E402


def test_attend_reference_passes():
    assert check_attend(softargmax_attention) is True


def test_attend_stub_is_not_attempted(capsys):
    def stub(beta, K, V, Q):
        """H = V softargmax_beta(K^T Q)."""
        raise NotImplementedError("Exercise: replace this line with your code")

    assert_not_attempted(check_attend, stub, capsys)
    assert_not_attempted(check_attend, ..., capsys)


def _attend(weights_of, H_of=None, out=None):
    """An attend built from a weights rule ``weights_of(beta, S, K, Q)`` (S = K^T Q) and an H rule."""

    def attend(beta, K, V, Q):
        S = K.mT @ Q  # (..., m, n)
        w = weights_of(beta, S, K, Q)
        H = V @ w if H_of is None else H_of(V, w)
        return (H, w) if out is None else out(H, w)

    return attend


def _stable_over_keys(beta, S, K, Q):
    e = torch.exp(beta * S - (beta * S).amax(-2, keepdim=True))
    return e / e.sum(-2, keepdim=True)


ATTEND_MISTAKES = {
    "softmax over the queries": (_attend(lambda b, S, K, Q: torch.softmax(b * S, -1)), ["over the queries", "dim=-2"]),
    "beta ignored": (_attend(lambda b, S, K, Q: torch.softmax(S, -2)), ["beta is ignored"]),
    "divided by beta": (_attend(lambda b, S, K, Q: torch.softmax(S / b, -2)), ["divided by beta", "multiplies"]),
    "beta and 1/sqrt(d) both": (
        _attend(lambda b, S, K, Q: torch.softmax(b * S / math.sqrt(K.shape[-2]), -2)),
        ["scaled twice"],
    ),
    "1/sqrt(d) instead of beta": (
        _attend(lambda b, S, K, Q: torch.softmax(S / math.sqrt(K.shape[-2]), -2)),
        ["instead of multiplied by beta"],
    ),
    "minus beta": (_attend(lambda b, S, K, Q: torch.softmax(-b * S, -2)), ["sign of beta"]),
    "whole matrix normalised": (
        _attend(lambda b, S, K, Q: torch.exp(b * S) / torch.exp(b * S).sum(dim=(-2, -1), keepdim=True)),
        ["whole matrix at once"],
    ),
    "no softmax": (_attend(lambda b, S, K, Q: b * S), ["there is no softmax"]),
    "exps not normalised": (_attend(lambda b, S, K, Q: torch.exp(b * S)), ["not normalised"]),
    "no exponential": (_attend(lambda b, S, K, Q: (b * S) / (b * S).sum(-2, keepdim=True)), ["exponential is missing"]),
    "maximum over the queries": (
        _attend(
            lambda b, S, K, Q: (
                torch.exp(b * S - (b * S).amax(-1, keepdim=True))
                / torch.exp(b * S - (b * S).amax(-1, keepdim=True)).sum(-2, keepdim=True)
            )
        ),
        ["maximum subtracted before exp is taken over the queries"],
    ),
    "naive exp overflows": (
        _attend(lambda b, S, K, Q: torch.exp(b * S) / torch.exp(b * S).sum(-2, keepdim=True)),
        ["exp overflowed"],
    ),
    "softmax over axis 0": (_attend(lambda b, S, K, Q: torch.softmax(b * S, 0)), ["batch axis", "dim=-2"]),
    "weights in the rows layout": (
        _attend(lambda b, S, K, Q: torch.softmax(b * S, -2), out=lambda H, w: (H, w.mT)),
        ["queries by keys", "right numbers, transposed"],
    ),
    "H in the rows layout": (
        _attend(lambda b, S, K, Q: torch.softmax(b * S, -2), out=lambda H, w: (H.mT, w)),
        ["one row per query", "H = V @ weights"],
    ),
    "(weights, H)": (_attend(lambda b, S, K, Q: torch.softmax(b * S, -2), out=lambda H, w: (w, H)), ["swapped"]),
    "H only": (_attend(lambda b, S, K, Q: torch.softmax(b * S, -2), out=lambda H, w: H), ["pair (H, weights)"]),
    "sum of the values": (
        _attend(
            lambda b, S, K, Q: torch.softmax(b * S, -2),
            H_of=lambda V, w: V.sum(-1, keepdim=True).expand(*V.shape[:-1], w.shape[-1]),
        ),
        ["sum of the values"],
    ),
}


@pytest.mark.parametrize("name", list(ATTEND_MISTAKES))
def test_attend_mistakes_are_named(name):
    fn, phrases = ATTEND_MISTAKES[name]
    assert_caught(check_attend, fn, *phrases)


@pytest.mark.filterwarnings("ignore:The use of `x.T`")
def test_attend_batched_dot_T_is_named():
    def with_dot_T(beta, K, V, Q):
        weights = torch.softmax(beta * (K.T @ Q), dim=-2)
        return V @ weights, weights

    assert_caught(check_attend, with_dot_T, "K.mT")


def test_attend_unfinished_branch_is_not_called_not_attempted():
    def partial(beta, K, V, Q):
        if beta == 0:
            raise NotImplementedError
        weights = torch.softmax(beta * (K.mT @ Q), dim=-2)
        return V @ weights, weights

    assert_caught(check_attend, partial, "unfinished branch", "beta = 0")


def test_attend_float64_computed_in_float32_is_a_precision_problem():
    def via_float32(beta, K, V, Q):
        weights = torch.softmax(beta * (K.mT.float() @ Q.float()), dim=-2).to(K.dtype)
        return V @ weights, weights

    def float32_beta(beta, K, V, Q):  # torch.tensor(beta) is float32: 0.7 becomes 0.699999988
        weights = torch.softmax(torch.tensor(beta) * (K.mT @ Q), dim=-2)
        return V @ weights, weights

    assert_caught(check_attend, via_float32, "precision problem")
    assert_caught(check_attend, float32_beta, "precision problem", "torch.tensor(...)")


def test_attend_other_right_answers_pass():
    def einsum(beta, K, V, Q):
        w = torch.softmax(beta * torch.einsum("...dm,...dn->...mn", K, Q), dim=-2)
        return torch.einsum("...vm,...mn->...vn", V, w), w

    def rows_and_back(beta, K, V, Q):
        w_rows = torch.softmax(beta * Q.transpose(-2, -1) @ K, dim=-1)  # (..., n, m)
        return (w_rows @ V.transpose(-2, -1)).transpose(-2, -1), w_rows.transpose(-2, -1)

    def loop_over_queries(beta, K, V, Q):
        columns = [torch.softmax(beta * (K.mT @ Q[..., i : i + 1]), dim=-2) for i in range(Q.shape[-1])]
        w = torch.cat(columns, dim=-1)
        return V @ w, w

    def logsumexp(beta, K, V, Q):
        s = beta * (K.transpose(-2, -1) @ Q)
        w = torch.exp(s - torch.logsumexp(s, dim=-2, keepdim=True))
        return V @ w, w

    def sdpa(beta, K, V, Q):
        w = F.softmax(beta * K.mT @ Q, dim=-2)
        return F.scaled_dot_product_attention(Q.mT, K.mT, V.mT, scale=beta).mT, w

    def tensor_beta(beta, K, V, Q):
        w = (torch.tensor(beta, dtype=K.dtype) * (K.mT @ Q)).softmax(dim=-2)
        return V @ w, w

    for fn in (einsum, rows_and_back, loop_over_queries, logsumexp, _attend(_stable_over_keys), sdpa, tensor_beta):
        assert check_attend(fn) is True, fn.__name__


# ---------------------------------------------------------------- the gradient through softmax (issue 34)


def test_softmax_backward_reference_passes_and_matches_autograd():
    assert check_softmax_backward(softmax_backward) is True
    z = torch.randn(3, 5, dtype=torch.float64, requires_grad=True)
    g = torch.randn(3, 5, dtype=torch.float64)
    (expected,) = torch.autograd.grad(torch.softmax(z, -1), z, g)
    torch.testing.assert_close(softmax_backward(torch.softmax(z, -1).detach(), g), expected, atol=1e-14, rtol=0)


def test_softmax_backward_stub_is_not_attempted(capsys):
    def stub(a, g):
        raise NotImplementedError("Exercise: replace this line with your code")

    assert_not_attempted(check_softmax_backward, stub, capsys)


GRAD_MISTAKES = {
    "a * g": (lambda a, g: a * g, ["only the diagonal part", "- a (a . g) is missing"]),
    "a (1 - a) g": (lambda a, g: a * (1 - a) * g, ["a_j (1 - a_j)", "off-diagonal"]),
    "sign flipped": (lambda a, g: a * ((a * g).sum(-1, keepdim=True) - g), ["sign is flipped"]),
    "- a a^T g only": (lambda a, g: -a * (a * g).sum(-1, keepdim=True), ["diagonal term is missing"]),
    "plain sum of g": (lambda a, g: a * (g - g.sum(-1, keepdim=True)), ["plain sum of g"]),
    "mean": (lambda a, g: a * (g - (a * g).mean(-1, keepdim=True)), ["not a mean"]),
    "not multiplied by a": (lambda a, g: g - (a * g).sum(-1, keepdim=True), ["not multiplied by a"]),
    "g itself": (lambda a, g: g, ["that is g itself"]),
    "whole-tensor sum": (lambda a, g: a * (g - (a * g).sum()), ["summed over the whole tensor"]),
    "axis-0 sum": (lambda a, g: a * (g - (a * g).sum(0, keepdim=True)), ["summed over axis 0"]),
    "keepdim missing": (lambda a, g: a * (g - (a * g).sum(-1)), ["keepdim=True"]),
    "the Jacobian": (lambda a, g: torch.diag_embed(a) - a[..., :, None] * a[..., None, :], ["Jacobian", "apply it to g"]),
}


@pytest.mark.parametrize("name", list(GRAD_MISTAKES))
def test_softmax_backward_mistakes_are_named(name):
    fn, phrases = GRAD_MISTAKES[name]
    assert_caught(check_softmax_backward, fn, *phrases)


def test_softmax_backward_unfinished_branch_and_precision_are_named():
    def partial(a, g):
        if a.dim() == 1:
            raise NotImplementedError
        return a * (g - (a * g).sum(-1, keepdim=True))

    assert_caught(check_softmax_backward, partial, "unfinished branch", "shape (5,)")

    def float32_buffer(a, g):
        dot = torch.zeros(*a.shape[:-1], 1)  # float32, whatever a is
        dot += (a * g).sum(-1, keepdim=True)
        return a * (g - dot)

    assert_caught(check_softmax_backward, float32_buffer, "precision problem", "dtype=x.dtype")


def test_softmax_backward_other_right_answers_pass():
    def jacobian(a, g):
        J = torch.diag_embed(a) - a.unsqueeze(-1) * a.unsqueeze(-2)  # (..., m, m)
        return (J @ g.unsqueeze(-1)).squeeze(-1)

    def einsum(a, g):
        return a * g - a * torch.einsum("...m,...m->...", a, g)[..., None]

    def autograd(a, g):
        z = a.log().detach().requires_grad_(True)
        return torch.autograd.grad(torch.softmax(z, -1), z, g)[0]

    def unsqueeze(a, g):
        return a * (g - (a * g).sum(-1).unsqueeze(-1))

    for fn in (jacobian, einsum, autograd, unsqueeze):
        assert check_softmax_backward(fn) is True, fn.__name__


def test_unfinished_branches_of_the_older_exercises_are_named():
    def beta(scores, eps=0.01):
        best, second = scores.topk(2).values.tolist()
        if best == second:
            raise NotImplementedError  # the tie, left for later
        return math.log((len(scores) - 1) / eps) / (best - second)

    def conv(conv):
        if conv.kernel_size[0] == 1:
            raise NotImplementedError
        return conv.weight.detach().permute(2, 1, 0), conv.bias.detach()

    assert_caught(check_hard_attention_beta, beta, "unfinished branch", "tie")
    assert_caught(check_conv_head_weights, conv, "unfinished branch", "kernel_size=1")
