"""Tensor reads become buffer reads: what lowering and tensorize do to a stage's body.

A ``ProducerLoad`` of a tensor becomes a ``BufferLoad`` of the buffer its stage
was given, offset by the region the producer computes when that is not the whole
tensor (a stage computed at a loop of its consumer).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ember.errors import LoweringError
from ember.tir import dtype as dt
from ember.tir import expr as E
from ember.tir.buffer import Buffer
from ember.tir.functor import MemoMutator
from ember.tir.te.tensor import ComputeOp

if TYPE_CHECKING:
    from ember.tir.schedule.lower import _Lowering


def lane_index(
    buf: Buffer, indices: tuple[E.PrimExpr, ...], dtype: str | None = None
) -> tuple[E.PrimExpr, ...]:
    """Indices into a buffer (one made by ``lower_params.decl_lanes``): all lanes of the element."""
    if len(indices) == len(buf.shape):
        return indices
    lanes = buf.shape[-1]
    assert isinstance(lanes, E.IntImm)
    base = indices[-1].dtype if indices else "int32"
    ramp = E.Ramp(dt.with_lanes(base, lanes.value), E.const(0, base), E.const(1, base), lanes.value)
    return (*indices, ramp)


class LoadRewriter(MemoMutator):
    """Tensor reads -> buffer reads, offset by the producer's computed region (the
    lowering's buffers and bounds are fixed while an instance is used, so a shared
    subexpression is rewritten once)."""

    def __init__(self, lw: _Lowering) -> None:
        super().__init__()
        self.lw = lw

    def visit_ProducerLoad(self, e: E.ProducerLoad) -> E.PrimExpr:
        indices = tuple(self.visit(i) for i in e.indices)
        st = self.lw.sch.stage_of(e.producer.op)
        buf = None if st is None else self.lw.buffer_of(st, e.producer.value_index)
        if st is None or buf is None:
            raise LoweringError(f"tensor '{e.producer.name}' has no buffer (is it an argument?)")
        sb = self.lw.bounds.get(id(st))
        if sb is not None and not sb.full and id(st) not in self.lw.arg_stages:
            op = st.op
            assert isinstance(op, ComputeOp)
            indices = tuple(i - sb.root_min[iv] for i, iv in zip(indices, op.axis))
        return E.BufferLoad(e.dtype, buf, lane_index(buf, indices, e.dtype))
