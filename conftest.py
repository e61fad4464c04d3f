"""Suite-wide pytest set-up: the order in which the two xdist workers take the files.

``course.py test`` runs pytest with ``-n 2 --dist loadfile --no-loadscope-reorder``: every file (a notebook, a
test module) goes whole to one worker, in collection order, two files per worker to start with. The notebooks that
train models take minutes and the rest seconds, so the suite is shortest when the long ones start first, one on
each worker, and the short ones fill in around them. The later a notebook comes in the course, the more it trains,
so notebooks go first, the highest number first, then the unit tests; the cells of one notebook keep their order.
"""

from __future__ import annotations

import re

import pytest

_NUMBER = re.compile(r"(?:^|/)(\d\d)_[^/]*\.ipynb$")


def _order(item: pytest.Item) -> tuple[int, int]:
    match = _NUMBER.search(item.nodeid.split("::")[0])
    return (0, -int(match.group(1))) if match else (1, 0)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    items.sort(key=_order)  # stable: the cells of a notebook and the tests of a module stay in their order
