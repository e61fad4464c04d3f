"""The attention checks: right answers pass, stubs are "not attempted", typical wrong answers are named."""

from __future__ import annotations

import math

import pytest
import torch
from torch import nn

import helpers.attention as ref
from helpers.checks import (
    ExerciseFailed,
    check_causal_mask,
    check_multi_head_attention,
    check_scaled_dot_product_attention,
    check_softmax,
)
from tests.conftest import assert_caught, assert_not_attempted

# ------------------------------------------------------------------ softmax


def test_softmax_reference_passes(capsys):
    assert check_softmax(ref.softmax) is True
    assert "correct" in capsys.readouterr().out
    assert check_softmax(lambda x, dim=-1: torch.softmax(x, dim)) is True


def test_softmax_stubs_are_not_attempted(capsys):
    def softmax(x, dim=-1):
        raise NotImplementedError

    assert_not_attempted(check_softmax, softmax, capsys)
    assert_not_attempted(check_softmax, ..., capsys)


def _unstable(x, dim=-1):
    e = torch.exp(x)
    return e / e.sum(dim, keepdim=True)


def _global_max(x, dim=-1):
    e = torch.exp(x - x.max())
    return e / e.sum(dim, keepdim=True)


SOFTMAX_MISTAKES = [
    (lambda x, dim=-1: torch.softmax(x, 0), "axis 0"),
    (lambda x, dim=-1: torch.softmax(x, 1), "axis 1"),
    (lambda x, dim=-1: torch.exp(x), "not divided by their sum"),
    (lambda x, dim=-1: torch.exp(x) / torch.exp(x).sum(), "whole tensor"),
    (
        lambda x, dim=-1: torch.exp(x - x.amax(dim, keepdim=True)) / torch.exp(x - x.amax(dim, keepdim=True)).sum(),
        "exps.sum(dim, keepdim=True)",
    ),
    (lambda x, dim=-1: torch.log_softmax(x, dim), "log-softmax"),
    (lambda x, dim=-1: torch.softmax(x, -1), "`dim` argument is ignored"),
    (_unstable, "overflow"),
    (_global_max, "overflow"),
    (lambda x, dim=-1: torch.softmax(x.float(), dim), "dtype"),
    (lambda x, dim=-1: torch.softmax(x, dim).numpy(), "torch.Tensor"),
    (lambda x, dim=-1: torch.exp(x - x.amax(dim, keepdim=True)) / torch.exp(x).amax(dim, keepdim=True), "differs"),
    (lambda x, dim=-1: torch.softmax(x, dim).sum(dim), "axes"),
    (lambda x, dim=-1: torch.exp(x) / torch.exp(x).sum(dim), "keepdim=True"),
    (lambda x, dim=-1: torch.softmax(x - x.amax(dim), dim), "keepdim=True"),
    (lambda x, dim=-1: torch.softmax(x.sub_(x.amax(dim, keepdim=True)), dim), "in place"),
    (
        lambda x, dim=-1: (
            torch.exp(x - x.max(dim, keepdim=True)) / torch.exp(x - x.max(dim, keepdim=True)).sum(dim, keepdim=True)
        ),
        ".values",
    ),
    (lambda x, dim=-1: torch.nn.ModuleList()(x), "not the exercise's stub"),
]


@pytest.mark.parametrize("wrong, phrase", SOFTMAX_MISTAKES)
def test_softmax_mistakes_are_named(wrong, phrase):
    assert_caught(check_softmax, wrong, "softmax", phrase)


def test_softmax_crash_becomes_exercise_failed():
    def crashes(x, dim=-1):
        return x @ torch.ones(7)

    message = assert_caught(check_softmax, crashes, "raised RuntimeError", "(2, 3, 4)")
    assert "Traceback" not in message


# ------------------------------------------------------------------ scaled dot-product attention


def _sdpa(scale="sqrt", softmax_dim=-1, mask_mode="ok", transpose_weights=False, swap=False, k_t=False):
    def attention(q, k, v, mask=None):
        kt = k.T if k_t else k.transpose(-2, -1)
        scores = q @ kt
        d_k, d_v = q.shape[-1], v.shape[-1]
        scores = {
            "sqrt": scores / math.sqrt(d_k),
            "none": scores,
            "d_k": scores / d_k,
            "d_v": scores / math.sqrt(d_v),
            "m": scores / math.sqrt(k.shape[-2]),
        }[scale]
        if mask is not None:
            if mask_mode == "ok":
                scores = scores.masked_fill(~mask, float("-inf"))
            elif mask_mode == "inverted":
                scores = scores.masked_fill(mask, float("-inf"))
            elif mask_mode == "added":
                scores = scores + mask
            elif mask_mode == "zero":
                scores = scores.masked_fill(~mask, 0.0)
        weights = torch.softmax(scores, softmax_dim)
        if mask is not None and mask_mode == "after":
            weights = weights * mask
        out = weights @ v
        if transpose_weights:
            weights = weights.transpose(-2, -1)
        return (weights, out) if swap else (out, weights)

    return attention


def test_sdpa_reference_passes():
    assert check_scaled_dot_product_attention(ref.scaled_dot_product_attention) is True
    assert check_scaled_dot_product_attention(_sdpa()) is True


def test_sdpa_stub_is_not_attempted(capsys):
    def attention(q, k, v, mask=None):
        raise NotImplementedError

    assert_not_attempted(check_scaled_dot_product_attention, attention, capsys)


SDPA_MISTAKES = [
    (_sdpa(scale="none"), "missing 1/sqrt(d_k)"),
    (_sdpa(scale="d_k"), "divided by d_k"),
    (_sdpa(scale="d_v"), "d_v"),
    (_sdpa(softmax_dim=-2), "softmax over the queries axis"),
    (_sdpa(mask_mode="ignored"), "mask is ignored"),
    (_sdpa(mask_mode="inverted"), "mask is inverted"),
    (_sdpa(mask_mode="zero"), "not -inf"),
    (_sdpa(mask_mode="after"), "without renormalising"),
    (_sdpa(transpose_weights=True), "transposed"),
    (_sdpa(swap=True), "swapped"),
    (_sdpa(k_t=True), "k.T reverses"),
    (_sdpa(mask_mode="added"), "added to the scores"),
    (_sdpa(scale="m"), "number of keys"),
    (lambda q, k, v, mask=None: q @ k.transpose(-2, -1), "tuple"),
]


@pytest.mark.parametrize("wrong, phrase", SDPA_MISTAKES)
def test_sdpa_mistakes_are_named(wrong, phrase):
    assert_caught(check_scaled_dot_product_attention, wrong, phrase)


def test_sdpa_without_mask_parameter_is_reported():
    def attention(q, k, v):
        return ref.scaled_dot_product_attention(q, k, v)

    assert_caught(check_scaled_dot_product_attention, attention, "TypeError")


# ------------------------------------------------------------------ causal mask


def test_causal_mask_reference_passes(capsys):
    assert check_causal_mask(ref.causal_mask) is True
    assert_not_attempted(check_causal_mask, ..., capsys)


CAUSAL_MISTAKES = [
    (lambda n: torch.ones(n, n, dtype=torch.bool).triu(), "tril"),
    (lambda n: ~torch.ones(n, n, dtype=torch.bool).tril(), "inverted"),
    (lambda n: torch.ones(n, n, dtype=torch.bool).triu(1), "blocked"),
    (lambda n: torch.ones(n, n, dtype=torch.bool).tril(-1), "attend to itself"),
    (lambda n: torch.ones(n, n).tril(), "boolean"),
    (lambda n: torch.zeros(n, n).masked_fill(~torch.ones(n, n, dtype=torch.bool).tril(), float("-inf")), "additive"),
    (lambda n: torch.ones(n, n + 1, dtype=torch.bool).tril(), "axis 1"),
    (lambda n: torch.ones(n, n, dtype=torch.bool), "wrong at"),
]


@pytest.mark.parametrize("wrong, phrase", CAUSAL_MISTAKES)
def test_causal_mask_mistakes_are_named(wrong, phrase):
    assert_caught(check_causal_mask, wrong, phrase)


# ------------------------------------------------------------------ multi-head attention


def _make_mha(mistake: str | None = None, average: bool = False, no_attrs: bool = False):
    class MHA(nn.Module):
        def __init__(self, d_model, num_heads):
            super().__init__()
            self.h, self.d_k = num_heads, d_model // num_heads
            names = ("q", "k", "v", "o") if no_attrs else ("w_q", "w_k", "w_v", "w_o")
            for name in names:
                setattr(self, name, nn.Linear(d_model, d_model))
            self.names = names

        def forward(self, query, key, value, mask=None):
            w_q, w_k, w_v, w_o = (getattr(self, n) for n in self.names)
            b, n, d = query.shape
            m = key.shape[1]

            def split(x, length):
                if mistake == "split":
                    return x.reshape(b, self.h, length, self.d_k)
                return x.view(b, length, self.h, self.d_k).transpose(1, 2)

            q, k, v = split(w_q(query), n), split(w_k(key), m), split(w_v(value), m)
            scale = math.sqrt(d) if mistake == "scale_d_model" else 1.0 if mistake == "no_scale" else math.sqrt(self.d_k)
            scores = q @ k.transpose(-2, -1) / scale
            if mask is not None and mistake != "mask_ignored":
                scores = scores.masked_fill(mask if mistake == "mask_inverted" else ~mask, float("-inf"))
            weights = torch.softmax(scores, -2 if mistake == "softmax" else -1)
            out = weights @ v
            merged = out.reshape(b, n, d) if mistake == "merge" else out.transpose(1, 2).reshape(b, n, d)
            out = merged if mistake == "no_w_o" else w_o(merged)
            return out, weights.mean(1) if average else weights

    return MHA


def test_mha_reference_passes(capsys):
    assert check_multi_head_attention(ref.MultiHeadAttention) is True
    assert check_multi_head_attention(_make_mha()) is True
    assert_not_attempted(check_multi_head_attention, ..., capsys)


def test_mha_stub_is_not_attempted(capsys):
    class MHA(nn.Module):
        def __init__(self, d_model, num_heads):
            super().__init__()
            raise NotImplementedError

    assert_not_attempted(check_multi_head_attention, MHA, capsys)


def _shipped_mha(partial: bool):
    class MultiHeadAttention(nn.Module):  # the student notebook's class, its forward the stub or partial work
        def __init__(self, d_model, num_heads):
            super().__init__()
            self.num_heads, self.d_k = num_heads, d_model // num_heads
            self.w_q, self.w_k, self.w_v, self.w_o = (nn.Linear(d_model, d_model) for _ in range(4))

        if partial:

            def forward(self, query, key, value, mask=None):
                q = ref.split_heads(self.w_q(query), self.num_heads)  # noqa: F841 - real work, then the stub's raise
                raise NotImplementedError("Exercise: replace this line with your code")

        else:

            def forward(self, query, key, value, mask=None):
                # YOUR CODE HERE
                raise NotImplementedError("Exercise: replace this line with your code")

    return MultiHeadAttention


def test_mha_shipped_stub_is_not_attempted_and_partial_work_is_named(capsys):
    assert_not_attempted(check_multi_head_attention, _shipped_mha(partial=False), capsys)
    assert_caught(check_multi_head_attention, _shipped_mha(partial=True), "partial work")


MHA_MISTAKES = [
    ("split", "without a transpose"),
    ("merge", "merged without a transpose"),
    ("no_scale", "missing 1/sqrt(d_k)"),
    ("scale_d_model", "sqrt(d_model)"),
    ("softmax", "softmax over the queries"),
    ("no_w_o", "w_o"),
    ("mask_ignored", "mask is ignored"),
    ("mask_inverted", "mask is inverted"),
]


@pytest.mark.parametrize("mistake, phrase", MHA_MISTAKES)
def test_mha_mistakes_are_named(mistake, phrase):
    assert_caught(check_multi_head_attention, _make_mha(mistake), phrase)


def test_mha_structure_mistakes_are_named():
    assert_caught(check_multi_head_attention, _make_mha(average=True), "averaged over heads")
    assert_caught(check_multi_head_attention, _make_mha(no_attrs=True), "no attribute `w_q`")
    assert_caught(check_multi_head_attention, lambda d, h: object(), "nn.Module")


def test_check_never_leaks_internal_errors():
    class Weird(nn.Module):
        def __init__(self, d_model, num_heads):
            super().__init__()
            for name in ("w_q", "w_k", "w_v", "w_o"):
                setattr(self, name, nn.Linear(d_model, d_model))

        def forward(self, query, key, value, mask=None):
            return "out", "weights"

    with pytest.raises(ExerciseFailed) as info:
        check_multi_head_attention(Weird)
    assert "torch.Tensor" in str(info.value)


def test_checks_do_not_disturb_the_notebooks_random_stream():
    torch.manual_seed(0)
    expected = torch.rand(3)
    torch.manual_seed(0)
    check_softmax(ref.softmax)
    assert torch.equal(torch.rand(3), expected)


def test_exercise_failed_renders_without_traceback():
    err = ExerciseFailed("softmax: wrong axis")
    assert err._render_traceback_() == ["\x1b[0;31mExerciseFailed\x1b[0m: softmax: wrong axis"]
    assert isinstance(err, AssertionError)


def test_every_check_is_exported_once_from_helpers_checks():
    import helpers.checks as checks

    names = [n for n in checks.__all__ if n.startswith("check_")]
    assert len(names) == len(set(names)), "two check modules export the same name"
    assert {"check_softmax", "check_layer_norm", "check_patchify", "check_train_step", "check_split_heads"} <= set(names)
    namespace: dict = {}
    exec("from helpers.checks import *", namespace)
    assert all(callable(namespace[n]) for n in names)


# ------------------------------------------------------------------ issue 10: overflow in float32, real NotImplementedError, new named mistakes


def _naive_softmax_attention(q, k, v, mask=None):
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    e = torch.exp(scores)
    w = e / e.sum(-1, keepdim=True)
    return w @ v, w


def test_sdpa_with_a_naive_softmax_fails():
    assert_caught(check_scaled_dot_product_attention, _naive_softmax_attention, "NaN", "maximum")


def test_sdpa_keys_from_query_is_named():
    def attention(q, k, v, mask=None):
        w = torch.softmax(q @ q.transpose(-2, -1) / math.sqrt(q.shape[-1]), -1)
        return w @ v[..., : q.shape[-2], :], w

    assert_caught(check_scaled_dot_product_attention, attention, "q in place of the keys")


def test_sdpa_float32_reference_passes():
    def attention(q, k, v, mask=None):  # computes in the inputs' dtype, float32 included
        return torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=mask), ref.scaled_dot_product_attention(
            q, k, v, mask
        )[1]

    assert check_scaled_dot_product_attention(attention) is True


def test_sdpa_pytorch_not_implemented_is_an_attempt():
    def attention(q, k, v, mask=None):
        return nn.ModuleList()(q)

    assert_caught(check_scaled_dot_product_attention, attention, "not the exercise's stub")


def _mha_with(forward_change=None, bias=True, dropout=False):
    class MHA(ref.MultiHeadAttention):
        def __init__(self, d_model, num_heads):
            nn.Module.__init__(self)
            self.num_heads, self.d_k = num_heads, d_model // num_heads
            self.d_model = d_model
            for name in ("w_q", "w_k", "w_v", "w_o"):
                setattr(self, name, nn.Linear(d_model, d_model, bias=bias))
            self.dropout = nn.Dropout(0.0)

        def forward(self, query, key, value, mask=None, need_weights=True):
            if forward_change == "keys_from_query":
                key = query
            elif forward_change == "kv_swapped":
                key, value = value, key
            b, n, d = query.shape
            q = self.w_q(query).view(b, n, self.num_heads, self.d_k).transpose(1, 2)
            k = self.w_k(key).view(b, key.shape[1], self.num_heads, self.d_k).transpose(1, 2)
            v = self.w_v(value).view(b, value.shape[1], self.num_heads, self.d_k).transpose(1, 2)
            scores = q @ k.transpose(-2, -1) / math.sqrt(self.d_k)
            if mask is not None:
                scores = scores.masked_fill(~mask, 0.0 if forward_change == "mask_zero" else float("-inf"))
            if forward_change == "naive_softmax":
                e = torch.exp(scores)
                w = e / e.sum(-1, keepdim=True)
            elif forward_change == "mask_after_softmax":
                w = torch.softmax(q @ k.transpose(-2, -1) / math.sqrt(self.d_k), -1)
                w = w if mask is None else w * mask
            else:
                w = torch.softmax(scores, -1)
            if dropout:
                w = torch.nn.functional.dropout(w, 0.1)
            out = (w @ v).transpose(1, 2).reshape(b, n, d)
            return self.w_o(out), w

    return MHA


def test_mha_right_variant_passes():
    assert check_multi_head_attention(_mha_with()) is True


@pytest.mark.parametrize(
    "cls, phrase",
    [
        (_mha_with(bias=False), "has no bias"),
        (_mha_with("keys_from_query"), "keys or values are computed from `query`"),
        (_mha_with("kv_swapped"), "key and value are swapped"),
        (_mha_with("mask_zero"), "not -inf"),
        (_mha_with("mask_after_softmax"), "after the softmax"),
        (_mha_with("naive_softmax"), "NaN"),
        (_mha_with(dropout=True), "dropout is left active"),
    ],
)
def test_mha_more_mistakes_are_named(cls, phrase):
    assert_caught(check_multi_head_attention, cls, phrase)


def test_mha_generator_stub_is_not_attempted(capsys):
    class MHA(nn.Module):
        def __init__(self, d_model, num_heads):
            super().__init__()
            raise NotImplementedError("Exercise: replace this line with your code")

    assert_not_attempted(check_multi_head_attention, MHA, capsys)


def test_mha_without_forward_is_named():
    class MHA(nn.Module):
        def __init__(self, d_model, num_heads):
            super().__init__()
            for name in ("w_q", "w_k", "w_v", "w_o"):
                setattr(self, name, nn.Linear(d_model, d_model))

        def froward(self, query, key, value, mask=None):  # misspelt: nn.Module has no forward to call
            return None

    assert_caught(check_multi_head_attention, MHA, "has no `forward` method")


def test_none_is_an_answer_not_a_stub():
    assert_caught(check_softmax, None, "raised TypeError")


# ------------------------------------------------------------------ issue 25: the likeliest mistakes the catalogues lacked


def _sm_min(x, dim=-1):
    e = torch.exp(x - x.amin(dim, keepdim=True))
    return e / e.sum(dim, keepdim=True)


def _sm_max_last_axis(x, dim=-1):
    e = torch.exp(x - x.amax(-1, keepdim=True))
    return e / e.sum(dim, keepdim=True)


def _sm_sum_last_axis(x, dim=-1):
    e = torch.exp(x - x.amax(dim, keepdim=True))
    return e / e.sum(-1, keepdim=True)


def _sm_in_float32(x, dim=-1):
    y = x.float()
    e = torch.exp(y - y.amax(dim, keepdim=True))
    return (e / e.sum(dim, keepdim=True)).to(x.dtype)


def _sm_max_in_a_variable(x, dim=-1):
    x_max = x.max(dim=dim, keepdim=True)
    return torch.exp(torch.sub(x, x_max)) / torch.exp(torch.sub(x, x_max)).sum(dim, keepdim=True)


SOFTMAX_MORE_MISTAKES = [
    (_sm_min, ["the minimum was subtracted", "x.amax(dim, keepdim=True)"]),
    (lambda x, dim=-1: x / x.sum(dim, keepdim=True), ["exponential is missing"]),
    (_sm_max_last_axis, ["maximum is taken along the last axis, not along `dim`"]),
    (_sm_sum_last_axis, ["sum runs along the last axis, not along `dim`"]),
    (lambda x, dim=-1: math.exp(x) / sum(math.exp(x)), ["math.exp", "torch.exp"]),
    (_sm_in_float32, ["precision problem", "float32", "dtype=x.dtype"]),
    (_sm_max_in_a_variable, [".values", "amax"]),
    (lambda x, dim=-1: x.max(dim), ["got max", ".values"]),
    (lambda x, dim=-1: torch.exp(x) / torch.exp(x).mean(dim, keepdim=True), ["mean, not their sum"]),
]


@pytest.mark.parametrize("wrong, phrases", SOFTMAX_MORE_MISTAKES)
def test_softmax_likeliest_mistakes_are_named(wrong, phrases):
    message = assert_caught(check_softmax, wrong, "softmax", *phrases)
    assert "differs from the reference in" not in message


def _sm_exp_in_place_on_a_new_tensor(x, dim=-1):
    e = (x - x.amax(dim, keepdim=True)).exp_()  # in place on a new tensor, not on x: fine
    return e / e.sum(dim, keepdim=True)


SOFTMAX_RIGHT = [
    _sm_exp_in_place_on_a_new_tensor,
    lambda x, dim=-1: torch.exp(x - torch.logsumexp(x, dim, keepdim=True)),
    lambda x, dim=-1: (
        torch.exp(x - x.max(dim, keepdim=True).values) / torch.exp(x - x.max(dim, keepdim=True).values).sum(dim, keepdim=True)
    ),
    lambda x, dim=-1: torch.nn.functional.softmax(x, dim=dim),
    lambda x, dim=-1: x.softmax(dim),
]


@pytest.mark.parametrize("right", SOFTMAX_RIGHT)
def test_softmax_other_right_answers_pass(right):
    assert check_softmax(right) is True


def _attention(scores_fn=None, mask_fn=None, weights_fn=None, combine=None, dim=-1):
    """A scaled dot-product attention with one step replaced."""

    def attention(q, k, v, mask=None):
        scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
        if scores_fn is not None:
            scores = scores_fn(scores, q, k)
        if mask is not None:
            scores = mask_fn(scores, mask) if mask_fn is not None else scores.masked_fill(~mask, float("-inf"))
        weights = torch.softmax(scores, dim)
        if weights_fn is not None:
            weights = weights_fn(weights, mask, q)
        return (combine(weights, v) if combine is not None else weights @ v), weights

    return attention


def _k_transpose_1_2(q, k, v, mask=None):
    scores = q @ k.transpose(1, 2) / math.sqrt(q.shape[-1])
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    weights = torch.softmax(scores, -1)
    return weights @ v, weights


def _torch_sqrt_of_an_int(q, k, v, mask=None):
    weights = torch.softmax(q @ k.transpose(-2, -1) / torch.sqrt(q.shape[-1]), -1)
    return weights @ v, weights


def _no_softmax(q, k, v, mask=None):
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
    if mask is not None:
        scores = scores.masked_fill(~mask, 0.0)
    return scores @ v, scores


_UNSCALE = math.sqrt  # the helpers below undo the right scale and apply a wrong one

SDPA_MORE_MISTAKES = [
    (
        _attention(scores_fn=lambda s, q, k: s * _UNSCALE(q.shape[-1]), weights_fn=lambda w, m, q: w / _UNSCALE(q.shape[-1])),
        ["scale is applied after the softmax"],
    ),
    (_attention(scores_fn=lambda s, q, k: s * _UNSCALE(q.shape[-1]) / _UNSCALE(q.shape[-2])), ["number of queries"]),
    (_attention(mask_fn=lambda s, m: s * m), ["set to 0, not -inf"]),
    (
        _attention(mask_fn=lambda s, m: s, weights_fn=lambda w, m, q: w if m is None else w.masked_fill(~m, float("-inf"))),
        ["-inf was filled into the weights after the softmax"],
    ),
    (
        _attention(
            mask_fn=lambda s, m: s, weights_fn=lambda w, m, q: w if m is None else (w * m) / (w * m).sum(-1, keepdim=True)
        ),
        ["renormalised", "underflow", "before the softmax"],
    ),
    (_attention(combine=lambda w, v: w * v), ["weights @ v", "entry by entry"]),
    (_k_transpose_1_2, ["works for (batch, n, d) inputs but not with a head axis", "k.transpose(-2, -1)"]),
    (_attention(dim=2), ["softmax over the queries axis"]),
    (_no_softmax, ["before softmax"]),
    (_torch_sqrt_of_an_int, ["math.sqrt(d_k)"]),
]


@pytest.mark.parametrize("wrong, phrases", SDPA_MORE_MISTAKES)
def test_sdpa_likeliest_mistakes_are_named(wrong, phrases):
    message = assert_caught(check_scaled_dot_product_attention, wrong, *phrases)
    assert "differs from the reference in" not in message


SDPA_RIGHT = [
    _attention(mask_fn=lambda s, m: s.masked_fill(~m, -1e9)),  # a large negative number instead of -inf
    _attention(mask_fn=lambda s, m: torch.where(m, s, float("-inf"))),
    _attention(mask_fn=lambda s, m: s.masked_fill(~m, torch.finfo(s.dtype).min)),
    _attention(mask_fn=lambda s, m: s.masked_fill_(m == False, float("-inf"))),  # noqa: E712 (as a learner writes it)
    _attention(mask_fn=lambda s, m: s + (~m) * -1e9),
    lambda q, k, v, mask=None: _attention()(q, k, v, mask),
]


@pytest.mark.parametrize("right", SDPA_RIGHT)
def test_sdpa_other_right_answers_pass(right):
    assert check_scaled_dot_product_attention(right) is True


def test_sdpa_mT_and_tensor_methods_pass():
    def attention(q, k, v, mask=None):
        scores = q @ k.mT / q.shape[-1] ** 0.5
        if mask is not None:
            scores = scores.masked_fill(~mask, float("-inf"))
        weights = scores.softmax(dim=-1)
        return torch.matmul(weights, v), weights

    assert check_scaled_dot_product_attention(attention) is True


CAUSAL_MORE_MISTAKES = [
    (lambda n: torch.ones(4, 4, dtype=torch.bool).tril(), ["hard-coded", "argument n"]),
    (lambda n: torch.ones(n, n, dtype=torch.bool).tril()[None], ["extra axes of size 1"]),
    (lambda n: torch.zeros(n, n).masked_fill(~torch.ones(n, n, dtype=torch.bool).tril(), -1e9), ["additive float mask"]),
    (lambda n: torch.ones(n, n, dtype=torch.long).tril(), ["0s and 1s", "flips every bit of an integer"]),
    (lambda n: torch.arange(n)[:, None] > torch.arange(n), ["attend to itself"]),
    (lambda n: torch.arange(n)[:, None] <= torch.arange(n), ["tril"]),
    (lambda n: torch.ones(n, n, dtype=torch.bool).tril().numpy(), ["torch.Tensor", "ndarray"]),
]


@pytest.mark.parametrize("wrong, phrases", CAUSAL_MORE_MISTAKES)
def test_causal_mask_likeliest_mistakes_are_named(wrong, phrases):
    assert_caught(check_causal_mask, wrong, *phrases)


CAUSAL_RIGHT = [
    lambda n: torch.ones(n, n).triu(1) == 0,
    lambda n: torch.arange(n)[:, None] >= torch.arange(n),
    lambda n: ~torch.ones(n, n).triu(1).bool(),
    lambda n: torch.tril(torch.ones(n, n)).bool(),
    lambda n: torch.tril(torch.ones(n, n, dtype=torch.bool)),
]


@pytest.mark.parametrize("right", CAUSAL_RIGHT)
def test_causal_mask_other_right_answers_pass(right):
    assert check_causal_mask(right) is True


MHA_MORE_MISTAKES = [
    ("w_q_w_k_swapped", "w_q and w_k are swapped"),
    ("values_from_key", "values are computed from `key`"),
    ("sqrt_heads", "sqrt(num_heads)"),
    ("softmax_heads", "softmax over the heads axis"),
    ("heads_reversed", "merged in reverse order"),
    ("mask_unsqueezed", "mask.unsqueeze(1)"),
    ("float_d_k", "integer division"),
    ("hard_coded_d_k", "hard-coding"),
    ("view_after_transpose", ".reshape("),
    ("one_head_weights", "not one per head"),
]


def _mha_slip(mistake):
    class MHA(nn.Module):
        def __init__(self, d_model, num_heads):
            super().__init__()
            self.h = num_heads
            self.d_k = {"float_d_k": d_model / num_heads, "hard_coded_d_k": 64}.get(mistake, d_model // num_heads)
            self.w_q, self.w_k, self.w_v, self.w_o = (nn.Linear(d_model, d_model) for _ in range(4))

        def forward(self, query, key, value, mask=None):
            b, n, d = query.shape
            m = key.shape[1]
            w_q, w_k = (self.w_k, self.w_q) if mistake == "w_q_w_k_swapped" else (self.w_q, self.w_k)
            value = key if mistake == "values_from_key" else value
            q, k, v = (
                t.view(b, length, self.h, self.d_k).transpose(1, 2)
                for t, length in ((w_q(query), n), (w_k(key), m), (self.w_v(value), m))
            )
            scores = q @ k.transpose(-2, -1) / (math.sqrt(self.h) if mistake == "sqrt_heads" else math.sqrt(self.d_k))
            if mask is not None:
                scores = scores.masked_fill(~(mask.unsqueeze(1) if mistake == "mask_unsqueezed" else mask), float("-inf"))
            weights = torch.softmax(scores, 1 if mistake == "softmax_heads" else -1)
            out = weights @ v
            if mistake == "heads_reversed":
                out = out.flip(1)
            merged = (
                out.transpose(1, 2).view(b, n, d) if mistake == "view_after_transpose" else out.transpose(1, 2).reshape(b, n, d)
            )
            return self.w_o(merged), weights[:, 0] if mistake == "one_head_weights" else weights

    return MHA


@pytest.mark.parametrize("mistake, phrase", MHA_MORE_MISTAKES)
def test_mha_likeliest_mistakes_are_named(mistake, phrase):
    message = assert_caught(check_multi_head_attention, _mha_slip(mistake), phrase)
    assert "differs from the reference in" not in message


def test_mha_other_right_answers_pass():
    class WithContiguous(_mha_slip(None)):
        def forward(self, query, key, value, mask=None):
            b, n, d = query.shape
            q, k, v = (
                w(t).view(b, -1, self.h, self.d_k).permute(0, 2, 1, 3)
                for w, t in ((self.w_q, query), (self.w_k, key), (self.w_v, value))
            )
            scores = torch.einsum("bhnk,bhmk->bhnm", q, k) * self.d_k**-0.5
            if mask is not None:
                scores = torch.where(mask, scores, float("-inf"))
            weights = scores.softmax(-1)
            return self.w_o((weights @ v).transpose(1, 2).contiguous().view(b, n, d)), weights

    assert check_multi_head_attention(_mha_slip(None)) is True
    assert check_multi_head_attention(WithContiguous) is True


# ------------------------------------------------------------------ issues 34 and 36: more classes named, more right answers


def _sm_sum_along(axis):
    def softmax(x, dim=-1):
        e = torch.exp(x - x.amax(dim, keepdim=True))
        return e / e.sum(axis, keepdim=True)  # a hard-coded axis

    return softmax


def _sm_max_along(axis):
    def softmax(x, dim=-1):
        e = torch.exp(x - x.amax(axis, keepdim=True))  # a hard-coded axis
        return e / e.sum(dim, keepdim=True)

    return softmax


def _sm_unfinished(x, dim=-1):
    if dim != -1:
        raise NotImplementedError
    e = torch.exp(x - x.amax(-1, keepdim=True))
    return e / e.sum(-1, keepdim=True)


SOFTMAX_ISSUE_36 = [
    (_sm_sum_along(1), ["sum runs along axis 1, a fixed axis"]),
    (_sm_sum_along(0), ["sum runs along axis 0, a fixed axis"]),
    (_sm_max_along(1), ["maximum is taken along axis 1, a fixed axis"]),
    (lambda x: torch.softmax(x, -1), ["keep its signature", "def softmax(x, dim=-1)"]),
    (_sm_unfinished, ["unfinished branch", "dim=0"]),
]


@pytest.mark.parametrize("wrong, phrases", SOFTMAX_ISSUE_36)
def test_softmax_more_classes_are_named(wrong, phrases):
    message = assert_caught(check_softmax, wrong, *phrases)
    assert "not attempted" not in message


def _sdpa_batch_scale(q, k, v, mask=None):
    scores = q @ k.transpose(-2, -1) / math.sqrt(len(q))
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    weights = torch.softmax(scores, -1)
    return weights @ v, weights


def _sdpa_no_mask(q, k, v):
    weights = torch.softmax(q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1]), -1)
    return weights @ v, weights


def _sdpa_if_mask(q, k, v, mask=None):
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
    if mask:
        scores = scores.masked_fill(~mask, float("-inf"))
    weights = torch.softmax(scores, -1)
    return weights @ v, weights


def _sdpa_float32_sqrt(q, k, v, mask=None):
    scores = q @ k.transpose(-2, -1) / torch.sqrt(torch.tensor(q.shape[-1]))  # torch.tensor of an int: sqrt in float32
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    weights = torch.softmax(scores, -1)
    return weights @ v, weights


def _sdpa_unfinished_mask(q, k, v, mask=None):
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
    if mask is not None:
        raise NotImplementedError
    weights = torch.softmax(scores, -1)
    return weights @ v, weights


SDPA_ISSUE_36 = [
    (_sdpa_batch_scale, ["batch size", "q.shape[-1]"]),
    (_sdpa_no_mask, ["keep its signature", "mask=None"]),
    (_sdpa_if_mask, ["if mask is not None"]),
    (_sdpa_float32_sqrt, ["precision problem"]),
    (_sdpa_unfinished_mask, ["unfinished branch", "boolean mask"]),
]


@pytest.mark.parametrize("wrong, phrases", SDPA_ISSUE_36)
def test_sdpa_more_classes_are_named(wrong, phrases):
    message = assert_caught(check_scaled_dot_product_attention, wrong, *phrases)
    assert "not attempted" not in message and "differs from the reference in" not in message


def _sdpa_einsum(q, k, v, mask=None):
    scores = torch.einsum("...nd,...md->...nm", q, k) / q.shape[-1] ** 0.5
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    weights = scores.softmax(-1)
    return torch.einsum("...nm,...mv->...nv", weights, v), weights


def _sdpa_scale_q_first(q, k, v, mask=None):
    scores = (q / math.sqrt(q.shape[-1])) @ k.transpose(-2, -1)
    if mask is not None:
        scores = scores.masked_fill(~mask, -1e4)  # float32 scores here reach about 100: -1e4 is far enough
    weights = torch.softmax(scores, -1)
    return weights @ v, weights


def _sdpa_torch_for_out(q, k, v, mask=None):
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
    if mask is not None:
        scores = scores.masked_fill(mask == 0, float("-inf"))
    return torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=mask), torch.softmax(scores, -1)


def _sdpa_log_mask(q, k, v, mask=None):
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
    if mask is not None:
        scores = scores + torch.log(mask.to(scores.dtype))  # log 1 = 0, log 0 = -inf
    weights = torch.softmax(scores, -1)
    return weights @ v, weights


@pytest.mark.parametrize("right", [_sdpa_einsum, _sdpa_scale_q_first, _sdpa_torch_for_out, _sdpa_log_mask])
def test_sdpa_more_right_answers_pass(right):
    assert check_scaled_dot_product_attention(right) is True
