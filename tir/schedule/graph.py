"""Facts about a schedule's dataflow that lowering needs: inlined bodies, consumers, loop paths.

Inlined stages have no loops of their own; their expression is substituted
into every reader (``inlined_body``). The *loop path* of a stage lists, from
the outermost, every loop that encloses its body: the loops of the stages it
is computed at, down to its own leaves. Bound inference compares loop paths to
decide which loops a producer's region spans.
"""

from __future__ import annotations

from collections.abc import Hashable
from enum import Enum
from typing import TYPE_CHECKING, Any

from ember.errors import ScheduleError
from ember.tir import expr as E
from ember.tir.functor import MemoMutator, field_values, post_order_visit, substitute
from ember.tir.node import IRNode
from ember.tir.schedule.attach import AttachKind
from ember.tir.schedule.relations import Fuse, Split
from ember.tir.te.tensor import ComputeOp, IterVar, PlaceholderOp

if TYPE_CHECKING:
    from ember.tir.schedule.schedule import Schedule, Stage


class _Interner(MemoMutator):
    """Makes structurally equal expressions one object (hash-consing), children first, so
    a node's key is its type, its children's identities and its other fields: a few
    values, whatever the depth. Variables are themselves (they are equal by identity)."""

    def __init__(self) -> None:
        super().__init__()
        self.table: dict[Hashable, E.PrimExpr] = {}

    def generic_visit(self, node: Any) -> Any:
        new = MemoMutator.generic_visit(self, node)
        if not isinstance(new, E.PrimExpr) or isinstance(new, E.Var):
            return new
        return self.table.setdefault(_shallow_key(new), new)


def _shallow_key(e: E.PrimExpr) -> Hashable:
    """``e``'s type and fields, its child nodes by identity (they are interned already)."""
    return (type(e), *(_part(v) for v in field_values(e)))


def _part(v: Any) -> Hashable:
    if isinstance(v, IRNode):
        return id(v)
    if isinstance(v, tuple):
        return tuple(_part(x) for x in v)
    if isinstance(v, float):
        return ("float", v.hex())  # 0.0 and -0.0 are equal as Python floats, not here
    if v is None or isinstance(v, (str, int, bool, Enum)):
        return (type(v), v)
    return ("obj", id(v))  # tensors, buffers, reducers: by identity


class _Inline(MemoMutator):
    """Substitutes inlined producers. The substituted bodies are interned (``interner``,
    shared by every stage of one lowering): ``max(y, -y)`` reads ``y`` directly and
    through the ``neg`` stage, and each read substituted its own copy of ``y``'s body, so
    a chain of stages that read a value twice doubled its expression with each stage (24
    such stages were 2**24 nodes and took forever to lower; now 24 times a stage's)."""

    def __init__(self, sch: Schedule, bodies: dict[Any, Any]) -> None:
        super().__init__()
        self.sch = sch
        self.bodies = bodies
        self.interner = bodies.setdefault("interner", _Interner())

    def visit_ProducerLoad(self, e: E.ProducerLoad) -> E.PrimExpr:
        e = self.generic_visit(e)
        st = self.sch.stage_of(e.producer.op)
        if st is None or st.attach is not AttachKind.INLINE:
            return e
        op = st.op
        assert isinstance(op, ComputeOp)
        body = inlined_bodies(self.sch, st, self.bodies)[e.producer.value_index]
        vmap = {iv.var: idx for iv, idx in zip(op.axis, e.indices)}
        return self.interner.visit(substitute(body, vmap))  # type: ignore[no-any-return]

    def visit_Reduce(self, e: E.Reduce) -> E.PrimExpr:
        return e.map_exprs(self.visit)


def inlined_body(sch: Schedule, st: Stage, memo: dict[Any, Any]) -> E.PrimExpr:
    """The stage's body with every inlined producer substituted (its first output's)."""
    return inlined_bodies(sch, st, memo)[0]


def inlined_bodies(sch: Schedule, st: Stage, memo: dict[Any, Any]) -> tuple[E.PrimExpr, ...]:
    """Every output's body with the inlined producers substituted (one for most stages)."""
    key = id(st)
    if key not in memo:
        assert isinstance(st.op, ComputeOp)
        inline = _Inline(sch, memo)
        bodies = tuple(inline.visit(b) for b in st.op.bodies)
        memo[key] = bodies[0]
        memo[("all", key)] = bodies
    return memo[("all", key)]


def producer_stages(sch: Schedule, body: E.PrimExpr | tuple[E.PrimExpr, ...]) -> list[Stage]:
    """The non-inlined stages a (already inlined) body, or tuple of bodies, reads."""
    found: dict[int, Stage] = {}

    def visit(node: Any) -> None:
        if isinstance(node, E.ProducerLoad):
            st = sch.stage_of(node.producer.op)
            if st is not None:
                found.setdefault(id(st), st)

    for b in body if isinstance(body, tuple) else (body,):
        post_order_visit(b, visit, once=True)
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


def legalize_attach(sch: Schedule) -> None:
    """Move attach points whose loop was split or fused afterwards, as TVM's
    ``LegalizeInvalidAttach`` does when it lowers: a split loop's stages go to its inner
    loop, a loop fused as the inner operand goes to the fused loop (repeatedly, for a
    chain of primitives). An attachment nothing legalizes stays, for the check to report."""
    for st in sch.stages:
        parent, ivar = st.attach_stage, st.attach_ivar
        if st.attach is not AttachKind.SCOPE or parent is None or ivar is None:
            continue
        seen: set[int] = set()
        while ivar not in parent.leaf_iter_vars and id(ivar) not in seen:
            seen.add(id(ivar))
            nxt = _moved_to(parent, ivar)
            if nxt is None:
                break
            ivar = nxt
        if ivar in parent.leaf_iter_vars:
            st.attach_ivar = ivar


def _moved_to(parent: Stage, ivar: IterVar) -> IterVar | None:
    for rel in parent.relations:
        if isinstance(rel, Split) and rel.parent is ivar:
            return rel.inner
        if isinstance(rel, Fuse) and rel.inner is ivar:
            return rel.fused
    return None


def check_attach_tree(sch: Schedule) -> None:
    """Reject attachments that are invalid after later primitives (a loop split or fused
    afterwards that ``legalize_attach`` cannot follow, a stage computed at itself, a cycle)."""
    legalize_attach(sch)
    for st in sch.stages:
        if st.attach is AttachKind.SCOPE:
            parent, ivar = st.attach_stage, st.attach_ivar
            assert parent is not None
            if parent is st:
                raise st._error("compute_at: a stage cannot be computed at its own loop")
            if ivar not in parent.leaf_iter_vars:
                axis = ivar.name if ivar is not None else "?"
                raise ScheduleError(
                    f"stage '{st.name}' is computed at axis '{axis}' of stage "
                    f"'{parent.name}', which was split or fused afterwards; "
                    "compute_at a current loop (a split loop moves to its inner part and a fuse's "
                    "inner operand to the fused loop, as in TVM; other moves are refused)"
                )
            seen: set[int] = set()
            cur: Stage | None = st
            while cur is not None and cur.attach is AttachKind.SCOPE:
                if id(cur) in seen:
                    raise ScheduleError(f"stage '{st.name}': compute_at forms a cycle")
                seen.add(id(cur))
                cur = cur.attach_stage


def is_placeholder(st: Stage) -> bool:
    """Whether a stage is an input (nothing to compute or schedule)."""
    return isinstance(st.op, PlaceholderOp)
