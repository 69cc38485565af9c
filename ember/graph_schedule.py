"""Generic schedules for graph kernels: one per target, chosen by the op's output stage.

Until tuned templates are wired in per op, every kernel gets one of these. On the
CPU, producers without a reduction are inlined into their consumers; stages with
a reduction stay at the root and run their spatial axes in parallel; an output
without a reduction fuses its outer axes into one parallel loop and vectorizes an
inner split of its last axis (kept apart so broadcast reads stay affine in the
vector lane). On CUDA every stage that stays fuses its axes and splits them by
256 onto blockIdx.x / threadIdx.x, one thread per output element.
"""

from __future__ import annotations

from typing import Any

from ember.tir.schedule.schedule import Schedule, create_schedule
from ember.tir.te.tensor import ComputeOp

VECTOR = 8
THREADS = 256


def _stages_kept(s: Schedule, outputs: list[Any]) -> list[Any]:
    """Inline every compute without a reduction that is not an output; return the rest."""
    out_ops = {id(t.op) for t in outputs}
    kept = []
    for st in s.stages:
        if not isinstance(st.op, ComputeOp):
            continue
        if id(st.op) in out_ops or st.op.reduce_axis:
            kept.append(st)
        else:
            st.compute_inline()
    return kept


def _schedule_reduction_cpu(st: Any, axes: list[Any]) -> None:
    """Outer spatial axes in parallel; the reduction outside a vector of the last axis, so
    each vector lane accumulates its own output (conv rows, matmul columns)."""
    *outer, last = axes
    red = list(st.op.reduce_axis)
    if int(last.dom.extent.value) >= VECTOR:
        lo, li = st.split(last, factor=VECTOR)
        st.reorder(*outer, lo, *red, li)
        st.vectorize(li)
        outer = [*outer, lo] if not outer else outer
    if outer:
        st.parallel(st.fuse(*outer) if len(outer) > 1 else outer[0])


def schedule_cpu(outputs: list[Any]) -> Schedule:
    s = create_schedule([t.op for t in outputs])
    for st in _stages_kept(s, outputs):
        axes = list(st.op.axis)
        if not axes:
            continue
        if st.op.reduce_axis:
            _schedule_reduction_cpu(st, axes)
            continue
        *outer, last = axes
        lo, li = st.split(last, factor=VECTOR)
        st.vectorize(li)
        st.parallel(st.fuse(*outer) if outer else lo)
    return s


def schedule_cuda(outputs: list[Any]) -> Schedule:
    s = create_schedule([t.op for t in outputs])
    for st in _stages_kept(s, outputs):
        axes = list(st.op.axis)
        fused = st.fuse(*axes) if len(axes) > 1 else (axes[0] if axes else None)
        if fused is None:
            continue
        bx, tx = st.split(fused, factor=THREADS)
        st.bind(bx, "blockIdx.x")
        st.bind(tx, "threadIdx.x")
    return s


def schedule_generic(outputs: list[Any], target_kind: str) -> Schedule:
    """The generic schedule of a kernel computing ``outputs`` for ``target_kind``."""
    return schedule_cuda(outputs) if target_kind == "cuda" else schedule_cpu(outputs)
