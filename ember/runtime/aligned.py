"""Arrays whose data starts on a cache line.

numpy's allocator aligns to 16 bytes only, so every 64-byte (AVX-512) access to
such an array straddles two cache lines and is split in two. A compiled model's
arrays (``ember.graph.executor``) and the arrays a tuning candidate is timed on
(``ember.tune_worker``) are allocated here, so a kernel is tuned on the memory it
will run on.
"""

from __future__ import annotations

import ctypes
from typing import Any

import numpy as np

CACHE_LINE = 64  # bytes: one AVX-512 vector


def _data_field() -> int | None:
    """Offset of the data pointer in a numpy array object: right after the object's
    header (``PyArrayObject_fields``, numpy's ABI), checked here on a probe array; None
    where it is not there (another interpreter's header), and :func:`data_address` asks
    ``ctypes`` instead."""
    probe = np.empty(3)
    offset = object.__basicsize__
    found = ctypes.c_void_p.from_address(id(probe) + offset).value
    return offset if found == probe.ctypes.data else None


_DATA_FIELD = _data_field()


def data_address(a: np.ndarray) -> int:
    """The address of ``a``'s data. A run hands its caller's arrays to the kernels by
    address, just after a model's kernels have pushed Python's objects out of the
    caches: there ``a.ctypes.data``, which builds a ctypes helper object, took 23 us
    on a Zen 3 guest, reading the field 5 us (warm: 3.2 and 0.8 us)."""
    if _DATA_FIELD is None:
        return int(a.ctypes.data)
    return int(ctypes.c_void_p.from_address(id(a) + _DATA_FIELD).value or 0)


def aligned_empty(nbytes: int, dtype: Any = np.uint8, shape: Any = None) -> np.ndarray:
    """An uninitialized array of ``nbytes`` bytes (viewed as ``dtype`` and ``shape``)
    whose data starts on a cache line."""
    raw = np.empty(nbytes + CACHE_LINE, dtype=np.uint8)
    start = -raw.ctypes.data % CACHE_LINE
    flat = raw[start : start + nbytes].view(dtype)
    return flat if shape is None else flat.reshape(shape)


def aligned_array(shape: Any, dtype: Any) -> np.ndarray:
    """An uninitialized cache-line-aligned array of ``shape`` and ``dtype``."""
    shape = tuple(int(d) for d in shape)
    nbytes = int(np.prod(shape, dtype=np.int64)) * np.dtype(dtype).itemsize
    return aligned_empty(nbytes, dtype, shape)


def aligned_copy(a: np.ndarray, force: bool = False) -> np.ndarray:
    """``a`` as a C-contiguous array that starts on a cache line (``a`` itself if so,
    unless ``force``: then always a new array)."""
    if not force and a.flags.c_contiguous and a.ctypes.data % CACHE_LINE == 0:
        return a
    out = aligned_empty(a.nbytes, a.dtype, a.shape)
    out[...] = a
    return out
