"""Write the instructor copy of the solution notebooks that nbgrader grades from.

    python -m helpers.grading                                   # every notebooks/solutions/NN_*.ipynb
    python -m helpers.grading 01_attention_shapes 02            # some (a name, its number, or a path)
    python -m helpers.grading --root /tmp/course 01             # another nbgrader course directory
    python -m helpers.grading --release                         # then `nbgrader generate_assignment` for each

Each solution notebook ``NN_topic.ipynb`` becomes the nbgrader assignment ``NN_topic``, in
``<root>/source/NN_topic/NN_topic.ipynb`` (``root`` is the git-ignored ``grading/`` by default), with nbgrader's cell
metadata (schema 3) added and nothing else changed:

- the exercise cell (``### BEGIN SOLUTION``): a solution cell, ``grade_id`` ``answer_<topic>``;
- the check cell after it: an autograded test cell, ``grade_id`` ``check_<topic>`` (the check's own name), 1 point,
  whose course code is framed by two hidden-test parts (``helpers.grading.recording`` and ``helpers.grading.passed``);
- every other cell: read-only (locked), ``grade_id`` ``cell-<cell id>``.

A malformed notebook (markers the student generator refuses, an exercise whose next code cell is not a check cell, a
check that ``helpers.checks`` does not export) stops the build with the notebook and cell named.
"""

from __future__ import annotations

import argparse
import ast
import os
import re
import subprocess
import sys
from pathlib import Path

import nbformat

from helpers.authoring.student import SOLUTIONS_DIR, MarkerError, student_source
from helpers.runtime.session import ROOT

__all__ = [
    "GRADING_DIR",
    "GradingError",
    "graded_check_source",
    "instructor_notebook",
    "main",
    "release",
    "resolve",
    "write_source",
]

#: nbgrader's course directory (git-ignored): source/, release/, submitted/, autograded/, feedback/, gradebook.db.
GRADING_DIR = ROOT / "grading"
SCHEMA_VERSION = 3
POINTS = 1
BEGIN_HIDDEN = "### BEGIN HIDDEN TESTS"
_BEGIN_SOLUTION = re.compile(r"^\s*###\s*BEGIN\s+SOLUTION\b", re.MULTILINE)
END_HIDDEN = "### END HIDDEN TESTS"


class GradingError(ValueError):
    """A solution notebook cannot be turned into an nbgrader assignment; the message names the notebook and cell."""


def _meta(grade_id: str, *, solution: bool = False, grade: bool = False, locked: bool = False) -> dict:
    meta = {
        "grade": grade,
        "grade_id": grade_id,
        "locked": locked,
        "schema_version": SCHEMA_VERSION,
        "solution": solution,
        "task": False,
    }
    if grade:
        meta["points"] = POINTS
    return meta


def _where(nb_name: str, index: int, cell: dict) -> str:
    first = next((line.strip() for line in cell.get("source", "").splitlines() if line.strip()), "")
    return f"{nb_name}, cell {index} (id {cell.get('id', '?')}, starting {first[:50]!r})"


def _check_calls(source: str, where: str) -> list[str]:
    """The names of the ``check_*`` functions a check cell calls, in order, each once."""
    try:
        tree = ast.parse(source)
    except SyntaxError as err:
        raise GradingError(f"{where}: the check cell is not valid Python ({err.msg}, line {err.lineno})") from None
    names: list[str] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id.startswith("check_"):
            if node.func.id not in names:
                names.append(node.func.id)
    return names


def graded_check_source(source: str, checks: list[str]) -> str:
    """The check cell with its hidden tests: record each check before the course's code, require a pass after it."""
    before = [BEGIN_HIDDEN, "import helpers.grading", ""]
    before += [f'{name} = helpers.grading.recording("{name}")' for name in checks]
    after = [BEGIN_HIDDEN, *(f"{name} = helpers.grading.passed({name})" for name in checks), END_HIDDEN]
    return "\n".join([*before, END_HIDDEN, source, *after])


def _known_checks() -> set[str]:
    import helpers.checks

    return {name for name in helpers.checks.__all__ if name.startswith("check_")}


def instructor_notebook(
    solution: nbformat.NotebookNode, nb_name: str, known_checks: set[str] | None = None
) -> nbformat.NotebookNode:
    """The instructor copy of one solution notebook, with nbgrader's metadata (a new object; the input is untouched)."""
    known = _known_checks() if known_checks is None else known_checks
    nb = nbformat.from_dict(solution)
    cells = nb.cells
    exercise_of: dict[int, int] = {}  # check cell index -> exercise cell index
    for index, cell in enumerate(cells):
        if cell.cell_type != "code":
            continue
        where = _where(nb_name, index, cell)
        try:
            student_source(cell.source, where)  # the markers are well formed (the student generator's rules)
        except MarkerError as err:
            raise GradingError(str(err)) from None
        if not _BEGIN_SOLUTION.search(cell.source):
            continue
        following = next((i for i in range(index + 1, len(cells)) if cells[i].cell_type == "code"), None)
        if following is None or _BEGIN_SOLUTION.search(cells[following].source):
            raise GradingError(f"{where}: an exercise cell must be followed by its check cell (a code cell without markers)")
        exercise_of[following] = index
    used: set[str] = set()
    for check_index, exercise_index in exercise_of.items():
        check_cell, exercise_cell = cells[check_index], cells[exercise_index]
        where = _where(nb_name, check_index, check_cell)
        checks = _check_calls(check_cell.source, where)
        if not checks:
            raise GradingError(f"{where}: the cell after an exercise must call its check (a `check_...` function)")
        unknown = [name for name in checks if name not in known]
        if unknown:
            raise GradingError(f"{where}: {', '.join(unknown)} is not exported by helpers.checks, so it cannot be graded")
        topic = checks[0].removeprefix("check_")
        suffix, number = "", 1
        while f"check_{topic}{suffix}" in used:
            number += 1
            suffix = f"_{number}"
        used.add(f"check_{topic}{suffix}")
        exercise_cell.metadata["nbgrader"] = _meta(f"answer_{topic}{suffix}", solution=True)
        check_cell.metadata["nbgrader"] = _meta(f"check_{topic}{suffix}", grade=True, locked=True)
        check_cell.source = graded_check_source(check_cell.source, checks)
    for index, cell in enumerate(cells):
        if "nbgrader" not in cell.metadata:
            cell.metadata["nbgrader"] = _meta(f"cell-{cell.get('id') or index}", locked=True)
    nbformat.validate(nb)
    return nb


def resolve(names: list[str]) -> list[Path]:
    """Solution notebooks named by path, file name, stem or number (``01``); all of them for an empty list."""
    available = sorted(SOLUTIONS_DIR.glob("[0-9][0-9]_*.ipynb"))
    if not names:
        return available
    paths = []
    for name in names:
        candidate = Path(name)
        if candidate.suffix == ".ipynb" and candidate.exists():
            paths.append(candidate.resolve())
            continue
        matches = [p for p in available if name in (p.name, p.stem, p.stem[:2])]
        if len(matches) != 1:
            choices = ", ".join(p.stem for p in available)
            raise GradingError(f"no solution notebook is named {name!r}; choose from: {choices}")
        paths.append(matches[0])
    return paths


def write_source(paths: list[Path] | None = None, root: Path = GRADING_DIR) -> list[Path]:
    """Write ``<root>/source/NN_topic/NN_topic.ipynb`` for each solution notebook; returns the written paths."""
    known = _known_checks()
    written = []
    for path in paths if paths is not None else resolve([]):
        try:
            solution = nbformat.read(path, as_version=4)
        except Exception as err:  # unreadable JSON or not a notebook
            raise GradingError(f"{path.name}: cannot read the notebook ({type(err).__name__}: {err})") from None
        nb = instructor_notebook(solution, path.name, known)
        target = root / "source" / path.stem / path.name
        target.parent.mkdir(parents=True, exist_ok=True)
        nbformat.write(nb, target)
        written.append(target)
    return written


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m helpers.grading", description="Write nbgrader's instructor copy of the solution notebooks."
    )
    parser.add_argument("notebooks", nargs="*", help="notebooks by path, name or number (default: all)")
    parser.add_argument("--root", type=Path, default=GRADING_DIR, help="nbgrader's course directory (default: grading/)")
    parser.add_argument("--release", action="store_true", help="then run `nbgrader generate_assignment` on each (release/)")
    args = parser.parse_args(argv)
    root = args.root.resolve()
    try:
        written = write_source(resolve(args.notebooks), root)
    except GradingError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    for path in written:
        rel = path.relative_to(ROOT) if path.is_relative_to(ROOT) else path
        print(f"wrote: {rel}")
    if args.release:
        return release([path.parent.name for path in written], root)
    return 0


def release(assignments: list[str], root: Path = GRADING_DIR) -> int:
    """``nbgrader generate_assignment`` on each assignment, from the repository root (so with nbgrader_config.py)."""
    for name in assignments:
        command = [sys.executable, "-m", "nbgrader", "generate_assignment", name, "--force", f"--CourseDirectory.root={root}"]
        code = subprocess.call(command, cwd=ROOT, env={**os.environ, "OMP_NUM_THREADS": "1"})
        if code != 0:
            print(f"error: nbgrader generate_assignment {name} failed (exit {code}); see its messages above", file=sys.stderr)
            return 1
        print(f"released: {name} (the student version is in {root / 'release' / name})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
