"""Recipe search for notebook 13 (induction heads), on validation sequences only (never the test set).

    .venv/bin/python benchmarks/search_induction.py                      # the settings the notebook quotes
    .venv/bin/python benchmarks/search_induction.py '[{"lr": 0.02}]' --seeds 3

The learning rate is searched the same way for the two-layer model and for the one-layer control (``LR_GRID``):
each gets the rate with the lowest mean final validation loss over seeds 0-2 (a cosine schedule ends every run at a
learning rate of 0, so the final loss is not one noisy point of a still-moving curve).

Each setting changes the notebook's recipe (``BASE``): an attention-only transformer
(``helpers.models.induction.AttentionOnlyLM``) trained on fresh repeated random sequences
(``helpers.data.induction``, a period drawn per batch). For each seed it reports, on the validation set
(``VALIDATION_SEED``, period ``val_period``): the final repeated-half loss, where the loss curve drops
(``phase_change``: the steps at which 10% and 90% of the drop are done, and their distance as a share of the
training steps), and for two-layer models (on 256 validation sequences) the previous-token score of each layer-0
head, the induction score of each layer-1 head, the repeated-half loss with each head mean-ablated, and with every
layer-1 head mean-ablated at once when layer 1 has several. One JSON line per setting. One thread.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from helpers.data.induction import held_out_set  # noqa: E402
from helpers.models.induction import (  # noqa: E402
    AttentionOnlyLM,
    head_ablation_losses,
    induction_score,
    phase_change,
    prev_token_score,
    repeated_half_loss,
    train_induction,
)

# notebook 13's recipe; a setting overrides some of these
BASE = dict(
    vocab=128, d_model=32, num_heads=(2, 1), num_layers=2, steps=600, batch_size=32, lr=2e-2, schedule="cosine",
    min_period=6, max_period=16, val_period=12, distinct=True, warmup=0, weight_decay=0.0, positions="learned",
)  # fmt: skip
CONTROL = {"num_layers": 1, "num_heads": 2}
LR_GRID = (1e-2, 2e-2, 3e-2, 5e-2)
# what the notebook quotes: the learning-rate search of both models, and the alternatives the prose mentions
QUOTED = [
    *({"lr": lr} for lr in LR_GRID),
    *({**CONTROL, "lr": lr} for lr in LR_GRID),
    {"num_heads": (2, 2)},
    {"distinct": False},
    {"min_period": 8, "max_period": 24},
    {"steps": 800},
]


def run(setting: dict, seed: int) -> dict:
    """Train one setting with one seed; what the validation set says about it."""
    cfg = {**BASE, **setting}
    torch.manual_seed(seed)
    max_len = 2 * max(cfg["max_period"], cfg["val_period"]) + 1
    model = AttentionOnlyLM(cfg["vocab"] + 1, cfg["d_model"], cfg["num_heads"], cfg["num_layers"], max_len, cfg["positions"])
    history = train_induction(
        model, steps=cfg["steps"], batch_size=cfg["batch_size"], lr=cfg["lr"], min_period=cfg["min_period"],
        max_period=cfg["max_period"], val_period=cfg["val_period"], weight_decay=cfg["weight_decay"],
        warmup=cfg["warmup"], schedule=cfg["schedule"], distinct=cfg["distinct"], seed=seed,
    )  # fmt: skip
    out = {
        "seed": seed,
        "final": round(history.val_loss[-1], 4),
        "cpu_s": round(history.cpu_seconds, 2),
    }
    if history.val_loss[0] - history.val_loss[-1] > 0.5:
        change = phase_change(history.steps, history.val_loss)
        out.update(start=change["start"], end=change["end"], fraction=round(change["fraction"], 4))
    if cfg["num_layers"] == 2:
        ids = held_out_set(256, cfg["val_period"], cfg["vocab"], distinct=cfg["distinct"])
        with torch.no_grad():
            model.eval()
            logits, patterns = model.run_with_patterns(ids)
        out["prev_token"] = [round(v, 3) for v in prev_token_score(patterns[0]).tolist()]
        out["induction"] = [round(v, 3) for v in induction_score(patterns[1], cfg["val_period"]).tolist()]
        out["mean_ablated"] = [[round(v, 3) for v in row] for row in head_ablation_losses(model, ids, cfg["val_period"]).tolist()]
        if model.heads[1] > 1:  # every layer-1 head mean-ablated at once

            def every_head(z):
                return z.mean(0, keepdim=True).expand_as(z)

            with torch.no_grad():
                logits = model(ids, edit={1: every_head})
            out["layer1_all_mean_ablated"] = round(repeated_half_loss(logits, ids, cfg["val_period"]).item(), 3)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("settings", nargs="?", help="a JSON list of settings (default: the quoted ones)")
    parser.add_argument("--seeds", type=int, default=3)
    args = parser.parse_args()
    torch.set_num_threads(1)
    settings = json.loads(args.settings) if args.settings else QUOTED
    print(json.dumps({"torch": torch.__version__, "base": BASE, "ln_vocab": round(math.log(BASE["vocab"]), 4)}), flush=True)
    for setting in settings:
        begin = time.process_time()
        runs = [run(setting, seed) for seed in range(args.seeds)]
        line = {"setting": setting, "cpu_s": round(time.process_time() - begin, 1)}
        line["worst_final"] = max(r["final"] for r in runs)
        fractions = [r["fraction"] for r in runs if "fraction" in r]
        if fractions:
            line["worst_fraction"] = max(fractions)
        line["runs"] = runs
        print(json.dumps(line), flush=True)


if __name__ == "__main__":
    main()
