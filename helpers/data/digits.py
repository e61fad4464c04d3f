"""scikit-learn's 8x8 handwritten digits for notebook 08: the stratified split, scaled to [0, 1].

The 1,797 images ship inside scikit-learn (``sklearn/datasets/data/digits.csv.gz``),
so nothing is downloaded. Each image is 8 x 8 grey levels 0..16 (4 x 4 blocks of
a 32 x 32 bitmap, counted), labels 0..9, about 180 per class.

``load_digits_split()`` returns the stratified 80/20 split with
``random_state=0`` (1,437 training and 360 test images), pixels divided by 16,
images as float tensors ``(N, 1, 8, 8)`` and labels as int64 ``(N,)``.
"""

from __future__ import annotations

import hashlib
from typing import NamedTuple

import numpy as np
import torch
from torch import Tensor

from helpers.data.common import DataError

__all__ = ["DigitsSplit", "load_digits_arrays", "load_digits_split", "random_shift", "mixup", "DIGITS_SHA256"]

#: SHA-256 of the pixel values (uint8, row-major (1797, 64)) followed by the labels (uint8, (1797,)).
DIGITS_SHA256 = "87ff0c9e40dc7e2c0e34e7257799c2e3f3aec1a016363bb11cad869ec428a826"
_N_SAMPLES, _N_PIXELS, _MAX_LEVEL = 1797, 64, 16


class DigitsSplit(NamedTuple):
    """The split: images ``(N, 1, 8, 8)`` float32 in [0, 1], labels ``(N,)`` int64."""

    x_train: Tensor
    y_train: Tensor
    x_test: Tensor
    y_test: Tensor


def _fingerprint(pixels: np.ndarray, labels: np.ndarray) -> str:
    digest = hashlib.sha256()
    digest.update(np.ascontiguousarray(pixels, dtype=np.uint8).tobytes())
    digest.update(np.ascontiguousarray(labels, dtype=np.uint8).tobytes())
    return digest.hexdigest()


def load_digits_arrays(verify: bool = True) -> tuple[np.ndarray, np.ndarray]:
    """The raw data set: pixels ``(1797, 64)`` integers 0..16 (float64) and labels ``(1797,)`` int64.

    Raises ``DataError`` when scikit-learn is missing or its shipped file cannot
    be read or does not hold the expected data (shape, value range, checksum).
    """
    try:
        from sklearn.datasets import load_digits
    except ImportError as err:
        raise DataError(
            f"the digits ship with scikit-learn, which cannot be imported ({err}); "
            "install the course's environment (`python3 course.py install` or `pip install scikit-learn`)"
        ) from None
    try:
        bunch = load_digits()
        pixels, labels = np.asarray(bunch.data), np.asarray(bunch.target)
    except Exception as err:  # a missing or corrupted digits.csv.gz inside scikit-learn
        raise DataError(
            f"scikit-learn's shipped digits file could not be read ({type(err).__name__}: {err}); "
            "reinstall scikit-learn (`pip install --force-reinstall scikit-learn`)"
        ) from None
    if pixels.shape != (_N_SAMPLES, _N_PIXELS) or labels.shape != (_N_SAMPLES,):
        raise DataError(
            f"scikit-learn's digits have shape {pixels.shape} and labels {labels.shape}; "
            f"expected ({_N_SAMPLES}, {_N_PIXELS}) and ({_N_SAMPLES},): the shipped file is not the expected one"
        )
    if pixels.min() < 0 or pixels.max() > _MAX_LEVEL or not np.array_equal(pixels, np.round(pixels)):
        raise DataError(f"scikit-learn's digits should hold integer grey levels 0..{_MAX_LEVEL}; the shipped file is corrupted")
    if set(np.unique(labels).tolist()) != set(range(10)):
        raise DataError(f"scikit-learn's digits should have labels 0..9, found {sorted(set(labels.tolist()))}")
    if verify and _fingerprint(pixels, labels) != DIGITS_SHA256:
        raise DataError(
            "scikit-learn's digits do not match the checksum the course was written with "
            "(sklearn/datasets/data/digits.csv.gz changed or is corrupted); reinstall scikit-learn"
        )
    return pixels.astype(np.float64), labels.astype(np.int64)


def load_digits_split(test_size: float = 0.2, random_state: int = 0) -> DigitsSplit:
    """Stratified split of the digits, scaled to [0, 1], as tensors.

    Returns ``DigitsSplit(x_train, y_train, x_test, y_test)``: images
    ``(N, 1, 8, 8)`` float32, labels ``(N,)`` int64; with the defaults 1,437
    training and 360 test images, every class in the same proportion in both.
    """
    from sklearn.model_selection import train_test_split

    pixels, labels = load_digits_arrays()
    x_train, x_test, y_train, y_test = train_test_split(
        pixels / _MAX_LEVEL, labels, test_size=test_size, stratify=labels, random_state=random_state
    )

    def images(x: np.ndarray) -> Tensor:
        return torch.tensor(x, dtype=torch.float32).reshape(-1, 1, 8, 8)

    return DigitsSplit(images(x_train), torch.tensor(y_train), images(x_test), torch.tensor(y_test))


def random_shift(images: Tensor, max_shift: int = 1, generator: torch.Generator | None = None) -> Tensor:
    """Shift each image by a random whole number of pixels in ``[-max_shift, max_shift]`` in each direction.

    images ``(B, C, H, W)`` -> same shape; pixels shifted in from outside are 0
    (the background). One offset per image, drawn from ``generator``.
    """
    batch, _, height, width = images.shape
    padded = torch.nn.functional.pad(images, (max_shift,) * 4)  # (B, C, H + 2s, W + 2s)
    offsets = torch.randint(0, 2 * max_shift + 1, (batch, 2), generator=generator).to(images.device)  # (B, 2)
    rows = offsets[:, 0, None] + torch.arange(height, device=images.device)  # (B, H)
    cols = offsets[:, 1, None] + torch.arange(width, device=images.device)  # (B, W)
    batch_idx = torch.arange(batch, device=images.device)[:, None, None]  # (B, 1, 1)
    shifted = padded.permute(0, 2, 3, 1)[batch_idx, rows[:, :, None], cols[:, None, :]]  # (B, H, W, C)
    return shifted.permute(0, 3, 1, 2).contiguous()  # (B, C, H, W)


def mixup(images: Tensor, alpha: float, rng: np.random.Generator) -> tuple[Tensor, Tensor, float]:
    """Blend every image of a batch with another one of the same batch: mixup (Zhang et al., 2018).

    Draws a weight ``lam`` from Beta(alpha, alpha) and a permutation ``perm`` of the batch, both from
    ``rng`` (so a seeded run is reproducible), and returns ``(lam * images + (1 - lam) * images[perm],
    perm, lam)``: images ``(B, C, H, W)`` (any shape with the batch first) -> the same shape, perm ``(B,)``.
    Train on the blend with the same blend of the two losses,
    ``lam * CE(logits, y) + (1 - lam) * CE(logits, y[perm])``. Small ``alpha`` puts ``lam`` near 0 or 1
    (mostly one image, a little of another); ``alpha = 1`` draws it uniformly.
    """
    if alpha <= 0:
        raise ValueError(f"mixup needs alpha > 0, got {alpha}")
    lam = float(rng.beta(alpha, alpha))
    perm = torch.from_numpy(rng.permutation(len(images))).to(images.device)
    return lam * images + (1.0 - lam) * images[perm], perm, lam
