"""Generic schedules for graph kernels: one per target, chosen by the op's output stage.

Until tuned templates are wired in per op, every kernel gets one of these. On the
CPU, producers without a reduction are inlined into their consumers; stages with
a reduction stay at the root and run their spatial axes in parallel; an output
without a reduction fuses its outer axes into one parallel loop and vectorizes an
inner split of its last axis (kept apart so broadcast reads stay affine in the
vector lane). On CUDA every stage that stays fuses its axes and splits them by
256 onto blockIdx.x / threadIdx.x, one thread per output element; a reduction to a
scalar splits its reduction over the 256 threads of one block (a cross-thread
reduction), and ``ember.graph.kernels`` gives a 0-d output an axis of one.
"""

from __future__ import annotations

from typing import Any

from ember.errors import InternalError
from ember.tir.arith.const_int_bound import const_int_bound
from ember.tir.schedule.schedule import Schedule, create_schedule
from ember.tir.te.operation import thread_axis
from ember.tir.te.tensor import ComputeOp

VECTOR = 8
ROWS = 4
THREADS = 256
# Below this many multiply-adds (or elements moved) a stage runs on one thread: waking
# the thread pool costs more than the work.
PARALLEL_MIN_WORK = 1 << 15


def _extent(iv: Any) -> int:
    """The static extent of an axis. A reduction over 2**31 or more has the int64 extent
    ``n - 0`` (not folded), so the constant is read off its bounds, not its node."""
    lo, hi = const_int_bound(iv.dom.extent)
    if lo != hi:
        raise InternalError(f"graph kernels have static extents, got {iv.dom.extent}")
    return int(lo)


def _work(st: Any) -> int:
    """Loop iterations of a stage: output elements times the reduction's extent."""
    n = 1
    for iv in (*st.op.axis, *st.op.reduce_axis):
        n *= _extent(iv)
    return n


def _parallel(st: Any, axis: Any, work: int | None = None) -> None:
    if (_work(st) if work is None else work) >= PARALLEL_MIN_WORK:
        st.parallel(axis)


def _stages_kept(s: Schedule, outputs: list[Any], done: set[int] = frozenset()) -> list[Any]:
    """Inline every compute without a reduction that is not an output; return the rest.
    Stages a template scheduled (``done``) are left as they are.

    Padding stages stay: a reduction reading a padded copy indexes it affinely and
    vectorizes, where an inlined bounds test per tap would not."""
    out_ops = {id(t.op) for t in outputs}
    kept = []
    for st in s.stages:
        if not isinstance(st.op, ComputeOp) or id(st.op) in done:
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
    s[acc].unroll(ic)
    s[acc].vectorize(jc)


def _schedule_dense_packed(s: Schedule, st: Any) -> None:
    """The ``matmul.llvm`` template's register-blocked micro-kernel over pre-packed weight
    panels (``frontend/passes/pack_dense_weights.py``): mr rows x nr lanes accumulate in
    registers, k unrolled by ku, column blocks of nc_panels panels run in parallel with the
    rows. The tiles are the matmul task's best record's (:func:`_recorded_tiles`), else
    4 rows, k unrolled by 4 and blocks of two panels."""
    from ember.codegen_llvm.schedules.matmul import GemmTiles, schedule_gemm

    *lead, i, j = st.op.axis
    rows = _extent(i)
    nr = int(dict(st.op.attrs)["nr"])
    many = rows >= 2 or bool(lead)
    tiles = GemmTiles(mr=4 if rows >= 4 else rows, nr=nr, ku=4, nc_panels=2 if many else 1)
    m = rows
    for ax in lead:
        m *= _extent(ax)
    k = _extent(st.op.reduce_axis[0])
    tiles = _recorded_tiles((m, _extent(j), k, "float32"), tiles)
    schedule_gemm(s, st.op.output(0), None, tiles)


def _recorded_tiles(args: tuple[Any, ...], default: Any) -> Any:
    """The tiles of the ``matmul.llvm`` record for ``args`` in an enclosing
    ``apply_history_best`` block, where it packs B in panels of the width the weights
    were packed with (a record that streams B or packs other panels does not apply)."""
    from dataclasses import replace

    from ember.tuner.space import ConfigEntity
    from ember.tuner.template import config_for_direct_call

    cfg = config_for_direct_call("matmul.llvm", args)
    if not isinstance(cfg, ConfigEntity):
        return default
    values = {name: cfg[name].val for name in cfg.choices}
    if values.get("pack", "none") == "none" or values.get("gemv", "tile") != "tile":
        return default
    if values.get("nr") != default.nr:
        return default
    return replace(default, mr=values["mr"], ku=values["ku"], nc_panels=values["nc_panels"])


def _output_ops(outputs: list[Any]) -> list[Any]:
    """The operations behind ``outputs``, each once (a tuple reduction has several outputs)."""
    ops: dict[int, Any] = {}
    for t in outputs:
        ops.setdefault(id(t.op), t.op)
    return list(ops.values())


def _template_stages(s: Schedule, outputs: list[Any]) -> set[int]:
    """Apply the template schedules a strategy compute asked for (by its tag); returns the
    ids of the ops they scheduled. A ``conv2d_nchw_flat`` or depthwise stage (or a Winograd GEMM,
    ``winograd_gemm``) needs one output of the convolution's NCHW shape that reads it
    (its copy, maybe with an epilogue inlined)."""
    from ember.codegen_llvm.schedules.conv2d import schedule_conv2d_flat
    from ember.codegen_llvm.schedules.conv2d_nchwc import schedule_conv2d_nchwc
    from ember.codegen_llvm.schedules.depthwise_conv2d import TAG, schedule_depthwise_flat
    from ember.codegen_llvm.schedules.depthwise_conv2d_nchwc import TAG as DW_NCHWC_TAG
    from ember.codegen_llvm.schedules.depthwise_conv2d_nchwc import schedule_depthwise_nchwc
    from ember.codegen_llvm.schedules.pool2d import GRAPH_MAX_TAG, schedule_max_pool2d_graph
    from ember.codegen_llvm.schedules.winograd import schedule_winograd_output

    schedules = {"conv2d_nchw_flat": schedule_conv2d_flat, TAG: schedule_depthwise_flat}
    blocked = {"conv2d_nchwc": schedule_conv2d_nchwc, DW_NCHWC_TAG: schedule_depthwise_nchwc}
    done: set[int] = _int8_template(s, outputs)
    for st in list(s.stages):
        if isinstance(st.op, ComputeOp) and st.op.tag == GRAPH_MAX_TAG:
            if [t.op for t in outputs] == [st.op]:  # the pool is the output: no epilogue
                done |= schedule_max_pool2d_graph(s, st.op.output(0))
            continue
        if isinstance(st.op, ComputeOp) and st.op.tag == "winograd_gemm":
            out = _sole_nchw_output(outputs, st.op.output(0))
            if out is not None:  # else the generic schedules take every stage
                done |= schedule_winograd_output(s, out)
            continue
        if isinstance(st.op, ComputeOp) and st.op.tag in blocked:
            done |= _template_nchwc(s, outputs, st.op.output(0), blocked[st.op.tag])
        if not (isinstance(st.op, ComputeOp) and st.op.tag in schedules):
            continue
        apply = schedules[st.op.tag]
        conv = st.op.output(0)
        xf = st.op.input_tensors[0]
        out = _sole_nchw_output(outputs, conv)
        if out is None:  # the generic schedules take it; the flat input stays a stage
            continue
        for inner in s.stages:
            if (
                isinstance(inner.op, ComputeOp)
                and inner.op is not out.op
                and not (inner.op.reduce_axis or inner.op is xf.op)
            ):
                inner.compute_inline()
        before = {id(x.op) for x in s.stages}
        apply(s, out, conv)
        made = {id(x.op) for x in s.stages} - before  # the accumulator's cache stage
        done |= {id(st.op), id(xf.op), id(out.op)} | made
    return done


def _int8_template(s: Schedule, outputs: list[Any]) -> set[int]:
    """The VNNI int8 GEMM (``matmul_int8_panels``, from the CPU strategy): its single
    (M, N) output, with the stages between them inlined, gets ``matmul_int8.llvm``'s
    schedule with the knobs of that task's best record in an enclosing
    ``apply_history_best`` (else the defaults); A's padded copy is left to the generic
    schedule."""
    from ember.codegen_llvm.schedules.matmul_int8 import define_int8_knobs, schedule_int8_gemm
    from ember.tuner.template import config_for_direct_call, using_config

    panels = [st for st in s.stages if getattr(st.op, "tag", "") == "matmul_int8_panels"]
    if len(panels) != 1 or len(outputs) != 1 or outputs[0].ndim != 2:
        return set()
    cp, out = panels[0].op.output(0), outputs[0]
    if [t.op for t in _producers(out) if getattr(t.op, "reduce_axis", ())] != [cp.op]:
        return set()
    before = {id(t.op) for t in _producers(cp)}
    between = [
        t.op
        for t in _producers(out)
        if isinstance(t.op, ComputeOp) and id(t.op) not in before and t.op is not cp.op
    ]
    for op in between:
        s[op].compute_inline()
    args = dict(cp.op.attrs)["task_args"]
    with using_config(config_for_direct_call("matmul_int8.llvm", args)):
        mr, nb = define_int8_knobs(args[0], args[1])
    schedule_int8_gemm(s, cp, out, mr, nb, copies=False)
    return {id(cp.op), id(out.op)} | {id(op) for op in between}


def _template_nchwc(s: Schedule, outputs: list[Any], conv: Any, schedule: Any) -> set[int]:
    """``schedule`` (the ``conv2d_NCHWc.llvm`` or ``depthwise_conv2d_NCHWc.llvm`` one) for
    a blocked convolution whose group has one 5-D output reading it (the epilogue
    inlined there); the ops it scheduled."""
    pad = conv.op.input_tensors[0]
    if len(outputs) != 1 or outputs[0].ndim != 5:
        return set()
    out = outputs[0]
    reduces = [t for t in _producers(out) if getattr(t.op, "reduce_axis", ())]
    if out.op is not conv.op and [t.op for t in reduces] != [conv.op]:
        return set()
    keep = {id(out.op), id(conv.op), id(pad.op)}
    for inner in s.stages:
        if isinstance(inner.op, ComputeOp) and id(inner.op) not in keep:
            inner.compute_inline()
    before = {id(x.op) for x in s.stages}
    schedule(s, out, conv)
    made = {id(x.op) for x in s.stages} - before
    kept = {id(out.op), id(conv.op)} | made
    return kept | ({id(pad.op)} if getattr(pad.op, "tag", "") == "pad" else set())


def _sole_nchw_output(outputs: list[Any], conv: Any) -> Any:
    if len(outputs) != 1 or outputs[0].ndim != 4:
        return None
    out = outputs[0]
    reduces = [t for t in _producers(out) if getattr(t.op, "reduce_axis", ())]
    return out if [t.op for t in reduces] == [conv.op] else None


def _producers(t: Any) -> list[Any]:
    seen: dict[int, Any] = {}
    stack = [t]
    while stack:
        cur = stack.pop()
        for p in getattr(cur.op, "input_tensors", ()):
            if id(p.op) not in seen:
                seen[id(p.op)] = p
                stack.append(p)
    return list(seen.values())


def schedule_cpu(outputs: list[Any]) -> Schedule:
    s = create_schedule(_output_ops(outputs))
    for st in _stages_kept(s, outputs, _template_stages(s, outputs)):
        axes = list(st.op.axis)
        if not axes:
            continue
        if st.op.reduce_axis:
            if st.op.tag == "dense_packed":
                _schedule_dense_packed(s, st)
            elif len(axes) >= 2 and st.op.num_outputs == 1:
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
    from ember.graph_schedule_cuda import tensorcore_stages

    s = create_schedule(_output_ops(outputs))
    for st in _stages_kept(s, outputs, tensorcore_stages(s, outputs)):
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
