"""The repeated random token sequences of notebook 13 (helpers.data.induction)."""

from __future__ import annotations

import pytest
import torch

from helpers.data.induction import (
    VALIDATION_SEED,
    bos_id,
    first_half_mask,
    held_out_set,
    repeated_half_mask,
    repeated_tokens,
    train_batch,
)


def test_layout_bos_then_two_copies():
    ids = repeated_tokens(3, 5, 10, torch.Generator().manual_seed(0))
    assert ids.shape == (3, 11) and ids.dtype == torch.long
    assert (ids[:, 0] == bos_id(10)).all() and bos_id(10) == 10
    assert torch.equal(ids[:, 1:6], ids[:, 6:])
    assert ids[:, 1:].min() >= 0 and ids[:, 1:].max() < 10


def test_without_bos():
    ids = repeated_tokens(2, 4, 7, torch.Generator().manual_seed(1), bos=False)
    assert ids.shape == (2, 8)
    assert torch.equal(ids[:, :4], ids[:, 4:])
    assert ids.max() < 7


def test_distinct_tokens_never_repeat_within_a_copy():
    ids = repeated_tokens(50, 12, 16, torch.Generator().manual_seed(2), distinct=True)
    first = ids[:, 1:13]
    assert all(len(set(row.tolist())) == 12 for row in first)
    with pytest.raises(ValueError, match="distinct"):
        repeated_tokens(1, 17, 16, distinct=True)


def test_seeded_and_reproducible():
    a = held_out_set(4, 6, 20)
    b = held_out_set(4, 6, 20, seed=VALIDATION_SEED)
    c = held_out_set(4, 6, 20, seed=VALIDATION_SEED + 1)
    assert torch.equal(a, b) and not torch.equal(a, c)


def test_train_batch_draws_a_period_per_batch():
    generator = torch.Generator().manual_seed(0)
    periods = set()
    for _ in range(30):
        ids, period = train_batch(2, 3, 6, 9, generator)
        assert ids.shape == (2, 1 + 2 * period) and 3 <= period <= 6
        assert torch.equal(ids[:, 1 : 1 + period], ids[:, 1 + period :])
        periods.add(period)
    assert periods == {3, 4, 5, 6}
    with pytest.raises(ValueError):
        train_batch(2, 5, 4, 9, generator)


def test_masks_select_the_predictable_targets():
    # n = 9: BOS, first copy at positions 1..4, second copy at 5..8; the targets are positions 1..8
    assert repeated_half_mask(9, 4).tolist() == [False] * 5 + [True] * 3  # positions 6, 7, 8
    assert first_half_mask(9, 4).tolist() == [True] * 4 + [False] * 4  # positions 1..4
    # without BOS, n = 8: first copy 0..3 (position 0 is never a target), second 4..7
    assert repeated_half_mask(8, 4).tolist() == [False] * 4 + [True] * 3
    assert first_half_mask(8, 4).tolist() == [True] * 3 + [False] * 4
    with pytest.raises(ValueError, match="two copies"):
        repeated_half_mask(7, 4)


@pytest.mark.parametrize("bad", [dict(batch=0), dict(period=1), dict(vocab_size=-3), dict(period=2.5)])
def test_bad_sizes_are_refused(bad):
    args = dict(batch=2, period=4, vocab_size=8) | bad
    with pytest.raises(ValueError):
        repeated_tokens(**args)
