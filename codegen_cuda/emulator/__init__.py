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
closures, cached per function object; :func:`emulate` checks the arguments and
runs it, writing outputs into the caller's arrays.
"""

from __future__ import annotations

from collections import OrderedDict
from typing import Any

import numpy as np

from ember.codegen_cuda.emulator.grid import CHUNK, chunks, describe_thread, launch_of
from ember.codegen_cuda.emulator.memory import GlobalStorage
from ember.codegen_cuda.emulator.profile import KernelProfile, Profiler
from ember.codegen_cuda.emulator.races import GlobalRaceTracker
from ember.codegen_cuda.emulator.stmts import StmtCompiler
from ember.errors import ArgumentError, EmberError, InternalError
from ember.tir import dtype as dt
from ember.tir import expr as E
from ember.tir import stmt as S
from ember.tir.buffer import Buffer
from ember.tir.functor import post_order_visit
from ember.tir.interp.exprs import Scope
from ember.tir.stmt import PrimFunc

_CACHE_SIZE = 128
# keyed by id(func), holding the function so that its id is not reused while cached
_cache: OrderedDict[int, tuple[PrimFunc, EmulatedKernel]] = OrderedDict()


class EmulatedKernel:
    """A device kernel compiled to closures; call it with numpy arrays."""

    def __init__(self, func: PrimFunc) -> None:
        self.func = func
        self.grid, self.block = launch_of(func)
        scope = Scope()
        scope.define(E.Var("active_mask", "handle"))  # slot 0: grid.MASK
        scope.define(E.Var("chunk", "handle"))  # slot 1: grid.CHUNK
        # scalar parameters (sizes passed by value) first: a shape naming one is checked
        self.scalars = [
            (k, scope.define(v), v) for k, v in enumerate(func.params) if isinstance(v, E.Var)
        ]
        self.positions = [k for k, b in enumerate(func.params) if isinstance(b, Buffer)]
        self.buffers = func.buffers
        self.param_slots = [scope.define(b.data) for b in self.buffers]
        # a shape variable takes its value from the first parameter that has it
        self.shape_vars: list[tuple[int, int, int, E.Var]] = []
        for p, buf in enumerate(self.buffers):
            for d, extent in enumerate(buf.shape):
                if isinstance(extent, E.Var) and not scope.is_defined(extent):
                    self.shape_vars.append((p, d, scope.define(extent), extent))
        compiler = StmtCompiler(scope, self.grid, self.block)
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
        name = self.func.name
        scalars = self._scalars(arrays)
        arrays = tuple(arrays[k] for k in self.positions)
        flat, copies = self._check(arrays, scalars)
        profiler = Profiler(name, self.sites) if profile else None
        try:
            with np.errstate(all="ignore"):
                sizes = list(scalars.items())
                for p, d, slot, var in self.shape_vars:
                    sizes.append(
                        (slot, np.dtype(dt.numpy_dtype(var.dtype)).type(arrays[p].shape[d]))
                    )
                grid = self._grid(sizes)
                trackers = self._global_trackers(grid, flat) if check_races else [None] * len(flat)
                for chunk in chunks(grid, self.block, check_races):
                    chunk.profiler = profiler
                    env: list[Any] = [None] * self.nslots
                    env[CHUNK] = chunk
                    for slot, buf, data, tracker in zip(
                        self.param_slots, self.buffers, flat, trackers
                    ):
                        env[slot] = GlobalStorage(buf.name, buf.dtype, data, self.sites, tracker)
                    for slot, value in sizes:
                        env[slot] = value
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
            GlobalRaceTracker(buf.name, data.size, threads, self.sites, describe)
            if p in self.written
            else None
            for p, (buf, data) in enumerate(zip(self.buffers, flat))
        ]

    def _scalars(self, args: tuple[Any, ...]) -> dict[int, Any]:
        """Slot -> value of each scalar parameter, after checking the argument count."""
        params, name = self.func.params, self.func.name
        if len(args) != len(params):
            names = ", ".join(b.name for b in params)
            raise ArgumentError(
                f"kernel '{name}' takes {len(params)} arguments ({names}), got {len(args)}"
            )
        out = {}
        for k, slot, var in self.scalars:
            value = args[k]
            if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
                raise ArgumentError(
                    f"argument '{var.name}' of kernel '{name}' must be an integer, got {value!r}"
                )
            out[slot] = np.dtype(dt.numpy_dtype(var.dtype)).type(value)
        return out

    def _grid(self, sizes: list[tuple[int, Any]]) -> tuple[int, int, int]:
        """The launch grid for this call: symbolic extents evaluated on the sizes."""
        if all(f is None for f in self.grid_fns):
            return self.grid  # type: ignore[return-value]
        env: list[Any] = [None] * self.nslots
        for slot, value in sizes:
            env[slot] = value
        grid = tuple(int(g) if f is None else int(f(env)) for g, f in zip(self.grid, self.grid_fns))
        if min(grid) < 0:
            raise ArgumentError(f"kernel '{self.func.name}' has the negative grid {grid}")
        return grid  # type: ignore[return-value]

    def _check(
        self, arrays: tuple[Any, ...], scalars: dict[int, Any]
    ) -> tuple[list[np.ndarray], list[Any]]:
        params, name = self.buffers, self.func.name
        flat: list[np.ndarray] = []
        copies: list[tuple[np.ndarray, np.ndarray]] = []
        bound: dict[E.Var, int] = {var: int(scalars[slot]) for _, slot, var in self.scalars}
        for buf, arr in zip(params, arrays):
            _check_array(name, buf, arr, bound)
            if not (arr.flags.c_contiguous and arr.flags.writeable):
                work = np.array(arr, order="C", copy=True)
                if arr.flags.writeable:
                    copies.append((arr, work))
                arr = work
            flat.append(arr.reshape(-1))
        return flat, copies


def _shape_str(buf: Buffer) -> str:
    return "(" + ", ".join(repr(s) for s in buf.shape) + ")"


def _check_array(kernel: str, buf: Buffer, arr: Any, bound: dict[E.Var, int]) -> None:
    """Type, dtype and shape of one argument; symbolic extents must agree across arguments."""
    where = f"argument '{buf.name}' of kernel '{kernel}'"
    if not isinstance(arr, np.ndarray):
        raise ArgumentError(f"{where} must be a numpy array, got {type(arr).__name__}")
    npdt = dt.numpy_dtype(buf.dtype)
    if arr.dtype != npdt:
        hint = " (bfloat16 is passed as its uint16 bits)" if buf.dtype == "bfloat16" else ""
        raise ArgumentError(f"{where} must have dtype {npdt.name}{hint}, got {arr.dtype.name}")
    wrong = arr.ndim != len(buf.shape)
    for extent, n in zip(buf.shape, arr.shape):
        if isinstance(extent, E.IntImm):
            wrong = wrong or extent.value != n
        elif isinstance(extent, E.Var):
            wrong = wrong or bound.setdefault(extent, n) != n
    if wrong:
        raise ArgumentError(f"{where} must have shape {_shape_str(buf)}, got {tuple(arr.shape)}")


def _written_params(func: PrimFunc) -> set[int]:
    """Positions (among the array parameters) of the arrays some statement of ``func`` stores to."""
    stored: set[object] = set()

    def visit(node: object) -> None:
        if isinstance(node, S.BufferStore):
            stored.add(node.buffer.data)

    post_order_visit(func.body, visit)
    return {p for p, buf in enumerate(func.buffers) if buf.data in stored}


def compile_kernel(func: PrimFunc) -> EmulatedKernel:
    """Compile a device kernel for the emulator (cached per function object)."""
    if not isinstance(func, PrimFunc):
        raise ArgumentError(f"expected a device kernel PrimFunc, got {type(func).__name__}")
    hit = _cache.get(id(func))
    if hit is not None and hit[0] is func:
        _cache.move_to_end(id(func))
        return hit[1]
    try:
        kernel = EmulatedKernel(func)
    except EmberError as e:
        e.add_context(f"while compiling kernel '{func.name}' for the emulator")
        raise
    _cache[id(func)] = (func, kernel)
    if len(_cache) > _CACHE_SIZE:
        _cache.popitem(last=False)
    return kernel


def emulate(
    func: PrimFunc, *arrays: np.ndarray, check_races: bool = True, profile: bool = False
) -> KernelProfile | None:
    """Run the device kernel ``func`` over its launch grid on ``arrays``, writing outputs in place.

    Raises :class:`ember.errors.ArgumentError` for bad arguments and out-of-bounds
    accesses, and :class:`ember.errors.RaceError` for shared- and global-memory races
    and barriers in divergent code (race checks can be turned off with ``check_races``).
    With ``profile=True`` it returns the kernel's :class:`KernelProfile` (coalescing
    and bank conflicts per statement).
    """
    return compile_kernel(func)(*arrays, check_races=check_races, profile=profile)


__all__ = ["EmulatedKernel", "KernelProfile", "compile_kernel", "emulate"]
