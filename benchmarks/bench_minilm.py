"""Notebook 10's timing, repeated: all-MiniLM-L6-v2 in the course's code against transformers' BertModel.

    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/bench_minilm.py --runs 5
    ATEN_CPU_CAPABILITY=avx2 OMP_NUM_THREADS=1 .venv/bin/python benchmarks/bench_minilm.py --runs 5
    .venv/bin/python benchmarks/bench_minilm.py --device cuda --runs 5

Each run measures what the notebook's timing cell measures, with the same function
(``helpers.models.minilm.time_against_reference``): encoding 8 sentences (a warm-up, then 7 pairs timed back to back,
the order alternating; the median of the 7 ratios ours / transformers'), and loading (the medians of 3 repeats of
``load_minilm`` and of ``BertModel.from_pretrained``, and of building ``MiniLM()`` alone). On a GPU every timing
waits for the GPU to finish its work (``torch.cuda.synchronize``).
One JSON line per run, with the device, the kernels (``ATEN_CPU_CAPABILITY``, ``MKL_CBWR``) and the threads.
Wall-clock times on a shared machine vary from run to run; the notebook's claims read ratios only.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import helpers.models.minilm as minilm  # noqa: E402

SENTENCES = [
    "The animal didn't cross the street because it was too tired.",
    "Hi!",
    "A man is playing a guitar on the stage, while the crowd sings along.",
    "Ça va? Prices rose 3.5% in 2023.",
]


def run_once(device: torch.device, transformers) -> dict:
    """One measurement with the notebook's own harness, ``helpers.models.minilm.time_against_reference``."""
    model = minilm.load_minilm(device)
    tokenizer = minilm.load_tokenizer()

    def load_theirs():
        return transformers.BertModel.from_pretrained(str(minilm.model_dir()), local_files_only=True).to(device).eval()

    batch = tokenizer([f"{s} (copy {i})" for i in range(2) for s in SENTENCES])
    ids, mask = batch["input_ids"].to(device), batch["attention_mask"].to(device)
    timing = minilm.time_against_reference(model, load_theirs(), ids, mask, load_theirs)
    return {
        "device": timing.device,
        "capability": os.environ.get("ATEN_CPU_CAPABILITY", "native"),
        "mkl_cbwr": os.environ.get("MKL_CBWR", ""),
        "threads": torch.get_num_threads(),
        "machine": platform.processor() or platform.machine(),
        "encode ratio": round(timing.encode_ratio, 3),
        "load ratio": round(timing.load_ratio, 2),
        "build share": round(timing.build_share, 3),
        "build / their load": round(timing.medians["build MiniLM()"] / timing.medians["load: transformers"], 2),
        "encode ms: ours, theirs": [round(1000 * timing.medians[k], 1) for k in ("encode: ours", "encode: transformers")],
    }


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--device", default="cpu")
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    import transformers

    transformers.logging.set_verbosity_error()
    transformers.logging.disable_progress_bar()
    device = torch.device(args.device)
    for _ in range(args.runs):
        print(json.dumps(run_once(device, transformers)), flush=True)


if __name__ == "__main__":
    main()
