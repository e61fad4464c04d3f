"""nbgrader's configuration for this course: nbgrader reads it when run from the repository root.

    python3 course.py nbgrader                                # instructor copies + generate_assignment, every notebook
    python3 course.py nbgrader autograde 01_attention_shapes  # or any nbgrader command: `.venv/bin/nbgrader ...` here

See the README's "Instructor guide" and ``helpers/grading/__init__.py``.
"""

import os
import sys
from pathlib import Path

from helpers.grading.instructor import GRADING_DIR
from helpers.grading.nbgrader_plugins import autograde_sanitize_preprocessors, generate_assignment_preprocessors

c = get_config()  # noqa: F821 (nbgrader's config loader defines get_config)

# The course directory, grading/ (git-ignored): source/ (written by `python -m helpers.grading`), release/, submitted/,
# autograded/, feedback/ and gradebook.db. For another folder, give both `--root DIR` to `python -m helpers.grading` and
# `--CourseDirectory.root=DIR` to nbgrader.
c.CourseDirectory.root = str(GRADING_DIR)

# The released notebook gets the course's own stubs (it runs top to bottom, as the student notebooks do) and a Colab
# badge that points at the student notebook.
c.GenerateAssignment.preprocessors = generate_assignment_preprocessors()

# Autograding restores each check cell's hidden tests without nbgrader's false "checksum ... has changed" warning for
# every hidden-test cell of every submission (nbgrader issue #1961); a cell the student did change is still reported.
c.Autograde.sanitize_preprocessors = autograde_sanitize_preprocessors()

# A check raises for a wrong answer and for "not attempted" under nbgrader (helpers.checks, COURSE_GRADING): so
# `nbgrader validate` fails a notebook whose exercise is blank or wrong, as autograding scores it 0. The kernels nbgrader
# starts inherit this. In a student's own Run All the same checks show the failure and let the notebook go on.
os.environ["COURSE_GRADING"] = "1"

# nbgrader runs the `alembic` command of its environment by name: make `.venv/bin/nbgrader ...` work without activating .venv.
os.environ["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), os.environ.get("PATH", "")])

# Notebooks 07 and 08 train for minutes; nbgrader's default is 30 s a cell.
c.Execute.timeout = 900
