"""Notebook 14's training claims over seeds: gradient descent started from the exact, hand-written sort.

    .venv/bin/python benchmarks/bench_handwritten_seeds.py                      # seeds 0-9, this kernel family
    ATEN_CPU_CAPABILITY=avx2 .venv/bin/python benchmarks/bench_handwritten_seeds.py
    ATEN_CPU_CAPABILITY=default MKL_CBWR=COMPATIBLE .venv/bin/python benchmarks/bench_handwritten_seeds.py

For each seed (it draws the batches) and each optimiser of the notebook (``RUNS``: Adam at 1e-3 and 1e-4, plain
gradient descent at 1e-3), it fine-tunes a copy of the reference sort (``build_sort()``) for 100 steps of 128 sequences
drawn from the whole domain (``helpers.handwritten.evaluate.fine_tune``) and records, every 25 steps, the sequences of
the notebook's sample of 4,000 (``SAMPLE``, drawn as its cell `s14-robust-code` draws it) exactly right and the mean
cross-entropy on them (the notebook stops the two runs at 1e-3 after 50 steps: the first half of the same
trajectories). One JSON line per seed and run, then the range of
every recorded value over the seeds. One thread. The tables and thresholds are in
``benchmarks/results/14_transformer_by_hand.md``.
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from helpers.handwritten.evaluate import all_sequences, distinct_sequences, fine_tune  # noqa: E402
from helpers.handwritten.program import build_sort, sort_of  # noqa: E402

#: the notebook's runs (its cell `s14-train-code`): name -> (optimizer, learning rate)
RUNS = {"Adam, lr 0.001": ("adam", 1e-3), "Adam, lr 0.0001": ("adam", 1e-4), "SGD, lr 0.001": ("sgd", 1e-3)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, nargs=2, default=(0, 10), metavar=("FIRST", "STOP"))
    args = parser.parse_args()
    torch.set_num_threads(1)
    family = os.environ.get("ATEN_CPU_CAPABILITY", "native") + (
        " + MKL_CBWR=" + os.environ["MKL_CBWR"] if os.environ.get("MKL_CBWR") else ""
    )
    print(json.dumps({"torch": torch.__version__, "kernels": family}), flush=True)
    every, domain = all_sequences(), distinct_sequences()  # (100000, 5), (30240, 5)
    draw = torch.Generator().manual_seed(0)  # the notebook's draws: reverse's sample, the histogram's, then sort's
    torch.randperm(len(every), generator=draw), torch.randperm(len(every), generator=draw)
    sample = domain[torch.randperm(len(domain), generator=draw)[:4000]]  # (4000, 5)
    exact = build_sort()
    found: dict[str, dict[str, list[float]]] = {}
    for seed in range(*args.seeds):
        for name, (optimizer, lr) in RUNS.items():
            history = fine_tune(
                copy.deepcopy(exact),
                domain,
                sort_of,
                steps=100,
                lr=lr,
                eval_every=25,
                seed=seed,
                optimizer=optimizer,
                scored_on=sample,
            )
            row = {"seed": seed, "kernels": family, "run": name, "step": history["step"], "correct": history["correct"]}
            row["domain_loss"] = [round(v, 4) for v in history["domain_loss"]]
            print(json.dumps(row), flush=True)
            for key in ("correct", "domain_loss"):
                for step, value in zip(history["step"], history[key], strict=True):
                    found.setdefault(name, {}).setdefault(f"{key}@{step}", []).append(value)
    ranges = {name: {key: [min(v), max(v)] for key, v in values.items()} for name, values in found.items()}
    print(json.dumps({"kernels": family, "seeds": list(range(*args.seeds)), "ranges": ranges}), flush=True)


if __name__ == "__main__":
    main()
