"""Judging hand-written transformers (notebook 14): every input of a domain, margins, robustness, a training run.

- ``all_sequences`` and ``distinct_sequences`` enumerate a program's whole domain (100,000 and 30,240 sequences);
- ``evaluate`` runs a model on a whole domain in a few batched passes and counts the exactly right sequences, with
  the worst-case margin of the right logit over the others; ``logit_error`` bounds what float32 rounding moves;
- ``selector_leak`` is the weight a selector with score gaps ``scale * d²`` leaves off its target (float64), and
  ``smallest_safe_scale`` the scale below which a counting selector's leak can fool the count table;
- ``perturbed``, ``scale_sweep`` and ``noise_sweep`` measure how accuracy falls as the scale shrinks or the weights
  get noisy; ``fine_tune`` trains a model from its hand-written weights (``helpers.runtime.smoke.capped`` steps).
"""

from __future__ import annotations

import copy
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from helpers.handwritten.program import LENGTH, SHARPNESS, VOCAB, table_thresholds
from helpers.runtime.smoke import capped

__all__ = [
    "all_sequences",
    "distinct_sequences",
    "DomainResult",
    "evaluate",
    "logit_error",
    "smallest_safe_scale",
    "selector_leak",
    "perturbed",
    "scale_sweep",
    "noise_sweep",
    "fine_tune",
]

Spec = Callable[[Tensor], Tensor]
BATCH = 25_000


def all_sequences(vocab: int = VOCAB, length: int = LENGTH) -> Tensor:
    """Every sequence of ``length`` tokens over ``vocab``, in lexicographic order: ``(vocab**length, length)`` int64."""
    index = torch.arange(vocab**length)  # (vocab**length,)
    return torch.stack([(index // vocab**k) % vocab for k in range(length - 1, -1, -1)], dim=1)


def distinct_sequences(vocab: int = VOCAB, length: int = LENGTH) -> Tensor:
    """The sequences of ``length`` distinct tokens: ``(vocab! / (vocab - length)!, length)``, 30,240 for 10 and 5."""
    every = all_sequences(vocab, length)
    distinct = (every[:, :, None] == every[:, None, :]).sum(dim=(1, 2)) == length  # only the diagonal matches
    return every[distinct]


@dataclass(frozen=True)
class DomainResult:
    """What ``evaluate`` found: exactly right sequences, right positions, the worst-case margin, the mean cross-entropy."""

    correct: int
    total: int
    positions_correct: int
    positions_total: int
    worst_margin: float
    loss: float
    rounding_error: float = math.nan

    @property
    def exact(self) -> bool:
        """Every sequence right."""
        return self.correct == self.total

    def __str__(self) -> str:
        return f"{self.correct} of {self.total} correct"


def _batches(tokens: Tensor, batch_size: int) -> list[Tensor]:
    return [tokens[start : start + batch_size] for start in range(0, len(tokens), batch_size)]


def evaluate(model: nn.Module, tokens: Tensor, spec: Spec, batch_size: int = BATCH, rounding: bool = False) -> DomainResult:
    """Run ``model`` on every row of ``tokens`` ``(N, LENGTH)`` and compare its argmax with ``spec(tokens)``.

    ``worst_margin`` is the smallest ``logit[right] - max(logit[other])`` over every sequence and position: positive
    exactly when every answer is right, and the room float rounding would need to flip one. ``loss`` is the mean
    cross-entropy over every position. With ``rounding``, ``rounding_error`` is ``logit_error``'s bound too, from the
    same pass (the model's logits against a float64 copy's).
    """
    correct = positions = 0
    worst, loss, error = math.inf, 0.0, 0.0
    model64 = copy.deepcopy(model).double() if rounding else None
    with torch.no_grad():
        for batch in _batches(tokens, batch_size):
            logits = model(batch)  # (b, LENGTH, n_out)
            if model64 is not None:
                error = max(error, float((logits.double() - model64(batch)).abs().max()))
            target = spec(batch)  # (b, LENGTH)
            right = logits.argmax(-1) == target  # (b, LENGTH)
            correct += int(right.all(-1).sum())
            positions += int(right.sum())
            chosen = logits.gather(-1, target[..., None])[..., 0]  # (b, LENGTH)
            others = logits.scatter(-1, target[..., None], -math.inf).amax(-1)  # (b, LENGTH)
            worst = min(worst, float((chosen - others).min()))
            loss += float(F.cross_entropy(logits.flatten(0, 1).double(), target.flatten(), reduction="sum"))
    return DomainResult(
        correct, len(tokens), positions, tokens.numel(), worst, loss / tokens.numel(), error if rounding else math.nan
    )


def logit_error(model: nn.Module, tokens: Tensor, batch_size: int = BATCH) -> float:
    """The largest ``|logit_float32 - logit_float64|`` over ``tokens``: what float32 rounding moves (same weights)."""
    model32 = copy.deepcopy(model).float()
    model64 = copy.deepcopy(model).double()
    largest = 0.0
    with torch.no_grad():
        for batch in _batches(tokens, batch_size):
            largest = max(largest, float((model32(batch).double() - model64(batch)).abs().max()))
    return largest


def smallest_safe_scale(counts: Sequence[int], sharpness: float = SHARPNESS, length: int = LENGTH) -> float:
    """The smallest scale at which a counting selector's ``frac`` stays on the flat part of the count table.

    A query whose count is c gives ``c + 1`` keys (BOS and the c selected) the score ``scale`` and ``length - c``
    keys the score 0, so ``frac = 1 / (c + 1 + (length - c) e^-scale)``, below the table's value ``1 / (c + 1)``.
    The table reads it right while it stays above the threshold under that value by at least the ramp's half-width
    ``1 / (2 sharpness)``. Returns the largest such bound over ``counts`` (float64 arithmetic).
    """
    thresholds = table_thresholds(length).tolist()
    bounds = [0.0]
    for c in counts:
        if c >= length:  # every key selected: nothing leaks
            continue
        room = 1 / (thresholds[c] + 1 / (2 * sharpness)) - (c + 1)  # how much the denominator may grow
        bounds.append(-math.log(room / (length - c)))
    return max(bounds)


def selector_leak(scale: float, n_keys: int = LENGTH + 1, targets: Sequence[int] | None = None) -> float:
    """The most weight a quadratic selector leaves off its target, computed in float64.

    Query with target t scores key j as ``-scale (j - t)²`` (up to a constant): the target leads each neighbour by
    ``scale``, keys two away by ``4 scale``. Returns ``max_t (1 - weight on t)`` over ``targets`` (default 1..LENGTH,
    the reverse selector's), with keys 0..n_keys-1.
    """
    keys = torch.arange(n_keys, dtype=torch.float64)
    targets = list(targets) if targets is not None else list(range(1, n_keys))
    leaks = [1 - torch.softmax(-scale * (keys - t) ** 2, dim=0)[t].item() for t in targets]
    return max(leaks)


def perturbed(model: nn.Module, sigma: float, generator: torch.Generator, relative: bool = True) -> nn.Module:
    """A copy of ``model`` with Gaussian noise on every weight.

    ``relative`` (default): ``w + sigma |w| eps``, each weight off by a relative error ``sigma`` (zeros stay zero);
    otherwise ``w + sigma eps`` on every weight, zeros included. ``eps`` ~ N(0, 1) from ``generator``.
    """
    noisy = copy.deepcopy(model)
    with torch.no_grad():
        for parameter in noisy.parameters():
            eps = torch.randn(parameter.shape, generator=generator, dtype=parameter.dtype)
            parameter.add_(sigma * (parameter.abs() if relative else 1.0) * eps)
    return noisy


def scale_sweep(build: Callable[[float], nn.Module], tokens: Tensor, spec: Spec, scales: Sequence[float]) -> list[float]:
    """The fraction of ``tokens``' sequences that ``build(scale)`` gets exactly right, for each scale."""
    return [evaluate(build(scale), tokens, spec).correct / len(tokens) for scale in scales]


def noise_sweep(
    model: nn.Module,
    tokens: Tensor,
    spec: Spec,
    sigmas: Sequence[float],
    seeds: Sequence[int] = (0, 1, 2),
    relative: bool = True,
) -> Tensor:
    """``(len(sigmas), len(seeds))``: the fraction of sequences right after ``perturbed(model, sigma, seed)``."""
    result = torch.zeros(len(sigmas), len(seeds), dtype=torch.float64)
    for i, sigma in enumerate(sigmas):
        for j, seed in enumerate(seeds):
            noisy = perturbed(model, sigma, torch.Generator().manual_seed(seed), relative)
            result[i, j] = evaluate(noisy, tokens, spec).correct / len(tokens)
    return result


def fine_tune(
    model: nn.Module,
    tokens: Tensor,
    spec: Spec,
    steps: int = 200,
    lr: float = 1e-3,
    batch_size: int = 128,
    seed: int = 0,
    eval_every: int = 25,
    optimizer: str = "adam",
    scored_on: Tensor | None = None,
) -> dict[str, list[float]]:
    """Train ``model`` in place on cross-entropy, batches drawn from ``tokens`` (its domain), with Adam
    (``optimizer="adam"``, PyTorch's defaults but ``lr``) or plain gradient descent (``"sgd"``: no momentum).

    Takes ``capped(steps, 4)`` steps (``helpers.runtime.smoke``). Returns the history: ``loss`` per step, and at step 0,
    every ``eval_every`` steps and at the end ``step``, ``correct`` (sequences exactly right) and ``domain_loss`` (the
    mean cross-entropy), both on ``scored_on`` (default: all of ``tokens``). ``seed`` draws the batches.
    """
    if optimizer not in ("adam", "sgd"):
        raise ValueError(f"optimizer must be 'adam' or 'sgd', got {optimizer!r}")
    steps = capped(steps, 4)
    generator = torch.Generator().manual_seed(seed)
    step_with = (torch.optim.Adam if optimizer == "adam" else torch.optim.SGD)(model.parameters(), lr=lr)
    history: dict[str, list[float]] = {"loss": [], "step": [], "correct": [], "domain_loss": []}

    def record(step: int) -> None:
        model.eval()
        result = evaluate(model, tokens if scored_on is None else scored_on, spec)
        history["step"].append(step)
        history["correct"].append(result.correct)
        history["domain_loss"].append(result.loss)

    record(0)
    for step in range(1, steps + 1):
        model.train()
        batch = tokens[torch.randint(len(tokens), (batch_size,), generator=generator)]  # (batch_size, LENGTH)
        loss = F.cross_entropy(model(batch).flatten(0, 1), spec(batch).flatten())
        step_with.zero_grad()
        loss.backward()
        step_with.step()
        history["loss"].append(loss.item())
        if step % eval_every == 0 or step == steps:
            record(step)
    model.eval()
    return history
