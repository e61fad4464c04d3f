"""Checks of notebook 14 (a transformer written by hand)."""

from __future__ import annotations

__all__: list[str] = []
