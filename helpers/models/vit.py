"""Models of notebook 08: the Vision Transformer (and its small CNN baseline)."""

from __future__ import annotations

__all__: list[str] = []
