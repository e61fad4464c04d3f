"""The student's lab (``python3 course.py lab``) is a plain JupyterLab: nbgrader's parts are switched off there.

A real JupyterLab server is started on the course's environment with the configuration ``course.py lab`` gives it,
and asked what it serves; the same server without it is the control (nbgrader is installed for instructors).
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from helpers import ROOT

_spec = importlib.util.spec_from_file_location("course", ROOT / "course.py")
course = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(course)

TOKEN = "course-test-token"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _get(url: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, timeout=10) as answer:
            return answer.status, answer.read().decode()
    except urllib.error.HTTPError as err:
        return err.code, ""


def _serve(workspace: Path, env: dict[str, str], log: Path) -> tuple[subprocess.Popen, str]:
    port = _free_port()
    command = [sys.executable, "-m", "jupyter", "lab", str(workspace), "--no-browser", f"--port={port}"]
    command += [f"--IdentityProvider.token={TOKEN}", "--ServerApp.open_browser=False", "--allow-root"]
    server = subprocess.Popen(command, env=env, stdout=log.open("w"), stderr=subprocess.STDOUT)
    base = f"http://127.0.0.1:{port}"
    for _ in range(120):
        if server.poll() is not None:
            raise AssertionError(f"jupyter lab exited with {server.returncode}: {log.read_text()[-2000:]}")
        try:
            if _get(f"{base}/api/status?token={TOKEN}")[0] == 200:
                return server, base
        except OSError:
            pass
        time.sleep(0.25)
    server.terminate()
    raise AssertionError(f"jupyter lab did not start: {log.read_text()[-2000:]}")


def _page_config(base: str) -> dict:
    status, html = _get(f"{base}/lab?token={TOKEN}")
    assert status == 200
    found = re.search(r'<script id="jupyter-config-data" type="application/json">(.*?)</script>', html, re.S)
    assert found, "the lab page carries no page configuration"
    return json.loads(found.group(1))


def _look(tmp_path: Path, student: bool) -> tuple[dict, int, str]:
    env = {k: v for k, v in os.environ.items() if k != "JUPYTER_CONFIG_PATH"}
    env["JUPYTER_RUNTIME_DIR"] = str(tmp_path / "runtime")
    if student:
        env["JUPYTER_CONFIG_PATH"] = str(course.student_jupyter_config())
    workspace = tmp_path / ("student" if student else "instructor")
    workspace.mkdir()
    log = tmp_path / f"{workspace.name}.log"
    server, base = _serve(workspace, env, log)
    try:
        page = _page_config(base)
        formgrader = _get(f"{base}/formgrader?token={TOKEN}")[0]
        for plugin in ("@jupyterlab/notebook-extension:tracker", "@jupyterlab/apputils-extension:notification"):
            status, text = _get(f"{base}/lab/api/settings/{plugin}?token={TOKEN}")
            assert status == 200, plugin
            properties = json.loads(text)["schema"]["properties"]  # with the lab's overrides as defaults
            page[plugin] = {name: spec.get("default") for name, spec in properties.items()}  # what a learner starts with
    finally:
        server.terminate()
        server.wait(timeout=30)
    return page, formgrader, log.read_text()


@pytest.mark.skipif(not (course.VENV / "etc" / "jupyter").is_dir(), reason="needs the course's .venv (course.py install)")
def test_the_students_lab_has_no_nbgrader_and_logs_no_error(tmp_path):
    page, formgrader, log = _look(tmp_path, student=True)
    assert "@jupyter/nbgrader" in page.get("disabledExtensions", []), page.get("disabledExtensions")
    assert formgrader == 404, "nbgrader's formgrader is served in the student's lab"
    assert "nbgrader" not in log, [line for line in log.splitlines() if "nbgrader" in line]
    errors = [line for line in log.splitlines() if re.match(r"\[E ", line)]
    assert not errors, errors
    assert page["@jupyterlab/notebook-extension:tracker"]["codeCellConfig"]["lineWrap"] is True  # no line cut at the edge
    assert page["@jupyterlab/apputils-extension:notification"]["fetchNews"] == "false"  # no news toast over the outputs


@pytest.mark.skipif(not (course.VENV / "etc" / "jupyter").is_dir(), reason="needs the course's .venv (course.py install)")
def test_without_the_students_configuration_nbgrader_is_there(tmp_path):
    """The control: the environment does have nbgrader, for the instructor's own `.venv/bin/jupyter lab`."""
    page, formgrader, log = _look(tmp_path, student=False)
    assert "@jupyter/nbgrader" not in page.get("disabledExtensions", [])
    assert page["@jupyterlab/notebook-extension:tracker"]["codeCellConfig"]["lineWrap"] is False  # JupyterLab's default
    assert formgrader != 404 and "nbgrader.server_extensions.formgrader" in log
