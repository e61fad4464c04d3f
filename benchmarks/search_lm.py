"""Recipe search of notebook 11: the learning rate of each block style, chosen on the validation split.

    .venv/bin/python benchmarks/search_lm.py                       # the grid below, about 4 minutes of CPU
    .venv/bin/python benchmarks/search_lm.py --styles 2017 --lrs 3e-3 --steps 450

Model selection only: the text is split as in the notebook (the first 90% for training; of the last 10%, the
first half for validation and the second half held out as the test split, which this script never reads).
Each setting trains notebook 11's model (d_model 64, 4 heads, 2 layers; the 2017 block with a ReLU feed-forward
of width 128, the 2025 block with 2 key/value heads and a SwiGLU of width 110: 73,536 and 73,728 parameters)
for the same number of steps with ``helpers.models.lm.train_lm`` (batches of 32 windows of 64 characters,
AdamW, warm-up then cosine decay to 0), for each seed (the seed of the initial weights and of the batches),
and prints one JSON line: the validation loss over the whole validation split (``evaluate_lm``, nats per
character), the CPU seconds of training, and the setting. The last lines give, per style, the learning rate
with the lowest mean validation loss over the seeds.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

os.environ.setdefault("OMP_NUM_THREADS", "1")

import torch  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from helpers.data import CharVocab, load_pydoc_text, split_text  # noqa: E402
from helpers.models.lm import DecoderLM, evaluate_lm, train_lm  # noqa: E402

#: The notebook's two models: the same width, heads and depth; feed-forward widths that equalise the parameters.
CONFIG = {"d_model": 64, "num_heads": 4, "num_layers": 2, "max_len": 64}
D_FF = {"2017": 128, "2025": 110}
LRS = [1e-3, 2e-3, 3e-3, 4e-3, 5e-3, 7e-3, 1e-2]


def splits() -> tuple[CharVocab, torch.Tensor, torch.Tensor, torch.Tensor]:
    """The notebook's vocabulary and its training, validation and test ids."""
    text = load_pydoc_text()
    vocab = CharVocab(text)
    train, held_out = split_text(vocab.encode(text), val_fraction=0.1)
    val, test = split_text(held_out, val_fraction=0.5)
    return vocab, train, val, test


def build(style: str, vocab_size: int, seed: int) -> DecoderLM:
    """The notebook's model of ``style``, its weights seeded with ``seed``."""
    torch.manual_seed(seed)
    extra = {"kv_heads": 2} if style == "2025" else {}
    return DecoderLM(vocab_size, **CONFIG, d_ff=D_FF[style], style=style, **extra)


def run(style: str, lr: float, steps: int, seed: int) -> dict:
    vocab, train, val, _ = splits()
    model = build(style, len(vocab), seed)
    cpu = time.process_time()
    train_lm(model, train, val, steps=steps, context=64, batch_size=32, lr=lr, eval_every=steps, seed=seed)
    cpu = time.process_time() - cpu
    return {
        "style": style,
        "lr": lr,
        "steps": steps,
        "seed": seed,
        "val_loss": round(evaluate_lm(model, val), 4),
        "cpu_s": round(cpu, 1),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--styles", nargs="+", default=["2017", "2025"])
    parser.add_argument("--lrs", nargs="+", type=float, default=LRS)
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--seeds", nargs="+", type=int, default=[0, 1])
    args = parser.parse_args()
    torch.set_num_threads(1)
    print(f"# torch {torch.__version__}, capability {torch.backends.cpu.get_cpu_capability()}, threads 1", flush=True)
    results = []
    for style in args.styles:
        for lr in args.lrs:
            for seed in args.seeds:
                result = run(style, lr, args.steps, seed)
                results.append(result)
                print(json.dumps(result), flush=True)
    for style in args.styles:
        means = {lr: statistics.mean(r["val_loss"] for r in results if r["style"] == style and r["lr"] == lr) for lr in args.lrs}
        best = min(means, key=means.get)
        table = ", ".join(f"{lr:g}: {loss:.4f}" for lr, loss in means.items())
        print(json.dumps({"style": style, "best_lr": best, "mean_val_loss": round(means[best], 4)}), f"# {table}", flush=True)


if __name__ == "__main__":
    main()
