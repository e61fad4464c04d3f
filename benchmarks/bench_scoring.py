"""Benchmark: notebook 03's timing of the three attention scores (dot-product, multiplicative, additive) on a CPU.

    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/bench_scoring.py --repeats 10
    ATEN_CPU_CAPABILITY=avx2 OMP_NUM_THREADS=1 .venv/bin/python benchmarks/bench_scoring.py --repeats 10

The notebook's setting and measurement, repeated: batch 2, n = m = 32 queries and keys, d = d_att = 128, float32,
one thread; each time is the median of 5 timings of 3 calls, after one warm-up call. One JSON line per repeat with the
milliseconds per call of each score and the ratio additive / dot-product that notebook 03's claim bounds from below.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import time

os.environ.setdefault("OMP_NUM_THREADS", "1")

import torch  # noqa: E402


def measure(seed: int = 8) -> dict[str, float]:
    """Milliseconds per call of each score and the additive / dot-product ratio, as notebook 03 times them."""
    torch.manual_seed(seed)
    n_q, m_k, d = 32, 32, 128
    states_q, states_k = torch.randn(2, n_q, d), torch.randn(2, m_k, d)
    W = torch.randn(d, d) / math.sqrt(d)
    W1, W2, v_att = torch.randn(d, d) / math.sqrt(d), torch.randn(d, d) / math.sqrt(d), torch.randn(d)
    variants = {
        "dot-product": lambda: states_q @ states_k.transpose(1, 2),
        "multiplicative": lambda: states_q @ (states_k @ W.T).transpose(1, 2),
        "additive": lambda: torch.tanh((states_k @ W1.T)[:, None] + (states_q @ W2.T)[:, :, None]) @ v_att,
    }
    ms = {}
    for name, fn in variants.items():
        fn()
        runs = []
        for _ in range(5):
            start = time.perf_counter()
            for _ in range(3):
                fn()
            runs.append((time.perf_counter() - start) / 3 * 1e3)
        ms[name] = statistics.median(runs)
    return {**{f"{k}_ms": round(v, 4) for k, v in ms.items()}, "ratio": round(ms["additive"] / ms["dot-product"], 2)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=10)
    args = parser.parse_args()
    torch.set_num_threads(1)
    kernels = os.environ.get("ATEN_CPU_CAPABILITY", "native") + ("+MKL_CBWR" if os.environ.get("MKL_CBWR") else "")
    for repeat in range(args.repeats):
        print(json.dumps({"kernels": kernels, "repeat": repeat, "torch": torch.__version__, **measure()}), flush=True)


if __name__ == "__main__":
    main()
