"""scikit-learn's 8x8 handwritten digits for notebook 08: the stratified split, scaled to [0, 1]."""

from __future__ import annotations

__all__: list[str] = []
