"""Recipe search for notebook 07 on validation data only (never the test set), and the spread of its claims.

    .venv/bin/python benchmarks/search_classifier.py                       # the settings the results file quotes
    .venv/bin/python benchmarks/search_classifier.py '[{"arch": {"num_layers": 3}}, {"model": "gru", "lr": 0.1}]' --seeds 0 1 2
    .venv/bin/python benchmarks/search_classifier.py --grid                # every model's learning-rate grid at the recipe
    .venv/bin/python benchmarks/search_classifier.py --pipeline --seeds 0 1 2 3 4 5 6 7 8 9   # the notebook, per seed

Search (the default): each setting changes notebook 07's recipe (``BASE``: ``TransformerClassifier``'s defaults,
peak learning rate 1e-2, 40 epochs, batch 128, weight decay 0.05, gradient norm clipped at 1, the weights of the
epoch with the lowest validation loss kept, every training batch transformed by ``helpers.data.random_transform``)
or trains a baseline (``"model": "mlp" | "cnn" | "gru"``). It trains on the notebook's training part (3,200 signals)
and is scored on its validation split (800), once per seed (the seed draws the initial weights, the batches and the
augmentation). One JSON line per run (final and kept validation accuracy, validation loss, the largest gradient norm,
CPU seconds), then one per setting (mean and lowest).

``--grid`` trains every model at the recipe with each learning rate of its grid (``GRID``), full length: the two
best neighbours of each grid are the two candidates the notebook tries (``CANDIDATES``).

``--pipeline`` runs notebook 07's own procedure for each seed (with a setting's changes, if one is given): each
model's two candidate learning rates tried in ``SHORT``-epoch runs and one chosen by
``helpers.training.choose_learning_rate`` (the lowest last validation loss, runs that blew up refused), the chosen
rate's long run on the training part (``EPOCHS`` epochs, the best validation epoch kept), the test set once per final
model, and the attention statistics of section 9. It chooses nothing: it measures how far the notebook's training
claims move with the seed (a stand-in for another machine's trajectory), one JSON line per seed. Run it under each
kernel family (``ATEN_CPU_CAPABILITY=avx2``; ``ATEN_CPU_CAPABILITY=default MKL_CBWR=COMPATIBLE``); the JSON line
records which. ``benchmarks/results/07_transformer_classifier.md`` holds the tables. One thread throughout.
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
from helpers.models.classifier import attention_summary  # noqa: E402
from helpers.training import choose_learning_rate, evaluate, fit  # noqa: E402

MODELS = {"transformer": TransformerClassifier, "mlp": MLPClassifier, "cnn": CNNClassifier, "gru": GRUClassifier}
# notebook 07's recipe; a setting overrides some of these ("arch": the model's keyword arguments)
BASE = dict(
    model="transformer", arch={}, lr=1e-2, epochs=40, batch_size=128, weight_decay=0.05, clip=1.0, keep_best=True,
    shift=8, scale=0.2, ramp=1.0,
)  # fmt: skip
NONE = dict(shift=0, scale=0.0, ramp=0.0)  # no augmentation
# the settings the results file quotes against the recipe: 3 blocks for the same training time, no augmentation, no
# clipping (the recipe's own numbers come from --pipeline, seeds 0-9; "last epoch's" is the recipe without keep_best)
QUOTED = [
    {"arch": {"num_layers": 3}, "epochs": 27},
    {**NONE},
    {"clip": None},
]
# every model's learning-rate grid (--grid), and the two candidates the notebook tries: the grid's best and the rate below
GRID = {
    "transformer": (3e-3, 1e-2, 2e-2),
    "mlp": (3e-3, 1e-2, 3e-2, 1e-1),
    "cnn": (1e-2, 3e-2, 1e-1),
    "gru": (1e-2, 3e-2, 1e-1, 2e-1),
}
CANDIDATES = {"transformer": (3e-3, 1e-2), "mlp": (3e-3, 1e-2), "cnn": (1e-2, 3e-2), "gru": (3e-2, 1e-1)}
SHORT, EPOCHS = 5, 40  # the notebook's learning-rate runs and long runs


def augmentation(shift: int, scale: float, ramp: float):
    """fit's ``augment``: ``helpers.data.random_transform`` with these bounds (None when all are 0)."""
    if not (shift or scale or ramp):
        return None
    return lambda xb, generator: random_transform(xb, generator, max_shift=shift, max_scale=scale, max_ramp=ramp)


def train(cfg: dict, seed: int, x, y, x_val, y_val, epochs=None, lr=None, eval_train: bool | int = False, keep_best=None):
    """Seed, build and train one model as the notebook does; returns (model, History, CPU seconds)."""
    torch.manual_seed(seed)
    model = MODELS[cfg["model"]](**cfg["arch"])
    start = time.process_time()
    history = fit(
        model, x, y, x_val, y_val, epochs=epochs or cfg["epochs"], lr=lr or cfg["lr"], batch_size=cfg["batch_size"],
        weight_decay=cfg["weight_decay"], seed=seed, progress=False, eval_train=eval_train,
        augment=augmentation(cfg["shift"], cfg["scale"], cfg["ramp"]), clip_grad_norm=cfg["clip"],
        keep_best=cfg["keep_best"] if keep_best is None else keep_best,
    )  # fmt: skip
    return model, history, time.process_time() - start


def kernels() -> dict:
    """The kernel family this process runs: PyTorch's dispatch and MKL's reproducibility mode."""
    return {k: os.environ.get(k, "") for k in ("ATEN_CPU_CAPABILITY", "MKL_CBWR")}


def search(settings: list[dict], seeds: list[int], data: dict) -> None:
    x_fit, y_fit, x_val, y_val = split_validation(data["x_train"], data["y_train"], fraction=0.2, seed=0)
    for setting in settings:
        cfg = {**BASE, **setting}
        accs = []
        for seed in seeds:
            model, history, seconds = train(cfg, seed, x_fit, y_fit, x_val, y_val)
            accs.append(100 * evaluate(model, x_val, y_val)[1])  # the weights kept (the best epoch's, with keep_best)
            line = {
                "setting": setting,
                "seed": seed,
                "kernels": kernels(),
                "validation accuracy": round(accs[-1], 2),
                "last epoch's": round(100 * history.val_acc[-1], 2),
                "best epoch": history.best_epoch,
                "validation loss": round(min(history.val_loss), 4),
                "largest gradient norm": round(max(history.grad_norm), 2) if history.grad_norm else None,
                "cpu seconds": round(seconds, 1),
            }
            print(json.dumps(line), flush=True)
        summary = {"setting": setting, "mean": round(sum(accs) / len(accs), 2), "lowest": round(min(accs), 2)}
        print(json.dumps({**summary, "per seed": [round(a, 2) for a in accs]}), flush=True)


def grid(seeds: list[int], data: dict, models: list[str]) -> None:
    settings = [{"model": name, "lr": lr} for name in models for lr in GRID[name]]
    search(settings, seeds, data)


def pipeline(setting: dict, seeds: list[int], data: dict, models: list[str]) -> None:
    """Notebook 07's procedure, once per seed: every number its training claims read."""
    x_fit, y_fit, x_val, y_val = split_validation(data["x_train"], data["y_train"], fraction=0.2, seed=0)
    x_test, y_test = data["x_test"], data["y_test"]
    for seed in seeds:
        start = time.process_time()
        line: dict = {"setting": setting, "seed": seed, "kernels": kernels()}
        chosen, test_acc, train_acc, val_acc, seconds = {}, {}, {}, {}, {}
        for name in models:
            # the training recipe (epochs, augmentation, batch, weight decay, guards) is every model's; "arch" the transformer's
            cfg = {**BASE, **setting, "model": name}
            if name != "transformer":
                cfg["arch"] = {}
            is_transformer = name == "transformer"
            # the learning-rate runs: SHORT epochs each, from the same initial weights; their last epoch is the one compared
            runs = {lr: train(cfg, seed, x_fit, y_fit, x_val, y_val, SHORT, lr, keep_best=False)[1] for lr in CANDIDATES[name]}
            chosen[name] = choose_learning_rate(runs)
            line[f"{name} lr runs: last validation loss, accuracy"] = {
                f"{lr:g}": [round(r.val_loss[-1], 4), round(100 * r.val_acc[-1], 2)] for lr, r in runs.items()
            }
            model, long, secs = train(
                cfg, seed, x_fit, y_fit, x_val, y_val, EPOCHS, chosen[name], eval_train=800 if is_transformer else False
            )
            seconds[name] = round(secs, 1)
            val_acc[name] = round(100 * evaluate(model, x_val, y_val)[1], 2)
            test_acc[name] = round(100 * evaluate(model, x_test, y_test)[1], 2)
            train_acc[name] = round(100 * evaluate(model, x_fit, y_fit)[1], 2)
            line[f"{name} long run"] = {
                "best epoch": long.best_epoch,
                "last validation accuracy": round(100 * long.val_acc[-1], 2),
                "lowest validation loss": round(min(long.val_loss), 4),
                "largest gradient norm": round(max(long.grad_norm), 2),
                "short run's validation accuracy": round(100 * runs[chosen[name]].val_acc[-1], 2),
                "short run's validation loss": round(runs[chosen[name]].val_loss[-1], 4),
            }
            if is_transformer:
                best = long.best_epoch
                line["transformer long run"].update(
                    {
                        "training loss (best epoch)": round(long.train_loss[best], 5),
                        "training accuracy (best epoch)": round(100 * long.train_acc[best], 2),
                        "validation over training loss": round(long.val_loss[best] / long.train_loss[best], 2),
                    }
                )
                maps = model.attention_maps(x_test[:3])  # the notebook's section 9
                received, spread = attention_summary(maps[-1])
                top3 = received.topk(3, dim=-1).values.sum(-1).mean().item()
                line["attention: top-3 share, spread"] = [round(top3, 4), round(spread.mean().item(), 4)]
        line.update(
            {
                "chosen lr": chosen,
                "validation accuracy (kept weights)": val_acc,
                "test accuracy": test_acc,
                "training accuracy": train_acc,
                "long run cpu seconds": seconds,
                "cpu seconds": round(time.process_time() - start, 1),
            }
        )
        print(json.dumps(line), flush=True)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("settings", nargs="?", help="a JSON list of settings (default: the ones the results file quotes)")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2, 3, 4], help="seeds (default 0 to 4)")
    parser.add_argument("--grid", action="store_true", help="every model's learning-rate grid at the recipe")
    parser.add_argument("--pipeline", action="store_true", help="run the notebook's procedure (the first setting's recipe)")
    parser.add_argument(
        "--models", nargs="+", default=list(MODELS), choices=list(MODELS), help="--grid, --pipeline: which models"
    )
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    data = load_mnist1d()
    settings = json.loads(args.settings) if args.settings else QUOTED
    if args.pipeline:
        pipeline(settings[0] if args.settings else {}, args.seeds, data, args.models)
    elif args.grid:
        grid(args.seeds, data, args.models)
    else:
        search(settings, args.seeds, data)


if __name__ == "__main__":
    main()
