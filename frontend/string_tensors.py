"""String tensors: values known when the model compiles, never held by a kernel.

ONNX has a ``string`` element type (RegexFullMatch, StringSplit, LabelEncoder's keys, an
Equal of two labels). A kernel holds numbers, so Ember keeps every string tensor a
compile-time constant: a param whose array is numpy ``object`` dtype holding Python
``str`` (what ``onnx.numpy_helper.to_array`` gives), of graph dtype :data:`STRING`. A
string graph input is a *value input* (``frontend/onnx_import/value_inputs.py``): the
model compiles once per distinct value of it, keyed on the strings' contents
(:func:`content_key`), so the ops that read strings compute at import time on the host
(``onnx_import/ops_strings.py``, ``ops_label_encoder.py``) and a string output is
returned as the constant it is. This module holds what the importer and the executor
share about them: the dtype's name, its numpy form, and the check of a user's array.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from ember.errors import ArgumentError

STRING = "string"
"""The graph dtype of a string tensor (ONNX's name for the element type)."""

STRING_NUMPY = np.dtype(object)
"""The numpy dtype of a string tensor's array: ``object``, each element a ``str``."""


def is_string_array(array: np.ndarray) -> bool:
    """Whether a numpy array holds strings (``object`` or fixed-width unicode)."""
    return array.dtype.kind in "OU"


def string_array(items: Sequence[str], shape: Sequence[int] | None = None) -> np.ndarray:
    """An ``object`` array of ``items`` (``str``), shaped ``shape`` (1-D by default).
    Filled element by element: ``np.array`` of a list would try to split the strings'
    characters into an axis if the items were sequences."""
    out = np.empty(len(items), dtype=STRING_NUMPY)
    out[:] = list(items)
    return out if shape is None else out.reshape(tuple(shape))


def as_strings(array: Any) -> np.ndarray:
    """``array`` (fixed-width unicode or ``object`` of ``str``) as an ``object`` array of
    ``str``, the one form string tensors have in a graph."""
    a = np.asarray(array)
    if a.dtype == STRING_NUMPY:
        return a
    return a.astype(STRING_NUMPY)


def string_input(name: str, value: Any) -> np.ndarray:
    """A user's value for string input ``name`` as an ``object`` array of ``str``, or an
    ArgumentError naming the input: numbers, bytes and ``None`` are refused (ONNX strings
    are UTF-8 text; onnxruntime takes ``str`` only, as a ``str_`` or ``object`` array)."""
    try:
        arr = np.asarray(value)
    except Exception as e:  # noqa: BLE001 - a ragged list, an object whose __array__ fails
        raise ArgumentError(f"input '{name}' is not an array: {type(e).__name__}: {e}") from e
    if not is_string_array(arr):
        raise ArgumentError(
            f"input '{name}' must be a string tensor (an array of str, dtype object or "
            f"str_), got {arr.dtype}"
        )
    arr = as_strings(arr)
    for s in arr.reshape(-1):
        if not isinstance(s, str):
            raise ArgumentError(
                f"input '{name}' must hold only str elements, got a {type(s).__name__} ({s!r})"
            )
        try:
            s.encode("utf-8")
        except UnicodeEncodeError as e:  # a lone surrogate: no ONNX string can hold it
            raise ArgumentError(f"input '{name}' holds a string that is not UTF-8: {e}") from e
    return arr


def content_key(array: np.ndarray) -> bytes:
    """Bytes that identify an array's values: its raw bytes, or for a string array its
    strings (an ``object`` array's raw bytes are pointers, the same text at another
    address would compile again)."""
    if array.dtype != STRING_NUMPY:
        return np.ascontiguousarray(array).tobytes()
    return repr(array.reshape(-1).tolist()).encode("utf-8", "backslashreplace")
