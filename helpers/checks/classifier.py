"""Checks of notebook 07: patch embedding, the classifier's forward pass, one training step."""

from __future__ import annotations

__all__: list[str] = []
