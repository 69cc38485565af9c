"""Expressions -> Python closures, for the reference interpreter.

Each expression node is compiled once into a function of the environment (a
list with one slot per variable and per buffer pointer) that returns the node's
value; executing never dispatches on node types. The dispatch table and the
handlers the SIMT emulator shares live in :mod:`.closures`; this module adds
what is particular to scalar execution: C's short-circuit ``&&``/``||``,
``Select`` on a scalar condition, vectors as 1-D arrays, and bounds-checked
loads (:mod:`.memory`). The meaning of every operator comes from the tables in
:mod:`ember.tir.interp.ops`.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ember.errors import ArgumentError, InternalError
from ember.tir import dtype as dt
from ember.tir import expr as E
from ember.tir.interp import memory
from ember.tir.interp.closures import (
    Env,
    ExprCompilerBase,
    Fn,
    Operand,
    Scope,
    as_fn,
    scalar_constant,
)
from ember.tir.interp.ops import binary_fn, value_dtype
from ember.tir.interp.packed import compile_call_packed
from ember.tir.printer import expr_to_str


class ExprCompiler(ExprCompilerBase):
    """Compiles expressions for the single-thread reference interpreter."""

    engine = "reference interpreter"

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

    def _warp_shuffle(self, e: E.Call) -> Operand:
        raise ArgumentError(
            f"{expr_to_str(e)} exchanges values between the lanes of a GPU warp, which the "
            "reference interpreter cannot do: it runs threads one after another; run the "
            "kernel with the CUDA emulator (ember.codegen_cuda.emulator.emulate)"
        )

    def _packed_call(self, e: E.Call) -> Operand:
        if e.op is E.Intrinsic.PACK_ARRAY:
            raise InternalError(f"{expr_to_str(e)} outside a call_packed")
        slot = lambda v: self.data_slot(_DataOnly(v))  # noqa: E731
        return ("f", compile_call_packed(e, self.compile, slot))

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
        fb, fs = as_fn(ob), as_fn(os_)
        return ("f", lambda env: fb(env) + fs(env) * iota)

    def _broadcast(self, e: E.Broadcast) -> Operand:
        npdt, lanes = value_dtype(e.dtype), e.lanes
        o = self.operand(e.value)
        if o[0] == "c":
            return ("c", np.full(lanes, o[1], dtype=npdt))
        f = as_fn(o)
        return ("f", lambda env: np.full(lanes, f(env), dtype=npdt))

    def _load(self, e: E.BufferLoad) -> Operand:
        slot = self.data_slot(e.buffer)
        return ("f", memory.compile_load(e.buffer, e.indices, e.dtype, slot, self.compile))


class _DataOnly:
    """A buffer known only by its data variable (a packed call's array argument)."""

    def __init__(self, data: E.Var) -> None:
        self.data, self.name = data, data.name


__all__ = ["ExprCompiler", "Fn", "Scope", "scalar_constant"]
