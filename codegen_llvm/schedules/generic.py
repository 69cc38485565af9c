"""The CPU's generic schedule of a graph kernel, and its group schedule around the
strategy templates' anchors.

A kernel's stages get this schedule unless a strategy template's anchor
(``codegen_llvm/schedules/anchors.py``) scheduled them: producers without a reduction
are inlined into their consumers; stages with a reduction stay at the root and run their
spatial axes in parallel (a ROWS x VECTOR register tile where there are two axes, the
``matmul.llvm`` micro-kernel for a ``dense_packed`` GEMM); an output without a reduction
fuses its outer axes into one parallel loop and vectorizes an inner split of its last
axis (kept apart so broadcast reads stay affine in the vector lane).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import replace
from typing import Any, cast

from ember.codegen_llvm.schedules.matmul import GemmTiles, schedule_gemm
from ember.errors import InternalError
from ember.tir.arith.const_int_bound import const_int_bound
from ember.tir.schedule.schedule import Schedule, create_schedule
from ember.tir.te.tensor import ComputeOp, Tensor
from ember.tuner.space import ConfigEntity
from ember.tuner.strategy import Implementation, inline_injective, output_ops, schedule_anchors
from ember.tuner.template import config_for_direct_call

VECTOR = 8
ROWS = 4
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


def dense_packed_tiles(shape: Sequence[int], nr: int) -> GemmTiles:
    """The default micro-kernel tiles of a ``dense_packed`` stage of output ``shape``
    (columns padded or not) over ``nr``-lane panels: 4 rows (fewer where there are fewer),
    k unrolled by 4, and blocks of two panels where there are several row blocks and the
    panels pair up (else of one: a block past the last panel would run the whole k loop
    for nothing)."""
    *lead, rows, cols = shape
    pairs = (rows >= 2 or bool(lead)) and -(-cols // nr) % 2 == 0
    return GemmTiles(mr=4 if rows >= 4 else rows, nr=nr, ku=4, nc_panels=2 if pairs else 1)


def whole_panels_pay(shape: Sequence[int], nr: int) -> bool:
    """Whether a ``dense_packed`` product of output ``shape`` should span whole panels
    (``topi.dense_packed(whole_panels=True)``). Over N columns short of a panel edge the
    edge tile tests its lanes against N; where that tile sits in the parallel loop beside
    other row and column blocks the tests are neither cut off nor versioned, and the whole
    micro-kernel runs as scalar code (2-10x slower on AVX-512 at 5-32 rows and N 150, 200,
    1000); in a single panel it is partitioned but no faster than the padded lanes. Where
    the edge is the only column block of several panels the padded lanes cost more (12-19%
    at N 100 and 200 in 64-lane panels) than the partitioned edge, so N stays."""
    *lead, rows, n = shape
    if n % nr == 0:
        return False
    tiles = dense_packed_tiles(shape, nr)
    panels = -(-n // nr)
    row_blocks = -(-rows // tiles.mr) * math.prod(lead)
    return panels == 1 or (-(-panels // tiles.nc_panels) > 1 and row_blocks > 1)


def _schedule_dense_packed(s: Schedule, st: Any) -> None:
    """The ``matmul.llvm`` template's register-blocked micro-kernel over pre-packed weight
    panels (``frontend/passes/pack_dense_weights.py``): mr rows x nr lanes accumulate in
    registers, k unrolled by ku, column blocks of nc_panels panels run in parallel with the
    rows. The tiles are the matmul task's best record's (:func:`_recorded_tiles`), else
    :func:`dense_packed_tiles`."""
    attrs = dict(st.op.attrs)
    shape = [_extent(ax) for ax in st.op.axis]
    tiles = dense_packed_tiles(shape, int(attrs["nr"]))
    k = _extent(st.op.reduce_axis[0])
    n = int(attrs.get("n", shape[-1]))  # the task's N, not the panels' padded width
    tiles = _recorded_tiles((math.prod(shape[:-1]), n, k, "float32"), tiles)
    schedule_gemm(s, st.op.output(0), None, tiles)


def _recorded_tiles(args: tuple[Any, ...], default: Any) -> Any:
    """The tiles of the ``matmul.llvm`` record for ``args`` in an enclosing
    ``apply_history_best`` block, where it packs B in panels of the width the weights
    were packed with (a record that streams B or packs other panels does not apply)."""
    cfg = config_for_direct_call("matmul.llvm", args)
    if not isinstance(cfg, ConfigEntity):
        return default
    values = {name: cfg[name].val for name in cfg.choices}
    if values.get("pack", "none") == "none" or values.get("gemv", "tile") != "tile":
        return default
    if values.get("nr") != default.nr:
        return default
    return replace(default, mr=values["mr"], ku=values["ku"], nc_panels=values["nc_panels"])


def schedule_group(outputs: list[Tensor], anchors: Sequence[Implementation] = ()) -> Schedule:
    """The schedule of a kernel computing ``outputs``: each strategy implementation the
    group's nodes took (``anchors``) schedules its template's stages, the generic
    schedule the rest."""
    s = create_schedule(output_ops(outputs))
    for st in inline_injective(s, outputs, schedule_anchors(s, outputs, anchors)):
        op = cast(ComputeOp, st.op)  # inline_injective returns compute stages only
        axes = list(op.axis)
        if not axes:
            continue
        if op.reduce_axis:
            if op.tag == "dense_packed":
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


def schedule_generic(outputs: list[Tensor]) -> Schedule:
    """The generic CPU schedule of a kernel computing ``outputs`` (no template anchors)."""
    return schedule_group(outputs)
