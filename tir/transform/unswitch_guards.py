"""Pass ``unswitch_guards``: a ``likely`` guard that a loop's body never changes, and that
``loop_partition`` cannot split a loop on, becomes an ``if`` around two copies of that body.

Lowering guards the edge tile of a split that does not divide its axis. When the split's
outer loop is fused with others into one parallel loop, the guard reads the fused
variable through a division or a remainder: a GEMM of 104 rows in tiles of 6 rows fused
with its column blocks guards rows 2-5 of every tile with ``likely(fused % 18 < 17)``.
``loop_partition`` splits a loop only on guards affine in its variable, so such a guard
stayed inside the k loop, tested on every multiply-add of the micro-kernel, and LLVM
did not unswitch it: that GEMM (k 400) ran at 119 GF/s on one core of a 2-core Intel Xeon
(AVX-512), 238 GF/s with the test hoisted.

Here the body of the loop whose variable the guard reads is copied once per outcome,
``for f: if c(f): <body, c true> else: <body, c false>``: in the first copy every guard
conjunct equal to ``c`` is dropped, in the second every guard holding it is dropped
(its else branch kept), so the whole tiles run the micro-kernel with no test at all.

Which conjuncts: those of a ``likely`` guard of an ``if`` (a store, not a ``select``'s
lanes), pure, mentioning the host loop's variable inside a division or remainder (an
affine one is ``loop_partition``'s), mentioning no variable bound inside the body, and
standing inside a loop of that body (else the test runs once a body and costs nothing).
Host loops are serial and parallel ``For`` loops; inner loops are done first, and the body
is copied at most ``MAX_VERSIONS`` times per loop, as ``unswitch_selects`` does. A body
with a barrier or an asynchronous copy is left whole: threads of a GPU block that took
different copies would wait at different barriers.

It runs late in the common list, after ``unroll_loops`` and ``simplify``: before that the
row guard reads the unrolled row variable (bound inside the body), and only the
simplifier makes the guards of rows 2-5 (``f % 18 * 6 + r < 104``) one condition.

Expects: guards as ``likely(cond)`` with ``cond`` a conjunction (``loop_partition``'s
form). Guarantees: the same stores with the same values in the same order; the hoisted
``if`` is plain (no ``likely``: both outcomes are common).
"""

from __future__ import annotations

from typing import Any

from ember.tir import expr as E
from ember.tir import stmt as S
from ember.tir.functor import MemoMutator, contains, uses_var
from ember.tir.structural import structural_equal
from ember.tir.transform.loop_partition import conjuncts, impure, likely_arg
from ember.tir.transform.unswitch_selects import HoistToLoops

_DIVISIONS = (
    E.BinaryOp.FLOORDIV,
    E.BinaryOp.FLOORMOD,
    E.BinaryOp.TRUNCDIV,
    E.BinaryOp.TRUNCMOD,
)


def _divides(c: E.PrimExpr, var: E.Var) -> bool:
    """Whether ``var`` appears in ``c`` under a division or a remainder."""
    return contains(
        c,
        lambda n: isinstance(n, E.BinOp) and n.op in _DIVISIONS and uses_var(n, lambda v: v is var),
    )


class _Find:
    """The first guard conjunct of ``body`` that may be hoisted to ``var``'s loop."""

    def __init__(self, var: E.Var) -> None:
        self.var = var
        self.bound: set[E.Var] = set()
        self.found: E.PrimExpr | None = None

    def walk(self, s: S.Stmt, in_loop: bool) -> None:
        if self.found is not None:
            return
        if isinstance(s, S.For):
            self.bound.add(s.loop_var)
            self.walk(s.body, True)
        elif isinstance(s, S.LetStmt):
            self.bound.add(s.var)
            self.walk(s.body, in_loop)
        elif isinstance(s, S.IfThenElse):
            if in_loop:
                self.consider(s.condition)
            self.walk(s.then_case, in_loop)
            if s.else_case is not None:
                self.walk(s.else_case, in_loop)
        elif isinstance(s, S.SeqStmt):
            for part in s.stmts:
                self.walk(part, in_loop)
        else:
            for child in _child_stmts(s):
                self.walk(child, in_loop)

    def consider(self, cond: E.PrimExpr) -> None:
        inner = likely_arg(cond)
        if inner is None:
            return
        for c in conjuncts(inner):
            if (
                _divides(c, self.var)
                and not impure(c)
                and not uses_var(c, lambda v: v in self.bound)
            ):
                self.found = c
                return


def _child_stmts(s: S.Stmt) -> list[S.Stmt]:
    """The statements directly inside ``s`` (an allocation's, an attribute's body)."""
    body = getattr(s, "body", None)
    return [body] if isinstance(body, S.Stmt) else []


class _Decide(MemoMutator):
    """Every guard holding conjunct ``cond`` with the conjunct decided as ``value``."""

    def __init__(self, cond: E.PrimExpr, value: bool) -> None:
        super().__init__()
        self.cond, self.value = cond, value

    def visit(self, node: Any) -> Any:
        if isinstance(node, E.PrimExpr):
            return node
        return super().visit(node)

    def visit_SeqStmt(self, s: S.SeqStmt) -> S.Stmt:
        new = self.generic_visit(s)
        return new if new is s else S.seq(*new.stmts)  # the dropped guards' empty places go

    def visit_IfThenElse(self, s: S.IfThenElse) -> S.Stmt:
        new = self.generic_visit(s)
        inner = likely_arg(s.condition)
        if inner is None:
            return new
        parts = conjuncts(inner)
        rest = [c for c in parts if not structural_equal(c, self.cond)]
        if len(rest) == len(parts):
            return new
        if not self.value:
            return new.else_case if new.else_case is not None else S.no_op()
        if not rest:
            return new.then_case
        cond = rest[0]
        for c in rest[1:]:
            cond = E.logical_and(cond, c)
        guard = E.Call("bool", E.Intrinsic.LIKELY, (cond,))
        return S.IfThenElse(guard, new.then_case, new.else_case)


_SYNC = (S.Barrier, S.AsyncCopy, S.AsyncCommit, S.AsyncWait)


def _split(body: S.Stmt, var: E.Var, budget: int) -> S.Stmt:
    if budget < 2 or contains(body, lambda n: isinstance(n, _SYNC)):
        return body  # a GPU block's threads must meet the same barriers
    finder = _Find(var)
    finder.walk(body, False)
    cond = finder.found
    if cond is None:
        return body
    then = _split(_Decide(cond, True).visit(body), var, budget // 2)
    other = _split(_Decide(cond, False).visit(body), var, budget // 2)
    return S.IfThenElse(cond, then, other)


def unswitch_guards(func: S.PrimFunc) -> S.PrimFunc:
    """``func`` with its loop-invariant, non-affine ``likely`` guards hoisted (module doc);
    the same object if none is."""
    return HoistToLoops(_split).visit_func(func)
