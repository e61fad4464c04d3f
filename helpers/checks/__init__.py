"""Exercise checks (``from helpers.checks import check_softmax``).

Contract (DESIGN.md section 4): a check takes the student's answer and

- returns ``True`` and prints a success line for a right answer;
- prints "not attempted yet" and returns ``False`` for ``...`` or ``NotImplementedError``;
- raises ``ExerciseFailed`` (an ``AssertionError``) naming the mistake otherwise.

One module per notebook topic; all checks are re-exported here.
"""

from helpers.checks import attention, blocks, by_hand, classifier, multihead, positional, properties, shapes, vit
from helpers.checks._core import ExerciseFailed, use_reference
from helpers.checks.attention import *  # noqa: F401,F403
from helpers.checks.blocks import *  # noqa: F401,F403
from helpers.checks.by_hand import *  # noqa: F401,F403
from helpers.checks.classifier import *  # noqa: F401,F403
from helpers.checks.multihead import *  # noqa: F401,F403
from helpers.checks.positional import *  # noqa: F401,F403
from helpers.checks.properties import *  # noqa: F401,F403
from helpers.checks.shapes import *  # noqa: F401,F403
from helpers.checks.vit import *  # noqa: F401,F403

_MODULES = (attention, blocks, by_hand, classifier, multihead, positional, properties, shapes, vit)
__all__ = ["ExerciseFailed", "use_reference", *(name for module in _MODULES for name in module.__all__)]
