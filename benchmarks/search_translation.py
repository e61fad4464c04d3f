"""Recipe search for notebook 09's three translators, on the validation split only (never the test set).

    .venv/bin/python benchmarks/search_translation.py              # the settings the notebook quotes (about 8 minutes)
    .venv/bin/python benchmarks/search_translation.py --curves     # every epoch of the budget, no stopping (the curves)
    .venv/bin/python benchmarks/search_translation.py '[{"family": "gru", "attention": null, "lr": 1e-2}]'

Every setting trains one model family on the notebook's 4,000 training pairs (``make_translation_splits(seed=0)``)
and reads the 500 validation pairs after every epoch: ``family`` is ``"transformer"`` (``Seq2SeqTransformer``,
``model`` its keyword arguments) or ``"gru"`` (``Seq2SeqGRU``, ``attention`` ``"additive"`` or ``null``), with
``train_seq2seq``'s ``epochs``, ``lr``, ``batch_size``, ``patience`` and ``min_delta`` (the stopping rule: see
its docstring; ``null`` patience runs every epoch). Defaults: the notebook's recipe, which gives all three
models the same budget and the same stopping rule.

One JSON line per setting and seed: the teacher-forced validation token accuracy and the greedy validation exact
match after every epoch, the epoch the stopping rule ended at and the best epoch (whose weights the model keeps),
the exact match of the kept model by number of digits, and the CPU and wall seconds of training; then, per family,
the setting chosen: the highest validation exact match, a tie going to the lower validation loss. One thread; the
numbers are from one machine (another CPU prints other low-order digits, and may order close settings differently).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from helpers.data import make_translation_splits  # noqa: E402
from helpers.models.seq2seq import (  # noqa: E402
    Seq2SeqGRU,
    Seq2SeqTransformer,
    exact_match_by_digits,
    greedy_decode,
    sequence_accuracy,
    train_seq2seq,
)

#: The notebook's budget and stopping rule, the same for every model (its cell `STOP`).
STOP = {"epochs": 30, "patience": 3, "min_delta": 0.001}
TRANSFORMER = {"d_model": 64, "num_heads": 4, "num_encoder_layers": 1, "num_decoder_layers": 1, "d_ff": 128}
FAMILIES = [{"family": "transformer"}, {"family": "gru", "attention": "additive"}, {"family": "gru", "attention": None}]
#: The grid the notebook quotes: every family at every learning rate and batch size, under the same rule; and the
#: transformer with two blocks on each side at the recipe the grid chose for one.
GRID = [{**f, "lr": lr, "batch_size": b} for f in FAMILIES for b in (64, 128) for lr in (3e-3, 5e-3, 1e-2, 2e-2)]
QUOTED = [
    *GRID,
    {"family": "transformer", "lr": 5e-3, "batch_size": 64, "model": {"num_encoder_layers": 2, "num_decoder_layers": 2}},
]


def build(setting: dict, src_vocab: int, tgt_vocab: int) -> torch.nn.Module:
    if setting["family"] == "transformer":
        return Seq2SeqTransformer(src_vocab, tgt_vocab, **{**TRANSFORMER, **setting.get("model", {})})
    if setting["family"] == "gru":
        return Seq2SeqGRU(src_vocab, tgt_vocab, attention=setting.get("attention", "additive"), **setting.get("model", {}))
    raise ValueError(f"family must be 'transformer' or 'gru', got {setting['family']!r}")


def run(setting: dict, seed: int, data) -> dict:
    cfg = {**STOP, **{k: v for k, v in setting.items() if k in ("epochs", "patience", "min_delta", "lr", "batch_size")}}
    torch.manual_seed(seed)
    model = build(setting, len(data.src_vocab), len(data.tgt_vocab))
    wall = time.perf_counter()
    history = train_seq2seq(model, data.train, data.val, seed=seed, decode=greedy_decode, **cfg)
    wall = time.perf_counter() - wall
    max_len = data.val.tgt.shape[1] + 2
    pred = greedy_decode(model, data.val.src, max_len)
    exact, token = sequence_accuracy(pred, data.val.tgt)
    by_digits = exact_match_by_digits(pred, data.val.tgt, data.val.numbers, merge_up_to=3)
    return {
        "setting": setting,
        "seed": seed,
        "epochs run": history.epochs,
        "best epoch": history.best_epoch,
        "validation exact match": round(100 * exact, 2),
        "validation token accuracy (greedy)": round(100 * token, 2),
        "exact match by digits": {d: round(100 * a, 1) for d, (a, _) in by_digits.items()},
        "token accuracy per epoch (teacher-forced)": [round(100 * a, 2) for a in history.val_token_acc],
        "exact match per epoch (greedy)": [round(100 * a, 2) for a in history.val_exact],
        "validation loss (kept epoch)": round(history.val_loss[history.best_epoch - 1], 5),
        "validation loss per epoch": [round(x, 4) for x in history.val_loss],
        "cpu seconds": round(history.cpu_seconds, 1),
        "wall seconds": round(wall, 1),
    }


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("settings", nargs="?", help="a JSON list of settings (default: the ones the notebook quotes)")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0], help="model and batch-order seeds (default 0)")
    parser.add_argument("--curves", action="store_true", help="run every epoch of the budget (no stopping rule)")
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    data = make_translation_splits(n_train=4000, n_val=500, n_test=1000, seed=0)
    data.test = None  # model selection never reads the test split
    settings = json.loads(args.settings) if args.settings else QUOTED
    results = []
    for setting in settings:
        if args.curves:
            setting = {**setting, "patience": None}
        for seed in args.seeds:
            results.append(run(setting, seed, data))
            print(json.dumps(results[-1]), flush=True)
    # the choice, per family: the highest validation exact match, a tie going to the lower validation loss
    for family in FAMILIES:
        same = [r for r in results if all(r["setting"].get(k) == v for k, v in family.items()) and not r["setting"].get("model")]
        if same:
            best = max(same, key=lambda r: (r["validation exact match"], -r["validation loss (kept epoch)"]))
            print(json.dumps({"chosen": best["setting"], "validation exact match": best["validation exact match"]}), flush=True)


if __name__ == "__main__":
    main()
