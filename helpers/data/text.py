"""Notebook 11's text: Python's own documentation topics, one fixed copy under data/, checked by SHA-256.

The corpus is the text of ``pydoc_data.topics`` (the help pages that ``help("if")``
prints), shipped inside CPython's standard library under the PSF licence. The
standard library's copy changes between Python versions, so the course trains
on one fixed copy, made from Python 3.11.7 by ``generate_pydoc_text()`` (the
topics in sorted order of their names, joined as they are) and committed as
``data/pydoc_topics.txt.gz``. ``load_pydoc_text()`` decompresses it and checks
the SHA-256 of the text's UTF-8 bytes (not of the .gz file, whose bytes depend on
the zlib version); a missing or corrupted file raises ``DataError``.

``CharVocab`` maps characters to integer ids and back; ``split_text`` cuts the
ids into a training and a validation part (the validation part is the end of
the text, never seen in training).
"""

from __future__ import annotations

import gzip
import hashlib
import zlib
from pathlib import Path

import torch
from torch import Tensor

from helpers.data.common import DataError
from helpers.runtime.session import DATA_DIR

__all__ = [
    "PYDOC_TEXT_PATH",
    "PYDOC_TEXT_SHA256",
    "PYDOC_TEXT_CHARS",
    "CharVocab",
    "generate_pydoc_text",
    "load_pydoc_text",
    "split_text",
    "write_pydoc_text",
]

#: The committed corpus (gzip of the UTF-8 text).
PYDOC_TEXT_PATH: Path = DATA_DIR / "pydoc_topics.txt.gz"
#: SHA-256 of the text's UTF-8 bytes.
PYDOC_TEXT_SHA256 = "37d06970fc926e60c16dff401e441b84752446a36b6b64516c229fdec77e992c"
#: Its length in characters.
PYDOC_TEXT_CHARS = 464_970


def generate_pydoc_text() -> str:
    """The topics of this interpreter's ``pydoc_data.topics``, sorted by name and joined.

    Only Python 3.11.7 gives the committed copy byte for byte (another version
    ships other text, and ``load_pydoc_text`` would reject it by its checksum).
    """
    from pydoc_data.topics import topics

    return "".join(topics[name] for name in sorted(topics))


def write_pydoc_text(text: str, path: str | Path | None = None) -> Path:
    """Write ``text`` gzip-compressed (no time stamp, so the same text gives the same file)."""
    path = Path(path) if path is not None else PYDOC_TEXT_PATH
    with open(path, "wb") as raw, gzip.GzipFile(fileobj=raw, mode="wb", mtime=0, compresslevel=9, filename="") as f:
        f.write(text.encode("utf-8"))
    return path


def load_pydoc_text(path: str | Path | None = None) -> str:
    """Read the committed corpus (``data/pydoc_topics.txt.gz``) and check its SHA-256; returns the text."""
    path = Path(path) if path is not None else PYDOC_TEXT_PATH
    fix = "restore it with `git checkout -- data/pydoc_topics.txt.gz`"
    if not path.is_file():
        raise DataError(f"the text corpus {path} is missing; {fix}")
    try:
        with gzip.open(path, "rb") as f:
            raw = f.read()
        text = raw.decode("utf-8")
    except (OSError, EOFError, zlib.error, UnicodeDecodeError) as err:
        raise DataError(f"the text corpus {path} is corrupted or unreadable ({type(err).__name__}: {err}); {fix}") from None
    digest = hashlib.sha256(raw).hexdigest()
    if digest != PYDOC_TEXT_SHA256:
        raise DataError(
            f"the text corpus {path} does not match its checksum (SHA-256 {digest[:12]}..., expected "
            f"{PYDOC_TEXT_SHA256[:12]}...): the file is corrupted or was regenerated from another Python version; {fix}"
        )
    return text


class CharVocab:
    """A character-level vocabulary: every distinct character of a text, in sorted order.

    ``encode(text) -> LongTensor (len(text),)``, ``decode(ids) -> str``. A character
    the vocabulary lacks raises ``ValueError`` naming it.
    """

    def __init__(self, text: str) -> None:
        if not text:
            raise ValueError("CharVocab needs a non-empty text to collect its characters from")
        self.chars: list[str] = sorted(set(text))
        self.index: dict[str, int] = {c: i for i, c in enumerate(self.chars)}

    def __len__(self) -> int:
        return len(self.chars)

    def encode(self, text: str) -> Tensor:
        """Character ids of ``text``: ``(len(text),)`` int64."""
        missing = sorted(set(text) - self.index.keys())
        if missing:
            raise ValueError(f"characters not in the vocabulary: {missing[:5]!r}")
        return torch.tensor([self.index[c] for c in text], dtype=torch.long)

    def decode(self, ids: Tensor | list[int]) -> str:
        """The text of a 1-D sequence of ids."""
        values = ids.tolist() if isinstance(ids, Tensor) else list(ids)
        if values and isinstance(values[0], list):
            raise ValueError("decode takes one sequence of ids (1-D); decode each row of a batch separately")
        bad = [i for i in values if not 0 <= i < len(self.chars)]
        if bad:
            raise ValueError(f"ids outside the vocabulary of {len(self.chars)} characters: {bad[:5]}")
        return "".join(self.chars[i] for i in values)


def split_text(ids: Tensor, val_fraction: float = 0.1) -> tuple[Tensor, Tensor]:
    """The first ``1 - val_fraction`` of ``ids`` for training, the rest (the end of the text) for validation."""
    if not 0.0 < val_fraction < 1.0:
        raise ValueError(f"val_fraction must be strictly between 0 and 1, got {val_fraction}")
    cut = int(round(len(ids) * (1.0 - val_fraction)))
    return ids[:cut], ids[cut:]
