"""What every loader shares: the data folder, ``DataError``, checksums, fixtures."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

import torch
from torch import Tensor

from helpers.runtime.session import DATA_DIR

__all__ = ["DataError", "sha256_of", "load_fixture", "split_validation", "DATA_DIR"]


class DataError(RuntimeError):
    """A data file is missing, unreadable or does not match its checksum."""


def sha256_of(path: Path) -> str:
    """Hex SHA-256 of a file's bytes."""
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def load_fixture(name: str) -> dict[str, Any]:
    """Load ``data/fixtures/<name>.json`` (the small matrices of a worked example).

    Raises ``DataError`` naming the file when it is missing or not valid JSON.
    """
    path = DATA_DIR / "fixtures" / f"{name}.json"
    if not path.is_file():
        raise DataError(f"fixture {path} is missing: restore it with `git checkout -- {path.relative_to(DATA_DIR.parent)}`")
    try:
        return json.loads(path.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError) as err:
        raise DataError(f"fixture {path} is corrupted ({err}); restore it with git") from None


def split_validation(x: Tensor, y: Tensor, fraction: float = 0.2, seed: int = 0) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """Hold out a stratified validation split from the training data.

    ``x`` is ``(N, ...)`` and ``y`` ``(N,)`` integer class labels. Every class
    gives ``round(fraction * count)`` of its examples, chosen by a generator
    seeded with ``seed``, so the split is the same on every machine. Returns
    ``(x_train, y_train, x_val, y_val)``, each keeping the original order.
    Model selection reads the validation split; the test set stays untouched.
    """
    if not 0.0 < fraction < 1.0:
        raise ValueError(f"fraction must be strictly between 0 and 1, got {fraction}")
    if len(x) != len(y):
        raise ValueError(f"x has {len(x)} examples but y has {len(y)} labels")
    generator = torch.Generator().manual_seed(seed)
    is_val = torch.zeros(len(y), dtype=torch.bool)
    for label in torch.unique(y):
        members = torch.nonzero(y == label).flatten()  # (count,)
        take = round(fraction * len(members))
        chosen = members[torch.randperm(len(members), generator=generator)[:take]]
        is_val[chosen] = True
    return x[~is_val], y[~is_val], x[is_val], y[is_val]
