"""Recipe trials for notebook 07's transformer on validation data only (never the test set).

    .venv/bin/python benchmarks/search_classifier.py          # the trials the notebook quotes (dropout)
    .venv/bin/python benchmarks/search_classifier.py '[{"model": {"num_layers": 2}}]' --seeds 0 1

Each setting changes the notebook's recipe (``TransformerClassifier``'s defaults, peak learning rate 1e-2,
50 epochs, batch 128, weight decay 0.05) and is trained on the notebook's training part (3,200 signals) and
scored on its validation split (800), once per seed. One JSON line per run: the final and the best validation
accuracy, the final validation loss and the training seconds. One thread; a run takes about 40 seconds.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from helpers.data import load_mnist1d, split_validation  # noqa: E402
from helpers.models import TransformerClassifier  # noqa: E402
from helpers.training import fit  # noqa: E402

# what the notebook quotes: no dropout (the default) against dropout 0.1 after every sub-layer
QUOTED = [{"model": {"dropout": 0.0}}, {"model": {"dropout": 0.1}}]


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("settings", nargs="?", help="a JSON list of settings (default: the ones the notebook quotes)")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1], help="model seeds (default 0 1)")
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    data = load_mnist1d()
    x_fit, y_fit, x_val, y_val = split_validation(data["x_train"], data["y_train"], fraction=0.2, seed=0)
    for setting in json.loads(args.settings) if args.settings else QUOTED:
        cfg = {"lr": 1e-2, "epochs": 50, "batch_size": 128, "model": {}, **setting}
        for seed in args.seeds:
            torch.manual_seed(seed)
            model = TransformerClassifier(**cfg["model"])
            history = fit(
                model, x_fit, y_fit, x_val, y_val, epochs=cfg["epochs"], lr=cfg["lr"], batch_size=cfg["batch_size"],
                weight_decay=0.05, seed=seed, progress=False, eval_train=False,
            )  # fmt: skip
            line = {
                "setting": setting,
                "seed": seed,
                "validation accuracy": round(100 * history.val_acc[-1], 2),
                "best epoch's": round(100 * max(history.val_acc), 2),
                "validation loss": round(history.val_loss[-1], 4),
                "seconds": round(history.seconds, 1),
            }
            print(json.dumps(line), flush=True)


if __name__ == "__main__":
    main()
