"""Expressions -> closures over per-thread numpy values, for the SIMT emulator.

A value is *uniform* (a numpy scalar, or a ``(1, n)`` array for an n-lane
vector: the same in every thread) or *per-thread* (a ``(lanes,)`` array, or
``(lanes, n)`` for vectors), one entry per lane of the chunk (see
:mod:`.grid`). numpy broadcasting mixes the two, so thread-invariant index
arithmetic stays scalar and cheap. The compiler is the reference interpreter's
(:mod:`ember.tir.interp.closures`), with the handlers below overridden; the
meaning of each operator comes from the interpreter's tables
(:mod:`ember.tir.interp.ops`), so dtype
semantics (wrap-around, float16 rounding, C division, bfloat16 in float32)
match the oracle; ``min``/``max`` of floats are C's ``fmin``/``fmax`` (a NaN operand
is dropped), as the printed CUDA says. What SIMT adds: ``&&``/``||``, ``Select`` and
``if_then_else`` evaluate their conditional operands only for the threads that need
them (environment slot 0 holds the active-thread mask, ``None`` when all are active),
so a guarded load
is never checked for the threads its guard excludes; integer division checks
its divisor only in active threads. A warp shuffle gathers across the lanes of
each warp (:mod:`.warps`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from ember.codegen_cuda.emulator.grid import CHUNK, MASK
from ember.codegen_cuda.emulator.tensor_core import tensor_core_runner
from ember.codegen_cuda.emulator.warps import shuffle
from ember.errors import InternalError
from ember.tir import dtype as dt
from ember.tir import expr as E
from ember.tir.interp.closures import Env, ExprCompilerBase, Fn, Operand, Scope
from ember.tir.interp.ops import binary_fn, value_dtype
from ember.tir.printer import expr_to_str

_INT_DIVISION = (
    E.BinaryOp.DIV,
    E.BinaryOp.FLOORDIV,
    E.BinaryOp.FLOORMOD,
    E.BinaryOp.TRUNCDIV,
    E.BinaryOp.TRUNCMOD,
)


def _zero_max(a: Any, b: Any) -> Any:
    return a + b  # of two zeros: +0.0 unless both are -0.0


def _zero_min(a: Any, b: Any) -> Any:
    return -(-a - b)  # of two zeros: -0.0 unless both are +0.0


def _c_min_max(nan_dropping: Callable[[Any, Any], Any], zeros: Callable[[Any, Any], Any]):
    """CUDA's fminf/fmaxf (fmin/fmax, __hmin/__hmax): numpy's fmin/fmax return the operand
    that is not NaN, as they do (np.minimum/np.maximum would propagate the NaN); and of
    +0.0 and -0.0, max gives +0.0 and min -0.0 whatever their order, as an H200 (sm_90,
    nvcc 13, no fast-math) computes them, where numpy returns the first."""

    def run(a: Any, b: Any) -> Any:
        r = nan_dropping(a, b)
        if r.dtype.kind != "f":
            return r
        both_zero = (a == 0) & (b == 0)
        if np.ndim(both_zero) == 0:
            return zeros(a, b).astype(r.dtype) if both_zero else r
        return np.where(both_zero, zeros(a, b), r).astype(r.dtype) if both_zero.any() else r

    return run


# MIN/MAX print as C's fmin/fmax; for integers they are plain min/max
_C_MIN_MAX = {
    E.BinaryOp.MIN: _c_min_max(np.fmin, _zero_min),
    E.BinaryOp.MAX: _c_min_max(np.fmax, _zero_max),
}


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


class ExprCompiler(ExprCompilerBase):
    """Compiles expressions; ``site`` is the printed statement being compiled, for messages."""

    engine = "SIMT emulator"

    def __init__(self, scope: Scope) -> None:
        super().__init__(scope)
        del self._table[E.StringImm]  # device code has no strings
        self.sites: list[str] = []
        self.site = -1

    def enter_site(self, text: str) -> int:
        """Make ``text`` (a printed statement) the site of the accesses compiled next."""
        self.sites.append(" ".join(text.split()))
        self.site = len(self.sites) - 1
        return self.site

    def _binop(self, e: E.BinOp) -> Operand:
        if e.op in (E.BinaryOp.AND, E.BinaryOp.OR) and dt.lanes_of(e.dtype) == 1:
            fa, fb = self.compile(e.a), self.compile(e.b)
            return ("f", _short_circuit(e.op is E.BinaryOp.AND, fa, fb))
        if e.op in _C_MIN_MAX:
            return self._binary(_C_MIN_MAX[e.op], e.a, e.b)
        fn = binary_fn(e.op, e.dtype, lambda: expr_to_str(e))
        if e.op in _INT_DIVISION and not dt.is_float(e.dtype):
            divide = _safe_division(fn)
            fa, fb = self.compile(e.a), self.compile(e.b)
            return ("f", lambda env: divide(fa(env), fb(env), env[MASK]))
        return self._binary(fn, e.a, e.b)

    def _not(self, e: E.Not) -> Operand:
        fa = self.compile(e.a)
        return ("f", lambda env: np.logical_not(fa(env)))

    def _select(self, e: E.Select) -> Operand:
        fc, ft, ff = (self.compile(x) for x in (e.cond, e.true_value, e.false_value))
        if dt.lanes_of(e.cond.dtype) > 1:  # a per-lane vector condition: both sides run
            return ("f", lambda env: np.where(fc(env), ft(env), ff(env)))

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

        return ("f", select)

    def _if_then_else(self, e: E.Call) -> Operand:
        """Per thread, like ``Select``: each side runs only for the threads that take it."""
        return self._select(E.Select(e.dtype, *e.args))

    def _warp_shuffle(self, e: E.Call) -> Operand:
        fv, fo = (self.compile(a) for a in e.args)
        op, site = e.op, self.sites[self.site] if self.sites else expr_to_str(e)
        return ("f", lambda env: shuffle(env[CHUNK], env[MASK], op, fv(env), fo(env), site))

    def _tensor_core_call(self, e: E.Call) -> Operand:
        """A warp-collective tensor-core statement (:mod:`.mma`, :mod:`.wmma`); returns 0."""
        site = self.site
        text = self.sites[site] if self.sites else expr_to_str(e)
        runner = tensor_core_runner(e, site, text)
        fns = [self.compile(a) for a in e.args if not isinstance(a, E.StringImm)]

        def run(env: Env) -> Any:
            runner(env, [f(env) for f in fns])
            return np.int32(0)

        return ("f", run)

    def _ramp(self, e: E.Ramp) -> Operand:
        iota = np.arange(e.lanes, dtype=value_dtype(e.dtype)).reshape(1, -1)
        fb, fs = self.compile(e.base), self.compile(e.stride)
        return ("f", lambda env: _column(fb(env)) + _column(fs(env)) * iota)

    def _broadcast(self, e: E.Broadcast) -> Operand:
        npdt, lanes, f = value_dtype(e.dtype), e.lanes, self.compile(e.value)

        def broadcast(env: Env) -> Any:
            v = f(env)
            if np.ndim(v) == 0:
                return np.full((1, lanes), v, dtype=npdt)
            return np.broadcast_to(np.asarray(v, dtype=npdt)[:, None], (v.shape[0], lanes))

        return ("f", broadcast)

    def _load(self, e: E.BufferLoad) -> Operand:
        if len(e.indices) != 1:
            raise InternalError(
                f"load of '{e.buffer.name}' with {len(e.indices)} indices reached the emulator; "
                "device kernels access flattened buffers with one index"
            )
        slot, site = self.data_slot(e.buffer), self.site
        fi = self.compile(e.indices[0])
        if dt.lanes_of(e.dtype) > 1:
            return ("f", lambda env: env[slot].load(_vector_shape(fi(env)), env, site))
        return ("f", lambda env: env[slot].load(fi(env), env, site))


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
