"""Figures used by the notebooks (``import helpers.plots as plots``).

One module per topic; everything is re-exported here so notebooks write
``plots.attention_heatmap(...)`` whichever file holds it.
"""

from helpers.plots.by_hand import *  # noqa: F401,F403
from helpers.plots.classifier import *  # noqa: F401,F403
from helpers.plots.core import *  # noqa: F401,F403
from helpers.plots.positional import *  # noqa: F401,F403
from helpers.plots.seq2seq import *  # noqa: F401,F403
from helpers.plots.vit import *  # noqa: F401,F403
