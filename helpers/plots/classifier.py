"""Figures of notebooks 06-07 (blocks, the MNIST-1D classifier): signals, results bar charts."""

from __future__ import annotations

__all__: list[str] = []
