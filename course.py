#!/usr/bin/env python3
"""The course's two set-up commands, for a fresh machine with Python 3.11 or newer.

    python3 course.py lab     # make .venv, install the pinned versions, open Jupyter Lab on notebooks/
    python3 course.py test    # same install, then the whole test suite (unit tests + every notebook)

Both are safe to run twice: the install is skipped while requirements.txt and
pyproject.toml are unchanged. Extra arguments after ``test`` go to pytest
(``python3 course.py test -k softmax``).
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
import venv
from pathlib import Path

ROOT = Path(__file__).resolve().parent
VENV = ROOT / ".venv"
BIN = VENV / ("Scripts" if os.name == "nt" else "bin")
PYTHON = BIN / ("python.exe" if os.name == "nt" else "python")
STAMP = VENV / ".course-install-stamp"

# pytest for the whole suite: unit tests, then nbval on every notebook (solutions strictly compared,
# student versions run top to bottom), two workers with a notebook never split across them.
PYTEST_ARGS = [
    "-m", "pytest", "tests", "notebooks",
    "--nbval", "--nbval-current-env", "--nbval-sanitize-with", "tests/sanitize.cfg",
    "-n", "2", "--dist", "loadfile", "-p", "no:cacheprovider", "--durations", "12",
]


def _fingerprint() -> str:
    digest = hashlib.sha256(sys.version.encode())
    for name in ("requirements.txt", "pyproject.toml"):
        digest.update((ROOT / name).read_bytes())
    return digest.hexdigest()


def install() -> None:
    """Create .venv and install the pinned requirements and the helpers package, unless already done."""
    if PYTHON.exists() and STAMP.exists() and STAMP.read_text() == _fingerprint():
        print("course: environment up to date (.venv)", flush=True)
        return
    if sys.version_info < (3, 10):
        sys.exit(f"course: Python 3.10 or newer is needed, this is {sys.version.split()[0]}")
    if not PYTHON.exists():
        print("course: creating .venv", flush=True)
        venv.create(VENV, with_pip=True)
    print("course: installing requirements.txt and the helpers package (a few minutes the first time)", flush=True)
    pip = [str(PYTHON), "-m", "pip", "install", "-q", "--disable-pip-version-check"]
    subprocess.run([*pip, "-r", str(ROOT / "requirements.txt")], check=True)
    subprocess.run([*pip, "--no-deps", "-e", str(ROOT)], check=True)
    STAMP.write_text(_fingerprint())


def main(argv: list[str]) -> int:
    if not argv or argv[0] not in ("lab", "test", "install"):
        print(__doc__)
        return 2
    try:
        install()
    except subprocess.CalledProcessError as err:
        print(f"course: installation failed ({err}); see the pip output above", file=sys.stderr)
        return 1
    env = {**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "PYTHONHASHSEED": "0"}
    if argv[0] == "lab":
        return subprocess.call([str(PYTHON), "-m", "jupyter", "lab", str(ROOT / "notebooks"), *argv[1:]], env=env)
    if argv[0] == "test":
        return subprocess.call([str(PYTHON), *PYTEST_ARGS, *argv[1:]], cwd=ROOT, env=env)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
