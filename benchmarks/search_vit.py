"""Recipe search for notebook 08 on validation data only (never the test set).

    .venv/bin/python benchmarks/search_vit.py                 # the settings the notebook quotes
    .venv/bin/python benchmarks/search_vit.py '[{"mixup": 0.5}]' --splits 3

Each setting changes the notebook's ViT recipe (``BASE``) or trains the small CNN (``"cnn": 1``). It is
trained on 80% of the 1,437 training digits and scored on the other 20% (287 images), for several
stratified splits (``helpers.data.split_validation`` with seeds 0, 1, ...; the split's seed is also the
model's), and one JSON line per setting gives the mean and the lowest validation accuracy and the mean
seconds per run. One thread; a setting takes about a minute (80 epochs, five splits).

    .venv/bin/python benchmarks/search_vit.py --claims --seeds 0 1 2 3 4

``--claims`` chooses nothing: it repeats, for each seed, the training runs of notebook 08 that its claims read
from one model (the p = 4 ViT trained on shifted digits, the p = 2 ViT, the final ViT and CNN of that seed) and
prints, one JSON line per seed, every number those claims compare (validation and test accuracies, the position
embeddings' similarities, the rollout's share on ink, the token changes under a shift, the accuracies on shifted
digits). The seed stands in for another machine's trajectory; run it under each CPU set-up too. About 30 s of CPU
per seed natively, 50 s under ``default``.
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


# notebook 08's configurations (section 5)
VIT_CONFIG = dict(image_size=8, in_channels=1, num_classes=10, patch_size=4, d_model=64, depth=2, num_heads=4, d_ff=128)
VIT_TRAINING = dict(epochs=80, lr=4e-3, batch_size=128, weight_decay=0.05)
GRID_CONFIG = dict(VIT_CONFIG, patch_size=2)
GRID_TRAINING = dict(epochs=40, lr=1e-3, batch_size=32, weight_decay=0.05)
CNN_TRAINING = dict(epochs=40, lr=2e-2, batch_size=128, weight_decay=0.01)


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


def _train(make, seed, training, data, shift=0, smoothing=0.0, mix=0.0, final=False):
    """The notebook's train(): seeded, fit on the training part with validation, or on all training images."""
    x_train, y_train, _, _ = data
    x_fit, y_fit, x_val, y_val = split_validation(x_train, y_train, fraction=0.2, seed=0)
    torch.manual_seed(seed)
    model = make()
    step = augmented_step(shift, smoothing, seed, mix)
    if final:
        history = fit(model, x_train, y_train, None, None, seed=seed, progress=False, step_fn=step, eval_train=False, **training)
    else:
        history = fit(model, x_fit, y_fit, x_val, y_val, seed=seed, progress=False, step_fn=step, **training)
    return model.eval(), history


def _shifted(images, dy, dx):
    padded = F.pad(images, (1, 1, 1, 1))  # (B, C, 10, 10)
    return padded[..., 1 - dy : 9 - dy, 1 - dx : 9 - dx]


@torch.no_grad()
def _block0_tokens(vit, images, positions):
    """Patch tokens of the p = 2 ViT after block 0, given the position embeddings added: (1, 1, 8, 8) -> (4, 4, 64)."""
    tokens = torch.cat([vit.cls_token.expand(1, -1, -1), vit.patch_embed(images)], dim=1) + positions  # (1, 17, 64)
    return vit.blocks[0](tokens)[0, 1:].reshape(4, 4, -1)


def claims(seeds: list[int]) -> None:
    """Notebook 08's single-model claims, for each seed (see the module's docstring)."""
    data = load_digits_split()
    x_test, y_test = data.x_test, data.y_test
    setup = {k: os.environ.get(k, "") for k in ("ATEN_CPU_CAPABILITY", "MKL_CBWR")}
    for seed in seeds:
        start = time.process_time()
        shift_vit, shift_h = _train(lambda: _ViT(**VIT_CONFIG), seed, VIT_TRAINING, data, 1, 0.1)
        grid_vit, grid_h = _train(lambda: _ViT(**GRID_CONFIG), seed, GRID_TRAINING, data, 1, 0.1)
        vit, _ = _train(lambda: _ViT(**VIT_CONFIG), seed, VIT_TRAINING, data, 0, 0.1, 1.0, final=True)
        cnn, _ = _train(SmallCNN, seed, CNN_TRAINING, data, 0, 0.1, final=True)
        line = {"seed": seed, "set-up": setup}
        line["validation: p = 4 shifted, p = 2"] = [round(100 * shift_h.final_val_acc, 2), round(100 * grid_h.final_val_acc, 2)]
        line["test: ViT, CNN"] = [round(100 * evaluate(m, x_test, y_test)[1], 2) for m in (vit, cnn)]
        flat = position_similarity(grid_vit).reshape(16, 16)
        rows, cols = torch.arange(16) // 4, torch.arange(16) % 4
        distance = (rows[:, None] - rows[None, :]).abs() + (cols[:, None] - cols[None, :]).abs()
        near, far = flat[distance == 1].mean().item(), flat[distance >= 4].mean().item()
        line["positions: near, far, near - far"] = [round(near, 4), round(far, 4), round(near - far, 4)]
        for count in (12, len(x_test)):  # the notebook's 12 shown images, and the whole test set
            sample = x_test[:count]
            rollout = attention_rollout(grid_vit, sample)
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
        pos = grid_vit.pos_embed  # (1, 17, 64)
        moved = torch.cat([pos[:, :1], pos[:, 1:].reshape(1, 4, 4, -1).roll(1, dims=2).reshape(1, 16, -1)], dim=1)
        shifted_digit = F.pad(digit, (2, 0))[..., :8]  # one whole patch to the right, zeros coming in on the left
        tokens = _block0_tokens(grid_vit, digit, pos)
        fixed = _block0_tokens(grid_vit, shifted_digit, pos)  # the patches meet new position embeddings
        along = _block0_tokens(grid_vit, shifted_digit, moved)  # each patch keeps its position embedding: edges only
        scale = tokens.abs().max().item()
        line["token change / scale: positions fixed, positions moved along"] = [
            round((fixed[:, 1:] - tokens[:, :-1]).abs().max().item() / scale, 4),
            round((along[:, 1:] - tokens[:, :-1]).abs().max().item() / scale, 4),
        ]
        table = {}
        for name, (dy, dx) in {"none": (0, 0), "right": (0, 1), "left": (0, -1), "down": (1, 0), "up": (-1, 0)}.items():
            moved_x = _shifted(x_test, dy, dx)
            table[name] = [round(100 * evaluate(m, moved_x, y_test)[1], 2) for m in (cnn, vit, shift_vit, grid_vit)]
        line["shifts: CNN, ViT p = 4, p = 4 shifted, p = 2 shifted"] = table
        line["cpu seconds"] = round(time.process_time() - start, 1)
        print(json.dumps(line), flush=True)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("settings", nargs="?", help="a JSON list of settings (default: the ones the notebook quotes)")
    parser.add_argument("--splits", type=int, default=5, help="validation splits per setting (default 5)")
    parser.add_argument("--claims", action="store_true", help="the numbers notebook 08's claims read, per seed")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2, 3, 4], help="seeds for --claims (default 0 to 4)")
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    if args.claims:
        claims(args.seeds)
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
