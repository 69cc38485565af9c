"""Generic schedules for graph kernels: one per target, chosen by the op's output stage.

Until tuned templates are wired in per op, every kernel gets one of these. On the
CPU, producers without a reduction are inlined into their consumers; stages with
a reduction stay at the root and run their spatial axes in parallel; an output
without a reduction fuses its outer axes into one parallel loop and vectorizes an
inner split of its last axis (kept apart so broadcast reads stay affine in the
vector lane). On CUDA every stage that stays fuses its axes and splits them by
256 onto blockIdx.x / threadIdx.x, one thread per output element; a reduction to a
scalar splits its reduction over the 256 threads of one block (a cross-thread
reduction), and ``ember.kernels`` gives a 0-d output an axis of one.
"""

from __future__ import annotations

from typing import Any

from ember.tir.schedule.schedule import Schedule, create_schedule
from ember.tir.te.operation import thread_axis
from ember.tir.te.tensor import ComputeOp

VECTOR = 8
ROWS = 4
THREADS = 256
# Below this many multiply-adds (or elements moved) a stage runs on one thread: waking
# the thread pool costs more than the work.
PARALLEL_MIN_WORK = 1 << 15


def _work(st: Any) -> int:
    """Loop iterations of a stage: output elements times the reduction's extent."""
    n = 1
    for iv in (*st.op.axis, *st.op.reduce_axis):
        n *= int(iv.dom.extent.value)
    return n


def _parallel(st: Any, axis: Any, work: int | None = None) -> None:
    if (_work(st) if work is None else work) >= PARALLEL_MIN_WORK:
        st.parallel(axis)


def _stages_kept(s: Schedule, outputs: list[Any]) -> list[Any]:
    """Inline every compute without a reduction that is not an output; return the rest.

    Padding stages stay: a reduction reading a padded copy indexes it affinely and
    vectorizes, where an inlined bounds test per tap would not."""
    out_ops = {id(t.op) for t in outputs}
    kept = []
    for st in s.stages:
        if not isinstance(st.op, ComputeOp):
            continue
        if id(st.op) in out_ops or st.op.reduce_axis or st.op.tag == "pad":
            kept.append(st)
        else:
            st.compute_inline()
    return kept


def _schedule_reduction_cpu(s: Schedule, st: Any, axes: list[Any]) -> None:
    """A register tile of ROWS x VECTOR outputs accumulates in a local buffer with the
    reduction outside it (each vector lane its own output: conv rows, matmul columns);
    the leading axes and the row blocks run in parallel."""
    *lead, i, j = axes
    work = _work(st)  # before cache_write turns the stage into a copy
    acc = s.cache_write(st.op.output(0), "local")
    jo, ji = st.split(j, factor=VECTOR)
    io, ii = st.split(i, factor=ROWS)
    st.reorder(*lead, io, jo, ii, ji)
    st.vectorize(ji)
    _parallel(st, st.fuse(*lead, io) if lead else io, work)
    s[acc].compute_at(st, jo)
    *_, ic, jc = s[acc].op.axis
    s[acc].reorder(*s[acc].op.reduce_axis, ic, jc)
    # no unroll(ic): LLVM miscompiled an unrolled local accumulator under a max reduction
    # with padding selects (see the report of branch fecore); the vector lanes suffice.
    s[acc].vectorize(jc)


def _output_ops(outputs: list[Any]) -> list[Any]:
    """The operations behind ``outputs``, each once (a tuple reduction has several outputs)."""
    ops: dict[int, Any] = {}
    for t in outputs:
        ops.setdefault(id(t.op), t.op)
    return list(ops.values())


def schedule_cpu(outputs: list[Any]) -> Schedule:
    s = create_schedule(_output_ops(outputs))
    for st in _stages_kept(s, outputs):
        axes = list(st.op.axis)
        if not axes:
            continue
        if st.op.reduce_axis:
            if len(axes) >= 2 and st.op.num_outputs == 1:
                _schedule_reduction_cpu(s, st, axes)
            else:
                _parallel(st, st.fuse(*axes) if len(axes) > 1 else axes[0])
            continue
        *outer, last = axes
        lo, li = st.split(last, factor=VECTOR)
        st.vectorize(li)
        _parallel(st, st.fuse(*outer) if outer else lo)
    return s


def schedule_cuda(outputs: list[Any]) -> Schedule:
    s = create_schedule(_output_ops(outputs))
    for st in _stages_kept(s, outputs):
        axes = list(st.op.axis)
        if not axes:  # a reduction to a scalar: one block's threads reduce together
            red = list(st.op.reduce_axis)
            if red:
                _, tx = st.split(st.fuse(*red) if len(red) > 1 else red[0], factor=THREADS)
                st.bind(tx, thread_axis("threadIdx.x"))
            continue
        fused = st.fuse(*axes) if len(axes) > 1 else axes[0]
        bx, tx = st.split(fused, factor=THREADS)
        st.bind(bx, "blockIdx.x")
        st.bind(tx, "threadIdx.x")
    return s


def schedule_generic(outputs: list[Any], target_kind: str) -> Schedule:
    """The generic schedule of a kernel computing ``outputs`` for ``target_kind``."""
    return schedule_cuda(outputs) if target_kind == "cuda" else schedule_cpu(outputs)
