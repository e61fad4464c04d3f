"""helpers.scale.measure: the allocator's peak memory against counts known in advance, and the timing helper."""

from __future__ import annotations

import os
import sys

import pytest
import torch

from helpers.attention import scaled_dot_product_attention
from helpers.scale.flash import flash_attention, flash_forward
from helpers.scale.measure import best_time, format_bytes, peak_extra_bytes, sdpa_times, sweep


def test_one_allocation_is_counted_exactly():
    assert peak_extra_bytes(lambda: torch.empty(1000, 1000)).peak == 4 * 1000 * 1000
    assert peak_extra_bytes(lambda: torch.empty(300, 7, dtype=torch.float64)).peak == 8 * 300 * 7
    kept = peak_extra_bytes(lambda: torch.zeros(100, 10))
    assert kept.retained == kept.peak == 4000 and kept.result.shape == (100, 10)


def test_a_temporary_counts_at_the_peak_but_not_in_what_is_retained():
    measured = peak_extra_bytes(lambda: torch.ones(500, 300, dtype=torch.float64).sum())
    assert measured.peak >= 8 * 500 * 300  # the temporary matrix was live
    assert measured.retained < 64  # only the scalar sum is left
    assert measured.result.item() == 150000


def test_memory_held_before_the_call_is_not_counted():
    big = torch.randn(2000, 2000)  # 16 MB held throughout
    assert peak_extra_bytes(lambda: big + big).peak == big.nbytes  # only the new tensor
    assert big.nbytes <= peak_extra_bytes(lambda: big + 1).peak < big.nbytes + 64  # and a wrapped scalar
    assert peak_extra_bytes(lambda: big.sum()).peak < 1024


def test_naive_attention_holds_score_matrices_and_tiled_attention_does_not():
    n = 2048
    q, k, v = (torch.randn(n, 64) for _ in range(3))
    score_matrix = 4 * n * n
    naive = peak_extra_bytes(scaled_dot_product_attention, q, k, v).peak
    tiled = peak_extra_bytes(flash_forward, q, k, v, 64, 64).peak
    assert naive >= 2 * score_matrix  # the scores and the weights at least
    assert tiled * 16 <= score_matrix
    assert tiled >= 4 * n * 64  # its own output, at least


def test_the_backward_pass_of_the_tiled_version_keeps_only_output_and_lse():
    n = 512
    q, k, v = (torch.randn(n, 32, requires_grad=True) for _ in range(3))
    assert peak_extra_bytes(flash_attention, q, k, v, 64, 64).retained == 4 * n * 32 + 4 * n
    assert peak_extra_bytes(lambda: scaled_dot_product_attention(q, k, v)[0]).retained >= 4 * n * n


def test_the_same_call_measures_the_same_bytes():
    q, k, v = (torch.randn(1, 2, 300, 16) for _ in range(3))
    first = peak_extra_bytes(flash_forward, q, k, v, 32, 32, True).peak
    assert all(peak_extra_bytes(flash_forward, q, k, v, 32, 32, True).peak == first for _ in range(2))


def test_the_profiler_log_is_silenced_and_stderr_restored(capfd):
    peak_extra_bytes(lambda: torch.empty(10))
    os.write(2, b"still here\n")
    err = capfd.readouterr().err
    assert "still here" in err
    assert "profiler_start" not in err and "USDT" not in err
    print("python's stderr works", file=sys.stderr)
    assert "python's stderr works" in capfd.readouterr().err


def test_an_exception_inside_propagates_and_restores_stderr(capfd):
    with pytest.raises(ZeroDivisionError):
        peak_extra_bytes(lambda: 1 / 0)
    os.write(2, b"after the error\n")
    assert "after the error" in capfd.readouterr().err


def test_other_devices_are_refused():
    with pytest.raises(ValueError, match="CPU or CUDA"):
        peak_extra_bytes(lambda: None, device="meta")


@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device")
def test_cuda_peak_counts_one_allocation():  # pragma: no cover (no GPU on the course's machine)
    measured = peak_extra_bytes(lambda: torch.empty(1000, 1000, device="cuda"), device="cuda")
    assert measured.peak >= 4 * 1000 * 1000


def test_best_time_returns_the_shortest_of_several_calls():
    calls = []
    seconds = best_time(lambda x, y=0: calls.append(x + y), 2, y=3, repeats=4, warmup=2)
    assert seconds >= 0 and calls == [5] * 6
    with pytest.raises(ValueError, match="repeats"):
        best_time(lambda: None, repeats=0)


@pytest.mark.parametrize(
    "n, text", [(0, "0 B"), (1023, "1023 B"), (1024, "1 KiB"), (1536, "1.5 KiB"), (64 * 2**20, "64 MiB"), (3 * 2**30, "3 GiB")]
)
def test_format_bytes(n, text):
    assert format_bytes(n) == text


def test_the_profilers_cycle_warning_of_a_cuda_build_is_silenced(monkeypatch, recwarn):
    """A CUDA build's profiler warns that it "clears events at the end of each cycle" (issue 32): no cell may show it."""
    import warnings

    import torch.profiler.profiler as profiler_module

    prepare = profiler_module._KinetoProfile.prepare_trace

    def prepare_as_on_a_cuda_build(self):
        warnings.warn(
            "Warning: Profiler clears events at the end of each cycle. Only events from the current cycle will be "
            "reported. To keep events across cycles, set acc_events=True.",
            UserWarning,
            stacklevel=2,
        )
        return prepare(self)

    monkeypatch.setattr(profiler_module._KinetoProfile, "prepare_trace", prepare_as_on_a_cuda_build)
    with warnings.catch_warnings():
        warnings.simplefilter("always")
        assert peak_extra_bytes(lambda: torch.empty(100)).peak == 400
    assert [str(w.message) for w in recwarn] == []
    warnings.warn("a warning of the caller's own still shows", UserWarning, stacklevel=1)
    assert len(recwarn) == 1


def test_sdpa_times_times_each_backend_and_names_a_refusal():
    from torch.nn.attention import SDPBackend

    q = torch.randn(1, 1, 64, 16)
    times = sdpa_times(q, q, q, {"MATH": SDPBackend.MATH, "FLASH": SDPBackend.FLASH_ATTENTION}, repeats=1)
    assert set(times) == {"MATH", "FLASH"} and all(t is not None and t >= 0 for t in times.values())
    # the CPU has no memory-efficient kernel: a refusal is None, and its warnings stay out of the output
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert sdpa_times(q, q, q, {"EFFICIENT": SDPBackend.EFFICIENT_ATTENTION}, repeats=1) == {"EFFICIENT": None}


def test_sweep_and_best_time_are_short_in_a_smoke_run(monkeypatch):
    assert sweep([512, 1024, 2048]) == [512, 1024, 2048]
    monkeypatch.setenv("COURSE_SMOKE_TEST", "1")
    assert sweep([512, 1024, 2048]) == [512]
    assert sweep([2048], [256]) == [256]
    calls = []
    best_time(lambda: calls.append(1), repeats=5, warmup=2)
    assert calls == [1]
    with pytest.raises(ValueError, match="at least one size"):
        sweep([])
