"""Facts about a schedule's dataflow that lowering needs: inlined bodies, consumers, loop paths.

Inlined stages have no loops of their own; their expression is substituted
into every reader (``inlined_body``). The *loop path* of a stage lists, from
the outermost, every loop that encloses its body: the loops of the stages it
is computed at, down to its own leaves. Bound inference compares loop paths to
decide which loops a producer's region spans.
"""

from __future__ import annotations

from typing import Any

from ember.errors import ScheduleError
from ember.tir import expr as E
from ember.tir.functor import Mutator, substitute
from ember.tir.schedule.schedule import AttachKind, Schedule, Stage
from ember.tir.te.tensor import ComputeOp, IterVar, PlaceholderOp


class _Inline(Mutator):
    def __init__(self, sch: Schedule, bodies: dict[int, E.PrimExpr]) -> None:
        self.sch = sch
        self.bodies = bodies

    def visit_ProducerLoad(self, e: E.ProducerLoad) -> E.PrimExpr:
        e = self.generic_visit(e)
        st = self.sch.stage_of(e.producer.op)
        if st is None or st.attach is not AttachKind.INLINE:
            return e
        op = st.op
        assert isinstance(op, ComputeOp)
        body = inlined_body(self.sch, st, self.bodies)
        vmap = {iv.var: idx for iv, idx in zip(op.axis, e.indices)}
        return substitute(body, vmap)

    def visit_Reduce(self, e: E.Reduce) -> E.PrimExpr:
        src = self.visit(e.source)
        cond = self.visit(e.condition) if e.condition is not None else None
        init = self.visit(e.init) if e.init is not None else None
        if src is e.source and cond is e.condition and init is e.init:
            return e
        return E.Reduce(e.dtype, e.combiner, src, e.axis, cond, init)


def inlined_body(sch: Schedule, st: Stage, memo: dict[int, E.PrimExpr]) -> E.PrimExpr:
    """The stage's body with every inlined producer substituted."""
    key = id(st)
    if key not in memo:
        assert isinstance(st.op, ComputeOp)
        memo[key] = _Inline(sch, memo).visit(st.op.body)
    return memo[key]


def producer_stages(sch: Schedule, body: E.PrimExpr) -> list[Stage]:
    """The non-inlined stages a (already inlined) body reads."""
    from ember.tir.functor import post_order_visit

    found: dict[int, Stage] = {}

    def visit(node: Any) -> None:
        if isinstance(node, E.ProducerLoad):
            st = sch.stage_of(node.producer.op)
            if st is not None:
                found.setdefault(id(st), st)

    post_order_visit(body, visit)
    return list(found.values())


def loop_path(st: Stage) -> list[tuple[Stage, IterVar]]:
    """Every loop enclosing the stage's body, outermost first, as (owning stage, leaf axis)."""
    return outer_path(st) + [(st, iv) for iv in st.leaf_iter_vars]


def outer_path(st: Stage) -> list[tuple[Stage, IterVar]]:
    """The loops enclosing the point where ``st`` is computed (empty at the root)."""
    if st.attach is not AttachKind.SCOPE:
        return []
    parent, ivar = st.attach_stage, st.attach_ivar
    assert parent is not None and ivar is not None
    idx = parent.leaf_iter_vars.index(ivar)
    return outer_path(parent) + [(parent, iv) for iv in parent.leaf_iter_vars[: idx + 1]]


def check_attach_tree(sch: Schedule) -> None:
    """Reject attachments that became invalid after later primitives (a split of the loop)."""
    for st in sch.stages:
        if st.attach is AttachKind.SCOPE:
            parent, ivar = st.attach_stage, st.attach_ivar
            assert parent is not None
            if ivar not in parent.leaf_iter_vars:
                axis = ivar.name if ivar is not None else "?"
                raise ScheduleError(
                    f"stage '{st.name}' is computed at axis '{axis}' of stage "
                    f"'{parent.name}', which was split or fused afterwards; "
                    "compute_at a current loop"
                )
            seen: set[int] = set()
            cur: Stage | None = st
            while cur is not None and cur.attach is AttachKind.SCOPE:
                if id(cur) in seen:
                    raise ScheduleError(f"stage '{st.name}': compute_at forms a cycle")
                seen.add(id(cur))
                cur = cur.attach_stage


def is_placeholder(st: Stage) -> bool:
    return isinstance(st.op, PlaceholderOp)
