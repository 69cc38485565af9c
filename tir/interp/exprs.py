"""Expressions -> Python closures, for the reference interpreter.

Each expression node is compiled once into a function of the environment (a
list with one slot per variable and per buffer pointer) that returns the node's
value; executing never dispatches on node types. Variables and constants used
as operands are read inline rather than through a call, which is most of the
speed of index arithmetic. The meaning of every operator comes from the tables
in :mod:`ember.tir.interp.ops`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from ember.errors import ArgumentError, InternalError
from ember.tir import dtype as dt
from ember.tir import expr as E
from ember.tir.bf16 import round_to_bf16
from ember.tir.interp import memory
from ember.tir.interp.ops import (
    COMPARE,
    INTRINSICS,
    binary_fn,
    cast_fn,
    extern_fn,
    value_dtype,
)
from ember.tir.printer import expr_to_str

Env = list
Fn = Callable[[Env], Any]
Operand = tuple[str, Any]  # ("c", constant) | ("v", slot) | ("f", function)


class Scope:
    """Compile-time bookkeeping: the environment slot of every variable, and which are defined."""

    def __init__(self) -> None:
        self.slots: dict[E.Var, int] = {}
        self.defined: dict[E.Var, int] = {}  # variable -> nesting count

    def slot(self, v: E.Var) -> int:
        s = self.slots.get(v)
        if s is None:
            s = self.slots[v] = len(self.slots)
        return s

    def define(self, v: E.Var) -> int:
        self.defined[v] = self.defined.get(v, 0) + 1
        return self.slot(v)

    def undefine(self, v: E.Var) -> None:
        self.defined[v] -= 1
        if not self.defined[v]:
            del self.defined[v]

    def is_defined(self, v: E.Var) -> bool:
        return v in self.defined

    @property
    def size(self) -> int:
        return len(self.slots)


def scalar_constant(value: int | float, dtype: str) -> Any:
    """A constant as the interpreter's value: wrapped into integer range, rounded to its type."""
    base = dt.element_of(dtype)
    if base == "bool":
        return np.bool_(bool(value))
    if base == "bfloat16":
        return round_to_bf16(np.float32(value))[()]
    if dt.is_float(base):
        return value_dtype(base).type(value)
    bits = dt.bits_of(base)
    v = int(value) & ((1 << bits) - 1)
    if not dt.is_uint(base) and v >= 1 << (bits - 1):
        v -= 1 << bits
    return value_dtype(base).type(v)


def _call_binary(op: Callable[[Any, Any], Any], a: Operand, b: Operand) -> Fn:
    """``op(a, b)`` with variable and constant operands read inline."""
    (ka, x), (kb, y) = a, b
    if ka == "v":
        if kb == "c":
            return lambda env: op(env[x], y)
        if kb == "v":
            return lambda env: op(env[x], env[y])
        return lambda env: op(env[x], y(env))
    if ka == "c":
        if kb == "v":
            return lambda env: op(x, env[y])
        if kb == "c":
            return lambda env: op(x, y)
        return lambda env: op(x, y(env))
    if kb == "c":
        return lambda env: op(x(env), y)
    if kb == "v":
        return lambda env: op(x(env), env[y])
    return lambda env: op(x(env), y(env))


def _as_fn(o: Operand) -> Fn:
    kind, x = o
    if kind == "f":
        return x
    if kind == "v":
        return lambda env: env[x]
    return lambda env: x


class ExprCompiler:
    def __init__(self, scope: Scope) -> None:
        self.scope = scope
        self._table: dict[type, Callable[[Any], Operand]] = {
            E.Var: self._var,
            E.SizeVar: self._var,
            E.IntImm: lambda e: ("c", scalar_constant(e.value, e.dtype)),
            E.FloatImm: lambda e: ("c", scalar_constant(e.value, e.dtype)),
            E.StringImm: lambda e: ("c", e.value),
            E.BinOp: self._binop,
            E.Compare: lambda e: self._binary(COMPARE[e.op], e.a, e.b),
            E.Not: self._not,
            E.Select: self._select,
            E.Cast: self._cast,
            E.Call: self._call,
            E.Ramp: self._ramp,
            E.Broadcast: self._broadcast,
            E.Let: self._let,
            E.BufferLoad: self._load,
        }

    def compile(self, e: E.PrimExpr) -> Fn:
        return _as_fn(self.operand(e))

    def operand(self, e: E.PrimExpr) -> Operand:
        handler = self._table.get(type(e))
        if handler is None:
            raise InternalError(
                f"{type(e).__name__} reached the reference interpreter: {expr_to_str(e)}; "
                "lowering should have replaced it"
            )
        return handler(e)

    def _var(self, v: E.Var) -> Operand:
        if not self.scope.is_defined(v):
            raise InternalError(
                f"variable '{v.name}' is used outside the loop or let that defines it"
            )
        return ("v", self.scope.slot(v))

    def _binary(self, op: Callable[[Any, Any], Any], a: E.PrimExpr, b: E.PrimExpr) -> Operand:
        oa, ob = self.operand(a), self.operand(b)
        if oa[0] == "c" and ob[0] == "c":
            try:
                return ("c", op(oa[1], ob[1]))
            except InternalError:
                pass  # e.g. a constant division by zero: an error only if it runs
        return ("f", _call_binary(op, oa, ob))

    def _binop(self, e: E.BinOp) -> Operand:
        if e.op in (E.BinaryOp.AND, E.BinaryOp.OR) and dt.lanes_of(e.dtype) == 1:
            # scalar && and || short-circuit, as in C: `i < n && A[i] > 0` must not read A[n]
            fa, fb = self.compile(e.a), self.compile(e.b)
            if e.op is E.BinaryOp.AND:
                return ("f", lambda env: fb(env) if fa(env) else np.False_)
            return ("f", lambda env: np.True_ if fa(env) else fb(env))
        return self._binary(binary_fn(e.op, e.dtype, lambda: expr_to_str(e)), e.a, e.b)

    def _not(self, e: E.Not) -> Operand:
        fa = self.compile(e.a)
        if dt.lanes_of(e.dtype) > 1:
            return ("f", lambda env: np.logical_not(fa(env)))
        return ("f", lambda env: np.False_ if fa(env) else np.True_)

    def _select(self, e: E.Select) -> Operand:
        fc, ft, ff = (self.compile(x) for x in (e.cond, e.true_value, e.false_value))
        if dt.lanes_of(e.dtype) > 1:
            return ("f", lambda env: np.where(fc(env), ft(env), ff(env)))

        def select(env: Env) -> Any:  # both branches run, as in vector code
            c, t, f = fc(env), ft(env), ff(env)
            return t if c else f

        return ("f", select)

    def _cast(self, e: E.Cast) -> Operand:
        conv = cast_fn(e.dtype)
        o = self.operand(e.value)
        if o[0] == "c":
            return ("c", conv(o[1]))
        f = _as_fn(o)
        return ("f", lambda env: conv(f(env)))

    def _call(self, e: E.Call) -> Operand:
        if e.op is E.Intrinsic.LIKELY:
            return self.operand(e.args[0])
        if e.op in E.WARP_SHUFFLES:
            raise ArgumentError(
                f"{expr_to_str(e)} exchanges values between the lanes of a GPU warp, which the "
                "reference interpreter cannot do: it runs threads one after another; run the "
                "kernel with the CUDA emulator (ember.codegen_cuda.emulator.emulate)"
            )
        if e.op is E.Intrinsic.IF_THEN_ELSE:
            return self._if_then_else(e)
        if e.op in E.PACKED_CALLS:
            if e.op is E.Intrinsic.PACK_ARRAY:
                raise InternalError(f"{expr_to_str(e)} outside a call_packed")
            from ember.tir.interp.packed import compile_call_packed

            slot = lambda v: self.data_slot(_DataOnly(v))  # noqa: E731
            return ("f", compile_call_packed(e, self.compile, slot))
        if e.op in E.EXTERN_CALLS:
            name = e.args[0]
            assert isinstance(name, E.StringImm)
            fn, operands = extern_fn(name.value), e.args[1:]
        else:
            fn, operands = INTRINSICS[e.op], e.args
        args = [self.compile(a) for a in operands]
        if len(args) == 1:
            (f0,) = args
            call: Fn = lambda env: fn(f0(env))  # noqa: E731
        elif len(args) == 2:
            f0, f1 = args
            call = lambda env: fn(f0(env), f1(env))  # noqa: E731
        else:
            call = lambda env: fn(*[f(env) for f in args])  # noqa: E731
        if operands and value_dtype(e.dtype) != value_dtype(operands[0].dtype):
            conv, inner = cast_fn(e.dtype), call
            call = lambda env: conv(inner(env))  # noqa: E731
        return ("f", call)

    def _if_then_else(self, e: E.Call) -> Operand:
        """Only the branch taken is evaluated: the guarded read of a padding never happens."""
        fc, ft, ff = (self.compile(x) for x in e.args)
        if dt.lanes_of(e.args[0].dtype) > 1:  # per-lane test: the branches read no memory
            return ("f", lambda env: np.where(fc(env), ft(env), ff(env)))
        return ("f", lambda env: ft(env) if fc(env) else ff(env))

    def _ramp(self, e: E.Ramp) -> Operand:
        iota = np.arange(e.lanes, dtype=value_dtype(e.dtype))
        ob, os_ = self.operand(e.base), self.operand(e.stride)
        if ob[0] == "c" and os_[0] == "c":
            return ("c", ob[1] + os_[1] * iota)
        fb, fs = _as_fn(ob), _as_fn(os_)
        return ("f", lambda env: fb(env) + fs(env) * iota)

    def _broadcast(self, e: E.Broadcast) -> Operand:
        npdt, lanes = value_dtype(e.dtype), e.lanes
        o = self.operand(e.value)
        if o[0] == "c":
            return ("c", np.full(lanes, o[1], dtype=npdt))
        f = _as_fn(o)
        return ("f", lambda env: np.full(lanes, f(env), dtype=npdt))

    def _let(self, e: E.Let) -> Operand:
        fv = self.compile(e.value)
        slot = self.scope.define(e.var)
        fb = self.compile(e.body)
        self.scope.undefine(e.var)

        def let(env: Env) -> Any:
            env[slot] = fv(env)
            return fb(env)

        return ("f", let)

    def _load(self, e: E.BufferLoad) -> Operand:
        slot = self.data_slot(e.buffer)
        return ("f", memory.compile_load(e.buffer, e.indices, e.dtype, slot, self.compile))

    def data_slot(self, buf: Any) -> int:
        if not self.scope.is_defined(buf.data):
            raise InternalError(
                f"buffer '{buf.name}' is neither a parameter nor allocated where it is used"
            )
        return self.scope.slot(buf.data)


class _DataOnly:
    """A buffer known only by its data variable (a packed call's array argument)."""

    def __init__(self, data: E.Var) -> None:
        self.data, self.name = data, data.name


__all__ = ["ExprCompiler", "Scope", "scalar_constant"]
