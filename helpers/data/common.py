"""What every loader shares: the data folder, ``DataError``, checksums, fixtures."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

from helpers import DATA_DIR

__all__ = ["DataError", "sha256_of", "load_fixture", "DATA_DIR"]


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
