"""Notebook 04's memory measurement: how far one call raises the process's resident memory.

``resident_peak_mib(fn, *args)`` runs ``fn(*args)`` once and returns the rise of the process's resident set at its
highest point during the call, in MiB, read from the operating system (Linux: ``VmHWM`` and ``VmRSS`` of
``/proc/self/status``, the high-water mark reset before the call through ``/proc/self/clear_refs``). Memory the
allocator freed earlier is first handed back to the system (glibc's ``malloc_trim``), so that a call reusing it shows
up as new memory. It changes no allocator setting. Where the operating system does not offer this (not Linux, a
container that forbids writing ``clear_refs``, another C library), it returns ``None``: the caller then has no
memory figure, and nothing fails.

For a computation that allocates large tensors (the ``(n, n)`` matrices of naive attention) the rise is those
tensors, to within a page or two; small scratch buffers reused from memory the process already holds do not show.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import sys
from collections.abc import Callable
from typing import Any

__all__ = ["resident_peak_mib"]


def _status_bytes(field: str) -> int:
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith(field):
                return int(line.split()[1]) * 1024  # the kernel writes kB
    raise KeyError(field)


def _trim() -> None:
    """Hand the memory freed by earlier calls back to the system (glibc only; elsewhere nothing happens)."""
    name = ctypes.util.find_library("c") or "libc.so.6"
    libc = ctypes.CDLL(name)
    trim = getattr(libc, "malloc_trim", None)
    if trim is not None:
        trim(0)


def resident_peak_mib(fn: Callable[..., Any], *args: Any, **kwargs: Any) -> float | None:
    """The rise of the resident memory while ``fn(*args, **kwargs)`` runs, in MiB; ``None`` where it cannot be read.

    The result of ``fn`` is dropped before the measurement ends. An exception raised by ``fn`` itself propagates.
    """
    if not sys.platform.startswith("linux"):
        return None
    try:
        _trim()
        with open("/proc/self/clear_refs", "w") as clear_refs:
            clear_refs.write("5")  # reset the high-water mark VmHWM to the current resident size
        before = _status_bytes("VmRSS:")
    except (OSError, KeyError, ValueError, AttributeError):
        return None
    result = fn(*args, **kwargs)
    del result
    try:
        return max(_status_bytes("VmHWM:") - before, 0) / 2**20
    except (OSError, KeyError, ValueError):
        return None
