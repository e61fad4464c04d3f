#!/usr/bin/env python3
"""The course's two set-up commands, for a fresh machine with Python 3.11 or newer.

    python3 course.py lab     # make .venv, install the pinned versions, open Jupyter Lab on notebooks/
    python3 course.py test    # same install, then the whole test suite (unit tests + every notebook)

Both are safe to run twice: the install is skipped while requirements.txt and
pyproject.toml are unchanged.

``test`` runs the whole suite natively, then the solution notebooks once more
under a second CPU set-up (PyTorch's portable ``default`` kernels and MKL's
compatible mode), so that a compared output which only this CPU prints fails
here, not on a student's laptop. Options:

    python3 course.py test -k softmax        # extra arguments go to pytest (native pass only)
    python3 course.py test --setup avx2      # the whole suite under one set-up: native, avx2 or default
    python3 course.py setups                 # the solution notebooks under every set-up, one after another
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
SOLUTIONS = "notebooks/solutions"

# CPU set-ups under which every compared output must be identical (../DESIGN.md, section 7). PyTorch picks its
# CPU kernels by instruction set, and MKL its code path, so the same seeded code prints other low-order digits
# on another CPU; forcing the choice reproduces that on one machine. On a CPU without AVX2, "avx2" falls back.
SETUPS: dict[str, dict[str, str]] = {
    "native": {},
    "avx2": {"ATEN_CPU_CAPABILITY": "avx2"},
    "default": {"ATEN_CPU_CAPABILITY": "default", "MKL_CBWR": "COMPATIBLE"},
}
SECOND_SETUP = "default"


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


def run_pytest(env: dict[str, str], setup: str, args: list[str]) -> int:
    """pytest under one CPU set-up; exit code 5 (nothing collected, e.g. a -k that matches no notebook) counts as passed."""
    print(f"course: pytest under the {setup!r} CPU set-up {SETUPS[setup] or ''}".rstrip(), flush=True)
    code = subprocess.call([str(PYTHON), *args], cwd=ROOT, env={**env, **SETUPS[setup]})
    return 0 if code == 5 else code


def test(env: dict[str, str], argv: list[str]) -> int:
    """The whole suite natively, then the solution notebooks under SECOND_SETUP (or everything under --setup NAME)."""
    if argv[:1] == ["--setup"]:
        if len(argv) < 2 or argv[1] not in SETUPS:
            print(f"course: --setup takes one of {', '.join(SETUPS)}", file=sys.stderr)
            return 2
        return run_pytest(env, argv[1], [*PYTEST_ARGS, *argv[2:]])
    code = run_pytest(env, "native", [*PYTEST_ARGS, *argv])
    if argv:  # a selection (-k, a path): the native pass only
        return code
    notebooks_only = [a for a in PYTEST_ARGS if a not in ("tests", "notebooks")] + [SOLUTIONS]
    second = run_pytest(env, SECOND_SETUP, notebooks_only)
    if code or second:
        print(f"course: FAILED (native pass exit {code}, {SECOND_SETUP!r} pass exit {second})", file=sys.stderr)
    return code or second


def setups(env: dict[str, str], argv: list[str]) -> int:
    """The solution notebooks under every CPU set-up; a summary line per set-up."""
    notebooks_only = [a for a in PYTEST_ARGS if a not in ("tests", "notebooks")] + [SOLUTIONS, *argv]
    codes = {name: run_pytest(env, name, notebooks_only) for name in SETUPS}
    for name, code in codes.items():
        print(f"course: {name:<8} {'passed' if code == 0 else f'FAILED (exit {code})'}")
    return max(codes.values())


def main(argv: list[str]) -> int:
    if not argv or argv[0] not in ("lab", "test", "setups", "install"):
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
        return test(env, argv[1:])
    if argv[0] == "setups":
        return setups(env, argv[1:])
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
