"""Pass ``simplify``: simplify every expression, and drop the statements that do nothing.

Expects: any PrimFunc (before or after flattening).
Guarantees: each expression is replaced by the :class:`Analyzer`'s simplified
form, computed knowing the range of every enclosing loop and the condition of
every enclosing ``if``; an ``if`` whose condition (also inside ``likely``) is
provably true or false is replaced by the branch that runs; a loop of extent
1 becomes its body with the loop variable replaced by the loop's start (GPU
thread loops excepted: they define the launch shape); loops of extent 0,
empty sequences, loops and ``if``s with empty bodies, and constant
``Evaluate`` statements are removed; an assertion that provably holds is
dropped. The result computes the same thing. A function with nothing to
simplify is returned as the same object; the input is never modified.
"""

from __future__ import annotations

from typing import Any

from ember.tir import expr as E
from ember.tir import stmt as S
from ember.tir.arith import Analyzer
from ember.tir.arith.linear import is_index_type
from ember.tir.functor import Mutator, substitute, uses_var


def _is_no_op(s: S.Stmt | None) -> bool:
    return s is None or (isinstance(s, S.SeqStmt) and not s.stmts)


def _unlikely(cond: E.PrimExpr) -> E.PrimExpr:
    if isinstance(cond, E.Call) and cond.op is E.Intrinsic.LIKELY:
        return cond.args[0]
    return cond


class _Simplify(Mutator):
    def __init__(self) -> None:
        self.ana = Analyzer()

    def visit(self, node: Any) -> Any:
        if isinstance(node, E.PrimExpr):
            return self.ana.simplify(node)
        return self._method(node)(self, node)

    def visit_For(self, s: S.For) -> S.Stmt:
        lo, ext = self.visit(s.min), self.visit(s.extent)
        if isinstance(ext, E.IntImm) and ext.value <= 0:
            return S.no_op()
        if E.is_const_int(ext, 1) and s.kind is not S.ForKind.THREAD_BINDING:
            return self.visit(substitute(s.body, {s.loop_var: lo}))
        with self.ana.scope():
            self.ana.bind(s.loop_var, E.Range(lo, ext))
            body = self.visit(s.body)
        if _is_no_op(body):
            return S.no_op()
        if lo is s.min and ext is s.extent and body is s.body:
            return s
        return S.For(s.loop_var, lo, ext, s.kind, body, s.thread_tag, s.annotations)

    def visit_IfThenElse(self, s: S.IfThenElse) -> S.Stmt:
        cond = self.visit(s.condition)
        plain = _unlikely(cond)
        if isinstance(plain, E.IntImm):
            taken = s.then_case if plain.value else s.else_case
            return S.no_op() if taken is None else self.visit(taken)
        with self.ana.constraint(plain):
            then = self.visit(s.then_case)
        other = s.else_case
        if other is not None:
            with self.ana.constraint(E.logical_not(plain)):
                other = self.visit(other)
            if _is_no_op(other):
                other = None
        if _is_no_op(then) and other is None:
            return S.no_op()
        if _is_no_op(then):  # only the else branch does something
            return S.IfThenElse(self.ana.simplify(E.logical_not(plain)), other)  # type: ignore[arg-type]
        if cond is s.condition and then is s.then_case and other is s.else_case:
            return s
        return S.IfThenElse(cond, then, other)

    def visit_LetStmt(self, s: S.LetStmt) -> S.Stmt:
        value = self.visit(s.value)
        with self.ana.scope():
            if is_index_type(value.dtype):
                self.ana.bind_bound(s.var, self.ana.bound(value))
            body = self.visit(s.body)
        if not uses_var(body, lambda v: v is s.var):
            return body
        if value is s.value and body is s.body:
            return s
        return S.LetStmt(s.var, value, body)

    def visit_AttrStmt(self, s: S.AttrStmt) -> S.Stmt:
        value = self.visit(s.value)
        with self.ana.scope():
            if s.key == "thread_extent" and isinstance(s.node, E.Var):
                self.ana.bind(s.node, E.Range(E.const(0, s.node.dtype), value))
            body = self.visit(s.body)
        if value is s.value and body is s.body:
            return s
        return S.AttrStmt(s.node, s.key, value, body)

    def visit_SeqStmt(self, s: S.SeqStmt) -> S.Stmt:
        stmts = [self.visit(x) for x in s.stmts]
        if all(a is b for a, b in zip(stmts, s.stmts)):
            return s
        return S.seq(*[x for x in stmts if not _is_no_op(x)])

    def visit_AssertStmt(self, s: S.AssertStmt) -> S.Stmt:
        cond = self.visit(s.condition)
        if isinstance(cond, E.IntImm) and cond.value:
            return self.visit(s.body)
        with self.ana.constraint(cond):
            body = self.visit(s.body)
        if cond is s.condition and body is s.body:
            return s
        return S.AssertStmt(cond, s.message, body)

    def visit_Evaluate(self, s: S.Evaluate) -> S.Stmt:
        value = self.visit(s.value)
        if isinstance(value, (E.IntImm, E.FloatImm)):
            return S.no_op()
        return s if value is s.value else S.Evaluate(value)


def simplify(func: S.PrimFunc) -> S.PrimFunc:
    """``func`` with every expression simplified and dead statements removed."""
    pass_ = _Simplify()
    pass_.ana.bind_shapes(func.buffers)
    pass_.ana.bind_positive(func.attr("positive_vars", ()))
    return pass_.visit_func(func)


def simplify_stmt(stmt: S.Stmt) -> S.Stmt:
    """The same on a bare statement (for tests and for passes that build statements)."""
    return _Simplify().visit(stmt)
