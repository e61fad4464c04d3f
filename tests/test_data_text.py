"""The text corpus of notebook 11: the committed copy, its checksum, the vocabulary and the split."""

from __future__ import annotations

import gzip
import hashlib
import sys

import pytest
import torch

from helpers.data.common import DataError
from helpers.data.text import (
    PYDOC_TEXT_CHARS,
    PYDOC_TEXT_PATH,
    PYDOC_TEXT_SHA256,
    CharVocab,
    generate_pydoc_text,
    load_pydoc_text,
    split_text,
    write_pydoc_text,
)


def test_committed_text_loads_and_matches_its_checksum():
    text = load_pydoc_text()
    assert len(text) == PYDOC_TEXT_CHARS
    assert hashlib.sha256(text.encode("utf-8")).hexdigest() == PYDOC_TEXT_SHA256
    assert text.startswith('The "assert" statement')


@pytest.mark.skipif(sys.version_info[:3] != (3, 11, 7), reason="the committed copy was made from Python 3.11.7")
def test_generator_reproduces_the_committed_text(tmp_path):
    text = generate_pydoc_text()
    assert text == load_pydoc_text()
    path = write_pydoc_text(text, tmp_path / "copy.txt.gz")
    assert load_pydoc_text(path) == text


def test_missing_and_corrupted_files_raise_data_error(tmp_path):
    with pytest.raises(DataError, match="missing"):
        load_pydoc_text(tmp_path / "absent.txt.gz")
    broken = tmp_path / "broken.txt.gz"
    broken.write_bytes(PYDOC_TEXT_PATH.read_bytes()[:1000])
    with pytest.raises(DataError, match="corrupted"):
        load_pydoc_text(broken)
    other = tmp_path / "other.txt.gz"
    with gzip.open(other, "wb") as f:
        f.write(b"some other text")
    with pytest.raises(DataError, match="checksum"):
        load_pydoc_text(other)


def test_vocab_round_trip_and_errors():
    vocab = CharVocab("hello world")
    assert len(vocab) == 8 and vocab.chars[0] == " "
    ids = vocab.encode("hold")
    assert ids.dtype == torch.long and ids.shape == (4,)
    assert vocab.decode(ids) == "hold" and vocab.decode([0]) == " "
    with pytest.raises(ValueError, match="not in the vocabulary"):
        vocab.encode("xyz")
    with pytest.raises(ValueError, match="outside the vocabulary"):
        vocab.decode([99])
    with pytest.raises(ValueError, match="1-D"):
        vocab.decode(torch.zeros(2, 2, dtype=torch.long))
    with pytest.raises(ValueError, match="non-empty"):
        CharVocab("")


def test_split_keeps_the_end_for_validation():
    ids = torch.arange(100)
    train, val = split_text(ids, 0.1)
    assert train.shape == (90,) and val.shape == (10,) and val[0].item() == 90
    with pytest.raises(ValueError, match="between 0 and 1"):
        split_text(ids, 1.0)
