"""conftest.py's scheduling: the slowest files start first, so a rename must not silently drop one from the list."""

from __future__ import annotations

from types import SimpleNamespace

from conftest import _LONGEST_FIRST, _order
from helpers import ROOT


def test_every_listed_file_exists():
    for path in _LONGEST_FIRST:
        assert (ROOT / path).is_file(), f"conftest._LONGEST_FIRST names {path}, which does not exist"


def test_order_longest_first_then_notebooks_by_number_then_tests():
    paths = [
        "tests/test_attention.py::test_x",
        "notebooks/01_attention_shapes.ipynb::Cell 0",
        "tests/test_nbgrader.py::test_y",
        "notebooks/solutions/10_pretrained_encoder.ipynb::Cell 0",
        "notebooks/solutions/08_vision_transformer.ipynb::Cell 3",
        "notebooks/solutions/07_transformer_classifier.ipynb::Cell 0",
    ]
    ordered = sorted(paths, key=lambda nodeid: _order(SimpleNamespace(nodeid=nodeid)))
    assert ordered == [
        "notebooks/solutions/07_transformer_classifier.ipynb::Cell 0",
        "notebooks/solutions/08_vision_transformer.ipynb::Cell 3",
        "tests/test_nbgrader.py::test_y",
        "notebooks/solutions/10_pretrained_encoder.ipynb::Cell 0",
        "notebooks/01_attention_shapes.ipynb::Cell 0",
        "tests/test_attention.py::test_x",
    ]
