"""The checks of notebook 13 (induction heads): right answers pass, the stub is not attempted, mistakes are named."""

from __future__ import annotations

import math

import pytest
import torch

from helpers.checks import check_ablate_head, check_induction_score, check_prev_token_score, check_qk_circuit
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


def prev_accumulated(pattern):  # a float32 accumulator (torch.zeros without dtype): judged at float32's precision
    b, h, n, _ = pattern.shape
    score = torch.zeros(h, device=pattern.device)
    for i in range(1, n):
        score += pattern[:, :, i, i - 1].sum(0).float()
    return score / (b * (n - 1))


def prev_in_float64(pattern):  # float64 for float32 patterns: more precise, fine
    return prev_solution(pattern.double())


def prev_einsum(pattern):
    n = pattern.shape[-1]
    sub = torch.eye(n, dtype=pattern.dtype, device=pattern.device).roll(-1, dims=1).tril()  # sub[i, i - 1] = 1
    return torch.einsum("bhij,ij->h", pattern, sub) / (pattern.shape[0] * (n - 1))


def prev_sum_divided(pattern):
    b, h, n, _ = pattern.shape
    below = pattern.new_ones(n, n).tril(-1).triu(-1)  # 1 on the sub-diagonal
    return (pattern * below).sum(dim=(0, 2, 3)) / (b * (n - 1))


def prev_bool_mask(pattern):  # a boolean mask built on the CPU is a valid index on any device
    n = pattern.shape[-1]
    below = torch.arange(n)[:, None] - torch.arange(n)[None, :] == 1  # (n, n)
    return pattern[:, :, below].mean(dim=(0, -1))


def prev_cpu_scalar(pattern):  # a 0-dim CPU tensor mixes with any device
    total = torch.tensor(0.0, dtype=pattern.dtype)
    return total + pattern.diagonal(offset=-1, dim1=-2, dim2=-1).mean(dim=(0, -1))


@pytest.mark.parametrize(
    "answer",
    [
        ref.prev_token_score,
        prev_solution,
        prev_loop,
        prev_indexing,
        prev_accumulated,
        prev_in_float64,
        prev_einsum,
        prev_sum_divided,
        prev_bool_mask,
        prev_cpu_scalar,
    ],
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
    "numpy": (lambda p: prev_solution(p).numpy(), ["torch.Tensor", "ndarray"]),
    "crash": (lambda p: p[:, :, 1:, :-1].diagonal(dim1=2, dim2=3).mean(0).mean(9), ["raised IndexError"]),
    "clamped index": (
        lambda p: p[:, :, torch.arange(p.shape[-1]), (torch.arange(p.shape[-1]) - 1).clamp(min=0)].mean(dim=(0, -1)),
        ["query 0", "clamp(min=0)", "1 .. n-1"],
    ),
    "mean over n x n": (
        lambda p: (p * torch.ones(p.shape[-1], p.shape[-1], dtype=p.dtype).tril(-1).triu(-1)).mean(dim=(0, 2, 3)),
        ["all n x n entries", "n - 1 entries"],
    ),
    "mean of everything": (lambda p: p.mean(dim=(0, 2, 3)), ["1/n for every head"]),
    "summed over batch and queries": (lambda p: _d(p, -1).sum(dim=(0, -1)), ["summed over the batch and the queries"]),
    "max": (lambda p: _d(p, -1).amax(dim=(0, -1)), ["largest", "max"]),
    "max over queries": (lambda p: _d(p, -1).mean(0).amax(-1), ["max over the queries"]),
    "max per sequence": (lambda p: _d(p, -1).amax(-1).mean(0), ["max over the queries of each sequence"]),
    "max over batch": (lambda p: _d(p, -1).amax(0).mean(-1), ["max over the batch"]),
    "argmax hits": (
        lambda p: (p[:, :, 1:].argmax(-1) == torch.arange(p.shape[-1] - 1)).float().mean(dim=(0, -1)),
        ["argmax", "attention weight itself"],
    ),
    "argmax head": (lambda p: _d(p, -1).mean(dim=(0, -1)).argmax(), ["index of the best head", "argmax"]),
    "float32 inside, float64 out": (lambda p: prev_solution(p.float()).to(p.dtype), ["precision problem", "float32"]),
    "accumulated on the CPU": (
        lambda p: sum((p[:, :, i, i - 1].mean(0) for i in range(1, p.shape[-1])), torch.zeros(p.shape[1])) / (p.shape[-1] - 1),
        ["on a GPU it fails", "torch.zeros(...)", "device=", "pattern.new_zeros"],
    ),
    "mask on the CPU": (
        lambda p: (
            (p * torch.ones(p.shape[-1], p.shape[-1], dtype=p.dtype).tril(-1).triu(-1)).sum(dim=(0, 2, 3))
            / (p.shape[0] * (p.shape[-1] - 1))
        ),
        ["on a GPU it fails", "torch.ones(...)", "`*`", "device=pattern.device"],
    ),
    "result built on the CPU": (
        lambda p: torch.tensor([p[:, h].diagonal(-1, -2, -1).mean().item() for h in range(p.shape[1])], dtype=p.dtype),
        ["returns a tensor made with torch.tensor(...)", "come back on the CPU"],
    ),
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


def ind_accumulated(pattern, period):  # a float32 accumulator (torch.zeros without dtype): judged at float32's precision
    b, h, n, _ = pattern.shape
    score = torch.zeros(h, device=pattern.device)
    for i in range(n - period, n):
        score += pattern[:, :, i, i - period + 1].mean(0).float() / period
    return score


def ind_in_float64(pattern, period):
    return ind_solution(pattern.double(), period)


def ind_gather(pattern, period):
    n = pattern.shape[-1]
    queries = torch.arange(n - period, n, device=pattern.device)
    rows = pattern[:, :, queries]  # (b, h, period, n)
    keys = (queries - period + 1).expand(*rows.shape[:2], -1)[..., None]  # (b, h, period, 1)
    return rows.gather(-1, keys)[..., 0].mean(dim=(0, -1))


@pytest.mark.parametrize(
    "answer", [ref.induction_score, ind_solution, ind_loop, ind_indexing, ind_accumulated, ind_in_float64, ind_gather]
)
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


def _ind_filled_on_cpu(pattern, period):  # right values, written into a CPU tensor: on a GPU the result is on the CPU
    out = torch.zeros(pattern.shape[1], dtype=pattern.dtype)
    for h in range(pattern.shape[1]):
        out[h] = ind_solution(pattern[:, h : h + 1], period)[0]
    return out


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
    "one query too many": (lambda p, t: _stripe(p, -t + 1, p.shape[-1] - t - 1), ["one query too many", "period + 1"]),
    "summed": (lambda p, t: _stripe(p, -t + 1, p.shape[-1] - t) * t, ["summed over the queries"]),
    "summed over batch and queries": (
        lambda p, t: _stripe(p, -t + 1, p.shape[-1] - t) * t * p.shape[0],
        ["summed over the batch and the queries"],
    ),
    "max": (
        lambda p, t: p[:, :, torch.arange(p.shape[-1] - t, p.shape[-1]), torch.arange(p.shape[-1] - t, p.shape[-1]) - t + 1].amax(
            dim=(0, -1)
        ),
        ["largest attention", "max"],
    ),
    "argmax hits": (
        lambda p, t: (p[:, :, -t:].argmax(-1) == torch.arange(p.shape[-1] - t, p.shape[-1]) - t + 1).float().mean(dim=(0, -1)),
        ["argmax"],
    ),
    "float32 inside, float64 out": (lambda p, t: ind_solution(p.float(), t).to(p.dtype), ["precision problem"]),
    "accumulated on the CPU": (
        lambda p, t: (
            sum((p[:, :, i, i - t + 1].mean(0) for i in range(p.shape[-1] - t, p.shape[-1])), torch.zeros(p.shape[1])) / t
        ),
        ["on a GPU it fails", "torch.zeros(...)", "`+`", "device=pattern.device"],
    ),
    "gather index on the CPU": (
        lambda p, t: (
            p[:, :, -t:]
            .gather(-1, (torch.arange(p.shape[-1] - t, p.shape[-1]) - t + 1).expand(*p.shape[:2], -1)[..., None])[..., 0]
            .mean(dim=(0, -1))
        ),
        ["on a GPU it fails", "torch.arange(...)", "`gather`"],
    ),
    "filled on the CPU": (_ind_filled_on_cpu, ["come back on the CPU", "torch.zeros(...)"]),
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
    is_head = (torch.arange(z.shape[1], device=z.device) == head)[None, :, None, None]
    replacement = torch.zeros_like(z) if how == "zero" else z.mean(0, keepdim=True).expand_as(z)
    return torch.where(is_head, replacement, z)


def ablate_mask(z, head, how="zero"):
    keep = torch.ones(z.shape[1], dtype=z.dtype, device=z.device)
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


def ablate_index_put(z, head, how="zero"):
    out = z.clone()
    value = torch.zeros_like(z[:, head]) if how == "zero" else z[:, head].mean(0).expand_as(z[:, head])
    out[:, head] = value
    return out


def ablate_stack(z, head, how="zero"):
    heads = []
    for h in range(z.shape[1]):
        if h != head:
            heads.append(z[:, h])
        elif how == "zero":
            heads.append(z[:, h] * 0)
        else:
            heads.append(z[:, h].mean(0, keepdim=True).repeat(z.shape[0], 1, 1))
    return torch.stack(heads, dim=1)


@pytest.mark.parametrize(
    "answer", [ref.ablate_head, ablate_solution, ablate_where, ablate_mask, ablate_cat, ablate_index_put, ablate_stack]
)
def test_ablate_right_answers(answer):
    assert check_ablate_head(answer) is True


def test_ablate_not_attempted(capsys):
    assert_not_attempted(check_ablate_head, stub, capsys)
    assert_not_attempted(check_ablate_head, ..., capsys)


def _with(z, head, value):
    out = z.clone()
    out[:, head] = value
    return out


def _batch_axis(z, head, how):
    out = z.clone()
    out[head] = 0.0 if how == "zero" else z.mean(0)
    return out


def _keep_only(z, head, how):
    out = torch.zeros_like(z) if how == "zero" else z.mean(0, keepdim=True).expand_as(z).clone()
    out[:, head] = z[:, head]
    return out


def _mean_unfinished(z, head, how="zero"):  # partial work: the zero branch done, the mean branch still to do
    out = z.clone()
    if how == "zero":
        out[:, head] = 0.0
    else:
        raise NotImplementedError
    return out


def _zero_unfinished(z, head, how="zero"):
    if how == "mean":
        out = z.clone()
        out[:, head] = z[:, head].mean(0, keepdim=True)
        return out
    raise NotImplementedError


def _ablate_where_on_cpu(z, head, how="zero"):  # torch.where with a condition built on the CPU: refused on a GPU
    is_head = (torch.arange(z.shape[1]) == head)[None, :, None, None]
    replacement = torch.zeros_like(z) if how == "zero" else z.mean(0, keepdim=True).expand_as(z)
    return torch.where(is_head, replacement, z)


def _ablate_rebuilt_on_cpu(z, head, how="zero"):  # a new tensor made with torch.zeros(z.shape): on the CPU
    out = torch.zeros(z.shape, dtype=z.dtype)
    out[:] = z
    out[:, head] = 0.0 if how == "zero" else z[:, head].mean(0, keepdim=True)
    return out


ABLATE_WRONG = {
    "where on the CPU": (_ablate_where_on_cpu, ["on a GPU it fails", "torch.arange(...)", "device=z.device"]),
    "rebuilt on the CPU": (_ablate_rebuilt_on_cpu, ["come back on the CPU", "z.new_zeros"]),
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
    "float32 inside, float64 out": (lambda z, h, how: ablate_solution(z.float(), h, how).to(z.dtype), ["precision problem"]),
    "last axis": (lambda z, h, how: ablate_solution(z.movedim(-1, 1), h, how).movedim(1, -1), ["feature", "last axis"]),
    "batch axis": (lambda z, h, how: _batch_axis(z, h, how), ["sequence", "axis 0", "z[:, head]"]),
    "keeps only the head": (lambda z, h, how: _keep_only(z, h, how), ["kept only head"]),
    "1-based head": (lambda z, h, how: ablate_solution(z, (h - 1) % z.shape[1], how), ["counts from 0", "- 1"]),
    "subtracts the mean": (
        lambda z, h, how: ablate_solution(z, h) if how == "zero" else _with(z, h, z[:, h] - z[:, h].mean(0, keepdim=True)),
        ["subtracted", "replaces"],
    ),
    "mean branch unfinished": (_mean_unfinished, ["how='zero'", "how='mean'", "finish that branch", "mean over the batch"]),
    "zero branch unfinished": (_zero_unfinished, ["how='mean'", "still raises NotImplementedError for how='zero'"]),
    "detached_wrong_sign": (lambda z, h, how: -ablate_solution(z, h, how), ["differs from the reference"]),
}


@pytest.mark.parametrize("name", list(ABLATE_WRONG))
def test_ablate_wrong_answers(name):
    answer, phrases = ABLATE_WRONG[name]
    assert_caught(check_ablate_head, answer, *phrases)


# ---------------------------------------------------------------- the composed QK circuit


def qk_solution(embed, w_q, w_k, w_v, w_o):  # the notebook's solution
    queries = embed @ w_q.T  # (V, d_k)
    keys = embed @ w_v.T @ w_o.T @ w_k.T  # (V, d_k)
    return queries @ keys.T / math.sqrt(w_q.shape[0])


def qk_bilinear(embed, w_q, w_k, w_v, w_o):  # W_QK first, then the product e_a^T W_QK W_OV e_b
    w_qk = w_q.T @ w_k  # (d, d)
    w_ov = w_o @ w_v  # (d, d)
    return embed @ w_qk @ w_ov @ embed.T / w_q.shape[0] ** 0.5


def qk_einsum(embed, w_q, w_k, w_v, w_o):
    keys = torch.einsum("kd,de,ef,vf->vk", w_k, w_o, w_v, embed)  # (V, d_k)
    return torch.einsum("qd,vd,wq->vw", w_q, embed, keys) / math.sqrt(w_q.shape[0])


def qk_loop(embed, w_q, w_k, w_v, w_o):
    vocab = embed.shape[0]
    out = torch.zeros(vocab, vocab, dtype=embed.dtype)
    for a in range(vocab):
        for b in range(vocab):
            out[a, b] = (w_q @ embed[a]) @ (w_k @ (w_o @ (w_v @ embed[b])))
    return out / math.sqrt(w_q.shape[0])


@pytest.mark.parametrize("answer", [ref.qk_circuit, qk_solution, qk_bilinear, qk_einsum, qk_loop])
def test_qk_right_answers(answer):
    assert check_qk_circuit(answer) is True


def test_qk_not_attempted(capsys):
    assert_not_attempted(check_qk_circuit, stub, capsys)
    assert_not_attempted(check_qk_circuit, ..., capsys)


def _scores(queries, keys, scale):
    return queries @ keys.T / scale


QK_WRONG = {
    "no scale": (lambda e, q, k, v, o: (e @ q.T) @ (e @ v.T @ o.T @ k.T).T, ["sqrt(d_k)", "forgot"]),
    "divided by d_k": (lambda e, q, k, v, o: _scores(e @ q.T, e @ v.T @ o.T @ k.T, q.shape[0]), ["divided by d_k"]),
    "divided by sqrt(d_model)": (
        lambda e, q, k, v, o: _scores(e @ q.T, e @ v.T @ o.T @ k.T, math.sqrt(q.shape[1])),
        ["sqrt(d_model)"],
    ),
    "scale of the other head": (
        lambda e, q, k, v, o: _scores(e @ q.T, e @ v.T @ o.T @ k.T, math.sqrt(v.shape[0])),
        ["previous-token head's width"],
    ),
    "direct key": (lambda e, q, k, v, o: _scores(e @ q.T, e @ k.T, math.sqrt(q.shape[0])), ["directly", "w_v.T @ w_o.T"]),
    "OV transposed": (
        lambda e, q, k, v, o: _scores(e @ q.T, e @ o @ v @ k.T, math.sqrt(q.shape[0])),
        ["transposed", "embed @ w_v.T @ w_o.T"],
    ),
    "Q-composition too": (
        lambda e, q, k, v, o: _scores(e @ v.T @ o.T @ q.T, e @ v.T @ o.T @ k.T, math.sqrt(q.shape[0])),
        ["queries go through the previous-token head too"],
    ),
    "OV on the query side": (
        lambda e, q, k, v, o: _scores(e @ v.T @ o.T @ q.T, e @ k.T, math.sqrt(q.shape[0])),
        ["instead of the key"],
    ),
    "transposed result": (lambda e, q, k, v, o: qk_solution(e, q, k, v, o).T, ["rows and columns are swapped"]),
    "w_q and w_k swapped": (lambda e, q, k, v, o: _scores(e @ k.T, e @ v.T @ o.T @ q.T, math.sqrt(q.shape[0])), ["swapped"]),
    "softmax": (lambda e, q, k, v, o: qk_solution(e, q, k, v, o).softmax(-1), ["softmax of each row"]),
    "softmax over columns": (lambda e, q, k, v, o: qk_solution(e, q, k, v, o).softmax(0), ["softmax over each column"]),
    "w_o forgotten": (lambda e, q, k, v, o: _scores(e @ q.T, e @ v.T @ k.T, 1.0), ["Follow the shapes", "w_v.T @ w_o.T"]),
    "float32 inside": (
        lambda e, q, k, v, o: qk_solution(e.float(), q.float(), k.float(), v.float(), o.float()).to(e.dtype),
        ["precision problem"],
    ),
    "numpy": (lambda e, q, k, v, o: qk_solution(e, q, k, v, o).numpy(), ["torch.Tensor"]),
    "a float32 scale": (  # torch.tensor(d_k) is float32: its square root enters the float64 scores rounded
        lambda e, q, k, v, o: (e @ q.T) @ (e @ v.T @ o.T @ k.T).T / torch.tensor(float(q.shape[0])).sqrt(),
        ["precision problem"],
    ),
}


@pytest.mark.parametrize("name", list(QK_WRONG))
def test_qk_wrong_answers(name):
    answer, phrases = QK_WRONG[name]
    assert_caught(check_qk_circuit, answer, *phrases)
