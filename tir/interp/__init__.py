"""The reference interpreter: runs any TIR ``PrimFunc`` on numpy arrays, as the tests' oracle.

It sits beside the code generators, not in the build: lowering and every pass
are tested by running their output here and comparing with numpy, and the
backends are tested against it. So it trades speed for plain semantics:
arithmetic in each expression's own dtype (float16 rounds every operation,
integers wrap around, bfloat16 is stored as ``uint16`` bits and computed in
float32), C's truncating division and float-to-int casts, loops run serially
in order, and every access is bounds-checked — an out-of-bounds index raises
:class:`InternalError` instead of reading a neighbour.

It runs functions before and after ``flatten_buffers``: storage lives with each
buffer's ``data`` pointer, and a single index into a multi-dimensional buffer
addresses its flattened view. ``run`` compiles the function once into nested
closures (see :mod:`.exprs`, :mod:`.stmts`), caches them per function object,
checks the arguments and executes, writing outputs into the caller's arrays.
"""

from __future__ import annotations

from collections import OrderedDict
from typing import Any

import numpy as np

from ember.errors import ArgumentError, EmberError, InternalError
from ember.tir import dtype as dt
from ember.tir import expr as E
from ember.tir.bf16 import bf16_to_float32, float32_to_bf16, round_to_bf16
from ember.tir.buffer import Buffer
from ember.tir.interp.exprs import Scope
from ember.tir.interp.stmts import StmtCompiler
from ember.tir.stmt import PrimFunc

_CACHE_SIZE = 256
# Keyed by id(func) and holding the function itself, so an id is never reused while
# cached (PrimFunc has __slots__ and no __weakref__, so a WeakKeyDictionary cannot hold it).
_cache: OrderedDict[int, tuple[PrimFunc, CompiledFunc]] = OrderedDict()


class _Param:
    """How one parameter is checked and bound: its storage slot and each dimension's rule."""

    def __init__(self, buf: Buffer, slot: int) -> None:
        self.buf = buf
        self.slot = slot
        self.npdt = dt.numpy_dtype(buf.dtype)
        # each dim: ("const", int) | ("bind", slot, var) | ("check", fn)
        self.dims: list[tuple[Any, ...]] = []


class CompiledFunc:
    """A PrimFunc compiled to closures; call it with numpy arrays."""

    def __init__(self, func: PrimFunc) -> None:
        self.func = func
        scope = Scope()
        compiler = StmtCompiler(scope)
        # scalar parameters first, so that a shape naming one checks against its value
        self.scalars = [
            (k, scope.define(v), v) for k, v in enumerate(func.params) if isinstance(v, E.Var)
        ]
        self.positions = [k for k, b in enumerate(func.params) if isinstance(b, Buffer)]
        self.params = [_Param(b, scope.define(b.data)) for b in func.buffers]
        for p in self.params:
            for extent in p.buf.shape:
                if isinstance(extent, E.IntImm):
                    p.dims.append(("const", extent.value))
                elif isinstance(extent, E.Var) and not scope.is_defined(extent):
                    p.dims.append(("bind", scope.define(extent), extent))
                else:
                    p.dims.append(("check", None))
        for p in self.params:  # shape expressions may use variables bound by any parameter
            p.dims = [
                ("check", compiler.exprs.compile(x)) if d[0] == "check" else d
                for d, x in zip(p.dims, p.buf.shape)
            ]
        self.body = compiler.compile(func.body)
        self.nslots = scope.size

    def __call__(self, *arrays: Any) -> None:
        env: list[Any] = [None] * self.nslots
        work = self._bind(env, arrays)
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

    def _bind(self, env: list[Any], arrays: tuple[Any, ...]) -> list[tuple[np.ndarray, Any]]:
        name = self.func.name
        if len(arrays) != len(self.func.params):
            names = ", ".join(p.name for p in self.func.params)
            raise ArgumentError(
                f"'{name}' takes {len(self.func.params)} arguments ({names}), got {len(arrays)}"
            )
        for k, slot, var in self.scalars:
            value = arrays[k]
            if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
                raise ArgumentError(
                    f"argument '{var.name}' of '{name}' must be an integer, got {value!r}"
                )
            env[slot] = np.int64(value).astype(dt.numpy_dtype(var.dtype))
        arrays = tuple(arrays[k] for k in self.positions)
        copies: list[tuple[np.ndarray, Any]] = []
        for p, arr in zip(self.params, arrays):
            _check_array(name, p, arr)
            if not (arr.flags.c_contiguous and arr.flags.writeable):
                work = np.array(arr, order="C", copy=True)
                if arr.flags.writeable:
                    copies.append((arr, work))
                arr = work
            env[p.slot] = arr.reshape(-1)
            for d, rule in enumerate(p.dims):
                if rule[0] == "bind":
                    env[rule[1]] = np.int64(arr.shape[d]).astype(rule[2].dtype)
        for p, arr in zip(self.params, arrays):
            for d, rule in enumerate(p.dims):
                if rule[0] == "check" and int(rule[1](env)) != arr.shape[d]:
                    raise ArgumentError(
                        f"argument '{p.buf.name}' of '{name}' has {arr.shape[d]} elements "
                        f"in dimension {d}, but its shape {_shape_str(p.buf)} asks for "
                        f"{int(rule[1](env))}"
                    )
        return copies


def _shape_str(buf: Buffer) -> str:
    return "(" + ", ".join(repr(s) for s in buf.shape) + ")"


def _check_array(fname: str, p: _Param, arr: Any) -> None:
    name = p.buf.name
    if not isinstance(arr, np.ndarray):
        raise ArgumentError(
            f"argument '{name}' of '{fname}' must be a numpy array, got {type(arr).__name__}"
        )
    if arr.dtype != p.npdt:
        hint = " (bfloat16 is passed as its uint16 bits)" if p.buf.dtype == "bfloat16" else ""
        raise ArgumentError(
            f"argument '{name}' of '{fname}' must have dtype {p.npdt.name}{hint}, "
            f"got {arr.dtype.name}"
        )
    if arr.ndim != len(p.dims) or any(
        rule[0] == "const" and rule[1] != n for rule, n in zip(p.dims, arr.shape)
    ):
        raise ArgumentError(
            f"argument '{name}' of '{fname}' must have shape {_shape_str(p.buf)}, "
            f"got {tuple(arr.shape)}"
        )


def compile_func(func: PrimFunc) -> CompiledFunc:
    """Compile ``func`` for the interpreter (cached per function object)."""
    if not isinstance(func, PrimFunc):
        raise ArgumentError(f"expected a PrimFunc to interpret, got {type(func).__name__}")
    hit = _cache.get(id(func))
    if hit is not None and hit[0] is func:
        _cache.move_to_end(id(func))
        return hit[1]
    try:
        compiled = CompiledFunc(func)
    except EmberError as e:
        e.add_context(f"while compiling '{func.name}' for the interpreter")
        raise
    _cache[id(func)] = (func, compiled)
    if len(_cache) > _CACHE_SIZE:
        _cache.popitem(last=False)
    return compiled


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
