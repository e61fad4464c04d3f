"""Checks of notebook 04 (multi-head attention walkthrough) beyond check_multi_head_attention."""

from __future__ import annotations

__all__: list[str] = []
