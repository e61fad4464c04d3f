"""The checks of notebook 13 (induction heads): right answers pass, the stub is not attempted, mistakes are named."""

from __future__ import annotations

import pytest
import torch

from helpers.checks import check_ablate_head, check_induction_score, check_prev_token_score
from helpers.models import induction as ref
from tests.conftest import assert_caught, assert_not_attempted


def stub(*args):
    raise NotImplementedError("Exercise: replace this line with your code")


# ---------------------------------------------------------------- previous-token score


def prev_solution(pattern):  # the notebook's solution
    below = pattern.diagonal(offset=-1, dim1=-2, dim2=-1)  # (batch, heads, n - 1)
    return below.mean(dim=(0, -1))


def prev_loop(pattern):
    n = pattern.shape[-1]
    return torch.stack([pattern[:, :, i, i - 1] for i in range(1, n)], dim=-1).mean(dim=(0, 2))


def prev_indexing(pattern):
    n = pattern.shape[-1]
    i = torch.arange(1, n)
    return pattern[:, :, i, i - 1].mean(-1).mean(0)


def prev_float32(pattern):
    return prev_solution(pattern.float()).to(pattern.dtype)


def prev_sum_divided(pattern):
    b, h, n, _ = pattern.shape
    below = torch.ones(n, n, dtype=pattern.dtype).tril(-1).triu(-1)  # 1 on the sub-diagonal
    return (pattern * below).sum(dim=(0, 2, 3)) / (b * (n - 1))


@pytest.mark.parametrize(
    "answer", [ref.prev_token_score, prev_solution, prev_loop, prev_indexing, prev_float32, prev_sum_divided]
)
def test_prev_right_answers(answer):
    assert check_prev_token_score(answer) is True


def test_prev_not_attempted(capsys):
    assert_not_attempted(check_prev_token_score, stub, capsys)
    assert_not_attempted(check_prev_token_score, ..., capsys)


def _d(p, offset):
    return p.diagonal(offset=offset, dim1=-2, dim2=-1)


PREV_WRONG = {
    "diagonal": (lambda p: _d(p, 0).mean(dim=(0, -1)), ["diagonal", "itself", "offset=-1"]),
    "above": (lambda p: _d(p, 1).mean(dim=(0, -1)), ["above the diagonal", "swap"]),
    "transposed": (lambda p: _d(p.transpose(-1, -2), -1).mean(dim=(0, -1)), ["above the diagonal", "query and key axes"]),
    "two_back": (lambda p: _d(p, -2).mean(dim=(0, -1)), ["key i - 2"]),
    "divided_by_n": (lambda p: _d(p, -1).sum(-1).mean(0) / p.shape[-1], ["divided by n", "query 0"]),
    "summed": (lambda p: _d(p, -1).sum(-1).mean(0), ["summed over the queries"]),
    "all_earlier": (
        lambda p: (
            (p * torch.ones(p.shape[-1], p.shape[-1], dtype=p.dtype).tril(-1)).sum(dim=(0, 2, 3))
            / (p.shape[0] * p.shape[-1] * (p.shape[-1] - 1) / 2)
        ),
        ["all earlier keys"],
    ),
    "no_batch_mean": (lambda p: _d(p, -1).mean(-1), ["average over the batch too"]),
    "mean_over_heads": (lambda p: _d(p, -1).mean(), ["single number"]),
    "per_sequence": (lambda p: _d(p, -1).mean(dim=(1, 2)), ["one number per sequence"]),
    "no_query_mean": (lambda p: _d(p, -1).mean(0), ["average over the queries"]),
    "keepdim": (
        lambda p: _d(p, -1).mean(dim=(0, -1), keepdim=True)[..., 0].transpose(0, 1).reshape(1, -1),
        ["keep no batch axis"],
    ),
    "double": (lambda p: prev_solution(p).double(), ["keep the pattern's dtype"]),
    "numpy": (lambda p: prev_solution(p).numpy(), ["torch.Tensor", "ndarray"]),
    "crash": (lambda p: p[:, :, 1:, :-1].diagonal(dim1=2, dim2=3).mean(0).mean(9), ["raised IndexError"]),
}


@pytest.mark.parametrize("name", list(PREV_WRONG))
def test_prev_wrong_answers(name):
    answer, phrases = PREV_WRONG[name]
    assert_caught(check_prev_token_score, answer, *phrases)


def test_prev_perfect_head_must_score_one():
    def off_for_perfect(p):  # right on random patterns, wrong only for the one-hot head (a degenerate hack)
        out = prev_solution(p)
        return out * 0.5 if p.shape == (1, 1, 5, 5) else out

    assert_caught(check_prev_token_score, off_for_perfect, "scores 0.5, expected 1")


# ---------------------------------------------------------------- induction score


def ind_solution(pattern, period):  # the notebook's solution
    stripe = pattern.diagonal(offset=-(period - 1), dim1=-2, dim2=-1)  # (batch, heads, n - period + 1)
    return stripe[..., -period:].mean(dim=(0, -1))


def ind_loop(pattern, period):
    n = pattern.shape[-1]
    return torch.stack([pattern[:, :, i, i - period + 1] for i in range(n - period, n)], dim=-1).mean(dim=(0, 2))


def ind_indexing(pattern, period):
    n = pattern.shape[-1]
    queries = torch.arange(n - period, n)
    return pattern[:, :, queries, queries - period + 1].mean(dim=(0, 2))


def ind_float32(pattern, period):
    return ind_solution(pattern.float(), period).to(pattern.dtype)


@pytest.mark.parametrize("answer", [ref.induction_score, ind_solution, ind_loop, ind_indexing, ind_float32])
def test_induction_right_answers(answer):
    assert check_induction_score(answer) is True


def test_induction_not_attempted(capsys):
    assert_not_attempted(check_induction_score, stub, capsys)
    assert_not_attempted(check_induction_score, ..., capsys)


def _stripe(p, offset, start, stop=None):
    n = p.shape[-1]
    stop = n if stop is None else stop
    queries = torch.arange(max(start, -offset), stop)
    return p[:, :, queries, queries + offset].mean(dim=(0, 2))


IND_WRONG = {
    "earlier_occurrence": (
        lambda p, t: _stripe(p, -t, p.shape[-1] - t),
        ["earlier occurrence of the current token itself", "AFTER", "i - period + 1"],
    ),
    "off_by_one_after": (lambda p, t: _stripe(p, -t + 2, p.shape[-1] - t), ["off by one", "i - period + 2"]),
    "off_by_one_before": (lambda p, t: _stripe(p, -t - 1, p.shape[-1] - t), ["off by one", "i - period - 1"]),
    "whole_stripe": (lambda p, t: _stripe(p, -t + 1, 0), ["first copy too", "last `period` queries"]),
    "from_the_start": (lambda p, t: _stripe(p, -t + 1, 1), ["first copy"]),
    "queries_early": (lambda p, t: _stripe(p, -t + 1, p.shape[-1] - t - 1, p.shape[-1] - 1), ["one position too early"]),
    "queries_late": (lambda p, t: _stripe(p, -t + 1, p.shape[-1] - t + 1), ["one position too late"]),
    "diagonal": (lambda p, t: _stripe(p, 0, p.shape[-1] - t), ["diagonal", "itself"]),
    "swapped_axes": (lambda p, t: _stripe(p.transpose(-1, -2), -t + 1, p.shape[-1] - t), ["above the diagonal", "swap"]),
    "previous_token": (lambda p, t: _stripe(p, -1, p.shape[-1] - t), ["previous-token score"]),
    "no_batch_mean": (lambda p, t: ind_solution(p, t).expand(p.shape[0], -1), ["average over the batch too"]),
    "single_number": (lambda p, t: ind_solution(p, t).mean(), ["single number"]),
    "bos_hard_coded": (  # counts the second copy from the start, assuming exactly one BOS token
        lambda p, t: _stripe(p, -t + 1, 1 + t, 1 + 2 * t),
        ["one BOS token precedes", "count the second copy from the end"],
    ),
    "half_from_n": (  # the period taken as (n - 1) // 2
        lambda p, t: ind_solution(p, (p.shape[-1] - 1) // 2),
        ["one BOS token precedes"],
    ),
    "double": (lambda p, t: ind_solution(p, t).double(), ["keep the pattern's dtype"]),
    "list": (lambda p, t: ind_solution(p, t).tolist(), ["torch.Tensor", "list"]),
    "none": (lambda p, t: None, ["torch.Tensor", "NoneType"]),
}


@pytest.mark.parametrize("name", list(IND_WRONG))
def test_induction_wrong_answers(name):
    answer, phrases = IND_WRONG[name]
    assert_caught(check_induction_score, answer, *phrases)


# ---------------------------------------------------------------- ablation


def ablate_solution(z, head, how="zero"):  # the notebook's solution
    out = z.clone()
    if how == "zero":
        out[:, head] = 0.0
    else:
        out[:, head] = z[:, head].mean(dim=0, keepdim=True)
    return out


def ablate_where(z, head, how="zero"):
    is_head = (torch.arange(z.shape[1]) == head)[None, :, None, None]
    replacement = torch.zeros_like(z) if how == "zero" else z.mean(0, keepdim=True).expand_as(z)
    return torch.where(is_head, replacement, z)


def ablate_mask(z, head, how="zero"):
    keep = torch.ones(z.shape[1], dtype=z.dtype)
    keep[head] = 0
    keep = keep[None, :, None, None]
    out = z * keep
    if how == "mean":
        out = out + (1 - keep) * z.mean(0, keepdim=True)
    return out


def ablate_cat(z, head, how="zero"):
    own = z[:, head : head + 1]
    new = torch.zeros_like(own) if how == "zero" else own.mean(0, keepdim=True).expand_as(own)
    return torch.cat([z[:, :head], new, z[:, head + 1 :]], dim=1)


def ablate_float32(z, head, how="zero"):
    return ablate_solution(z.float(), head, how).to(z.dtype)


@pytest.mark.parametrize("answer", [ref.ablate_head, ablate_solution, ablate_where, ablate_mask, ablate_cat, ablate_float32])
def test_ablate_right_answers(answer):
    assert check_ablate_head(answer) is True


def test_ablate_not_attempted(capsys):
    assert_not_attempted(check_ablate_head, stub, capsys)
    assert_not_attempted(check_ablate_head, ..., capsys)


def _with(z, head, value):
    out = z.clone()
    out[:, head] = value
    return out


ABLATE_WRONG = {
    "next_head": (lambda z, h, how: ablate_solution(z, h + 1 if h + 1 < z.shape[1] else h - 1, how), ["instead of head"]),
    "previous_head": (lambda z, h, how: ablate_solution(z, h - 1 if h > 0 else h + 1, how), ["instead of head"]),
    "position_axis": (
        lambda z, h, how: ablate_solution(z.transpose(1, 2), h, how).transpose(1, 2),
        ["position", "axis 2", "axis 1"],
    ),
    "every_head_zero": (lambda z, h, how: torch.zeros_like(z), ["every head"]),
    "ignores_how_zero": (lambda z, h, how: ablate_solution(z, h, "zero"), ["how='mean'"]),
    "ignores_how_mean": (lambda z, h, how: ablate_solution(z, h, "mean"), ["how='zero'"]),
    "mean_over_positions": (
        lambda z, h, how: ablate_solution(z, h) if how == "zero" else _with(z, h, z[:, h].mean(1, keepdim=True)),
        ["over the positions"],
    ),
    "mean_over_batch_and_positions": (
        lambda z, h, how: ablate_solution(z, h) if how == "zero" else _with(z, h, z[:, h].mean((0, 1), keepdim=True)),
        ["batch and the positions together"],
    ),
    "mean_over_heads": (
        lambda z, h, how: ablate_solution(z, h) if how == "zero" else _with(z, h, z.mean(1)),
        ["over the heads"],
    ),
    "mean_over_features": (
        lambda z, h, how: ablate_solution(z, h) if how == "zero" else _with(z, h, z[:, h].mean(-1, keepdim=True)),
        ["features"],
    ),
    "every_head_mean": (
        lambda z, h, how: ablate_solution(z, h) if how == "zero" else z.mean(0, keepdim=True).expand_as(z),
        ["every head by its mean"],
    ),
    "in_place": (lambda z, h, how: z.index_fill_(1, torch.tensor([h]), 0.0), ["in place"]),
    "one_head_only": (lambda z, h, how: torch.zeros_like(z[:, h]), ["one head's results"]),
    "dtype": (lambda z, h, how: ablate_solution(z, h, how).double(), ["keep z's dtype"]),
    "detached_wrong_sign": (lambda z, h, how: -ablate_solution(z, h, how), ["differs from the reference"]),
}


@pytest.mark.parametrize("name", list(ABLATE_WRONG))
def test_ablate_wrong_answers(name):
    answer, phrases = ABLATE_WRONG[name]
    assert_caught(check_ablate_head, answer, *phrases)
