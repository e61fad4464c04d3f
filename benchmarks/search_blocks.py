"""Notebook 06's training claims over seeds and kernel families: a deep post-LN stack without warm-up, pre-LN, post-LN
with the paper's warm-up.

    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/search_blocks.py                     # the notebook's recipe, seeds 0-9
    OMP_NUM_THREADS=1 ATEN_CPU_CAPABILITY=avx2 .venv/bin/python benchmarks/search_blocks.py
    OMP_NUM_THREADS=1 ATEN_CPU_CAPABILITY=default MKL_CBWR=COMPATIBLE .venv/bin/python benchmarks/search_blocks.py
    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/search_blocks.py --course           # the course's forward passes
    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/search_blocks.py '[{"lr": 0.04, "steps": 80}]' --seeds 20
    .venv/bin/python benchmarks/search_blocks.py --table runs/*.jsonl                  # the table of results/06

The recipe is the notebook's own code: the cells that define the exercises' solutions (``encoder_block_forward``,
``pre_ln_encoder_block_forward``, ``transformer_lr``), ``Sorter`` and ``train_sorter`` are read from
``notebooks/solutions/06_transformer_blocks.ipynb`` and run here, so the sweep and the notebook cannot drift apart.
``--course`` runs the course's ``EncoderBlock.forward`` and ``helpers.blocks.transformer_lr`` instead: what a learner's
notebook runs when an exercise falls back (another floating-point path through the same functions).

One JSON line per (setting, seed): the mean training loss of each run over the first, middle and last fifth of the
steps (the claims read the last fifth), the kernel family (``torch.backends.cpu.get_cpu_capability()``, MKL_CBWR) and
the CPU seconds. A setting overrides ``train_sorter``'s keyword arguments (``steps``, ``lr``, ``batch``) and
``warmup_steps`` (20 in the notebook). One thread.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import sys
import time
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import helpers.blocks  # noqa: E402
from helpers.blocks import EncoderBlock  # noqa: E402

NOTEBOOK = ROOT / "notebooks" / "solutions" / "06_transformer_blocks.ipynb"
EXERCISES = ("s06-ex61-code", "s06-ex63-code", "s06-ex64-code")
RECIPE = ("s06-ln-model", "s06-ln-train-fn")
RUNS = {"post-LN": dict(norm_first=False), "pre-LN": dict(norm_first=True), "post-LN + warm-up": dict(norm_first=False)}
CLAIMS_CELL = "s06-ln-claims"


def claimed() -> dict[str, float]:
    """The notebook's thresholds, read from its claim cell: on the mean loss over the last fifth of each run's steps."""
    import nbformat

    cells = {c.get("id"): c.source for c in nbformat.read(NOTEBOOK, as_version=4).cells}
    source = cells[CLAIMS_CELL]
    bounds = dict(re.findall(r"\b(post|pre|warm), ([0-9.]+), measured", source))
    return {
        "post-LN at least": float(bounds["post"]),
        "pre-LN at most": float(bounds["pre"]),
        "post-LN + warm-up at most": float(bounds["warm"]),
        "post-LN minus warm-up more than": float(re.search(r"margin=([0-9.]+)", source).group(1)),
    }


def recipe(course: bool) -> dict:
    """The notebook's functions, run from its cells (or, with ``course``, the course's fallbacks for the exercises)."""
    import nbformat

    cells = {c.get("id"): c.source for c in nbformat.read(NOTEBOOK, as_version=4).cells}
    namespace: dict = {"torch": torch, "nn": nn, "F": F, "np": np, "EncoderBlock": EncoderBlock}
    if course:
        namespace.update(
            encoder_block_forward=EncoderBlock.forward,
            pre_ln_encoder_block_forward=EncoderBlock.forward,
            transformer_lr=helpers.blocks.transformer_lr,
        )
    for cell in (() if course else EXERCISES) + RECIPE:
        exec(compile(cells[cell], f"{NOTEBOOK.name}:{cell}", "exec"), namespace)  # noqa: S102 (the notebook's own code)
    return namespace


def windows(losses: np.ndarray) -> list[float]:
    fifth = max(1, len(losses) // 5)
    return [round(float(w.mean()), 4) for w in (losses[:fifth], losses[2 * fifth : 3 * fifth], losses[-fifth:])]


def run(train_sorter, setting: dict, seed: int) -> dict:
    setting = dict(setting)
    warmup = setting.pop("warmup_steps", 20)
    start = time.process_time()
    out = {"setting": setting, "warmup_steps": warmup, "seed": seed}
    for name, kwargs in RUNS.items():
        w = warmup if name.endswith("warm-up") else 0
        out[name] = windows(train_sorter(seed=seed, warmup_steps=w, **kwargs, **setting))
    out["cpu_s"] = round(time.process_time() - start, 2)
    return out


def family() -> str:
    capability = torch.backends.cpu.get_cpu_capability()
    return capability + (f" MKL_CBWR={os.environ['MKL_CBWR']}" if os.environ.get("MKL_CBWR") else "")


def table(paths: list[str]) -> None:
    """A markdown table per kernel family from JSON lines files, and the range of each claimed quantity."""
    rows = [json.loads(line) for p in paths for line in Path(p).read_text().splitlines() if line.startswith("{")]
    rows = [r for r in rows if "seed" in r]
    print("| family | seed | post-LN | pre-LN | post-LN + warm-up | post-LN minus warm-up |")
    print("|---|---|---|---|---|---|")
    for r in rows:
        last = {k: r[k][-1] for k in RUNS}
        print(
            f"| {r['family']}{' (course)' if r.get('course') else ''} | {r['seed']} | {last['post-LN']:.3f} | {last['pre-LN']:.3f} | "
            f"{last['post-LN + warm-up']:.3f} | {last['post-LN'] - last['post-LN + warm-up']:.3f} |"
        )
    lasts = {k: [r[k][-1] for r in rows] for k in RUNS}
    CLAIMS = claimed()  # noqa: N806 (the notebook's constants)
    gap = [a - b for a, b in zip(lasts["post-LN"], lasts["post-LN + warm-up"], strict=True)]
    print(f"\n{len(rows)} runs of each kind")
    print(
        f"post-LN:           {min(lasts['post-LN']):.3f} to {max(lasts['post-LN']):.3f} (claim: at least {CLAIMS['post-LN at least']})"
    )
    print(
        f"pre-LN:            {min(lasts['pre-LN']):.3f} to {max(lasts['pre-LN']):.3f} (claim: at most {CLAIMS['pre-LN at most']})"
    )
    warm = lasts["post-LN + warm-up"]
    print(f"post-LN + warm-up: {min(warm):.3f} to {max(warm):.3f} (claim: at most {CLAIMS['post-LN + warm-up at most']})")
    print(
        f"post-LN minus warm-up: {min(gap):.3f} to {max(gap):.3f} (claim: more than {CLAIMS['post-LN minus warm-up more than']})"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("settings", nargs="?", default="[{}]", help="a JSON list of settings (default: the notebook's)")
    parser.add_argument("--seeds", type=int, default=10)
    parser.add_argument("--first-seed", type=int, default=0)
    parser.add_argument("--course", action="store_true", help="the course's forward passes and schedule")
    parser.add_argument("--table", nargs="+", metavar="JSONL", help="print the results table of these files")
    args = parser.parse_args()
    if args.table:
        table(args.table)
        return
    torch.set_num_threads(1)
    train_sorter = recipe(args.course)["train_sorter"]
    head = {
        "torch": torch.__version__,
        "family": family(),
        "cpu": platform.processor() or platform.machine(),
        "course": args.course,
    }
    print(json.dumps({"header": head}), flush=True)
    for setting in json.loads(args.settings):
        for seed in range(args.first_seed, args.first_seed + args.seeds):
            print(json.dumps({**run(train_sorter, setting, seed), "family": head["family"], "course": args.course}), flush=True)


if __name__ == "__main__":
    main()
