"""conftest.py: the slowest files start first (a rename must not silently drop one from the list), and each notebook's
kernel starts in its environment: student notebooks as smoke tests, the copies in build/suite/SETUP/ under SETUP."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from conftest import _LONGEST_FIRST, _order, kernel_env
from helpers import ROOT
from helpers.runtime import smoke
from helpers.runtime.claims import STRICT_ENV


def test_every_listed_file_exists():
    for path in _LONGEST_FIRST:
        if path.startswith("build/suite/"):  # a copy course.py makes at each run: its solution notebook must exist
            path = "notebooks/solutions/" + path.rsplit("/", 1)[1]
        assert (ROOT / path).is_file(), f"conftest._LONGEST_FIRST names {path}, which does not exist"


def test_order_longest_first_then_notebooks_by_number_then_tests():
    paths = [
        "tests/test_attention.py::test_x",
        "notebooks/01_attention_shapes.ipynb::Cell 0",
        "tests/test_nbgrader.py::test_y",
        "notebooks/solutions/10_pretrained_encoder.ipynb::Cell 0",
        "notebooks/solutions/08_vision_transformer.ipynb::Cell 3",
        "build/suite/avx2/07_transformer_classifier.ipynb::Cell 0",
        "notebooks/solutions/07_transformer_classifier.ipynb::Cell 0",
    ]
    ordered = sorted(paths, key=lambda nodeid: _order(SimpleNamespace(nodeid=nodeid)))
    assert ordered == [
        "tests/test_nbgrader.py::test_y",
        "build/suite/avx2/07_transformer_classifier.ipynb::Cell 0",
        "notebooks/solutions/07_transformer_classifier.ipynb::Cell 0",
        "notebooks/solutions/08_vision_transformer.ipynb::Cell 3",
        "notebooks/solutions/10_pretrained_encoder.ipynb::Cell 0",
        "notebooks/01_attention_shapes.ipynb::Cell 0",
        "tests/test_attention.py::test_x",
    ]


def test_kernel_environments(monkeypatch: pytest.MonkeyPatch):
    monkeypatch.delenv(smoke.ENV, raising=False)
    strict = {STRICT_ENV: "1"}  # every notebook kernel of the suite holds training claims to account
    assert kernel_env("notebooks/07_transformer_classifier.ipynb") == {**strict, smoke.ENV: "1"}
    assert kernel_env("notebooks/solutions/07_transformer_classifier.ipynb") == strict
    assert kernel_env("build/suite/default/07_transformer_classifier.ipynb") == {
        **strict,
        "ATEN_CPU_CAPABILITY": "default",
        "MKL_CBWR": "COMPATIBLE",
    }
    assert kernel_env("build/suite/avx2/01_attention_shapes.ipynb") == {**strict, "ATEN_CPU_CAPABILITY": "avx2"}
    assert kernel_env("tests/test_smoke.py") == {}
    monkeypatch.setenv(smoke.ENV, "0")  # COURSE_SMOKE_TEST=0: the student notebooks in full
    assert kernel_env("notebooks/07_transformer_classifier.ipynb") == strict
