"""Pass ``widen_index_dtypes``: int32 loop variables become int64 where int32 overflows.

TE makes every loop variable int32, as TVM does for int32 shapes. A loop of more
than 2**31 - 1 iterations, or an index such as ``i * 50000 + j`` into a buffer of
2.5e9 elements, then wraps around: the loop runs zero times or the access lands
somewhere else. This pass finds them from constant bounds and widens the loop
variables involved, on every target alike.

Expects: nothing in particular; it runs before the simplifier folds constants (which
would wrap a folded int32 product) and again after ``flatten_buffers`` (whose flat
index multiplies by the strides).
Guarantees: every int32 expression in an index, a comparison or a loop bound whose
constant bounds (from the loop ranges) leave int32 has its loop variables widened
to int64 and is computed in int64
(int32 constants and variables beside them are cast); a loop whose last iteration
value exceeds int32 has an int64 variable. A value stored into a narrower buffer,
a ``let`` of an int32 variable and the arguments of calls other than
``if_then_else`` are cast back to the type they had, so only index arithmetic
changes: an int32 value the program computes (not an index) wraps as it does in
TVM. Expressions with an unknown bound (symbolic sizes) are left alone: an
int32 size cannot make an int32 loop overflow. A function with nothing to widen is
returned unchanged.
"""

from __future__ import annotations

from typing import Any

from ember.tir import dtype as dt
from ember.tir import expr as E
from ember.tir import stmt as S
from ember.tir.arith.const_int_bound import Bound, ConstIntBound
from ember.tir.functor import MemoMutator, Visitor, free_vars

INT32_MIN, INT32_MAX = -(1 << 31), (1 << 31) - 1
WIDE = "int64"


def _overflows(bound: Bound) -> bool:
    """A finite bound outside int32 (an unknown side is not evidence of overflow)."""
    lo, hi = bound
    return (isinstance(hi, int) and hi > INT32_MAX) or (isinstance(lo, int) and lo < INT32_MIN)


class _FindOverflow(Visitor):
    """Collects the int32 loop variables that must become int64."""

    def __init__(self) -> None:
        self.bounds = ConstIntBound()
        self.loop_vars: set[E.Var] = set()
        self.wide: set[E.Var] = set()
        self.in_index = False  # inside an index, a comparison or a loop bound
        # an expression met again with the same ``in_index`` and loop bounds finds nothing
        # new: skipped, so a subexpression shared by many sums is walked once
        self.context = 0  # changes with the loop bounds
        self.seen: set[tuple[int, bool, int]] = set()
        self.alive: list[E.PrimExpr] = []  # keeps the ids in ``seen`` from being reused

    def visit(self, node: Any) -> Any:
        if isinstance(node, E.PrimExpr):
            key = (id(node), self.in_index, self.context)
            if key in self.seen:
                return None
            self.seen.add(key)
            self.alive.append(node)
        return self._method(node)(self, node)

    def visit_For(self, s: S.For) -> None:
        self._in_index(s.min, s.extent)
        lo, _ = self.bounds(s.min)
        _, hi = self.bounds(s.min + s.extent - 1)
        v = s.loop_var
        if v.dtype == "int32":
            self.loop_vars.add(v)
            if _overflows((lo, hi)) or s.extent.dtype == WIDE:
                self.wide.add(v)
        self.bounds.var_bounds[v] = (lo, hi)
        self.bounds.cache.clear()
        self.context += 1
        self.visit(s.body)

    def _in_index(self, *exprs: E.PrimExpr) -> None:
        saved, self.in_index = self.in_index, True
        for e in exprs:
            self.visit(e)
        self.in_index = saved

    def visit_BufferLoad(self, e: E.BufferLoad) -> None:
        self._in_index(*e.indices)

    def visit_BufferStore(self, s: S.BufferStore) -> None:
        self.visit(s.value)
        self._in_index(*s.indices)

    def visit_Compare(self, e: E.Compare) -> None:
        self._in_index(e.a, e.b)  # a split's tail guard compares a rebuilt index

    def visit_BinOp(self, e: E.BinOp) -> None:
        self.visit(e.a)
        self.visit(e.b)
        if self.in_index and e.dtype == "int32" and _overflows(self.bounds(e)):
            self._widen_vars_of(e)

    def _widen_vars_of(self, e: E.PrimExpr) -> None:
        self.wide.update(v for v in free_vars(e) if v in self.loop_vars)


class _Widen(MemoMutator):
    """Replaces the widened variables and re-derives the dtypes above them."""

    def __init__(self, new_vars: dict[E.Var, E.Var]) -> None:
        super().__init__()
        self.new_vars = new_vars

    def visit_Var(self, v: E.Var) -> E.PrimExpr:
        return self.new_vars.get(v, v)

    def visit_BinOp(self, e: E.BinOp) -> E.PrimExpr:
        a, b = self.visit(e.a), self.visit(e.b)
        if a is e.a and b is e.b:
            return e
        a, b = _match(a, b)
        return E.BinOp(a.dtype, e.op, a, b)

    def visit_Compare(self, e: E.Compare) -> E.PrimExpr:
        a, b = self.visit(e.a), self.visit(e.b)
        if a is e.a and b is e.b:
            return e
        a, b = _match(a, b)
        return E.Compare(e.dtype, e.op, a, b)

    def visit_Select(self, e: E.Select) -> E.PrimExpr:
        c, t, f = self.visit(e.cond), self.visit(e.true_value), self.visit(e.false_value)
        if c is e.cond and t is e.true_value and f is e.false_value:
            return e
        t, f = _match(t, f)
        return E.Select(t.dtype, c, t, f)

    def visit_Call(self, e: E.Call) -> E.PrimExpr:
        args = tuple(self.visit(a) for a in e.args)
        if all(a is b for a, b in zip(args, e.args)):
            return e
        if e.op is E.Intrinsic.IF_THEN_ELSE:
            t, f = _match(args[1], args[2])
            return E.Call(t.dtype, e.op, (args[0], t, f))
        return E.Call(e.dtype, e.op, tuple(_as(a, old.dtype) for a, old in zip(args, e.args)))

    def visit_Ramp(self, e: E.Ramp) -> E.PrimExpr:
        base, stride = self.visit(e.base), self.visit(e.stride)
        if base is e.base and stride is e.stride:
            return e
        base, stride = _match(base, stride)
        return E.Ramp(dt.with_lanes(base.dtype, e.lanes), base, stride, e.lanes)

    def visit_Broadcast(self, e: E.Broadcast) -> E.PrimExpr:
        value = self.visit(e.value)
        if value is e.value:
            return e
        return E.Broadcast(dt.with_lanes(value.dtype, e.lanes), value, e.lanes)

    def visit_Let(self, e: E.Let) -> E.PrimExpr:
        value, body = self.visit(e.value), self.visit(e.body)
        if value is e.value and body is e.body:
            return e
        return E.Let(body.dtype, e.var, _as(value, e.var.dtype), body)

    def visit_LetStmt(self, s: S.LetStmt) -> S.Stmt:
        value, body = self.visit(s.value), self.visit(s.body)
        if value is s.value and body is s.body:
            return s
        return S.LetStmt(s.var, _as(value, s.var.dtype), body)

    def visit_BufferStore(self, s: S.BufferStore) -> S.Stmt:
        value = self.visit(s.value)
        indices = tuple(self.visit(i) for i in s.indices)
        if value is s.value and all(a is b for a, b in zip(indices, s.indices)):
            return s
        return S.BufferStore(s.buffer, _as(value, s.value.dtype), indices)

    def visit_For(self, s: S.For) -> S.Stmt:
        var = self.new_vars.get(s.loop_var, s.loop_var)
        lo, ext, body = self.visit(s.min), self.visit(s.extent), self.visit(s.body)
        if var is s.loop_var and lo is s.min and ext is s.extent and body is s.body:
            return s
        return S.For(
            var, _as(lo, var.dtype), _as(ext, var.dtype), s.kind, body, s.thread_tag,
            s.annotations,
        )  # fmt: skip


def _as(e: E.PrimExpr, dtype: str) -> E.PrimExpr:
    if e.dtype == dtype:
        return e
    if isinstance(e, E.IntImm) and dt.lanes_of(dtype) == 1:
        return E.const(e.value, dtype)
    return E.Cast(dtype, e)


def _match(a: E.PrimExpr, b: E.PrimExpr) -> tuple[E.PrimExpr, E.PrimExpr]:
    """Both sides in the wider integer type (int32 constants are rewritten, not cast)."""
    if a.dtype == b.dtype:
        return a, b
    ea, eb = dt.element_of(a.dtype), dt.element_of(b.dtype)
    if dt.is_int(ea) and dt.is_int(eb) and WIDE in (ea, eb):
        return _as(a, dt.with_lanes(WIDE, dt.lanes_of(a.dtype))), _as(
            b, dt.with_lanes(WIDE, dt.lanes_of(b.dtype))
        )
    return a, b


def widen_index_dtypes(func: S.PrimFunc) -> S.PrimFunc:
    """Runs the pass on ``func``; returns it unchanged when nothing can overflow."""
    finder = _FindOverflow()
    finder.visit(func.body)
    if not finder.wide:
        return func
    new_vars = {v: E.Var(v.name, WIDE) for v in finder.wide}
    return _Widen(new_vars).visit_func(func)
