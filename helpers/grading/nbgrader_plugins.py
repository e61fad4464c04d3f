"""nbgrader's stub writer replaced by the course's own, so that the released notebook is the course's student notebook.

nbgrader's ``ClearSolutions`` puts one fixed stub in every solution region (``raise NotImplementedError()``), which at
the top level of a value exercise (``product_shape = ...``) stops Run All at the first exercise. ``CourseStubs`` writes
the stubs of ``helpers.student`` instead: ``raise NotImplementedError("Exercise: ...")`` inside a function, ``name = ...``
for each name a top-level block assigns. It also points links to ``notebooks/solutions/`` (the Colab badge) at the
student notebook in ``notebooks/``, as the student generator does. ``nbgrader_config.py`` (the repository root) puts it
in ``GenerateAssignment.preprocessors`` in place of ``ClearSolutions``: ``generate_assignment_preprocessors()``.
"""

from __future__ import annotations

from typing import Any

from nbformat.notebooknode import NotebookNode
from nbgrader.converters import GenerateAssignment
from nbgrader.preprocessors import ClearSolutions

from helpers.student import MarkerError, student_source

__all__ = ["CourseStubs", "generate_assignment_preprocessors"]


class CourseStubs(ClearSolutions):
    """``ClearSolutions`` with the course's stubs (``helpers.student``) and the student notebook's links."""

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
