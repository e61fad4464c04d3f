"""Benchmark: the targets of notebook 12 (attention at scale), measured in one run.

    .venv/bin/python benchmarks/bench_attention_scale.py                 # CPU, one thread (a few minutes)
    .venv/bin/python benchmarks/bench_attention_scale.py --quick         # smaller sweeps (about a minute)
    .venv/bin/python benchmarks/bench_attention_scale.py --device cuda   # memory and time on a GPU as well

What it measures (issue "Notebook 12"):

- accuracy: the tiled forward pass (``helpers.scale.flash.flash_forward``, blocks of 64) against naive attention at
  N = 1,000, d = 64, causal and not, in float32 (target 1e-5) and float64 (target 1e-12); its backward pass
  against autograd (float64);
- memory: the peak extra bytes (``helpers.scale.measure.peak_extra_bytes``: the CPU allocator's events through
  ``torch.profiler``; on CUDA, ``torch.cuda.max_memory_allocated``) of naive attention (notebook 02's), the tiled
  loop, and ``F.scaled_dot_product_attention`` forced onto its MATH and FLASH_ATTENTION backends, causal, one head
  of width 64, float32, N = 1,024 to 8,192; target: at N = 4,096 the tiled loop's peak at least 16x below one
  N x N float32 score matrix;
- time: the same four (the shortest of a few runs in CPU time on CPU; in CUDA-synchronised wall time on a GPU),
  with every ratio to the fused kernel taken in the same run;
- sliding windows: a window >= N equals full causal attention (target 1e-6, float32); the rolling KV cache's bytes;
- linear attention: its recurrent, chunked and parallel forms agree (target 1e-5, float32); its time against
  softmax attention's from N = 64 to 8,192, and the crossover;
- the KV cache's bytes per token of the published configurations (``helpers.scale.kv_cost.PUBLISHED``), and at
  each one's own context (GPT-3's is 2,048 tokens).
"""

from __future__ import annotations

import argparse
import os
import platform
import sys
import time
from pathlib import Path

os.environ.setdefault("OMP_NUM_THREADS", "1")

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402
from torch.nn.attention import SDPBackend, sdpa_kernel  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from helpers.attention import causal_mask, scaled_dot_product_attention  # noqa: E402
from helpers.scale.flash import attention_with_lse, flash_attention, flash_forward  # noqa: E402
from helpers.scale.kv_cost import PUBLISHED  # noqa: E402
from helpers.scale.linear_attention import (  # noqa: E402
    linear_attention_chunked,
    linear_attention_parallel,
    linear_attention_recurrent,
)
from helpers.scale.measure import best_time, format_bytes, peak_extra_bytes  # noqa: E402
from helpers.scale.sliding import RollingKVCache, sliding_window_attention  # noqa: E402

D = 64
TARGET_RATIO = 16


def _sdpa(backend):
    def run(q, k, v):
        with sdpa_kernel(backend):
            return F.scaled_dot_product_attention(q, k, v, is_causal=True)

    return run


#: The methods compared, each ``(q, k, v) -> out`` for causal self-attention of (1, 1, n, d) inputs.
METHODS = {
    "naive (02's attention)": lambda q, k, v: scaled_dot_product_attention(q, k, v, causal_mask(q.shape[-2], device=q.device))[0],
    "tiled loop, blocks of 64": lambda q, k, v: flash_forward(q, k, v, 64, 64, causal=True)[0],
    "F.sdpa MATH": _sdpa(SDPBackend.MATH),
    "F.sdpa FLASH_ATTENTION": _sdpa(SDPBackend.FLASH_ATTENTION),
}
#: The fused kernel is CPU only under this name here; on CUDA, PyTorch picks its own flash or efficient kernel.
FUSED = "F.sdpa FLASH_ATTENTION"


def accuracy(n: int = 1000, block: int = 64) -> dict[str, float]:
    """Largest |tiled - naive| over output and log-sum-exp, per dtype and mask; and the backward's against autograd."""
    results = {}
    for dtype in (torch.float32, torch.float64):
        gen = torch.Generator().manual_seed(0)
        q, k, v = (torch.randn(n, D, dtype=dtype, generator=gen) for _ in range(3))
        for causal in (False, True):
            out, lse = flash_forward(q, k, v, block, block, causal)
            ref_out, ref_lse = attention_with_lse(q, k, v, causal)
            key = f"{str(dtype).replace('torch.', '')} {'causal' if causal else 'full'}"
            results[key] = max((out - ref_out).abs().max().item(), (lse - ref_lse).abs().max().item())
    q, k, v = (torch.randn(2, 150, 16, dtype=torch.float64, requires_grad=True) for _ in range(3))
    dout = torch.randn(2, 150, 16, dtype=torch.float64)
    for causal in (False, True):
        ours = torch.autograd.grad(flash_attention(q, k, v, 32, 32, causal), (q, k, v), dout)
        ref = torch.autograd.grad(F.scaled_dot_product_attention(q, k, v, is_causal=causal), (q, k, v), dout)
        results[f"backward float64 {'causal' if causal else 'full'}"] = max(
            (a - b).abs().max().item() for a, b in zip(ours, ref, strict=True)
        )
    return results


def _inputs(n: int, device: str) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    gen = torch.Generator().manual_seed(n)
    return tuple(torch.randn(1, 1, n, D, generator=gen).to(device) for _ in range(3))


def memory(sizes: list[int], device: str = "cpu") -> dict[str, list[int]]:
    """Peak extra bytes of every method at every size."""
    peaks: dict[str, list[int]] = {name: [] for name in METHODS}
    for n in sizes:
        q, k, v = _inputs(n, device)
        for name, run in METHODS.items():
            if device != "cpu" and name == FUSED:
                run = _sdpa([SDPBackend.FLASH_ATTENTION, SDPBackend.EFFICIENT_ATTENTION])
            peaks[name].append(peak_extra_bytes(run, q, k, v, device=device).peak)
    return peaks


def fused_scratch_by_threads(n: int = 4096, threads: tuple[int, ...] = (1, 2)) -> dict[int, int]:
    """The CPU fused kernel's peak extra bytes at n with each thread count: its scratch space is per thread."""
    q, k, v = _inputs(n, "cpu")
    before = torch.get_num_threads()
    peaks = {}
    try:
        for count in threads:
            torch.set_num_threads(count)
            peaks[count] = peak_extra_bytes(METHODS[FUSED], q, k, v).peak
    finally:
        torch.set_num_threads(before)
    return peaks


def timing(sizes: list[int], repeats: int = 3, device: str = "cpu") -> dict[str, list[float]]:
    """Seconds per call of every method at every size: CPU time on CPU, synchronised wall time on CUDA."""
    times: dict[str, list[float]] = {name: [] for name in METHODS}
    for n in sizes:
        q, k, v = _inputs(n, device)
        for name, run in METHODS.items():
            if device == "cpu":
                times[name].append(best_time(run, q, k, v, repeats=repeats))
            else:
                if name == FUSED:
                    run = _sdpa([SDPBackend.FLASH_ATTENTION, SDPBackend.EFFICIENT_ATTENTION])

                def synced(run, q, k, v):
                    run(q, k, v)
                    torch.cuda.synchronize()

                times[name].append(best_time(synced, run, q, k, v, repeats=repeats, clock=time.perf_counter))
    return times


def windows(n: int = 4096) -> dict[str, float]:
    """A window >= n against full causal attention (float32), and the rolling cache's bytes."""
    q, k, v = (torch.randn(2, 4, n, 16) for _ in range(3))
    full = F.scaled_dot_product_attention(q, k, v, is_causal=True)
    results = {
        f"window {w} vs causal, n = {n}": (sliding_window_attention(q, k, v, w) - full).abs().max().item() for w in (n, 2 * n)
    }
    cache = RollingKVCache(64)
    for _ in range(1000):
        cache.append(torch.randn(1, 2, 1, 16), torch.randn(1, 2, 1, 16))
    results["rolling cache bytes after 1,000 positions, window 64"] = cache.nbytes
    return results


def linear_forms(n: int = 500) -> dict[str, float]:
    """Largest |form - parallel| in float32."""
    q, k, v = (torch.randn(2, 3, n, 32) for _ in range(3))
    parallel = linear_attention_parallel(q, k, v)
    return {
        "recurrent vs parallel": (linear_attention_recurrent(q, k, v) - parallel).abs().max().item(),
        "chunked vs parallel": (linear_attention_chunked(q, k, v, 64) - parallel).abs().max().item(),
    }


def linear_crossover(lengths: list[int], repeats: int = 5) -> list[tuple[int, float, float]]:
    """(n, softmax seconds, linear seconds) for causal attention of one head of width 64 (CPU time, best of runs)."""
    rows = []
    for n in lengths:
        q, k, v = _inputs(n, "cpu")
        soft = best_time(F.scaled_dot_product_attention, q, k, v, is_causal=True, repeats=repeats)
        lin = best_time(linear_attention_chunked, q, k, v, 64, repeats=repeats)
        rows.append((n, soft, lin))
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="smaller sweeps")
    parser.add_argument("--device", default="cpu", choices=["cpu", "cuda"], help="where memory and time are measured")
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    torch.manual_seed(0)
    sizes = [1024, 2048, 4096] if args.quick else [1024, 2048, 4096, 8192]
    lengths = [64, 256, 1024, 4096] if args.quick else [64, 128, 256, 512, 1024, 2048, 4096, 8192]
    print(
        f"torch {torch.__version__} | python {platform.python_version()} | {platform.machine()} | threads {torch.get_num_threads()}"
    )
    begin, begin_cpu = time.perf_counter(), time.process_time()

    print("\naccuracy: tiled (blocks of 64) vs naive, N = 1,000, d = 64, output and log-sum-exp; backward vs autograd")
    for key, diff in accuracy().items():
        target = 1e-5 if key.startswith("float32") else 1e-12
        print(f"  {key:24} max |difference| {diff:.1e}   target {target:g}: {'met' if diff < target else 'MISSED'}")

    for device in ["cpu"] + (["cuda"] if args.device == "cuda" else []):
        label = "CPU allocator (torch.profiler)" if device == "cpu" else "CUDA (max_memory_allocated)"
        print(f"\npeak extra memory, causal, one head, d = {D}, float32, {label}; x = over one N x N float32 score matrix")
        peaks = memory(sizes, device)
        print(f"  {'':26}" + "".join(f"{f'N = {n:,}':>20}" for n in sizes))
        for name, values in peaks.items():
            print(
                f"  {name:26}"
                + "".join(f"{format_bytes(b):>11} {b / (4 * n * n):6.3f}x" for b, n in zip(values, sizes, strict=True))
            )
        if 4096 in sizes:
            i = sizes.index(4096)
            ratio = 4 * 4096 * 4096 / peaks["tiled loop, blocks of 64"][i]
            met = "met" if ratio >= TARGET_RATIO else "MISSED"
            print(f"  N = 4,096: one score matrix / the tiled loop's peak = {ratio:.1f}x, target >= {TARGET_RATIO}x: {met}")
        if device == "cpu":
            scratch = fused_scratch_by_threads(4096 if 4096 in sizes else sizes[-1])
            print(
                "  the fused kernel's peak by thread count (its scratch space is per thread): "
                + ", ".join(f"{count} thread{'s' if count > 1 else ''} {format_bytes(b)}" for count, b in scratch.items())
            )
        clock = "CPU time, best of" if device == "cpu" else "synchronised wall time, best of"
        print(f"\ntime, causal ({clock} {args.repeats}); ratio = time / the fused kernel's, same run")
        times = timing(sizes, args.repeats, device)
        for name, values in times.items():
            cells = "".join(f"{1000 * t:9.1f} ms {t / f:5.1f}x" for t, f in zip(values, times[FUSED], strict=True))
            print(f"  {name:26}{cells}")

    print("\nsliding windows")
    for key, value in windows().items():
        extra = f" (target 1e-6: {'met' if value < 1e-6 else 'MISSED'})" if "vs causal" in key else " bytes"
        print(f"  {key}: {value:.3g}{extra}" if "vs causal" in key else f"  {key}: {value:,}{extra}")
    print("\nlinear attention, float32 (target 1e-5)")
    for key, diff in linear_forms().items():
        print(f"  {key}: max |difference| {diff:.1e}: {'met' if diff < 1e-5 else 'MISSED'}")
    print("  causal, one head, d = 64, CPU time best of 5: softmax (F.sdpa) vs chunked linear attention (chunks of 64)")
    rows = linear_crossover(lengths)
    for n, soft, lin in rows:
        print(f"  N = {n:5,}: softmax {1000 * soft:8.2f} ms, linear {1000 * lin:8.2f} ms, softmax / linear {soft / lin:5.2f}")
    faster = [n for n, soft, lin in rows if soft > lin]
    print(f"  linear attention faster from N = {faster[0] if faster else 'never'}")

    print("\nKV cache per token (16-bit numbers), and at each model's own context")
    for name, config in PUBLISHED.items():
        print(
            f"  {name:12} {config.kind}  {config.bytes_per_token():>10,} bytes/token  context {config.context:>7,}: "
            f"{format_bytes(config.cache_bytes(config.context)):>9}   ({config.source})"
        )
    print(f"\n{time.perf_counter() - begin:.0f} s wall, {time.process_time() - begin_cpu:.0f} s CPU")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
