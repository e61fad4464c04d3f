"""Smoke runs: every cell of a notebook executed, every training run cut to a few steps.

The test suite runs each solution notebook in full twice, natively and under a second CPU set-up, comparing its
outputs and checking the claims its prose makes. A student notebook is the same notebook with the exercises
replaced by stubs, so what its own run must prove is that it executes top to bottom with every exercise
unfinished, on the reference implementations from ``helpers``. It needs no trained model for that, and training
is nearly all of the time it takes. So the suite starts the kernels of the student notebooks with
``COURSE_SMOKE_TEST=1`` (the root ``conftest.py``), and then:

- ``capped(n, smoke_n)`` is ``min(n, smoke_n)``: the training loops of ``helpers`` (``training.fit``,
  ``models.seq2seq.train_seq2seq``, ``models.lm.train_lm``) take one batch per epoch, or a few steps, run at
  most ``EPOCHS`` epochs and evaluate on one batch of each split, but keep their evaluations, histories and
  callbacks, so every cell downstream runs on a model of the right kind;
- a claim (``helpers.runtime.claims``) that does not hold says that it was not checked instead of raising: the numbers
  of a smoke run support no claim;
- ``helpers.setup()`` says that the run is a smoke test.

Outside the suite the variable is unset and nothing changes. ``COURSE_SMOKE_TEST=0`` runs the student notebooks
in full in the suite too.
"""

from __future__ import annotations

import os

__all__ = ["ENV", "EPOCHS", "active", "capped"]

#: The environment variable that turns smoke runs on ("1") or off (anything else, or unset).
ENV = "COURSE_SMOKE_TEST"

#: The most epochs a training loop runs in a smoke run: the notebooks read their histories back to the
#: fourth-last epoch (07 asks whether the validation loss still fell over the last three).
EPOCHS = 4


def active() -> bool:
    """Whether this process is a smoke run (``COURSE_SMOKE_TEST=1``)."""
    return os.environ.get(ENV, "") == "1"


def capped(n: int, smoke_n: int) -> int:
    """``n`` (a number of steps or batches), or at most ``smoke_n`` of them in a smoke run."""
    return min(n, smoke_n) if active() else n
