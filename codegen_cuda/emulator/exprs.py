"""Expressions -> closures over per-thread numpy values, for the SIMT emulator.

A value is *uniform* (a numpy scalar, or a ``(1, n)`` array for an n-lane
vector: the same in every thread) or *per-thread* (a ``(lanes,)`` array, or
``(lanes, n)`` for vectors), one entry per lane of the chunk (see
:mod:`.grid`). numpy broadcasting mixes the two, so thread-invariant index
arithmetic stays scalar and cheap. The meaning of each operator comes from the
reference interpreter's tables (:mod:`ember.tir.interp.ops`), so dtype
semantics (wrap-around, float16 rounding, C division, bfloat16 in float32)
match the oracle. What SIMT adds: ``&&``/``||``, ``Select`` and ``if_then_else`` evaluate their
conditional operands only for the threads that need them (environment slot 0
holds the active-thread mask, ``None`` when all are active), so a guarded load
is never checked for the threads its guard excludes; integer division checks
its divisor only in active threads. A warp shuffle gathers across the lanes of
each warp (:mod:`.warps`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from ember.codegen_cuda.emulator.grid import CHUNK, MASK
from ember.codegen_cuda.emulator.warps import shuffle
from ember.errors import InternalError
from ember.tir import dtype as dt
from ember.tir import expr as E
from ember.tir.interp.exprs import Scope, scalar_constant
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

_INT_DIVISION = (
    E.BinaryOp.DIV,
    E.BinaryOp.FLOORDIV,
    E.BinaryOp.FLOORMOD,
    E.BinaryOp.TRUNCDIV,
    E.BinaryOp.TRUNCMOD,
)


def narrow(mask: np.ndarray | None, cond: np.ndarray) -> np.ndarray:
    """The active mask restricted to the threads where the per-thread ``cond`` holds."""
    return cond if mask is None else mask & cond


def _column(x: Any) -> Any:
    return x[:, None] if np.ndim(x) == 1 else x


def _vector_shape(x: Any) -> Any:
    """A uniform vector as ``(1, n)`` so it broadcasts against ``(lanes, n)``."""
    return x.reshape(1, -1) if np.ndim(x) == 1 else x


def _safe_division(fn: Callable[[Any, Any], Any]) -> Callable[[Any, Any, Any], Any]:
    """Integer division whose divisor is checked for zero only in active threads."""

    def divide(a: Any, b: Any, mask: Any) -> Any:
        if np.ndim(b) and mask is not None and not b.all():
            inactive = ~mask if np.ndim(b) == 1 else ~mask[:, None]
            b = np.where((b == 0) & inactive, b.dtype.type(1), b)
        return fn(a, b)

    return divide


class ExprCompiler:
    """Compiles expressions; ``site`` is the printed statement being compiled, for messages."""

    def __init__(self, scope: Scope) -> None:
        self.scope = scope
        self.sites: list[str] = []
        self.site = -1
        self._table: dict[type, Callable[[Any], Fn]] = {
            E.Var: self._var,
            E.SizeVar: self._var,
            E.IntImm: self._const,
            E.FloatImm: self._const,
            E.BinOp: self._binop,
            E.Compare: self._compare,
            E.Not: self._not,
            E.Select: self._select,
            E.Cast: self._cast,
            E.Call: self._call,
            E.Ramp: self._ramp,
            E.Broadcast: self._broadcast,
            E.Let: self._let,
            E.BufferLoad: self._load,
        }

    def enter_site(self, text: str) -> int:
        """Make ``text`` (a printed statement) the site of the accesses compiled next."""
        self.sites.append(" ".join(text.split()))
        self.site = len(self.sites) - 1
        return self.site

    def compile(self, e: E.PrimExpr) -> Fn:
        handler = self._table.get(type(e))
        if handler is None:
            raise InternalError(
                f"{type(e).__name__} reached the SIMT emulator: {expr_to_str(e)}; "
                "lowering should have replaced it"
            )
        return handler(e)

    def _var(self, v: E.Var) -> Fn:
        if not self.scope.is_defined(v):
            raise InternalError(
                f"variable '{v.name}' is used outside the loop or let that defines it"
            )
        slot = self.scope.slot(v)
        return lambda env: env[slot]

    def _const(self, e: E.IntImm | E.FloatImm) -> Fn:
        value = scalar_constant(e.value, e.dtype)
        return lambda env: value

    def _binop(self, e: E.BinOp) -> Fn:
        fa, fb = self.compile(e.a), self.compile(e.b)
        if e.op in (E.BinaryOp.AND, E.BinaryOp.OR) and dt.lanes_of(e.dtype) == 1:
            return _short_circuit(e.op is E.BinaryOp.AND, fa, fb)
        if e.op is E.BinaryOp.MIN:
            return lambda env: np.minimum(fa(env), fb(env))
        if e.op is E.BinaryOp.MAX:
            return lambda env: np.maximum(fa(env), fb(env))
        fn = binary_fn(e.op, e.dtype, lambda: expr_to_str(e))
        if e.op in _INT_DIVISION and not dt.is_float(e.dtype):
            divide = _safe_division(fn)
            return lambda env: divide(fa(env), fb(env), env[MASK])
        return lambda env: fn(fa(env), fb(env))

    def _compare(self, e: E.Compare) -> Fn:
        fn, fa, fb = COMPARE[e.op], self.compile(e.a), self.compile(e.b)
        return lambda env: fn(fa(env), fb(env))

    def _not(self, e: E.Not) -> Fn:
        fa = self.compile(e.a)
        return lambda env: np.logical_not(fa(env))

    def _select(self, e: E.Select) -> Fn:
        fc, ft, ff = (self.compile(x) for x in (e.cond, e.true_value, e.false_value))
        if dt.lanes_of(e.cond.dtype) > 1:  # a per-lane vector condition: both sides run
            return lambda env: np.where(fc(env), ft(env), ff(env))

        def select(env: Env) -> Any:
            c = fc(env)
            if np.ndim(c) == 0:
                return ft(env) if c else ff(env)
            mask = env[MASK]
            on, off = narrow(mask, c), narrow(mask, ~c)
            if not off.any():
                return ft(env)
            if not on.any():
                return ff(env)
            env[MASK] = on
            t = ft(env)
            env[MASK] = off
            f = ff(env)
            env[MASK] = mask
            return np.where(_column(c) if np.ndim(t) == 2 or np.ndim(f) == 2 else c, t, f)

        return select

    def _cast(self, e: E.Cast) -> Fn:
        conv, f = cast_fn(e.dtype), self.compile(e.value)
        return lambda env: conv(f(env))

    def _call(self, e: E.Call) -> Fn:
        if e.op is E.Intrinsic.LIKELY:
            return self.compile(e.args[0])
        if e.op in E.WARP_SHUFFLES:
            return self._shuffle(e)
        if e.op is E.Intrinsic.IF_THEN_ELSE:  # a Select evaluates its sides per thread, too
            return self._select(E.Select(e.dtype, *e.args))
        if e.op in E.EXTERN_CALLS:
            name = e.args[0]
            assert isinstance(name, E.StringImm)
            fn, operands = extern_fn(name.value), e.args[1:]
        else:
            fn, operands = INTRINSICS[e.op], e.args
        args = tuple(self.compile(a) for a in operands)
        call: Fn = lambda env: fn(*[f(env) for f in args])  # noqa: E731
        if operands and value_dtype(e.dtype) != value_dtype(operands[0].dtype):
            conv, inner = cast_fn(e.dtype), call
            call = lambda env: conv(inner(env))  # noqa: E731
        return call

    def _shuffle(self, e: E.Call) -> Fn:
        fv, fo = (self.compile(a) for a in e.args)
        op, site = e.op, self.sites[self.site] if self.sites else expr_to_str(e)
        return lambda env: shuffle(env[CHUNK], env[MASK], op, fv(env), fo(env), site)

    def _ramp(self, e: E.Ramp) -> Fn:
        iota = np.arange(e.lanes, dtype=value_dtype(e.dtype)).reshape(1, -1)
        fb, fs = self.compile(e.base), self.compile(e.stride)
        return lambda env: _column(fb(env)) + _column(fs(env)) * iota

    def _broadcast(self, e: E.Broadcast) -> Fn:
        npdt, lanes, f = value_dtype(e.dtype), e.lanes, self.compile(e.value)

        def broadcast(env: Env) -> Any:
            v = f(env)
            if np.ndim(v) == 0:
                return np.full((1, lanes), v, dtype=npdt)
            return np.broadcast_to(np.asarray(v, dtype=npdt)[:, None], (v.shape[0], lanes))

        return broadcast

    def _let(self, e: E.Let) -> Fn:
        fv = self.compile(e.value)
        slot = self.scope.define(e.var)
        fb = self.compile(e.body)
        self.scope.undefine(e.var)

        def let(env: Env) -> Any:
            env[slot] = fv(env)
            return fb(env)

        return let

    def _load(self, e: E.BufferLoad) -> Fn:
        if len(e.indices) != 1:
            raise InternalError(
                f"load of '{e.buffer.name}' with {len(e.indices)} indices reached the emulator; "
                "device kernels access flattened buffers with one index"
            )
        slot, site = self.data_slot(e.buffer), self.site
        fi = self.compile(e.indices[0])
        if dt.lanes_of(e.dtype) > 1:
            return lambda env: env[slot].load(_vector_shape(fi(env)), env, site)
        return lambda env: env[slot].load(fi(env), env, site)

    def data_slot(self, buf: Any) -> int:
        if not self.scope.is_defined(buf.data):
            raise InternalError(
                f"buffer '{buf.name}' is neither a parameter nor allocated where it is used"
            )
        return self.scope.slot(buf.data)


def _short_circuit(is_and: bool, fa: Fn, fb: Fn) -> Fn:
    """C's ``&&`` / ``||`` per thread: ``b`` runs only in the threads that need it."""

    def run(env: Env) -> Any:
        a = fa(env)
        if np.ndim(a) == 0:
            if bool(a) != is_and:
                return a
            return fb(env)
        mask = env[MASK]
        need = narrow(mask, a if is_and else ~a)
        if not need.any():
            return a
        env[MASK] = need
        b = fb(env)
        env[MASK] = mask
        return (a & b) if is_and else (a | b)

    return run


__all__ = ["ExprCompiler", "narrow"]
