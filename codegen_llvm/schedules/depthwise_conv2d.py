"""CPU template for ``depthwise_conv2d_nchw``: one small 2-D filter per channel.

A depthwise convolution (a grouped convolution with one input channel per group;
output channel ``o`` reads input channel ``o // multiplier``) has no reduction over
channels, so the ``conv2d_nchw.llvm`` register tile, which reuses each input vector
for many output channels, finds nothing to reuse: the work is ``KH*KW`` loads and
multiply-adds per output vector, and the cost is memory traffic and load bandwidth.
The input is padded into the flat, phase-split layout of ``conv2d.py`` (row ``r`` of
phase ``(py, px)`` at ``r * Wq``, so every tap is an affine, unit-stride read even with
strides) one block of ``cb`` channels at a time, inside the parallel loop over (batch,
channel block), so it is still in cache when the convolution reads it. With ``rows >
0`` (the default) a register tile is ``rows`` output rows of ``vec`` lanes,
accumulated over the unrolled taps straight into the output stage (with the graph's
epilogue: bias, Clip, a residual add): an input vector is loaded once for all the
kernel rows that use it. With ``rows == 0`` tiles of ``vec`` positions run along the
flat grid (rows of 7 or 14 packed into full vectors) into a per-block buffer that is
then copied out. The padding test is ``likely``, so loop partitioning leaves the
interior of the padded copy a plain (vector, or for strides interleaved) copy.

Knobs: ``cb`` (channels per parallel block), ``vec`` (lanes per tile), ``rows``
(output rows per tile, 0 for the flat grid), ``unroll_kernel`` (unroll the taps).
The fallback was measured on a 2-core AVX-512 (Zen 4) machine.
"""

from __future__ import annotations

from typing import Any

from ember.codegen_llvm.cpu_features import vector_unit
from ember.codegen_llvm.schedules.conv2d import (
    MAX_ROW_VECTOR,
    IntPair,
    Padding,
    _divisors,
    _Geometry,
    strided_phase_copy,
)
from ember.errors import ArgumentError
from ember.tir import dtype as dt
from ember.tir.schedule.schedule import Schedule, create_schedule
from ember.tir.te import operation as te
from ember.tir.te.tensor import Tensor
from ember.tir.topi.conv_flat import depthwise_flat
from ember.tir.topi.workload import DepthwiseConv2DWorkload
from ember.tuner.template import get_config, template, using_config

TEMPLATE = "depthwise_conv2d_nchw.llvm"
BLOCK_BYTES = 1 << 17  # a channel block's padded input fits L2 with room for its result
KH_ROWS = 2  # padded rows beyond the output's, for the block size estimate


def _geometry(
    N: int,
    C: int,
    H: int,
    W: int,
    multiplier: int,
    KH: int,
    KW: int,
    stride: IntPair,
    padding: Padding,
    dilation: IntPair,
) -> _Geometry:
    if isinstance(multiplier, bool) or not isinstance(multiplier, int) or multiplier < 1:
        raise ArgumentError(
            f"{TEMPLATE}: the channel multiplier must be a positive int, got {multiplier!r}"
        )
    try:
        return _Geometry(N, C, H, W, C * multiplier, KH, KW, stride, padding, dilation)
    except ArgumentError as e:  # the shared geometry names the conv2d template
        raise ArgumentError(str(e).replace("conv2d_nchw.llvm", TEMPLATE)) from e


def geometry(w: DepthwiseConv2DWorkload) -> _Geometry:
    """The template's geometry of a depthwise workload."""
    g = (w.strides, w.pads, w.dilations)
    return _geometry(w.N, w.C, w.H, w.W, w.multiplier, w.KH, w.KW, *g)


def geometry_of(args: tuple[Any, ...]) -> _Geometry:
    """The geometry of a task's arguments ``(N, C, H, W, multiplier, KH, KW, stride,
    padding, dilation[, dtype])``."""
    return geometry(DepthwiseConv2DWorkload(*args))


def _define_knobs(g: _Geometry, multiplier: int, dtype: str) -> tuple[int, int, int, bool]:
    """Define the knobs and read them; channel blocks hold whole groups of ``multiplier``."""
    cfg = get_config()
    per_reg = vector_unit().lanes(dtype)  # one register of the target's
    vecs = [v * per_reg for v in (1, 2, 4, 8)]
    blocks = [b * multiplier for b in _divisors(g.C, 64)]
    plane = g.sh * g.sw * (g.OH + KH_ROWS) * g.Wq * dt.bytes_of(dtype)
    fit = [b for b in blocks if b * plane <= BLOCK_BYTES] or blocks[:1]
    # enough blocks to feed two threads evenly, each as large as the cache allows
    even = [b for b in fit if (g.N * g.O // b) % 2 == 0 or g.N * g.O // b >= 8]
    cfg.define_knob("cb", blocks, default=max(even or fit))
    # 0: the flat grid (short rows share vectors); r: tiles of r output rows
    row_cands = [0, *(r for r in _divisors(g.OH, 8) if r > 1)]
    # measured on AVX-512 (Zen 4): tiles of 4 (else up to 8) rows of one register each
    # beat the flat grid on every MobileNetV2 layer, 7x7 included
    cfg.define_knob("vec", vecs, default=per_reg)
    cfg.define_knob("rows", row_cands, default=4 if 4 in row_cands else row_cands[-1])
    cfg.define_knob("unroll_kernel", [True, False], default=True)
    return cfg["cb"].val, cfg["vec"].val, cfg["rows"].val, cfg["unroll_kernel"].val


@template(TEMPLATE)
def depthwise_conv2d_nchw_llvm(
    N: int,
    C: int,
    H: int,
    W: int,
    multiplier: int,
    KH: int,
    KW: int,
    stride: IntPair = 1,
    padding: Padding = 0,
    dilation: IntPair = 1,
    dtype: str = "float32",
) -> tuple[Schedule, list[Any]]:
    """``out[n, o, y, x] = sum_{ky, kx} X[n, o // m, y*sh + ky*dh - pt, x*sw + kx*dw - pl] *
    Wt[o, 0, ky, kx]`` with zero padding; X is (N, C, H, W), Wt is (C*m, 1, KH, KW)."""
    w = DepthwiseConv2DWorkload(N, C, H, W, multiplier, KH, KW, stride, padding, dilation, dtype)
    g = geometry(w)
    knobs = _define_knobs(g, multiplier, dtype)
    X = te.placeholder((N, C, H, W), dtype, name="X")
    Wt = te.placeholder((g.O, 1, KH, KW), dtype, name="W")
    out = depthwise_flat(X, Wt, None, g, *knobs)
    s = create_schedule(out.op)
    schedule_depthwise_flat(s, out, out.op.input_tensors[0])
    return s, [X, Wt, out]


def depthwise_knobs(
    g: _Geometry, multiplier: int, dtype: str, cfg: Any
) -> tuple[int, int, int, bool]:
    """The knobs ``cfg`` (a config of this template's task for ``g``, e.g. a recorded
    one, or a ``FallbackConfig``) chooses for ``g``."""

    with using_config(cfg):
        return _define_knobs(g, multiplier, dtype)


def schedule_depthwise_flat(s: Schedule, out: Tensor, conv: Tensor) -> None:
    """Schedule ``conv`` (a ``dwconv_flat`` stage) whose NCHW result reaches ``out``, an
    output stage of shape (N, O, OH, OW) into which the copy (and any elementwise
    epilogue) is inlined: every stage of a channel block inside one parallel iteration.
    Row tiles accumulate straight into ``out``'s tiles (the epilogue applied as they
    are stored); flat tiles go through the block's flat result, copied row by row."""
    knobs = dict(conv.op.attrs)
    Xf = conv.op.input_tensors[0]
    acc = s.cache_write(conv, "local")
    n, o, y, x = s[out].op.axis
    oo, _ = s[out].split(o, factor=knobs["cb"])
    block = s[out].fuse(n, oo)
    s[out].parallel(block)
    if knobs["rows"]:
        s[conv].compute_inline()
        _row_tiles(s, out, acc, y, x, knobs)
    else:
        _flat_tiles(s, out, conv, acc, block, x, knobs)
    # the block's padded input, just before the convolution reads it
    s[Xf].compute_at(s[out], block)
    _, _, py, px, flat = s[Xf].op.axis
    row, col = s[Xf].split(flat, factor=knobs["Wq"])  # no div/mod of the index
    if knobs["sw"] == 1:
        s[Xf].vectorize(col)
    else:
        strided_phase_copy(s, Xf, py, row, px, col)


def _taps(s: Schedule, acc: Tensor, lanes: Any, rows: Any, unroll: bool) -> None:
    """The kernel taps outside the tile (and unrolled): one vector multiply-add per tap
    and row; with the rows unrolled too, a row tile loads each input vector once."""
    ry, rx = s[acc].op.reduce_axis
    s[acc].reorder(ry, rx, *([rows] if rows is not None else []), lanes)
    if rows is not None:
        s[acc].unroll(rows)
    if unroll:
        s[acc].unroll(ry)
        s[acc].unroll(rx)
    s[acc].vectorize(lanes)


def _row_tiles(s: Schedule, out: Tensor, acc: Tensor, y: Any, x: Any, k: dict) -> None:
    yo, yi = s[out].split(y, factor=k["rows"])
    xo, xi = s[out].split(x, factor=k["vec"])
    s[out].reorder(yo, xo, yi, xi)
    s[out].vectorize(xi)
    s[acc].compute_at(s[out], xo)
    _, _, ay, ax = s[acc].op.axis
    _taps(s, acc, ax, ay, k["unroll_kernel"])


def _flat_tiles(
    s: Schedule, out: Tensor, conv: Tensor, acc: Tensor, block: Any, x: Any, k: dict
) -> None:
    OW = k["OW"]
    if OW <= MAX_ROW_VECTOR:
        s[out].vectorize(x)
    else:
        piece = max(_divisors(OW, MAX_ROW_VECTOR))
        s[out].vectorize(s[out].split(x, factor=piece if piece >= 8 else 16)[1])
    s[conv].compute_at(s[out], block)
    _, _, cf = s[conv].op.axis
    tile, lanes = s[conv].split(cf, factor=k["vec"])
    s[conv].vectorize(lanes)
    s[acc].compute_at(s[conv], tile)
    _taps(s, acc, s[acc].op.axis[2], None, k["unroll_kernel"])
