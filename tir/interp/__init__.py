"""The reference interpreter: runs any TIR ``PrimFunc`` on numpy arrays, as the tests' oracle.

It sits beside the code generators, not in the build: lowering and every pass
are tested by running their output here and comparing with numpy, and the
backends are tested against it. So it trades speed for plain semantics:
arithmetic in each expression's own dtype (float16 rounds every operation,
integers wrap around, int4/uint4 are stored one per int8/uint8 byte and wrapped to
4 bits after every operation and load, bfloat16 is stored as ``uint16`` bits and
computed in float32), C's truncating division and float-to-int casts, loops run serially
in order, and every access is bounds-checked — an out-of-bounds index raises
:class:`InternalError` instead of reading a neighbour.

It runs functions before and after ``flatten_buffers``: storage lives with each
buffer's ``data`` pointer, and a single index into a multi-dimensional buffer
addresses its flattened view. ``run`` compiles the function once into nested
closures (the closure compiler of :mod:`.closures`, shared with the SIMT
emulator, specialised in :mod:`.exprs` and :mod:`.stmts`), caches them per
function object, checks the arguments (:mod:`.binding`) and executes, writing
outputs into the caller's arrays.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ember.errors import EmberError, InternalError
from ember.tir.bf16 import bf16_to_float32, float32_to_bf16, round_to_bf16
from ember.tir.interp.binding import Arguments, FuncCache
from ember.tir.interp.closures import Scope
from ember.tir.interp.stmts import StmtCompiler
from ember.tir.stmt import PrimFunc


class CompiledFunc:
    """A PrimFunc compiled to closures; call it with numpy arrays."""

    def __init__(self, func: PrimFunc) -> None:
        self.func = func
        scope = Scope()
        compiler = StmtCompiler(scope)
        self.args = Arguments(func, scope, f"'{func.name}'")
        self.args.compile_checks(compiler.exprs.compile)
        self.body = compiler.compile(func.body)
        self.nslots = scope.size

    def __call__(self, *arrays: Any) -> None:
        env: list[Any] = [None] * self.nslots
        work = self.args.bind(env, arrays)
        try:
            with np.errstate(all="ignore"):
                self.body(env)
        except EmberError as e:
            e.add_context(f"while interpreting '{self.func.name}'")
            raise
        except Exception as e:  # e.g. storage smaller than its buffer claims: a bug upstream
            raise InternalError(
                f"interpreting '{self.func.name}' failed: {type(e).__name__}: {e}"
            ) from e
        for original, copy in work:
            original[...] = copy


_cache: FuncCache[CompiledFunc] = FuncCache(
    256, "a PrimFunc to interpret", "'{name}' for the interpreter"
)


def compile_func(func: PrimFunc) -> CompiledFunc:
    """Compile ``func`` for the interpreter (cached per function object)."""
    return _cache.get(func, CompiledFunc)


def run(func: PrimFunc, *arrays: np.ndarray) -> None:
    """Execute ``func`` on ``arrays`` (one per parameter), writing its outputs in place."""
    compile_func(func)(*arrays)


__all__ = [
    "CompiledFunc",
    "bf16_to_float32",
    "compile_func",
    "float32_to_bf16",
    "round_to_bf16",
    "run",
]
