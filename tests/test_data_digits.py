"""helpers.data.digits: the stratified split of scikit-learn's digits, its checks, the shift augmentation."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from helpers.data import DataError
from helpers.data import digits as digits_module
from helpers.data.digits import load_digits_arrays, load_digits_split, random_shift


@pytest.fixture(scope="module")
def split():
    return load_digits_split()


def test_split_shapes_dtypes_and_range(split):
    assert split.x_train.shape == (1437, 1, 8, 8) and split.x_test.shape == (360, 1, 8, 8)
    assert split.y_train.shape == (1437,) and split.y_test.shape == (360,)
    assert split.x_train.dtype == torch.float32 and split.y_train.dtype == torch.int64
    for x in (split.x_train, split.x_test):
        assert x.min() == 0.0 and x.max() == 1.0
    # grey levels 0..16 divided by 16
    torch.testing.assert_close(split.x_train * 16, (split.x_train * 16).round(), atol=1e-5, rtol=0)


def test_split_is_stratified_and_reproducible(split):
    train_counts = torch.bincount(split.y_train, minlength=10).numpy()
    test_counts = torch.bincount(split.y_test, minlength=10).numpy()
    fraction = test_counts / (train_counts + test_counts)
    assert np.all(np.abs(fraction - 0.2) < 0.01), fraction
    again = load_digits_split()
    assert torch.equal(again.x_train, split.x_train) and torch.equal(again.y_test, split.y_test)


def test_split_matches_scikit_learn_directly(split):
    from sklearn.datasets import load_digits
    from sklearn.model_selection import train_test_split

    bunch = load_digits()
    _, x_test, _, y_test = train_test_split(bunch.data, bunch.target, test_size=0.2, stratify=bunch.target, random_state=0)
    np.testing.assert_allclose(split.x_test.reshape(360, 64).numpy(), x_test / 16, atol=1e-7)
    np.testing.assert_array_equal(split.y_test.numpy(), y_test)


def test_arrays_pass_their_checksum():
    pixels, labels = load_digits_arrays()
    assert pixels.shape == (1797, 64) and labels.shape == (1797,)
    assert digits_module._fingerprint(pixels, labels) == digits_module.DIGITS_SHA256


class _Bunch:
    def __init__(self, data, target):
        self.data, self.target = data, target


@pytest.mark.parametrize(
    "bunch, phrase",
    [
        (lambda: (_ for _ in ()).throw(FileNotFoundError("digits.csv.gz")), "could not be read"),
        (lambda: _Bunch(np.zeros((100, 64)), np.zeros(100)), "shape"),
        (lambda: _Bunch(np.full((1797, 64), 20.0), np.arange(1797) % 10), "grey levels"),
        (lambda: _Bunch(np.zeros((1797, 64)), np.zeros(1797)), "labels 0..9"),
        (lambda: _Bunch(np.zeros((1797, 64)), np.arange(1797) % 10), "checksum"),
    ],
)
def test_broken_data_raises_a_clear_error(monkeypatch, bunch, phrase):
    import sklearn.datasets

    monkeypatch.setattr(sklearn.datasets, "load_digits", bunch)
    with pytest.raises(DataError, match=phrase):
        load_digits_split()


def test_random_shift_moves_whole_images_by_at_most_one_pixel():
    images = torch.zeros(5, 1, 8, 8)
    images[:, 0, 3:5, 3:5] = torch.arange(1.0, 6.0)[:, None, None]  # a blob away from the border
    shifted = random_shift(images, 1, torch.Generator().manual_seed(0))
    assert shifted.shape == images.shape
    torch.testing.assert_close(shifted.sum((1, 2, 3)), images.sum((1, 2, 3)))  # nothing falls off
    for original, moved in zip(images, shifted, strict=True):
        candidates = [torch.roll(original, (dr, dc), (1, 2)) for dr in (-1, 0, 1) for dc in (-1, 0, 1)]
        assert any(torch.equal(moved, c) for c in candidates)
    again = random_shift(images, 1, torch.Generator().manual_seed(0))
    assert torch.equal(shifted, again)


def test_random_shift_by_zero_is_the_identity():
    images = torch.rand(3, 2, 4, 6)
    assert torch.equal(random_shift(images, 0), images)
