"""Benchmark: notebook 03's timing of the three attention scores (dot-product, multiplicative, additive) on a CPU.

    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/bench_scoring.py --repeats 10
    OMP_NUM_THREADS=1 ATEN_CPU_CAPABILITY=avx2 .venv/bin/python benchmarks/bench_scoring.py --repeats 10
    OMP_NUM_THREADS=1 ATEN_CPU_CAPABILITY=default MKL_CBWR=COMPATIBLE .venv/bin/python benchmarks/bench_scoring.py --repeats 10

The measurement is the notebook's own: its timing cell (``s03-scoring-time`` of
``notebooks/solutions/03_temperature_and_properties.ipynb``: batch 2, n = m = 32, d = d_att = 128, float32, one thread,
the median CPU time of 5 timings of 20 calls after a warm-up call, ``time.process_time``) is read from the notebook and
run here, once per repeat, so the sweep and the notebook cannot drift apart. CPU time, not wall time: on a machine
shared with other work a wall-clock timing of the 0.7 ms additive score is interrupted far more often than one of the
10 us dot product, which inflated the ratio up to 790 where the CPU time gives about 60.

One JSON line per repeat: the milliseconds of CPU time per call of each score and the ratio additive / dot-product
that notebook 03's claim bounds from below, with the kernel family.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import math
import os
import sys
import time
from pathlib import Path

os.environ.setdefault("OMP_NUM_THREADS", "1")

import numpy as np  # noqa: E402
import torch  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOK = ROOT / "notebooks" / "solutions" / "03_temperature_and_properties.ipynb"
CELL = "s03-scoring-time"


def timing_cell() -> str:
    """The source of the notebook's timing cell."""
    import nbformat

    cells = {c.get("id"): c.source for c in nbformat.read(NOTEBOOK, as_version=4).cells}
    return cells[CELL]


def measure(source: str) -> dict[str, float]:
    """Run the notebook's timing cell once; its milliseconds per call and the additive / dot-product ratio."""
    namespace: dict = {"torch": torch, "math": math, "time": time, "np": np}
    with contextlib.redirect_stdout(io.StringIO()):
        exec(compile(source, f"{NOTEBOOK.name}:{CELL}", "exec"), namespace)  # noqa: S102 (the notebook's own code)
    ms = namespace["ms_per_call"]
    return {**{f"{k}_ms": round(v, 4) for k, v in ms.items()}, "ratio": round(namespace["slowdown"], 2)}


def family() -> str:
    capability = torch.backends.cpu.get_cpu_capability()
    return capability + (f" MKL_CBWR={os.environ['MKL_CBWR']}" if os.environ.get("MKL_CBWR") else "")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=10)
    args = parser.parse_args()
    torch.set_num_threads(1)
    sys.path.insert(0, str(ROOT))
    source = timing_cell()
    for repeat in range(args.repeats):
        row = {"family": family(), "repeat": repeat, "torch": torch.__version__, **measure(source)}
        print(json.dumps(row), flush=True)


if __name__ == "__main__":
    main()
