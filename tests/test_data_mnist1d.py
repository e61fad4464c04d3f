"""MNIST-1D: the cached file matches its checksum, is regenerated when missing, and a corrupted one is named."""

from __future__ import annotations

import shutil

import numpy as np
import pytest

from helpers.data import DataError
from helpers.data.mnist1d import MNIST1D_PATH, MNIST1D_SHA256, MNIST1D_SHAPES, load_mnist1d, mnist1d_checksum


def test_cached_file_matches_checksum_and_shapes():
    data = load_mnist1d(as_tensors=False)
    assert {k: v.shape for k, v in data.items()} == MNIST1D_SHAPES
    assert mnist1d_checksum(data) == MNIST1D_SHA256
    assert data["x_train"].dtype == np.float32 and data["y_train"].dtype == np.int64
    assert sorted(np.unique(data["y_train"]).tolist()) == list(range(10))


def test_tensors():
    data = load_mnist1d()
    assert tuple(data["x_test"].shape) == (1000, 40)
    assert str(data["y_test"].dtype) == "torch.int64"


def test_missing_file_is_regenerated(tmp_path):
    path = tmp_path / "sub" / "mnist1d.npz"
    data = load_mnist1d(path, as_tensors=False)
    assert path.is_file()
    assert mnist1d_checksum(data) == MNIST1D_SHA256
    assert not list(path.parent.glob("*.tmp.npz"))  # the temporary file was renamed, not left behind


def test_corrupted_file_raises_a_clear_error(tmp_path):
    path = tmp_path / "mnist1d.npz"
    path.write_bytes(b"not a zip file at all")
    with pytest.raises(DataError, match="corrupted or unreadable.*delete"):
        load_mnist1d(path)


def test_changed_values_fail_the_checksum(tmp_path):
    data = load_mnist1d(as_tensors=False)
    data["x_train"] = data["x_train"].copy()
    data["x_train"][0, 0] += 1.0
    path = tmp_path / "mnist1d.npz"
    np.savez_compressed(path, **data)
    with pytest.raises(DataError, match="checksum.*delete"):
        load_mnist1d(path)


def test_wrong_shape_is_named(tmp_path):
    data = load_mnist1d(as_tensors=False)
    data["x_test"] = data["x_test"][:10]
    path = tmp_path / "mnist1d.npz"
    np.savez_compressed(path, **data)
    with pytest.raises(DataError, match="x_test has shape"):
        load_mnist1d(path)


def test_default_path_is_under_data(tmp_path):
    assert MNIST1D_PATH.parent.name == "data"
    shutil.copy(MNIST1D_PATH, tmp_path / "copy.npz")
    assert load_mnist1d(tmp_path / "copy.npz", as_tensors=False)["y_test"].shape == (1000,)


def test_random_roll_rolls_each_signal_circularly_within_max_shift():
    import torch

    from helpers.data import random_roll

    signals = torch.arange(60.0).reshape(6, 10)  # (6, 10): row i holds 10i .. 10i + 9
    rolled = random_roll(signals, 3, torch.Generator().manual_seed(0))  # (6, 10)
    assert rolled.shape == signals.shape
    for row, out in zip(signals, rolled, strict=True):
        shifts = [k for k in range(-3, 4) if torch.equal(torch.roll(row, k), out)]
        assert len(shifts) == 1  # a circular roll by one shift in [-3, 3]
    again = random_roll(signals, 3, torch.Generator().manual_seed(0))
    assert torch.equal(rolled, again)  # the generator decides
    assert torch.equal(random_roll(signals, 0), signals)
    many = random_roll(signals.repeat(50, 1), 3, torch.Generator().manual_seed(1))  # (300, 10)
    first = many[:, 0] - signals.repeat(50, 1)[:, 0]  # the first sample moved by -shift (mod 10)
    assert {int(v) % 10 for v in first} == {0, 1, 2, 3, 7, 8, 9}  # every shift in [-3, 3] occurs
    with pytest.raises(ValueError, match="max_shift"):
        random_roll(signals, -1)
