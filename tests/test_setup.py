"""helpers.setup, the data folder's errors, course.py's install skipping, and that nbval compares numbers."""

from __future__ import annotations

import importlib.util
import json
import os
import random
import subprocess
import sys

import nbformat
import numpy as np
import pytest
import torch
from nbformat.v4 import new_code_cell, new_notebook, new_output

import helpers
from helpers import ROOT
from helpers.authoring.student import KERNELSPEC
from helpers.data import DataError, load_fixture


def test_setup_seeds_threads_and_prints_versions(capsys):
    device = helpers.setup(seed=3)
    first = (random.random(), np.random.rand(), torch.rand(1).item())
    helpers.setup(seed=3, quiet=True)
    assert (random.random(), np.random.rand(), torch.rand(1).item()) == first
    assert torch.get_num_threads() == 1
    assert device.type in ("cpu", "cuda")
    out = capsys.readouterr().out
    assert f"torch {torch.__version__}" in out and "seed 3" in out


def test_fixture_errors_are_clear(tmp_path, monkeypatch):
    import helpers.data.common as common

    monkeypatch.setattr(common, "DATA_DIR", tmp_path)
    with pytest.raises(DataError, match="missing"):
        load_fixture("nope")
    (tmp_path / "fixtures").mkdir()
    (tmp_path / "fixtures" / "broken.json").write_text("{oops")
    with pytest.raises(DataError, match="corrupted"):
        load_fixture("broken")
    (tmp_path / "fixtures" / "ok.json").write_text(json.dumps({"x": [[1, 2]]}))
    assert load_fixture("ok") == {"x": [[1, 2]]}


def _course_module():
    spec = importlib.util.spec_from_file_location("course", ROOT / "course.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_course_install_is_skipped_when_nothing_changed(monkeypatch, capsys):
    course = _course_module()
    monkeypatch.setattr(course, "STAMP", ROOT / ".venv" / "__test_stamp__")
    monkeypatch.setattr(course, "PYTHON", ROOT / "course.py")  # any existing file
    course.STAMP.write_text(course._fingerprint())
    try:
        monkeypatch.setattr(course.subprocess, "run", lambda *a, **k: pytest.fail("pip must not run"))
        course.install()
        assert "up to date" in capsys.readouterr().out
    finally:
        course.STAMP.unlink()
    assert course.main(["bogus"]) == 2


def test_ci_runs_the_readme_test_command():
    ci = (ROOT / ".ci" / "run").read_text()
    readme = (ROOT / "README.md").read_text()
    assert "python3 course.py test" in ci and "python3 course.py test" in readme and "python3 course.py lab" in readme
    guides = "".join(p.read_text() for p in (ROOT / "docs" / "guide").glob("*.md"))
    assert "python3 course.py setups" in guides  # how an instructor tests the other CPU set-ups


def test_nbval_catches_a_number_that_drifted(tmp_path):
    """A committed output that no longer matches the code fails the suite (the sanitize file keeps numbers)."""
    cell = new_code_cell("print(f'{0.25 * 3:.4f} after 12 epochs')", execution_count=1)
    cell.outputs = [new_output("stream", name="stdout", text="0.7000 after 12 epochs\n")]
    path = tmp_path / "drift.ipynb"
    nbformat.write(new_notebook(cells=[cell], metadata={"kernelspec": KERNELSPEC}), path)
    cmd = [sys.executable, *"-m pytest -q -p no:cacheprovider -p no:xdist --nbval --nbval-current-env".split()]
    cmd += ["--nbval-sanitize-with", str(ROOT / "tests" / "sanitize.cfg"), str(path)]
    result = subprocess.run(cmd, capture_output=True, text=True, cwd=tmp_path, env={**os.environ, "OMP_NUM_THREADS": "1"})
    assert result.returncode == 1, result.stdout[-2000:]
    assert "0.7500" in result.stdout and "0.7000" in result.stdout


def test_committed_fixtures_are_what_their_generator_writes(tmp_path):
    subprocess.run([sys.executable, str(ROOT / "data" / "make_fixtures.py"), str(tmp_path)], check=True, capture_output=True)
    committed = sorted((ROOT / "data" / "fixtures").glob("*.json"))
    assert [p.name for p in committed] == sorted(p.name for p in tmp_path.glob("*.json"))
    for path in committed:
        differs = f"{path.name} differs from data/make_fixtures.py's output"
        assert (tmp_path / path.name).read_bytes() == path.read_bytes(), differs
