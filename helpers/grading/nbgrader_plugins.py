"""nbgrader's stub writer replaced by the course's own, so that the released notebook is the course's student notebook.

nbgrader's ``ClearSolutions`` puts one fixed stub in every solution region (``raise NotImplementedError()``), which at
the top level of a value exercise (``product_shape = ...``) stops Run All at the first exercise. ``CourseStubs`` writes
the stubs of ``helpers.authoring.student`` instead: ``raise NotImplementedError("Exercise: ...")`` inside a function, ``name = ...``
for each name a top-level block assigns. It also points links to ``notebooks/solutions/`` (the Colab badge) at the
student notebook in ``notebooks/``, as the student generator does. ``nbgrader_config.py`` (the repository root) puts it
in ``GenerateAssignment.preprocessors`` in place of ``ClearSolutions``: ``generate_assignment_preprocessors()``.

``QuietOverwriteCells`` replaces nbgrader's ``OverwriteCells`` when autograding (``autograde_sanitize_preprocessors()``).
nbgrader stores each locked cell's checksum *with* its hidden tests but releases the cell without them, so its
``OverwriteCells`` warns "Attribute 'checksum' for cell check_... has changed!" for every hidden-test cell of every
submission, an untouched release included (nbgrader issue #1961), and then restores the cell. Here a cell whose source
is exactly what was released (the source cell without its hidden tests) gets its hidden tests back without a warning;
a cell the student did change is still reported, and restored, by nbgrader's own code.
"""

from __future__ import annotations

from typing import Any

from nbformat.notebooknode import NotebookNode
from nbgrader.api import MissingEntry
from nbgrader.converters import Autograde, GenerateAssignment
from nbgrader.preprocessors import ClearHiddenTests, ClearSolutions, OverwriteCells

from helpers.authoring.student import MarkerError, student_source

__all__ = ["CourseStubs", "QuietOverwriteCells", "autograde_sanitize_preprocessors", "generate_assignment_preprocessors"]


class CourseStubs(ClearSolutions):
    """``ClearSolutions`` with the course's stubs (``helpers.authoring.student``) and the student notebook's links."""

    def _replace_solution_region(self, cell: NotebookNode, language: str) -> bool:
        if cell.cell_type == "markdown":
            cell.source = cell.source.replace("notebooks/solutions/", "notebooks/")
        if cell.cell_type != "code" or self.begin_solution_delimeter not in cell.source:
            return super()._replace_solution_region(cell, language)
        where = f"cell {cell.metadata.get('nbgrader', {}).get('grade_id', cell.get('id', '?'))}"
        try:
            cell.source = student_source(cell.source, where)
        except MarkerError as err:
            self.log.error("%s", err)
            raise RuntimeError(str(err)) from None
        return True


def generate_assignment_preprocessors() -> list[Any]:
    """nbgrader's own list for ``generate_assignment``, with ``CourseStubs`` in place of ``ClearSolutions``."""
    default = list(GenerateAssignment.class_traits()["preprocessors"].default())
    if ClearSolutions not in default:
        raise RuntimeError(
            "this nbgrader's generate_assignment has no ClearSolutions step; see helpers/grading/nbgrader_plugins.py"
        )
    return [CourseStubs if step is ClearSolutions else step for step in default]


class QuietOverwriteCells(OverwriteCells):
    """nbgrader's ``OverwriteCells`` without its false alarm for hidden tests (nbgrader issue #1961)."""

    def preprocess_cell(self, cell: NotebookNode, resources: Any, cell_index: int) -> tuple[NotebookNode, Any]:
        grade_id = cell.metadata.get("nbgrader", {}).get("grade_id")
        if grade_id is not None and cell.metadata.get("nbgrader", {}).get("locked"):
            try:
                source_cell = self.gradebook.find_source_cell(grade_id, self.notebook_id, self.assignment_id)
            except MissingEntry:
                source_cell = None
            if source_cell is not None and ClearHiddenTests().begin_test_delimeter in source_cell.source:
                released = NotebookNode({"source": source_cell.source})
                ClearHiddenTests()._remove_hidden_test_region(released)
                if cell.source == released.source:  # untouched: put the hidden tests back, as nbgrader would
                    cell.source = source_cell.source
        return super().preprocess_cell(cell, resources, cell_index)


def autograde_sanitize_preprocessors() -> list[Any]:
    """nbgrader's own list for autograde's sanitizing step, with ``QuietOverwriteCells`` in place of ``OverwriteCells``."""
    default = list(Autograde.class_traits()["sanitize_preprocessors"].default())
    if OverwriteCells not in default:
        raise RuntimeError("this nbgrader's autograde has no OverwriteCells step; see helpers/grading/nbgrader_plugins.py")
    return [QuietOverwriteCells if step is OverwriteCells else step for step in default]
