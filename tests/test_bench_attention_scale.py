"""The attention-at-scale benchmark measures what it says (never a timing assertion)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

_PATH = Path(__file__).resolve().parent.parent / "benchmarks" / "bench_attention_scale.py"
_spec = importlib.util.spec_from_file_location("bench_attention_scale", _PATH)
bench = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(bench)


def test_accuracy_meets_the_issue_targets():
    results = bench.accuracy(n=300, block=64)
    assert len(results) == 6
    for key, diff in results.items():
        assert diff < (1e-5 if key.startswith("float32") else 1e-12), (key, diff)


def test_memory_reports_every_method_and_the_tiled_loop_stays_small():
    sizes = [512, 1024]
    peaks = bench.memory(sizes)
    assert set(peaks) == set(bench.METHODS)
    for n, naive, tiled in zip(sizes, peaks["naive (02's attention)"], peaks["tiled loop, blocks of 64"], strict=True):
        assert naive >= 4 * n * n > tiled


def test_timing_windows_and_linear_forms_run():
    times = bench.timing([128], repeats=1)
    assert all(len(values) == 1 and values[0] >= 0 for values in times.values())
    assert all(diff < 1e-6 for key, diff in bench.windows(n=256).items() if "vs causal" in key)
    assert bench.windows(n=64)["rolling cache bytes after 1,000 positions, window 64"] == 2 * 64 * 2 * 16 * 4
    assert all(diff < 1e-5 for diff in bench.linear_forms(n=100).values())
    assert [n for n, _, _ in bench.linear_crossover([32, 64], repeats=1)] == [32, 64]


def _load(name):
    path = Path(__file__).resolve().parent.parent / "benchmarks" / f"{name}.py"
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_timing_benchmark_measures_every_ratio_the_notebook_claims():
    timing = _load("bench_scale_timing")
    split = timing.attention_split(n=256)
    assert {"math_over_flash_no_mask", "flash_no_mask_over_causal", "math_over_flash_causal", "loop_over_flash_causal"} <= set(
        split
    )
    assert all(value > 0 for value in split.values())
    assert set(timing.linear_ratios(lengths=(64, 128))) == {"softmax_over_linear_64", "softmax_over_linear_128"}


def test_the_window_benchmark_runs_the_notebooks_recipe():
    window = _load("bench_scale_window")
    vocab, train_ids, val_ids = window.data()
    row = window.run(0, 2, vocab, train_ids, val_ids)
    assert row["steps"] == 2 and set(row["read_minus_full"]) == set(window.WINDOWS)
    assert (
        row["window8_minus_full"] == round(row["window8_trained"] - row["full"], 4)
        or abs(row["window8_minus_full"] - (row["window8_trained"] - row["full"])) < 2e-4
    )
