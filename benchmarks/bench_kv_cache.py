"""Benchmark: the cost of one more generated token against the context, with a KV cache (notebook 11).

    .venv/bin/python benchmarks/bench_kv_cache.py            # about a minute of CPU
    .venv/bin/python benchmarks/bench_kv_cache.py --repeats 7 --contexts 256 1024 4096 16384 65536
    .venv/bin/python benchmarks/bench_kv_cache.py --notebook-cell 10   # notebook 11's timing cell, ten times
    .venv/bin/python benchmarks/bench_kv_cache.py --notebook-cell 3 --parts loops   # on slow answers its checks accept

Setting: notebook 11's 2025 model (d_model 64, 4 query heads of width 16, 2 layers, SwiGLU of width 110, vocabulary
103, float32, random weights: the cost does not depend on them), with 4, 2 and 1 key/value heads (multi-head,
grouped-query and multi-query attention), batch 1, one CPU thread, the course's reference parts
(``helpers.models.lm``: ``torch.cat`` cache, ``repeat_kv``, fused ``F.scaled_dot_product_attention``).

For each context t (cached positions) the script prints the cost model of one step (``decode_flops``: the FLOPs of
the projections and feed-forward, which do not depend on t, and of the attention over the t + 1 keys, which grow
linearly with it; ``cache_bytes``: the bytes of keys and values the step must read) and the measured time per
token: ``decode_times``, the median over ``--repeats`` rounds of 16 steps each, contexts interleaved round by round,
CPU time of this process (``time.process_time``: other work on a shared machine disturbs it far less than the wall
clock), each step after a cache of random keys and values (a step costs the same as after a real prompt: the
script checks this at t = 1,024 against a prompt run first). Then, per attention kind, the cost of each added
cached position between consecutive contexts (nanoseconds per position: the slope of the time against t), and a
least-squares line ``time = a + b t`` up to t = 16,384 (``a``: the per-step overhead of Python, kernel launches and
the fixed matrix products; ``b``: the cost per cached position); and the time without a cache (the whole sequence
re-run per token) at the shorter contexts.
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

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from helpers.models.lm import DecoderLM, cache_bytes, decode_flops, decode_times, time_per_token  # noqa: E402

CONTEXTS = [64, 256, 1024, 4096, 16384, 32768]
UNCACHED = [64, 256, 1024, 2048]
KINDS = {"MHA (4 key/value heads)": 4, "GQA (2 key/value heads)": 2, "MQA (1 key/value head)": 1}


def model(kv_heads: int) -> DecoderLM:
    torch.manual_seed(0)
    return DecoderLM(103, d_model=64, num_heads=4, num_layers=2, d_ff=110, max_len=64, style="2025", kv_heads=kv_heads)


def fit_line(xs: list[int], ys: list[float]) -> tuple[float, float]:
    """Least-squares ``y = a + b x``."""
    mx, my = statistics.mean(xs), statistics.mean(ys)
    b = sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True)) / sum((x - mx) ** 2 for x in xs)
    return my - b * mx, b


def notebook_cell(runs: int, parts: str = "solution") -> None:
    """Notebook 11's timing cell, ``runs`` times, one JSON line each: the 2025 model on the parts the notebook runs, 8
    steps at 256 to 16,384 cached positions and 1 uncached step at 256 and 1,024, median of 3 rounds; the two ratios
    its claims are about. ``parts="solution"``: the written-out attention of Exercise 11.9 as its solution computes
    it, the course's other parts (those of the solutions); ``parts="loops"``: slow answers that the checks accept
    (RoPE one pair of features at a time, attention one query at a time, ``repeat_kv`` by ``torch.cat`` of slices),
    the slowest learner's notebook the claims must hold for."""
    import json
    import math

    from helpers.models.lm import Parts

    def written_out(q, k, v):  # the notebook's Exercise 11.9, as its solution writes it
        n, m = q.shape[-2], k.shape[-2]
        scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])  # (..., n, m)
        query_position = torch.arange(m - n, m, device=q.device)[:, None]  # (n, 1)
        key_position = torch.arange(m, device=q.device)[None, :]  # (1, m)
        return scores.masked_fill(key_position > query_position, float("-inf")).softmax(dim=-1) @ v

    def rope_loop(x, angles):  # one pair of features at a time
        out = x.clone()
        for i in range(x.shape[-1] // 2):
            cos, sin = angles[:, i].cos().to(x.dtype), angles[:, i].sin().to(x.dtype)
            out[..., 2 * i] = x[..., 2 * i] * cos - x[..., 2 * i + 1] * sin
            out[..., 2 * i + 1] = x[..., 2 * i] * sin + x[..., 2 * i + 1] * cos
        return out

    def attention_loop(q, k, v):  # one query at a time, over the keys it sees
        n, m = q.shape[-2], k.shape[-2]
        rows = []
        for i in range(n):
            seen = m - n + i + 1
            scores = q[..., i : i + 1, :] @ k[..., :seen, :].transpose(-2, -1) / math.sqrt(q.shape[-1])
            rows.append(scores.softmax(-1) @ v[..., :seen, :])
        return torch.cat(rows, -2)

    def repeat_cat(kv, groups):  # torch.cat of one slice per query head
        return torch.cat([kv[:, i : i + 1] for i in range(kv.shape[1]) for _ in range(groups)], 1)

    contexts = [256, 1024, 4096, 16384]
    chosen = (
        Parts(cached_attention=written_out)
        if parts == "solution"
        else Parts(apply_rope=rope_loop, cached_attention=attention_loop, repeat_kv=repeat_cat)
    )
    lm = model(2).set_parts(chosen)
    for run in range(runs):
        cached = decode_times(lm, contexts, steps=8, repeats=3)
        uncached = decode_times(lm, contexts[:2], steps=1, repeats=3, use_cache=False)
        a, b = fit_line(contexts, cached)
        print(
            json.dumps(
                {
                    "run": run,
                    "parts": parts,
                    "capability": torch.backends.cpu.get_cpu_capability(),
                    "mkl_cbwr": os.environ.get("MKL_CBWR", ""),
                    "ms_per_token": [round(1000 * c, 4) for c in cached],
                    "uncached_ms": [round(1000 * u, 3) for u in uncached],
                    "ratio_16384_over_256": round(cached[-1] / cached[0], 2),
                    "speedup_at_1024": round(uncached[1] / cached[1], 1),
                    "ns_per_position": round(1e9 * b, 1),
                }
            ),
            flush=True,
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--contexts", nargs="+", type=int, default=CONTEXTS)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--steps", type=int, default=16)
    parser.add_argument("--notebook-cell", type=int, default=0, metavar="RUNS", help="time notebook 11's cell RUNS times")
    parser.add_argument("--parts", choices=["solution", "loops"], default="solution", help="with --notebook-cell")
    args = parser.parse_args()
    torch.set_num_threads(1)
    if args.notebook_cell:
        notebook_cell(args.notebook_cell, args.parts)
        return
    print(
        f"torch {torch.__version__} | python {platform.python_version()} | {platform.machine()} | "
        f"capability {torch.backends.cpu.get_cpu_capability()} | threads {torch.get_num_threads()}"
    )
    print(f"per-token CPU time: median of {args.repeats} interleaved rounds of {args.steps} steps, batch 1, float32\n")
    header = f"{'attention':26}|{'context t':>10} |{'fixed FLOPs':>12} |{'attn FLOPs':>12} |{'attn share':>10} |{'cache MB':>9} |{'ms/token':>9}"
    print(header)
    print("-" * len(header))
    fits = {}
    for kind, kv_heads in KINDS.items():
        lm = model(kv_heads)
        times = decode_times(lm, args.contexts, steps=args.steps, repeats=args.repeats)
        for t, seconds in zip(args.contexts, times, strict=True):
            flops = decode_flops(lm, t)
            share = flops["attention"] / flops["total"]
            print(
                f"{kind:26}|{t:>10,} |{flops['fixed']:>12,} |{flops['attention']:>12,} |{share:>10.1%} |"
                f"{cache_bytes(lm, t) / 1e6:>9.3f} |{1000 * seconds:>9.3f}"
            )
        upto = [(t, s) for t, s in zip(args.contexts, times, strict=True) if t <= 16384]
        fits[kind] = (fit_line([t for t, _ in upto], [s for _, s in upto]), times)
    print("\ncost of each added cached position (ns), between consecutive contexts; least-squares line up to t = 16,384:")
    for kind, ((a, b), times) in fits.items():
        lm = model(KINDS[kind])
        pairs = zip(args.contexts, args.contexts[1:], times, times[1:], strict=False)
        slopes = ", ".join(f"{t0:,}-{t1:,}: {1e9 * (s1 - s0) / (t1 - t0):.0f}" for t0, t1, s0, s1 in pairs)
        print(
            f"  {kind:26} {slopes}\n  {'':26} line: a = {1000 * a:.3f} ms, b = {1e9 * b:.0f} ns per position "
            f"({cache_bytes(lm, 1)} bytes of cache and {decode_flops(lm, 1)['attention'] - decode_flops(lm, 0)['attention']} "
            "attention FLOPs per position)"
        )
    lm = model(2)
    prompt = statistics.median(
        time_per_token(lm, 1024, args.steps, prefill=True, clock=time.process_time) for _ in range(args.repeats)
    )
    random = statistics.median(
        time_per_token(lm, 1024, args.steps, prefill=False, clock=time.process_time) for _ in range(args.repeats)
    )
    print(f"\nGQA at t = 1,024: after a real prompt {1000 * prompt:.3f} ms, after random keys and values {1000 * random:.3f} ms")
    uncached = decode_times(lm, UNCACHED, steps=4, repeats=args.repeats, use_cache=False)
    cached = decode_times(lm, UNCACHED, steps=args.steps, repeats=args.repeats)
    print("\nGQA without and with the cache (the whole sequence re-run per token, against one position):")
    for t, u, c in zip(UNCACHED, uncached, cached, strict=True):
        print(f"  t = {t:>6,}: without {1000 * u:8.3f} ms, with {1000 * c:6.3f} ms, ratio {u / c:6.1f}")


if __name__ == "__main__":
    main()
