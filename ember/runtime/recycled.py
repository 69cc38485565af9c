"""Arrays handed to a caller whose memory comes back for reuse once the caller drops them.

A compiled model returns a large output in a new array that its kernels wrote (see
:mod:`ember.graph.workspace`), so a run copies nothing out. A new array each run is a new
allocation, though: glibc serves one of more than 128 KiB with ``mmap`` and returns it
with ``munmap``, so every run paid for the mapping, a page fault per 4 KiB page the
kernel then wrote, and the unmapping's TLB shootdown on the other cores. The BERT
encoder's 128 KiB output took 80-95 us a run that way (its whole run: 4.4 ms), a GPT-2
decode step's present keys and values tens of megabytes.

:class:`Recycler` hands out arrays over blocks it allocated once. Each array's memory is
a ctypes view of a block, and a ``weakref.finalize`` on that view gives the block back
when the last array or view over it is gone, however the caller sliced or kept it: a
block is never handed out while anything can still read it. At most ``keep`` blocks of
each size wait for reuse; the rest are freed as usual.
"""

from __future__ import annotations

import ctypes
import math
import threading
import weakref
from typing import Any

import numpy as np

from ember.runtime.aligned import aligned_empty, data_address


class Recycler:
    """New arrays (:meth:`array`) over reused cache-line-aligned blocks (see the notes)."""

    def __init__(self, keep: int = 4) -> None:
        self.keep = keep
        self._free: dict[int, list[tuple[np.ndarray, int]]] = {}  # by size: blocks, addresses
        self._lock = threading.Lock()  # finalizers run on whichever thread drops an array

    def array(self, shape: tuple[int, ...], dtype: Any) -> tuple[np.ndarray, int]:
        """An uninitialized array of ``shape`` and ``dtype`` the caller may keep, and the
        address of its data."""
        dt = np.dtype(dtype)
        nbytes = max(math.prod(shape) * dt.itemsize, 1)
        with self._lock:
            waiting = self._free.get(nbytes)
            block, address = waiting.pop() if waiting else (None, 0)
        if block is None:
            block = aligned_empty(nbytes)
            address = data_address(block)
        view = (ctypes.c_char * nbytes).from_buffer(block)
        done = weakref.finalize(view, self._give_back, nbytes, block, address)
        done.atexit = False
        arr = np.frombuffer(view, dtype=dt, count=nbytes // dt.itemsize).reshape(shape)
        return arr, address

    def waiting(self) -> int:
        """Blocks waiting for reuse (for tests)."""
        with self._lock:
            return sum(len(v) for v in self._free.values())

    def _give_back(self, nbytes: int, block: np.ndarray, address: int) -> None:
        with self._lock:
            waiting = self._free.setdefault(nbytes, [])
            if len(waiting) < self.keep:
                waiting.append((block, address))
