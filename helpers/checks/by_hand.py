"""Checks of notebook 02 (attention by hand): projections, scores with and without scaling."""

from __future__ import annotations

__all__: list[str] = []
