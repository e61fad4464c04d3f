"""Figures of notebook 08 (Vision Transformer): patch grids, position-embedding similarity, attention overlays."""

from __future__ import annotations

__all__: list[str] = []
