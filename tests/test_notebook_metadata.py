"""Committed notebooks are saved as JupyterLab saves them (opening one does not change the file), with no frozen widgets."""

from __future__ import annotations

import re
import sys

import nbformat
import pytest
from nbformat.v4 import new_code_cell, new_notebook, new_output

from helpers import ROOT
from helpers.authoring.execute import execute_notebook
from helpers.authoring.student import KERNELSPEC, WIDGET_VIEW, make_student_notebook, normalise_notebook

NOTEBOOKS = sorted((ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb")) + sorted(
    (ROOT / "notebooks" / "solutions").glob("[0-9][0-9]_*.ipynb")
)
IDS = [str(p.relative_to(ROOT / "notebooks")) for p in NOTEBOOKS]

# What ipykernel reports as language_info and JupyterLab then writes; only the Python version varies.
LANGUAGE_INFO = {
    "codemirror_mode": {"name": "ipython", "version": 3},
    "file_extension": ".py",
    "mimetype": "text/x-python",
    "name": "python",
    "nbconvert_exporter": "python",
    "pygments_lexer": "ipython3",
}

FIX = "re-execute it with `python -m helpers.authoring.execute` (solutions) or regenerate it with `python -m helpers.authoring.student` (students)"


def _widget_state(nb):
    return nb.metadata.get("widgets", {}).get("application/vnd.jupyter.widget-state+json", {}).get("state", {})


def _tqdm_output(model_id="abc"):
    return new_output(
        "display_data",
        data={WIDGET_VIEW: {"version_major": 2, "version_minor": 0, "model_id": model_id}, "text/plain": "  0%|  | 0/10"},
    )


@pytest.mark.parametrize("path", NOTEBOOKS, ids=IDS)
def test_committed_notebook_has_jupyterlab_metadata(path):
    nb = nbformat.read(path, as_version=4)
    assert nb.metadata.get("kernelspec") == KERNELSPEC, f"kernelspec is not JupyterLab's: {FIX}"
    info = dict(nb.metadata.get("language_info", {}))
    version = info.pop("version", "")
    assert info == LANGUAGE_INFO and re.fullmatch(r"3\.\d+\.\d+", version), f"language_info is not ipykernel's: {FIX}"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=IDS)
def test_committed_notebook_has_no_widget_without_its_state(path):
    nb = nbformat.read(path, as_version=4)
    state = _widget_state(nb)
    for index, cell in enumerate(nb.cells):
        for output in cell.get("outputs", []):
            view = output.get("data", {}).get(WIDGET_VIEW)
            assert view is None or view.get("model_id") in state, (
                f"cell {index} shows a widget whose state is not saved (a frozen tqdm bar or a VBox(...) text): {FIX}"
            )


def test_normalise_sets_the_kernelspec_and_strips_only_stateless_widgets():
    kept = _tqdm_output("saved")
    nb = new_notebook(
        cells=[new_code_cell("fit()", outputs=[_tqdm_output(), new_output("stream", text="done\n"), kept])],
        metadata={
            "kernelspec": {"name": "python3", "display_name": "Python 3", "language": "python"},
            "widgets": {"application/vnd.jupyter.widget-state+json": {"state": {"saved": {}}}},
        },
    )
    normalise_notebook(nb)
    assert nb.metadata.kernelspec == KERNELSPEC
    assert [o.get("text") for o in nb.cells[0].outputs] == ["done\n", None] and nb.cells[0].outputs[1] == kept
    nbformat.validate(nb)


def test_student_notebooks_get_the_same_kernelspec():
    solution = new_notebook(
        cells=[new_code_cell("x = 1", outputs=[_tqdm_output()])],
        metadata={"kernelspec": {"name": "python3", "display_name": "Python 3"}},
    )
    student = make_student_notebook(solution, "01_x.ipynb")
    assert student.metadata.kernelspec == KERNELSPEC and student.cells[0].outputs == []


def test_execute_writes_jupyterlab_metadata_and_no_tqdm_widget(tmp_path):
    """A real kernel (about 3 s): tqdm.auto shows a widget under nbclient; the saved notebook has none."""
    pytest.importorskip("ipywidgets")
    code = "from tqdm.auto import tqdm\nfor _ in tqdm(range(3)):\n    pass\nprint('trained')"
    path = tmp_path / "01_demo.ipynb"
    nbformat.write(
        new_notebook(cells=[new_code_cell(code)], metadata={"kernelspec": {"name": "python3", "display_name": "Python 3"}}), path
    )
    execute_notebook(path)
    nb = nbformat.read(path, as_version=4)
    outputs = nb.cells[0].outputs
    assert not any(WIDGET_VIEW in o.get("data", {}) for o in outputs)
    assert any("trained" in o.get("text", "") for o in outputs)
    assert nb.metadata.kernelspec == KERNELSPEC
    info = dict(nb.metadata.language_info)
    assert info.pop("version") == sys.version.split()[0] and info == LANGUAGE_INFO


def test_execute_command_line_rejects_a_path_that_is_not_a_notebook(tmp_path, capsys):
    """A typo in the path: one clear line and exit status 2, not nbformat's traceback."""
    from helpers.authoring.execute import main

    assert main([str(tmp_path / "07_missing.ipynb")]) == 2
    assert "not a notebook file" in capsys.readouterr().err
    (tmp_path / "notes.txt").write_text("x")
    assert main([str(tmp_path / "notes.txt")]) == 2
