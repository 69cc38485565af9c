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
bounds-checked per thread (:mod:`.memory`) and shared-memory accesses between
barriers are checked for races (:mod:`.races`). A kernel compiles once into
closures — the reference interpreter's closure compiler
(:mod:`ember.tir.interp.closures`) with the SIMT handlers overridden — cached per
function object; :func:`emulate` checks the arguments (as the interpreter does,
:mod:`ember.tir.interp.binding`) and runs it, writing outputs into the caller's arrays.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ember.codegen_cuda.emulator.grid import CHUNK, chunks, launch_of
from ember.codegen_cuda.emulator.memory import GlobalStorage
from ember.codegen_cuda.emulator.profile import KernelProfile, Profiler
from ember.codegen_cuda.emulator.stmts import StmtCompiler
from ember.errors import EmberError, InternalError
from ember.tir import expr as E
from ember.tir.interp.binding import Arguments, FuncCache
from ember.tir.interp.closures import Scope
from ember.tir.stmt import PrimFunc


class EmulatedKernel:
    """A device kernel compiled to closures; call it with numpy arrays."""

    def __init__(self, func: PrimFunc) -> None:
        self.func = func
        self.grid, self.block = launch_of(func)
        scope = Scope()
        scope.define(E.Var("active_mask", "handle"))  # slot 0: grid.MASK
        scope.define(E.Var("chunk", "handle"))  # slot 1: grid.CHUNK
        compiler = StmtCompiler(scope, self.grid, self.block)
        self.args = Arguments(func, scope, f"kernel '{func.name}'")
        self.args.compile_checks(compiler.exprs.compile)
        self.body = compiler.compile(func.body)
        self.sites = compiler.exprs.sites
        self.nslots = scope.size

    def __call__(
        self, *arrays: Any, check_races: bool = True, profile: bool = False
    ) -> KernelProfile | None:
        bound: list[Any] = [None] * self.nslots
        copies = self.args.bind(bound, arrays)
        name = self.func.name
        profiler = Profiler(name, self.sites) if profile else None
        try:
            with np.errstate(all="ignore"):
                for chunk in chunks(self.grid, self.block, check_races):
                    chunk.profiler = profiler
                    env = list(bound)
                    env[CHUNK] = chunk
                    for p in self.args.params:
                        env[p.slot] = GlobalStorage(
                            p.buf.name, p.buf.dtype, bound[p.slot], self.sites
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


_cache: FuncCache[EmulatedKernel] = FuncCache(
    128, "a device kernel PrimFunc", "kernel '{name}' for the emulator"
)


def compile_kernel(func: PrimFunc) -> EmulatedKernel:
    """Compile a device kernel for the emulator (cached per function object)."""
    return _cache.get(func, EmulatedKernel)


def emulate(
    func: PrimFunc, *arrays: np.ndarray, check_races: bool = True, profile: bool = False
) -> KernelProfile | None:
    """Run the device kernel ``func`` over its launch grid on ``arrays``, writing outputs in place.

    Raises :class:`ember.errors.ArgumentError` for bad arguments and out-of-bounds
    accesses, and :class:`ember.errors.RaceError` for shared-memory races and
    barriers in divergent code (race checks can be turned off with ``check_races``).
    With ``profile=True`` it returns the kernel's :class:`KernelProfile` (coalescing
    and bank conflicts per statement).
    """
    return compile_kernel(func)(*arrays, check_races=check_races, profile=profile)


__all__ = ["EmulatedKernel", "KernelProfile", "compile_kernel", "emulate"]
