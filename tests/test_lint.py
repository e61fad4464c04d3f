"""Lint and format: `ruff check` and `ruff format --check` on the whole repository, notebooks included.

The rule set and its justified exceptions are in pyproject.toml ([tool.ruff]). To fix what these tests report:
`ruff check --fix .` then `ruff format .` (review the diff: a notebook's code cells are rewritten in place).
"""

from __future__ import annotations

import subprocess
import sys

import pytest

from helpers import ROOT

pytest.importorskip("ruff", reason="ruff is installed from requirements.txt")


def _ruff(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "ruff", *args], cwd=ROOT, capture_output=True, text=True)


def test_ruff_check_finds_nothing():
    result = _ruff("check", "--output-format", "concise", "--no-cache", ".")
    assert result.returncode == 0, (
        f"ruff check found problems (fix them or justify an ignore in pyproject.toml):\n{result.stdout[-6000:]}"
    )


def test_ruff_format_changes_nothing():
    result = _ruff("format", "--check", "--no-cache", ".")
    assert result.returncode == 0, f"run `ruff format .` and review the diff:\n{result.stdout[-6000:]}"


def test_the_rule_set_covers_teaching_code():
    """pyflakes, pycodestyle, import order, bugbear and pyupgrade, at least (issue 11)."""
    config = (ROOT / "pyproject.toml").read_text()
    assert 'select = ["F", "E", "W", "I", "B", "UP"' in config


def test_ruff_is_pinned():
    assert any(line.startswith("ruff==") for line in (ROOT / "requirements.txt").read_text().splitlines())
