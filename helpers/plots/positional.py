"""Figures of notebooks 04-05 (multi-head attention, positional encoding, layer norm)."""

from __future__ import annotations

__all__: list[str] = []
