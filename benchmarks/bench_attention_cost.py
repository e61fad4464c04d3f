"""Benchmark: notebook 04's cost of attention against the sequence length (time and memory, naive and fused), on a CPU.

    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/bench_attention_cost.py --repeats 5
    OMP_NUM_THREADS=1 ATEN_CPU_CAPABILITY=avx2 .venv/bin/python benchmarks/bench_attention_cost.py --repeats 5
    OMP_NUM_THREADS=1 ATEN_CPU_CAPABILITY=default MKL_CBWR=COMPATIBLE .venv/bin/python benchmarks/bench_attention_cost.py --repeats 5
    .venv/bin/python benchmarks/bench_attention_cost.py --table runs/*.jsonl     # the table of results/04

The measurement is the notebook's own: its measurement and table cells (``s04-cost-measure``, ``s04-cost-table`` of
``notebooks/solutions/04_multi_head_attention.ipynb``: n = 256 to 2048, one sequence, one head of width 64, float32,
one thread; the CPU time of a call, the shortest of 3 after a warm-up, ``helpers.scale.measure.best_time``; the rise of
the resident memory, ``helpers.plots.memory.resident_peak_mib``) are read from the notebook and run here, once per
repeat, so the sweep and the notebook cannot drift apart.

One JSON line per repeat: the fitted exponents of the naive and fused times and of the naive memory (what notebook 04's
claims bound), the times in ms and the memory in MiB per length, with the kernel family.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import sys
from pathlib import Path

os.environ.setdefault("OMP_NUM_THREADS", "1")

import numpy as np  # noqa: E402
import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import helpers.attention  # noqa: E402
from helpers.plots.memory import resident_peak_mib  # noqa: E402
from helpers.scale.measure import best_time  # noqa: E402

NOTEBOOK = ROOT / "notebooks" / "solutions" / "04_multi_head_attention.ipynb"
CELLS = ("s04-cost-measure", "s04-cost-table")


def cells() -> list[str]:
    """The sources of the notebook's measurement and table cells."""
    import nbformat

    sources = {c.get("id"): c.source for c in nbformat.read(NOTEBOOK, as_version=4).cells}
    return [sources[cell] for cell in CELLS]


def measure(sources: list[str]) -> dict:
    """Run the notebook's cells once; the fitted exponents, the times (ms) and the memory (MiB) per length."""
    namespace: dict = {
        "torch": torch,
        "F": F,
        "np": np,
        "helpers": helpers,
        "best_time": best_time,
        "resident_peak_mib": resident_peak_mib,
    }
    with contextlib.redirect_stdout(io.StringIO()):
        for cell, source in zip(CELLS, sources, strict=True):
            exec(compile(source, f"{NOTEBOOK.name}:{cell}", "exec"), namespace)  # noqa: S102 (the notebook's own code)
    row = {f"p_{name}": round(float(p), 3) for name, p in namespace["slopes"].items()}
    if namespace["measured_memory"]:
        row["p_memory_naive"] = round(float(namespace["memory_slope"]), 3)
    row["lengths"] = namespace["lengths"]
    row["ms"] = {name: [round(1e3 * s, 3) for s in values] for name, values in namespace["seconds"].items()}
    row["mib"] = {name: [None if m is None else round(m, 2) for m in values] for name, values in namespace["mebibytes"].items()}
    return row


def family() -> str:
    capability = torch.backends.cpu.get_cpu_capability()
    return capability + (f" MKL_CBWR={os.environ['MKL_CBWR']}" if os.environ.get("MKL_CBWR") else "")


def table(paths: list[str]) -> None:
    """A markdown table of the exponents per run, and their range per kernel family and overall."""
    rows = [json.loads(line) for p in paths for line in Path(p).read_text().splitlines() if line.startswith("{")]
    print("| family | run | p, fused time | p, naive time | p, naive memory | naive ms at 2048 | fused ms at 2048 |")
    print("|---|---|---|---|---|---|---|")
    for i, r in enumerate(rows):
        print(
            f"| {r['family']} | {i} | {r['p_fused']:.2f} | {r['p_naive']:.2f} | {r.get('p_memory_naive', float('nan')):.2f} | "
            f"{r['ms']['naive'][-1]:.1f} | {r['ms']['fused'][-1]:.1f} |"
        )
    print()
    for key in ("p_fused", "p_naive", "p_memory_naive"):
        values = [r[key] for r in rows if key in r]
        by_family = {f: [r[key] for r in rows if r["family"] == f and key in r] for f in dict.fromkeys(r["family"] for r in rows)}
        spans = ", ".join(f"{f}: {min(v):.2f}-{max(v):.2f}" for f, v in by_family.items() if v)
        print(f"{key}: {min(values):.2f} to {max(values):.2f} over {len(values)} runs ({spans})")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--table", nargs="+", metavar="JSONL", help="print the results table of these files")
    args = parser.parse_args()
    if args.table:
        table(args.table)
        return
    torch.set_num_threads(1)
    sources = cells()
    for repeat in range(args.repeats):
        print(json.dumps({"family": family(), "repeat": repeat, "torch": torch.__version__, **measure(sources)}), flush=True)


if __name__ == "__main__":
    main()
