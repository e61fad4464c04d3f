"""Notebook 12: measure what a computation costs, its peak memory and its time.

``peak_extra_bytes(fn, *args)`` runs ``fn(*args)`` once and returns how far the memory held in tensors rose above
what was held before the call, at its highest point, measured by the allocator, not estimated:

- on CPU, with ``torch.profiler`` (``profile_memory=True``): every allocation and every release of PyTorch's CPU
  allocator during the call is an event with its size in bytes (positive when allocated, negative when freed); the
  running sum of the events, in time order, is the memory the call holds at each moment, and its maximum is the peak.
  It counts exactly what PyTorch allocates (tensors, and the scratch space of its kernels), byte for byte, and the
  same calls give the same events, so the number is deterministic on one machine and one thread count (a fused
  kernel's scratch space is per thread: more threads, more scratch). It does not count memory a library allocates
  on its own (the packing buffers of a BLAS or of oneDNN) nor Python objects.
- on CUDA, with the caching allocator's own statistics: ``torch.cuda.max_memory_allocated()`` after
  ``reset_peak_memory_stats()``, minus what was allocated before.

``best_time(fn, *args, repeats=...)`` is the shortest CPU time of ``repeats`` calls after a warm-up: CPU time, so that
waiting for a core another program holds does not count, and the shortest, the call least disturbed otherwise.

``sdpa_times(q, k, v, backends)`` times ``F.scaled_dot_product_attention`` forced onto each of several backends, on
the inputs' device (CUDA: synchronised wall time), and says which backend refuses the inputs (FlashAttention's CUDA
kernels take float16 and bfloat16 only).
"""

from __future__ import annotations

import contextlib
import os
import sys
import time
import warnings
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import torch

from helpers.runtime import smoke

__all__ = ["Peak", "peak_extra_bytes", "best_time", "sdpa_times", "sweep", "format_bytes"]


@dataclass
class Peak:
    """What ``peak_extra_bytes`` measured: the peak and what the call still held at its end (its result), in bytes."""

    peak: int
    retained: int
    result: Any = None


@contextlib.contextmanager
def _quiet_native_stderr() -> Iterator[None]:
    """Silence what C++ code writes to the process's stderr (file descriptor 2) while the block runs.

    The profiler's tracing library logs a line with the date when it starts and stops; in Jupyter that line would
    become a cell output. Python's own ``sys.stderr`` (warnings, tracebacks) is not file descriptor 2 in a kernel.
    """
    try:
        fd = sys.__stderr__.fileno() if sys.__stderr__ is not None else 2
        saved = os.dup(fd)
    except (OSError, ValueError, AttributeError):  # no real stderr (some embedded interpreters): nothing to silence
        yield
        return
    try:
        sys.__stderr__.flush()
    except (OSError, ValueError, AttributeError):
        pass
    with open(os.devnull, "w") as null:
        os.dup2(null.fileno(), fd)
    try:
        yield
    finally:
        os.dup2(saved, fd)
        os.close(saved)


def _start_ns(event: Any) -> int:
    """An event's start time in nanoseconds (older PyTorch versions give microseconds only)."""
    start = getattr(event, "start_ns", None)
    return int(start()) if start is not None else int(event.start_us()) * 1000


def _cpu_memory_events(fn: Callable[..., Any], args: tuple, kwargs: dict) -> tuple[Any, list[tuple[int, int]]]:
    """Run ``fn`` under the profiler; return its result and the CPU allocator's events ``(time_ns, bytes)``."""
    from torch.profiler import ProfilerActivity, profile

    with _quiet_native_stderr(), warnings.catch_warnings():
        # A CUDA build of PyTorch warns, once per process, that the profiler "clears events at the end of each cycle"
        # (it prepares a device trace too); each call here is one cycle read at once, so the warning says nothing.
        # Silenced here, where it comes from, so that no notebook cell writes it to stderr.
        warnings.filterwarnings("ignore", message=r".*[Pp]rofiler clears events", category=UserWarning)
        warnings.filterwarnings("ignore", category=UserWarning, module=r"torch\.(autograd\.)?profiler")
        with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
            result = fn(*args, **kwargs)
    try:
        raw = prof.profiler.kineto_results.events()
    except AttributeError as err:  # pragma: no cover (a PyTorch without Kineto's results)
        raise RuntimeError("this PyTorch's profiler does not expose its memory events; peak_extra_bytes needs them") from err
    events = [
        (_start_ns(e), int(e.nbytes()))
        for e in raw
        if e.name() == "[memory]" and e.device_type() == torch.autograd.DeviceType.CPU
    ]
    events.sort(key=lambda event: event[0])  # stable: events of the same instant keep their recorded order
    return result, events


def peak_extra_bytes(fn: Callable[..., Any], *args: Any, device: str | torch.device = "cpu", **kwargs: Any) -> Peak:
    """Run ``fn(*args, **kwargs)`` once; return the peak memory it added (bytes) above what was held before.

    ``device`` says whose allocator to read: ``"cpu"`` (the profiler's allocation events) or a CUDA device (the
    caching allocator's peak statistics). ``Peak.retained`` is what was still held when ``fn`` returned (its result,
    typically), ``Peak.result`` the result itself.
    """
    device = torch.device(device)
    if device.type == "cuda":
        torch.cuda.synchronize(device)
        torch.cuda.reset_peak_memory_stats(device)
        before = torch.cuda.memory_allocated(device)
        result = fn(*args, **kwargs)
        torch.cuda.synchronize(device)
        peak = torch.cuda.max_memory_allocated(device) - before
        return Peak(peak=peak, retained=torch.cuda.memory_allocated(device) - before, result=result)
    if device.type != "cpu":
        raise ValueError(f"peak_extra_bytes measures CPU or CUDA memory, not {device.type}")
    result, events = _cpu_memory_events(fn, args, kwargs)
    current = peak = 0
    for _, nbytes in events:
        current += nbytes
        peak = max(peak, current)
    return Peak(peak=peak, retained=current, result=result)


def best_time(
    fn: Callable[..., Any],
    *args: Any,
    repeats: int = 5,
    warmup: int = 1,
    clock: Callable[[], float] = time.process_time,
    **kwargs: Any,
) -> float:
    """The shortest time of ``repeats`` calls of ``fn(*args, **kwargs)`` (seconds), after ``warmup`` calls not timed.

    The clock is this process's CPU time (``time.process_time``) by default: on a machine shared with other work,
    waiting for a CPU does not count, so one thread's computation measures the same on a busy machine as on an idle
    one (pass ``clock=time.perf_counter`` for wall-clock time).
    """
    if repeats < 1:
        raise ValueError(f"repeats must be at least 1, got {repeats}")
    repeats, warmup = smoke.capped(repeats, 1), smoke.capped(warmup, 0)  # a smoke run: one call, no warm-up
    for _ in range(warmup):
        fn(*args, **kwargs)
    best = float("inf")
    for _ in range(repeats):
        begin = clock()
        fn(*args, **kwargs)
        best = min(best, clock() - begin)
    return best


def sdpa_times(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    backends: dict[str, Any],
    causal: bool = True,
    repeats: int = 3,
) -> dict[str, float | None]:
    """Seconds per call of ``F.scaled_dot_product_attention(q, k, v, is_causal=causal)`` on each forced backend.

    ``backends`` maps a name to an ``SDPBackend`` (or a list of them). On the CPU the clock is this process's CPU
    time; on CUDA it is wall time around a synchronised call. A backend that refuses the inputs (its kernel does not
    take their dtype, say) gives None; the warnings PyTorch gives while refusing are kept out of the output.
    """
    from torch.nn.attention import sdpa_kernel

    cuda = q.device.type == "cuda"
    times: dict[str, float | None] = {}
    for name, backend in backends.items():

        def run(backend: Any = backend) -> None:
            with sdpa_kernel(backend):
                torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=causal)
            if cuda:
                torch.cuda.synchronize(q.device)

        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                times[name] = best_time(run, repeats=repeats, clock=time.perf_counter if cuda else time.process_time)
        except RuntimeError:  # "No available kernel": this backend does not take these inputs
            times[name] = None
    return times


def sweep(sizes: list[int], smoke_sizes: list[int] | None = None) -> list[int]:
    """The sizes a timing sweep measures: ``sizes``; in a smoke run (``helpers.runtime.smoke``), ``smoke_sizes``
    (default: the smallest of ``sizes``), since the numbers of a smoke run support no claim."""
    if not sizes:
        raise ValueError("sweep(sizes): give at least one size")
    return list(sizes) if not smoke.active() else list(smoke_sizes or [min(sizes)])


def format_bytes(n: int) -> str:
    """Bytes in binary units, exact where they divide: ``format_bytes(64 * 2**20) == "64 MiB"``, else one decimal."""
    for unit, size in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if abs(n) >= size:
            value = n / size
            return f"{value:.0f} {unit}" if n % size == 0 else f"{value:.1f} {unit}"
    return f"{n} B"
