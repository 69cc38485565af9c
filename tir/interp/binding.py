"""Arguments and caching shared by the two TIR executors (interpreter and SIMT emulator).

Both take a ``PrimFunc`` and its arguments in call order: a numpy array per
buffer parameter, an integer per scalar parameter (a size passed by value).
:class:`Arguments` decides once, when the function is compiled, how each
parameter is checked and bound: scalar parameters are bound first (a shape may
name one), a constant extent must match, a free shape variable takes its value
from the first buffer that has it, and any other extent expression is evaluated
and compared after all variables are bound. At call time it checks type, dtype
and shape, puts each array's flat view in its parameter's slot (a copy when the
array is not contiguous and writeable, written back afterwards) and binds the
scalars and shape variables. :class:`FuncCache` keeps one compiled object per function.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable
from typing import Any, Generic, TypeVar

import numpy as np

from ember.errors import ArgumentError, EmberError
from ember.tir import dtype as dt
from ember.tir import expr as E
from ember.tir.buffer import Buffer
from ember.tir.interp.closures import Env, Fn, Scope
from ember.tir.stmt import PrimFunc

T = TypeVar("T")


class _Param:
    """How one parameter is checked and bound: its storage slot and each dimension's rule."""

    def __init__(self, buf: Buffer, slot: int) -> None:
        self.buf = buf
        self.slot = slot
        self.npdt = dt.numpy_dtype(buf.dtype)
        # each dim: ("const", int) | ("bind", slot, var) | ("check", fn)
        self.dims: list[tuple[Any, ...]] = []


class Arguments:
    """The parameters of ``func`` in ``scope``; ``label`` names the function in messages."""

    def __init__(self, func: PrimFunc, scope: Scope, label: str) -> None:
        self.label = label
        self.func_params = func.params
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
                    p.dims.append(("check", extent))

    def compile_checks(self, compile_expr: Callable[[E.PrimExpr], Fn]) -> None:
        """Compile the extents checked at call time (they may use any parameter's variables)."""
        for p in self.params:
            p.dims = [("check", compile_expr(d[1])) if d[0] == "check" else d for d in p.dims]

    def bind(self, env: Env, arrays: tuple[Any, ...]) -> list[tuple[np.ndarray, Any]]:
        """Check ``arrays`` and bind them into ``env``; the (caller's, working) copies to write
        back after the run."""
        label, params = self.label, self.func_params
        if len(arrays) != len(params):
            names = ", ".join(p.name for p in params)
            raise ArgumentError(
                f"{label} takes {len(params)} arguments ({names}), got {len(arrays)}"
            )
        for k, slot, var in self.scalars:
            value = arrays[k]
            if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
                raise ArgumentError(
                    f"argument '{var.name}' of {label} must be an integer, got {value!r}"
                )
            env[slot] = np.int64(value).astype(dt.numpy_dtype(var.dtype))
        arrays = tuple(arrays[k] for k in self.positions)
        copies: list[tuple[np.ndarray, Any]] = []
        for p, arr in zip(self.params, arrays):
            _check_array(label, p, arr)
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
                        f"argument '{p.buf.name}' of {label} must have shape "
                        f"{_shape_str(p.buf)}, got {tuple(arr.shape)}: the other arguments "
                        f"make dimension {d} {int(rule[1](env))}"
                    )
        return copies


def _shape_str(buf: Buffer) -> str:
    return "(" + ", ".join(repr(s) for s in buf.shape) + ")"


def _check_array(label: str, p: _Param, arr: Any) -> None:
    where = f"argument '{p.buf.name}' of {label}"
    if not isinstance(arr, np.ndarray):
        raise ArgumentError(f"{where} must be a numpy array, got {type(arr).__name__}")
    if arr.dtype != p.npdt:
        hint = " (bfloat16 is passed as its uint16 bits)" if p.buf.dtype == "bfloat16" else ""
        raise ArgumentError(f"{where} must have dtype {p.npdt.name}{hint}, got {arr.dtype.name}")
    if arr.ndim != len(p.dims) or any(
        rule[0] == "const" and rule[1] != n for rule, n in zip(p.dims, arr.shape)
    ):
        raise ArgumentError(f"{where} must have shape {_shape_str(p.buf)}, got {tuple(arr.shape)}")


class FuncCache(Generic[T]):
    """Compiled objects per function object, least recently used dropped beyond ``size``.

    Keyed by ``id(func)`` and holding the function itself, so an id is never reused
    while cached (PrimFunc has __slots__ and no __weakref__, so a WeakKeyDictionary
    cannot hold it).
    """

    def __init__(self, size: int, what: str, compile_for: str) -> None:
        self.size = size
        self.what = what  # "a PrimFunc to interpret"
        self.compile_for = compile_for  # "'{name}' for the interpreter"
        self._entries: OrderedDict[int, tuple[PrimFunc, T]] = OrderedDict()

    def get(self, func: PrimFunc, build: Callable[[PrimFunc], T]) -> T:
        if not isinstance(func, PrimFunc):
            raise ArgumentError(f"expected {self.what}, got {type(func).__name__}")
        hit = self._entries.get(id(func))
        if hit is not None and hit[0] is func:
            self._entries.move_to_end(id(func))
            return hit[1]
        try:
            compiled = build(func)
        except EmberError as e:
            e.add_context(f"while compiling {self.compile_for.format(name=func.name)}")
            raise
        self._entries[id(func)] = (func, compiled)
        if len(self._entries) > self.size:
            self._entries.popitem(last=False)
        return compiled


__all__ = ["Arguments", "FuncCache"]
