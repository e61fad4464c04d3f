"""Grading the course's exercises with nbgrader.

    python3 course.py nbgrader                         # instructor copies + nbgrader generate_assignment, every notebook
    python3 course.py nbgrader autograde 01_attention_shapes   # any other nbgrader command, with the course's config

The course's solution notebooks carry no nbgrader metadata; ``helpers.grading.instructor`` writes an instructor
copy of each into nbgrader's ``grading/source/NN_topic/`` (git-ignored), with:

- every exercise cell (the one holding ``### BEGIN SOLUTION``) an nbgrader *solution* cell;
- every check cell (the code cell right after it) an *autograded test* cell worth one point: its visible part is the
  course's check cell, unchanged, and two ``### BEGIN HIDDEN TESTS`` parts around it record what the check said and
  fail the cell unless the check passed, so "not attempted" and a wrong answer score 0 and a right answer full marks;
- every other cell read-only (locked), so autograding restores it.

``nbgrader_config.py`` (the repository root) swaps nbgrader's stub writer for the course's own
(``helpers.grading.nbgrader_plugins``): the released notebook is the course's student notebook, stub for stub, so it
runs top to bottom, and its Colab badge points at the student notebook.

This module holds the two functions the hidden tests call while a submission is autograded; they import nothing heavy.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

__all__ = ["GRADED", "recording", "passed"]

#: The attribute that holds what a recorded check said: True (passed), or why it did not pass.
GRADED = "_grading_outcome"


def recording(name: str) -> Callable[..., Any]:
    """``helpers.checks.<name>``, wrapped so that ``passed`` can tell what it said (hidden test, before the check cell).

    The check is taken from ``helpers.checks`` itself, not from the notebook's namespace, so an answer cell that
    redefines ``check_...`` does not grade itself. Under nbgrader (``COURSE_GRADING=1``, set by nbgrader_config.py) a
    check raises ``ExerciseFailed`` for a wrong answer and for "not attempted", so that ``nbgrader validate`` fails
    both; here that is printed and turned into what the check returns for an answer that did not pass (``False``, or
    its ``fallback=``, the course's version the cells below then use), so one wrong answer does not fail the exercises
    after it. ``passed`` then fails the cell.
    """
    import helpers.checks
    from helpers.checks import ExerciseFailed

    check = getattr(helpers.checks, name, None)
    if not callable(check):
        raise AssertionError(f"helpers.checks has no check named {name!r}; regenerate the instructor copy")

    @functools.wraps(check)
    def recorded(*args: Any, **kwargs: Any) -> Any:
        try:
            result = check(*args, **kwargs)
        except ExerciseFailed as err:
            print(f"ExerciseFailed: {err}")
            outcome = str(getattr(check, "outcome", ""))
            setattr(recorded, GRADED, "not attempted" if outcome.startswith("not attempted") else f"a wrong answer ({err})")
            return kwargs.get("fallback", False)
        outcome = str(getattr(check, "outcome", ""))
        if getattr(check, "passed", result is True) is True:
            setattr(recorded, GRADED, True)
        else:
            setattr(
                recorded,
                GRADED,
                f"a wrong answer ({outcome[len('wrong: ') :]})" if outcome.startswith("wrong") else "not attempted",
            )
        return result

    setattr(recorded, GRADED, "not checked (the check was never called)")
    return recorded


def passed(check: Callable[..., Any]) -> Callable[..., Any]:
    """Fail (``AssertionError``: 0 points) unless the recorded check passed; return the original check (hidden test, after)."""
    outcome = getattr(check, GRADED, "not checked (the check cell did not use the recorded check)")
    name = getattr(check, "__name__", "the check")
    if outcome is not True:
        raise AssertionError(f"{name} did not pass: {outcome}. This exercise scores 0.")
    return getattr(check, "__wrapped__", check)
