"""Exercise checks (``from helpers.checks import check_softmax``).

Contract (DESIGN.md section 4): a check takes the student's answer and

- returns ``True`` and prints a success line for a right answer;
- prints "not attempted yet" and returns ``False`` only while the stub is still there: ``...``, or the
  generator's ``raise NotImplementedError("Exercise ...")`` (a ``NotImplementedError`` raised by PyTorch,
  e.g. by calling an ``nn.ModuleList``, is a real attempt and fails by name);
- shows the named mistake as a failure (``❌ ExerciseFailed: ...``) and returns ``False`` otherwise, so the
  notebook goes on with the reference; in the tests (``raise_failures()``) and under nbgrader it raises
  ``ExerciseFailed`` (an ``AssertionError``) instead. A forward-pass exercise that calls the very module whose
  forward it should write (``block(x)``, ``model.forward(x)``) fails too (``helpers.checks._core.forbid_forward``).

``summary()``, the last cell of a notebook with exercises, lists what each check said; ``choose`` and
``use_reference`` say which implementation the cells after a check run.

One module per notebook topic; all checks are re-exported here.
"""

from helpers.checks import (
    attention,
    blocks,
    by_hand,
    chat,
    classifier,
    handwritten,
    heads,
    induction,
    lm,
    multihead,
    positional,
    pretrained,
    properties,
    scale,
    seq2seq,
    shapes,
    tokenizers,
    vit,
)
from helpers.checks._core import ExerciseFailed, choose, outcomes, raise_failures, summary, unrecorded, use_reference
from helpers.checks.attention import *  # noqa: F401,F403
from helpers.checks.blocks import *  # noqa: F401,F403
from helpers.checks.by_hand import *  # noqa: F401,F403
from helpers.checks.chat import *  # noqa: F401,F403
from helpers.checks.classifier import *  # noqa: F401,F403
from helpers.checks.handwritten import *  # noqa: F401,F403
from helpers.checks.heads import *  # noqa: F401,F403
from helpers.checks.induction import *  # noqa: F401,F403
from helpers.checks.lm import *  # noqa: F401,F403
from helpers.checks.multihead import *  # noqa: F401,F403
from helpers.checks.positional import *  # noqa: F401,F403
from helpers.checks.pretrained import *  # noqa: F401,F403
from helpers.checks.properties import *  # noqa: F401,F403
from helpers.checks.scale import *  # noqa: F401,F403
from helpers.checks.seq2seq import *  # noqa: F401,F403
from helpers.checks.shapes import *  # noqa: F401,F403
from helpers.checks.tokenizers import *  # noqa: F401,F403
from helpers.checks.vit import *  # noqa: F401,F403

_MODULES = (
    attention,
    blocks,
    by_hand,
    chat,
    classifier,
    handwritten,
    heads,
    induction,
    lm,
    multihead,
    positional,
    pretrained,
    properties,
    scale,
    seq2seq,
    shapes,
    tokenizers,
    vit,
)
__all__ = [
    "ExerciseFailed",
    "choose",
    "outcomes",
    "raise_failures",
    "summary",
    "unrecorded",
    "use_reference",
    *(name for module in _MODULES for name in module.__all__),
]
