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


def tile_rows(s: Schedule, stage: Tensor, acc: Tensor, tile: int) -> tuple[Any, list[Any]]:
    """``stage``'s lanes a vector and its rows' pixels in register tiles of ``tile``, its
    local accumulator ``acc`` computed at each tile: ``acc``'s reduction outside the tile's
    pixels (unrolled) and lanes (a vector). Returns the tile loop and ``acc``'s reduction
    axes (for the caller to unroll)."""
    op: Any = s[stage].op
    *_, x, lane = op.axis
    s[stage].vectorize(lane)
    xo, _ = _row_tiles(s[stage], x, tile)
    s[acc].compute_at(s[stage], xo)
    acc_op: Any = s[acc].op  # a ComputeOp: cache_write made it
    *_, ax, ai = acc_op.axis
    reduction = list(acc_op.reduce_axis)
    s[acc].reorder(*reduction, ax, ai)
    s[acc].unroll(ax)
    s[acc].vectorize(ai)
    return xo, reduction


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
    n, o, y, _, _ = out_op.axis
    xo, _ = tile_rows(s, out, acc, int(pw_attrs.get("ow_bn", 8)))
    s[out].reorder(n, y, o, xo)
    row = s[out].fuse(n, y)
    s[out].parallel(row)
    s[mid].compute_at(s[out], row)
    unroll_depthwise_taps(s, mid, dacc, dw_attrs)


def unroll_depthwise_taps(s: Schedule, mid: Tensor, dacc: Tensor, dw_attrs: dict) -> None:
    """``mid`` (the clipped depthwise output) in register tiles of the depthwise template's
    ``ow_bn`` where its accumulator ``dacc`` is computed, the taps unrolled unless the
    template's ``unroll_kernel`` says not."""
    _, (ky, kx) = tile_rows(s, mid, dacc, int(dw_attrs.get("ow_bn", 7)))
    if bool(dw_attrs.get("unroll_kernel", True)):
        s[dacc].unroll(ky)
        s[dacc].unroll(kx)
