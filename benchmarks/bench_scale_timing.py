"""Benchmark: notebook 12's timing claims, measured the way the notebook measures them, run after run.

    .venv/bin/python benchmarks/bench_scale_timing.py                    # 10 runs on this CPU, one thread
    ATEN_CPU_CAPABILITY=avx2 .venv/bin/python benchmarks/bench_scale_timing.py   # another kernel family
    .venv/bin/python benchmarks/bench_scale_timing.py --device cuda      # the notebook's GPU cell (needs a GPU)

Each run prints one JSON line with the ratios the notebook's claim cells bound (section 3: the fused kernel against
MATH with and without a causal mask, the tiled Python loop against both; section 5: the time per token at a context
of 4,096 over 256 with the full and the rolling cache; section 6: softmax over linear attention at n = 64 to 4,096),
all in CPU time (``time.process_time``), best of the notebook's repeats, on one thread; and the time per score computed
under the causal mask of the tiled loop, the fused kernel (whole blocks of ``cpu_kernel_blocks(n)`` up to the diagonal)
and MATH (every score). Timings are properties of the
machine: run it on the machine whose numbers you quote. ``--device cuda`` times the GPU cell's configurations instead
(synchronised wall time).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

os.environ.setdefault("OMP_NUM_THREADS", "1")

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402
from torch.nn.attention import SDPBackend  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from helpers.attention import causal_mask, scaled_dot_product_attention  # noqa: E402
from helpers.models import DecoderLM  # noqa: E402
from helpers.scale.flash import causal_tile_mask, cpu_kernel_blocks, flash_forward, tile_counts  # noqa: E402
from helpers.scale.linear_attention import linear_attention_chunked  # noqa: E402
from helpers.scale.measure import best_time, sdpa_times  # noqa: E402
from helpers.scale.sliding import WindowedLM, time_per_token  # noqa: E402

BACKENDS = {"MATH": SDPBackend.MATH, "FLASH_ATTENTION": SDPBackend.FLASH_ATTENTION}


def attention_split(n: int = 2048) -> dict[str, float]:
    """Section 3's "where the fused kernel's speed comes from", at n: the ratios the notebook claims."""
    q, k, v = (torch.randn(1, 1, n, 64) for _ in range(3))
    split = {}
    for causal in (True, False):
        for name, seconds in sdpa_times(q, k, v, BACKENDS, causal=causal, repeats=3).items():
            split[name, causal] = seconds
    loop = best_time(lambda: flash_forward(q, k, v, 64, 64, True, tile_mask=causal_tile_mask), repeats=3)
    naive = best_time(lambda: scaled_dot_product_attention(q, k, v, causal_mask(n)), repeats=3)
    tiles = tile_counts(n, n, 64, 64, causal=True)[0]
    block_q, block_k = cpu_kernel_blocks(n)
    blocks = tile_counts(n, n, block_q, block_k, causal=True)[0]
    return {
        "math_over_flash_no_mask": split["MATH", False] / split["FLASH_ATTENTION", False],
        "flash_no_mask_over_causal": split["FLASH_ATTENTION", False] / split["FLASH_ATTENTION", True],
        "math_over_flash_causal": split["MATH", True] / split["FLASH_ATTENTION", True],
        "math_causal_over_no_mask": split["MATH", True] / split["MATH", False],
        "loop_over_flash_causal": loop / split["FLASH_ATTENTION", True],
        "naive_over_loop": naive / loop,
        "loop_ns_per_score": 1e9 * loop / (tiles * 64 * 64),  # the scores each computes under the causal mask
        "flash_ns_per_score": 1e9 * split["FLASH_ATTENTION", True] / (blocks * block_q * block_k),
        "math_ns_per_score": 1e9 * split["MATH", True] / (n * n),
    }


def per_token_growth() -> dict[str, float]:
    """Section 5: time per token at a context of 4,096 over 256, full cache and rolling cache of 64."""
    config = dict(vocab_size=96, d_model=64, num_heads=4, num_layers=2, d_ff=96, max_len=64, style="2025", kv_heads=2)
    torch.manual_seed(0)
    model = DecoderLM(**config)
    windowed = WindowedLM(model, 64)
    full = [time_per_token(model, n, steps=32) for n in (256, 4096)]
    rolling = [time_per_token(windowed, n, steps=32) for n in (256, 4096)]
    return {"full_cache_growth": full[1] / full[0], "rolling_cache_growth": rolling[1] / rolling[0]}


def linear_ratios(lengths=(64, 128, 256, 512, 1024, 2048, 4096)) -> dict[str, float]:
    """Section 6: softmax attention's time over chunked linear attention's, causal, one head of width 64."""
    ratios = {}
    for n in lengths:
        q, k, v = (torch.randn(1, 1, n, 64) for _ in range(3))
        soft = best_time(F.scaled_dot_product_attention, q, k, v, is_causal=True, repeats=5)
        ratios[f"softmax_over_linear_{n}"] = soft / best_time(linear_attention_chunked, q, k, v, repeats=5)
    return ratios


def gpu(device: str = "cuda") -> list[dict]:
    """The notebook's GPU cell (and the 8 x 16 heads of the course's H200 figures): MATH against the fused kernels,
    causal, n = 4,096, width 64, float16 and float32."""
    rows = []
    backends = {**BACKENDS, "EFFICIENT": SDPBackend.EFFICIENT_ATTENTION}
    for dtype, shape in ((torch.float16, (1, 1)), (torch.float16, (4, 8)), (torch.float16, (8, 16)), (torch.float32, (1, 1))):
        q, k, v = (torch.randn(*shape, 4096, 64, device=device, dtype=dtype) for _ in range(3))
        times = sdpa_times(q, k, v, backends, causal=True, repeats=10)
        fastest = min(t for t in times.values() if t is not None)
        rows.append({"dtype": str(dtype), "heads": shape, "ms": times, "math_over_fused": times["MATH"] / fastest})
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=10)
    parser.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    kernels = os.environ.get("ATEN_CPU_CAPABILITY", "native") + ("+MKL_CBWR" if os.environ.get("MKL_CBWR") else "")
    if args.device == "cuda":
        for row in gpu():
            print(json.dumps({"device": torch.cuda.get_device_name(), **row}, default=str), flush=True)
        return 0
    for run in range(args.runs):
        torch.manual_seed(run)
        begin = time.process_time()
        row = {"run": run, "kernels": kernels, **attention_split(), **per_token_growth(), **linear_ratios()}
        row = {key: round(value, 3) if isinstance(value, float) else value for key, value in row.items()}
        print(json.dumps({**row, "cpu_s": round(time.process_time() - begin, 1)}), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
