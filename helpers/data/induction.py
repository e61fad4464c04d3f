"""Notebook 13: sequences of random tokens that repeat, the task on which induction heads form.

A sequence is a beginning-of-sequence token, then ``period`` tokens drawn uniformly at random from
``vocab_size`` ids, then the same ``period`` tokens again::

    [BOS, r_1, ..., r_T, r_1, ..., r_T]        length 1 + 2T, BOS = vocab_size (a model needs vocab_size + 1 ids)

The first copy cannot be predicted (a model's best loss there is ``ln(vocab_size)``); in the second copy every
token after the first is the token that followed the current one in the first copy, which a model can learn to
look up: the induction head's job. Training draws a new period for every batch (``train_batch``), so that no
fixed offset between a token and its earlier occurrence can be learned from positions alone.

Everything is generated from a seeded ``torch.Generator``: the same seed gives the same tokens on every machine.
"""

from __future__ import annotations

import torch
from torch import Tensor

__all__ = [
    "BOS_OFFSET",
    "bos_id",
    "repeated_tokens",
    "train_batch",
    "repeated_half_mask",
    "first_half_mask",
    "held_out_set",
    "VALIDATION_SEED",
    "TEST_SEED",
]

#: The BOS token's id is ``vocab_size + BOS_OFFSET`` (the id right after the random tokens' ids).
BOS_OFFSET = 0
#: Seeds of the held-out sets: training batches come from the training seed (0, 1, 2, ...), far below these.
VALIDATION_SEED = 10_000
TEST_SEED = 20_000


def bos_id(vocab_size: int) -> int:
    """The id of the beginning-of-sequence token: ``vocab_size`` (the random tokens use ``0 .. vocab_size - 1``)."""
    return vocab_size + BOS_OFFSET


def _check_sizes(batch: int, period: int, vocab_size: int) -> None:
    for name, value in (("batch", batch), ("period", period), ("vocab_size", vocab_size)):
        if not isinstance(value, int) or value < 1:
            raise ValueError(f"{name} must be a positive integer, got {value!r}")
    if period < 2:
        raise ValueError(f"period must be at least 2 (a repeat of one token has nothing to look up), got {period}")


def repeated_tokens(
    batch: int,
    period: int,
    vocab_size: int,
    generator: torch.Generator | None = None,
    bos: bool = True,
    distinct: bool = False,
) -> Tensor:
    """``batch`` sequences of ``period`` random ids, each followed by a copy of itself.

    Returns int64 ids ``(batch, 1 + 2 * period)`` starting with ``bos_id(vocab_size)``, or ``(batch, 2 * period)``
    without it (``bos=False``). The random ids are uniform over ``0 .. vocab_size - 1`` and may repeat within a copy.
    """
    _check_sizes(batch, period, vocab_size)
    if distinct:
        if period > vocab_size:
            raise ValueError(f"{period} distinct tokens cannot be drawn from {vocab_size} ids")
        first = torch.rand(batch, vocab_size, generator=generator).argsort(dim=-1)[:, :period]  # (batch, period)
    else:
        first = torch.randint(0, vocab_size, (batch, period), generator=generator)  # (batch, period)
    parts = [first, first]
    if bos:
        parts.insert(0, torch.full((batch, 1), bos_id(vocab_size), dtype=torch.long))
    return torch.cat(parts, dim=1)  # (batch, 1 + 2 * period)


def train_batch(
    batch: int, min_period: int, max_period: int, vocab_size: int, generator: torch.Generator, distinct: bool = False
) -> tuple[Tensor, int]:
    """One training batch with a period drawn uniformly from ``min_period .. max_period`` (both included).

    Returns ``(ids, period)``: ids ``(batch, 1 + 2 * period)``. The period changes from batch to batch, so the
    distance back to a token's earlier occurrence is not a constant that attention could learn from positions.
    """
    if not 2 <= min_period <= max_period:
        raise ValueError(f"need 2 <= min_period <= max_period, got {min_period} and {max_period}")
    period = int(torch.randint(min_period, max_period + 1, (1,), generator=generator))
    return repeated_tokens(batch, period, vocab_size, generator, distinct=distinct), period


def repeated_half_mask(n: int, period: int) -> Tensor:
    """Which next-token predictions of a sequence of length ``n`` ending in two copies of ``period`` tokens count as
    "the repeated half": a boolean ``(n - 1,)`` over the targets ``ids[:, 1:]``.

    Target ``t`` (the token at position ``t + 1``) counts when it lies in the second copy and is not its first token:
    the first token of the copy cannot be predicted (nothing says that the repeat starts there). So ``period - 1``
    targets count, those at positions ``n - period + 1 .. n - 1``.
    """
    if n < 2 * period:
        raise ValueError(f"a sequence of length {n} cannot hold two copies of {period} tokens")
    positions = torch.arange(1, n)  # (n - 1,): the position of each target
    return positions > n - period


def first_half_mask(n: int, period: int) -> Tensor:
    """The targets ``(n - 1,)`` that lie in the first copy (random, unpredictable), as a boolean mask."""
    if n < 2 * period:
        raise ValueError(f"a sequence of length {n} cannot hold two copies of {period} tokens")
    start = n - 2 * period  # position of the first copy's first token
    positions = torch.arange(1, n)  # (n - 1,): the position of each target
    return (positions >= start) & (positions < start + period)


def held_out_set(
    batch: int, period: int, vocab_size: int, seed: int = VALIDATION_SEED, bos: bool = True, distinct: bool = False
) -> Tensor:
    """A fixed set of sequences ``(batch, 1 + 2 * period)`` drawn from its own seed, never used for training:
    ``VALIDATION_SEED`` (the default) for the validation set, ``TEST_SEED`` for the test set."""
    return repeated_tokens(batch, period, vocab_size, torch.Generator().manual_seed(seed), bos=bos, distinct=distinct)
