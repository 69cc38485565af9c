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

from collections.abc import Sequence
from typing import TYPE_CHECKING

from ember.tir import expr as E
from ember.tir.functor import Mutator, substitute
from ember.tir.te.tensor import ComputeOp, IterVar, Operation, Tensor

if TYPE_CHECKING:
    from ember.tir.schedule.schedule import Schedule, Stage


def cache_read(
    sch: Schedule, tensor: Tensor, scope: str, readers: Sequence[Tensor | Operation | Stage]
) -> Tensor:
    """A copy of ``tensor`` in ``scope`` that ``readers`` read instead of the original."""
    from ember.tir.schedule.schedule import Stage
    from ember.tir.te.operation import compute

    src = sch[tensor]
    cache = compute(tensor.shape, lambda *idx: tensor[tuple(idx)], name=f"{tensor.name}.{scope}")
    reader_stages = [r if isinstance(r, Stage) else sch[r] for r in readers]
    for rs in reader_stages:
        if not isinstance(rs.op, ComputeOp) or not any(t == tensor for t in rs.op.input_tensors):
            raise rs._error(f"cache_read: stage '{rs.name}' does not read '{tensor.name}'")
    for rs in reader_stages:
        sch._rewrite_op(rs, _replace_tensor(rs.op, tensor, cache))
    st = sch._insert_stage(cache.op, after=src)
    st.set_scope(scope)
    return cache


def cache_write(sch: Schedule, tensor: Tensor, scope: str) -> Tensor:
    """Compute ``tensor`` into a ``scope`` buffer and copy it out; returns the cache tensor.

    Must come before any loop primitive on the stage (its splits would refer to
    axes that move to the cache stage), as TVM requires.
    """
    st = sch[tensor]
    op = st._compute_only("cache_write")
    if st.relations or st.iter_attrs:
        raise st._error(
            "cache_write must come before other primitives (split, fuse, reorder, bind, "
            "annotations) on the stage"
        )
    cache_axis = tuple(
        IterVar(E.Var(f"{iv.name}.c", iv.var.dtype), iv.dom, iv.kind) for iv in op.axis
    )
    body = substitute(op.body, {iv.var: c.var for iv, c in zip(op.axis, cache_axis)})
    cache_op = ComputeOp(f"{op.name}.{scope}", cache_axis, op.reduce_axis, body, op.tag, op.attrs)
    cache = cache_op.output(0)
    load = E.ProducerLoad(cache.dtype, cache, tuple(iv.var for iv in op.axis))
    copy_op = ComputeOp(op.name, op.axis, (), load, op.tag, op.attrs)
    cache_stage = sch._insert_stage(cache_op, before=st)
    cache_stage.set_scope(scope)
    sch._rewrite_op(st, copy_op)
    st._reset_axes()
    return cache


def _replace_tensor(op: ComputeOp, old: Tensor, new: Tensor) -> ComputeOp:
    """``op`` with every read of ``old`` reading ``new`` instead (same axes)."""

    class _Replace(Mutator):
        def visit_ProducerLoad(self, e: E.ProducerLoad) -> E.PrimExpr:
            e2 = self.generic_visit(e)
            if e2.producer == old:
                return E.ProducerLoad(e2.dtype, new, e2.indices)
            return e2

        def visit_Reduce(self, e: E.Reduce) -> E.PrimExpr:
            src = self.visit(e.source)
            cond = self.visit(e.condition) if e.condition is not None else None
            init = self.visit(e.init) if e.init is not None else None
            if src is e.source and cond is e.condition and init is e.init:
                return e
            return E.Reduce(e.dtype, e.combiner, src, e.axis, cond, init)

    body = _Replace().visit(op.body)
    return ComputeOp(op.name, op.axis, op.reduce_axis, body, op.tag, op.attrs)
