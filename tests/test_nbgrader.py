"""Grading with real nbgrader: instructor copy, generate_assignment, submissions, autograde, the scores per exercise.

Notebooks 01 and 02 (the fastest) and 09 (its models train with the learner's code; the training runs are cut to a few
steps, ``COURSE_SMOKE_TEST=1``, which changes no score) go through nbgrader in a temporary course directory with the repository's own
nbgrader_config.py. Three students submit each: "blank" (the released notebook as it is), "wrong" (a typical mistake in
every exercise) and "right" (the solutions). nbgrader's gradebook must give 0, 0 and full marks, exercise by exercise,
and a failed exercise must fail its own check cell only: the notebook carries on with the reference.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from pathlib import Path

import nbformat
import pytest
from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook

from helpers import ROOT
from helpers.authoring.student import KERNELSPEC, SOLUTIONS_DIR, STUDENT_DIR
from helpers.grading import passed, recording
from helpers.grading.instructor import GradingError, instructor_notebook, resolve, write_source

pytest.importorskip("nbgrader", reason="nbgrader is installed from requirements.txt")

# 01 (value answers), 02 (functions) and 09, whose models train with the learner's code where it passed its check.
NOTEBOOKS = ["01_attention_shapes", "02_attention_by_hand", "09_translation_encoder_decoder"]
STUDENTS = ("blank", "wrong", "right")
TAMPERED, TAMPERED_CELL = ("02_attention_by_hand", "wrong"), "check_softmax"
BEGIN, END = "### BEGIN SOLUTION", "### END SOLUTION"

# A typical mistake per exercise, as (the text in the solution block, what the mistaken student wrote instead).
WRONG = {
    "answer_matmul_shape": ("product_shape = (3, 5)", "product_shape = (5, 3)"),  # the transpose
    "answer_row_layout_shapes": ("scores_shape = (3, 4)", "scores_shape = (4, 3)"),  # keys by queries
    "answer_column_layout_shapes": ("attn_shape_col = (6, 6)", "attn_shape_col = (768, 768)"),  # Q K^T copied literally
    "answer_attention_column_layout": ("dim=0", "dim=1"),  # softmax along the queries
    "answer_numerator_layout": ("scores_shape_nyu = (4, 3)", "scores_shape_nyu = (3, 4)"),  # the row layout's shape
    "answer_multi_head_shapes": ("d_k = 64", "d_k = 512"),  # d_model instead of d_model / heads
    "answer_split_heads": (
        "x.view(batch, n, num_heads, d_model // num_heads).transpose(1, 2)",
        "x.view(batch, num_heads, n, d_model // num_heads)",  # a view where a transpose is needed
    ),
    "answer_mha_parameter_count": ("4 * d_model if bias else 0", "0"),  # the biases forgotten
    "answer_projections": ("K = X @ W_k", "K = X @ W_q"),  # a copy-paste slip
    "answer_scores": ("dot_products / math.sqrt(Q.shape[-1])", "dot_products / Q.shape[-1]"),  # d_k, not its root
    "answer_spot_the_mistakes": ("scale_used = ", "scale_used = math.sqrt(Q.shape[-1])  # "),  # what the formula says
    "answer_softmax": ("exps.sum(dim=dim, keepdim=True)", "exps.sum(dim=0, keepdim=True)"),  # the wrong axis
    "answer_scaled_dot_product_attention": (" / math.sqrt(d_k)", ""),  # the scale forgotten
    "answer_shift_right": ("torch.cat([bos, tgt[:, :-1]], dim=1)", "torch.cat([bos, tgt[:, 1:]], dim=1)"),  # drops the first word
    "answer_source_padding_mask": ("(src != PAD)[:, None, :]", "(src != PAD)[:, :, None]"),  # a mask along the queries
    "answer_greedy_decode": ("model.decode(ys, state)[:, -1]", "model.decode(ys, state)[:, 0]"),  # the first position's logits
    "answer_additive_attention": (
        "torch.tanh(att.W1(h) + att.W2(s).unsqueeze(1))",
        "(att.W1(h) + att.W2(s).unsqueeze(1))",  # the tanh forgotten
    ),
    "answer_alignment_accuracy": ("hits[has_word].float().mean()", "hits.float().mean()"),  # und, <eos>, padding as misses
}


def _nbgrader(*args: str, root: Path) -> subprocess.CompletedProcess:
    # COURSE_SMOKE_TEST=1: 09's training runs take a few steps (helpers.runtime.smoke); a score depends on the checks only
    env = {**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "PYTHONHASHSEED": "0", "COURSE_SMOKE_TEST": "1"}
    command = [sys.executable, "-m", "nbgrader", *args, f"--CourseDirectory.root={root}"]
    start = time.perf_counter()
    result = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=900)
    print(f"nbgrader {' '.join(args)}: {time.perf_counter() - start:.1f} s")
    assert result.returncode == 0, result.stdout + result.stderr
    return result


def _grade_id(cell) -> str:
    return cell.metadata.get("nbgrader", {}).get("grade_id", "")


def _answer(source_cell, how: str) -> str:
    """The student's answer cell: the solution as it is, or with the exercise's typical mistake."""
    if how == "right":
        return source_cell.source
    old, new = WRONG[_grade_id(source_cell)]
    begin, end = source_cell.source.index(BEGIN), source_cell.source.index(END)
    block = source_cell.source[begin:end]
    assert old in block, f"{_grade_id(source_cell)}: {old!r} is no longer in the solution; update WRONG"
    return source_cell.source[:begin] + block.replace(old, new, 1) + source_cell.source[end:]


@pytest.fixture(scope="module")
def course(tmp_path_factory):
    """A course directory after generate_assignment and autograde of every student; the gradebook's scores."""
    from nbgrader.api import Gradebook

    root = tmp_path_factory.mktemp("nbgrader-course")
    write_source(resolve(NOTEBOOKS), root)
    plans: dict[tuple[str, str], dict[str, str]] = {}
    _nbgrader("generate_assignment", "*", "--force", root=root)  # every assignment in source/, in one process
    for name in NOTEBOOKS:
        source = nbformat.read(root / "source" / name / f"{name}.ipynb", as_version=4)
        by_id = {_grade_id(cell): cell for cell in source.cells}
        exercises = [_grade_id(c) for c in source.cells if c.metadata["nbgrader"]["solution"]]
        missing = [e for e in exercises if e not in WRONG]
        assert not missing, f"add a typical mistake for {missing} to WRONG"
        for student in STUDENTS:
            plan = dict.fromkeys(exercises, student)
            plans[(name, student)] = plan
            submission = nbformat.read(root / "release" / name / f"{name}.ipynb", as_version=4)
            for cell in submission.cells:
                how = plan.get(_grade_id(cell), "blank")
                if how != "blank":
                    cell.source = _answer(by_id[_grade_id(cell)], how)
            if (name, student) == TAMPERED:  # a student who rewrote a locked check cell: reported, restored, graded
                cell = next(c for c in submission.cells if _grade_id(c) == TAMPERED_CELL)
                cell.source = "passed = True  # the check, rewritten by the student"
            target = root / "submitted" / student / name / f"{name}.ipynb"
            target.parent.mkdir(parents=True)
            nbformat.write(submission, target)
    log = _nbgrader("autograde", "*", "--create", root=root)  # every submission of every assignment
    warnings = re.findall(r"Attribute '(\w+)' for cell (\w+) has changed", log.stdout + log.stderr)
    scores: dict[tuple[str, str], dict[str, tuple[float, float]]] = {}
    with Gradebook(f"sqlite:///{root / 'gradebook.db'}") as gradebook:
        for name in NOTEBOOKS:
            for student in STUDENTS:
                notebook = gradebook.find_submission_notebook(name, name, student)
                scores[(name, student)] = {g.name: (g.score, g.max_score) for g in notebook.grades if g.auto_score is not None}
    return root, plans, scores, warnings


def test_autograding_warns_only_about_a_cell_the_student_changed(course):
    """No false "checksum ... has changed" for every hidden-test cell (nbgrader issue #1961): the one rewritten cell only."""
    *_, warnings = course
    assert warnings == [("checksum", TAMPERED_CELL)]


@pytest.mark.parametrize(
    "student, verdict", [("blank", "VALIDATION FAILED"), ("right", "Success! Your notebook passes all the tests.")]
)
def test_validate_fails_a_blank_notebook_and_passes_a_right_one(course, student, verdict):
    """`nbgrader validate` says what autograding will: a blank exercise fails (COURSE_GRADING=1, nbgrader_config.py)."""
    root, *_ = course
    name = "02_attention_by_hand"  # functions as answers; no training
    result = subprocess.run(
        [sys.executable, "-m", "nbgrader", "validate", str(root / "submitted" / student / name / f"{name}.ipynb")],
        cwd=ROOT,
        env={**os.environ, "OMP_NUM_THREADS": "1"},
        capture_output=True,
        text=True,
        timeout=300,
    )
    out = result.stdout + result.stderr
    assert verdict in out, out[-3000:]
    if student == "blank":
        assert out.count("not attempted yet") >= 3, out[-3000:]  # each blank exercise, named


@pytest.mark.parametrize("name", NOTEBOOKS)
def test_the_released_notebook_is_the_course_student_notebook(course, name):
    """Stub for stub and badge for badge, so it runs top to bottom as the student notebook does (nbval checks that one)."""
    root, *_ = course
    released = nbformat.read(root / "release" / name / f"{name}.ipynb", as_version=4)
    student = nbformat.read(STUDENT_DIR / f"{name}.ipynb", as_version=4)
    assert [(c.cell_type, c.source) for c in released.cells] == [(c.cell_type, c.source) for c in student.cells]
    text = nbformat.writes(released)
    assert "HIDDEN TESTS" not in text and "helpers.grading" not in text and "notebooks/solutions/" not in text
    assert f"blob/main/notebooks/{name}.ipynb" in released.cells[0].source  # the Colab badge: the student notebook


@pytest.mark.parametrize("student", STUDENTS)
@pytest.mark.parametrize("name", NOTEBOOKS)
def test_scores_per_exercise(course, name, student):
    """Not attempted: 0. Wrong: 0. Right: full marks. Exercise by exercise, whatever the other answers are."""
    _, plans, scores, _ = course
    plan, got = plans[(name, student)], scores[(name, student)]
    expected = {answer.replace("answer_", "check_", 1): (1.0 if how == "right" else 0.0, 1.0) for answer, how in plan.items()}
    assert got == expected
    print(f"{name} {student}: {sum(s for s, _ in got.values()):g} / {sum(m for _, m in got.values()):g} points")


@pytest.mark.parametrize("student", ["blank", "wrong"])
@pytest.mark.parametrize("name", NOTEBOOKS)
def test_a_failed_exercise_fails_only_its_check_cell(course, name, student):
    """The notebook carries on with the reference: errors only in the check cells of the exercises that did not pass."""
    root, plans, *_ = course
    graded = nbformat.read(root / "autograded" / student / name / f"{name}.ipynb", as_version=4)
    failed = {}
    for cell in graded.cells:
        errors = [out for out in cell.get("outputs", []) if out.output_type == "error"]
        if errors:
            failed[_grade_id(cell)] = f"{errors[0].ename}: {errors[0].evalue}"
    plan = plans[(name, student)]
    assert set(failed) == {a.replace("answer_", "check_", 1) for a, how in plan.items() if how != "right"}, failed
    for grade_id, error in failed.items():
        how = plan[grade_id.replace("check_", "answer_", 1)]
        assert error.startswith("AssertionError") and "This exercise scores 0" in error, error
        assert ("a wrong answer" if how == "wrong" else "not attempted") in error, error


# --- the instructor copy, without nbgrader ------------------------------------------------------------------


def _notebook(*cells):
    return new_notebook(cells=list(cells), metadata={"kernelspec": KERNELSPEC})


EXERCISE = "def softmax(x, dim=-1):\n    ### BEGIN SOLUTION\n    return x.softmax(dim)\n    ### END SOLUTION"
CHECK = "if not check_softmax(softmax):\n    softmax = use_reference(helpers.attention.softmax)"


def test_instructor_copy_metadata_and_hidden_tests():
    nb = _notebook(
        new_markdown_cell("# T", id="intro"),
        new_code_cell(EXERCISE, id="ex"),
        new_markdown_cell("Check it:", id="md"),
        new_code_cell(CHECK, id="chk"),
    )
    copy = instructor_notebook(nb, "02_x.ipynb", {"check_softmax"})
    metas = [c.metadata["nbgrader"] for c in copy.cells]
    assert [(m["grade_id"], m["solution"], m["grade"], m["locked"]) for m in metas] == [
        ("cell-intro", False, False, True),
        ("answer_softmax", True, False, False),
        ("cell-md", False, False, True),
        ("check_softmax", False, True, True),
    ]
    assert metas[3]["points"] == 1 and copy.cells[1].source == EXERCISE
    hidden = re.findall(r"### BEGIN HIDDEN TESTS\n(.*?)### END HIDDEN TESTS", copy.cells[3].source, re.S)
    assert len(hidden) == 2 and 'recording("check_softmax")' in hidden[0] and "passed(check_softmax)" in hidden[1]
    visible = re.sub(r"### BEGIN HIDDEN TESTS\n.*?### END HIDDEN TESTS\n?", "", copy.cells[3].source, flags=re.S)
    assert visible.rstrip("\n") == CHECK
    assert "nbgrader" not in nb.cells[1].metadata  # the solution notebook is not modified


@pytest.mark.parametrize(
    "cells, phrase",
    [
        ([new_code_cell(EXERCISE, id="ex")], "followed by its check cell"),
        ([new_code_cell(EXERCISE, id="ex"), new_code_cell(EXERCISE, id="ex2")], "followed by its check cell"),
        ([new_code_cell(EXERCISE, id="ex"), new_code_cell("print(softmax)", id="chk")], "must call its check"),
        ([new_code_cell(EXERCISE, id="ex"), new_code_cell("check_mystery(softmax)", id="chk")], "not exported by helpers.checks"),
        ([new_code_cell("x = 1\n### BEGIN SOLUTION\ny = 2", id="ex")], "without an END"),
    ],
)
def test_instructor_copy_refuses_what_it_cannot_grade(cells, phrase):
    with pytest.raises(GradingError, match=phrase) as info:
        instructor_notebook(_notebook(*cells), "05_x.ipynb", {"check_softmax"})
    assert "05_x.ipynb, cell " in str(info.value)


def test_every_solution_notebook_has_an_instructor_copy():
    """Every exercise of every solution notebook (discovered, not listed) becomes a graded pair of cells."""
    import helpers.checks

    known = {name for name in helpers.checks.__all__ if name.startswith("check_")}
    for path in sorted(SOLUTIONS_DIR.glob("[0-9][0-9]_*.ipynb")):
        solution = nbformat.read(path, as_version=4)
        copy = instructor_notebook(solution, path.name, known)
        answers = [c for c in copy.cells if c.metadata["nbgrader"]["solution"]]
        checks = [c for c in copy.cells if c.metadata["nbgrader"]["grade"]]
        assert len(answers) == len(checks) == sum(BEGIN in c.source for c in solution.cells), path.name
        assert len({_grade_id(c) for c in copy.cells}) == len(copy.cells), path.name


def test_cli_names_an_unknown_notebook_without_traceback(tmp_path):
    result = subprocess.run(
        [sys.executable, "-m", "helpers.grading", "--root", str(tmp_path), "99_nothing"], capture_output=True, text=True, cwd=ROOT
    )
    assert result.returncode == 2 and "no solution notebook is named '99_nothing'" in result.stderr
    assert "Traceback" not in result.stderr and not any(tmp_path.iterdir())


# --- what the hidden tests call --------------------------------------------------------------------------------


def test_recording_and_passed(capsys):
    import helpers.attention

    for answer, outcome in [
        (helpers.attention.softmax, None),
        (..., "not attempted"),
        (lambda x, dim=-1: x.exp() / x.exp().sum(0, keepdim=True), "a wrong answer (softmax: "),
    ]:
        check = recording("check_softmax")
        assert check(answer) is (outcome is None)
        if outcome is None:
            assert passed(check) is helpers.checks.check_softmax
        else:
            with pytest.raises(AssertionError, match=re.escape(f"check_softmax did not pass: {outcome}")):
                passed(check)
    assert "ExerciseFailed: softmax: " in capsys.readouterr().out  # a wrong answer's message stays in the feedback
    with pytest.raises(AssertionError, match="never called"):
        passed(recording("check_softmax"))
    with pytest.raises(AssertionError, match="no check named 'check_mystery'"):
        recording("check_mystery")


def test_recording_under_nbgrader_where_checks_raise(monkeypatch, capsys):
    """Under nbgrader (COURSE_GRADING=1) a check raises for a blank and for a wrong answer; the hidden test records which."""
    import helpers.attention

    monkeypatch.setenv("COURSE_GRADING", "1")
    for answer, outcome in [(..., "not attempted"), (lambda x, dim=-1: x.softmax(0), "a wrong answer (softmax: ")]:
        check = recording("check_softmax")
        assert check(answer) is False  # the check cell goes on with the reference
        with pytest.raises(AssertionError, match=re.escape(f"check_softmax did not pass: {outcome}")):
            passed(check)
    check = recording("check_softmax")
    assert check(helpers.attention.softmax) is True and passed(check) is helpers.checks.check_softmax


def test_recording_a_check_with_a_fallback(monkeypatch, capsys):
    """`softmax = check_softmax(softmax, fallback=...)` under nbgrader: the reference takes over when the answer failed."""
    import helpers.attention

    wrong = lambda x, dim=-1: x.softmax(0)  # noqa: E731
    for grading in ("", "1"):
        monkeypatch.setenv("COURSE_GRADING", grading)
        check = recording("check_softmax")
        assert check(wrong, fallback=helpers.attention.softmax) is helpers.attention.softmax
        with pytest.raises(AssertionError, match=re.escape("check_softmax did not pass: a wrong answer")):
            passed(check)
        right = lambda x, dim=-1: x.softmax(dim)  # noqa: E731
        check = recording("check_softmax")
        assert check(right, fallback=helpers.attention.softmax) is right
        assert passed(check) is helpers.checks.check_softmax
