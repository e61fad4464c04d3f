"""Checks of notebook 12 (attention at scale: online softmax, tiled attention, sliding windows, linear attention)."""

from __future__ import annotations

__all__: list[str] = []
