"""Benchmark: what a sliding window costs notebook 11's model (notebook 12, section 4), over seeds.

    .venv/bin/python benchmarks/bench_scale_window.py                      # seeds 0-9, the notebook's recipe
    .venv/bin/python benchmarks/bench_scale_window.py --steps 200 600      # the notebook's budget and three times it
    ATEN_CPU_CAPABILITY=avx2 .venv/bin/python benchmarks/bench_scale_window.py    # another kernel family

For each seed: two copies of notebook 11's 2025-style ``DecoderLM`` from the same initial weights, one trained with
full causal attention and one through ``helpers.scale.sliding.WindowedLM`` with a window of 8, by
``helpers.models.train_lm`` (AdamW, warm-up and cosine decay, gradient clipping); then the full model read through
windows of 1 to 16 on the same validation windows. One JSON line per (seed, steps): the validation losses (nats) and
the differences the notebook's claims bound. The notebook's own run is seed 0 at the first ``--steps``.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

os.environ.setdefault("OMP_NUM_THREADS", "1")

import torch  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from helpers.data import CharVocab, load_pydoc_text, split_text  # noqa: E402
from helpers.models import DecoderLM, train_lm  # noqa: E402
from helpers.models.lm import lm_loss  # noqa: E402
from helpers.scale.sliding import WindowedLM  # noqa: E402

#: The notebook's recipe (section 4, "What a window costs notebook 11's model").
RECIPE = dict(context=32, batch_size=16, lr=3e-3)
CONFIG = dict(d_model=64, num_heads=4, num_layers=2, d_ff=96, max_len=64, style="2025", kv_heads=2)
WINDOWS = (1, 2, 4, 8, 16)
TRAIN_WINDOW = 8


def data():
    """Notebook 11's corpus as character ids, split as the notebook splits it."""
    text = load_pydoc_text()
    vocab = CharVocab(text)
    train_ids, val_ids = split_text(vocab.encode(text), val_fraction=0.1)
    return vocab, train_ids, val_ids


def run(seed: int, steps: int, vocab, train_ids, val_ids, context: int = RECIPE["context"]) -> dict:
    """One seed: the full model, the model trained with a window, and the full model read through windows."""
    recipe = {**RECIPE, "context": context}
    torch.manual_seed(seed)
    full = DecoderLM(vocab_size=len(vocab), **CONFIG)
    torch.manual_seed(seed)
    local = DecoderLM(vocab_size=len(vocab), **CONFIG)  # the same initial weights
    train = dict(steps=steps, eval_every=steps, seed=seed, **recipe)
    begin = time.process_time()
    hist_full = train_lm(full, train_ids, val_ids, **train)
    hist_local = train_lm(WindowedLM(local, TRAIN_WINDOW), train_ids, val_ids, **train)
    starts = torch.linspace(0, len(val_ids) - context - 1, 64).long()  # train_lm's validation windows
    val = val_ids[starts[:, None] + torch.arange(context + 1)]  # (64, context + 1)
    with torch.no_grad():
        read = {w: lm_loss(WindowedLM(full, w), val[:, :-1], val[:, 1:]).item() for w in WINDOWS}
    full_loss, local_loss = hist_full.val_loss[-1], hist_local.val_loss[-1]
    return {
        "seed": seed,
        "steps": steps,
        "context": context,
        "kernels": os.environ.get("ATEN_CPU_CAPABILITY", "native") + ("+MKL_CBWR" if os.environ.get("MKL_CBWR") else ""),
        "full": round(full_loss, 4),
        "window8_trained": round(local_loss, 4),
        "window8_minus_full": round(local_loss - full_loss, 4),
        "read_minus_full": {w: round(loss - full_loss, 4) for w, loss in read.items()},
        "cpu_s": round(time.process_time() - begin, 1),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=list(range(10)))
    parser.add_argument("--steps", type=int, nargs="+", default=[200])
    parser.add_argument("--context", type=int, default=RECIPE["context"])
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    vocab, train_ids, val_ids = data()
    for steps in args.steps:
        for seed in args.seeds:
            print(json.dumps(run(seed, steps, vocab, train_ids, val_ids, args.context)), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
