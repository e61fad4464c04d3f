"""A notebook's session: the repository's paths, the seed, and ``setup()``, the first call of every notebook."""

from __future__ import annotations

import os
import platform
import random
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import torch

__all__ = ["setup", "ROOT", "DATA_DIR", "SEED"]

#: The repository root (the folder that holds ``helpers/``, ``data/`` and ``notebooks/``).
ROOT: Path = Path(__file__).resolve().parents[2]
#: Where data sets and fixtures live.
DATA_DIR: Path = ROOT / "data"
#: The seed every notebook starts from.
SEED: int = 0


def setup(seed: int = SEED, threads: int = 1, quiet: bool = False) -> torch.device:
    """Prepare a notebook: seeds, one torch thread, device, plot style, versions.

    - Seeds Python's ``random``, numpy and torch with ``seed``.
    - Uses ``threads`` torch threads (default 1: on a shared 2-core machine two
      threads were measured 3x slower at the median and not bit-reproducible), and
      holds the BLAS and OpenMP pools of numpy, scipy and scikit-learn to as many
      (with the other core busy, scikit-learn's logistic regressions of notebook 08
      took 4.6 s on two threads and 0.23 s on one).
    - Picks ``cuda`` when a GPU is present, else ``cpu``; no notebook needs a GPU.
    - Applies the course's plot style (seaborn, readable sizes).
    - Prints the versions that matter (unless ``quiet``), and says so when the run is a smoke
      test (``helpers.runtime.smoke``).

    Returns the chosen ``torch.device``.
    """
    import matplotlib
    import numpy as np
    import torch

    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)
    os.environ.setdefault("PYTHONHASHSEED", str(seed))
    torch.set_num_threads(threads)
    from threadpoolctl import threadpool_limits

    threadpool_limits(threads)  # numpy's, scipy's and scikit-learn's BLAS and OpenMP pools too (see above)
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")

    from helpers.runtime.style import set_style

    set_style()
    np.set_printoptions(precision=4, suppress=True)
    torch.set_printoptions(precision=4, sci_mode=False)
    if not quiet:
        print(
            f"python {platform.python_version()} | torch {torch.__version__} | "
            f"numpy {np.__version__} | matplotlib {matplotlib.__version__} | "
            f"device {device} | threads {torch.get_num_threads()} | seed {seed}"
        )
    from helpers.runtime import smoke

    if smoke.active():  # the suite's run of a student notebook: said even when quiet
        print(f"smoke test ({smoke.ENV}=1): every training run cut to a few steps, claims not enforced (helpers.runtime.smoke)")
    return device
