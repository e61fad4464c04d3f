"""Correctness of the MHA benchmark's comparison (never a timing assertion)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest
import torch

_PATH = Path(__file__).resolve().parent.parent / "benchmarks" / "bench_mha.py"
_spec = importlib.util.spec_from_file_location("bench_mha", _PATH)
bench_mha = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(bench_mha)


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("need_weights", [False, True])
def test_ours_equals_torch_outputs_and_gradients_float64(causal, need_weights):
    diffs = bench_mha.compare_results(torch.float64, need_weights=need_weights, causal=causal)
    assert set(diffs) >= {"output", "grad input", "grad in_proj_weight", "grad out_proj.weight"}
    assert max(diffs.values()) <= 1e-6, diffs


def test_measure_runs_and_reports_every_variant():
    results = bench_mha.measure(repeats=1, warmup=0)
    assert set(results) == {"forward", "forward + backward", "inference (eval, no_grad)"}
    for medians in results.values():
        assert set(medians) == {
            "ours, need_weights=False",
            "nn.MultiheadAttention, need_weights=False",
            "ours, need_weights=True",
        }
        assert all(seconds > 0 for seconds in medians.values())
