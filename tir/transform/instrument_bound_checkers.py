"""Pass ``instrument_bound_checkers``: check every buffer access at run time (as TVM does).

Runs only when the context sets ``tir.instrument_bound_checkers``; otherwise it
returns its input. Expects flattened accesses (one index each).
Guarantees: before each statement that loads or stores, an ``AssertStmt`` per
access checks ``0 <= index < size`` (the buffer's flat size; a ``Ramp`` index
checks its first and last lane), so an out-of-bounds access stops the function
with an error naming the buffer instead of touching memory it does not own (the
LLVM module raises it as :class:`ember.errors.ArgumentError`; the CUDA emulator
too). A load that runs only under a condition — a side of ``if_then_else``, the
right operand of ``&&``/``||`` — is checked only where that condition holds, so
a guarded read of padding is not an error. Both sides of a ``Select`` are
evaluated (as in TVM), so both are checked. Accesses whose index uses a variable
bound by a ``Let`` expression inside the statement are not checked (the check
stands before the statement, where that variable does not exist yet); lowering
does not produce such indices. Checks the simplifier proves true are dropped.
"""

from __future__ import annotations

from ember.tir import dtype as dt
from ember.tir import expr as E
from ember.tir import stmt as S
from ember.tir.buffer import Buffer
from ember.tir.functor import Mutator, Visitor, uses_var
from ember.tir.transform.context import PassContext
from ember.tir.transform.simplify import simplify


class _Collect(Visitor):
    """The (condition, message) checks of the accesses in one expression."""

    def __init__(self, func_name: str) -> None:
        self.func_name = func_name
        self.guards: list[E.PrimExpr] = []
        self.lets: set[E.Var] = set()
        self.checks: list[tuple[E.PrimExpr, str]] = []

    def guarded(self, guard: E.PrimExpr, e: E.PrimExpr) -> None:
        self.guards.append(guard)
        self.visit(e)
        self.guards.pop()

    def visit_Call(self, e: E.Call) -> None:
        if e.op is not E.Intrinsic.IF_THEN_ELSE or dt.lanes_of(e.dtype) > 1:
            self.generic_visit(e)  # a vector if_then_else evaluates both sides
            return
        cond, then, other = e.args
        self.visit(cond)
        self.guarded(cond, then)
        self.guarded(E.logical_not(cond), other)

    def visit_BinOp(self, e: E.BinOp) -> None:
        if e.op in (E.BinaryOp.AND, E.BinaryOp.OR) and dt.lanes_of(e.dtype) == 1:
            self.visit(e.a)
            self.guarded(e.a if e.op is E.BinaryOp.AND else E.logical_not(e.a), e.b)
            return
        self.generic_visit(e)

    def visit_Let(self, e: E.Let) -> None:
        self.visit(e.value)
        self.lets.add(e.var)
        self.visit(e.body)

    def visit_BufferLoad(self, e: E.BufferLoad) -> None:
        self.generic_visit(e)
        self.access(e.buffer, e.indices, "load")

    def access(self, buf: Buffer, indices: tuple[E.PrimExpr, ...], what: str) -> None:
        if len(indices) != 1:
            return  # not flattened (a pass ran out of order): nothing sound to check
        (index,) = indices
        if uses_var(index, lambda v: v in self.lets):
            return
        span = _span(index)
        if span is None:
            return
        lo, hi = span
        size = buf.flat_size()
        if size.dtype != hi.dtype:
            size = E.cast(hi.dtype, size)
        cond = E.logical_and(lo >= 0, hi < size)
        for g in reversed(self.guards):
            cond = E.logical_or(E.logical_not(g), cond)
        message = (
            f"out-of-bounds {what} of buffer '{buf.name}' in '{self.func_name}': "
            f"the index must be in [0, {size})"
        )
        self.checks.append((cond, message))


def _span(index: E.PrimExpr) -> tuple[E.PrimExpr, E.PrimExpr] | None:
    """The smallest and largest element an index reaches (None: a vector we cannot bound)."""
    if dt.lanes_of(index.dtype) == 1:
        return index, index
    if isinstance(index, E.Ramp) and isinstance(index.stride, E.IntImm):
        last = index.base + index.stride * (index.lanes - 1)
        return (index.base, last) if index.stride.value >= 0 else (last, index.base)
    if isinstance(index, E.Broadcast):
        return index.value, index.value
    return None


class _Instrument(Mutator):
    def __init__(self, func_name: str) -> None:
        self.func_name = func_name

    def _checked(
        self, s: S.Stmt, exprs: tuple[E.PrimExpr, ...], store: S.BufferStore | None
    ) -> S.Stmt:
        collect = _Collect(self.func_name)
        for e in exprs:
            collect.visit(e)
        if store is not None:
            collect.access(store.buffer, store.indices, "store")
        for cond, message in reversed(collect.checks):
            s = S.AssertStmt(cond, message, s)
        return s

    def visit_BufferStore(self, s: S.BufferStore) -> S.Stmt:
        return self._checked(s, (s.value, *s.indices), s)

    def visit_AsyncCopy(self, s: S.AsyncCopy) -> S.Stmt:
        st = s.store
        return self._checked(s, (st.value, *st.indices), st)

    def visit_Evaluate(self, s: S.Evaluate) -> S.Stmt:
        return self._checked(s, (s.value,), None)

    def visit_For(self, s: S.For) -> S.Stmt:
        return self._checked(self.generic_visit(s), (s.min, s.extent), None)

    def visit_IfThenElse(self, s: S.IfThenElse) -> S.Stmt:
        return self._checked(self.generic_visit(s), (s.condition,), None)

    def visit_LetStmt(self, s: S.LetStmt) -> S.Stmt:
        return self._checked(self.generic_visit(s), (s.value,), None)


def instrument_bound_checkers(func: S.PrimFunc, ctx: PassContext | None = None) -> S.PrimFunc:
    """Runs the pass when ``tir.instrument_bound_checkers`` is set in the context, else returns
    ``func``."""
    if ctx is None or not ctx.get("tir.instrument_bound_checkers"):
        return func
    return simplify(_Instrument(func.name).visit_func(func))
