"""Models of notebook 07: the MNIST-1D transformer classifier and its MLP, CNN and GRU baselines."""

from __future__ import annotations

__all__: list[str] = []
