"""Seeds sweep for notebook 09: the notebook's whole pipeline, once per seed, printing every quantity its claims read.

    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/sweep_translation.py --seeds 0 1 2 3 4 5 6 7 8 9
    ATEN_CPU_CAPABILITY=avx2 OMP_NUM_THREADS=1 .venv/bin/python benchmarks/sweep_translation.py --seeds 0 1 2 3 4 5 6 7 8 9
    .venv/bin/python benchmarks/sweep_translation.py --split val --recipe '{"batch_size": 128}'   # a recipe, on validation
    .venv/bin/python benchmarks/sweep_translation.py --models "GRU, no attention" --recipe '{"epochs": {"GRU, no attention": 36}}'

A seed is the stand-in for another machine: it changes the three models' initial weights and the order of their
batches (``torch.manual_seed(seed)`` before each model, ``train_seq2seq(seed=seed)``), as another CPU, another
PyTorch or a GPU changes a training trajectory. Seed 0 is the notebook's own run, number for number, on the same
machine and kernels. The data split is the notebook's (``make_translation_splits(seed=0)``) for every seed.

``--split test`` (the default) measures what the notebook measures on the test split, for the notebook's recipe
(``RECIPE``); ``--split val`` measures the same on the validation split, for choosing a recipe (``--recipe`` overrides
``RECIPE``'s entries: per model ``epochs``, ``batch_size``, ``lr``; ``common`` options of ``train_seq2seq``; ``n_train``...).
One JSON line per seed; ``benchmarks/results/09_translation_encoder_decoder.md`` holds the table of the sweep and
the thresholds the notebook's claims take from it.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from helpers.data import GERMAN, make_translation_splits  # noqa: E402
from helpers.models.seq2seq import (  # noqa: E402
    Seq2SeqGRU,
    Seq2SeqTransformer,
    alignment_accuracy,
    beam_search,
    cross_attention_weights,
    cut_at_eos,
    exact_match_by_digits,
    exact_matches,
    greedy_decode,
    never_special,
    sequence_accuracy,
    sequence_log_prob,
    shift_right,
    train_seq2seq,
)

#: The notebook's recipe (its cells CONFIG, STOP and the learning rates of its training cells).
RECIPE = {
    "n_train": 4000,
    "n_val": 500,
    "n_test": 1000,
    "model": {"d_model": 64, "num_heads": 4, "num_encoder_layers": 1, "num_decoder_layers": 1, "d_ff": 128},
    "gru": {},
    "common": {"keep_best": True, "betas": (0.9, 0.98)},
    "epochs": {"transformer": 8, "GRU + attention": 3, "GRU, no attention": 12},
    "batch_size": {"transformer": 64, "GRU + attention": 128, "GRU, no attention": 128},
    "lr": {"transformer": 5e-3, "GRU + attention": 2e-2, "GRU, no attention": 2e-2},
    "beam_gru": ["GRU, no attention"],
}


def merged(recipe: dict, override: dict) -> dict:
    out = {**recipe}
    for key, value in override.items():
        out[key] = {**recipe[key], **value} if isinstance(value, dict) and isinstance(recipe.get(key), dict) else value
    return out


MODELS = ("transformer", "GRU + attention", "GRU, no attention")


def run(seed: int, recipe: dict, split: str, device: str = "cpu", names: tuple[str, ...] = MODELS) -> dict:
    cpu0 = time.process_time()
    data = make_translation_splits(n_train=recipe["n_train"], n_val=recipe["n_val"], n_test=recipe["n_test"], seed=0)
    train, val = data.train.to(device), data.val.to(device)
    held = (data.test if split == "test" else data.val).to(device)
    common = {k: (tuple(v) if k == "betas" else v) for k, v in recipe["common"].items()}
    models, history = {}, {}
    for name in names:
        torch.manual_seed(seed)
        if name == "transformer":
            net = Seq2SeqTransformer(len(data.src_vocab), len(data.tgt_vocab), **recipe["model"])
        else:
            attention = "additive" if name == "GRU + attention" else None
            net = Seq2SeqGRU(len(data.src_vocab), len(data.tgt_vocab), attention=attention, **recipe["gru"])
        models[name] = net.to(device)
        per_model = {k: v[name] for k, v in recipe.items() if k in ("epochs", "batch_size", "lr")}
        history[name] = train_seq2seq(net, train, val, seed=seed, **{**common, **per_model})
    train_cpu = time.process_time() - cpu0
    max_len = held.tgt.shape[1] + 2
    out: dict = {"seed": seed, "split": split, "recipe": recipe}
    out["threads"] = torch.get_num_threads()
    out["capability"] = os.environ.get("ATEN_CPU_CAPABILITY", "native")
    out["mkl_cbwr"] = os.environ.get("MKL_CBWR", "")
    out["machine"] = platform.processor() or platform.machine()
    for name, h in history.items():
        out[name] = {
            "epochs": h.epochs,
            "best epoch": h.best_epoch,
            "stopped early": h.stopped_early,
            "cpu seconds": round(h.cpu_seconds, 2),
            "val token accuracy": round(100 * h.val_token_acc[h.best_epoch - 1], 3),
        }
    eval0 = time.process_time()
    preds = {}
    for name, net in models.items():
        net.eval()
        preds[name] = greedy_decode(net, held.src, max_len)
        exact, token = sequence_accuracy(preds[name], held.tgt)
        out[name]["exact"] = round(100 * exact, 2)
        out[name]["token"] = round(100 * token, 2)
        by = exact_match_by_digits(preds[name], held.tgt, held.numbers, merge_up_to=3)
        out[name]["by digits"] = {k: round(100 * v[0], 2) for k, v in by.items()}
        out[name]["drop 1-3 to 6"] = round(100 * (by["1-3"][0] - by["6"][0]), 2)
    for name in recipe["beam_gru"]:
        if name in models:
            b = beam_search(models[name], held.src, max_len, width=4)
            out[name]["beam exact"] = round(100 * sequence_accuracy(b, held.tgt)[0], 2)
    for name in ("GRU + attention", "GRU, no attention"):
        if name not in models:
            continue
        wrong = ~exact_matches(preds[name], held.tgt)
        if wrong.any():
            own = sequence_log_prob(models[name], held.src[wrong], preds[name][wrong])
            truth = sequence_log_prob(models[name], held.src[wrong], held.tgt[wrong])
            out[name]["wrong"], out[name]["prefers truth"] = int(wrong.sum()), int((truth > own).sum())
        else:
            out[name]["wrong"], out[name]["prefers truth"] = 0, 0
    if "transformer" not in models or "GRU + attention" not in models:  # a subset (--models): no beam or alignment
        out["cpu seconds"] = {"training": round(train_cpu, 2), "evaluation": round(time.process_time() - eval0, 2)}
        return out
    # the transformer: beam search against greedy, and how sure greedy was
    transformer = models["transformer"]
    beam = beam_search(transformer, held.src, max_len, width=4, alpha=1.0)
    out["transformer"]["beam exact"] = round(100 * sequence_accuracy(beam, held.tgt)[0], 2)
    changed = sum(GERMAN.decode(beam[i]) != GERMAN.decode(preds["transformer"][i]) for i in range(len(held)))
    out["transformer"]["beam changed"] = int(changed)
    with torch.no_grad():
        words = cut_at_eos(preds["transformer"])
        probs = torch.softmax(never_special(transformer(held.src, shift_right(words))), -1)
        p = probs.gather(-1, words[..., None])[..., 0][words != 0]
    out["transformer"]["share p>0.99"] = round(100 * (p > 0.99).float().mean().item(), 2)
    # alignment
    tgt_in = shift_right(held.tgt)
    cross = cross_attention_weights(transformer, held.src, tgt_in)
    per_head = torch.stack([alignment_accuracy(w, held.align) for w in cross])  # (layers, heads)
    best_layer = int(per_head.argmax()) // per_head.shape[1]
    out["alignment"] = {
        "per head": [[round(100 * a, 2) for a in row] for row in per_head.tolist()],
        "best head": round(100 * per_head.max().item(), 2),
        "worst head": round(100 * per_head.min().item(), 2),
        "heads averaged": round(100 * alignment_accuracy(cross[best_layer].mean(1), held.align).item(), 2),
        "GRU": round(
            100 * alignment_accuracy(models["GRU + attention"].attention_weights(held.src, tgt_in), held.align).item(), 2
        ),
    }
    out["cpu seconds"] = {"training": round(train_cpu, 2), "evaluation": round(time.process_time() - eval0, 2)}
    return out


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=list(range(10)))
    parser.add_argument("--split", choices=("test", "val"), default="test")
    parser.add_argument("--recipe", default="{}", help="JSON: entries of RECIPE to override")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--models", nargs="+", choices=MODELS, default=list(MODELS), help="train only these (default all three)")
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    recipe = merged(RECIPE, json.loads(args.recipe))
    for seed in args.seeds:
        print(json.dumps(run(seed, recipe, args.split, args.device, tuple(args.models))), flush=True)


if __name__ == "__main__":
    main()
