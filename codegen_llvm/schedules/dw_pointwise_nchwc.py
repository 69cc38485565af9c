"""CPU schedule of ``dwconv_pw_nchwc``: a depthwise conv's output row computed where the 1x1
conv after it reads it, so the depthwise output never reaches memory.

The compute (``tir/topi/conv_nchwc.py``, :func:`depthwise_pointwise_nchwc`) is the
depthwise reduction, its clip (a stage of its own) and a blocked 1x1 conv reading it. The
loop over (batch, output row) runs in parallel. In each iteration the clipped depthwise
output of that row (every channel block, the whole width: 14-32 KB in MobileNetV2) is
computed first, in ``ow_bn``-pixel register tiles as in ``depthwise_conv2d_nchwc.py``,
then the 1x1 conv's output blocks of that row, in ``ow_bn x ob`` accumulator tiles as in
``conv2d_nchwc.py``, read it from L1. The 1x1 conv's epilogue (bias, a residual add) is
inlined into the output stage. The knobs are those of the two templates' configs for the
two convolutions, read from the computes' attrs; there is no task of its own to tune.
"""

from __future__ import annotations

from typing import Any

from ember.codegen_llvm.schedules.conv2d_nchwc import _row_tiles
from ember.tir.schedule.schedule import Schedule
from ember.tir.te.tensor import Tensor


def schedule_dw_pointwise(s: Schedule, out: Tensor, conv: Tensor, mid: Tensor, dw: Tensor) -> None:
    """Schedule the 1x1 reduction ``conv`` (reaching the 5-D ``out`` elementwise, or
    ``out`` itself), its input ``mid`` (the clipped depthwise output) and the depthwise
    reduction ``dw``; every other stage between them must have been inlined already."""
    pw_attrs, dw_attrs = dict(getattr(conv.op, "attrs", {})), dict(getattr(dw.op, "attrs", {}))
    pad = dw.op.input_tensors[0]
    acc = s.cache_write(conv, "local")
    if out.op is not conv.op:
        s[conv].compute_inline()
    dacc = s.cache_write(dw, "local")
    s[dw].compute_inline()
    if getattr(pad.op, "tag", "") == "pad":
        s[pad].compute_inline()  # taps test the border, as the depthwise template's do

    out_op: Any = s[out].op
    n, o, y, x, lane = out_op.axis
    s[out].vectorize(lane)
    xo, xi = _row_tiles(s[out], x, int(pw_attrs.get("ow_bn", 8)))
    s[out].reorder(n, y, o, xo, xi, lane)
    row = s[out].fuse(n, y)
    s[out].parallel(row)
    s[acc].compute_at(s[out], xo)
    acc_op: Any = s[acc].op  # a ComputeOp: cache_write made it
    _, _, _, ax, ai = acc_op.axis
    rc, ry, rx, ri = acc_op.reduce_axis
    s[acc].reorder(rc, ry, rx, ri, ax, ai)
    s[acc].unroll(ax)
    s[acc].vectorize(ai)

    s[mid].compute_at(s[out], row)
    mid_op: Any = s[mid].op
    _, _, _, mx, ml = mid_op.axis
    s[mid].vectorize(ml)
    mxo, _ = _row_tiles(s[mid], mx, int(dw_attrs.get("ow_bn", 7)))
    s[dacc].compute_at(s[mid], mxo)
    dacc_op: Any = s[dacc].op
    _, _, _, dx, di = dacc_op.axis
    ky, kx = dacc_op.reduce_axis
    s[dacc].reorder(ky, kx, dx, di)
    if bool(dw_attrs.get("unroll_kernel", True)):
        s[dacc].unroll(ky)
        s[dacc].unroll(kx)
    s[dacc].unroll(dx)
    s[dacc].vectorize(di)
