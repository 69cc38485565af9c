"""Shared-memory race detection for the SIMT emulator: who touched each element since a barrier.

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


__all__ = ["RaceTracker"]
