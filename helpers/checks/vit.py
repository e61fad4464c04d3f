"""Checks of notebook 08: patchify, the patch embedding, the ViT forward pass."""

from __future__ import annotations

__all__: list[str] = []
