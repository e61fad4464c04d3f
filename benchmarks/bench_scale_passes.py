"""Benchmark: causal attention's forward pass, backward pass and both, on the CPU, as a FlashAttention benchmark does.

    .venv/bin/python benchmarks/bench_scale_passes.py                        # one thread, this CPU's kernels
    ATEN_CPU_CAPABILITY=avx2 .venv/bin/python benchmarks/bench_scale_passes.py

The measurements that notebook 12 quotes in its note, in the manner of a FlashAttention benchmark (Stanford CS336's
assignment 2 times forward, backward and end-to-end passes over sequence lengths, head widths and precisions, after a
warm-up, mean and spread): causal attention, batch 1, one head, for n = 256, 1,024, 4,096 and head widths d = 16, 32,
64, 128, in float32 and bfloat16, through ``F.scaled_dot_product_attention`` forced onto ``MATH`` and onto
``FLASH_ATTENTION`` (PyTorch's fused CPU kernel, forward and backward), and through the course's tiled loop
(``helpers.scale.flash.flash_attention``: a Python loop over 64 x 64 tiles and its own backward pass; float32 only).

Each pass is timed in CPU time (``time.process_time``) after ``--warmup`` untimed calls, ``--repeats`` times: the
forward pass alone (no autograd graph), the backward pass alone (from a graph built outside the timer) and the two
together. One JSON line per configuration: the mean and standard deviation in milliseconds. One thread. Not a test:
``benchmarks/results/12_attention_at_scale.md`` keeps the table.
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
import torch.nn.functional as F  # noqa: E402
from torch.nn.attention import SDPBackend, sdpa_kernel  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from helpers.scale.flash import flash_attention  # noqa: E402


def _sdpa(backend):
    def run(q, k, v):
        with sdpa_kernel(backend):
            return F.scaled_dot_product_attention(q, k, v, is_causal=True)

    return run


METHODS = {
    "MATH": _sdpa(SDPBackend.MATH),
    "FLASH_ATTENTION": _sdpa(SDPBackend.FLASH_ATTENTION),
    "tiled loop": lambda q, k, v: flash_attention(q, k, v, 64, 64, True),
}


def _times(fn, warmup: int, repeats: int) -> tuple[float, float]:
    """Mean and standard deviation (ms) of ``repeats`` timed calls of ``fn()`` after ``warmup`` untimed ones."""
    for _ in range(warmup):
        fn()
    samples = []
    for _ in range(repeats):
        begin = time.process_time()
        fn()
        samples.append(1000 * (time.process_time() - begin))
    return statistics.mean(samples), statistics.stdev(samples) if len(samples) > 1 else 0.0


def measure(name: str, n: int, d: int, dtype: torch.dtype, warmup: int, repeats: int) -> dict:
    run = METHODS[name]
    q, k, v = (torch.randn(1, 1, n, d, dtype=dtype, requires_grad=True) for _ in range(3))
    grad = torch.randn(1, 1, n, d, dtype=dtype)

    def forward() -> None:
        with torch.no_grad():
            run(q, k, v)

    def both() -> None:
        run(q, k, v).backward(grad)

    graphs = []

    def build() -> None:  # outside the timer: the graph whose backward pass the next timed call runs
        graphs.append(run(q, k, v))

    def backward() -> None:
        graphs.pop().backward(grad)

    row = {"method": name, "n": n, "d": d, "dtype": str(dtype).replace("torch.", "")}
    row["forward_ms"] = _times(forward, warmup, repeats)
    row["forward_backward_ms"] = _times(both, warmup, repeats)
    samples = []
    for i in range(warmup + repeats):
        build()
        begin = time.process_time()
        backward()
        if i >= warmup:
            samples.append(1000 * (time.process_time() - begin))
    row["backward_ms"] = (statistics.mean(samples), statistics.stdev(samples) if len(samples) > 1 else 0.0)
    for key in ("forward_ms", "backward_ms", "forward_backward_ms"):
        row[key] = [round(x, 3) for x in row[key]]
    return row


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--lengths", type=int, nargs="+", default=[256, 1024, 4096])
    parser.add_argument("--widths", type=int, nargs="+", default=[16, 32, 64, 128])
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=10)
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    torch.manual_seed(0)
    kernels = os.environ.get("ATEN_CPU_CAPABILITY", "native") + ("+MKL_CBWR" if os.environ.get("MKL_CBWR") else "")
    print(json.dumps({"torch": torch.__version__, "kernels": kernels, "threads": torch.get_num_threads()}), flush=True)
    for dtype in (torch.float32, torch.bfloat16):
        for n in args.lengths:
            for d in args.widths:
                for name in METHODS:
                    if name == "tiled loop" and dtype != torch.float32:
                        continue
                    row = measure(name, n, d, dtype, args.warmup, args.repeats)
                    print(json.dumps({"kernels": kernels, **row}), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
