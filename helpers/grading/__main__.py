"""``python -m helpers.grading``: write nbgrader's instructor copy (see ``helpers.grading.instructor``)."""

import sys

from helpers.grading.instructor import main

sys.exit(main())
