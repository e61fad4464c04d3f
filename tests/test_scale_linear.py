"""helpers.scale.linear_attention: the parallel, recurrent and chunked forms of causal linear attention agree."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from helpers.scale.linear_attention import (
    elu_feature_map,
    linear_attention_chunked,
    linear_attention_matrix,
    linear_attention_parallel,
    linear_attention_recurrent,
)


def test_feature_map_is_positive_and_elu_plus_one():
    x = torch.linspace(-30, 30, 101, dtype=torch.float64)
    assert (elu_feature_map(x) > 0).all()
    torch.testing.assert_close(elu_feature_map(x), F.elu(x) + 1)


def _direct(q, k, v):
    """The definition, one query at a time: sum_j<=i phi(q_i).phi(k_j) v_j / sum_j<=i phi(q_i).phi(k_j)."""
    fq, fk = elu_feature_map(q), elu_feature_map(k)
    rows = []
    for i in range(q.shape[-2]):
        w = (fq[..., i : i + 1, :] * fk[..., : i + 1, :]).sum(-1)  # (..., i + 1)
        rows.append((w[..., None] * v[..., : i + 1, :]).sum(-2) / w.sum(-1, keepdim=True))
    return torch.stack(rows, -2)


@pytest.mark.parametrize("shape", [(9, 4), (2, 11, 3), (2, 3, 17, 5)])
def test_three_forms_equal_the_definition_float64(shape):
    q, k = torch.randn(*shape, dtype=torch.float64), torch.randn(*shape, dtype=torch.float64)
    v = torch.randn(*shape[:-1], 6, dtype=torch.float64)
    expected = _direct(q, k, v)
    for out in (
        linear_attention_parallel(q, k, v),
        linear_attention_recurrent(q, k, v),
        linear_attention_chunked(q, k, v, 4),
        linear_attention_chunked(q, k, v, 1),
        linear_attention_chunked(q, k, v, 100),
    ):
        assert out.shape == expected.shape
        torch.testing.assert_close(out, expected, atol=1e-12, rtol=0)


def test_the_issue_target_two_forms_agree_to_1e5_in_float32():
    q, k, v = (torch.randn(2, 3, 500, 32) for _ in range(3))
    parallel = linear_attention_parallel(q, k, v)
    assert (linear_attention_recurrent(q, k, v) - parallel).abs().max().item() < 1e-5
    assert (linear_attention_chunked(q, k, v, 64) - parallel).abs().max().item() < 1e-5


def test_weights_are_causal_and_rows_sum_to_one():
    q, k = torch.randn(7, 3, dtype=torch.float64), torch.randn(7, 3, dtype=torch.float64)
    w = linear_attention_matrix(q, k)
    torch.testing.assert_close(w.sum(-1), torch.ones(7, dtype=torch.float64))
    assert (w.triu(1) == 0).all() and (w.tril() > 0).sum() == 28


def test_chunk_below_one_is_refused():
    q = torch.randn(4, 2)
    with pytest.raises(ValueError, match="chunk"):
        linear_attention_chunked(q, q, q, 0)
