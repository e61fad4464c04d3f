"""Figures of notebooks 02-03 (attention by hand, softmax temperature): bipartite attention diagrams and more."""

from __future__ import annotations

__all__: list[str] = []
