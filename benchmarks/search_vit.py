"""Recipe search for notebook 08 on validation data only (never the test set).

    .venv/bin/python benchmarks/search_vit.py                 # the settings the notebook quotes
    .venv/bin/python benchmarks/search_vit.py '[{"mixup": 0.5}]' --splits 3

Each setting changes the notebook's ViT recipe (``BASE``) or trains the small CNN (``"cnn": 1``). It is
trained on 80% of the 1,437 training digits and scored on the other 20% (287 images), for several
stratified splits (``helpers.data.split_validation`` with seeds 0, 1, ...; the split's seed is also the
model's), and one JSON line per setting gives the mean and the lowest validation accuracy and the mean
seconds per run. One thread; a setting takes about a minute (80 epochs, five splits).

    .venv/bin/python benchmarks/search_vit.py --pipeline --seeds 0 1 2 3 4 5 6 7 8 9
    ATEN_CPU_CAPABILITY=avx2 .venv/bin/python benchmarks/search_vit.py --pipeline
    ATEN_CPU_CAPABILITY=default MKL_CBWR=COMPATIBLE .venv/bin/python benchmarks/search_vit.py --pipeline

``--pipeline`` chooses nothing: for each seed it repeats notebook 08's training runs (the ViT and the small CNN on
the training part with validation after every epoch, logistic regression with C chosen on validation, the p = 2 ViT
on shifted digits, the ViT and CNN trained on shifted digits), exactly as the solution notebook runs them with seed
0, and prints one JSON line per seed with every number its claims compare (validation and test accuracies, the
position embeddings' similarities, the rollout's share on ink, the class token's spread by block, the token changes
under a shift, the accuracies on shifted digits). A seed stands in for another machine's trajectory; run it under
each kernel family too (``ATEN_CPU_CAPABILITY``). About 20 s of CPU per seed natively. ``--centred-grid`` trains the
p = 2 ViT on centred digits instead (whose position embeddings, the notebook says, learn no layout).
``--table native.jsonl avx2.jsonl ...`` turns saved ``--pipeline`` outputs into the markdown table of
``benchmarks/results/08_vision_transformer.md``.
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

import torch.nn.functional as F  # noqa: E402

from helpers.data import load_digits_split, split_validation  # noqa: E402
from helpers.models import (  # noqa: E402
    SmallCNN,
    VisionTransformer,
    attention_rollout,
    augmented_step,
    patch_embedding,
    patchify,
    position_similarity,
    vit_forward,
)
from helpers.models.vit import ImagePatchEmbedding  # noqa: E402
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
    # the CNN given the ViT's search of mixup strengths and lengths (issue: the same care for both networks)
    *[
        {"cnn": 1, "batch_size": 128, "lr": 2e-2, "epochs": epochs, "weight_decay": 0.01, "mixup": alpha}
        for epochs, alpha in ((40, 1.0), (60, 0.0), (60, 0.2), (60, 1.0), (80, 0.0), (80, 0.2), (80, 1.0))
    ],
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


# notebook 08's configurations: its section 5 (the ViT and CNN it compares), section 7 (the p = 2 ViT whose
# positions and attention it reads) and section 8 (the ViT and CNN trained on shifted digits)
VIT_CONFIG = dict(image_size=8, in_channels=1, num_classes=10, patch_size=4, d_model=64, depth=2, num_heads=4, d_ff=128)
VIT_TRAINING = dict(epochs=80, lr=4e-3, batch_size=128, weight_decay=0.05)
VIT_SHIFT, VIT_SMOOTHING, VIT_MIXUP = 0, 0.1, 1.0
CNN_TRAINING = dict(epochs=40, lr=2e-2, batch_size=128, weight_decay=0.01)
CNN_SMOOTHING = 0.1
LOGREG_C = (0.01, 0.1, 1.0, 10.0, 100.0)
GRID_CONFIG = dict(VIT_CONFIG, patch_size=2, d_model=32, d_ff=64)
GRID_TRAINING = dict(epochs=30, lr=2e-3, batch_size=32, weight_decay=0.05)
GRID_SHIFT, GRID_SMOOTHING = 1, 0.1
SHIFT_VIT_TRAINING = dict(VIT_TRAINING, epochs=40)  # the ViT recipe with random shifts instead of mixup, 40 epochs
SHIFTS = {"none": (0, 0), "right": (0, 1), "left": (0, -1), "down": (1, 0), "up": (-1, 0)}


class _Embedding(ImagePatchEmbedding):
    def forward(self, images):
        return patch_embedding(images, self.proj.weight, self.proj.bias, self.patch_size)  # as the notebook's YourViT


class _ViT(VisionTransformer):
    """The notebook's YourViT with the reference functions: the same arithmetic as the solution notebook."""

    def __init__(self, **config):
        super().__init__(**config)
        embed = _Embedding(self.patch_embed.in_channels, self.patch_size, self.patch_embed.d_model)
        embed.load_state_dict(self.patch_embed.state_dict())
        self.patch_embed = embed

    def forward(self, images):
        return vit_forward(self, images)


def _train(make, seed, training, split, shift=0, smoothing=0.0, mix=0.0):
    """The notebook's train(): seeded, fit on the training part, validation accuracy after every epoch."""
    x_fit, y_fit, x_val, y_val = split
    torch.manual_seed(seed)
    model = make()
    step = augmented_step(shift, smoothing, seed, mix)
    history = fit(model, x_fit, y_fit, x_val, y_val, seed=seed, progress=False, step_fn=step, eval_train=False, **training)
    return model.eval(), history


def _shifted(images, dy, dx):
    padded = F.pad(images, (1, 1, 1, 1))  # (B, C, 10, 10)
    return padded[..., 1 - dy : 9 - dy, 1 - dx : 9 - dx]


@torch.no_grad()
def _block0_tokens(vit, images, positions):
    """Patch tokens of the p = 2 ViT after block 0, given the position embeddings added: (1, 1, 8, 8) -> (4, 4, d)."""
    tokens = torch.cat([vit.cls_token.expand(1, -1, -1), vit.patch_embed(images)], dim=1) + positions  # (1, 17, d)
    return vit.blocks[0](tokens)[0, 1:].reshape(4, 4, -1)


def _first_epoch(curve: list[float], level: float) -> int | None:
    """The first epoch (counting from 1) whose validation accuracy reaches ``level``; None if none does."""
    return next((epoch for epoch, acc in enumerate(curve, start=1) if acc >= level), None)


def _logistic_regression(split, x_test, y_test):
    """C chosen on the validation split, then the one test evaluation (deterministic: lbfgs)."""
    from sklearn.linear_model import LogisticRegression

    x_fit, y_fit, x_val, y_val = split

    def model(C):
        return LogisticRegression(C=C, max_iter=5000).fit(x_fit.reshape(len(x_fit), -1).numpy(), y_fit.numpy())

    scores = {C: model(C).score(x_val.reshape(len(x_val), -1).numpy(), y_val.numpy()) for C in LOGREG_C}
    best = max(scores, key=scores.get)
    return best, 100 * model(best).score(x_test.reshape(len(x_test), -1).numpy(), y_test.numpy())


def pipeline(seeds: list[int]) -> None:
    """Notebook 08's training runs and every number its claims read, for each seed (see the module's docstring)."""
    data = load_digits_split()
    x_train, y_train, x_test, y_test = data
    split = split_validation(x_train, y_train, fraction=0.2, seed=0)  # the notebook's split, the same for every seed
    setup = {k: os.environ.get(k, "") for k in ("ATEN_CPU_CAPABILITY", "MKL_CBWR")}
    best_c, logreg_test = _logistic_regression(split, x_test, y_test)
    for seed in seeds:
        start = time.process_time()
        line = {"seed": seed, "set-up": setup, "logistic regression: C, test": [best_c, round(logreg_test, 2)]}
        vit, vit_h = _train(lambda: _ViT(**VIT_CONFIG), seed, VIT_TRAINING, split, VIT_SHIFT, VIT_SMOOTHING, VIT_MIXUP)
        cnn, cnn_h = _train(SmallCNN, seed, CNN_TRAINING, split, 0, CNN_SMOOTHING)
        line["validation: ViT, CNN"] = [round(100 * h.final_val_acc, 2) for h in (vit_h, cnn_h)]
        line["validation, lowest of the last 10 epochs: ViT, CNN"] = [
            round(100 * min(h.val_acc[-10:]), 2) for h in (vit_h, cnn_h)
        ]
        line["test: ViT, CNN"] = [round(100 * evaluate(m, x_test, y_test)[1], 2) for m in (vit, cnn)]
        line["first epoch at 95% validation: ViT, CNN"] = [_first_epoch(h.val_acc, 0.95) for h in (vit_h, cnn_h)]
        grid, grid_h = _train(lambda: _ViT(**GRID_CONFIG), seed, GRID_TRAINING, split, GRID_SHIFT, GRID_SMOOTHING)
        line["validation: p = 2"] = round(100 * grid_h.final_val_acc, 2)
        flat = position_similarity(grid).reshape(16, 16)
        rows, cols = torch.arange(16) // 4, torch.arange(16) % 4
        distance = (rows[:, None] - rows[None, :]).abs() + (cols[:, None] - cols[None, :]).abs()
        near, far = flat[distance == 1].mean().item(), flat[distance >= 4].mean().item()
        line["positions: near, far, near - far"] = [round(near, 4), round(far, 4), round(near - far, 4)]
        line["positions: mean similarity by distance 1..6"] = [round(flat[distance == d].mean().item(), 4) for d in range(1, 7)]
        for count in (12, len(x_test)):  # the notebook's 12 shown images, and the whole test set
            sample = x_test[:count]
            rollout = attention_rollout(grid, sample)
            ink = patchify(sample, 2).mean(-1) > 0.2  # (count, 16)
            share = (rollout.reshape(count, 16) * ink).sum(-1).mean().item()
            line[f"rollout on ink, {count} images: share, over ink's share"] = [
                round(share, 4),
                round(share / ink.float().mean().item(), 4),
            ]
        with torch.no_grad():
            stream = torch.cat([vit.cls_token.expand(64, -1, -1), vit.patch_embed(x_test[:64])], dim=1) + vit.pos_embed
            stds = [stream[:, 0].std(-1).mean().item()]
            for block in vit.blocks:
                stream = block(stream)
                stds.append(stream[:, 0].std(-1).mean().item())
        line["class token std by block"] = [round(v, 4) for v in stds]
        digit = x_test[:1]
        pos = grid.pos_embed  # (1, 17, d)
        moved = torch.cat([pos[:, :1], pos[:, 1:].reshape(1, 4, 4, -1).roll(1, dims=2).reshape(1, 16, -1)], dim=1)
        shifted_digit = F.pad(digit, (2, 0))[..., :8]  # one whole patch to the right, zeros coming in on the left
        tokens = _block0_tokens(grid, digit, pos)
        fixed = _block0_tokens(grid, shifted_digit, pos)  # the patches meet new position embeddings
        along = _block0_tokens(grid, shifted_digit, moved)  # each patch keeps its position embedding: edges only
        scale = tokens.abs().max().item()
        line["token change / scale: positions fixed, positions moved along"] = [
            round((fixed[:, 1:] - tokens[:, :-1]).abs().max().item() / scale, 4),
            round((along[:, 1:] - tokens[:, :-1]).abs().max().item() / scale, 4),
        ]
        shift_vit, shift_vit_h = _train(lambda: _ViT(**VIT_CONFIG), seed, SHIFT_VIT_TRAINING, split, 1, VIT_SMOOTHING)
        shift_cnn, shift_cnn_h = _train(SmallCNN, seed, CNN_TRAINING, split, 1, CNN_SMOOTHING)
        line["validation: shifted ViT, shifted CNN"] = [round(100 * h.final_val_acc, 2) for h in (shift_vit_h, shift_cnn_h)]
        table = {}
        for name, (dy, dx) in SHIFTS.items():
            moved_x = _shifted(x_test, dy, dx)
            table[name] = [round(100 * evaluate(m, moved_x, y_test)[1], 2) for m in (cnn, vit, shift_cnn, shift_vit)]
        line["shifts: CNN, ViT, CNN shifted, ViT shifted"] = table
        line["cpu seconds"] = round(time.process_time() - start, 1)
        print(json.dumps(line), flush=True)


def centred_grid(seeds: list[int]) -> None:
    """The p = 2 ViT of the pipeline trained on centred digits instead of shifted ones: its validation accuracy and
    the mean similarity of its position embeddings one grid step apart and four or more apart, per seed."""
    x_train, y_train, _, _ = load_digits_split()
    split = split_validation(x_train, y_train, fraction=0.2, seed=0)
    setup = {k: os.environ.get(k, "") for k in ("ATEN_CPU_CAPABILITY", "MKL_CBWR")}
    rows, cols = torch.arange(16) // 4, torch.arange(16) % 4
    distance = (rows[:, None] - rows[None, :]).abs() + (cols[:, None] - cols[None, :]).abs()
    for seed in seeds:
        model, history = _train(lambda: _ViT(**GRID_CONFIG), seed, GRID_TRAINING, split, 0, GRID_SMOOTHING)
        flat = position_similarity(model).reshape(16, 16)
        line = {"seed": seed, "set-up": setup, "p = 2 on centred digits: validation, near, far": [
            round(100 * history.final_val_acc, 2),
            round(flat[distance == 1].mean().item(), 4),
            round(flat[distance >= 4].mean().item(), 4),
        ]}  # fmt: skip
        print(json.dumps(line), flush=True)


#: The columns of ``--table``: a name, and how to read it off a ``--pipeline`` line.
COLUMNS = {
    "ViT test": lambda r: r["test: ViT, CNN"][0],
    "CNN test": lambda r: r["test: ViT, CNN"][1],
    "ViT - logreg": lambda r: r["test: ViT, CNN"][0] - r["logistic regression: C, test"][1],
    "epochs to 95%: ViT - CNN": lambda r: (
        r["first epoch at 95% validation: ViT, CNN"][0] - r["first epoch at 95% validation: ViT, CNN"][1]
    ),
    "p = 2 val": lambda r: r["validation: p = 2"],
    "near": lambda r: r["positions: near, far, near - far"][0],
    "near - far": lambda r: r["positions: near, far, near - far"][2],
    "rollout on ink": lambda r: r["rollout on ink, 12 images: share, over ink's share"][0],
    "rollout ink ratio": lambda r: r["rollout on ink, 12 images: share, over ink's share"][1],
    "spread grows": lambda r: int(
        r["class token std by block"][0] < r["class token std by block"][1] < r["class token std by block"][2]
    ),
    "tokens: fixed": lambda r: r["token change / scale: positions fixed, positions moved along"][0],
    "tokens: edges": lambda r: r["token change / scale: positions fixed, positions moved along"][1],
    "CNN mean shift loss": lambda r: _shift_loss(r, 0, max),
    "ViT - CNN mean shift loss": lambda r: _shift_loss(r, 1, max) - _shift_loss(r, 0, max),
    "shift-trained ViT worst loss": lambda r: _shift_loss(r, 3, min),
    "shift-trained CNN worst loss": lambda r: _shift_loss(r, 2, min),
}


def _shift_loss(line: dict, model: int, mean_or_worst) -> float:
    """Accuracy lost on shifted digits: the mean over the four shifts (``max``), or on the worst shift (``min``)."""
    table = line["shifts: CNN, ViT, CNN shifted, ViT shifted"]
    moved = [table[s][model] for s in ("right", "left", "down", "up")]
    return table["none"][model] - (sum(moved) / 4 if mean_or_worst is max else min(moved))


def table(paths: list[str]) -> None:
    """Markdown: one row per ``--pipeline`` line of the files (one file per kernel family), then each column's range."""
    rows = []
    for path in paths:
        for text in Path(path).read_text().splitlines():
            if text.strip():
                line = json.loads(text)
                family = line["set-up"].get("ATEN_CPU_CAPABILITY") or "native"
                if line["set-up"].get("MKL_CBWR"):
                    family += " + MKL_CBWR=" + line["set-up"]["MKL_CBWR"]
                rows.append((family, line["seed"], [f(line) for f in COLUMNS.values()]))
    print("| kernels | seed | " + " | ".join(COLUMNS) + " |")
    print("|---|---|" + "---|" * len(COLUMNS))
    for family, seed, values in rows:
        print(f"| {family} | {seed} | " + " | ".join(f"{v:.4g}" for v in values) + " |")
    print("| **lowest** | | " + " | ".join(f"**{min(v[i] for *_, v in rows):.4g}**" for i in range(len(COLUMNS))) + " |")
    print("| **highest** | | " + " | ".join(f"**{max(v[i] for *_, v in rows):.4g}**" for i in range(len(COLUMNS))) + " |")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("settings", nargs="?", help="a JSON list of settings (default: the ones the notebook quotes)")
    parser.add_argument("--splits", type=int, default=5, help="validation splits per setting (default 5)")
    parser.add_argument(
        "--pipeline", "--claims", action="store_true", help="notebook 08's training runs and the numbers its claims read"
    )
    parser.add_argument("--seeds", type=int, nargs="+", default=list(range(10)), help="seeds for --pipeline (default 0 to 9)")
    parser.add_argument("--centred-grid", action="store_true", help="the p = 2 ViT trained on centred digits, per seed")
    parser.add_argument(
        "--table", nargs="+", metavar="JSONL", help="a markdown table of --pipeline outputs (one file per family)"
    )
    args = parser.parse_args(argv)
    if args.table:
        table(args.table)
        return
    torch.set_num_threads(1)
    if args.pipeline:
        pipeline(args.seeds)
        return
    if args.centred_grid:
        centred_grid(args.seeds)
        return
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
