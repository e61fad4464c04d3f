"""Conventions every notebook keeps (nbval itself executes them: see course.py's test command)."""

from __future__ import annotations

import re

import nbformat
import pytest
from IPython.core.inputtransformer2 import TransformerManager

from helpers import ROOT
from helpers.authoring.student import SETUP_CELL, student_path

SOLUTIONS = sorted((ROOT / "notebooks" / "solutions").glob("[0-9][0-9]_*.ipynb"))
STUDENTS = [student_path(p) for p in SOLUTIONS]
IDS = [p.stem for p in SOLUTIONS]
MARKER = re.compile(r"NBVAL_\w+")
#: nbval's cell tags (metadata, invisible to a reader), which the notebooks use instead of its comment markers.
NBVAL_TAGS = {"nbval-ignore-output", "nbval-skip", "nbval-check-output", "raises-exception"}


def _read(path):
    return nbformat.read(path, as_version=4)


def _code(nb):
    return [c for c in nb.cells if c.cell_type == "code"]


def test_there_are_notebooks_and_a_student_copy_for_each():
    assert SOLUTIONS, "no solution notebooks found"
    missing = [p.name for p in STUDENTS if not p.exists()]
    assert not missing, f"student notebooks missing (run python -m helpers.authoring.student): {missing}"
    extra = {p.name for p in (ROOT / "notebooks").glob("*.ipynb")} - {p.name for p in STUDENTS}
    assert not extra, f"student notebooks without a solution: {sorted(extra)}"


@pytest.mark.parametrize("path", SOLUTIONS, ids=IDS)
def test_solution_notebook_conventions(path):
    nb = _read(path)
    nbformat.validate(nb)
    first = nb.cells[0]
    assert first.cell_type == "markdown" and first.source.startswith(f"# {path.name[:2]}"), "first cell: '# NN · Title'"
    for needed in ("colab-badge.svg", f"notebooks/solutions/{path.name}", "learn", "Prerequisites", "Time"):
        assert needed.lower() in first.source.lower(), f"first markdown cell lacks {needed!r}"
    code = _code(nb)
    assert code[0].source == SETUP_CELL, "the first code cell must be helpers.authoring.student.SETUP_CELL"
    assert "nbval-ignore-output" in code[1].metadata.get("tags", []) and "helpers.setup(" in code[1].source
    assert nb.metadata.get("kernelspec", {}).get("name") == "python3"


@pytest.mark.parametrize("path", SOLUTIONS, ids=IDS)
def test_solution_notebook_is_fully_executed_and_every_check_passes(path):
    nb = _read(path)
    for index, cell in enumerate(_code(nb)):
        if not cell.source.strip():
            continue
        assert cell.execution_count is not None, (
            f"code cell {index} was never executed: run python -m helpers.authoring.execute {path.name}"
        )
        for output in cell.outputs:
            text = output.get("text", "") + str(output.get("data", {}).get("text/plain", ""))
            demo = "(...)" in cell.source  # a cell that shows the notice on purpose, check(...)
            assert demo or "not attempted yet" not in text, f"code cell {index}: a check reports 'not attempted' in the solution"
            assert output.output_type != "error" or "raises-exception" in cell.metadata.get("tags", []), (
                f"code cell {index} raised"
            )
            assert not re.search(r"<matplotlib\.\w+\.\w+ (at|object at) 0x", text), (
                f"code cell {index} shows a matplotlib repr: end it with plt.show()"
            )
            assert "image/svg+xml" not in output.get("data", {}), f"code cell {index} has an SVG output (nbval cannot compare it)"


@pytest.mark.parametrize("path", SOLUTIONS + STUDENTS, ids=[f"solution-{i}" for i in IDS] + [f"student-{i}" for i in IDS])
def test_test_plumbing_stays_out_of_sight(path):
    """nbval's markers are cell tags (metadata), never comments a learner reads in the code or on the website."""
    for index, cell in enumerate(_read(path).cells):
        assert not MARKER.search(cell.source), f"cell {index}: an NBVAL_ comment; use nbval's cell tag instead"
        tags = cell.metadata.get("tags", [])
        unknown = [t for t in tags if t.startswith("nbval") and t not in NBVAL_TAGS]
        assert not unknown, f"cell {index}: {unknown} is not a tag nbval knows ({sorted(NBVAL_TAGS)})"


@pytest.mark.parametrize("path", STUDENTS, ids=IDS)
def test_student_notebook_has_no_solution_no_output_and_compiles(path):
    nb = _read(path)
    transform = TransformerManager().transform_cell
    exercises = 0
    for index, cell in enumerate(nb.cells):
        assert "BEGIN SOLUTION" not in cell.source and "END SOLUTION" not in cell.source, f"cell {index} holds a solution"
        if cell.cell_type != "code":
            continue
        assert cell.outputs == [] and cell.execution_count is None, f"code cell {index} has outputs"
        compile(transform(cell.source), f"{path.name}[{index}]", "exec")
        exercises += cell.source.count('NotImplementedError("Exercise') + cell.source.count("# YOUR ANSWER HERE")
    assert exercises > 0, "a student notebook without any exercise"


def test_readme_lists_every_notebook_with_a_colab_link():
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    for path in STUDENTS:
        assert f"notebooks/{path.name}" in readme, f"README's course map lacks {path.name}"


@pytest.mark.parametrize("path", SOLUTIONS, ids=IDS)
def test_a_notebook_with_exercises_ends_with_their_summary(path):
    """A wrong or unfinished exercise is shown in its check cell and again at the end (helpers.checks.summary)."""
    code = _code(_read(path))
    assert code[-1].source.rstrip().endswith("summary()"), "the last code cell must call helpers.checks.summary()"
    text = "".join(o.get("text", "") for o in code[-1].outputs)
    # summary() prints one line when every exercise is correct ("✅ All 4 exercises correct."), else a count per verdict
    first = text.splitlines()[0] if text else ""
    every_one_correct = re.fullmatch(r"✅ (All \d+ exercises correct|The exercise is correct)\.", first)
    assert every_one_correct or (first.startswith("Exercises: ") and " 0 wrong, 0 not attempted." in first), text
