"""Claims the prose makes, checked in cells that nbval compares.

A training run prints its numbers in a cell whose output is ignored (they vary
by machine: another CPU, another torch, a GPU). The conclusion the prose draws
from them is then checked here, with its tolerance stated, by a cell whose
output *is* compared. Each function prints one line that is the same on every
machine where the claim holds::

    claim_at_least("transformer test accuracy", 100 * acc, 97.0, unit="%", measured="97.6 to 98.4%")
    # ✔ transformer test accuracy is at least 97%

A cell that checks several claims groups them under one sentence a learner reads, and prints that line alone::

    with claims("The transformer beats every baseline, as the table shows."):
        claim_at_least("transformer test accuracy", 100 * acc, 97.0, unit="%", measured="97.6 to 98.4%")
        claim_greater("transformer test accuracy", 98.4, "GRU test accuracy", 95.1, margin=1.0, unit="%")
    # ✔ The transformer beats every baseline, as the table shows.

Such a cell starts with a ``# @title`` line, so that JupyterLab, Colab and the website show it collapsed
(``helpers.authoring.cells``): the learner reads the sentence, and can open the code.

The measured values never appear in a passing verdict, so a verdict prints the
same digits everywhere; they appear when a claim does not hold, where they help.

Two kinds of claims (``kind=``):

- ``"fact"``: what no training trajectory changes (an identity, a shape, a bound, an exact count). When it does not
  hold the code is wrong, so it raises ``ClaimFailed`` everywhere.
- ``"training"`` (the default): a result of a training run (an accuracy, a loss, a comparison of models). Its
  threshold sits below every value the course measured across machines and seeds, by a stated margin, but another
  machine, a GPU or a learner's own (correct) implementation takes another floating-point path, so a miss is
  possible without anything being wrong:

  - in a smoke run (``helpers.runtime.smoke``: the suite's run of a student notebook, its training cut to a few steps) it
    prints ``◌ smoke test, claim not checked: ...`` and returns ``False``;
  - otherwise, in the test suite and when an instructor re-executes a notebook (``COURSE_STRICT_CLAIMS=1``, set by
    ``tests/conftest.py`` and by ``helpers.authoring.execute``) it raises ``ClaimFailed``;
  - in a learner's own session it prints one notice (the measured value, the range the course measured, why runs
    differ between machines) and returns ``False``: the notebook goes on.
"""

from __future__ import annotations

import contextlib
import math
import os
from collections.abc import Iterator, Sequence
from typing import Literal

from helpers.runtime import smoke

__all__ = [
    "ClaimFailed",
    "claims",
    "claim",
    "claim_at_least",
    "claim_at_most",
    "claim_between",
    "claim_greater",
    "claim_all_at_least",
    "STRICT_ENV",
    "strict",
]

PASS = "✔"
SMOKE = "◌ smoke test, claim not checked:"  # helpers.runtime.smoke: a smoke run's numbers support no claim
NOT_MET = "⚠ training claim not met on this run:"  # a learner's session: said, and the notebook goes on
#: Set to "1" where a training claim that does not hold must raise (the test suite, ``helpers.authoring.execute``).
STRICT_ENV = "COURSE_STRICT_CLAIMS"
KINDS = ("training", "fact")
WHY_RUNS_DIFFER = (
    "Training results differ a little from machine to machine: another CPU, a GPU, another PyTorch version, or your "
    "own (correct) code from the exercises takes another floating-point path, and a training run amplifies those "
    "last-digit differences. Nothing needs fixing if the number is close; the notebook goes on."
)


class ClaimFailed(AssertionError):
    """A claim of the prose that the numbers of this run do not support.

    In Jupyter only the message is shown, not the traceback.
    """

    def _render_traceback_(self) -> list[str]:
        return [f"\x1b[0;31mClaimFailed\x1b[0m: {self}"]


def _fmt(x: float) -> str:
    """A bound as the prose writes it: 97, 0.5, 1e-06; never noise digits."""
    return f"{x:g}"


def _number(name: str, value: object) -> float:
    try:
        number = float(value)  # works for Python numbers, numpy scalars, one-element tensors
    except (TypeError, ValueError) as err:
        raise ClaimFailed(f"{name}: expected a number, got {type(value).__name__}") from err
    return number


def _nan_evidence(name: str, *values: float) -> str:
    """Say so when a value is NaN (a diverged run, or no result); NaN fails every comparison."""
    return f"{name} is NaN: the run diverged or produced no result; " if any(math.isnan(v) for v in values) else ""


#: The open ``claims(...)`` groups, innermost last: each a dict of what its claims did ("held", "missed", "unchecked").
_GROUPS: list[dict[str, int]] = []


@contextlib.contextmanager
def claims(summary: str) -> Iterator[None]:
    """Check a cell's claims under one sentence: when they all hold, print ``✔ SUMMARY`` and nothing else.

    Inside the block each claim is checked as usual: a fact that does not hold raises, a training claim that does not
    hold raises in the suite and prints its notice in a learner's session. Only the lines of passing claims are held
    back, so the cell says in one line what holds. A smoke run prints ``◌`` and the sentence when some training claim
    was not checked.
    """
    if not summary.strip():
        raise ValueError("claims(summary): say in a sentence what the claims in the block show")
    group = {"held": 0, "missed": 0, "unchecked": 0}
    _GROUPS.append(group)
    try:
        yield
    finally:
        _GROUPS.pop()
    if group["missed"]:
        return  # each miss printed its notice
    if group["unchecked"]:
        print(f"{SMOKE} {summary}")
    elif group["held"]:
        print(f"{PASS} {summary}")
    else:
        raise ClaimFailed(f"claims({summary!r}): the block checked no claim")


def _tally(outcome: str) -> bool:
    """Count a claim's outcome in the innermost open group; True when the group holds back its line."""
    if _GROUPS:
        _GROUPS[-1][outcome] += 1
        return True
    return False


def strict() -> bool:
    """Whether a training claim that does not hold raises (``COURSE_STRICT_CLAIMS=1``: the suite, ``helpers.authoring.execute``)."""
    return os.environ.get(STRICT_ENV, "") == "1"


Kind = Literal["training", "fact"]


def claim(statement: str, holds: bool, evidence: str = "", *, kind: Kind = "training", measured: str = "", why: str = "") -> bool:
    """Check a claim stated in words: ``holds`` is its truth, ``evidence`` what to show when it fails.

    ``kind`` is ``"training"`` (a training result, the default) or ``"fact"`` (see the module's docstring);
    ``measured`` is what the course measured across its set-ups ("97.6 to 98.4%"), shown to a learner whose run misses;
    ``why`` replaces the notice's explanation of why runs differ (``WHY_RUNS_DIFFER``, about training) where another
    one applies, a timing's: "Timings depend on the machine and on what else it runs...".
    """
    if kind not in KINDS:
        raise ValueError(f"claim kind must be one of {KINDS}, not {kind!r}")
    if not isinstance(holds, bool):
        try:
            holds = bool(holds)
        except (TypeError, ValueError, RuntimeError) as err:
            raise ClaimFailed(f"claim {statement!r}: its truth value must be a single boolean") from err
    if holds:
        if not _tally("held"):
            print(f"{PASS} {statement}")
        return True
    failure = f"the claim '{statement}' does not hold on this run" + (f": {evidence}" if evidence else "")
    if kind == "fact":
        raise ClaimFailed(failure)
    if smoke.active():
        if not _tally("unchecked"):
            print(f"{SMOKE} {statement}")
        return False
    if strict():
        raise ClaimFailed(failure)
    _tally("missed")
    lines = [f"{NOT_MET} {statement}."]
    if evidence:
        lines.append(f"   This run: {evidence}.")
    if measured:
        lines.append(f"   The course measured: {measured}.")
    lines.append(f"   {why or WHY_RUNS_DIFFER}")
    print("\n".join(lines))
    return False


def claim_at_least(
    name: str, value: float, bound: float, unit: str = "", *, kind: Kind = "training", measured: str = "", why: str = ""
) -> bool:
    """``value >= bound``: prints ``✔ claim holds: NAME is at least BOUND``."""
    value = _number(name, value)
    return claim(
        f"{name} is at least {_fmt(bound)}{unit}",
        value >= bound,
        _nan_evidence(name, value) + f"measured {value:.6g}{unit}, below {_fmt(bound)}{unit}",
        kind=kind,
        measured=measured,
        why=why,
    )


def claim_at_most(name: str, value: float, bound: float, unit: str = "", *, kind: Kind = "training", measured: str = "") -> bool:
    """``value <= bound``: prints ``✔ claim holds: NAME is at most BOUND``."""
    value = _number(name, value)
    return claim(
        f"{name} is at most {_fmt(bound)}{unit}",
        value <= bound,
        _nan_evidence(name, value) + f"measured {value:.6g}{unit}, above {_fmt(bound)}{unit}",
        kind=kind,
        measured=measured,
    )


def claim_between(
    name: str, value: float, low: float, high: float, unit: str = "", *, kind: Kind = "training", measured: str = ""
) -> bool:
    """``low <= value <= high``: prints ``✔ claim holds: NAME is between LOW and HIGH``."""
    value = _number(name, value)
    return claim(
        f"{name} is between {_fmt(low)}{unit} and {_fmt(high)}{unit}",
        low <= value <= high,
        _nan_evidence(name, value) + f"measured {value:.6g}{unit}, outside [{_fmt(low)}, {_fmt(high)}]{unit}",
        kind=kind,
        measured=measured,
    )


def claim_greater(
    name_a: str,
    a: float,
    name_b: str,
    b: float,
    margin: float = 0.0,
    unit: str = "",
    *,
    kind: Kind = "training",
    measured: str = "",
) -> bool:
    """``a > b + margin``: prints ``✔ claim holds: A exceeds B (by more than MARGIN)``."""
    a, b = _number(name_a, a), _number(name_b, b)
    by = f" by more than {_fmt(margin)}{unit}" if margin else ""
    return claim(
        f"{name_a} exceeds {name_b}{by}",
        a > b + margin,
        _nan_evidence(name_a, a) + _nan_evidence(name_b, b) + f"{name_a} {a:.6g}{unit}, {name_b} {b:.6g}{unit}",
        kind=kind,
        measured=measured,
    )


def claim_all_at_least(
    name: str, values: Sequence[float], bound: float, unit: str = "", *, kind: Kind = "training", measured: str = ""
) -> bool:
    """Every value ``>= bound`` (every seed, every run): prints ``✔ claim holds: every NAME is at least BOUND``."""
    numbers = [_number(name, v) for v in values]
    if not numbers:
        raise ClaimFailed(f"every {name}: no values to check (an empty list of runs)")
    low = min(numbers)
    return claim(
        f"every {name} is at least {_fmt(bound)}{unit}",
        all(v >= bound for v in numbers),
        _nan_evidence(name, *numbers)
        + f"lowest {low:.6g}{unit} of {len(numbers)} ("
        + ", ".join(f"{v:.6g}" for v in numbers)
        + ")",
        kind=kind,
        measured=measured,
    )
