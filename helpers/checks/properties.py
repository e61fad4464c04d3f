"""Checks of notebook 03 (softmax temperature, properties of attention): the weight constructions."""

from __future__ import annotations

__all__: list[str] = []
