"""The closure compiler both executors share: TIR -> nested Python closures over an environment.

The reference interpreter (:mod:`ember.tir.interp`) and the CUDA backend's SIMT
emulator (:mod:`ember.codegen_cuda.emulator`) run TIR the same way: each node is
compiled once into a function of the *environment* (a list with one slot per
variable and per buffer pointer), found through a dispatch table keyed by node
class, so executing never dispatches on node types. This module holds what the
two have in common — the slot bookkeeping (:class:`Scope`), the operand
protocol that reads constants and variables inline, the dispatch tables and the
handlers whose meaning does not depend on how many threads a value stands for
(variables, constants, comparisons, casts, intrinsic calls, ``Let``, sequences,
``LetStmt``, serial loops, ``Evaluate``, ``Assert``). Subclasses override only
what differs: the interpreter's values are scalars, the emulator's carry one
entry per thread under an active-thread mask and its memory is per scope.

Handlers return an :data:`Operand`: ``("c", value)`` for a value known while
compiling, ``("v", slot)`` for a variable read, ``("f", fn)`` for anything else.

An expression is a DAG: a fused chain of ops that each read a value twice (``max(x,
-x)``, SiLU) doubles its tree with every op. Where the tree is large, each subexpression
it reads more than once (:mod:`ember.tir.shared_subexprs`: not under a lazy branch) is
compiled once and evaluated once per evaluation of the whole expression, its value kept
until the next; evaluated as a tree, a 20-op chain took 2**20 reads per element.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from ember.errors import ArgumentError, InternalError
from ember.tir import dtype as dt
from ember.tir import expr as E
from ember.tir import stmt as S
from ember.tir.bf16 import round_to_bf16
from ember.tir.interp.ops import (
    COMPARE,
    INTRINSICS,
    cast_fn,
    extern_fn,
    value_dtype,
    wrap_fn,
)
from ember.tir.op import REINTERPRET_NAME
from ember.tir.printer import expr_to_str, stmt_to_str
from ember.tir.shared_subexprs import shared_subexpressions

Env = list
Fn = Callable[[Env], Any]
Operand = tuple[str, Any]  # ("c", constant) | ("v", slot) | ("f", function)

PRECOMPUTED_LOOP_LIMIT = 1 << 16  # loops up to this extent keep their values in a tuple


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
    """A constant as an executor's value: wrapped into integer range, rounded to its type."""
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


def call_binary(op: Callable[[Any, Any], Any], a: Operand, b: Operand) -> Fn:
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


def as_fn(o: Operand) -> Fn:
    """An operand as a closure of the environment, for handlers that need a plain function."""
    kind, x = o
    if kind == "f":
        return x
    if kind == "v":
        return lambda env: env[x]
    return lambda env: x


class ExprCompilerBase:
    """Expressions -> closures; ``engine`` names the executor in messages."""

    engine = "reference interpreter"

    def __init__(self, scope: Scope) -> None:
        self.scope = scope
        self._depth = 0  # expressions being compiled: 0 between top-level ones
        self._shared: dict[int, E.PrimExpr] = {}  # of the top-level expression compiled
        self._made: dict[int, Operand] = {}  # shared subexpressions compiled, by id
        self._values: dict[int, Any] = {}  # their values in the current evaluation
        self._table: dict[type, Callable[[Any], Operand]] = {
            E.Var: self._var,
            E.SizeVar: self._var,
            E.IntImm: self._const,
            E.FloatImm: self._const,
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
        return as_fn(self.operand(e))

    def operand(self, e: E.PrimExpr) -> Operand:
        if self._depth > 0:
            return self._operand(e)
        self._shared, self._made, self._values = shared_subexpressions(e), {}, {}
        self._depth = 1
        try:
            o = self._operand(e)
        finally:
            self._depth = 0
        if not self._made or o[0] != "f":
            return o
        f, values = o[1], self._values

        def fresh(env: Env) -> Any:  # each evaluation computes the shared values again
            values.clear()
            return f(env)

        return ("f", fresh)

    def _operand(self, e: E.PrimExpr) -> Operand:
        made = self._made.get(id(e))
        if made is not None:
            return made
        handler = self._table.get(type(e))
        if handler is None:
            raise InternalError(
                f"{type(e).__name__} reached the {self.engine}: {expr_to_str(e)}; "
                "lowering should have replaced it"
            )
        o = handler(e)
        if id(e) in self._shared and o[0] == "f":
            f, values, key = o[1], self._values, id(e)

            def once(env: Env) -> Any:
                if key not in values:
                    values[key] = f(env)
                return values[key]

            o = self._made[key] = ("f", once)
        return o

    def data_slot(self, buf: Any) -> int:
        if not self.scope.is_defined(buf.data):
            raise InternalError(
                f"buffer '{buf.name}' is neither a parameter nor allocated where it is used"
            )
        return self.scope.slot(buf.data)

    # -- shared handlers ------------------------------------------------------------
    def _var(self, v: E.Var) -> Operand:
        if not self.scope.is_defined(v):
            raise InternalError(
                f"variable '{v.name}' is used outside the loop or let that defines it"
            )
        return ("v", self.scope.slot(v))

    def _const(self, e: E.IntImm | E.FloatImm) -> Operand:
        return ("c", scalar_constant(e.value, e.dtype))

    def _binary(self, op: Callable[[Any, Any], Any], a: E.PrimExpr, b: E.PrimExpr) -> Operand:
        oa, ob = self.operand(a), self.operand(b)
        if oa[0] == "c" and ob[0] == "c":
            try:
                return ("c", op(oa[1], ob[1]))
            except InternalError:
                pass  # e.g. a constant division by zero: an error only if it runs
        return ("f", call_binary(op, oa, ob))

    def _cast(self, e: E.Cast) -> Operand:
        conv = cast_fn(e.dtype)
        o = self.operand(e.value)
        if o[0] == "c":
            return ("c", conv(o[1]))
        f = as_fn(o)
        return ("f", lambda env: conv(f(env)))

    def _call(self, e: E.Call) -> Operand:
        if e.op is E.Intrinsic.LIKELY:
            return self.operand(e.args[0])
        if e.op in E.WARP_SHUFFLES:
            return self._warp_shuffle(e)
        if e.op is E.Intrinsic.IF_THEN_ELSE:
            return self._if_then_else(e)
        if e.op in E.PACKED_CALLS:
            return self._packed_call(e)
        if e.op is E.Intrinsic.PREFETCH:  # a cache hint: nothing to compute
            return ("c", 0)
        if e.op is E.Intrinsic.ACCESS_PTR:
            raise ArgumentError(
                "access_ptr: an address for a C/CUDA function; the interpreter and the CUDA "
                "emulator have no addresses, run compiled code (ember.build) instead"
            )
        if e.op in E.TENSOR_CORE_CALLS:
            return self._tensor_core_call(e)
        if e.op in E.EXTERN_CALLS:
            name = e.args[0]
            assert isinstance(name, E.StringImm)
            if name.value == REINTERPRET_NAME:
                return self._reinterpret(e)
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
        wrap = wrap_fn(e.dtype)
        if wrap is not None:  # int4/uint4: abs(-8), shift_left... wrap to 4 bits
            wrapped_call = call
            call = lambda env: wrap(wrapped_call(env))  # noqa: E731
        return ("f", call)

    def _let(self, e: E.Let) -> Operand:
        fv = self.compile(e.value)
        slot = self.scope.define(e.var)
        fb = self.compile(e.body)
        self.scope.undefine(e.var)

        def let(env: Env) -> Any:
            env[slot] = fv(env)
            return fb(env)

        return ("f", let)

    # -- what each executor defines -------------------------------------------------
    def _binop(self, e: E.BinOp) -> Operand:
        raise NotImplementedError

    def _not(self, e: E.Not) -> Operand:
        raise NotImplementedError

    def _select(self, e: E.Select) -> Operand:
        raise NotImplementedError

    def _ramp(self, e: E.Ramp) -> Operand:
        raise NotImplementedError

    def _broadcast(self, e: E.Broadcast) -> Operand:
        raise NotImplementedError

    def _load(self, e: E.BufferLoad) -> Operand:
        raise NotImplementedError

    def _warp_shuffle(self, e: E.Call) -> Operand:
        raise NotImplementedError

    def _if_then_else(self, e: E.Call) -> Operand:
        """``if_then_else(c, t, f)``: like ``Select``, but only the side taken is evaluated."""
        raise NotImplementedError

    def _reinterpret(self, e: E.Call) -> Operand:
        """``tir.reinterpret``: the operand's bits read as the call's type (numpy's view)."""
        value = e.args[1]
        source = dt.numpy_dtype(dt.element_of(value.dtype))
        target = dt.numpy_dtype(dt.element_of(e.dtype))
        f = self.compile(value)
        return ("f", lambda env: np.asarray(f(env), dtype=source).view(target)[()])

    def _tensor_core_call(self, e: E.Call) -> Operand:
        """``ptx_mma``, ``ptx_ldmatrix``, ``tvm_*_matrix_sync``...: warp-collective, GPU only."""
        raise InternalError(
            f"{expr_to_str(e)} reached the {self.engine}; tensor-core intrinsics run in CUDA "
            "kernels and the SIMT emulator only"
        )

    def _packed_call(self, e: E.Call) -> Operand:
        """``call_packed``: a call back into the function registry (host code only)."""
        raise InternalError(f"{expr_to_str(e)} reached the {self.engine}; it runs on the host")


class StmtCompilerBase:
    """Statements -> closures that run them; subclasses add or replace handlers in ``_table``."""

    engine = "reference interpreter"

    def __init__(self, scope: Scope, exprs: ExprCompilerBase) -> None:
        self.scope = scope
        self.exprs = exprs
        self._table: dict[type, Callable[[Any], Fn]] = {
            S.For: self._for,
            S.BufferStore: self._store,
            S.SeqStmt: self._seq,
            S.IfThenElse: self._if,
            S.LetStmt: self._let,
            S.Allocate: self._allocate,
            S.AttrStmt: self._attr,
            S.AssertStmt: self._assert,
            S.Evaluate: self._evaluate,
            S.Barrier: lambda s: nothing,
        }

    def compile(self, s: S.Stmt) -> Fn:
        handler = self._table.get(type(s))
        if handler is None:
            raise InternalError(f"the {self.engine} cannot run {type(s).__name__}")
        return handler(s)

    def enter_site(self, text: Callable[[], str]) -> None:
        """Hook: the statement being compiled, for executors whose messages name it."""

    def _scoped(self, var: E.Var, body_stmt: S.Stmt) -> tuple[int, Fn]:
        """``body_stmt`` compiled with ``var`` defined; the variable's slot and the body."""
        slot = self.scope.define(var)
        body = self.compile(body_stmt)
        self.scope.undefine(var)
        return slot, body

    def _serial_loop(self, var: E.Var, lo: E.PrimExpr, extent: E.PrimExpr, stmt: S.Stmt) -> Fn:
        """A loop run in order; constant bounds precompute the values of the loop variable."""
        f_lo, f_ext = self.exprs.compile(lo), self.exprs.compile(extent)
        slot, body = self._scoped(var, stmt)
        npdt = value_dtype(var.dtype)
        if (
            isinstance(lo, E.IntImm)
            and isinstance(extent, E.IntImm)
            and extent.value <= PRECOMPUTED_LOOP_LIMIT
        ):
            values = tuple(np.arange(lo.value, lo.value + extent.value, dtype=npdt))

            def run_const(env: Env) -> None:
                for v in values:
                    env[slot] = v
                    body(env)

            return run_const
        return self._dynamic_loop(slot, body, f_lo, f_ext, npdt)

    def _dynamic_loop(self, slot: int, body: Fn, f_lo: Fn, f_ext: Fn, npdt: np.dtype) -> Fn:
        def run(env: Env) -> None:
            start = f_lo(env)
            for v in np.arange(start, start + f_ext(env), dtype=npdt):
                env[slot] = v
                body(env)

        return run

    def _seq(self, s: S.SeqStmt) -> Fn:
        fns = tuple(self.compile(x) for x in s.stmts)
        if not fns:
            return nothing
        if len(fns) == 1:
            return fns[0]
        if len(fns) == 2:
            f0, f1 = fns

            def run2(env: Env) -> None:
                f0(env)
                f1(env)

            return run2

        def run(env: Env) -> None:
            for f in fns:
                f(env)

        return run

    def _if(self, s: S.IfThenElse) -> Fn:
        cond = self.exprs.compile(s.condition)
        then = self.compile(s.then_case)
        if s.else_case is None:

            def run_if(env: Env) -> None:
                if cond(env):
                    then(env)

            return run_if
        other = self.compile(s.else_case)

        def run_if_else(env: Env) -> None:
            if cond(env):
                then(env)
            else:
                other(env)

        return run_if_else

    def _let(self, s: S.LetStmt) -> Fn:
        self.enter_site(lambda: f"{expr_to_str(s.var)} = {expr_to_str(s.value)}")
        value = self.exprs.compile(s.value)
        slot, body = self._scoped(s.var, s.body)

        def run(env: Env) -> None:
            env[slot] = value(env)
            body(env)

        return run

    def _assert(self, s: S.AssertStmt) -> Fn:
        self.enter_site(lambda: f"assert {expr_to_str(s.condition)}")
        cond = self.exprs.compile(s.condition)
        body, message, holds = self.compile(s.body), s.message, self._holds

        def run(env: Env) -> None:
            if not holds(cond(env), env):
                raise ArgumentError(message)
            body(env)

        return run

    def _holds(self, c: Any, env: Env) -> bool:
        """Whether an assertion's condition value holds (everywhere it is checked)."""
        return bool(c)

    def _evaluate(self, s: S.Evaluate) -> Fn:
        self.enter_site(lambda: stmt_to_str(s))
        value = self.exprs.compile(s.value)

        def run(env: Env) -> None:
            value(env)

        return run

    # -- what each executor defines -------------------------------------------------
    def _for(self, s: S.For) -> Fn:
        raise NotImplementedError

    def _store(self, s: S.BufferStore) -> Fn:
        raise NotImplementedError

    def _allocate(self, s: S.Allocate) -> Fn:
        raise NotImplementedError

    def _attr(self, s: S.AttrStmt) -> Fn:
        return self.compile(s.body)


def nothing(env: Env) -> None:
    """The closure of a statement with no effect (no-ops compile to it)."""
    return None


__all__ = [
    "Env",
    "ExprCompilerBase",
    "Fn",
    "Operand",
    "Scope",
    "StmtCompilerBase",
    "as_fn",
    "call_binary",
    "nothing",
    "scalar_constant",
]
