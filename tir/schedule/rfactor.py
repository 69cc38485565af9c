"""``rfactor``: factor a reduction into a stage of partial results and a reduction over them.

TVM's ``s.rfactor(B, ki, factor_axis)`` (semantics of its Schedule::rfactor):
the reduction loop ``ki`` (a leaf of ``B``'s stage, usually the inner part of a
split) becomes a *data* axis of a new stage ``B.rf``, inserted among ``B``'s data
axes at position ``factor_axis``; ``B.rf`` reduces over everything else. ``B``'s
stage then reduces ``B.rf`` over a fresh reduce axis ``ki.v`` (its
``op.reduce_axis[0]``), which is what TVM schedules bind to ``threadIdx.x``::

    before:  B[i] = sum(A[i, ko*32 + ki]  for ko, ki)           # one stage
    after:   B.rf[ki, i] = sum(A[i, ko*32 + ki]  for ko
                               if ko*32 + ki < K)               # factor_axis=0
             B[i] = sum(B.rf[ki.v, i]  for ki.v)

The reduce axes that the factored loop came from (its split or fuse family) are
rewritten in terms of ``ki`` and the other leaves of that family, which become
``B.rf``'s reduce axes after the untouched original ones; a split that does not
divide its axis puts a bound check into the reduction's condition (with
``where=``), since ``B.rf`` may be scheduled afresh. ``init=`` stays with ``B``.
Tuple reducers factor all their values: ``rfactor`` then returns the list of
``B.rf``'s outputs, as TVM does.

Where Ember differs: ``B.rf`` starts with fresh loops (TVM copies the relations
of the untouched axes into it but not their leaves); a factored axis whose
reduce domain does not start at 0 is allowed (TVM rejects it).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ember.tir import expr as E
from ember.tir.functor import substitute
from ember.tir.schedule.cache import _replace_tensor
from ember.tir.schedule.relations import (
    Fuse,
    Relation,
    Split,
    data_derived,
    pass_down_extents,
    pass_up_values,
    split_needs_guard,
)
from ember.tir.te.tensor import ComputeOp, IterKind, IterVar, Tensor

if TYPE_CHECKING:
    from ember.tir.schedule.schedule import Schedule


def rfactor(sch: Schedule, tensor: Tensor, axis: IterVar, factor_axis: int = 0) -> Any:
    """Factor ``tensor``'s reduction over the leaf ``axis`` (see the module docstring)."""
    st = sch[tensor]
    op = st._compute_only("rfactor")
    red = op.body
    if not isinstance(red, E.Reduce):
        raise st._error("rfactor applies to a reduction; the stage's body is not one")
    axis = st._leaf(axis, "rfactor")
    if axis.kind is not IterKind.REDUCE:
        raise st._error(f"rfactor: axis '{axis.name}' is not a reduction axis", axis)
    mixed = [
        iv for iv in st.leaf_iter_vars if iv.kind is IterKind.REDUCE and iv in data_derived(st)
    ]
    if mixed:
        raise st._error(
            f"rfactor: loop '{mixed[0].name}' is fused from a data axis and a reduction axis; "
            "rfactor factors a reduction whose loops come from reduction axes only",
            mixed[0],
        )
    pos = factor_axis if factor_axis >= 0 else len(op.axis) + 1 + factor_axis
    if not 0 <= pos <= len(op.axis):
        raise st._error(
            f"rfactor: factor_axis={factor_axis} is out of range for a tensor of "
            f"{len(op.axis)} dimension(s) (the new one goes at 0..{len(op.axis)})",
            axis,
        )
    touched = _family(st.relations, axis)
    rels = [r for r in st.relations if _touches(r, touched)]
    root_ext = {iv: iv.dom.extent for iv in (*op.axis, *op.reduce_axis)}  # type: ignore[union-attr]
    extents = pass_down_extents(st.relations, root_ext)

    factored = IterVar(E.Var(axis.name), E.Range.from_extent(extents[axis]), IterKind.DATA_PAR)
    leaf_axes = {
        iv: IterVar(E.Var(iv.name), E.Range.from_extent(extents[iv]), IterKind.REDUCE)
        for iv in st.leaf_iter_vars
        if id(iv) in touched and iv is not axis
    }
    values = pass_up_values(
        rels, {axis: factored.var} | {iv: n.var for iv, n in leaf_axes.items()}, extents
    )
    vsub = {
        rv.var: _plus(rv.dom.min, values[rv])  # type: ignore[union-attr]
        for rv in op.reduce_axis
        if id(rv) in touched
    }
    checks = [
        values[r.parent] < extents[r.parent]
        for r in rels
        if isinstance(r, Split) and split_needs_guard(r, extents)
    ]
    cond = None if red.condition is None else substitute(red.condition, vsub)
    if checks:
        bound = E.Call("bool", E.Intrinsic.LIKELY, (_all(checks),))
        cond = bound if cond is None else E.logical_and(bound, cond)

    rf_axis = (*op.axis[:pos], factored, *op.axis[pos:])
    rf_reduce = (
        *(rv for rv in op.reduce_axis if id(rv) not in touched),
        *leaf_axes.values(),
    )
    sources = tuple(substitute(x, vsub) for x in red.all_sources)
    tuple_ = bool(red.sources)
    rf_bodies = [
        E.Reduce(x.dtype, red.combiner, x, rf_reduce, cond, None, sources if tuple_ else (), k)
        for k, x in enumerate(sources)
    ]
    rf_op = ComputeOp(
        f"{op.name}.rf", rf_axis, rf_reduce, rf_bodies[0], "", (), tuple(rf_bodies[1:])
    )
    repl_op = _replacement(op, rf_op, pos, extents[axis], axis.name)

    for other in sch.stages:  # readers of the old outputs read the new stage's
        if other is not st and isinstance(other.op, ComputeOp):
            new = other.op
            for k in range(op.num_outputs):
                if any(t == op.output(k) for t in new.input_tensors):
                    new = _replace_tensor(new, op.output(k), repl_op.output(k))
            if new is not other.op:
                sch._rewrite_op(other, new)
    sch._insert_stage(rf_op, before=st)
    sch._rewrite_op(st, repl_op)
    st._reset_axes()
    outs = [rf_op.output(k) for k in range(rf_op.num_outputs)]
    return outs[0] if len(outs) == 1 else outs


def _replacement(
    op: ComputeOp, rf: ComputeOp, pos: int, extent: E.PrimExpr, axis_name: str
) -> ComputeOp:
    """``op`` as a reduction of ``rf`` over the factored dimension (a new axis ``<name>.v``)."""
    red = op.body
    assert isinstance(red, E.Reduce)
    rv = IterVar(E.Var(f"{axis_name}.v"), E.Range.from_extent(extent), IterKind.REDUCE)
    axes = tuple(IterVar(E.Var(iv.name, iv.var.dtype), iv.dom, IterKind.DATA_PAR) for iv in op.axis)
    amap = {old.var: new.var for old, new in zip(op.axis, axes)}
    idx = [iv.var for iv in axes]
    idx.insert(pos, rv.var)
    loads = tuple(rf.output(k)[tuple(idx)] for k in range(rf.num_outputs))
    tuple_ = bool(red.sources)
    bodies = []
    for k, body in enumerate(op.bodies):
        assert isinstance(body, E.Reduce)
        init = None if body.init is None else substitute(body.init, amap)
        srcs = loads if tuple_ else ()
        bodies.append(E.Reduce(body.dtype, red.combiner, loads[k], (rv,), None, init, srcs, k))
    return ComputeOp(f"{op.name}.repl", axes, (rv,), bodies[0], op.tag, op.attrs, tuple(bodies[1:]))


def _family(relations: list[Relation], axis: IterVar) -> set[int]:
    """``axis``, the axes it came from and everything split or fused from those (ids)."""
    touched = {id(axis)}
    for rel in reversed(relations):  # up: to the roots
        if isinstance(rel, Split) and {id(rel.outer), id(rel.inner)} & touched:
            touched.add(id(rel.parent))
        elif isinstance(rel, Fuse) and id(rel.fused) in touched:
            touched |= {id(rel.outer), id(rel.inner)}
    for rel in relations:  # down: every axis derived from a touched one
        if isinstance(rel, Split) and id(rel.parent) in touched:
            touched |= {id(rel.outer), id(rel.inner)}
        elif isinstance(rel, Fuse) and {id(rel.outer), id(rel.inner)} & touched:
            touched.add(id(rel.fused))
    return touched


def _touches(rel: Relation, touched: set[int]) -> bool:
    if isinstance(rel, Split):
        return id(rel.parent) in touched
    if isinstance(rel, Fuse):
        return id(rel.fused) in touched
    return False


def _plus(a: E.PrimExpr, b: E.PrimExpr) -> E.PrimExpr:
    return b if E.is_const_int(a, 0) else a + b


def _all(conds: list[E.PrimExpr]) -> E.PrimExpr:
    out = conds[0]
    for c in conds[1:]:
        out = E.logical_and(out, c)
    return out
