"""The SIMT emulator: runs CUDA device kernels on the CPU with CUDA semantics, and catches races.

It sits beside the CUDA code generator, after ``split_host_device``: it takes
the same device-kernel PrimFuncs the CUDA printer takes (attrs ``kernel`` and
``launch``, flattened accesses, loops bound to ``blockIdx``/``threadIdx``,
``shared``/``local`` allocations, barriers) and runs them over the whole launch
grid on numpy arrays, so GPU schedules are tested numerically on machines
without a GPU. The threads of a block run in lock-step, vectorised over threads
with numpy (several blocks at once, see :mod:`.grid`); thread-dependent control
flow is a mask (:mod:`.stmts`); expressions follow the reference interpreter's
dtype semantics (:mod:`.exprs`), and a warp shuffle gathers across the 32 lanes
of each warp, all of which must take part (:mod:`.warps`); memory accesses are
bounds-checked per thread (:mod:`.memory`); shared-memory accesses between
barriers, and accesses to the global buffers a kernel writes over the whole
launch, are checked for races (:mod:`.races`). A kernel compiles once into
closures — the reference interpreter's closure compiler
(:mod:`ember.tir.interp.closures`) with the SIMT handlers overridden — cached per
function object; :func:`emulate` checks the arguments (as the interpreter does,
:mod:`ember.tir.interp.binding`: arrays, and integers for sizes passed by value)
and runs it, writing outputs into the caller's arrays.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ember.codegen_cuda.emulator.grid import CHUNK, chunks, describe_thread, launch_of
from ember.codegen_cuda.emulator.memory import GlobalStorage
from ember.codegen_cuda.emulator.profile import PROFILE_BLOCKS, KernelProfile, Profiler
from ember.codegen_cuda.emulator.races import GlobalRaceTracker
from ember.codegen_cuda.emulator.stmts import StmtCompiler
from ember.errors import ArgumentError, EmberError, InternalError
from ember.tir import expr as E
from ember.tir import stmt as S
from ember.tir.functor import post_order_visit
from ember.tir.interp.binding import Arguments, FuncCache
from ember.tir.interp.closures import Scope
from ember.tir.stmt import PrimFunc
from ember.tir.tensor_core import written_pointer


class EmulatedKernel:
    """A device kernel compiled to closures; call it with numpy arrays (and integer sizes)."""

    def __init__(self, func: PrimFunc) -> None:
        self.func = func
        self.grid, self.block = launch_of(func)
        scope = Scope()
        scope.define(E.Var("active_mask", "handle"))  # slot 0: grid.MASK
        scope.define(E.Var("chunk", "handle"))  # slot 1: grid.CHUNK
        compiler = StmtCompiler(scope, self.grid, self.block)
        self.args = Arguments(func, scope, f"kernel '{func.name}'")
        self.args.compile_checks(compiler.exprs.compile)
        # a symbolic grid extent is evaluated per call, once the sizes are bound
        self.grid_fns = [
            compiler.exprs.compile(g) if isinstance(g, E.PrimExpr) else None for g in self.grid
        ]
        self.body = compiler.compile(func.body)
        self.sites = compiler.exprs.sites
        self.nslots = scope.size
        self.written = _written_params(func)

    def __call__(
        self, *arrays: Any, check_races: bool = True, profile: bool = False
    ) -> KernelProfile | None:
        bound: list[Any] = [None] * self.nslots
        copies = self.args.bind(bound, arrays)
        name = self.func.name
        flat = [bound[p.slot] for p in self.args.params]
        profiler = Profiler(name, self.sites) if profile else None
        try:
            with np.errstate(all="ignore"):
                grid = self._grid(bound)
                trackers = self._global_trackers(grid, flat) if check_races else [None] * len(flat)
                head = PROFILE_BLOCKS if profile else 0
                for chunk in chunks(grid, self.block, check_races, head):
                    chunk.profiler = _sampling(profiler, chunk, grid)
                    env = list(bound)
                    env[CHUNK] = chunk
                    for p, data, tracker in zip(self.args.params, flat, trackers):
                        env[p.slot] = GlobalStorage(
                            p.buf.name, p.buf.dtype, data, self.sites, tracker
                        )
                    self.body(env)
        except EmberError as e:
            e.add_context(f"while emulating kernel '{name}'")
            raise
        except Exception as e:
            raise InternalError(f"emulating kernel '{name}' failed: {type(e).__name__}: {e}") from e
        for original, work in copies:
            original[...] = work
        return profiler.profile if profiler is not None else None

    def _global_trackers(
        self, grid: tuple[int, int, int], flat: list[np.ndarray]
    ) -> list[GlobalRaceTracker | None]:
        """One tracker per array the kernel writes, for the whole launch."""
        threads = self.block[0] * self.block[1] * self.block[2]

        def describe(tid: int) -> str:
            return describe_thread(grid, self.block, tid)

        return [
            GlobalRaceTracker(p.buf.name, data.size, threads, self.sites, describe)
            if k in self.written
            else None
            for k, (p, data) in enumerate(zip(self.args.params, flat))
        ]

    def _grid(self, env: list[Any]) -> tuple[int, int, int]:
        """The launch grid for this call: symbolic extents evaluated on the bound sizes."""
        if all(f is None for f in self.grid_fns):
            return self.grid  # type: ignore[return-value]
        grid = tuple(int(g) if f is None else int(f(env)) for g, f in zip(self.grid, self.grid_fns))
        if min(grid) < 0:
            raise ArgumentError(f"kernel '{self.func.name}' has the negative grid {grid}")
        return grid  # type: ignore[return-value]


def _written_params(func: PrimFunc) -> set[int]:
    """Positions (among the array parameters) of the arrays some statement of ``func`` stores to."""
    stored: set[object] = set()

    def visit(node: object) -> None:
        if isinstance(node, S.BufferStore):
            stored.add(node.buffer.data)
        elif isinstance(node, E.Call) and node.op in E.TENSOR_CORE_CALLS:
            stored.add(written_pointer(node))

    post_order_visit(func.body, visit, once=True)
    return {p for p, buf in enumerate(func.buffers) if buf.data in stored}


_cache: FuncCache[EmulatedKernel] = FuncCache(
    128, "a device kernel PrimFunc", "kernel '{name}' for the emulator"
)


def _sampling(profiler: Profiler | None, chunk: Any, grid: tuple[int, int, int]) -> Any:
    """The profiler while fewer than ``PROFILE_BLOCKS`` blocks were counted, else None."""
    if profiler is None:
        return None
    prof = profiler.profile
    prof.blocks_total = grid[0] * grid[1] * grid[2]
    if prof.blocks_profiled >= PROFILE_BLOCKS:
        return None
    prof.blocks_profiled += chunk.nblocks
    return profiler


def compile_kernel(func: PrimFunc) -> EmulatedKernel:
    """Compile a device kernel for the emulator (cached per function object)."""
    return _cache.get(func, EmulatedKernel)


def emulate(
    func: PrimFunc, *arrays: np.ndarray, check_races: bool = True, profile: bool = False
) -> KernelProfile | None:
    """Run the device kernel ``func`` over its launch grid on ``arrays``, writing outputs in place.

    Raises :class:`ember.errors.ArgumentError` for bad arguments and out-of-bounds
    accesses, and :class:`ember.errors.RaceError` for shared- and global-memory races
    and barriers in divergent code (race checks can be turned off with ``check_races``).
    With ``profile=True`` it returns the kernel's :class:`KernelProfile` (coalescing
    and bank conflicts per statement), counted over the first ``PROFILE_BLOCKS`` blocks.
    """
    return compile_kernel(func)(*arrays, check_races=check_races, profile=profile)


__all__ = ["EmulatedKernel", "KernelProfile", "compile_kernel", "emulate"]
