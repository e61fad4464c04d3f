"""Benchmark: the course's MultiHeadAttention against PyTorch's nn.MultiheadAttention.

    .venv/bin/python benchmarks/bench_mha.py          # or: make bench
    .venv/bin/python benchmarks/bench_mha.py --repeats 50

Setting (issue "Notebook 04"): d_model 128, 4 heads, sequence length 256,
batch 8, self-attention, one CPU thread, float32. Both modules get the same
weights (``helpers.attention.copy_mha_to_torch``). Measured in one run, with the
variants interleaved repeat by repeat so that a change of machine load hits
them alike; each time is the median over the repeats, each ratio is
ours / PyTorch's median.

- forward: training mode, autograd on (what a training step runs);
- forward + backward: the same plus ``out.sum().backward()``;
- inference: ``eval()`` and ``torch.no_grad()``; PyTorch may take its fused
  "fast path" here (for information).

Rows: ours with ``need_weights=False`` (the fused ``F.scaled_dot_product_attention``
path) against ``nn.MultiheadAttention(need_weights=False)``: the goal is a ratio
within 1.3x; and ours with ``need_weights=True`` (explicit softmax weights, for
information). Correctness: the largest absolute difference of outputs and of
all gradients (input and parameters), in float64 (must be <= 1e-6) and float32.
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import sys
import time
from pathlib import Path

os.environ.setdefault("OMP_NUM_THREADS", "1")

import torch  # noqa: E402
from torch import nn  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from helpers.attention import MultiHeadAttention, copy_mha_to_torch  # noqa: E402

D_MODEL, HEADS, LENGTH, BATCH = 128, 4, 256, 8
GOAL = 1.3


def make_pair(dtype: torch.dtype = torch.float32, seed: int = 0) -> tuple[MultiHeadAttention, nn.MultiheadAttention]:
    """Our module and nn.MultiheadAttention with identical weights."""
    torch.manual_seed(seed)
    ours = MultiHeadAttention(D_MODEL, HEADS).to(dtype)
    theirs = copy_mha_to_torch(ours, nn.MultiheadAttention(D_MODEL, HEADS, batch_first=True, dtype=dtype))
    return ours, theirs


def _grads(ours: MultiHeadAttention, theirs: nn.MultiheadAttention) -> dict[str, tuple[torch.Tensor, torch.Tensor]]:
    """Pairs (ours, theirs) of parameter gradients, ours mapped to PyTorch's packed layout."""
    ours_in_w = torch.cat([ours.w_q.weight.grad, ours.w_k.weight.grad, ours.w_v.weight.grad])
    ours_in_b = torch.cat([ours.w_q.bias.grad, ours.w_k.bias.grad, ours.w_v.bias.grad])
    return {
        "grad in_proj_weight": (ours_in_w, theirs.in_proj_weight.grad),
        "grad in_proj_bias": (ours_in_b, theirs.in_proj_bias.grad),
        "grad out_proj.weight": (ours.w_o.weight.grad, theirs.out_proj.weight.grad),
        "grad out_proj.bias": (ours.w_o.bias.grad, theirs.out_proj.bias.grad),
    }


def compare_results(
    dtype: torch.dtype = torch.float64, need_weights: bool = False, causal: bool = False, relative: bool = False
) -> dict[str, float]:
    """Largest absolute differences between ours and nn.MultiheadAttention: output, input grad, parameter grads.

    With ``relative`` each difference is divided by the largest absolute entry of PyTorch's tensor.
    """
    ours, theirs = make_pair(dtype)
    gen = torch.Generator().manual_seed(1)
    x = torch.randn(BATCH, LENGTH, D_MODEL, dtype=dtype, generator=gen)
    mask = torch.ones(LENGTH, LENGTH, dtype=torch.bool).tril() if causal else None
    x_ours, x_theirs = x.clone().requires_grad_(), x.clone().requires_grad_()
    out_ours, _ = ours(x_ours, x_ours, x_ours, mask, need_weights=need_weights)
    out_theirs, _ = theirs(x_theirs, x_theirs, x_theirs, attn_mask=None if mask is None else ~mask, need_weights=False)
    upstream = torch.randn(out_ours.shape, dtype=dtype, generator=gen)  # a random upstream gradient
    (out_ours * upstream).sum().backward()
    (out_theirs * upstream).sum().backward()
    pairs = {"output": (out_ours, out_theirs), "grad input": (x_ours.grad, x_theirs.grad), **_grads(ours, theirs)}
    diffs = {}
    for name, (a, b) in pairs.items():
        diff = (a - b).abs().max().item()
        diffs[name] = diff / b.abs().max().item() if relative else diff
    return diffs


def _step(module: nn.Module, x: torch.Tensor, backward: bool, ours: bool, need_weights: bool) -> None:
    if ours:
        out, _ = module(x, x, x, need_weights=need_weights)
    else:
        out, _ = module(x, x, x, need_weights=False)
    if backward:
        out.sum().backward()


def measure(repeats: int, warmup: int = 5) -> dict[str, dict[str, float]]:
    """Median seconds of each (mode, variant), interleaved in one run."""
    ours, theirs = make_pair(torch.float32)
    x = torch.randn(BATCH, LENGTH, D_MODEL)
    x_grad = x.clone().requires_grad_()
    variants = {
        "ours, need_weights=False": (ours, True, False),
        "nn.MultiheadAttention, need_weights=False": (theirs, False, False),
        "ours, need_weights=True": (ours, True, True),
    }
    modes = {
        "forward": (True, False, True),
        "forward + backward": (True, True, True),
        "inference (eval, no_grad)": (False, False, False),
    }
    results: dict[str, dict[str, float]] = {}
    for mode, (train, backward, grad) in modes.items():
        times: dict[str, list[float]] = {name: [] for name in variants}
        for module in (ours, theirs):
            module.train(train)
        inp = x_grad if grad else x
        with torch.set_grad_enabled(grad):
            for i in range(warmup + repeats):
                for name, (module, is_ours, need_weights) in variants.items():
                    module.zero_grad(set_to_none=True)
                    start = time.perf_counter()
                    _step(module, inp, backward, is_ours, need_weights)
                    elapsed = time.perf_counter() - start
                    if i >= warmup:
                        times[name].append(elapsed)
        results[mode] = {name: statistics.median(t) for name, t in times.items()}
    return results


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=30, help="timed repeats per variant (default 30)")
    args = parser.parse_args(argv)
    torch.set_num_threads(1)

    print(
        f"torch {torch.__version__} | python {platform.python_version()} | {platform.machine()} | threads {torch.get_num_threads()}"
    )
    print(
        f"d_model {D_MODEL}, heads {HEADS}, length {LENGTH}, batch {BATCH}, float32, self-attention, median of {args.repeats} repeats\n"
    )
    results = measure(args.repeats)
    header = f"{'mode':<26} | {'variant':<42} | {'median ms':>9} | {'ratio':>6}"
    print(header)
    print("-" * len(header))
    worst = 0.0
    for mode, medians in results.items():
        base = medians["nn.MultiheadAttention, need_weights=False"]
        for name, seconds in medians.items():
            ratio = seconds / base
            print(f"{mode:<26} | {name:<42} | {1e3 * seconds:>9.2f} | {ratio:>5.2f}x")
            if name == "ours, need_weights=False" and mode != "inference (eval, no_grad)":
                worst = max(worst, ratio)
    print(
        f"\nratio ours/PyTorch with need_weights=False (training forward and forward+backward): worst {worst:.2f}x, goal <= {GOAL}x: "
        f"{'met' if worst <= GOAL else 'NOT met'}"
    )

    print("\nlargest absolute difference, ours (need_weights=False) vs nn.MultiheadAttention:")
    for dtype, bound in ((torch.float64, 1e-6), (torch.float32, None)):
        for causal in (False, True):
            diffs = compare_results(dtype, need_weights=False, causal=causal)
            worst_diff = max(diffs.values())
            verdict = f"<= {bound:g}: {'yes' if worst_diff <= bound else 'NO'}" if bound else "(float32 rounding)"
            label = f"{str(dtype).replace('torch.', ''):<7} {'causal' if causal else 'no mask':<7}"
            print(
                f"  {label} max over output and all gradients {worst_diff:.2e} {verdict}   "
                + ", ".join(f"{k} {v:.1e}" for k, v in diffs.items())
            )
    rel = compare_results(torch.float32, need_weights=False, causal=True, relative=True)
    print(f"  float32 causal, relative to each tensor's largest entry: max {max(rel.values()):.1e} (summation order)")
    diffs_w = compare_results(torch.float64, need_weights=True)
    print(f"  ours with need_weights=True, float64: max {max(diffs_w.values()):.2e}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
