"""The GitHub workflows, checked here since they cannot run here.

Validation against the GitHub workflow schema (check-jsonschema's copy of SchemaStore's, shipped in the package, so no
network) catches a misspelt key or a wrong type; the tests below hold what a fork relies on: a pip cache, the supported
Pythons, a lower-bounds job, a weekly job on the newest releases, manual runs, one run per change, least permissions.
"""

from __future__ import annotations

import re
import subprocess
import sys

import pytest

from helpers import ROOT

yaml = pytest.importorskip("yaml")

WORKFLOWS = sorted((ROOT / ".github" / "workflows").glob("*.yml"))


def _validate(*paths) -> subprocess.CompletedProcess:
    cmd = [sys.executable, "-m", "check_jsonschema", "--builtin-schema", "vendor.github-workflows", *map(str, paths)]
    return subprocess.run(cmd, capture_output=True, text=True)


def _load(name: str) -> dict:
    workflow = yaml.safe_load((ROOT / ".github" / "workflows" / name).read_text())
    workflow["on"] = workflow.pop(True, workflow.get("on"))  # YAML 1.1 reads the key `on` as True
    return workflow


def _steps(job: dict, uses: str) -> list[dict]:
    return [step for step in job["steps"] if step.get("uses", "").startswith(uses)]


def test_workflows_are_valid(tmp_path):
    """One run of the validator (a few seconds): our workflows pass, and a broken one beside them is caught."""
    pytest.importorskip("check_jsonschema", reason="check-jsonschema is installed from requirements.txt")
    assert {p.name for p in WORKFLOWS} == {"ci.yml", "weekly.yml", "pages.yml"}  # pages.yml: tests/test_site.py
    broken = tmp_path / "broken.yml"
    broken.write_text("name: x\non: push\njobs:\n  a:\n    runs-on: ubuntu-latest\n    stepz:\n      - run: echo\n")
    result = _validate(*WORKFLOWS, broken)
    report = result.stdout + result.stderr
    assert result.returncode == 1 and "broken.yml::" in report, report  # the validator does catch a misspelt key
    assert not [p.name for p in WORKFLOWS if f"{p.name}::" in report], report


@pytest.mark.parametrize("name", ["ci.yml", "weekly.yml"])
def test_every_workflow_is_manual_least_privilege_cancellable_cached(name):
    workflow = _load(name)
    assert "workflow_dispatch" in workflow["on"]
    assert workflow["permissions"] == {"contents": "read"}
    assert workflow["concurrency"]["cancel-in-progress"] is True and "${{" in workflow["concurrency"]["group"]
    for job_name, job in workflow["jobs"].items():
        assert job.get("timeout-minutes", 360) <= 60, job_name
        (checkout,) = _steps(job, "actions/checkout@")
        assert checkout["with"]["persist-credentials"] is False, job_name
        (python,) = _steps(job, "actions/setup-python@")
        assert python["with"]["cache"] == "pip" and "requirements.txt" in python["with"]["cache-dependency-path"], job_name
        assert any(step.get("run") == "bash .ci/run" for step in job["steps"]), f"{job_name} must run the README's test command"


def test_pull_requests_run_once():
    on = _load("ci.yml")["on"]
    assert "pull_request" in on and on["push"] == {"branches": ["main"]}


def test_ci_covers_the_supported_pythons_and_the_lower_bounds():
    jobs = _load("ci.yml")["jobs"]
    pythons = jobs["test"]["strategy"]["matrix"]["python"]
    claimed = re.search(r"Python (3\.\d+) or newer", (ROOT / "requirements.txt").read_text()).group(1)
    assert claimed == "3.11" and claimed in pythons  # the oldest the pinned versions install on
    assert "3.12" in pythons  # Colab's
    assert max(pythons, key=lambda v: tuple(map(int, v.split(".")))) >= "3.14"
    lower = jobs["lower-bounds"]
    requires = re.search(r'requires-python = ">=(3\.\d+)"', (ROOT / "pyproject.toml").read_text()).group(1)
    assert _steps(lower, "actions/setup-python@")[0]["with"]["python-version"] == requires
    assert [s for s in lower["steps"] if s.get("run") == "bash .ci/run"][0]["env"] == {"COURSE_DEPS": "lower-bounds"}


def test_weekly_job_runs_the_newest_releases():
    workflow = _load("weekly.yml")
    assert workflow["on"]["schedule"] and set(workflow["on"]) == {"schedule", "workflow_dispatch"}
    for job in workflow["jobs"].values():
        assert [s for s in job["steps"] if s.get("run") == "bash .ci/run"][0]["env"] == {"COURSE_DEPS": "newest"}
        assert "3.x" in job["strategy"]["matrix"]["python"]
