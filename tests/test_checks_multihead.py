"""The checks of notebook 04: split_heads, merge_heads, and check_multi_head_attention on the notebook's mistakes."""

from __future__ import annotations

import math

import pytest
import torch
from torch import nn

import helpers.attention
from helpers.checks import check_merge_heads, check_multi_head_attention, check_split_heads
from tests.conftest import assert_caught, assert_not_attempted

# ------------------------------------------------------------------ split_heads


def split_ok(x, num_heads):
    b, n, d = x.shape
    return x.view(b, n, num_heads, d // num_heads).transpose(1, 2)


def split_by_chunks(x, num_heads):  # another right answer
    return torch.stack(x.chunk(num_heads, dim=-1), dim=1)


def split_stub(x, num_heads):
    raise NotImplementedError


SPLIT_WRONG = {
    "reshape_no_transpose": (
        lambda x, h: x.reshape(x.shape[0], h, x.shape[1], x.shape[2] // h),
        ["view-versus-transpose", "mixes tokens"],
    ),
    "view_only": (lambda x, h: x.view(x.shape[0], x.shape[1], h, x.shape[2] // h), ["did not transpose(1, 2)"]),
    "strided": (lambda x, h: x.reshape(x.shape[0], x.shape[1], x.shape[2] // h, h).permute(0, 3, 1, 2), ["strided"]),
    "transpose_first": (lambda x, h: x.transpose(1, 2).reshape(x.shape[0], h, x.shape[1], x.shape[2] // h), ["before splitting"]),
    "reversed_heads": (lambda x, h: split_ok(x, h).flip(1), ["reverse order"]),
    "wrong_axes": (lambda x, h: split_ok(x, h).transpose(2, 3), ["last two axes are swapped"]),
    "heads_dk_swapped": (
        lambda x, h: x.view(x.shape[0], x.shape[1], x.shape[2] // h, h).transpose(1, 2),
        ["heads and d_k are swapped"],
    ),
    "nothing_split": (lambda x, h: x, ["nothing was split"]),
    "transpose_batch": (lambda x, h: x.view(x.shape[0], x.shape[1], h, x.shape[2] // h).transpose(0, 2), ["batch axis"]),
    "hard_coded_3_heads": (lambda x, h: split_ok(x, 3), ["hard-code"]),
    "tokens_rolled": (lambda x, h: split_ok(x.roll(1, dims=1), h), ["token", "instead of token", "wrong place"]),
    "values_changed": (lambda x, h: split_ok(x, h) * 2, ["values were changed"]),
    "nan": (lambda x, h: split_ok(x, h) * float("nan"), ["values were changed"]),
}


def test_split_reference_passes():
    assert check_split_heads(split_ok) is True
    assert check_split_heads(split_by_chunks) is True
    assert check_split_heads(lambda x, h: helpers.attention.MultiHeadAttention(x.shape[-1], h).split_heads(x)) is True


def test_split_not_attempted(capsys):
    assert_not_attempted(check_split_heads, split_stub, capsys)
    assert_not_attempted(check_split_heads, ..., capsys)


@pytest.mark.parametrize("name", SPLIT_WRONG)
def test_split_wrong_answers_caught(name):
    fn, phrases = SPLIT_WRONG[name]
    assert_caught(check_split_heads, fn, *phrases)


def test_split_crash_is_reported():
    assert_caught(check_split_heads, lambda x, h: x.view(7, -1), "raised RuntimeError")


# ------------------------------------------------------------------ merge_heads


def merge_ok(x):
    b, h, n, d_k = x.shape
    return x.transpose(1, 2).reshape(b, n, h * d_k)


MERGE_WRONG = {
    "reshape_no_transpose": (lambda x: x.reshape(x.shape[0], x.shape[2], -1), ["view-versus-transpose", "mixes heads"]),
    "transpose_only": (lambda x: x.transpose(1, 2), ["did not flatten"]),
    "summed": (lambda x: x.sum(1), ["summed or averaged"]),
    "mean": (lambda x: x.mean(1), ["summed or averaged"]),
    "cat_tokens": (lambda x: torch.cat(list(x.unbind(1)), dim=1), ["along the tokens axis"]),
    "interleaved": (lambda x: x.permute(0, 2, 3, 1).reshape(x.shape[0], x.shape[2], -1), ["interleaved"]),
    "reversed_heads": (lambda x: merge_ok(x.flip(1)), ["reverse order"]),
    "reversed_tokens": (lambda x: merge_ok(x).flip(1), ["tokens come out in reverse"]),
    "flatten_tokens": (lambda x: x.reshape(x.shape[0], x.shape[1], -1), ["transpose(1, 2) first"]),
    "tokens_rolled": (lambda x: merge_ok(x.roll(1, dims=2)), ["instead of token"]),
    "scaled": (lambda x: merge_ok(x) / x.shape[1], ["values were changed"]),
}


def test_merge_reference_passes():
    assert check_merge_heads(merge_ok) is True
    assert check_merge_heads(lambda x: torch.cat(list(x.unbind(1)), dim=-1)) is True
    assert (
        check_merge_heads(lambda x: helpers.attention.MultiHeadAttention(x.shape[1] * x.shape[3], x.shape[1]).merge_heads(x))
        is True
    )


def test_merge_not_attempted(capsys):
    def stub(x):
        raise NotImplementedError

    assert_not_attempted(check_merge_heads, stub, capsys)
    assert_not_attempted(check_merge_heads, ..., capsys)


@pytest.mark.parametrize("name", MERGE_WRONG)
def test_merge_wrong_answers_caught(name):
    fn, phrases = MERGE_WRONG[name]
    assert_caught(check_merge_heads, fn, *phrases)


# ------------------------------------------------------------------ check_multi_head_attention on notebook 04's mistakes


class StudentMHA(nn.Module):
    """The notebook's solution, with switches for typical mistakes."""

    mistake = None

    def __init__(self, d_model, num_heads):
        super().__init__()
        self.h, self.d_k = num_heads, d_model // num_heads
        self.w_q, self.w_k, self.w_v, self.w_o = (nn.Linear(d_model, d_model) for _ in range(4))

    def forward(self, query, key, value, mask=None):
        b, n, d = query.shape
        m = key.shape[1]

        def split(t, length):
            if self.mistake == "view_no_transpose":
                return t.reshape(b, self.h, length, self.d_k)
            return t.view(b, length, self.h, self.d_k).transpose(1, 2)

        q, k, v = split(self.w_q(query), n), split(self.w_k(key), m), split(self.w_v(value), m)
        scale = math.sqrt(d) if self.mistake == "sqrt_d_model" else math.sqrt(self.d_k)
        if self.mistake == "no_scale":
            scale = 1.0
        scores = q @ k.transpose(-2, -1) / scale
        if mask is not None:
            blocked = mask if self.mistake == "mask_inverted" else ~mask
            scores = scores.masked_fill(blocked, float("-inf"))
        weights = torch.softmax(scores, dim=-1)
        out = weights @ v
        out = out.reshape(b, n, d) if self.mistake == "merge_no_transpose" else out.transpose(1, 2).reshape(b, n, d)
        return (out if self.mistake == "no_w_o" else self.w_o(out)), weights


MHA_WRONG = {
    "view_no_transpose": "without a transpose",
    "merge_no_transpose": "merged without a transpose",
    "no_scale": "sqrt(d_k)",
    "sqrt_d_model": "sqrt(d_model)",
    "mask_inverted": "inverted",
    "no_w_o": "w_o",
}


def test_mha_reference_and_student_solution_pass():
    assert check_multi_head_attention(helpers.attention.MultiHeadAttention) is True
    assert check_multi_head_attention(StudentMHA) is True


@pytest.mark.parametrize("mistake", MHA_WRONG)
def test_mha_mistakes_named(mistake):
    cls = type(f"MHA_{mistake}", (StudentMHA,), {"mistake": mistake})
    assert_caught(check_multi_head_attention, cls, MHA_WRONG[mistake])


def test_mha_not_attempted(capsys):
    class Stub(nn.Module):
        def __init__(self, d_model, num_heads):
            super().__init__()
            raise NotImplementedError

    assert_not_attempted(check_multi_head_attention, Stub, capsys)


def test_mha_walkthrough_sizes_match_torch_with_and_without_causal_mask():
    torch.manual_seed(0)
    ours = helpers.attention.MultiHeadAttention(768, 12).eval()
    theirs = helpers.attention.copy_mha_to_torch(ours, nn.MultiheadAttention(768, 12, batch_first=True)).eval()
    x = torch.randn(1, 5, 768)
    for mask in (None, helpers.attention.causal_mask(5)):
        out, weights = ours(x, x, x, mask)
        ref_out, ref_w = theirs(x, x, x, attn_mask=None if mask is None else ~mask, average_attn_weights=False)
        torch.testing.assert_close(out, ref_out, atol=1e-6, rtol=1e-6)
        torch.testing.assert_close(weights, ref_w, atol=1e-6, rtol=1e-6)
        fused, _ = ours(x, x, x, mask, need_weights=False)
        torch.testing.assert_close(fused, ref_out, atol=1e-6, rtol=1e-6)


# ------------------------------------------------------------------ issue 25: the likeliest mistakes the catalogues lacked

SPLIT_MORE_WRONG = {
    "float_division": (
        lambda x, h: x.view(x.shape[0], x.shape[1], h, x.shape[2] / h).transpose(1, 2),
        ["a float", "d_model // num_heads"],
    ),
    "hard_coded_d_k": (lambda x, h: x.view(x.shape[0], x.shape[1], h, 64).transpose(1, 2), ["instead of hard-coding"]),
    "list_of_heads": (lambda x, h: list(x.split(x.shape[-1] // h, -1)), ["got list of 3 tensors", "torch.stack"]),
    "unflatten_tokens": (lambda x, h: x.unflatten(1, (h, -1)), ["unflatten(1, ...) splits the tokens axis"]),
    "chunk_tokens": (lambda x, h: torch.stack(x.chunk(h, dim=1), 1), ["cut along the tokens axis", "dim=-1"]),
    "transpose_then_view": (
        lambda x, h: x.transpose(1, 2).view(x.shape[0], h, -1, x.shape[1]),
        ["last two axes are swapped", "before splitting"],
    ),
}


def _split_filled(dtype=None):
    """A right split, head by head, into a tensor created with zeros: float32 unless given the input's dtype."""

    def split(x, h):
        batch, n, d_model = x.shape
        d_k = d_model // h
        out = torch.zeros(batch, h, n, d_k, dtype=dtype or torch.float32)
        for i in range(h):
            out[:, i] = x[:, :, i * d_k : (i + 1) * d_k]
        return out

    return split


def _merge_filled(dtype=None):
    """A right merge, head by head, into a tensor created with zeros: float32 unless given the input's dtype."""

    def merge(x):
        batch, heads, n, d_k = x.shape
        out = torch.zeros(batch, n, heads * d_k, dtype=dtype or torch.float32)
        for i in range(heads):
            out[:, :, i * d_k : (i + 1) * d_k] = x[:, i]
        return out

    return merge


SPLIT_MORE_WRONG["filled_in_float32"] = (_split_filled(), ["returns float32 for a float64 input", "dtype=x.dtype"])


@pytest.mark.parametrize("name", SPLIT_MORE_WRONG)
def test_split_likeliest_wrong_answers_named(name):
    fn, phrases = SPLIT_MORE_WRONG[name]
    assert_caught(check_split_heads, fn, *phrases)


SPLIT_RIGHT = {
    "split_and_stack": lambda x, h: torch.stack(x.split(x.shape[-1] // h, -1), 1),
    "unflatten_2": lambda x, h: x.unflatten(2, (h, -1)).transpose(1, 2),
    "permute": lambda x, h: x.view(x.shape[0], -1, h, x.shape[-1] // h).permute(0, 2, 1, 3),
    "swapaxes": lambda x, h: x.reshape(*x.shape[:2], h, -1).swapaxes(1, 2),
    "einsum": lambda x, h: torch.einsum("bnhk->bhnk", x.unflatten(-1, (h, -1))),
}


SPLIT_RIGHT["filled_with_the_input_dtype"] = _split_filled(torch.float64)


@pytest.mark.parametrize("name", SPLIT_RIGHT)
def test_split_other_right_answers_pass(name):
    assert check_split_heads(SPLIT_RIGHT[name]) is True


MERGE_MORE_WRONG = {
    "view_after_transpose": (lambda x: x.transpose(1, 2).view(x.shape[0], x.shape[2], -1), ["no longer contiguous", ".reshape("]),
    "transpose_2_3": (lambda x: x.transpose(2, 3).reshape(x.shape[0], x.shape[2], -1), ["transpose(2, 3) swaps the tokens"]),
    "hard_coded_d_model": (lambda x: x.transpose(1, 2).reshape(x.shape[0], x.shape[2], 768), ["instead of hard-coding"]),
    "flatten_heads_and_tokens": (lambda x: x.flatten(1, 2), ["along the tokens axis"]),
    "tuple_of_heads": (lambda x: x.unbind(1), ["got tuple of 3 tensors", "torch.cat"]),
    "stacked_last": (lambda x: torch.stack(list(x.unbind(1)), -1).reshape(x.shape[0], x.shape[2], -1), ["interleaved"]),
}


MERGE_MORE_WRONG["filled_in_float32"] = (_merge_filled(), ["returns float32 for a float64 input", "dtype=x.dtype"])


@pytest.mark.parametrize("name", MERGE_MORE_WRONG)
def test_merge_likeliest_wrong_answers_named(name):
    fn, phrases = MERGE_MORE_WRONG[name]
    assert_caught(check_merge_heads, fn, *phrases)


MERGE_RIGHT = {
    "flatten": lambda x: x.transpose(1, 2).flatten(2),
    "contiguous_view": lambda x: x.transpose(1, 2).contiguous().view(x.shape[0], x.shape[2], -1),
    "permute": lambda x: x.permute(0, 2, 1, 3).reshape(x.shape[0], x.shape[2], -1),
    "einsum": lambda x: torch.einsum("bhnk->bnhk", x).reshape(x.shape[0], x.shape[2], -1),
}


MERGE_RIGHT["filled_with_the_input_dtype"] = _merge_filled(torch.float64)


@pytest.mark.parametrize("name", MERGE_RIGHT)
def test_merge_other_right_answers_pass(name):
    assert check_merge_heads(MERGE_RIGHT[name]) is True


# ------------------------------------------------------------------ issue 36: partial work is an attempt, not "not attempted"


def split_partial(x, num_heads):
    if num_heads == 4:
        raise NotImplementedError  # an unfinished branch; the rest is written
    return helpers.attention.split_heads(x, num_heads)


def merge_partial(x):
    if x.shape[1] > 3:
        raise NotImplementedError
    return helpers.attention.merge_heads(x)


@pytest.mark.parametrize("check, answer", [(check_split_heads, split_partial), (check_merge_heads, merge_partial)])
def test_an_unfinished_branch_is_named_not_called_unattempted(check, answer):
    assert_caught(check, answer, "unfinished branch")


def test_what_the_check_says_names_the_mistake_and_records_nothing():
    from helpers.checks import outcomes, what_the_check_says

    before = outcomes()
    wrong = what_the_check_says(check_split_heads, lambda x, h: x.reshape(x.shape[0], h, x.shape[1], -1))
    assert "view-versus-transpose trap" in wrong, wrong
    assert what_the_check_says(check_split_heads, helpers.attention.split_heads) == "split the heads: correct."
    assert outcomes() == before


# ------------------------------------------------------------------ catalogue of 2026-11-27: more slips, more right answers


def split_transpose_1_3(x, num_heads):
    b, n, d = x.shape
    return x.view(b, n, num_heads, d // num_heads).transpose(1, 3)


def split_work_above_the_stub(x, num_heads):
    b, n, d = x.shape  # noqa: F841 - real work above the stub's raise
    raise NotImplementedError("Exercise: replace this line with your code")


def merge_work_above_the_stub(x):
    b, h, n, d_k = x.shape  # noqa: F841
    raise NotImplementedError("Exercise: replace this line with your code")


def merge_view_without_contiguous(x):
    b, h, n, d_k = x.shape
    return x.transpose(1, 2).view(b, n, h * d_k)


@pytest.mark.parametrize(
    "check, answer, phrase",
    [
        (check_split_heads, split_transpose_1_3, "transpose(1, 3) swaps the tokens with the features"),
        (check_split_heads, split_work_above_the_stub, "partial work"),
        (check_merge_heads, merge_work_above_the_stub, "partial work"),
        (check_merge_heads, merge_view_without_contiguous, "reshape"),
    ],
)
def test_more_wrong_answers_named(check, answer, phrase):
    assert_caught(check, answer, phrase)


@pytest.mark.parametrize(
    "check, answer",
    [
        (
            check_split_heads,
            lambda x, h: torch.stack([x[..., i * (x.shape[-1] // h) : (i + 1) * (x.shape[-1] // h)] for i in range(h)], 1),
        ),
        (check_split_heads, lambda x, h: x.reshape(*x.shape[:2], h, -1).permute(0, 2, 1, 3).contiguous()),
        (check_merge_heads, lambda x: torch.cat(x.unbind(1), dim=-1)),
        (check_merge_heads, lambda x: x.transpose(1, 2).flatten(2)),
        (check_merge_heads, lambda x: x.transpose(1, 2).contiguous().view(x.shape[0], x.shape[2], -1)),
    ],
)
def test_more_right_answers_pass(check, answer):
    assert check(answer) is True
