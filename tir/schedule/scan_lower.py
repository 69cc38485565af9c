"""Lowering a ``te.scan``: init, then a serial time loop with the update inside.

Called from :mod:`.schedule` (to attach the update stages to the scan's time
axis when the schedule is made) and from :mod:`.lower`. The scan, its state
placeholder, its init and its update share one buffer, the scan's output, as in
TVM: the init writes the first rows, the update writes row ``t`` at time step
``t`` and reads earlier rows through the state. So the loop nest of
``s_scan = te.scan(s_init, s_update, s_state)`` is::

    for i in n:                       # s_init's stage, scheduled as the user says
        scan[0, i] = X[0, i]
    for scan.idx in m - 1:            # serial: step t reads step t - 1
        for i in n:                   # s_update's stage, computed at scan.idx
            scan[scan.idx + 1, i] = scan[scan.idx, i] + X[scan.idx + 1, i]

Bound inference sees the update as computed at the scan's loop, one row per
step; stages the update reads that are computed at the root span every step.
On a GPU the update's loops are bound to threads and the time loop stays on the
host, one launch per step (``split_host_device``), which is the grid-wide
synchronisation a step needs before the next reads its rows.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ember.errors import LoweringError, ScheduleError
from ember.tir import expr as E
from ember.tir import stmt as S
from ember.tir.buffer import decl_buffer
from ember.tir.schedule.attach import AttachKind
from ember.tir.schedule.bound import StageBounds
from ember.tir.te.scan import ScanOp
from ember.tir.te.tensor import ComputeOp, IterVar

if TYPE_CHECKING:
    from ember.tir.schedule.lower import _Lowering
    from ember.tir.schedule.schedule import Schedule, Stage

Region = tuple[dict[IterVar, E.PrimExpr], dict[IterVar, E.PrimExpr]]


def attach_scan_stages(sch: Schedule) -> None:
    """Compute every scan's update stages at its time axis (TVM's scan-update attachment)."""
    for st in sch.stages:
        if not isinstance(st.op, ScanOp):
            continue
        for t in st.op.update:
            update = sch.stage_of(t.op)
            assert update is not None
            update.attach, update.attach_stage = AttachKind.SCOPE, st
            update.attach_ivar = st.op.scan_axis


def scan_stages(sch: Schedule) -> list[Stage]:
    """The stages of a schedule that are scans, which lowering handles apart."""
    return [st for st in sch.stages if isinstance(st.op, ScanOp)]


def alias_scan_buffers(lw: _Lowering) -> None:
    """Give each state of each scan a buffer (its argument's, or a scratch one) and let
    that state's placeholder, init and update use it; they count as whole-tensor stages
    (no region offset). A scan of several states (TVM's ``te.scan([i0, i1], [u0, u1],
    [s0, s1])``) has a buffer per state, all filled in the same time loop."""
    for st in scan_stages(lw.sch):
        op = st.op
        assert isinstance(op, ScanOp)
        if st.attach is not AttachKind.ROOT:
            raise ScheduleError(f"scan '{st.name}' must be computed at the root")
        passed = id(st) in lw.arg_stages
        for k in range(op.num_outputs):
            buf = lw.buffer_of(st, k)
            if buf is None:
                out = op.output(k)
                buf = decl_buffer(out.shape, out.dtype, name=out.name)
                lw.set_buffer(st, k, buf)
                if passed:  # another output is a parameter: this one lives at the root
                    lw.root_scratch.append(buf)
            _alias_state(lw, st, k, buf)


def _alias_state(lw: _Lowering, st: Stage, k: int, buf: Any) -> None:
    op = st.op
    assert isinstance(op, ScanOp)
    for role, t in (("init", op.init[k]), ("update", op.update[k])):
        member = lw.sch.stage_of(t.op)
        assert member is not None
        if member.attach is AttachKind.INLINE:
            raise ScheduleError(
                f"stage '{member.name}' is the {role} of scan '{st.name}', which stores "
                "it in the scan's buffer; it cannot be inlined"
            )
        if role == "init" and member.attach is not AttachKind.ROOT:
            raise ScheduleError(
                f"stage '{member.name}' is the init of scan '{st.name}' and runs before "
                "its time loop; it cannot be computed at another stage's loop"
            )
    for t in (op.init[k], op.update[k], op.state_placeholder[k]):
        member = lw.sch.stage_of(t.op)
        if member is None:
            continue  # a state the update never reads
        if id(member) in lw.buffers and lw.buffers[id(member)] is not buf:
            raise LoweringError(
                f"tensor '{t.name}' belongs to scan '{st.name}' and lives in its buffer; "
                f"pass the scan's output '{op.output(k).name}' in the argument list instead"
            )
        lw.buffers[id(member)] = buf
        lw.arg_stages.add(id(member))


def scan_bounds(lw: _Lowering) -> tuple[dict[int, StageBounds], dict[int, Region]]:
    """The time loop of each scan (``seeds``) and the one row its update computes per step
    (``fixed``), for :func:`~.bound.infer_bounds`."""
    seeds: dict[int, StageBounds] = {}
    fixed: dict[int, Region] = {}
    for st in scan_stages(lw.sch):
        op = st.op
        assert isinstance(op, ScanOp)
        t = op.scan_axis
        assert t.dom is not None
        sb = StageBounds({t: t.dom.min}, {t: t.dom.extent}, tuple(op.shape), full=True)
        sb.root_offset = {t: t.var}
        sb.root_value = {t: t.var + t.dom.min}
        seeds[id(st)] = sb
        for tensor in op.update:
            update = lw.sch.stage_of(tensor.op)
            assert update is not None and isinstance(update.op, ComputeOp)
            time, *rest = update.op.axis
            mins: dict[IterVar, E.PrimExpr] = {time: sb.root_value[t]}
            exts: dict[IterVar, E.PrimExpr] = {time: E.const(1, time.var.dtype)}
            for iv in rest:
                assert iv.dom is not None
                mins[iv], exts[iv] = iv.dom.min, iv.dom.extent
            fixed[id(update)] = (mins, exts)
    return seeds, fixed


def scan_nest(lw: _Lowering, st: Stage) -> S.Stmt:
    """The serial time loop with the update stages (computed at it) inside."""
    op = st.op
    assert isinstance(op, ScanOp)
    t = op.scan_axis
    body = lw.with_attached(st, t, S.seq())
    extent = lw.bounds[id(st)].extents[t]
    # on a GPU the loop stays on the host: every step is a launch (split_host_device)
    ann = (("host_loop", 1),)
    return S.For(t.var, E.const(0, t.var.dtype), extent, S.ForKind.SERIAL, body, "", ann)
