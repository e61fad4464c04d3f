"""Claims drawn from training runs, checked in cells that nbval compares.

A training run prints its numbers in a cell whose output is ignored (they vary
by machine: another CPU, another torch, a GPU). The conclusion the prose draws
from them is then checked here, with its tolerance stated, by a cell whose
output *is* compared. Each function prints one line that is the same on every
machine where the claim holds, and raises ``ClaimFailed`` with the measured
numbers when it does not::

    claim_at_least("transformer test accuracy", 100 * acc, 97.0, unit="%")
    # ✔ claim holds: transformer test accuracy is at least 97%

    claim_greater("transformer test accuracy", 98.4, "GRU test accuracy", 95.1, margin=1.0, unit="%")
    # ✔ claim holds: transformer test accuracy exceeds GRU test accuracy by more than 1 %

The measured values never appear in a passing verdict, so a verdict prints the
same digits everywhere; they appear in the failure message, where they help.

In a smoke run (``helpers.smoke``: the suite's run of a student notebook, its training cut to a few steps) a
claim that does not hold prints ``◌ smoke test, claim not checked: ...`` and returns ``False`` instead of raising.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from helpers import smoke

__all__ = [
    "ClaimFailed",
    "claim",
    "claim_at_least",
    "claim_at_most",
    "claim_between",
    "claim_greater",
    "claim_all_at_least",
]

PASS = "✔ claim holds:"
SMOKE = "◌ smoke test, claim not checked:"  # helpers.smoke: a smoke run's numbers support no claim


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
    if math.isnan(number) and not smoke.active():
        raise ClaimFailed(f"{name} is NaN: the run diverged or produced no result")
    return number


def claim(statement: str, holds: bool, evidence: str = "") -> bool:
    """Check a claim stated in words: ``holds`` is its truth, ``evidence`` what to show when it fails."""
    if not isinstance(holds, bool):
        try:
            holds = bool(holds)
        except (TypeError, ValueError, RuntimeError) as err:
            raise ClaimFailed(f"claim {statement!r}: its truth value must be a single boolean") from err
    if not holds:
        if smoke.active():
            print(f"{SMOKE} {statement}")
            return False
        raise ClaimFailed(f"the claim '{statement}' does not hold on this run" + (f": {evidence}" if evidence else ""))
    print(f"{PASS} {statement}")
    return True


def claim_at_least(name: str, value: float, bound: float, unit: str = "") -> bool:
    """``value >= bound``: prints ``✔ claim holds: NAME is at least BOUND``."""
    value = _number(name, value)
    return claim(
        f"{name} is at least {_fmt(bound)}{unit}", value >= bound, f"measured {value:.6g}{unit}, below {_fmt(bound)}{unit}"
    )


def claim_at_most(name: str, value: float, bound: float, unit: str = "") -> bool:
    """``value <= bound``: prints ``✔ claim holds: NAME is at most BOUND``."""
    value = _number(name, value)
    return claim(
        f"{name} is at most {_fmt(bound)}{unit}", value <= bound, f"measured {value:.6g}{unit}, above {_fmt(bound)}{unit}"
    )


def claim_between(name: str, value: float, low: float, high: float, unit: str = "") -> bool:
    """``low <= value <= high``: prints ``✔ claim holds: NAME is between LOW and HIGH``."""
    value = _number(name, value)
    return claim(
        f"{name} is between {_fmt(low)}{unit} and {_fmt(high)}{unit}",
        low <= value <= high,
        f"measured {value:.6g}{unit}, outside [{_fmt(low)}, {_fmt(high)}]{unit}",
    )


def claim_greater(name_a: str, a: float, name_b: str, b: float, margin: float = 0.0, unit: str = "") -> bool:
    """``a > b + margin``: prints ``✔ claim holds: A exceeds B (by more than MARGIN)``."""
    a, b = _number(name_a, a), _number(name_b, b)
    by = f" by more than {_fmt(margin)}{unit}" if margin else ""
    return claim(f"{name_a} exceeds {name_b}{by}", a > b + margin, f"{name_a} {a:.6g}{unit}, {name_b} {b:.6g}{unit}")


def claim_all_at_least(name: str, values: Sequence[float], bound: float, unit: str = "") -> bool:
    """Every value ``>= bound`` (every seed, every run): prints ``✔ claim holds: every NAME is at least BOUND``."""
    numbers = [_number(name, v) for v in values]
    if not numbers:
        raise ClaimFailed(f"every {name}: no values to check (an empty list of runs)")
    low = min(numbers)
    return claim(
        f"every {name} is at least {_fmt(bound)}{unit}",
        low >= bound,
        f"lowest {low:.6g}{unit} of {len(numbers)} (" + ", ".join(f"{v:.6g}" for v in numbers) + ")",
    )
