"""Shared pytest set-up: one torch thread, float64 comparisons, helpers for check tests."""

from __future__ import annotations

import re

import pytest
import torch

from helpers.checks import ExerciseFailed, raise_failures

torch.set_num_threads(1)
# In a notebook a wrong answer is shown and the check returns False (nothing blocks Run All); the catalogues of wrong
# answers assert the named mistake, so in the tests a wrong answer raises ExerciseFailed with that message.
raise_failures(True)


@pytest.fixture(autouse=True)
def _no_reference_standing_in():
    """A test that falls back on a reference (use_reference, choose) leaves no trace for the next test's checks."""
    from helpers.checks import _core

    yield
    _core._STANDING_IN.clear()


def assert_caught(check, answer, *phrases: str) -> str:
    """Assert ``check(answer)`` raises ExerciseFailed whose message contains every phrase (case-insensitive)."""
    with pytest.raises(ExerciseFailed) as info:
        check(answer)
    message = str(info.value)
    for phrase in phrases:
        assert re.search(re.escape(phrase), message, re.IGNORECASE), f"expected {phrase!r} in the message: {message}"
    return message


def assert_not_attempted(check, answer, capsys) -> None:
    """Assert the check returns False and prints the not-attempted notice."""
    assert check(answer) is False
    assert "not attempted yet" in capsys.readouterr().out
