"""helpers.runtime.smoke: with COURSE_SMOKE_TEST=1 the training loops take a few steps in at most four epochs but keep their
evaluations and histories, a claim that does not hold says it was not checked, and setup() says so; without it, nothing
changes. The suite's conftest.py turns it on for the student notebooks' kernels only."""

from __future__ import annotations

import re

import pytest
import torch
from torch import nn

import helpers
from conftest import _STUDENT
from helpers.data.translation import encode_pairs
from helpers.models.lm import DecoderLM, train_lm
from helpers.models.seq2seq import Seq2SeqTransformer, train_seq2seq
from helpers.runtime import smoke
from helpers.runtime.claims import SMOKE, ClaimFailed, claim, claim_at_least
from helpers.training import fit, train_step


@pytest.fixture
def smoke_on(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(smoke.ENV, "1")


@pytest.fixture(autouse=True)
def smoke_unset(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(smoke.ENV, raising=False)


@pytest.mark.parametrize(("value", "active"), [(None, False), ("1", True), ("0", False), ("", False), ("yes", False)])
def test_active_only_for_1(monkeypatch: pytest.MonkeyPatch, value: str | None, active: bool):
    if value is not None:
        monkeypatch.setenv(smoke.ENV, value)
    assert smoke.active() is active
    assert smoke.capped(25, 1) == (1 if active else 25)
    assert smoke.capped(3, 5) == 3


def _count_steps(run_smoke: bool, monkeypatch: pytest.MonkeyPatch) -> tuple[int, int]:
    if run_smoke:
        monkeypatch.setenv(smoke.ENV, "1")
    g = torch.Generator().manual_seed(0)
    x, y = torch.randn(100, 4, generator=g), torch.randint(0, 3, (100,), generator=g)
    calls = []

    def counting_step(model, optimizer, xb, yb):
        calls.append(len(xb))
        return train_step(model, optimizer, xb, yb)

    torch.manual_seed(0)
    hist = fit(nn.Linear(4, 3), x, y, x[:20], y[:20], epochs=3, batch_size=32, progress=False, step_fn=counting_step)
    assert len(hist.val_acc) == len(hist.train_acc) == 3  # every epoch still evaluated
    return len(calls), sum(calls)


def test_fit_takes_one_batch_per_epoch_in_a_smoke_run(monkeypatch: pytest.MonkeyPatch):
    assert _count_steps(False, monkeypatch) == (12, 300)  # 4 batches of up to 32 per epoch
    assert _count_steps(True, monkeypatch) == (3, 96)  # one batch of 32 per epoch


@pytest.mark.parametrize("run_smoke, sizes", [(False, [100, 60] * 2), (True, [32, 32] * 2)])
def test_fit_evaluates_one_batch_of_each_split_in_a_smoke_run(run_smoke, sizes, monkeypatch: pytest.MonkeyPatch):
    import helpers.training

    if run_smoke:
        monkeypatch.setenv(smoke.ENV, "1")
    seen = []
    real = helpers.training.evaluate
    monkeypatch.setattr(helpers.training, "evaluate", lambda model, x, y: seen.append(len(x)) or real(model, x, y))
    x, y = torch.randn(100, 4), torch.randint(0, 3, (100,))
    fit(nn.Linear(4, 3), x, y, x[:60], y[:60], epochs=2, batch_size=32, progress=False)
    assert seen == sizes  # training data, then validation split, every epoch


@pytest.mark.parametrize("epochs, run", [(2, 2), (4, 4), (7, smoke.EPOCHS)])
def test_fit_runs_at_most_four_epochs_in_a_smoke_run(smoke_on: None, epochs: int, run: int):
    x, y = torch.randn(40, 4), torch.randint(0, 3, (40,))
    hist = fit(nn.Linear(4, 3), x, y, x, y, epochs=epochs, batch_size=16, progress=False)
    assert smoke.EPOCHS == 4 and len(hist.train_loss) == len(hist.val_loss) == run


def test_fit_keeps_every_epoch_outside_a_smoke_run():
    x, y = torch.randn(40, 4), torch.randint(0, 3, (40,))
    hist = fit(nn.Linear(4, 3), x, y, x, y, epochs=7, batch_size=16, progress=False)
    assert len(hist.train_loss) == len(hist.val_loss) == 7


@pytest.mark.parametrize("epochs, run", [(2, 2), (6, smoke.EPOCHS)])
def test_train_seq2seq_runs_at_most_four_epochs_in_a_smoke_run(smoke_on: None, epochs: int, run: int):
    pairs = encode_pairs(list(range(1, 200)))
    torch.manual_seed(0)
    model = Seq2SeqTransformer(33, 34, d_model=16, num_heads=2, d_ff=24)
    history = train_seq2seq(model, pairs, pairs, epochs=epochs, batch_size=16)
    assert len(history.train_loss) == len(history.val_loss) == run


def test_train_lm_takes_five_steps_in_a_smoke_run(smoke_on: None):
    ids = torch.tensor([0, 1, 2, 3, 4, 5, 6, 7] * 40)
    torch.manual_seed(0)
    model = DecoderLM(8, d_model=16, num_heads=2, num_layers=1, d_ff=16, max_len=16, style="2025", kv_heads=1)
    seen = []
    history = train_lm(
        model, ids[:200], ids[200:], steps=60, context=16, batch_size=4, eval_every=20, callback=lambda s, m: seen.append(s)
    )
    assert history.steps == seen == [5]  # the last step is always evaluated


def test_claims_in_a_smoke_run(smoke_on: None, capsys: pytest.CaptureFixture[str]):
    assert claim_at_least("accuracy", 12.0, 97.0, unit="%") is False
    assert claim_at_least("loss", float("nan"), 1.0) is False  # a NaN from a few steps of training: not fatal either
    assert claim("it holds", True) is True
    lines = capsys.readouterr().out.splitlines()
    assert lines == [f"{SMOKE} accuracy is at least 97%", f"{SMOKE} loss is at least 1", "✔ it holds"]


def test_claims_still_fail_outside_a_smoke_run(monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv("COURSE_STRICT_CLAIMS", "1")  # the suite's runs of the solution notebooks
    with pytest.raises(ClaimFailed, match="below 97%"):
        claim_at_least("accuracy", 12.0, 97.0, unit="%")
    with pytest.raises(ClaimFailed, match="NaN"):
        claim_at_least("loss", float("nan"), 1.0)


def test_setup_announces_a_smoke_run(smoke_on: None, capsys: pytest.CaptureFixture[str]):
    helpers.setup(quiet=True)
    assert re.fullmatch(r"smoke test \(COURSE_SMOKE_TEST=1\): .*\n", capsys.readouterr().out)


def test_only_student_notebooks_are_smoke_runs():
    assert _STUDENT.match("notebooks/07_transformer_classifier.ipynb")
    for path in (
        "notebooks/solutions/07_transformer_classifier.ipynb",
        "build/suite/default/07_transformer_classifier.ipynb",
        "tests/test_smoke.py",
    ):
        assert not _STUDENT.match(path), path
