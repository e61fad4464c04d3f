"""Full models built from ``helpers.blocks``: one module per notebook, re-exported here."""

from helpers.models.classifier import *  # noqa: F401,F403
from helpers.models.lm import *  # noqa: F401,F403
from helpers.models.minilm import *  # noqa: F401,F403
from helpers.models.seq2seq import *  # noqa: F401,F403
from helpers.models.vit import *  # noqa: F401,F403
