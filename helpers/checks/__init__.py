"""Exercise checks (``from helpers.checks import check_softmax``).

Contract (DESIGN.md section 4): a check takes the student's answer and

- returns ``True`` and prints a success line for a right answer;
- prints "not attempted yet" and returns ``False`` only while the stub is still there: ``...``, or the
  generator's ``raise NotImplementedError("Exercise ...")`` (a ``NotImplementedError`` raised by PyTorch,
  e.g. by calling an ``nn.ModuleList``, is a real attempt and fails by name);
- raises ``ExerciseFailed`` (an ``AssertionError``) naming the mistake otherwise. A forward-pass exercise that
  calls the very module whose forward it should write (``block(x)``, ``model.forward(x)``) fails too
  (``helpers.checks._core.forbid_forward``).

One module per notebook topic; all checks are re-exported here.
"""

from helpers.checks import (
    attention,
    blocks,
    by_hand,
    classifier,
    heads,
    lm,
    multihead,
    positional,
    pretrained,
    properties,
    seq2seq,
    shapes,
    vit,
)
from helpers.checks._core import ExerciseFailed, use_reference
from helpers.checks.attention import *  # noqa: F401,F403
from helpers.checks.blocks import *  # noqa: F401,F403
from helpers.checks.by_hand import *  # noqa: F401,F403
from helpers.checks.classifier import *  # noqa: F401,F403
from helpers.checks.heads import *  # noqa: F401,F403
from helpers.checks.lm import *  # noqa: F401,F403
from helpers.checks.multihead import *  # noqa: F401,F403
from helpers.checks.positional import *  # noqa: F401,F403
from helpers.checks.pretrained import *  # noqa: F401,F403
from helpers.checks.properties import *  # noqa: F401,F403
from helpers.checks.seq2seq import *  # noqa: F401,F403
from helpers.checks.shapes import *  # noqa: F401,F403
from helpers.checks.vit import *  # noqa: F401,F403

_MODULES = (
    attention,
    blocks,
    by_hand,
    classifier,
    heads,
    lm,
    multihead,
    positional,
    pretrained,
    properties,
    seq2seq,
    shapes,
    vit,
)
__all__ = ["ExerciseFailed", "use_reference", *(name for module in _MODULES for name in module.__all__)]
