"""helpers.runtime.claims: a passing claim prints one machine-independent line; a failing one raises ClaimFailed with the numbers."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from helpers.runtime import smoke
from helpers.runtime.claims import (
    NOT_MET,
    SMOKE,
    STRICT_ENV,
    ClaimFailed,
    claim,
    claim_all_at_least,
    claim_at_least,
    claim_at_most,
    claim_between,
    claim_greater,
)


@pytest.fixture(autouse=True)
def strict_claims(monkeypatch):
    """As in the suite's runs of the solution notebooks: a training claim that does not hold raises."""
    monkeypatch.setenv(STRICT_ENV, "1")
    monkeypatch.delenv(smoke.ENV, raising=False)


# Measured values with digits that appear in no bound, so a leak into a passing line shows.
PASSING = [
    (lambda v: claim_at_least("test accuracy", v, 97.0, unit="%"), 98.7654321, "✔ test accuracy is at least 97%"),
    (lambda v: claim_at_most("validation loss", v, 0.5), 0.1234567, "✔ validation loss is at most 0.5"),
    (
        lambda v: claim_between("mean accuracy", v, 90.0, 99.5, unit="%"),
        93.4567891,
        "✔ mean accuracy is between 90% and 99.5%",
    ),
    (
        lambda v: claim_greater("transformer", v, "GRU", 88.8123456, margin=1.0, unit="%"),
        98.3456789,
        "✔ transformer exceeds GRU by more than 1%",
    ),
    (
        lambda v: claim_all_at_least("seed's accuracy", [v, v + 0.1111], 97.0, unit="%"),
        98.3456789,
        "✔ every seed's accuracy is at least 97%",
    ),
]


@pytest.mark.parametrize("call, value, line", PASSING)
def test_a_passing_claim_prints_one_line_without_the_measured_digits(call, value, line, capsys):
    assert call(value) is True
    out = capsys.readouterr().out
    assert out == line + "\n"
    for digits in ("8765", "1234", "4567", "3456", "8123", "4567"):
        assert digits not in out


def test_the_line_is_the_same_for_any_value_that_passes(capsys):
    claim_at_least("accuracy", 97.01, 97, unit="%")
    first = capsys.readouterr().out
    claim_at_least("accuracy", torch.tensor(99.9), 97, unit="%")  # a one-element tensor works too
    claim_at_least("accuracy", np.float32(97.0), 97, unit="%")  # the bound itself passes
    assert capsys.readouterr().out == first * 2


FAILING = [
    (lambda: claim_at_least("test accuracy", 96.54321, 97.0, unit="%"), ["test accuracy", "96.5432", "below 97%"]),
    (lambda: claim_at_most("validation loss", 0.654321, 0.5), ["validation loss", "0.654321", "above 0.5"]),
    (lambda: claim_between("mean accuracy", 99.87654, 90.0, 99.5, unit="%"), ["mean accuracy", "99.8765", "outside [90, 99.5]%"]),
    (lambda: claim_between("mean accuracy", 89.0, 90.0, 99.5), ["89", "outside [90, 99.5]"]),
    (
        lambda: claim_greater("transformer", 96.5, "GRU", 95.9, margin=1.0, unit="%"),
        ["transformer 96.5%", "GRU 95.9%", "by more than 1%"],
    ),
    (lambda: claim_greater("a", 1.0, "b", 1.0), ["a 1, b 1", "a exceeds b"]),
    (lambda: claim_all_at_least("seed's accuracy", [98.0, 96.25, 97.5], 97.0), ["lowest 96.25 of 3", "98, 96.25, 97.5"]),
    (lambda: claim("the loss stays near chance", False, evidence="loss 0.123"), ["the loss stays near chance", "loss 0.123"]),
    (lambda: claim("the loss stays near chance", torch.tensor(0.5) > 2.0), ["the loss stays near chance", "does not hold"]),
]


@pytest.mark.parametrize("call, phrases", FAILING)
def test_a_failing_claim_raises_with_the_measured_numbers(call, phrases, capsys):
    with pytest.raises(ClaimFailed) as info:
        call()
    message = str(info.value)
    for phrase in phrases:
        assert phrase in message, f"expected {phrase!r} in {message!r}"
    assert capsys.readouterr().out == ""  # nothing that looks like a verdict was printed
    assert isinstance(info.value, AssertionError)
    assert message in "".join(info.value._render_traceback_())  # Jupyter shows the message, not a traceback


NAN_CALLS = [
    lambda nan: claim_at_least("accuracy", nan, 97.0),
    lambda nan: claim_at_most("loss", nan, 0.5),
    lambda nan: claim_between("accuracy", nan, 0.0, 100.0),
    lambda nan: claim_greater("transformer", nan, "GRU", 90.0),
    lambda nan: claim_greater("transformer", 98.0, "GRU", nan),
    lambda nan: claim_all_at_least("seed's accuracy", [98.0, nan], 0.0),
    lambda nan: claim("the loss fell", nan < 1.0),
]


@pytest.mark.parametrize("nan", [float("nan"), np.float64("nan"), torch.tensor(float("nan"))], ids=["float", "numpy", "tensor"])
@pytest.mark.parametrize("call", NAN_CALLS)
def test_nan_is_a_failure(call, nan):
    with pytest.raises(ClaimFailed):
        call(nan)


def test_nan_names_the_divergence():
    with pytest.raises(ClaimFailed, match="accuracy is NaN"):
        claim_at_least("accuracy", math.nan, 97.0)


def test_not_a_number_and_not_a_boolean_fail_clearly():
    with pytest.raises(ClaimFailed, match="expected a number, got str"):
        claim_at_least("accuracy", "high", 97.0)
    with pytest.raises(ClaimFailed, match="expected a number, got NoneType"):
        claim_at_most("loss", None, 1.0)
    with pytest.raises(ClaimFailed, match="single boolean"):
        claim("every seed is above 97%", torch.tensor([True, False]))


def test_no_values_is_a_failure_not_a_crash():
    with pytest.raises(ClaimFailed, match="no values"):
        claim_all_at_least("seed's accuracy", [], 97.0)


def test_boolean_like_truth_values(capsys):
    assert claim("the run converged", np.bool_(True)) is True
    assert claim("the run converged", torch.tensor(True)) is True
    assert capsys.readouterr().out == "✔ the run converged\n" * 2


def test_bounds_are_written_as_the_prose_writes_them(capsys):
    claim_at_most("residual", 1e-13, 1e-6)
    claim_greater("a", 2.0, "b", 1.0)  # no margin: no "by more than"
    assert capsys.readouterr().out == "✔ residual is at most 1e-06\n✔ a exceeds b\n"


def test_nan_says_the_run_diverged():
    with pytest.raises(ClaimFailed, match="transformer is NaN: the run diverged"):
        claim_greater("transformer", math.nan, "GRU", 90.0)


# In a learner's own session (neither the suite nor a smoke run), a training claim that misses is a notice, not an error.


def test_in_a_learners_session_a_missed_training_claim_prints_a_notice_and_goes_on(monkeypatch, capsys):
    monkeypatch.delenv(STRICT_ENV)
    assert claim_at_least("test accuracy", 96.54321, 97.0, unit="%", measured="97.6 to 98.4% across set-ups") is False
    out = capsys.readouterr().out
    assert out.startswith(f"{NOT_MET} test accuracy is at least 97%.")
    assert "This run: measured 96.5432%, below 97%." in out
    assert "The course measured: 97.6 to 98.4% across set-ups." in out
    assert "machine to machine" in out and "the notebook goes on" in out  # why runs differ
    assert claim("the loss fell", False, evidence="from 2.3 to 2.4") is False  # every training claim alike
    assert "This run: from 2.3 to 2.4." in capsys.readouterr().out


def test_a_notice_can_say_why_in_its_own_words(monkeypatch, capsys):
    monkeypatch.delenv(STRICT_ENV)
    why = "Timings depend on the machine and on what else it runs."
    assert claim_at_least("speed-up", 2.0, 3.0, "x", measured="7-15x", why=why) is False
    out = capsys.readouterr().out
    assert why in out and "floating-point" not in out


def test_in_a_learners_session_a_diverged_run_is_a_notice_too(monkeypatch, capsys):
    monkeypatch.delenv(STRICT_ENV)
    assert claim_at_least("accuracy", math.nan, 97.0) is False
    assert "accuracy is NaN: the run diverged" in capsys.readouterr().out


@pytest.mark.parametrize("strict", ["1", None], ids=["suite", "learner"])
def test_a_fact_raises_everywhere(monkeypatch, strict, capsys):
    if strict is None:
        monkeypatch.delenv(STRICT_ENV)
    with pytest.raises(ClaimFailed, match="max residual is at most 1e-12"):
        claim_at_most("max residual", 1e-3, 1e-12, kind="fact")
    monkeypatch.setenv(smoke.ENV, "1")  # a smoke run does not excuse a fact either
    with pytest.raises(ClaimFailed):
        claim("rows sum to one", False, kind="fact")
    assert capsys.readouterr().out == ""


def test_in_a_smoke_run_a_training_claim_is_not_checked(monkeypatch, capsys):
    monkeypatch.setenv(smoke.ENV, "1")
    assert claim_at_least("test accuracy", 12.0, 97.0, unit="%") is False
    assert capsys.readouterr().out == f"{SMOKE} test accuracy is at least 97%\n"


def test_a_passing_claim_prints_the_same_line_in_every_mode(monkeypatch, capsys):
    lines = []
    for strict, smoke_run in (("1", None), (None, None), (None, "1")):
        for name, value in ((STRICT_ENV, strict), (smoke.ENV, smoke_run)):
            if value is None:
                monkeypatch.delenv(name, raising=False)
            else:
                monkeypatch.setenv(name, value)
        claim_at_least("test accuracy", 98.1, 97.0, unit="%", measured="97.6 to 98.4%")
        lines.append(capsys.readouterr().out)
    assert lines == ["✔ test accuracy is at least 97%\n"] * 3


def test_an_unknown_kind_is_refused():
    with pytest.raises(ValueError, match="kind must be one of"):
        claim("x", True, kind="training result")


def test_claims_group_prints_its_sentence_once_when_every_claim_holds(capsys):
    from helpers.runtime.claims import claims

    with claims("The transformer beats the MLP by a wide margin."):
        claim_at_least("transformer test accuracy", 98.123, 97.0, unit="%")
        claim_greater("transformer", 98.123, "MLP", 76.5, margin=10.0, unit="%")
        claim("a fact", True, kind="fact")
    assert capsys.readouterr().out == "✔ The transformer beats the MLP by a wide margin.\n"


def test_claims_group_raises_like_its_claims(capsys):
    from helpers.runtime.claims import claims

    with pytest.raises(ClaimFailed, match="97"):
        with claims("The transformer is accurate."):
            claim_at_least("transformer test accuracy", 96.0, 97.0, unit="%")
    with pytest.raises(ClaimFailed):
        with claims("An identity."):
            claim("two plus two is four", False, kind="fact")
    assert "✔" not in capsys.readouterr().out


def test_claims_group_in_a_learners_session_prints_the_notice_not_the_sentence(monkeypatch, capsys):
    from helpers.runtime.claims import claims

    monkeypatch.delenv(STRICT_ENV)
    with claims("The transformer is accurate."):
        claim_at_least("transformer test accuracy", 96.0, 97.0, unit="%", measured="97.6 to 98.4%")
        claim_at_most("validation loss", 0.1, 0.5)
    out = capsys.readouterr().out
    assert out.startswith(NOT_MET) and "97.6 to 98.4%" in out and "✔" not in out


def test_claims_group_in_a_smoke_run_says_it_was_not_checked(monkeypatch, capsys):
    from helpers.runtime.claims import claims

    monkeypatch.setenv(smoke.ENV, "1")
    with claims("The transformer is accurate."):
        claim_at_least("transformer test accuracy", 10.0, 97.0, unit="%")
    assert capsys.readouterr().out == f"{SMOKE} The transformer is accurate.\n"


def test_claims_group_needs_a_sentence_and_a_claim():
    from helpers.runtime.claims import claims

    with pytest.raises(ValueError):
        with claims(" "):
            pass
    with pytest.raises(ClaimFailed, match="no claim"):
        with claims("Nothing checked."):
            pass
