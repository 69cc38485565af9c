"""``cache_read`` and ``cache_write``: staging copies that rewrite the dataflow of a schedule.

Both add a stage in another storage scope and give existing stages new operations;
the operations themselves stay immutable. The axis bookkeeping follows TVM so a
TVM schedule written against these primitives picks the same loops:

* ``cache_read(A, scope, readers)`` adds ``A.scope[...] = A[...]`` and makes each
  reader read the copy; the readers keep their axes.
* ``cache_write(C, scope)`` moves C's computation into ``C.scope`` and leaves in
  C's stage an element-wise copy ``C[i, j] = C.scope[i, j]``. That copy keeps
  C's original data axes, so ``C.op.axis`` and ``s[C].op.axis`` still name the
  loops of ``s[C]``; the cache stage gets fresh data axes (``i.c``, ``j.c``) and
  the original reduce axes, so ``C.op.reduce_axis`` is ``s[CC].op.reduce_axis``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, cast

from ember.errors import ScheduleError
from ember.tir import expr as E
from ember.tir.functor import Mutator, substitute, uses_var
from ember.tir.te.operation import compute
from ember.tir.te.tensor import ComputeOp, IterVar, Tensor

if TYPE_CHECKING:
    from ember.tir.schedule.schedule import Schedule, Stage


def cache_read(sch: Schedule, tensor: Tensor, scope: str, readers: Sequence[Stage]) -> Tensor:
    """A copy of ``tensor`` in ``scope`` that the stages ``readers`` read instead of the
    original (``Schedule.cache_read`` finds the stages of the tensors it is given)."""
    src = sch[tensor]
    cache = compute(tensor.shape, lambda *idx: tensor[tuple(idx)], name=f"{tensor.name}.{scope}")
    for rs in readers:
        if not isinstance(rs.op, ComputeOp) or not any(t == tensor for t in rs.op.input_tensors):
            raise rs._error(f"cache_read: stage '{rs.name}' does not read '{tensor.name}'")
    for rs in readers:
        sch._rewrite_op(rs, _replace_tensor(rs.op, tensor, cache))
    st = sch._insert_stage(cache.op, after=src)
    st.set_scope(scope)
    return cache


def cache_write(
    sch: Schedule, tensor: Tensor | Sequence[Tensor], scope: str
) -> Tensor | list[Tensor]:
    """Compute ``tensor`` into a ``scope`` buffer and copy it out; returns the cache tensor.

    A list of every output of one multi-output compute caches them all in one stage and
    returns the list of cache tensors (TVM's ``FL, EL = s.cache_write([F, E], "local")``).
    Must come before any loop primitive on the stage (its splits would refer to
    axes that move to the cache stage), as TVM requires.
    """
    tensors: list[Tensor] = (
        list(tensor) if isinstance(tensor, (list, tuple)) else [cast(Tensor, tensor)]
    )
    if not tensors:
        raise ScheduleError("cache_write: no tensors given")
    st = sch[tensors[0]]
    op = st._compute_only("cache_write")
    if any(sch[t] is not st for t in tensors) or (
        len(tensors) > 1 and sorted(t.value_index for t in tensors) != list(range(op.num_outputs))
    ):
        raise st._error(
            "cache_write of several tensors takes every output of one multi-output compute "
            f"('{op.name}' has {op.num_outputs})"
        )
    if op.num_outputs > 1 and len(tensors) != op.num_outputs:
        raise st._error(
            f"cache_write: '{op.name}' has {op.num_outputs} outputs; cache them together, "
            f"s.cache_write([{', '.join(op.output(k).name for k in range(op.num_outputs))}], "
            f"'{scope}')"
        )
    if st.relations or st.iter_attrs:
        raise st._error(
            "cache_write must come before other primitives (split, fuse, reorder, bind, "
            "annotations) on the stage"
        )
    cache_axis = tuple(
        IterVar(E.Var(f"{iv.name}.c", iv.var.dtype), iv.dom, iv.kind) for iv in op.axis
    )
    vmap = {iv.var: c.var for iv, c in zip(op.axis, cache_axis)}
    reduce_axis = _rebind_reduce_axes(op.reduce_axis, vmap)
    rebind = _RebindAxes(vmap, dict(zip(op.reduce_axis, reduce_axis)))
    bodies = [rebind.visit(b) for b in op.bodies]
    cache_op = ComputeOp(
        f"{op.name}.{scope}", cache_axis, reduce_axis, bodies[0], op.tag, op.attrs,
        tuple(bodies[1:]),
    )  # fmt: skip
    caches = [cache_op.output(k) for k in range(op.num_outputs)]
    idx = tuple(iv.var for iv in op.axis)
    loads = [E.ProducerLoad(c.dtype, c, idx) for c in caches]
    copy_op = ComputeOp(op.name, op.axis, (), loads[0], op.tag, op.attrs, tuple(loads[1:]))
    cache_stage = sch._insert_stage(cache_op, before=st)
    cache_stage.set_scope(scope)
    sch._rewrite_op(st, copy_op)
    st._reset_axes()
    if isinstance(tensor, (list, tuple)):
        return [caches[t.value_index] for t in tensors]
    return caches[0]


def _rebind_reduce_axes(
    axes: tuple[IterVar, ...], vmap: Mapping[E.Var, E.PrimExpr]
) -> tuple[IterVar, ...]:
    """The reduce axes of the cache stage: the same IterVars, except one whose range is
    written in the output's indices (``te.reduce_axis((0, i))`` in TVM's
    ``test_loop_dep_reduce_cache_write``), which gets its range in the cache's indices."""
    out = []
    for iv in axes:
        dom = iv.dom
        if dom is None or not (_uses(dom.min, vmap) or _uses(dom.extent, vmap)):
            out.append(iv)
            continue
        new_dom = E.Range(substitute(dom.min, vmap), substitute(dom.extent, vmap))
        out.append(IterVar(iv.var, new_dom, iv.kind, iv.thread_tag))
    return tuple(out)


def _uses(e: E.PrimExpr, vmap: Mapping[E.Var, E.PrimExpr]) -> bool:
    return uses_var(e, lambda v: v in vmap)


class _RebindAxes(Mutator):
    """A compute body moved to the cache's data axes: the variables, and inside a ``Reduce``
    its axes (see ``_rebind_reduce_axes``) and a reducer written in the output's indices
    (TVM's ``comm_reducer`` may close over them)."""

    def __init__(self, vmap: Mapping[E.Var, E.PrimExpr], axes: dict[IterVar, IterVar]) -> None:
        self.vmap, self.axes = vmap, axes

    def visit_Var(self, v: E.Var) -> E.PrimExpr:
        return self.vmap.get(v, v)

    def visit_Reduce(self, e: E.Reduce) -> E.PrimExpr:
        e2 = e.map_exprs(self.visit)
        c = e2.combiner
        sub = lambda x: substitute(x, self.vmap)  # noqa: E731
        parts = (
            (c.result, c.identity) if isinstance(c, E.CommReducer) else (*c.results, *c.identities)
        )
        if any(_uses(x, self.vmap) for x in parts):  # keep the reducer object otherwise
            if isinstance(c, E.CommReducer):
                c = E.CommReducer(c.name, c.lhs, c.rhs, sub(c.result), sub(c.identity))
            else:
                results = tuple(sub(r) for r in c.results)
                identities = tuple(sub(i) for i in c.identities)
                c = E.TupleReducer(c.name, c.lhs, c.rhs, results, identities)
        axis = tuple(self.axes.get(iv, iv) for iv in e2.axis)
        if c is e2.combiner and all(a is b for a, b in zip(axis, e2.axis)):
            return e2
        return E.Reduce(
            e2.dtype, c, e2.source, axis, e2.condition, e2.init, e2.sources, e2.value_index
        )


def _replace_tensor(op: ComputeOp, old: Tensor, new: Tensor) -> ComputeOp:
    """``op`` with every read of ``old`` reading ``new`` instead (same axes)."""

    class _Replace(Mutator):
        def visit_ProducerLoad(self, e: E.ProducerLoad) -> E.PrimExpr:
            e2 = self.generic_visit(e)
            if e2.producer == old:
                return E.ProducerLoad(e2.dtype, new, e2.indices)
            return e2

        def visit_Reduce(self, e: E.Reduce) -> E.PrimExpr:
            return e.map_exprs(self.visit)

    bodies = tuple(_Replace().visit(b) for b in op.bodies)
    return ComputeOp(op.name, op.axis, op.reduce_axis, bodies[0], op.tag, op.attrs, bodies[1:])
