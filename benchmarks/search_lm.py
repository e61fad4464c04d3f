"""Recipe search and seed sweep of notebook 11: the 2017 block, each upgrade towards the 2025 block, and the 2025 block.

    .venv/bin/python benchmarks/search_lm.py search                 # learning rates (GRID), on the validation split
    .venv/bin/python benchmarks/search_lm.py select search.log ...  # the table and the choice, from search's lines
    .venv/bin/python benchmarks/search_lm.py sweep                  # the chosen recipe, seeds 0-9
    ATEN_CPU_CAPABILITY=avx2 .venv/bin/python benchmarks/search_lm.py sweep          # another kernel family
    .venv/bin/python benchmarks/search_lm.py sweep --stages 2017 2025 --seeds 0 1    # a part of it

The models are notebook 11's: width 64, 4 heads, 2 layers, trained on windows of 64 characters of Python's
documentation (``helpers.data.load_pydoc_text``; the first 90% for training; of the last 10%, the first half for
validation, the second half the test split). Six stages, each one change more than the last (``DecoderLM(upgrades=,
init=)``):

- ``2017``: post-LN LayerNorm, sinusoidal positions, a ReLU feed-forward of width 128, 4 key/value heads, biases; the
  embedding initialised with std ``d_model ** -0.5`` and multiplied by ``sqrt(d_model)`` (unit scale);
- ``+ RMSNorm``: three changes that come together: the norm before each sub-layer (pre-norm) instead of after each
  residual addition, RMSNorm instead of LayerNorm, and a final norm before the head;
- ``+ RoPE``: rotary embeddings instead of the sinusoidal encoding, the embedding's initialisation and scale kept;
- ``+ init``: the embedding initialised with std 0.02 and no longer scaled (GPT-2's and LLaMA's choice); the head
  being tied, the first logits shrink too;
- ``+ SwiGLU``: a SwiGLU feed-forward of width 86 (about 2/3 of 128: three matrices instead of two), no biases;
- ``2025``: three changes: 2 key/value heads (GQA), no biases in attention, the SwiGLU widened to 110 with the
  parameters saved.

73,536, 73,344, 73,344, 73,344, 73,216 and 73,728 parameters. Every stage trains with ``helpers.models.lm.train_lm`` for the
same ``STEPS`` steps of ``BATCH`` windows (AdamW, a linear warm-up over ``WARMUP`` steps then cosine decay to 0,
gradient clipping at 1; the long warm-up keeps the post-LN block from collapsing, see the results file), the 2017
model with the course's loss, the others with ``next_token_loss`` (as in the notebook, where they run on the learner's
loss), all on the course's reference parts. ``search`` trains every stage at every learning rate of its ``GRID`` row
for seeds 0 and 1 and prints one JSON line per run (the validation loss over the whole validation split and the
validation curve); ``select`` reads those lines (from any number of logs) and prints, per stage, the mean validation
loss at each rate and the choice: a learning rate is refused when one of its runs ends above the bigram table's
validation loss (a run that blew up), and of the others the lowest mean validation loss wins. Where the choice sat at
an edge of the grid, the grid was extended past it (the rows of ``GRID``). ``sweep`` trains the chosen learning rates
(``CHOSEN``) for seeds 0-9 (or ``--seeds``) and prints per run the validation and test losses as the notebook
measures them (``val65``, ``test65``: each split cut into windows of 65 characters, the notebook's loss on every
window), the validation loss on the 64 windows ``train_lm`` measures, the test loss by position on the first 50
windows of 256 characters of the test split (the notebook's quarters), the repeat count of the notebook's greedy
continuation (80 characters of ``sample`` with the greedy filter, as the notebook: the same tokens as
``generate(greedy=True)``), and the CPU seconds of the training. The test split is never read by ``search``.
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
from helpers.models.lm import (  # noqa: E402
    UPGRADES,
    DecoderLM,
    evaluate_lm,
    loss_by_position,
    next_token_loss,
    ngram_loss,
    sample,
    train_lm,
)

CONFIG = {"d_model": 64, "num_heads": 4, "num_layers": 2, "max_len": 64}
#: stage -> (upgrades, feed-forward width, the embedding's initialisation: ``DecoderLM(init=)``, None for the model's own)
STAGES = {
    "2017": ((), 128, None),
    "+ RMSNorm": (UPGRADES[:1], 128, None),
    "+ RoPE": (UPGRADES[:2], 128, "2017"),
    "+ init": (UPGRADES[:2], 128, "2025"),
    "+ SwiGLU": (UPGRADES[:3], 86, None),
    "2025": (UPGRADES, 110, None),
}
STEPS, BATCH, CONTEXT, WARMUP = 400, 10, 64, 80
#: The learning rates ``search`` tried per stage (seeds 0 and 1): 0.005, 0.007 and 0.01 for every stage, extended past
#: an edge where the choice sat there (see benchmarks/results/11_language_model.md).
GRID = {
    "2017": [5e-3, 7e-3, 1e-2],
    "+ RMSNorm": [5e-3, 7e-3, 1e-2, 1.4e-2, 2e-2],
    "+ RoPE": [3.5e-3, 5e-3, 7e-3, 1e-2, 1.4e-2],
    "+ init": [5e-3, 7e-3, 1e-2],
    "+ SwiGLU": [2.5e-3, 3.5e-3, 5e-3, 7e-3, 1e-2],
    "2025": [2.5e-3, 3.5e-3, 5e-3, 7e-3, 1e-2],
}
SEARCH_SEEDS = [0, 1]
#: The learning rates ``search`` chose (see benchmarks/results/11_language_model.md).
CHOSEN = {"2017": 7e-3, "+ RMSNorm": 1e-2, "+ RoPE": 7e-3, "+ init": 7e-3, "+ SwiGLU": 5e-3, "2025": 5e-3}


def splits() -> tuple[CharVocab, torch.Tensor, torch.Tensor, torch.Tensor]:
    """The notebook's vocabulary and its training, validation and test ids."""
    text = load_pydoc_text()
    vocab = CharVocab(text)
    train, held_out = split_text(vocab.encode(text), val_fraction=0.1)
    val, test = split_text(held_out, val_fraction=0.5)
    return vocab, train, val, test


def build(stage: str, vocab_size: int, seed: int) -> DecoderLM:
    """The notebook's model of ``stage``, its weights seeded with ``seed``."""
    upgrades, d_ff, init = STAGES[stage]
    torch.manual_seed(seed)
    return DecoderLM(vocab_size, **CONFIG, d_ff=d_ff, kv_heads=2, upgrades=upgrades, init=init)


def train(stage: str, lr: float, seed: int, data) -> tuple[DecoderLM, list[float], float]:
    vocab, train_ids, val_ids, _ = data
    model = build(stage, len(vocab), seed)
    loss_fn = None if stage == "2017" else next_token_loss
    cpu = time.process_time()
    history = train_lm(
        model,
        train_ids,
        val_ids,
        steps=STEPS,
        context=CONTEXT,
        batch_size=BATCH,
        lr=lr,
        warmup=WARMUP,
        eval_every=50,
        seed=seed,
        loss_fn=loss_fn,
    )
    return model, [round(v, 4) for v in history.val_loss], time.process_time() - cpu


def repeats(text: str, size: int = 4) -> int:
    """How often the most frequent substring of ``size`` characters occurs in ``text`` (the notebook's measure)."""
    counts: dict[str, int] = {}
    for i in range(len(text) - size + 1):
        counts[text[i : i + size]] = counts.get(text[i : i + size], 0) + 1
    return max(counts.values())


def search(stages: list[str], lrs: list[float] | None, seeds: list[int], data) -> None:
    """One JSON line per run of every stage at every rate of its ``GRID`` row (or ``lrs``), then the choice."""
    vocab, train_ids, val_ids, _ = data
    results = []
    for stage in stages:
        for lr in lrs or GRID[stage]:
            for seed in seeds:
                model, curve, cpu = train(stage, lr, seed, data)
                result = {
                    "stage": stage,
                    "lr": lr,
                    "seed": seed,
                    "val_loss": round(evaluate_lm(model, val_ids), 4),
                    "curve": curve,
                    "cpu_s": round(cpu, 1),
                }
                results.append(result)
                print(json.dumps(result), flush=True)
    choose(results, ngram_loss(train_ids, val_ids, len(vocab), order=2))


def choose(results: list[dict], bigram: float) -> None:
    """Per stage: the mean validation loss at each learning rate and the choice (a rate with a run above the bigram
    table is refused), as one JSON line with the table after it."""
    for stage in dict.fromkeys(r["stage"] for r in results):
        means, refused = {}, []
        for lr in sorted({r["lr"] for r in results if r["stage"] == stage}):
            runs = [r for r in results if r["stage"] == stage and r["lr"] == lr]
            if all(r["val_loss"] < bigram for r in runs):  # refuse a learning rate where a run blew up
                means[lr] = statistics.mean(r["val_loss"] for r in runs)
            else:
                refused.append(lr)
        best = min(means, key=means.get)
        table = ", ".join(f"{lr:g}: {loss:.4f}" for lr, loss in means.items())
        edge = " (at the edge of the grid: extend it)" if best in (min(means), max(means)) and len(means) > 1 else ""
        print(
            json.dumps({"stage": stage, "best_lr": best, "mean_val_loss": round(means[best], 4), "refused": refused}),
            f"# {table}{edge}",
            flush=True,
        )


def select(paths: list[str], data) -> None:
    """``choose`` over the search lines of the logs at ``paths`` (a later line for the same stage, rate and seed
    replaces an earlier one), restricted to the seeds of ``SEARCH_SEEDS``."""
    vocab, train_ids, val_ids, _ = data
    runs: dict[tuple, dict] = {}
    for path in paths:
        for line in Path(path).read_text().splitlines():
            if line.startswith("{") and '"curve"' in line and '"val65"' not in line:
                r = json.loads(line)
                if r["stage"] in STAGES and r["seed"] in SEARCH_SEEDS:
                    runs[(r["stage"], r["lr"], r["seed"])] = r
    order = list(STAGES)
    results = sorted(runs.values(), key=lambda r: (order.index(r["stage"]), r["lr"], r["seed"]))
    choose(results, ngram_loss(train_ids, val_ids, len(vocab), order=2))


def split_loss(model: DecoderLM, ids: torch.Tensor) -> float:
    """The notebook's loss of a split: cut into windows of 65 characters, ``next_token_loss`` on all of them."""
    windows = ids[: len(ids) // 65 * 65].view(-1, 65)  # (w, 65)
    with torch.no_grad():
        return next_token_loss(model(windows), windows).item()


def greedy_filter(z: torch.Tensor) -> torch.Tensor:
    """The notebook's greedy rule as a filter: only the largest logit stays."""
    return torch.where(z == z.max(-1, keepdim=True).values, 0.0, float("-inf"))


def sweep(stages: list[str], seeds: list[int], data) -> None:
    vocab, train_ids, val_ids, test_ids = data
    prompt = vocab.encode('The "for" statement')[None]  # (1, 19): the notebook's section 7
    for stage in stages:
        for seed in seeds:
            model, curve, cpu = train(stage, CHOSEN[stage], seed, data)
            result = {
                "stage": stage,
                "lr": CHOSEN[stage],
                "seed": seed,
                "val_loss": round(evaluate_lm(model, val_ids), 4),
                "val65": round(split_loss(model, val_ids), 4),
                "val64w": curve[-1],
                "test_loss": round(evaluate_lm(model, test_ids), 4),
                "test65": round(split_loss(model, test_ids), 4),
                "curve": curve,
                "cpu_s": round(cpu, 2),
            }
            if stage in ("2017", "2025"):
                curve256 = loss_by_position(model, test_ids[: 50 * 256], 256)
                result["quarters"] = [round(curve256[i : i + 64].mean().item(), 3) for i in range(0, 256, 64)]
                greedy = sample(model, prompt, 80, 64, greedy_filter, torch.Generator().manual_seed(0))
                result["greedy_repeats"] = repeats(vocab.decode(greedy[0, prompt.shape[1] :]))
            print(json.dumps(result), flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("mode", choices=["search", "select", "sweep"])
    parser.add_argument("logs", nargs="*", help="select: the logs of search runs")
    parser.add_argument("--stages", nargs="+", default=list(STAGES))
    parser.add_argument("--lrs", nargs="+", type=float, default=None, help="search: these rates instead of GRID's")
    parser.add_argument("--seeds", nargs="+", type=int, default=None)
    parser.add_argument("--lr", type=float, default=None, help="sweep: this rate instead of CHOSEN's")
    args = parser.parse_args()
    if args.lr is not None:
        CHOSEN.update(dict.fromkeys(args.stages, args.lr))
    torch.set_num_threads(1)
    data = splits()
    if args.mode == "select":
        select(args.logs, data)
        return
    print(
        f"# torch {torch.__version__}, capability {torch.backends.cpu.get_cpu_capability()}, "
        f"MKL_CBWR={os.environ.get('MKL_CBWR', '')}, threads 1, {STEPS} steps of {BATCH} windows",
        flush=True,
    )
    if args.mode == "search":
        search(args.stages, args.lrs, args.seeds if args.seeds is not None else SEARCH_SEEDS, data)
    else:
        sweep(args.stages, args.seeds if args.seeds is not None else list(range(10)), data)


if __name__ == "__main__":
    main()
