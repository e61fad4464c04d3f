"""Printing tensors for a reader: rounded values, without ``dtype=`` or ``grad_fn=`` (notebooks 04-06).

``show_values(label, value)`` prints ``label`` and the values of a tensor (any device, with or without grad) or an
array, rounded to 4 decimals: a vector on the label's line, a matrix on the lines below it. Booleans print as
``True``/``False``, integers as integers; ``-0.0000`` prints as ``0.0000``.
"""

from __future__ import annotations

import numpy as np

from helpers.plots.core import to_numpy

__all__ = ["show_values", "rounded"]


def rounded(value: object, decimals: int = 4) -> str:
    """The values of a tensor or array as text, floats with ``decimals`` decimals (fixed), in numpy's layout."""
    array = to_numpy(value)
    if array.dtype.kind == "f":
        array = np.round(array.astype(float), decimals) + 0.0  # + 0.0 turns -0.0 into 0.0
        return np.array2string(array, precision=decimals, floatmode="fixed", suppress_small=True, max_line_width=120)
    if array.dtype.kind in "biu":
        return np.array2string(array, max_line_width=120)
    raise TypeError(f"show_values prints numbers or booleans, got an array of dtype {array.dtype}")


def show_values(label: str, value: object, decimals: int = 4) -> None:
    """Print ``label`` and the rounded values of ``value``: a scalar or vector on one line, a matrix below the label.

    ``value`` is a tensor (any device, with or without grad), a numpy array or a list of numbers.
    """
    text = rounded(value, decimals)
    if np.ndim(to_numpy(value)) <= 1:
        print(f"{label} {text}")
    else:
        print(label)
        print(text)
