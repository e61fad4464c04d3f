"""Checks of notebook 06: encoder and decoder block forward passes."""

from __future__ import annotations

__all__: list[str] = []
