"""Checks of notebook 05: sinusoidal positional encoding and layer norm."""

from __future__ import annotations

__all__: list[str] = []
