"""Does notebook 11's character model grow an induction head if it trains longer? (notebook 13, section 8)

    .venv/bin/python benchmarks/bench_induction.py                 # 3,000 steps, about 90 s of CPU
    .venv/bin/python benchmarks/bench_induction.py --steps 1000 --every 250

Trains notebook 11's 2025 model (``helpers.models.lm.DecoderLM``, its recipe: width 64, 4 heads, 2 layers, SwiGLU
of 110, 2 key/value heads, windows of 64 characters, batches of 32, learning rate 5e-3, seed 0) for ``--steps``
steps instead of 11's 300, and every ``--every`` steps prints one JSON line: the validation loss, and on two probes
of 64 sequences of 64 characters (32 characters, then the same 32 again), the loss on each half and the largest
induction score of each layer (``helpers.models.induction.induction_score``):

- ``random``: 32 distinct characters drawn uniformly from the vocabulary, then repeated;
- ``text``: 32 consecutive characters of notebook 11's test split, then repeated.

One thread. Not a test: the notebook quotes what it printed.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from helpers.data import CharVocab, load_pydoc_text, split_text  # noqa: E402
from helpers.data.induction import TEST_SEED, first_half_mask, repeated_tokens  # noqa: E402
from helpers.models.induction import induction_score, lm_patterns, per_position_loss, repeated_half_loss  # noqa: E402
from helpers.models.lm import DecoderLM, train_lm  # noqa: E402

CONTEXT, PERIOD = 64, 32


def probes(test_ids: torch.Tensor, vocab_size: int) -> dict[str, torch.Tensor]:
    """The two probes of notebook 13's section 8: ``(64, 64)`` each, the second half a copy of the first."""
    random = repeated_tokens(64, PERIOD, vocab_size, torch.Generator().manual_seed(TEST_SEED), bos=False, distinct=True)
    starts = torch.linspace(0, len(test_ids) - PERIOD - 1, 64).long()  # (64,)
    text = test_ids[starts[:, None] + torch.arange(PERIOD)]  # (64, 32)
    return {"random": random, "text": torch.cat([text, text], dim=1)}


@torch.no_grad()
def measure(model: DecoderLM, inputs: torch.Tensor) -> dict[str, float]:
    """Loss on each half (nats) and the largest induction score in each layer."""
    model.eval()
    logits = model(inputs)
    first = per_position_loss(logits, inputs)[:, first_half_mask(inputs.shape[1], PERIOD)].mean().item()
    out = {"first_half": round(first, 3), "repeated_half": round(repeated_half_loss(logits, inputs, PERIOD).item(), 3)}
    for layer, pattern in enumerate(lm_patterns(model, inputs)):
        out[f"induction_max_layer{layer}"] = round(induction_score(pattern, PERIOD).max().item(), 3)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=3000)
    parser.add_argument("--every", type=int, default=300)
    args = parser.parse_args()
    torch.set_num_threads(1)
    text = load_pydoc_text()
    vocab = CharVocab(text)
    train_ids, held_out = split_text(vocab.encode(text), val_fraction=0.1)  # notebook 11's splits
    val_ids, test_ids = split_text(held_out, val_fraction=0.5)
    torch.manual_seed(0)
    model = DecoderLM(
        vocab_size=len(vocab), d_model=64, num_heads=4, num_layers=2, max_len=CONTEXT, d_ff=110, style="2025", kv_heads=2
    )
    inputs = probes(test_ids, len(vocab))
    begin = time.process_time()

    def report(step: int, model: DecoderLM) -> None:
        line = {"step": step, "cpu_s": round(time.process_time() - begin, 1)}
        line.update({name: measure(model, x) for name, x in inputs.items()})
        print(json.dumps(line), flush=True)

    history = train_lm(
        model, train_ids, val_ids, steps=args.steps, context=CONTEXT, batch_size=32, lr=5e-3, eval_every=args.every,
        callback=report,
    )  # fmt: skip
    print(json.dumps({"torch": torch.__version__, "steps": history.steps, "val_loss": [round(v, 4) for v in history.val_loss]}))


if __name__ == "__main__":
    main()
