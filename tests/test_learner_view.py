"""What a learner reads is the idea: the targets of DESIGN.md's "What the learner reads", per notebook.

Measured on the committed solution notebooks (their outputs are what a learner's run prints, and the student
notebooks are generated from them cell for cell):

- verification lines (claim and check verdicts, summaries, version lines, tolerance confirmations) at most 10% of the
  output lines; claim-stating code at most 5% of the visible code lines, and every claim cell collapsed (``# @title``)
  with at most one line of output;
- no test-harness words in what a learner reads (markdown, visible code) outside the collapsed setup cell;
- no markdown cell over 250 words (the answers of "Check your understanding" aside);
- the first figure within the first 600 words;
- a collapsible hint on every exercise, no exercise over 12 lines of solution code, at least four exercises in every
  notebook from 03 on.
"""

from __future__ import annotations

import ast
import re

import nbformat
import pytest

from helpers import ROOT
from helpers.authoring.student import TITLE

SOLUTIONS = sorted((ROOT / "notebooks" / "solutions").glob("[0-9][0-9]_*.ipynb"))
IDS = [p.stem[:2] for p in SOLUTIONS]

HARNESS = re.compile(
    r"nbval|smoke|capped\(|COURSE_[A-Z_]+|CPU set-ups?|test suite|\(checked|checked\)|checked;|in our runs"
    r"|by the tests|the tests compare|compared on every run|make bench|benchmarks/|unrecorded\(|recipe search",
    re.IGNORECASE,
)
#: The one place where provenance belongs: a folded note, ``<details><summary>How these numbers were measured``.
PROVENANCE = re.compile(r"<details>\s*<summary>\s*How these numbers were measured.*?</details>", re.IGNORECASE | re.DOTALL)
VERIFICATION = re.compile(
    r"^\s*(✔|✅|❌|⏳|⚠|◌)|ExerciseFailed|ClaimFailed|^Exercises?:|^No exercise was checked|^python 3\.\d+.*\| torch"
    r"|-> the cells below use|\(atol\b|^matches |1e-\d+\b.*\b(True|False)\s*$|^\s*(True|False)\s*$|:\s*(True|False)\s*$"
)
CLAIM_CALL = re.compile(r"^(claims?|claim_at_least|claim_at_most|claim_between|claim_greater|claim_all_at_least)$")
EXERCISE_HEADING = re.compile(r"^#+\s*(?:\d+\.\s*)?Exercise\b", re.MULTILINE)
HINT = re.compile(r"<details>\s*<summary>[^<]*hint", re.IGNORECASE)
SOLUTION_BLOCK = re.compile(r"### BEGIN SOLUTION\n(.*?)### END SOLUTION", re.DOTALL)

MAX_VERIFICATION, MAX_CLAIM_CODE, MAX_WORDS, FIRST_FIGURE_WORDS, MAX_SOLUTION_LINES, MIN_EXERCISES = 0.10, 0.05, 250, 600, 12, 4


def _cells(path):
    return nbformat.read(path, as_version=4).cells


def _hidden(cell) -> bool:
    return cell.cell_type == "code" and cell.source.startswith(TITLE)


def _output_lines(cell) -> list[str]:
    lines: list[str] = []
    for out in cell.get("outputs", []):
        if out.output_type == "stream":
            lines += out.text.splitlines()
        elif out.output_type == "error":
            lines.append(out.ename)
        elif "image/png" not in out.get("data", {}):
            lines += str(out.get("data", {}).get("text/plain", "")).splitlines()
    return [line for line in lines if line.strip()]


def _words(markdown: str) -> int:
    return len(re.sub(r"<[^>]+>", " ", markdown).split())


def _claim_lines(source: str) -> int:
    """Lines of the statements in ``source`` that call a claim function (a multi-line call counts whole)."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return 0
    lines: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.stmt) and not isinstance(node, (ast.With, ast.If, ast.For, ast.FunctionDef)):
            calls = [n for n in ast.walk(node) if isinstance(n, ast.Call)]
            names = [getattr(c.func, "id", getattr(c.func, "attr", "")) for c in calls]
            if any(CLAIM_CALL.match(name or "") for name in names):
                lines.update(range(node.lineno, (node.end_lineno or node.lineno) + 1))
    return len(lines)


def _code_lines(source: str) -> list[str]:
    return [line for line in source.splitlines() if line.strip() and not line.strip().startswith("#")]


@pytest.mark.parametrize("path", SOLUTIONS, ids=IDS)
def test_verification_is_at_most_a_tenth_of_the_output(path):
    lines = [line for cell in _cells(path) if cell.cell_type == "code" for line in _output_lines(cell)]
    verification = [line for line in lines if VERIFICATION.search(line)]
    share = len(verification) / max(len(lines), 1)
    assert share <= MAX_VERIFICATION, f"{len(verification)} of {len(lines)} output lines are verification ({share:.0%})"


@pytest.mark.parametrize("path", SOLUTIONS, ids=IDS)
def test_claims_are_out_of_sight(path):
    cells = _cells(path)
    visible = claim = 0
    for index, cell in enumerate(cells):
        if cell.cell_type != "code":
            continue
        stated = _claim_lines(cell.source)
        if _hidden(cell):
            passing = [line for line in _output_lines(cell) if line.lstrip().startswith("✔")]
            assert len(passing) <= 1, f"cell {index}: a claim cell prints {len(passing)} lines; group them with claims(...)"
            continue
        visible += len(_code_lines(cell.source))
        claim += stated
    assert claim <= MAX_CLAIM_CODE * max(visible, 1), f"{claim} of {visible} visible code lines state claims"


@pytest.mark.parametrize("path", SOLUTIONS, ids=IDS)
def test_no_harness_words_where_a_learner_reads(path):
    found = []
    for index, cell in enumerate(_cells(path)):
        if cell.cell_type == "markdown" or not _hidden(cell):
            text = PROVENANCE.sub("", cell.source) if cell.cell_type == "markdown" else cell.source
            found += [f"cell {index}: {m.group(0)!r}" for m in HARNESS.finditer(text)]
    assert found == []


@pytest.mark.parametrize("path", SOLUTIONS, ids=IDS)
def test_markdown_cells_are_short(path):
    long = [
        f"cell {i}: {_words(c.source)} words"
        for i, c in enumerate(_cells(path))
        if c.cell_type == "markdown" and "check your understanding" not in c.source.lower() and _words(c.source) > MAX_WORDS
    ]
    assert long == []


@pytest.mark.parametrize("path", SOLUTIONS, ids=IDS)
def test_the_first_figure_comes_early(path):
    words = 0
    for cell in _cells(path):
        if cell.cell_type == "markdown":
            words += _words(cell.source)
        elif any("image/png" in out.get("data", {}) for out in cell.get("outputs", [])):
            assert words <= FIRST_FIGURE_WORDS, f"{words} words of prose before the first figure"
            return
    pytest.fail("no figure at all")


def _exercises(path) -> list[dict]:
    """Each exercise: its heading, whether a hint comes before its check, its solution blocks' code lines."""
    exercises: list[dict] = []
    for cell in _cells(path):
        if cell.cell_type == "markdown":
            for heading in EXERCISE_HEADING.finditer(cell.source):
                line = cell.source[heading.start() :].splitlines()[0]
                exercises.append({"title": line.strip("# "), "hint": False, "lines": [], "checked": False})
            if exercises and not exercises[-1]["checked"] and HINT.search(cell.source):
                exercises[-1]["hint"] = True
        elif exercises and not exercises[-1]["checked"]:
            exercises[-1]["lines"] += [len(_code_lines(block)) for block in SOLUTION_BLOCK.findall(cell.source)]
            if "check_" in cell.source and "### BEGIN SOLUTION" not in cell.source:
                exercises[-1]["checked"] = True
    return exercises


@pytest.mark.parametrize("path", SOLUTIONS, ids=IDS)
def test_every_exercise_has_a_hint_and_no_cliff(path):
    exercises = _exercises(path)
    assert [e["title"] for e in exercises if not e["hint"]] == [], "exercises without a <details><summary>Hint"
    long = [f"{e['title']}: {sum(e['lines'])} lines" for e in exercises if sum(e["lines"]) > MAX_SOLUTION_LINES]
    assert long == [], f"exercises over {MAX_SOLUTION_LINES} lines of solution code"


@pytest.mark.parametrize("path", [p for p in SOLUTIONS if int(p.name[:2]) >= 3], ids=[i for i in IDS if int(i) >= 3])
def test_at_least_four_exercises(path):
    exercises = _exercises(path)
    assert len(exercises) >= MIN_EXERCISES, f"{len(exercises)} exercises: {[e['title'] for e in exercises]}"
