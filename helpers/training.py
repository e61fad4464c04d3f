"""One training loop for every model of the course, and its evaluation.

``fit`` trains a classifier on in-memory tensors with AdamW (fused where
PyTorch has the kernel) and a warm-up then cosine learning-rate schedule,
optionally augmenting every training batch, shows a ``tqdm.auto`` progress
bar, and returns a ``History``: per-epoch loss and accuracy on the training
data and on a held-out validation split, and the wall time. Two opt-in guards
make a run that could collapse safe (notebook 07): ``clip_grad_norm`` caps the
gradient's norm before every step, and ``keep_best`` returns the weights of the
epoch with the lowest validation loss. ``choose_learning_rate`` picks a
learning rate from validation curves, refusing runs that blew up. The same seed
gives the same numbers on one thread and one machine (another CPU or a GPU
prints other low-order digits).

Model selection (learning rate, epochs, width) reads the validation numbers; the
test set is evaluated once per final model, with ``evaluate``.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from helpers.runtime.smoke import EPOCHS as SMOKE_EPOCHS
from helpers.runtime.smoke import capped

__all__ = [
    "History",
    "fit",
    "evaluate",
    "train_step",
    "warmup_cosine",
    "count_parameters",
    "adamw",
    "blew_up",
    "choose_learning_rate",
]


@dataclass
class History:
    """What ``fit`` measured: one entry per epoch, and the total training seconds."""

    train_loss: list[float] = field(default_factory=list)
    train_acc: list[float] = field(default_factory=list)
    val_loss: list[float] = field(default_factory=list)
    val_acc: list[float] = field(default_factory=list)
    seconds: float = 0.0
    #: with ``fit(..., clip_grad_norm=...)``: the largest gradient norm of each epoch, measured before clipping
    grad_norm: list[float] = field(default_factory=list)
    #: with ``fit(..., keep_best=True)``: the epoch (0-based) whose weights the model holds at the end
    best_epoch: int | None = None

    def __getitem__(self, key: str) -> list[float]:  # lets plots read a History like a dict
        return getattr(self, key)

    @property
    def final_val_acc(self) -> float:
        """Validation accuracy after the last epoch (a fraction in [0, 1])."""
        if not self.val_acc:
            raise ValueError("this run had no validation split (fit(..., x_val=None)): there is no validation accuracy")
        return self.val_acc[-1]


def count_parameters(model: nn.Module) -> int:
    """Number of trainable parameters."""
    return sum(p.numel() for p in model.parameters() if p.requires_grad)


def warmup_cosine(optimizer: torch.optim.Optimizer, warmup_steps: int, total_steps: int) -> torch.optim.lr_scheduler.LambdaLR:
    """Linear warm-up from 0 over ``warmup_steps``, then cosine decay to 0 at ``total_steps``."""

    def factor(step: int) -> float:
        if step < warmup_steps:
            return (step + 1) / warmup_steps
        progress = (step - warmup_steps) / max(1, total_steps - warmup_steps)
        return 0.5 * (1.0 + math.cos(math.pi * min(1.0, progress)))

    return torch.optim.lr_scheduler.LambdaLR(optimizer, factor)


def adamw(model: nn.Module, lr: float, weight_decay: float) -> torch.optim.AdamW:
    """``torch.optim.AdamW`` over the model's parameters, fused where PyTorch has the kernel (CPU and CUDA).

    The fused step updates every parameter in one call instead of one small call per tensor: for the course's
    small models a training step is about 5% faster on a CPU, with the same update up to rounding.
    """
    params = list(model.parameters())
    try:
        return torch.optim.AdamW(params, lr=lr, weight_decay=weight_decay, fused=True)
    except (RuntimeError, TypeError, ValueError):  # a device or dtype without the fused kernel
        return torch.optim.AdamW(params, lr=lr, weight_decay=weight_decay)


def train_step(model: nn.Module, optimizer: torch.optim.Optimizer, x: Tensor, y: Tensor) -> float:
    """One optimisation step on a batch: forward, cross-entropy, backward, step. Returns the loss."""
    model.train()
    optimizer.zero_grad()
    loss = F.cross_entropy(model(x), y)
    loss.backward()
    optimizer.step()
    return loss.item()


@torch.no_grad()
def evaluate(model: nn.Module, x: Tensor, y: Tensor, batch_size: int = 1000) -> tuple[float, float]:
    """Mean cross-entropy and accuracy (fraction) of ``model`` on ``(x, y)``."""
    model.eval()
    device = next(model.parameters()).device
    total_loss, correct = 0.0, 0
    for start in range(0, len(x), batch_size):
        xb, yb = x[start : start + batch_size].to(device), y[start : start + batch_size].to(device)
        logits = model(xb)
        total_loss += F.cross_entropy(logits, yb, reduction="sum").item()
        correct += (logits.argmax(-1) == yb).sum().item()
    return total_loss / len(x), correct / len(x)


def fit(
    model: nn.Module,
    x_train: Tensor,
    y_train: Tensor,
    x_val: Tensor | None,
    y_val: Tensor | None,
    epochs: int = 10,
    lr: float = 1e-3,
    batch_size: int = 128,
    weight_decay: float = 0.01,
    warmup_epochs: float = 1.0,
    seed: int = 0,
    progress: bool = True,
    step_fn=train_step,
    eval_train: bool | int = True,
    augment: Callable[[Tensor, torch.Generator], Tensor] | None = None,
    clip_grad_norm: float | None = None,
    keep_best: bool = False,
) -> History:
    """Train ``model`` with AdamW and warm-up + cosine decay; evaluate on ``(x_val, y_val)`` after every epoch.

    Pass a validation split here, never the test set: the per-epoch numbers are
    what model selection reads.

    Mini-batches are drawn by a generator seeded with ``seed``, so a run is
    reproducible. ``step_fn(model, optimizer, xb, yb) -> loss`` can replace
    the default ``train_step`` (a notebook exercise does). ``progress=False``
    hides the bar. The device is the model's: batches (on any device) are
    moved to it. ``augment(xb, generator) -> xb`` (notebook 07 passes
    ``helpers.data.random_transform``) transforms every training batch before
    its step, drawing from the seeded generator that orders the batches;
    evaluation never sees it.

    Savings for runs whose per-epoch numbers nobody reads:
    ``eval_train=False`` skips the evaluation on the training data (``train_*``
    stay empty), ``eval_train=n`` (an int) measures it on the first ``n``
    training examples only (an estimate of the training curve at a fraction of
    the cost), and ``x_val=y_val=None`` trains without validation, as the
    final run of a chosen configuration on training + validation data does
    (``val_*`` stay empty).

    Guards against a run that collapses, both off by default:
    ``clip_grad_norm=c`` rescales the gradient before every optimizer step so
    that its norm over all parameters is at most ``c``
    (``torch.nn.utils.clip_grad_norm_``, applied by a hook on the optimizer,
    so it works with any ``step_fn``), and records each epoch's largest norm
    before clipping in ``History.grad_norm``; ``keep_best=True`` (needs a
    validation split) gives the model back with the weights of the epoch
    whose validation loss was lowest, recorded in ``History.best_epoch``, so
    that a run that blew up late never reaches the test set with its
    blown-up weights.
    """
    if not isinstance(eval_train, bool) and (not isinstance(eval_train, int) or eval_train < 1):
        raise ValueError(f"eval_train must be True, False or a number of training examples >= 1, got {eval_train!r}")
    if (x_val is None) != (y_val is None):
        raise ValueError("pass both x_val and y_val, or neither (a final run on training + validation data)")
    if keep_best and x_val is None:
        raise ValueError("keep_best=True keeps the epoch with the lowest validation loss: pass x_val and y_val")
    if clip_grad_norm is not None and not (isinstance(clip_grad_norm, (int, float)) and clip_grad_norm > 0):
        raise ValueError(f"clip_grad_norm must be a positive number (the largest gradient norm) or None, got {clip_grad_norm!r}")
    device = next(model.parameters()).device
    optimizer = adamw(model, lr=lr, weight_decay=weight_decay)
    largest: list[Tensor] = []  # this epoch's largest gradient norm (clip_grad_norm), kept on the device until it ends
    if clip_grad_norm is not None:
        params = [p for p in model.parameters() if p.requires_grad]

        def clip(_optimizer, _args, _kwargs) -> None:
            norm = torch.nn.utils.clip_grad_norm_(params, clip_grad_norm).detach()
            largest[:] = [norm if not largest else torch.maximum(largest[0], norm)]

        optimizer.register_step_pre_hook(clip)
    best_loss, best_state = math.inf, None
    steps_per_epoch = math.ceil(len(x_train) / batch_size)
    scheduler = warmup_cosine(optimizer, int(warmup_epochs * steps_per_epoch), epochs * steps_per_epoch)
    generator = torch.Generator().manual_seed(seed)
    history = History()
    from tqdm.auto import tqdm

    start = time.perf_counter()
    bar = tqdm(range(capped(epochs, SMOKE_EPOCHS)), desc=type(model).__name__, disable=not progress, leave=False)
    for _ in bar:
        order = torch.randperm(len(x_train), generator=generator)
        for i in range(capped(steps_per_epoch, 1)):  # every batch (one in a smoke test: helpers.runtime.smoke)
            idx = order[i * batch_size : (i + 1) * batch_size]
            xb = x_train[idx].to(device)
            if augment is not None:
                xb = augment(xb, generator)
            step_fn(model, optimizer, xb, y_train[idx].to(device))
            scheduler.step()
        postfix = {}
        if eval_train:
            n_eval = capped(len(x_train) if eval_train is True else eval_train, batch_size)  # one batch in a smoke test
            train_loss, train_acc = evaluate(model, x_train[:n_eval], y_train[:n_eval])
            history.train_loss.append(train_loss)
            history.train_acc.append(train_acc)
            postfix["loss"] = f"{train_loss:.3f}"
        if x_val is not None:
            n_val = capped(len(x_val), batch_size)  # every validation example (one batch in a smoke test)
            val_loss, val_acc = evaluate(model, x_val[:n_val], y_val[:n_val])
            history.val_loss.append(val_loss)
            history.val_acc.append(val_acc)
            postfix["val_acc"] = f"{val_acc:.3f}"
            if keep_best and val_loss < best_loss:  # a NaN loss is never the best
                best_loss, history.best_epoch = val_loss, len(history.val_loss) - 1
                best_state = {k: v.detach().clone() for k, v in model.state_dict().items()}
        if clip_grad_norm is not None:
            history.grad_norm.append(largest[0].item() if largest else 0.0)
            largest.clear()
        bar.set_postfix(postfix)
    if best_state is not None:
        model.load_state_dict(best_state)
    history.seconds = time.perf_counter() - start
    return history


def blew_up(val_loss: list[float], factor: float = 1.5) -> bool:
    """Whether a validation curve blew up: a loss that is not finite, or a last loss ``factor`` times its lowest."""
    if not val_loss:
        raise ValueError("an empty validation curve: train with a validation split (fit(..., x_val, y_val))")
    if not all(math.isfinite(v) for v in val_loss):
        return True
    return val_loss[-1] > factor * min(val_loss)


def choose_learning_rate(runs: dict[float, History], factor: float = 1.5) -> float:
    """The learning rate whose run ends with the lowest validation loss, among the runs that did not blow up.

    ``runs`` maps each learning rate to the ``History`` of its run on the training part, validated on the
    validation split. A run blew up (``blew_up``) when a validation loss is not finite, or when its last one is
    more than ``factor`` times its lowest: it is refused, however low its loss was before. When every run blew
    up, ``ValueError`` says so (no learning rate of the grid is safe: try smaller ones).
    """
    if not runs:
        raise ValueError("no runs to choose from: give {learning rate: History}")
    healthy = {lr: run for lr, run in runs.items() if not blew_up(run.val_loss, factor)}
    if not healthy:
        raise ValueError(f"every run blew up ({', '.join(f'lr {lr:g}' for lr in runs)}): try smaller learning rates")
    return min(healthy, key=lambda lr: healthy[lr].val_loss[-1])
