"""Suite-wide pytest set-up: the order in which the two xdist workers take the files.

``course.py test`` runs pytest with ``-n 2 --dist loadfile --no-loadscope-reorder``: every file (a notebook, a
test module) goes whole to one worker, in collection order, one file per worker to start with and the next one when
a worker is nearly done. The files that train models take minutes and the rest seconds, so the suite is shortest
when the longest start first, one on each worker, and the short ones fill in around them. So the files of
``_LONGEST_FIRST`` (measured) go first in that order, then the other notebooks, the highest number first, then the
unit tests; the cells of one notebook and the tests of one module keep their order.

The student notebooks (``notebooks/NN_*.ipynb``) run as smoke tests: their kernels start with
``COURSE_SMOKE_TEST=1`` (``helpers.smoke``), so every cell executes but each training run takes a few steps. The
solution notebooks, from which they are generated cell for cell, train in full and have their outputs and claims
checked. Set ``COURSE_SMOKE_TEST=0`` to run the student notebooks in full as well.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterator

import pytest

from helpers import smoke

_NUMBER = re.compile(r"(?:^|/)(\d\d)_[^/]*\.ipynb$")
_STUDENT = re.compile(r"^notebooks/\d\d_[^/]*\.ipynb$")  # not notebooks/solutions/, not a copy elsewhere


# The slowest files, slowest first: seconds of one pass of the suite on this 2-core machine, natively (the second
# CPU set-up runs the solution notebooks about 1.6 times slower); every other file took under 25 s.
_LONGEST_FIRST = (
    "notebooks/solutions/07_transformer_classifier.ipynb",  # 280 s
    "notebooks/solutions/08_vision_transformer.ipynb",  # 160 s
    "tests/test_nbgrader.py",  # 85 s: nbgrader releases and autogrades
    "notebooks/solutions/09_translation_encoder_decoder.ipynb",  # 50 s
    "notebooks/solutions/11_language_model.ipynb",  # 40 s
    "notebooks/08_vision_transformer.ipynb",  # 30 s as a smoke test (plain student notebooks take 5 to 20 s)
)


def _order(item: pytest.Item) -> tuple[int, int]:
    path = item.nodeid.split("::")[0]
    if path in _LONGEST_FIRST:
        return (0, _LONGEST_FIRST.index(path))
    match = _NUMBER.search(path)
    return (1, -int(match.group(1))) if match else (2, 0)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    items.sort(key=_order)  # stable: the cells of a notebook and the tests of a module stay in their order


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_setup(item: pytest.Item) -> Iterator[None]:
    """Start a student notebook's kernel (nbval does it when its first cell is set up) as a smoke run."""
    path = item.nodeid.split("::")[0]
    turn_on = _STUDENT.match(path) is not None and smoke.ENV not in os.environ
    if turn_on:
        os.environ[smoke.ENV] = "1"  # the kernel inherits this process's environment when it starts
    try:
        yield
    finally:
        if turn_on:
            del os.environ[smoke.ENV]
