"""The CPU's generic schedule of a graph kernel, and its group schedule around the
strategy templates' anchors.

A kernel's stages get this schedule unless a strategy template's anchor
(``codegen_llvm/schedules/anchors.py``) scheduled them: producers without a reduction
are inlined into their consumers; stages with a reduction stay at the root and run their
spatial axes in parallel (a ROWS x VECTOR register tile where there are two axes, the
``matmul.llvm`` micro-kernel for a ``dense_packed`` GEMM, partial sums in vector lanes
where the outputs' last axis is too short for a vector, blocks of 64 outputs where there
is one output axis); an output without a reduction
vectorizes an inner split of its last axis (kept apart so broadcast reads stay affine in
the vector lane) and runs the fewest leading axes that give ``PARALLEL_PARTS`` iterations
as one parallel loop, the axes between them plain loops.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import replace
from typing import Any, cast

from ember.codegen_llvm.cpu_features import vector_unit
from ember.codegen_llvm.schedules.matmul import GemmTiles, schedule_gemm
from ember.errors import InternalError
from ember.tir.arith.const_int_bound import const_int_bound
from ember.tir.schedule.schedule import Schedule, create_schedule
from ember.tir.te.reads import elementwise_tail
from ember.tir.te.tensor import ComputeOp, Tensor
from ember.tuner.strategy import Implementation, inline_injective, output_ops, schedule_anchors

VECTOR = 8
ROWS = 4
COLUMNS = 64  # outputs one thread sums a strided reduction for: 256 contiguous bytes a row
LANES = 16  # partial sums of a reduction summed in vector lanes (one AVX-512 register)
# Below this many multiply-adds (or elements moved) a stage runs on one thread: waking
# the thread pool costs more than the work.
PARALLEL_MIN_WORK = 1 << 15
# Iterations of an elementwise stage's parallel loop enough to share among the threads
# (parallel_work.CHUNKS_PER_THREAD parts each, for up to 8 threads).
PARALLEL_PARTS = 64


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


def _reduce_size(st: Any) -> int:
    n = 1
    for iv in st.op.reduce_axis:
        n *= _extent(iv)
    return n


def _schedule_reduction_in_lanes(s: Schedule, st: Any, axes: list[Any]) -> None:
    """A reduction of at least ``2 * LANES`` values whose outputs give no vector loop
    (global pooling, a row's mean; a small window's stays in the register tile): its
    reduction loops fused, split by ``LANES`` and ``rfactor`` ed, so ``LANES`` partial sums
    accumulate in one vector register (a reduction's store does not move with a loop over
    it, so it never vectorizes), computed at the output's fused parallel loop and then
    added up. Only the innermost reduction is split (a split of fused ones reads through a
    div/mod, and measured slower). Kernel times, one thread, loaded machine
    (``benchmarks/bench_ops.py``): a row mean over 1024 x 1024 245 -> 47 us, global
    average pooling of 256 x 56 x 56 669 -> 198 us, instance norm of 64 x 56 x 56 449 ->
    64-90 us."""
    work = _work(st)
    *outer_red, inner = st.op.reduce_axis
    n = _extent(inner)
    if n < VECTOR:  # short rows (7 x 7 pooling): fused, at the price of a div/mod per read
        inner, n = (st.fuse(*outer_red, inner) if outer_red else inner), _reduce_size(st)
    # split the innermost reduction only: splitting a fused one would read through div/mod
    lanes = next((w for w in (LANES, VECTOR) if n % w == 0), LANES if n >= LANES else VECTOR)
    _, lane = st.split(inner, factor=lanes)
    rf = s.rfactor(st.op.output(0), lane, len(axes))
    rf_stage = s[rf]
    rf_op = cast(ComputeOp, rf_stage.op)
    *spatial, lane_axis = rf_op.axis
    rf_stage.reorder(*spatial, *rf_op.reduce_axis, lane_axis)
    rf_stage.vectorize(lane_axis)
    outer = st.fuse(*st.op.axis) if len(st.op.axis) > 1 else st.op.axis[0]
    _parallel(st, outer, work)
    rf_stage.compute_at(st, outer)


def _schedule_reduction_vector(s: Schedule, st: Any, axis: Any) -> None:
    """A reduction with one output axis, long enough for a vector (a sum over a tensor's
    first axis): that axis split by ``COLUMNS``, the reduction between its parts, so each
    lane accumulates its own output in a register and each reduced row is read as 256
    contiguous bytes. A sum over the first axis of 1024 x 1024 took 8 ms as one scalar
    reduction per output, 448 us in 8-wide blocks (32 bytes a row, a page apart) and 72 us
    in 64-wide ones (kernel times, one thread, loaded machine)."""
    work = _work(st)
    acc = s.cache_write(st.op.output(0), "local")
    jo, ji = st.split(axis, factor=COLUMNS if _extent(axis) >= COLUMNS else VECTOR)
    st.vectorize(ji)
    _parallel(st, jo, work)
    s[acc].compute_at(st, jo)
    acc_op = cast(ComputeOp, s[acc].op)
    (jc,) = acc_op.axis
    s[acc].reorder(*acc_op.reduce_axis, jc)
    s[acc].vectorize(jc)


# A column block's panels stream from L2 once per row block. ViT's 197x768x3072 GEMM (two
# 64-lane panels of 3,072 rows: 1.5 MB) ran 1.22x faster in blocks of one panel (786 KB)
# on a 2-core Intel Xeon with 2 MB of L2 a core (2.77 against 3.39 ms at 2 threads,
# 5.73 against 7.00 at 1); at k 768-1,024 (0.4-0.5 MB a pair) the two were level.
PAIRED_PANELS_BYTES = 1 << 20


def dense_packed_tiles(shape: Sequence[int], nr: int, k: int = 0) -> GemmTiles:
    """The default micro-kernel tiles of a ``dense_packed`` stage of output ``shape``
    (columns padded or not) over ``nr``-lane panels and ``k`` deep: the vector unit's
    ``gemm_rows`` rows (fewer where there are fewer), k unrolled by 4, and blocks of two
    panels where there are several row blocks, the panels pair up (else of one: a block
    past the last panel would run the whole k loop for nothing) and the pair's weights
    fit ``PAIRED_PANELS_BYTES``."""
    *lead, rows, cols = shape
    pairs = (
        (rows >= 2 or bool(lead))
        and -(-cols // nr) % 2 == 0
        and 2 * k * nr * 4 <= PAIRED_PANELS_BYTES  # float32 panels
    )
    mr = min(rows, vector_unit().gemm_rows)
    return GemmTiles(mr=mr, nr=nr, ku=4, nc_panels=2 if pairs else 1)


def whole_panels_pay(shape: Sequence[int], nr: int, k: int = 0) -> bool:
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
    tiles = dense_packed_tiles(shape, nr, k)
    panels = -(-n // nr)
    row_blocks = -(-rows // tiles.mr) * math.prod(lead)
    return panels == 1 or (-(-panels // tiles.nc_panels) > 1 and row_blocks > 1)


def _schedule_dense_packed(s: Schedule, st: Any, outputs: Sequence[Tensor]) -> Tensor | None:
    """The ``matmul.llvm`` template's register-blocked micro-kernel over pre-packed weight
    panels (``frontend/passes/pack_dense_weights.py``): mr rows x nr lanes accumulate in
    registers, k unrolled by ku, column blocks of nc_panels panels run in parallel with the
    rows. The tiles are the compute's (``attrs``: the ``dense_packed.llvm`` task's, chosen
    by the strategy from its records), else :func:`dense_packed_tiles`. The group's
    elementwise tail (bias, residual, GELU), where it has one, is applied to each register
    tile as it is stored (:func:`_epilogue`); that output is returned, scheduled."""
    attrs = dict(st.op.attrs)
    k = _extent(st.op.reduce_axis[0])
    tiles = dense_packed_tiles([_extent(ax) for ax in st.op.axis], int(attrs["nr"]), k)
    if "mr" in attrs:
        tiles = replace(tiles, mr=int(attrs["mr"]), ku=int(attrs["ku"]),
                        nc_panels=int(attrs["nc_panels"]))  # fmt: skip
    C = st.op.output(0)
    out = _epilogue(C, outputs)
    schedule_gemm(s, C, None, tiles, out=out)
    return out


def _epilogue(C: Tensor, outputs: Sequence[Tensor]) -> Tensor | None:
    """The group's one output when it is an elementwise function of ``C``
    (:func:`~ember.tir.te.reads.elementwise_tail`); None otherwise (C is an output itself,
    or a reshape, transpose or reduction sits between), and C keeps its loops."""
    if len(outputs) == 1 and outputs[0].op is not C.op and elementwise_tail(outputs[0], C):
        return outputs[0]
    return None


def schedule_group(outputs: list[Tensor], anchors: Sequence[Implementation] = ()) -> Schedule:
    """The schedule of a kernel computing ``outputs``: each strategy implementation the
    group's nodes took (``anchors``) schedules its template's stages, the generic
    schedule the rest."""
    s = create_schedule(output_ops(outputs))
    fused: set[int] = set()  # epilogues a template's stage scheduled with itself
    for st in inline_injective(s, outputs, schedule_anchors(s, outputs, anchors)):
        op = cast(ComputeOp, st.op)  # inline_injective returns compute stages only
        axes = list(op.axis)
        if not axes or id(op) in fused:
            continue
        if op.reduce_axis:
            single = st.op.num_outputs == 1
            if op.tag == "dense_packed":
                out = _schedule_dense_packed(s, st, outputs)
                if out is not None:
                    fused.add(id(out.op))
            elif single and _extent(axes[-1]) < VECTOR and _reduce_size(st) >= 2 * LANES:
                _schedule_reduction_in_lanes(s, st, axes)
            elif len(axes) >= 2 and single:
                _schedule_reduction_cpu(s, st, axes)
            elif single and _extent(axes[0]) >= VECTOR:
                _schedule_reduction_vector(s, st, axes[0])
            else:
                _parallel(st, st.fuse(*axes) if len(axes) > 1 else axes[0])
            continue
        *outer, last = axes
        lo, li = st.split(last, factor=VECTOR)
        st.vectorize(li)
        lead = _leading(outer, PARALLEL_PARTS)
        _parallel(st, st.fuse(*lead) if lead else lo)
    return s


def _leading(axes: Sequence[Any], least: int) -> list[Any]:
    """The fewest leading ``axes`` whose extents multiply to ``least`` or more (all of
    them where they never do): the parallel loop. The axes after them stay loops of their
    own, so an iteration does not rebuild its indices from one fused counter with a
    division and a remainder per axis (a blocked layout transform, fused over its four
    outer axes, spent more time there than moving its data)."""
    n = 1
    for k, iv in enumerate(axes):
        n *= _extent(iv)
        if n >= least:
            return list(axes[: k + 1])
    return list(axes)


def schedule_generic(outputs: list[Tensor]) -> Schedule:
    """The generic CPU schedule of a kernel computing ``outputs`` (no template anchors)."""
    return schedule_group(outputs)
