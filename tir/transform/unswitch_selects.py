"""Pass ``unswitch_selects``: a ``select`` whose condition a loop's body never changes
becomes an ``if`` around two copies of that body.

A concatenation reads ``select(c < 58, A[..c..], B[..c - 58..])`` and a channel shuffle
interleaves two such sources; both arms are loaded for every element, and the one from
a channel-blocked tensor is a gather. When the condition depends only on loop variables
bound outside the body (the output channel, with the rows and columns inside), the body
is copied once per outcome: ``for c: if cond(c): <body with A> else: <body with B>``, so
each copy reads one source, a plain copy where that source is contiguous. ShuffleNet v2's
shuffle kernel (116 channels of 28x28, half of them from a blocked tensor) went from 72
to 45 us at one thread on the 2-core Zen 4 this was measured on.

Which selects: those whose condition is pure (no load, call or reduction), mentions the
host loop's variable, mentions no variable bound inside the body, is not a ``likely``
guard (``loop_partition``'s), and whose arms read memory (a select of two constants
costs less than a branch). Host loops are serial and parallel ``For`` loops (vectorized,
unrolled and thread loops are not: their variable is a lane or a thread) with a loop
inside (else the branch would run per element, where a select costs less). Inner loops
are done first, so a condition lands on the innermost loop it is invariant in; the body
is copied at most ``MAX_VERSIONS`` times per loop, so a concat of many inputs stops
splitting after two conditions.

Expects: any PrimFunc. Guarantees: the same stores with the same values in the same
order; each ``if`` copy has the hoisted condition's selects replaced by the arm it picks,
and ``simplify`` afterwards uses the condition to clean the indices (clamps such as
``min(c, 57)`` that the true arm no longer needs).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import Any

from ember.tir import expr as E
from ember.tir import stmt as S
from ember.tir.functor import MemoMutator, Mutator, contains, post_order_visit, uses_var
from ember.tir.structural import structural_equal
from ember.tir.transform.loop_partition import impure

MAX_VERSIONS = 4
_HOSTS = (S.ForKind.SERIAL, S.ForKind.PARALLEL)


def _reads(e: E.PrimExpr) -> bool:
    return contains(e, lambda n: isinstance(n, (E.BufferLoad, E.ProducerLoad)))


def _invariant_condition(body: S.Stmt, var: E.Var) -> E.PrimExpr | None:
    """The first select condition in ``body`` that the pass may hoist to ``var``'s loop
    (None also where the body has no loop: the branch would run per element)."""
    bound: set[E.Var] = set()
    loops: list[S.For] = []
    selects: list[E.Select] = []

    def collect(n: Any) -> None:
        if isinstance(n, S.For):
            bound.add(n.loop_var)
            loops.append(n)
        elif isinstance(n, (S.LetStmt, E.Let)):
            bound.add(n.var)
        elif isinstance(n, E.Select):
            selects.append(n)

    post_order_visit(body, collect, once=True)
    if not selects or not loops:
        return None
    for n in selects:
        c = n.cond
        if (
            not impure(c)
            and uses_var(c, lambda v: v is var)
            and not uses_var(c, lambda v: v in bound)
            and (_reads(n.true_value) or _reads(n.false_value))
        ):
            return c
    return None


class _Pick(MemoMutator):
    """Each select on ``cond`` replaced by the arm ``value`` picks (a shared subtree
    rewritten once)."""

    def __init__(self, cond: E.PrimExpr, value: bool) -> None:
        super().__init__()
        self.cond, self.value = cond, value

    def visit_Select(self, e: E.Select) -> E.PrimExpr:
        if structural_equal(e.cond, self.cond):
            return self.visit(e.true_value if self.value else e.false_value)
        return self.generic_visit(e)


def _split(body: S.Stmt, var: E.Var, budget: int) -> S.Stmt:
    if budget < 2:
        return body
    cond = _invariant_condition(body, var)
    if cond is None:
        return body
    then = _split(_Pick(cond, True).visit(body), var, budget // 2)
    other = _split(_Pick(cond, False).visit(body), var, budget // 2)
    return S.IfThenElse(cond, then, other)


class HoistToLoops(Mutator):
    """Hands each serial or parallel loop's body, inner loops first, to ``split(body,
    loop_var, MAX_VERSIONS)``, which returns it with some conditions hoisted (or the same
    object); expressions are not walked."""

    def __init__(self, split: Callable[[S.Stmt, E.Var, int], S.Stmt]) -> None:
        self.split = split

    def visit(self, node: Any) -> Any:
        if isinstance(node, E.PrimExpr):
            return node
        return self._method(node)(self, node)

    def visit_For(self, loop: S.For) -> S.Stmt:
        body = self.visit(loop.body)
        if loop.kind in _HOSTS:
            body = self.split(body, loop.loop_var, MAX_VERSIONS)
        return loop if body is loop.body else replace(loop, body=body)


def unswitch_selects(func: S.PrimFunc) -> S.PrimFunc:
    """``func`` with its loop-invariant selects hoisted (module doc); the same object if
    none is."""
    return HoistToLoops(_split).visit_func(func)
