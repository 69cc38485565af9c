"""Warp shuffles in the SIMT emulator: a gather across the lanes of each warp.

A warp is 32 consecutive threads of a block in CUDA's linear thread order
(``threadIdx.x`` fastest), which is the emulator's lane order inside a block
(:mod:`.grid`), so warp ``w`` of the chunk's block ``b`` is lanes
``b * T + 32 * w`` onwards. A shuffle reads the value another lane of the same
warp computed in the same lock-step expression: lane ``l`` of a warp gets the
value of lane ``l ^ offset`` (xor) or ``l + offset`` (down), and its own value
when that lane lies outside the warp, as CUDA defines ``__shfl_xor_sync`` and
``__shfl_down_sync`` with width 32. The full mask requires every lane of the
warp to execute the shuffle together, so a warp that takes part only in part
(a thread-dependent branch, or a block whose size is not a multiple of 32) is
a :class:`RaceError`, as a barrier in divergent code is.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ember.codegen_cuda.emulator.grid import Chunk
from ember.errors import RaceError
from ember.tir import expr as E

WARP = E.WARP_SIZE


def check_whole_warps(
    chunk: Chunk, mask: np.ndarray | None, site: str, what: str = "warp shuffle"
) -> None:
    """Raise unless each warp that has an active lane has all 32 lanes, all active
    (``what``: the warp-collective operation, for the message)."""
    threads = chunk.threads
    padded = -(-threads // WARP) * WARP  # lanes a block's warps would have
    if mask is None and padded == threads:
        return
    active = np.zeros((chunk.nblocks, padded), dtype=bool)
    active[:, :threads] = True if mask is None else mask.reshape(chunk.nblocks, threads)
    warps = active.reshape(chunk.nblocks, padded // WARP, WARP)
    partial = warps.any(axis=2) & ~warps.all(axis=2)
    if not partial.any():
        return
    b, w = (int(x) for x in np.argwhere(partial)[0])
    lanes = warps[b, w]
    here = int(np.argmax(lanes))
    away = int(np.argmax(~lanes))
    first = b * threads + w * WARP
    missing = (
        f"{chunk.describe(first + away)} does not execute it"
        if w * WARP + away < threads
        else f"the block has only {threads} threads, so the warp lacks lane {away}"
    )
    need = "a full-mask __shfl_*_sync" if what == "warp shuffle" else f"{what} (.sync.aligned)"
    raise RaceError(
        f"{what} with a partial warp: `{site}` is executed by {chunk.describe(first + here)}"
        f" but {missing}; {need} needs all {WARP} lanes of the warp (keep warp-collective "
        "operations out of thread-dependent conditions, and use blocks of whole warps)"
    )


def shuffle_sources(chunk: Chunk, op: E.Intrinsic, offset: Any) -> np.ndarray:
    """For every lane of the chunk, the lane whose value it receives."""
    lane = chunk.lane_ids
    in_warp = (lane % chunk.threads) % WARP
    offset = np.asarray(offset).astype(np.int64)
    src = in_warp ^ offset if op is E.Intrinsic.WARP_SHUFFLE_XOR else in_warp + offset
    inside = (src >= 0) & (src < WARP)
    return np.where(inside, lane - in_warp + src, lane)


def shuffle(
    chunk: Chunk, mask: np.ndarray | None, op: E.Intrinsic, value: Any, offset: Any, site: str
) -> Any:
    """``op`` of the per-lane ``value`` by ``offset``, for the active lanes in ``mask``."""
    check_whole_warps(chunk, mask, site)
    if np.ndim(value) == 0:  # the same in every lane
        return value
    return value[shuffle_sources(chunk, op, offset)]


__all__ = ["check_whole_warps", "shuffle", "shuffle_sources"]
