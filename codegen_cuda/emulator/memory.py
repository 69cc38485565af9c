"""Memory of the SIMT emulator: global, shared and local storage, with checked gathers and scatters.

Every access is vectorised over the lanes of a chunk (see :mod:`.grid`): an
index is a scalar (the same for every thread), a ``(lanes,)`` array (one per
thread) or, for a vector access through a ``Ramp`` index, a ``(1, n)`` or
``(lanes, n)`` array. Storage lives in the environment slot of the buffer's
``data`` pointer:

- ``global``: the caller's array, flattened; all threads see the same elements.
- ``shared``: a ``(size, blocks)`` array, one column per block of the chunk.
- ``local``: a ``(size, lanes)`` array, one column per thread.

Only the threads of the active mask (environment slot 0) access memory: an
index that is out of bounds for an active thread raises :class:`ArgumentError`
naming the buffer, the thread and the statement; inactive threads' indices are
ignored. Shared accesses report to the allocation's :class:`RaceTracker`, accesses
to a global buffer the kernel writes to its :class:`GlobalRaceTracker`.
bfloat16 is stored as ``uint16`` bits and computed in float32, as in the
reference interpreter.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from ember.codegen_cuda.emulator.grid import CHUNK, MASK, Chunk
from ember.codegen_cuda.emulator.races import GlobalRaceTracker, RaceTracker
from ember.errors import ArgumentError, InternalError
from ember.tir import dtype as dt
from ember.tir.bf16 import bf16_to_float32, float32_to_bf16
from ember.tir.interp.memory import fresh_storage
from ember.tir.interp.ops import wrap_fn

Env = list


def _as_value(raw: Any, bf16: bool, wrap: Callable[[Any], Any] | None = None) -> Any:
    if wrap is not None:
        return wrap(raw)  # int4/uint4: as the printed CUDA wraps what it loads
    if not bf16:
        return raw
    out = bf16_to_float32(raw)
    return out if out.ndim else out[()]


def _lane_mask(mask: np.ndarray, vector: bool) -> np.ndarray:
    return mask[:, None] if vector else mask


class Storage:
    """One buffer's memory; ``load``/``store`` take the index, the value and the environment."""

    scope = "global"

    def __init__(self, name: str, dtype: str, size: int, sites: Sequence[str]) -> None:
        self.name = name
        self.elem_bytes = dt.bytes_of(dtype)
        self.bf16 = dt.element_of(dtype) == "bfloat16"
        self.wrap = wrap_fn(dtype)
        self.size = size
        self.sites = sites

    # -- bounds ---------------------------------------------------------------------
    def checked(self, idx: Any, env: Env, what: str, site: int) -> Any:
        """``idx`` with inactive threads' out-of-bounds entries set to 0; raises for active ones."""
        if np.ndim(idx) == 0:
            if 0 <= idx < self.size:
                return idx
            mask = env[MASK]
            lane = 0 if mask is None else int(np.argmax(mask))
            self._raise_oob(env[CHUNK], what, site, lane, int(idx))
        bad = (idx < 0) | (idx >= self.size)
        if not bad.any():
            return idx
        mask = env[MASK]
        active = bad if mask is None else bad & _lane_mask(mask, idx.ndim == 2)
        if active.any():
            pos = tuple(np.argwhere(active)[0])
            value = int(np.broadcast_to(idx, active.shape)[pos])
            self._raise_oob(env[CHUNK], what, site, int(pos[0]), value)
        return np.where(bad, 0, idx)

    def profile(self, env: Env, kind: str, idx: Any, site: int) -> None:
        """Count the access for ``profile=True`` runs (global and shared memory only)."""
        profiler = env[CHUNK].profiler
        if profiler is not None and self.scope in ("global", "shared"):
            profiler.record(self.scope, kind, idx, self.elem_bytes, env[CHUNK], env[MASK], site)

    def lane_shape(self, env: Env, *xs: Any) -> tuple[int, ...]:
        """``(lanes,)`` for scalar accesses, ``(lanes, n)`` when an operand is an n-lane vector."""
        lanes = env[CHUNK].lanes
        width = max((np.shape(x)[1] for x in xs if np.ndim(x) == 2), default=0)
        return (lanes, width) if width else (lanes,)

    def _raise_oob(self, chunk: Chunk, what: str, site: int, lane: int, index: int) -> None:
        raise ArgumentError(
            f"out-of-bounds {what} of {self.scope} buffer '{self.name}' at index {index} "
            f"(it has {self.size} elements) by {chunk.describe(lane)} in `{self.sites[site]}`"
        )


class GlobalStorage(Storage):
    """A kernel argument; ``tracker`` (for a buffer the kernel writes, races checked) sees
    every access of every thread of the launch."""

    def __init__(
        self,
        name: str,
        dtype: str,
        data: np.ndarray,
        sites: Sequence[str],
        tracker: GlobalRaceTracker | None = None,
    ) -> None:
        super().__init__(name, dtype, data.size, sites)
        self.data = data
        self.tracker = tracker

    def load(self, idx: Any, env: Env, site: int) -> Any:
        idx = self.checked(idx, env, "load", site)
        self.profile(env, "load", idx, site)
        if self.tracker is not None:
            self.tracker.on_read(*_thread_accesses(idx, env, self.lane_shape(env, idx)), site)
        return _as_value(self.data[idx], self.bf16, self.wrap)

    def store(self, idx: Any, value: Any, env: Env, site: int) -> None:
        idx = self.checked(idx, env, "store", site)
        self.profile(env, "store", idx, site)
        if self.bf16:
            value = float32_to_bf16(value)
        mask = env[MASK]
        if self.tracker is None and mask is None and np.shape(value) in ((), np.shape(idx)):
            self.data[idx] = value
            return
        full = self.lane_shape(env, idx, value)
        i, v = np.broadcast_to(idx, full), np.broadcast_to(value, full)
        if mask is not None:
            m = np.broadcast_to(_lane_mask(mask, len(full) == 2), full)
            i, v = i[m], v[m]
        if self.tracker is not None:
            elems, tids, epochs = _thread_accesses(idx, env, full)
            new = np.asarray(v).astype(self.data.dtype, copy=False).reshape(-1)
            self.tracker.on_write(elems, tids, epochs, site, self.data, new)
        self.data[i] = v


def _thread_accesses(
    idx: Any, env: Env, full: tuple[int, ...]
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Elements, launch-wide thread ids and block epochs of the active threads' accesses
    (``full``: the access's per-lane shape, as :meth:`Storage.lane_shape` gives it)."""
    chunk: Chunk = env[CHUNK]
    tids = chunk.thread_ids[:, None] if len(full) == 2 else chunk.thread_ids
    epochs = chunk.epoch[chunk.lane_block]
    epochs = epochs[:, None] if len(full) == 2 else epochs
    e, t, p = (np.broadcast_to(x, full) for x in (np.asarray(idx, dtype=np.int64), tids, epochs))
    mask = env[MASK]
    if mask is None:
        return e.reshape(-1), t.reshape(-1), p.reshape(-1)
    m = np.broadcast_to(_lane_mask(mask, len(full) == 2), full)
    return e[m], t[m], p[m]


class BlockStorage(Storage):
    """``shared`` (a column per block) or ``local`` (a column per thread) memory."""

    def __init__(
        self, name: str, dtype: str, size: int, scope: str, chunk: Chunk, sites: Sequence[str]
    ) -> None:
        super().__init__(name, dtype, size, sites)
        self.scope = scope
        self.shared = scope == "shared"
        ncols = chunk.nblocks if self.shared else chunk.lanes
        self.cols = chunk.lane_block if self.shared else chunk.lane_ids
        self.ncols = ncols
        self.data = fresh_storage(dtype, (size, ncols))
        self.tracker: RaceTracker | None = None
        if self.shared and chunk.check_races:
            self.tracker = RaceTracker(name, size, ncols, sites, chunk.describe)

    def load(self, idx: Any, env: Env, site: int, kind: str = "load") -> Any:
        """``kind``: how the profile counts it ("load", or "ldmatrix" for its row reads)."""
        idx = self.checked(idx, env, "load", site)
        self.profile(env, kind, idx, site)
        vector = np.ndim(idx) == 2
        if self.tracker is not None:
            elems, lanes = self._accesses(idx, env, vector)
            self.tracker.on_read(elems, lanes, site)
        if np.ndim(idx) == 0 and not self.shared:
            raw = self.data[idx].copy()
        elif self.ncols == 1:
            raw = self.data[idx, 0]
        else:
            raw = self.data[idx, self.cols[:, None] if vector else self.cols]
        return _as_value(raw, self.bf16, self.wrap)

    def store(self, idx: Any, value: Any, env: Env, site: int) -> None:
        idx = self.checked(idx, env, "store", site)
        if self.bf16:
            value = float32_to_bf16(value)
        self.profile(env, "store", idx, site)
        mask = env[MASK]
        vector = np.ndim(idx) == 2 or np.ndim(value) == 2
        if self.tracker is not None:
            elems, lanes = self._accesses(idx, env, vector)
            self.tracker.on_write(elems, lanes, site)
        if np.ndim(idx) == 0 and not self.shared and not vector:
            row = self.data[idx]
            if mask is None:
                row[...] = value
            else:
                np.copyto(row, value, where=mask, casting="unsafe")
            return
        full = self.lane_shape(env, idx, value)
        cols = self.cols[:, None] if len(full) == 2 else self.cols
        i, c, v = (np.broadcast_to(x, full) for x in (idx, cols, value))
        if mask is not None:
            m = np.broadcast_to(_lane_mask(mask, len(full) == 2), full)
            i, c, v = i[m], c[m], v[m]
        self.data[i, c] = v

    def issue_async(self, idx: Any, value: Any, env: Env, site: int) -> PendingCopy:
        """An asynchronous copy of ``value`` to ``idx``: checked and recorded now, written
        when its group lands (``PendingCopy.land``)."""
        if not self.shared:
            raise InternalError(f"asynchronous copy into {self.scope} buffer '{self.name}'")
        idx = self.checked(idx, env, "store", site)
        if self.bf16:
            value = float32_to_bf16(value)
        self.profile(env, "store", idx, site)
        vector = np.ndim(idx) == 2 or np.ndim(value) == 2
        elems = lanes = None
        if self.tracker is not None:
            elems, lanes = self._accesses(idx, env, vector)
            self.tracker.on_issue(elems, lanes, site)
        full = self.lane_shape(env, idx, value)
        cols = self.cols[:, None] if len(full) == 2 else self.cols
        i, c, v = (np.broadcast_to(x, full) for x in (idx, cols, value))
        mask = env[MASK]
        if mask is not None:
            m = np.broadcast_to(_lane_mask(mask, len(full) == 2), full)
            i, c, v = i[m], c[m], v[m]
        return PendingCopy(self, i.copy(), c.copy(), v.copy(), elems, lanes, site)

    def _accesses(self, idx: Any, env: Env, vector: bool) -> tuple[np.ndarray, np.ndarray]:
        """Flat tracker entries and lanes of the active threads' accesses."""
        chunk: Chunk = env[CHUNK]
        full = self.lane_shape(env, idx)
        if vector and len(full) == 1:
            full = (full[0], 1)
        cols = chunk.lane_block[:, None] if len(full) == 2 else chunk.lane_block
        lanes = chunk.lane_ids[:, None] if len(full) == 2 else chunk.lane_ids
        elems = np.asarray(idx, dtype=np.int64) * self.ncols + cols
        e, t = np.broadcast_to(elems, full), np.broadcast_to(lanes, full)
        mask = env[MASK]
        if mask is None:
            return e.reshape(-1), t.reshape(-1)
        m = np.broadcast_to(_lane_mask(mask, len(full) == 2), full)
        return e[m], t[m]


@dataclass
class PendingCopy:
    """The part of one asynchronous copy statement the active threads issued, in flight."""

    storage: BlockStorage
    rows: np.ndarray
    cols: np.ndarray
    values: np.ndarray
    elems: np.ndarray | None  # race-tracker entries and lanes (None: races not checked)
    lanes: np.ndarray | None
    site: int

    def land(self) -> None:
        tracker = self.storage.tracker
        if tracker is not None and self.elems is not None:
            tracker.on_land(self.elems, self.lanes, self.site)  # type: ignore[arg-type]
        self.storage.data[self.rows, self.cols] = self.values


def allocation_size(buf: Any) -> int:
    """The constant element count of an ``Allocate``d buffer."""
    size = buf.flat_size()
    value = getattr(size, "value", None)
    if not isinstance(value, int) or dt.lanes_of(buf.dtype) != 1:
        raise InternalError(
            f"the emulator needs {buf.scope} allocations of constant size and scalar type; "
            f"'{buf.name}' has size {size!r} and type {buf.dtype}"
        )
    return value


__all__ = ["BlockStorage", "GlobalStorage", "PendingCopy", "Storage", "allocation_size"]
