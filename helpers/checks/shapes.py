"""Checks of notebook 01 (attention shapes): shape answers and parameter counts."""

from __future__ import annotations

__all__: list[str] = []
