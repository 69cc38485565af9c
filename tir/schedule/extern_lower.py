"""Lowering a ``te.extern`` stage: its statement, on the buffers of the real tensors.

Called from :mod:`.lower`. The body ``fcompute`` built refers to placeholder
buffers (``ins``/``outs``); here each is replaced by the buffer of the tensor it
stands for — a parameter, or the scratch buffer of a stage computed before — in
loads, stores and the arrays handed to packed calls. An extern stage runs once,
at the root, over whole tensors: its inputs are computed whole (their region is
fixed to the full shape) and its output is a whole-tensor buffer that later
stages read like any other.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ember.errors import ScheduleError
from ember.tir import expr as E
from ember.tir import stmt as S
from ember.tir.buffer import Buffer
from ember.tir.functor import Mutator
from ember.tir.schedule.attach import AttachKind
from ember.tir.schedule.bound import StageBounds
from ember.tir.te.extern import ExternOp
from ember.tir.te.tensor import ComputeOp, IterVar

if TYPE_CHECKING:
    from ember.tir.schedule.lower import _Lowering
    from ember.tir.schedule.schedule import Stage

Region = tuple[dict[IterVar, E.PrimExpr], dict[IterVar, E.PrimExpr]]


def extern_bounds(lw: _Lowering) -> tuple[dict[int, StageBounds], dict[int, Region]]:
    """Each extern stage over its whole output (``seeds``), and each computed input over
    its whole shape (``fixed``): the body reads the inputs in ways bounds cannot see."""
    seeds: dict[int, StageBounds] = {}
    fixed: dict[int, Region] = {}
    for st in lw.sch.stages:
        if not isinstance(st.op, ExternOp):
            continue
        if st.attach is not AttachKind.ROOT:
            raise ScheduleError(f"extern stage '{st.name}' must be computed at the root")
        seeds[id(st)] = StageBounds({}, {}, tuple(st.op.shape), full=True)
        for t in st.op.inputs:
            producer = lw.sch.stage_of(t.op)
            if producer is None or not isinstance(producer.op, ComputeOp):
                continue
            if producer.attach is not AttachKind.ROOT:
                raise ScheduleError(
                    f"stage '{producer.name}' is an input of extern stage '{st.name}', which "
                    "reads it whole as a buffer; compute it at the root (not inlined or "
                    "computed at another stage's loop)"
                )
            axes = producer.op.axis
            fixed[id(producer)] = (
                {iv: iv.dom.min for iv in axes},  # type: ignore[union-attr]
                {iv: iv.dom.extent for iv in axes},  # type: ignore[union-attr]
            )
    return seeds, fixed


def extern_nest(lw: _Lowering, st: Stage) -> S.Stmt:
    """The extern's statement with its placeholder buffers replaced by the real ones."""
    op = st.op
    assert isinstance(op, ExternOp)
    swap: dict[Buffer, Buffer] = {}
    for ph, t in zip(op.input_placeholders, op.inputs):
        producer = lw.sch.stage_of(t.op)
        buf = None if producer is None else lw.buffer_of(producer, t.value_index)
        if buf is None:
            raise ScheduleError(
                f"extern stage '{st.name}' reads tensor '{t.name}', which has no buffer; "
                "pass it in the argument list or compute it at the root"
            )
        swap[ph] = buf
    for k, ph in enumerate(op.output_placeholders):
        buf = lw.buffer_of(st, k)
        assert buf is not None
        swap[ph] = buf
    return _SwapBuffers(swap).visit(op.body)


class _SwapBuffers(Mutator):
    def __init__(self, swap: dict[Buffer, Buffer]) -> None:
        self.swap = swap
        self.data = {old.data: new.data for old, new in swap.items()}

    def visit_Var(self, v: E.Var) -> E.PrimExpr:
        return self.data.get(v, v)

    def visit_BufferLoad(self, e: E.BufferLoad) -> E.PrimExpr:
        e = self.generic_visit(e)
        buf = self.swap.get(e.buffer)
        return e if buf is None else E.BufferLoad(e.dtype, buf, e.indices)

    def visit_BufferStore(self, s: S.BufferStore) -> S.Stmt:
        s = self.generic_visit(s)
        buf = self.swap.get(s.buffer)
        return s if buf is None else S.BufferStore(buf, s.value, s.indices)
