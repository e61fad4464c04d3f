"""MNIST-1D for notebook 07: generated offline with the mnist1d package, cached under data/ with a checksum."""

from __future__ import annotations

__all__: list[str] = []
