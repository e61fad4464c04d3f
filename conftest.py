"""Suite-wide pytest set-up: the order in which the xdist workers take the files, and each kernel's environment.

``course.py test`` runs pytest with ``-n N --dist loadfile --no-loadscope-reorder`` (N: one worker per core, 2 to
4, ``course.py``'s ``_workers``): every file (a notebook, a test module) goes whole to one worker, in collection
order, one file per worker to start with and the next one when a worker is nearly done. The files that train models
take minutes and the rest seconds, so the suite is shortest when the longest start first, one on each worker, and the
short ones fill in around them. So the files of
``_LONGEST_FIRST`` (measured) go first in that order, then the other notebooks, the highest number first, then the
unit tests; the cells of one notebook and the tests of one module keep their order.

The student notebooks (``notebooks/NN_*.ipynb``) run as smoke tests: their kernels start with
``COURSE_SMOKE_TEST=1`` (``helpers.runtime.smoke``), so every cell executes but each training run takes a few steps. The
solution notebooks, from which they are generated cell for cell, train in full and have their outputs and claims
checked. Set ``COURSE_SMOKE_TEST=0`` to run the student notebooks in full as well.

``course.py test`` also copies the solution notebooks to ``build/suite/SETUP/`` (``setup_copies``; SETUP is its
``second_setup``: ``avx2`` on a CPU with AVX-512, ``default`` elsewhere), and their kernels start under that CPU
set-up (``course.py``'s ``SETUPS``), so every compared output and claim is checked natively and under a second set-up
in one pytest run. Every notebook kernel of the suite holds training claims to account (``COURSE_STRICT_CLAIMS=1``).
"""

from __future__ import annotations

import functools
import importlib.util
import os
import re
from collections.abc import Iterator
from pathlib import Path

import pytest

from helpers.runtime import smoke
from helpers.runtime.claims import STRICT_ENV

_NUMBER = re.compile(r"(?:^|/)(\d\d)_[^/]*\.ipynb$")
_STUDENT = re.compile(r"^notebooks/\d\d_[^/]*\.ipynb$")  # not notebooks/solutions/, not a copy elsewhere
_SETUP_COPY = re.compile(r"^build/suite/(?P<setup>[a-z0-9]+)/\d\d_[^/]*\.ipynb$")  # course.py's setup_copies


# The slowest files, slowest first: their seconds in the suite on the 2-core AMD EPYC (a fresh clone, 2026-11-27;
# the copies in build/suite/SETUP/ ran under avx2, at about native speed; under default they take about 1.6 times as
# long); every other file took under 15 s.
_LONGEST_FIRST = (
    "tests/test_nbgrader.py",  # 107 s: nbgrader releases and autogrades 01, 02 and 09 for three students
    "notebooks/solutions/16_chat_model.ipynb",  # 33 s: a 135M-parameter model read, dequantized and run
    "build/suite/SETUP/16_chat_model.ipynb",  # 32 s
    "build/suite/SETUP/07_transformer_classifier.ipynb",  # 32 s
    "notebooks/solutions/07_transformer_classifier.ipynb",  # 32 s
    "tests/test_site.py",  # 32 s: the website built and measured in headless Chromium
    "notebooks/solutions/09_translation_encoder_decoder.ipynb",  # 28 s
    "notebooks/16_chat_model.ipynb",  # 24 s as a smoke test (the model is real whatever the smoke setting)
    "build/suite/SETUP/08_vision_transformer.ipynb",  # 24 s
    "notebooks/solutions/08_vision_transformer.ipynb",  # 23 s
    "build/suite/SETUP/09_translation_encoder_decoder.ipynb",  # 23 s
    "notebooks/solutions/11_language_model.ipynb",  # 19 s
    "build/suite/SETUP/11_language_model.ipynb",  # 18 s
    "tests/test_chat.py",  # 17 s
    "build/suite/SETUP/13_induction_heads.ipynb",  # 15 s
)


def _order(item: pytest.Item) -> tuple[int, int]:
    path = item.nodeid.split("::")[0]
    copy = _SETUP_COPY.match(path)
    if copy:  # the second set-up's copy, whichever set-up course.py chose: listed as build/suite/SETUP/NN_topic.ipynb
        path = "build/suite/SETUP/" + path.rsplit("/", 1)[1]
    if path in _LONGEST_FIRST:
        return (0, _LONGEST_FIRST.index(path))
    match = _NUMBER.search(path)
    return (1, -int(match.group(1))) if match else (2, 0)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    items.sort(key=_order)  # stable: the cells of a notebook and the tests of a module stay in their order


@functools.cache
def _course_setups() -> dict[str, dict[str, str]]:
    """course.py's SETUPS (course.py runs before the install, so it cannot import helpers, nor be one of them)."""
    spec = importlib.util.spec_from_file_location("course_setups", Path(__file__).with_name("course.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.SETUPS


def kernel_env(path: str) -> dict[str, str]:
    """The environment variables a notebook's kernel starts with in the suite, from the notebook's path.

    Every kernel holds training claims to account (``helpers.runtime.claims``, ``COURSE_STRICT_CLAIMS=1``): in the suite a
    training result that misses its claim fails, where a learner's session only prints a notice. A smoke run's claims
    are not checked (``helpers.runtime.smoke``).
    """
    if not path.endswith(".ipynb"):
        return {}
    strict = {STRICT_ENV: "1"}
    copy = _SETUP_COPY.match(path)
    if copy:
        return {**strict, **_course_setups()[copy["setup"]]}
    if _STUDENT.match(path) and smoke.ENV not in os.environ:
        return {**strict, smoke.ENV: "1"}
    return strict


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_setup(item: pytest.Item) -> Iterator[None]:
    """Start the notebook's kernel (nbval does it when the first cell is set up) in the environment of kernel_env."""
    extra = kernel_env(item.nodeid.split("::")[0])
    saved = {name: os.environ.get(name) for name in extra}
    os.environ.update(extra)  # the kernel inherits this process's environment when it starts
    try:
        yield
    finally:
        for name, value in saved.items():
            if value is None:
                del os.environ[name]
            else:
                os.environ[name] = value
