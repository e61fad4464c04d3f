"""MNIST-1D for notebook 07: generated offline with the mnist1d package, cached under data/ with a checksum.

MNIST-1D (Greydanus, 2020) holds 4,000 training and 1,000 test signals of
length 40 in 10 classes. ``load_mnist1d()`` reads ``data/mnist1d.npz``; when the
file is missing it regenerates it with ``mnist1d.data.make_dataset`` and the
package's default arguments (never its download path), which reproduces the
published data set. The arrays are checked against their shapes and a SHA-256
of their contents; a corrupted file raises ``DataError`` saying how to fix it.
"""

from __future__ import annotations

import hashlib
import os
import tempfile
import zipfile
from pathlib import Path

import numpy as np

from helpers.data.common import DataError
from helpers.runtime.session import DATA_DIR

__all__ = [
    "MNIST1D_PATH",
    "MNIST1D_SHA256",
    "MNIST1D_SHAPES",
    "load_mnist1d",
    "generate_mnist1d",
    "mnist1d_checksum",
    "random_roll",
    "random_transform",
]

#: Where the cached data set lives.
MNIST1D_PATH: Path = DATA_DIR / "mnist1d.npz"
#: Arrays and their shapes: signals are float32, labels int64.
MNIST1D_SHAPES: dict[str, tuple[int, ...]] = {
    "x_train": (4000, 40),
    "y_train": (4000,),
    "x_test": (1000, 40),
    "y_test": (1000,),
}
_DTYPES = {"x_train": np.float32, "y_train": np.int64, "x_test": np.float32, "y_test": np.int64}
#: SHA-256 of the arrays' contents (names, dtypes, shapes and bytes in a fixed order),
#: not of the .npz file, whose zip headers hold a time stamp.
MNIST1D_SHA256 = "496b88aa2dac9088b429dc17dfd8598509b68d542d31bcfb2504b31492519f73"


def mnist1d_checksum(arrays: dict[str, np.ndarray]) -> str:
    """SHA-256 over the four arrays' names, dtypes, shapes and bytes, in a fixed order."""
    digest = hashlib.sha256()
    for name in MNIST1D_SHAPES:
        a = np.ascontiguousarray(arrays[name])
        digest.update(f"{name}:{a.dtype.str}:{a.shape};".encode())
        digest.update(a.tobytes())
    return digest.hexdigest()


def generate_mnist1d() -> dict[str, np.ndarray]:
    """Generate MNIST-1D offline with ``make_dataset(get_dataset_args())`` (a few seconds)."""
    try:
        from mnist1d.data import get_dataset_args, make_dataset
    except ImportError as err:  # pragma: no cover - the package is in requirements.txt
        raise DataError(
            f"generating MNIST-1D needs the `mnist1d` package ({err}); install it with `pip install mnist1d`"
        ) from None
    data = make_dataset(get_dataset_args())
    return {
        "x_train": data["x"].astype(np.float32),
        "y_train": data["y"].astype(np.int64),
        "x_test": data["x_test"].astype(np.float32),
        "y_test": data["y_test"].astype(np.int64),
    }


def _write_atomically(arrays: dict[str, np.ndarray], path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=path.stem + ".", suffix=".tmp.npz", dir=path.parent)
    os.close(fd)
    try:
        np.savez_compressed(tmp, **arrays)
        os.chmod(tmp, 0o644)  # mkstemp makes the file private; a data file is world-readable
        os.replace(tmp, path)  # atomic: a reader sees the old file or the new one, never half of one
    finally:
        if os.path.exists(tmp):
            os.remove(tmp)


def _read(path: Path) -> dict[str, np.ndarray]:
    fix = f"delete {path} and run again: it is regenerated offline in a few seconds"
    try:
        with np.load(path, allow_pickle=False) as npz:
            arrays = {name: npz[name] for name in npz.files}
    except (OSError, ValueError, EOFError, zipfile.BadZipFile, KeyError) as err:
        raise DataError(f"MNIST-1D cache {path} is corrupted or unreadable ({type(err).__name__}: {err}); {fix}") from None
    missing = [name for name in MNIST1D_SHAPES if name not in arrays]
    if missing:
        raise DataError(f"MNIST-1D cache {path} lacks the arrays {missing}; {fix}")
    for name, shape in MNIST1D_SHAPES.items():
        a = arrays[name]
        if a.shape != shape or a.dtype != _DTYPES[name]:
            raise DataError(
                f"MNIST-1D cache {path}: {name} has shape {a.shape} and dtype {a.dtype}, expected {shape} and {np.dtype(_DTYPES[name])}; {fix}"
            )
    checksum = mnist1d_checksum(arrays)
    if checksum != MNIST1D_SHA256:
        raise DataError(
            f"MNIST-1D cache {path} does not match its checksum (SHA-256 {checksum[:12]}..., expected {MNIST1D_SHA256[:12]}...): the file is corrupted; {fix}"
        )
    return {name: arrays[name] for name in MNIST1D_SHAPES}


def load_mnist1d(path: str | Path | None = None, as_tensors: bool = True) -> dict:
    """Load MNIST-1D as ``{"x_train", "y_train", "x_test", "y_test"}``.

    x_train ``(4000, 40)`` float32, y_train ``(4000,)`` int64, x_test ``(1000, 40)``,
    y_test ``(1000,)``; torch tensors (or numpy arrays with ``as_tensors=False``).
    ``path`` defaults to ``data/mnist1d.npz``. A missing file is regenerated
    (written atomically); a corrupted one raises ``DataError``.
    """
    path = Path(path) if path is not None else MNIST1D_PATH
    if not path.exists():
        arrays = generate_mnist1d()
        checksum = mnist1d_checksum(arrays)
        if checksum != MNIST1D_SHA256:
            raise DataError(
                f"regenerated MNIST-1D does not match the expected checksum (SHA-256 {checksum[:12]}..., expected "
                f"{MNIST1D_SHA256[:12]}...): check the mnist1d package version (the course pins it in requirements.txt)"
            )
        _write_atomically(arrays, path)
    arrays = _read(path)
    if not as_tensors:
        return arrays
    import torch

    return {name: torch.from_numpy(a) for name, a in arrays.items()}


def random_roll(signals, max_shift: int, generator=None):
    """Roll each signal by a random whole number of samples in ``[-max_shift, max_shift]``, circularly.

    signals ``(batch, length)`` -> the same shape: row ``i`` becomes ``torch.roll(signals[i], k_i)``,
    samples leaving one end coming back at the other, as MNIST-1D's generator translates its padded
    templates. One shift per signal, drawn from ``generator`` (a ``torch.Generator`` on the CPU).
    A data augmentation for ``helpers.training.fit(..., augment=...)``.
    """
    import torch

    if max_shift < 0:
        raise ValueError(f"max_shift must be >= 0, got {max_shift}")
    batch, length = signals.shape
    shifts = torch.randint(-max_shift, max_shift + 1, (batch, 1), generator=generator).to(signals.device)  # (batch, 1)
    index = (torch.arange(length, device=signals.device) - shifts) % length  # (batch, length)
    return signals.gather(1, index)  # (batch, length)


def random_transform(signals, generator=None, max_shift: int = 8, max_scale: float = 0.2, max_ramp: float = 1.0):
    """Three of the changes MNIST-1D's generator makes, drawn anew for every signal: notebook 07's augmentation.

    signals ``(batch, length)`` -> the same shape, each signal in turn

    1. rolled circularly by a whole number of samples in ``[-max_shift, max_shift]`` (``random_roll``; the
       generator translates its templates circularly);
    2. multiplied by a factor in ``[1 - max_scale, 1 + max_scale]`` (the generator scales);
    3. added a straight line whose value rises or falls by at most ``max_ramp`` from the first sample to the
       last (the generator shears).

    Every draw comes from ``generator`` (a ``torch.Generator`` on the CPU), so a seeded run is reproducible.
    The signature fits ``helpers.training.fit(..., augment=random_transform)``.
    """
    import torch

    signals = random_roll(signals, max_shift, generator)  # (batch, length)
    batch, length = signals.shape
    factor = 1 + max_scale * (2 * torch.rand(batch, 1, generator=generator) - 1)  # (batch, 1)
    signals = signals * factor.to(signals.device)  # (batch, length)
    slope = max_ramp * (2 * torch.rand(batch, 1, generator=generator) - 1)  # (batch, 1)
    line = torch.linspace(-0.5, 0.5, length, device=signals.device)  # (length,)
    return signals + slope.to(signals.device) * line  # (batch, length)
