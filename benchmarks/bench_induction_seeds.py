"""Every training claim of notebook 13 (induction heads), measured over seeds: the thresholds' evidence.

    .venv/bin/python benchmarks/bench_induction_seeds.py                       # seeds 0-9, this kernel family
    ATEN_CPU_CAPABILITY=avx2 .venv/bin/python benchmarks/bench_induction_seeds.py
    ATEN_CPU_CAPABILITY=default MKL_CBWR=COMPATIBLE .venv/bin/python benchmarks/bench_induction_seeds.py

For each seed it trains what the notebook trains with that seed (``RECIPE``: the two-layer model and the one-layer
control), then measures on the test sequences exactly what the notebook's claims are about: the loss curves (the gap
to ln V before training, the final loss, where the phase change starts and ends, the control's lowest loss anywhere
on its curve), the heads' scores, the rise of the loss when a head is ablated (mean and zero) or patched out of
layer 1's queries, keys or values, the composition scores, the composed QK circuit's diagonal, the OV circuit's
copying score and the direct logit attribution. One JSON line per seed, then one line with every quantity's range.
One thread. Not a test: ``benchmarks/results/13_induction_heads.md`` keeps the tables and the thresholds.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from helpers.data.induction import TEST_SEED, held_out_set  # noqa: E402
from helpers.models.induction import (  # noqa: E402
    AttentionOnlyLM,
    composition_scores,
    copying_score,
    direct_logit_attribution,
    head_ablation_losses,
    induction_qk_circuit,
    induction_score,
    ov_circuit,
    path_ablation_losses,
    phase_change,
    positional_pattern,
    prev_token_score,
    repeated_half_loss,
    train_induction,
)

# notebook 13's recipe (its cell `train`): the same for the two-layer model and the control
V, PERIOD, MAX_LEN = 128, 12, 33
RECIPE = dict(
    steps=600, batch_size=32, lr=2e-2, schedule="cosine", min_period=6, max_period=16, val_period=PERIOD, distinct=True,
    track_heads=True,
)  # fmt: skip


def train(layers: int, seed: int) -> tuple[AttentionOnlyLM, dict]:
    torch.manual_seed(seed)
    heads = (2, 1) if layers == 2 else (2,)
    model = AttentionOnlyLM(V + 1, d_model=32, num_heads=heads, num_layers=layers, max_len=MAX_LEN)
    history = train_induction(model, seed=seed, **RECIPE)
    change = phase_change(history.steps, history.val_loss)
    curve = {
        "initial_gap": round(abs(history.val_loss[0] - math.log(V)), 4),
        "final": round(history.val_loss[-1], 4),
        "lowest": round(min(history.val_loss), 4),
        "start": change["start"],
        "middle": change["middle"],
        "end": change["end"],
        "width": change["width"],
        "cpu_s": round(history.cpu_seconds, 2),
    }
    if layers == 2:  # when the two heads form: the step at which each score has made half its rise (as the loss's middle)
        prev = max(("L0H0", "L0H1"), key=lambda h: history.prev_score[h][-1])
        for name, scores in (("prev", history.prev_score[prev]), ("ind", history.induction_score["L1H0"])):
            rise = phase_change(history.steps, [-v for v in scores])
            curve[f"{name}_start"], curve[f"{name}_middle"], curve[f"{name}_end"] = rise["start"], rise["middle"], rise["end"]
            curve[f"{name}_middle_minus_loss_middle"] = rise["middle"] - change["middle"]
    return model.eval(), curve


@torch.no_grad()
def circuit(model: AttentionOnlyLM, test_ids: torch.Tensor) -> dict:
    """The notebook's measurements of the trained two-layer model on the test sequences."""
    _, (layer0, layer1) = model.run_with_patterns(test_ids)
    prev0 = prev_token_score(layer0)  # (2,)
    prev = int(prev0.argmax())
    other = 1 - prev
    out = {
        "prev_head": prev,
        "prev_score": round(prev0[prev].item(), 4),
        "other_prev_score": round(prev0[other].item(), 4),
        "induction_score": round(induction_score(layer1, PERIOD).item(), 4),
        "layer0_induction_max": round(induction_score(layer0, PERIOD).max().item(), 4),
    }
    base = repeated_half_loss(model(test_ids), test_ids, PERIOD).item()
    out["test_loss"] = round(base, 4)
    for how in ("mean", "zero"):
        rise = head_ablation_losses(model, test_ids, PERIOD, how) - base  # (2, 2)
        out[f"{how}_rise_prev"] = round(rise[0, prev].item(), 4)
        out[f"{how}_rise_other"] = round(rise[0, other].item(), 4)
        out[f"{how}_rise_induction"] = round(rise[1, 0].item(), 4)
    patched = path_ablation_losses(model, test_ids, PERIOD, head=(0, prev), how="mean")
    for part in ("q", "k", "v", "qkv"):
        out[f"patch_{part}"] = round(patched[part] - patched["none"], 4)
    for kind in ("q", "k", "v"):
        scores = composition_scores(model, kind)[:, 0]  # (2,): each layer-0 head with the induction head
        out[f"{kind}_comp_prev"] = round(scores[prev].item(), 4)
        out[f"{kind}_comp_other"] = round(scores[other].item(), 4)
    for name, head in (("qk_diag_prev", prev), ("qk_diag_other", other)):
        weights = induction_qk_circuit(model, prev_head=head)[:V, :V].softmax(-1)  # (V, V)
        out[name] = round(weights.diagonal().mean().item(), 4)
    positional = positional_pattern(model, head=prev).diagonal(-1)  # (32,): position i's weight on i - 1, positions alone
    out["pos_prev_up_to_16"] = round(positional[:16].mean().item(), 4)  # queries 1 .. 16
    out["pos_prev_from_17"] = round(positional[16:].mean().item(), 4)  # queries 17 .. 32
    out["copying"] = round(copying_score(ov_circuit(model)[:V, :V]), 4)
    dla = direct_logit_attribution(model, test_ids, PERIOD)
    out["dla_induction"] = round(dla["L1H0"], 4)
    out["dla_prev"] = round(dla[f"L0H{prev}"], 4)
    out["dla_other"] = round(dla[f"L0H{other}"], 4)
    out["dla_embeddings"] = round(dla["embeddings"], 4)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, nargs=2, default=(0, 10), metavar=("FIRST", "STOP"))
    args = parser.parse_args()
    torch.set_num_threads(1)
    family = os.environ.get("ATEN_CPU_CAPABILITY", "native") + (
        " + MKL_CBWR=" + os.environ["MKL_CBWR"] if os.environ.get("MKL_CBWR") else ""
    )
    print(json.dumps({"torch": torch.__version__, "kernels": family, "recipe": RECIPE}), flush=True)
    test_ids = held_out_set(256, PERIOD, V, seed=TEST_SEED, distinct=True)  # (256, 25)
    rows = []
    for seed in range(*args.seeds):
        begin = time.process_time()
        model, two = train(2, seed)
        _, one = train(1, seed)
        row = {"seed": seed, "kernels": family, "two_layers": {**two, **circuit(model, test_ids)}, "one_layer": one}
        row["cpu_s"] = round(time.process_time() - begin, 1)
        rows.append(row)
        print(json.dumps(row), flush=True)
    ranges = {}
    for part in ("two_layers", "one_layer"):
        for key in rows[0][part]:
            values = [r[part][key] for r in rows]
            ranges[f"{part}.{key}"] = [min(values), max(values)]
    print(json.dumps({"kernels": family, "seeds": list(range(*args.seeds)), "ranges": ranges}), flush=True)


if __name__ == "__main__":
    main()
