"""Recipe search for notebook 07 on validation data only (never the test set), and the chosen recipe's spread.

    .venv/bin/python benchmarks/search_classifier.py                       # the settings benchmarks/README.md quotes
    .venv/bin/python benchmarks/search_classifier.py '[{"shift": 4}, {"model": "gru", "lr": 0.1}]' --seeds 0 1 2
    .venv/bin/python benchmarks/search_classifier.py --pipeline            # the notebook's procedure, seeds 0 to 4

Search (the default): each setting changes notebook 07's recipe (``BASE``: the transformer with
``TransformerClassifier``'s defaults, peak learning rate 1e-2, 80 epochs, batch 128, weight decay 0.05, every
training batch transformed by ``helpers.data.random_transform``: rolled by up to ``shift`` = 8 samples, scaled by up
to ``scale`` = 20%, a ramp of up to ``ramp`` = 1 added; 0 turns each off) or trains a baseline (``"model": "mlp" |
"cnn" | "gru"``). It trains on the notebook's training part (3,200 signals) and is scored on its validation split
(800), once per seed (the seed draws the initial weights, the batches and the augmentation). One JSON line per run
(final and best validation accuracy, final validation loss, CPU seconds), then one per setting (mean and lowest).

``--pipeline`` runs notebook 07's own procedure for each seed instead (with a setting's changes, if one is given):
every model's learning rate chosen by the notebook's rule (three 10-epoch runs, lowest validation loss), the
transformer's long validation run, then each final model retrained on all 4,000 training signals and evaluated on
the test set once, and the attention statistics of section 7. It chooses nothing: it measures how far the
notebook's training claims move with the seed (a stand-in for another machine's trajectory), one JSON line per
seed. Run it under each CPU set-up (``ATEN_CPU_CAPABILITY=avx2``, ``ATEN_CPU_CAPABILITY=default MKL_CBWR=COMPATIBLE``)
to see them move with the kernels too. One thread throughout: the default search takes about 20 minutes of CPU
(11 settings x 5 seeds, 3 to 32 s a run), ``--pipeline`` about 90 s of CPU per seed natively and 170 s under
``default``.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from helpers.data import load_mnist1d, random_transform, split_validation  # noqa: E402
from helpers.models import CNNClassifier, GRUClassifier, MLPClassifier, TransformerClassifier  # noqa: E402
from helpers.training import evaluate, fit  # noqa: E402

MODELS = {"transformer": TransformerClassifier, "mlp": MLPClassifier, "cnn": CNNClassifier, "gru": GRUClassifier}
# notebook 07's recipe; a setting overrides some of these ("arch": the model's keyword arguments)
BASE = dict(model="transformer", arch={}, lr=1e-2, epochs=80, batch_size=128, weight_decay=0.05, shift=8, scale=0.2, ramp=1.0)
NONE = dict(shift=0, scale=0.0, ramp=0.0)  # no augmentation
# what benchmarks/README.md quotes: from the notebook's first recipe (4 heads, 50 epochs, no augmentation) to its recipe
QUOTED = [
    {"arch": {"num_heads": 4}, "epochs": 50, **NONE},
    {"arch": {"num_heads": 4}, "epochs": 50, **NONE, "shift": 8},
    {"epochs": 50, **NONE, "shift": 8},
    {**NONE, "shift": 8},
    {"epochs": 50},
    {},
    {"arch": {"num_heads": 4}},
    {"arch": {"dropout": 0.1}},
    {"arch": {"stride": 3}},
    {"model": "gru", "lr": 0.1},
    {"model": "cnn", "lr": 0.03},
]
# the notebook's learning-rate grids (--pipeline)
TRANSFORMER_LRS, BASELINE_LRS = (1e-3, 3e-3, 1e-2), (1e-2, 3e-2, 1e-1)


def augmentation(shift: int, scale: float, ramp: float):
    """fit's ``augment``: ``helpers.data.random_transform`` with these bounds (None when all are 0)."""
    if not (shift or scale or ramp):
        return None
    return lambda xb, generator: random_transform(xb, generator, max_shift=shift, max_scale=scale, max_ramp=ramp)


def train(cfg: dict, seed: int, x, y, x_val=None, y_val=None, epochs=None, lr=None, eval_train: bool | int = False):
    """Seed, build and train one model; returns (model, History, CPU seconds)."""
    torch.manual_seed(seed)
    model = MODELS[cfg["model"]](**cfg["arch"])
    start = time.process_time()
    history = fit(
        model, x, y, x_val, y_val, epochs=epochs or cfg["epochs"], lr=lr or cfg["lr"], batch_size=cfg["batch_size"],
        weight_decay=cfg["weight_decay"], seed=seed, progress=False, eval_train=eval_train,
        augment=augmentation(cfg["shift"], cfg["scale"], cfg["ramp"]),
    )  # fmt: skip
    return model, history, time.process_time() - start


def search(settings: list[dict], seeds: list[int], data: dict) -> None:
    x_fit, y_fit, x_val, y_val = split_validation(data["x_train"], data["y_train"], fraction=0.2, seed=0)
    for setting in settings:
        cfg = {**BASE, **setting}
        accs = []
        for seed in seeds:
            _, history, seconds = train(cfg, seed, x_fit, y_fit, x_val, y_val)
            accs.append(100 * history.val_acc[-1])
            line = {
                "setting": setting,
                "seed": seed,
                "validation accuracy": round(accs[-1], 2),
                "best epoch's": round(100 * max(history.val_acc), 2),
                "validation loss": round(history.val_loss[-1], 4),
                "cpu seconds": round(seconds, 1),
            }
            print(json.dumps(line), flush=True)
        summary = {"setting": setting, "mean": round(sum(accs) / len(accs), 2), "lowest": round(min(accs), 2)}
        print(json.dumps({**summary, "per seed": [round(a, 2) for a in accs]}), flush=True)


def pipeline(setting: dict, seeds: list[int], data: dict, models: list[str]) -> None:
    """Notebook 07's procedure, once per seed: every number its training claims read."""
    x_fit, y_fit, x_val, y_val = split_validation(data["x_train"], data["y_train"], fraction=0.2, seed=0)
    x_test, y_test = data["x_test"], data["y_test"]
    setup = {k: os.environ.get(k, "") for k in ("ATEN_CPU_CAPABILITY", "MKL_CBWR")}
    for seed in seeds:
        start = time.process_time()
        line: dict = {"setting": setting, "seed": seed, "set-up": setup}
        chosen, test_acc, train_acc = {}, {}, {}
        for name in models:
            # the training recipe (epochs, augmentation, batch, weight decay) is every model's; "arch" the transformer's
            cfg = {**BASE, **setting, "model": name}
            if name != "transformer":
                cfg["arch"] = {}
            is_transformer = name == "transformer"
            grid = TRANSFORMER_LRS if is_transformer else BASELINE_LRS
            eval_train = 800 if is_transformer else False  # as the notebook: the transformer's training curve
            runs = {lr: train(cfg, seed, x_fit, y_fit, x_val, y_val, 10, lr, eval_train)[1] for lr in grid}
            chosen[name] = min(runs, key=lambda lr: runs[lr].val_loss[-1])
            line[f"{name} lr runs: validation accuracy, loss"] = {
                f"{lr:g}": [round(100 * r.val_acc[-1], 2), round(r.val_loss[-1], 4)] for lr, r in runs.items()
            }
            if is_transformer:
                short = runs[chosen[name]]
                _, long, _ = train(cfg, seed, x_fit, y_fit, x_val, y_val, lr=chosen[name], eval_train=800)
                line["10-epoch run: last 4 validation losses"] = [round(v, 4) for v in short.val_loss[-4:]]
                line["long run"] = {
                    "validation accuracy": round(100 * long.val_acc[-1], 2),
                    "best": round(100 * max(long.val_acc), 2),
                    "validation loss": round(long.val_loss[-1], 4),
                    "training loss": round(long.train_loss[-1], 5),
                    "training accuracy": round(100 * long.train_acc[-1], 2),
                    "validation over training loss": round(long.val_loss[-1] / long.train_loss[-1], 2),
                }
            model, history, seconds = train(cfg, seed, data["x_train"], data["y_train"], lr=chosen[name])
            test_acc[name] = round(100 * evaluate(model, x_test, y_test)[1], 2)
            train_acc[name] = round(100 * evaluate(model, data["x_train"], data["y_train"])[1], 2)
            line[f"{name} final run cpu seconds"] = round(seconds, 1)
            if is_transformer:
                maps = model.attention_maps(x_test[:3])  # the notebook's section 7
                last = maps[-1].mean(dim=1)  # (3, n, n)
                received = last.mean(dim=1)  # (3, n)
                top3 = received.topk(3, dim=-1).values.sum(-1).mean().item()
                spread = (0.5 * (last - received[:, None, :]).abs().sum(-1).mean(-1)).mean().item()
                line["attention: top-3 share, spread"] = [round(top3, 4), round(spread, 4)]
        line.update(
            {
                "chosen lr": chosen,
                "test accuracy": test_acc,
                "training accuracy": train_acc,
                "cpu seconds": round(time.process_time() - start, 1),
            }
        )
        print(json.dumps(line), flush=True)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("settings", nargs="?", help="a JSON list of settings (default: the ones benchmarks/README.md quotes)")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2, 3, 4], help="seeds (default 0 to 4)")
    parser.add_argument("--pipeline", action="store_true", help="run the notebook's procedure (the first setting's recipe)")
    parser.add_argument("--models", nargs="+", default=list(MODELS), choices=list(MODELS), help="--pipeline: which models")
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    data = load_mnist1d()
    settings = json.loads(args.settings) if args.settings else QUOTED
    if args.pipeline:
        pipeline(settings[0] if args.settings else {}, args.seeds, data, args.models)
    else:
        search(settings, args.seeds, data)


if __name__ == "__main__":
    main()
