"""Arrays whose data starts on a cache line.

numpy's allocator aligns to 16 bytes only, so every 64-byte (AVX-512) access to
such an array straddles two cache lines and is split in two. A compiled model's
arrays (``ember.graph.executor``) and the arrays a tuning candidate is timed on
(``ember.tune_worker``) are allocated here, so a kernel is tuned on the memory it
will run on.
"""

from __future__ import annotations

from typing import Any

import numpy as np

CACHE_LINE = 64  # bytes: one AVX-512 vector


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
