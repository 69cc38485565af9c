"""Launch geometry for the SIMT emulator: which hardware thread each numpy lane stands for.

The emulator runs a kernel's grid in chunks of whole blocks. Inside a chunk
every thread of every block is one *lane* of the numpy arrays that carry
per-thread values: lane ``b * T + t`` is thread ``t`` (x fastest, as CUDA
linearises ``threadIdx``) of the chunk's ``b``-th block, ``T`` being the
threads per block. Blocks never share ``shared`` memory or barriers, so running
several in lock-step is the same as running them one after another (block order
must not matter for a correct kernel), and it makes small blocks cheap.
A :class:`Chunk` also carries what the statements need at run time: the index
arrays for each ``blockIdx``/``threadIdx`` tag, the storage of each shared allocation
(one per kernel, as a ``__shared__`` array is; a barrier resets its race history),
the asynchronous copies in flight, and whether races are checked.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np

from ember.errors import ArgumentError
from ember.tir import expr as E
from ember.tir.stmt import PrimFunc

Dim3 = tuple[int, int, int]

MASK, CHUNK = 0, 1  # environment slots: the active-thread mask (None: all), the running Chunk
TAGS = tuple(f"{kind}.{axis}" for kind in ("blockIdx", "threadIdx") for axis in "xyz")
MAX_LANES = 1 << 16  # lanes per chunk: big enough to amortise numpy calls, small for memory


def launch_of(func: PrimFunc) -> tuple[tuple[Any, Any, Any], Dim3]:
    """The ``launch`` attribute of a kernel, checked: ((gx, gy, gz), (bx, by, bz)); a grid
    extent is an ``int`` or an expression of the kernel's size parameters."""
    launch = func.attr("launch")
    if not func.attr("kernel", False) or launch is None:
        raise ArgumentError(
            f"'{func.name}' is not a device kernel (it lacks the 'kernel' and 'launch' "
            "attributes); the emulator runs the kernels split_host_device produces"
        )
    try:
        grid_in, block_in = launch
        # a grid extent may be symbolic (an expression of the kernel's size parameters)
        grid = tuple(
            x if isinstance(x, E.PrimExpr) and not isinstance(x, E.IntImm) else int(x)
            for x in grid_in
        )
        block = tuple(int(x) for x in block_in)
    except (TypeError, ValueError) as e:
        raise ArgumentError(
            f"kernel '{func.name}' has a malformed launch attribute {launch!r}; "
            "expected ((gx, gy, gz), (bx, by, bz))"
        ) from e
    if len(grid) != 3 or len(block) != 3 or min(x for x in grid + block if isinstance(x, int)) < 1:
        raise ArgumentError(
            f"kernel '{func.name}' has launch dimensions {launch!r}; expected three "
            "positive grid and three positive block dimensions"
        )
    return grid, block  # type: ignore[return-value]


class Chunk:
    """A run of consecutive blocks executed together, one lane per thread."""

    def __init__(self, grid: Dim3, block: Dim3, first: int, nblocks: int, races: bool) -> None:
        self.grid, self.block = grid, block
        self.first = first  # linear id of the chunk's first block
        self.nblocks = nblocks
        self.threads = block[0] * block[1] * block[2]
        self.lanes = nblocks * self.threads
        self.check_races = races
        self.profiler: Any = None  # a profile.Profiler when emulate(..., profile=True)
        lane = np.arange(self.lanes, dtype=np.int32)
        self.lane_ids = lane
        self.lane_block = lane // self.threads  # block of each lane, within the chunk
        t = lane % self.threads
        b = self.lane_block + first
        gx, gy, _ = grid
        bx, by, _ = block
        self._tags = {
            "threadIdx.x": t % bx,
            "threadIdx.y": (t // bx) % by,
            "threadIdx.z": t // (bx * by),
            "blockIdx.x": b % gx,
            "blockIdx.y": (b // gx) % gy,
            "blockIdx.z": b // (gx * gy),
        }
        self._typed: dict[tuple[str, np.dtype], np.ndarray] = {}
        self.shared: dict[object, Any] = {}  # shared storage per allocation, reset at barriers
        # barriers each block has passed, and each lane's launch-wide thread id: what the
        # global-memory race trackers record
        self.epoch = np.zeros(nblocks, dtype=np.int32)
        self.thread_ids = lane.astype(np.int64) + first * self.threads
        # asynchronous copies (cp.async): issued but not committed, and committed groups in
        # issue order; the threads run in lock-step, so one queue serves all of them
        self.async_open: list[Any] = []
        self.async_groups: list[list[Any]] = []

    def index(self, tag: str, dtype: np.dtype) -> np.ndarray:
        """The per-lane value of ``tag`` (``"threadIdx.x"``, ...) in ``dtype``."""
        key = (tag, dtype)
        arr = self._typed.get(key)
        if arr is None:
            arr = self._typed[key] = self._tags[tag].astype(dtype)
        return arr

    def block_of(self, lane: int) -> Dim3:
        b = self.first + lane // self.threads
        gx, gy, _ = self.grid
        return (b % gx, (b // gx) % gy, b // (gx * gy))

    def thread_of(self, lane: int) -> Dim3:
        t = lane % self.threads
        bx, by, _ = self.block
        return (t % bx, (t // bx) % by, t // (bx * by))

    def describe(self, lane: int) -> str:
        """``"block (1, 0, 0) thread (3, 2, 0)"`` for a lane, as error messages name threads."""
        return f"block {self.block_of(lane)} thread {self.thread_of(lane)}"


def describe_thread(grid: Dim3, block: Dim3, tid: int) -> str:
    """Like :meth:`Chunk.describe` for a launch-wide thread id ``block * T + thread``."""
    threads = block[0] * block[1] * block[2]
    b, t = divmod(tid, threads)
    gx, gy, _ = grid
    bx, by, _ = block
    where = (b % gx, (b // gx) % gy, b // (gx * gy))
    return f"block {where} thread {(t % bx, (t // bx) % by, t // (bx * by))}"


def chunks(grid: Dim3, block: Dim3, races: bool, head: int = 0) -> Iterator[Chunk]:
    """The grid cut into chunks of whole blocks, in linear block order; the first ``head``
    blocks (a profiled sample) end a chunk of their own."""
    total = grid[0] * grid[1] * grid[2]
    threads = block[0] * block[1] * block[2]
    per = max(1, MAX_LANES // threads)
    first = 0
    while first < total:
        end = min(first + per, total)
        if first < head < end:
            end = head
        yield Chunk(grid, block, first, end - first, races)
        first = end


__all__ = ["CHUNK", "MASK", "MAX_LANES", "TAGS", "Chunk", "chunks", "describe_thread", "launch_of"]
