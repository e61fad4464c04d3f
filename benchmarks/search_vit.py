"""Recipe search for notebook 08 on validation data only (never the test set).

    .venv/bin/python benchmarks/search_vit.py                 # the settings the notebook quotes
    .venv/bin/python benchmarks/search_vit.py '[{"mixup": 0.5}]' --splits 3

Each setting changes the notebook's ViT recipe (``BASE``) or trains the small CNN (``"cnn": 1``). It is
trained on 80% of the 1,437 training digits and scored on the other 20% (287 images), for several
stratified splits (``helpers.data.split_validation`` with seeds 0, 1, ...; the split's seed is also the
model's), and one JSON line per setting gives the mean and the lowest validation accuracy and the mean
seconds per run. One thread; a setting takes about a minute (80 epochs, five splits).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from helpers.data import load_digits_split, split_validation  # noqa: E402
from helpers.models import SmallCNN, VisionTransformer, augmented_step  # noqa: E402
from helpers.training import evaluate, fit  # noqa: E402

# notebook 08's ViT recipe; a setting overrides some of these
BASE = dict(d_model=64, depth=2, batch_size=128, epochs=80, lr=4e-3, weight_decay=0.05, smoothing=0.1, mixup=1.0, shift=0)
# what section 5 of the notebook quotes (the CNN rows: section 6)
QUOTED = [
    {"batch_size": 32, "lr": 2e-3, "mixup": 0.0},
    {"mixup": 0.0},
    {"mixup": 0.2},
    {"mixup": 1.0},
    {"mixup": 1.0, "epochs": 60},
    {"cnn": 1, "batch_size": 64, "lr": 1e-2, "epochs": 40, "weight_decay": 0.01, "mixup": 0.0},
    {"cnn": 1, "batch_size": 128, "lr": 2e-2, "epochs": 40, "weight_decay": 0.01, "mixup": 0.0},
    {"cnn": 1, "batch_size": 128, "lr": 2e-2, "epochs": 40, "weight_decay": 0.01, "mixup": 0.2},
]


def run(setting: dict, split: int, x: torch.Tensor, y: torch.Tensor) -> tuple[float, float]:
    """Validation accuracy (%) and training seconds of one setting on one split."""
    cfg = {**BASE, **setting}
    x_fit, y_fit, x_val, y_val = split_validation(x, y, fraction=0.2, seed=split)
    torch.manual_seed(split)
    if cfg.get("cnn"):
        model = SmallCNN()
    else:
        model = VisionTransformer(
            image_size=8, in_channels=1, num_classes=10, patch_size=4, d_model=cfg["d_model"], depth=cfg["depth"],
            num_heads=4, d_ff=2 * cfg["d_model"],
        )  # fmt: skip
    step = augmented_step(cfg["shift"], cfg["smoothing"], split, cfg["mixup"])
    history = fit(
        model, x_fit, y_fit, None, None, epochs=cfg["epochs"], lr=cfg["lr"], batch_size=cfg["batch_size"],
        weight_decay=cfg["weight_decay"], seed=split, progress=False, step_fn=step, eval_train=False,
    )  # fmt: skip
    return 100 * evaluate(model, x_val, y_val)[1], history.seconds


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("settings", nargs="?", help="a JSON list of settings (default: the ones the notebook quotes)")
    parser.add_argument("--splits", type=int, default=5, help="validation splits per setting (default 5)")
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    settings = json.loads(args.settings) if args.settings else QUOTED
    x, y, _, _ = load_digits_split()
    for setting in settings:
        results = [run(setting, split, x, y) for split in range(args.splits)]
        accs = [acc for acc, _ in results]
        line = {
            "setting": setting,
            "mean": round(sum(accs) / len(accs), 2),
            "lowest": round(min(accs), 2),
            "per split": [round(a, 2) for a in accs],
            "seconds per run": round(sum(s for _, s in results) / len(results), 1),
        }
        print(json.dumps(line), flush=True)


if __name__ == "__main__":
    t0 = time.perf_counter()
    main()
    print(f"# {time.perf_counter() - t0:.0f} s in all", file=sys.stderr)
