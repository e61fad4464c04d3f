"""helpers.authoring.student: stubs, determinism, cell ids, cleared outputs, malformed markers."""

from __future__ import annotations

import subprocess
import sys

import nbformat
import pytest
from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook, new_output

from helpers import ROOT
from helpers.authoring.student import KERNELSPEC, MarkerError, build, main, make_student_notebook, student_source


def _notebook(*cells):
    return new_notebook(cells=list(cells), metadata={"kernelspec": KERNELSPEC})


FUNCTION_CELL = '''def softmax(x, dim=-1):
    """Stable softmax."""
    ### BEGIN SOLUTION
    e = torch.exp(x - x.amax(dim, keepdim=True))
    return e / e.sum(dim, keepdim=True)
    ### END SOLUTION'''


def test_indented_block_becomes_not_implemented():
    out = student_source(FUNCTION_CELL, "nb, cell 0")
    assert "torch.exp" not in out
    assert '    raise NotImplementedError("Exercise: replace this line with your code")' in out
    assert out.startswith('def softmax(x, dim=-1):\n    """Stable softmax."""')
    compile(out, "cell", "exec")


def test_top_level_block_becomes_ellipsis_per_assigned_name():
    src = "# shapes\n### BEGIN SOLUTION\nq_shape = (6, 768)\nk_shape, v_shape = (6, 768), (6, 768)\nn: int = 5\nq_shape = (1, 2)\n### END SOLUTION\ncheck(q_shape)"
    out = student_source(src, "nb, cell 0")
    assert out.splitlines() == [
        "# shapes",
        "q_shape = ...  # YOUR ANSWER HERE",
        "k_shape = ...  # YOUR ANSWER HERE",
        "v_shape = ...  # YOUR ANSWER HERE",
        "n = ...  # YOUR ANSWER HERE",
        "check(q_shape)",
    ]


def test_method_inside_class_and_two_blocks_in_one_cell():
    src = "class A:\n    def f(self):\n        ### BEGIN SOLUTION\n        return 1\n        ### END SOLUTION\n\n    def g(self):\n        ### BEGIN SOLUTION\n        return 2\n        ### END SOLUTION"
    out = student_source(src, "nb, cell 0")
    assert out.count("raise NotImplementedError") == 2
    assert "return 1" not in out and "return 2" not in out
    compile(out, "cell", "exec")


@pytest.mark.parametrize(
    "src, phrase",
    [
        ("x = 1\n### BEGIN SOLUTION\ny = 2", "without an END"),
        ("### END SOLUTION\nx = 1", "without a BEGIN"),
        ("def f():\n    ### BEGIN SOLUTION\n    ### BEGIN SOLUTION\n    pass\n    ### END SOLUTION", "nested"),
        ("### BEGIN SOLUTION\nprint(1)\n### END SOLUTION", "must assign"),
        ("### BEGIN SOLUTION\nx = (\n### END SOLUTION", "not valid Python"),
    ],
)
def test_malformed_markers_are_refused_with_their_place(src, phrase):
    with pytest.raises(MarkerError, match=phrase) as info:
        make_student_notebook(_notebook(new_code_cell(src, id="the-cell")), "07_demo.ipynb")
    assert "07_demo.ipynb, cell 0 (id the-cell" in str(info.value)


def test_marker_in_markdown_is_refused():
    nb = _notebook(new_markdown_cell("# T"), new_markdown_cell("### BEGIN SOLUTION\ntext", id="md-1"))
    with pytest.raises(MarkerError, match="markdown cell") as info:
        make_student_notebook(nb, "03_x.ipynb")
    assert "cell 1 (id md-1" in str(info.value)


def test_outputs_cleared_ids_kept_links_rewritten_input_untouched():
    code = new_code_cell(FUNCTION_CELL, id="ex-softmax", execution_count=3, outputs=[new_output("stream", text="hi\n")])
    code.metadata["execution"] = {"iopub.status.busy": "2026-01-01"}
    code.metadata["tags"] = ["keep-me"]
    md = new_markdown_cell(
        "[Colab](https://colab.research.google.com/github/o/r/blob/main/notebooks/solutions/01_x.ipynb)", id="intro"
    )
    nb = _notebook(md, code)
    student = make_student_notebook(nb, "01_x.ipynb")
    assert [c.id for c in student.cells] == ["intro", "ex-softmax"]
    assert student.cells[1].outputs == [] and student.cells[1].execution_count is None
    assert "execution" not in student.cells[1].metadata and student.cells[1].metadata["tags"] == ["keep-me"]
    assert "blob/main/notebooks/01_x.ipynb" in student.cells[0].source
    assert nb.cells[1].outputs and "torch.exp" in nb.cells[1].source  # the solution is not modified


def test_build_is_deterministic_and_check_mode(tmp_path):
    solutions = tmp_path / "notebooks" / "solutions"
    solutions.mkdir(parents=True)
    path = solutions / "01_x.ipynb"
    nbformat.write(_notebook(new_markdown_cell("# x", id="a"), new_code_cell(FUNCTION_CELL, id="b")), path)
    assert build([path]) == [tmp_path / "notebooks" / "01_x.ipynb"]
    first = (tmp_path / "notebooks" / "01_x.ipynb").read_bytes()
    assert build([path]) == []  # nothing changed the second time
    assert build([path], check=True) == []
    assert (tmp_path / "notebooks" / "01_x.ipynb").read_bytes() == first
    nbformat.write(_notebook(new_markdown_cell("# y", id="a"), new_code_cell(FUNCTION_CELL, id="b")), path)
    assert build([path], check=True) == [tmp_path / "notebooks" / "01_x.ipynb"]
    assert (tmp_path / "notebooks" / "01_x.ipynb").read_bytes() == first  # --check writes nothing


def test_cli_reports_malformed_notebook_without_traceback(tmp_path):
    solutions = tmp_path / "notebooks" / "solutions"
    solutions.mkdir(parents=True)
    bad = solutions / "02_bad.ipynb"
    nbformat.write(_notebook(new_code_cell("### BEGIN SOLUTION\nx = 1", id="c0")), bad)
    result = subprocess.run(
        [sys.executable, "-m", "helpers.authoring.student", str(bad)], capture_output=True, text=True, cwd=ROOT
    )
    assert result.returncode == 2
    assert "02_bad.ipynb, cell 0" in result.stderr and "Traceback" not in result.stderr
    corrupt = solutions / "03_corrupt.ipynb"
    corrupt.write_text("{not json")
    assert main([str(corrupt)]) == 2


def test_committed_student_notebooks_are_up_to_date():
    stale = build(check=True)
    assert not stale, f"regenerate with `python -m helpers.authoring.student`: {[p.name for p in stale]}"
