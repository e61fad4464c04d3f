"""Execute solution notebooks in place, so their committed outputs are current.

    python -m helpers.authoring.execute                                  # every notebooks/solutions/NN_*.ipynb
    python -m helpers.authoring.execute notebooks/solutions/01_*.ipynb   # some

Runs each notebook top to bottom in a fresh kernel of this environment, with one
thread (``OMP_NUM_THREADS=1``) so the printed numbers are the ones nbval will see, and
training claims held to account (``COURSE_STRICT_CLAIMS=1``, as in the suite),
and reports each notebook's wall time. Cell timing metadata is not recorded, so
re-executing an unchanged notebook gives an unchanged file. The notebook is saved
as JupyterLab would save it (``helpers.authoring.student.KERNELSPEC``, the kernel's
``language_info``), so opening it does not change it, and without widget outputs:
their state is not stored, so they would show only a frozen text (a tqdm bar at 0%).
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

import nbformat
from nbclient import NotebookClient
from nbclient.exceptions import CellExecutionError

from helpers.authoring.student import normalise_notebook
from helpers.runtime.claims import STRICT_ENV
from helpers.runtime.session import ROOT

__all__ = ["execute_notebook", "main"]


def execute_notebook(path: Path, timeout: int = 600) -> float:
    """Execute ``path`` in place; returns the wall time in seconds."""
    os.environ["OMP_NUM_THREADS"] = "1"
    os.environ["PYTHONHASHSEED"] = "0"
    os.environ[STRICT_ENV] = "1"  # a training claim that misses fails the run, as in the suite (helpers.runtime.claims)
    nb = nbformat.read(path, as_version=4)
    client = NotebookClient(
        nb,
        timeout=timeout,
        kernel_name="python3",
        record_timing=False,
        store_widget_state=False,
        resources={"metadata": {"path": str(path.parent)}},
    )
    start = time.perf_counter()
    client.execute()
    seconds = time.perf_counter() - start
    nbformat.write(normalise_notebook(nb), path)
    return seconds


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m helpers.authoring.execute", description="Execute solution notebooks in place (one thread), outputs kept."
    )
    parser.add_argument("notebooks", nargs="*", type=Path, help="notebooks to run (default: all in notebooks/solutions/)")
    args = parser.parse_args(argv)
    paths = [p.resolve() for p in args.notebooks] or sorted((ROOT / "notebooks" / "solutions").glob("[0-9][0-9]_*.ipynb"))
    not_notebooks = [str(p) for p in paths if not p.is_file() or p.suffix != ".ipynb"]
    if not_notebooks:
        print(f"error: not a notebook file: {', '.join(not_notebooks)}", file=sys.stderr)
        return 2
    for path in paths:
        try:
            seconds = execute_notebook(path)
        except CellExecutionError as err:
            print(f"error: {path.name} failed:\n{err}", file=sys.stderr)
            return 1
        print(f"executed {path.relative_to(ROOT) if path.is_relative_to(ROOT) else path} in {seconds:.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
