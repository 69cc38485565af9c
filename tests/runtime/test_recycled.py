"""Arrays over reused blocks (``ember/runtime/recycled.py``): a block comes back only when
nothing can read it any more, however the caller kept a piece of its array."""

from __future__ import annotations

import gc

import numpy as np

from ember.runtime.aligned import CACHE_LINE
from ember.runtime.recycled import Recycler
from tests.concurrency import in_threads


def test_an_array_is_aligned_writable_and_shaped() -> None:
    arr, address = Recycler().array((3, 5, 7), "float32")
    assert arr.shape == (3, 5, 7) and arr.dtype == np.float32 and arr.flags.c_contiguous
    assert arr.flags.writeable and address == arr.ctypes.data and address % CACHE_LINE == 0
    arr[...] = 2.0
    assert float(arr.sum()) == 2.0 * 105


def test_a_dropped_array_gives_its_block_back() -> None:
    r = Recycler()
    arr, address = r.array((64, 64), "float32")
    del arr
    assert r.waiting() == 1
    again, same = r.array((64, 64), "float32")
    assert same == address and r.waiting() == 0
    other, elsewhere = r.array((64, 65), "float32")  # another size: a block of its own
    assert elsewhere != address


def test_a_view_kept_holds_the_block() -> None:
    r = Recycler()
    arr, address = r.array((8, 100), "float64")
    arr[...] = np.arange(800).reshape(8, 100)
    row = arr[3]  # the caller keeps a piece and drops the array
    flat = row.reshape(4, 25)
    del arr, row
    gc.collect()
    assert r.waiting() == 0
    new, other = r.array((8, 100), "float64")
    new[...] = -1.0
    assert other != address
    np.testing.assert_array_equal(flat.ravel(), np.arange(300, 400))
    del flat
    assert r.waiting() == 1


def test_no_more_than_keep_blocks_wait() -> None:
    r = Recycler(keep=2)
    arrays = [r.array((16,), "int64")[0] for _ in range(5)]
    del arrays
    assert r.waiting() == 2


def test_arrays_dropped_on_other_threads() -> None:
    r = Recycler(keep=4)

    def work(seed: int) -> None:
        for k in range(200):
            arr, _ = r.array((32, 32), "float32")
            arr[...] = seed * 1000 + k
            assert np.all(arr == seed * 1000 + k)  # no other thread wrote it meanwhile

    in_threads(work, 4)
    assert 1 <= r.waiting() <= 4
