"""Checks of notebook 13 (induction heads)."""

from __future__ import annotations

__all__: list[str] = []
