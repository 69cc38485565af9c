"""The expression simplifier: children first, then constant folding, then the rule table.

:class:`Simplifier` is the mutator behind :meth:`Analyzer.simplify`. It
rewrites bottom-up: once a node's children are simplified it folds the node
if its operands are constants (:mod:`ember.tir.arith.fold`), otherwise tries
the rules of :mod:`ember.tir.arith.rewrite_rules` for its operator in order;
a rule's result is simplified again, so rules can build naive expressions.
Variables bound to values are replaced by them; a ``Select`` with a decided
condition keeps only its branch; a ``Let`` of a constant or a variable is
inlined. An unchanged expression is returned as the same object.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ember.errors import InternalError
from ember.tir import dtype as dt
from ember.tir import expr as E
from ember.tir.arith.fold import fold_binary, fold_cast, fold_compare
from ember.tir.arith.pattern import root_of
from ember.tir.arith.rewrite_rules import RULES_BY_ROOT
from ember.tir.functor import Mutator, substitute, uses_var

if TYPE_CHECKING:
    from ember.tir.arith.analyzer import Analyzer

MAX_DEPTH = 48  # nested re-simplifications of rule results; a guard against rule cycles


def fold(e: E.PrimExpr) -> E.PrimExpr | None:
    """The constant value of ``e`` when its operands are constants, else None."""
    if isinstance(e, E.BinOp):
        return fold_binary(e.op, e.a, e.b, e.dtype)
    if isinstance(e, E.Compare):
        return fold_compare(e.op, e.a, e.b)
    if isinstance(e, E.Not) and isinstance(e.a, E.IntImm):
        return E.IntImm(e.dtype, 1 - int(e.a.value != 0))
    if isinstance(e, E.Cast):
        if e.value.dtype == e.dtype:
            return e.value
        return fold_cast(e.dtype, e.value)
    return None


class Simplifier(Mutator):
    """The rewriting visitor behind ``Analyzer.simplify``: bottom-up rules with memoized results."""

    def __init__(self, ana: Analyzer) -> None:
        self.ana = ana
        self.memo: dict[int, tuple[Any, Any]] = {}
        self.depth = 0

    def visit(self, node: Any) -> Any:
        hit = self.memo.get(id(node))
        if hit is not None and hit[0] is node:
            return hit[1]
        out = self._method(node)(self, node)
        self.memo[id(node)] = (node, out)
        if id(out) not in self.memo:
            self.memo[id(out)] = (out, out)
        return out

    def generic_visit(self, node: Any) -> Any:
        new = Mutator.generic_visit(self, node)
        return self.rewrite(new) if isinstance(new, E.PrimExpr) else new

    def rewrite(self, e: E.PrimExpr) -> E.PrimExpr:
        folded = fold(e)
        if folded is not None:
            return folded
        for rule in RULES_BY_ROOT.get(root_of(e), ()):
            out = rule.apply(e, self.ana)
            if out is None or out is e:
                continue
            if out.dtype != e.dtype:
                raise InternalError(
                    f"simplifier rule {rule.name!r} changed the dtype of {e!r} "
                    f"({e.dtype}) to {out.dtype}: {out!r}"
                )
            if self.ana.keys.key(out) == self.ana.keys.key(e):
                continue
            if self.depth >= MAX_DEPTH:
                return out
            self.depth += 1
            try:
                return self.visit(out)
            finally:
                self.depth -= 1
        return e

    def visit_Var(self, v: E.Var) -> E.PrimExpr:
        return self.ana.value_of(v)

    def visit_Select(self, e: E.Select) -> E.PrimExpr:
        cond = self.visit(e.cond)
        # a vectorized select keeps its scalar condition in a broadcast: fold that too,
        # before visiting the branch that is dropped (unrolled select chains stay cheap)
        known = cond.value if isinstance(cond, E.Broadcast) else cond
        if isinstance(known, E.IntImm):
            return self.visit(e.true_value if known.value else e.false_value)
        tv, fv = self.visit(e.true_value), self.visit(e.false_value)
        if cond is e.cond and tv is e.true_value and fv is e.false_value:
            return self.rewrite(e)
        return self.rewrite(E.Select(e.dtype, cond, tv, fv))

    def visit_Let(self, e: E.Let) -> E.PrimExpr:
        value = self.visit(e.value)
        if isinstance(value, (E.IntImm, E.FloatImm, E.Var)):
            return self.visit(substitute(e.body, {e.var: value}))
        with self.ana.scope():
            if dt.is_int(value.dtype) and dt.lanes_of(value.dtype) == 1:
                self.ana.bind_bound(e.var, self.ana.bound(value))
            body = Simplifier(self.ana).visit(e.body)
        if not uses_var(body, lambda v: v is e.var):
            return body
        if value is e.value and body is e.body:
            return e
        return E.Let(e.dtype, e.var, value, body)
