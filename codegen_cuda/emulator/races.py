"""Race detection for the SIMT emulator: who touched each shared or global element, and when.

The emulator runs the threads of a block in lock-step, so it sees every shared
access of every thread between two barriers. A :class:`RaceTracker` keeps, per
element of one ``shared`` allocation (one column per block of the chunk being
run), the thread that last wrote it and the smallest and largest thread that
read it since the last barrier, plus the access site of each (an index into the
kernel's table of printed statements). A read of an element another thread
wrote is a RAW race; a write to an element another thread wrote (WAW) or read
(WAR) is a race too. A barrier forgets everything for the blocks that reach it,
except the asynchronous copies still in flight: touching an element one of them
will write before it lands is a race whatever barriers lie between.
Threads are chunk lanes; the caller turns a lane into (block, thread) for the
message through ``describe``.

Global memory has no barrier that orders the whole launch: a
:class:`GlobalRaceTracker` keeps, per element of one global buffer the kernel
writes, the last writer and the range of readers over the whole launch (every
chunk of blocks), as launch-wide thread ids. Another thread's write before a read
or a write, or another thread's read before a write, is a race unless both
threads are in one block and a barrier of that block lies between the two
accesses (``__syncthreads`` orders the block's global accesses too): each access
records its block's barrier count, its *epoch*. Buffers the kernel only reads
need no tracker, so their loads cost nothing extra.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

from ember.errors import RaceError

_NONE = -1
_NO_MIN = np.iinfo(np.int32).max


class RaceTracker:
    """Access history of one shared buffer in one chunk of blocks, since the last barrier."""

    def __init__(
        self,
        name: str,
        size: int,
        nblocks: int,
        sites: Sequence[str],
        describe: Callable[[int], str],
    ) -> None:
        self.name = name
        self.nblocks = nblocks
        self.sites = sites
        self.describe = describe
        n = size * nblocks  # element e of block b is flat entry e * nblocks + b
        self.writer = np.full(n, _NONE, dtype=np.int32)
        self.writer_site = np.zeros(n, dtype=np.int32)
        self.reader_min = np.full(n, _NO_MIN, dtype=np.int32)
        self.reader_max = np.full(n, _NONE, dtype=np.int32)
        self.reader_site = np.zeros(n, dtype=np.int32)
        # asynchronous copies in flight to each element (not forgotten at barriers), and
        # the lane and site of the latest one
        self.pending = np.zeros(n, dtype=np.int32)
        self.pending_lane = np.zeros(n, dtype=np.int32)
        self.pending_site = np.zeros(n, dtype=np.int32)

    def reset(self, blocks: np.ndarray | None) -> None:
        """A barrier: forget the history of ``blocks`` (a bool mask over the chunk; None: all)."""
        if blocks is None:
            self.writer.fill(_NONE)
            self.reader_min.fill(_NO_MIN)
            self.reader_max.fill(_NONE)
            return
        cols = np.flatnonzero(blocks)
        for arr, value in (
            (self.writer, _NONE),
            (self.reader_min, _NO_MIN),
            (self.reader_max, _NONE),
        ):
            arr.reshape(-1, self.nblocks)[:, cols] = value

    def on_issue(self, elems: np.ndarray, lanes: np.ndarray, site: int) -> None:
        """``lanes[i]`` starts an asynchronous copy to ``elems[i]``: a write from now until it
        lands, so it must not overtake another thread's read or meet another write."""
        self.on_write(elems, lanes, site)
        np.add.at(self.pending, elems, 1)
        self.pending_lane[elems] = lanes
        self.pending_site[elems] = site

    def on_land(self, elems: np.ndarray, lanes: np.ndarray, site: int) -> None:
        """The copies to ``elems`` land (their group was waited for): written now."""
        np.subtract.at(self.pending, elems, 1)
        self.on_write(elems, lanes, site)

    def _check_pending(self, elems: np.ndarray, lanes: np.ndarray, site: int, verb: str) -> None:
        bad = self.pending[elems] > 0
        if bad.any():
            i = int(np.argmax(bad))
            e = int(elems[i])
            raise RaceError(
                f"shared-memory race (premature access) on '{self.name}[{e // self.nblocks}]': "
                f"{self.describe(int(lanes[i]))} {verb} it in `{self.sites[site]}` while the "
                f"asynchronous copy to it issued by {self.describe(int(self.pending_lane[e]))} in "
                f"`{self.sites[int(self.pending_site[e])]}` has not landed; wait for its group "
                "(cp.async.wait_group) and then a barrier before touching it"
            )

    def on_read(self, elems: np.ndarray, lanes: np.ndarray, site: int) -> None:
        """``lanes[i]`` reads flat entry ``elems[i]``; raises on a read after another's write."""
        self._check_pending(elems, lanes, site, "reads")
        w = self.writer[elems]
        bad = (w != _NONE) & (w != lanes)
        if bad.any():
            i = int(np.argmax(bad))
            self._raise("read-after-write", elems[i], int(lanes[i]), site, int(w[i]), "wrote")
        np.minimum.at(self.reader_min, elems, lanes)
        np.maximum.at(self.reader_max, elems, lanes)
        self.reader_site[elems] = site

    def on_write(self, elems: np.ndarray, lanes: np.ndarray, site: int) -> None:
        """``lanes[i]`` writes flat entry ``elems[i]``; raises on WAW and WAR races."""
        self._check_pending(elems, lanes, site, "writes")
        w = self.writer[elems]
        bad = (w != _NONE) & (w != lanes)
        if bad.any():
            i = int(np.argmax(bad))
            self._raise("write-after-write", elems[i], int(lanes[i]), site, int(w[i]), "wrote")
        rmin, rmax = self.reader_min[elems], self.reader_max[elems]
        bad = (rmax != _NONE) & ((rmin != lanes) | (rmax != lanes))
        if bad.any():
            i = int(np.argmax(bad))
            other = int(rmin[i]) if rmin[i] != lanes[i] else int(rmax[i])
            self._raise("write-after-read", elems[i], int(lanes[i]), site, other, "read")
        self.writer[elems] = lanes
        self.writer_site[elems] = site
        # two lanes of this very store on one element: only one of them is left standing
        bad = self.writer[elems] != lanes
        if bad.any():
            i = int(np.argmax(bad))
            other = int(self.writer[elems[i]])
            self._raise("write-after-write", elems[i], int(lanes[i]), site, other, "wrote")

    def _raise(self, kind: str, elem: int, lane: int, site: int, other: int, verb: str) -> None:
        index = int(elem) // self.nblocks  # the lanes name the block
        other_site = self.writer_site[elem] if verb == "wrote" else self.reader_site[elem]
        action = "reads" if kind == "read-after-write" else "writes"
        raise RaceError(
            f"shared-memory race ({kind}) on '{self.name}[{index}]': "
            f"{self.describe(lane)} {action} it in `{self.sites[site]}` after "
            f"{self.describe(other)} {verb} it in `{self.sites[int(other_site)]}` "
            "with no barrier in between; add a barrier (__syncthreads) between the two accesses"
        )


def _same(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Elementwise: the same stored value (NaN counts as equal to NaN)."""
    same = a == b
    if a.dtype.kind in "fc":
        same |= np.isnan(a) & np.isnan(b)
    return same


class GlobalRaceTracker:
    """Access history of one global buffer over a whole launch (all chunks of blocks).

    Threads are launch-wide ids ``block * T + thread`` (``T`` threads per block, blocks
    in linear order), so a block's threads are consecutive ids; ``describe`` names one.
    """

    def __init__(
        self,
        name: str,
        size: int,
        threads: int,
        sites: Sequence[str],
        describe: Callable[[int], str],
    ) -> None:
        self.name = name
        self.threads = threads
        self.sites = sites
        self.describe = describe
        self.writer = np.full(size, _NONE, dtype=np.int64)
        self.writer_epoch = np.zeros(size, dtype=np.int32)
        self.writer_site = np.zeros(size, dtype=np.int32)
        self.reader_min = np.full(size, np.iinfo(np.int64).max, dtype=np.int64)
        self.reader_max = np.full(size, _NONE, dtype=np.int64)
        self.reader_epoch = np.zeros(size, dtype=np.int32)
        self.reader_site = np.zeros(size, dtype=np.int32)

    def _ordered(
        self, other: np.ndarray, other_epoch: np.ndarray, tid: np.ndarray, epoch: np.ndarray
    ) -> np.ndarray:
        """Whether an earlier access by ``other`` is ordered before ``tid``'s: same block, with a
        barrier between."""
        return (other // self.threads == tid // self.threads) & (other_epoch < epoch)

    def on_read(self, elems: np.ndarray, tids: np.ndarray, epochs: np.ndarray, site: int) -> None:
        """Threads ``tids`` (in blocks at barrier count ``epochs``) read ``elems``."""
        w = self.writer[elems]
        bad = (w != _NONE) & (w != tids)
        if bad.any():
            bad &= ~self._ordered(w, self.writer_epoch[elems], tids, epochs)
            if bad.any():
                i = int(np.argmax(bad))
                self._raise(
                    "read-after-write", int(elems[i]), int(tids[i]), site, int(w[i]), "wrote"
                )
        np.minimum.at(self.reader_min, elems, tids)
        np.maximum.at(self.reader_max, elems, tids)
        # all readers in one block make the same epoch sequence; readers in several blocks
        # race with any later writer whatever the epoch says
        self.reader_epoch[elems] = epochs
        self.reader_site[elems] = site

    def on_write(
        self,
        elems: np.ndarray,
        tids: np.ndarray,
        epochs: np.ndarray,
        site: int,
        data: np.ndarray,
        values: np.ndarray,
    ) -> None:
        """Threads ``tids`` write ``values`` to ``elems`` of ``data`` (not written yet); raises
        on write-after-write and write-after-read.

        A write of the value the element already holds, another thread's, is let pass: the
        result is the same whichever thread wins (the redundant store of a broadcast value,
        which TVM's schedules emit too); a read between the two is still a race.
        """
        w = self.writer[elems]
        bad = (w != _NONE) & (w != tids)
        if bad.any():
            bad &= ~self._ordered(w, self.writer_epoch[elems], tids, epochs)
            bad &= ~_same(data[elems], values)
            if bad.any():
                i = int(np.argmax(bad))
                self._raise(
                    "write-after-write", int(elems[i]), int(tids[i]), site, int(w[i]), "wrote"
                )
        rmin, rmax = self.reader_min[elems], self.reader_max[elems]
        bad = (rmax != _NONE) & ((rmin != tids) | (rmax != tids))
        if bad.any():
            repoch = self.reader_epoch[elems]
            bad &= ~(
                self._ordered(rmin, repoch, tids, epochs)
                & self._ordered(rmax, repoch, tids, epochs)
            )
            if bad.any():
                i = int(np.argmax(bad))
                other = int(rmin[i]) if rmin[i] != tids[i] else int(rmax[i])
                self._raise("write-after-read", int(elems[i]), int(tids[i]), site, other, "read")
        self.writer[elems] = tids
        self.writer_epoch[elems] = epochs
        self.writer_site[elems] = site
        # several threads of this very store on one element must store one value
        if (self.writer[elems] != tids).any():
            order = np.argsort(elems, kind="stable")
            e, v = elems[order], values[order]
            bad = (e[1:] == e[:-1]) & ~_same(v[1:], v[:-1])
            if bad.any():
                i = int(np.argmax(bad))
                self._raise(
                    "write-after-write",
                    int(e[i]),
                    int(tids[order[i + 1]]),
                    site,
                    int(tids[order[i]]),
                    "wrote",
                )

    def _raise(self, kind: str, elem: int, tid: int, site: int, other: int, verb: str) -> None:
        other_site = self.writer_site[elem] if verb == "wrote" else self.reader_site[elem]
        action = "reads" if kind == "read-after-write" else "writes"
        raise RaceError(
            f"global-memory race ({kind}) on '{self.name}[{elem}]': "
            f"{self.describe(tid)} {action} it in `{self.sites[site]}` after "
            f"{self.describe(other)} {verb} it in `{self.sites[int(other_site)]}` in the same "
            "launch; nothing orders threads of different blocks, and threads of one block only "
            "at a barrier: give each element one writer (bind a reduction axis to threads only "
            "as a cross-thread reduction), or split the work into separate kernels"
        )


__all__ = ["GlobalRaceTracker", "RaceTracker"]
