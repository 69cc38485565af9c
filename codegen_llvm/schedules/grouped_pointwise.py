"""Grouped 1x1 convolutions over NCHW (ShuffleNet's): one small GEMM per group.

A grouped 1x1 convolution with unit stride and no padding multiplies each group's
``O/g x C/g`` weights by that group's ``C/g x H*W`` slice of the input, and in NCHW both
the slice's rows and the output's rows are contiguous over ``H*W``. So the compute
reduces over a flattened spatial axis ``p`` (the 4-D input indexed at ``p // W, p % W``,
which flattens back to ``p``) and the schedule is a GEMM's register tile: ``rows``
output channels of one group by ``cols`` vectors of ``p``, the reduction over the
group's input channels outside the tile, so each weight is broadcast once per row and
each input vector loaded once per tile. The tile's channels never cross a group
(``rows`` divides the group's output channels), so a tile reads one input slice.

Until this template, these convolutions ran the generic schedule, whose channel
blocking the grouped index defeats: on ShuffleNet v1's 136-channel, 4-group layers at
28x28 it ran at 31 GFLOPS on one core, onnxruntime's grouped GEMMs at 79; this tile
runs at 78-86 (measured alone, one thread, AMD EPYC Zen 4). The tile is sized by the
target's vector registers (:func:`~ember.codegen_llvm.cpu_features.vector_unit`): ``cols``
shrinks so that ``rows x cols`` accumulators fit the default budget, four by four of
AVX-512's 16 lanes; four by three of AVX2's 8, which four by four (and the 16-lane
vectors this template first had, two registers each) would spill.
"""

from __future__ import annotations

from typing import Any

from ember.codegen_llvm.cpu_features import vector_unit
from ember.frontend.passes.conv_blocks import is_pointwise
from ember.tir.schedule.schedule import Schedule
from ember.tir.te import operation as te
from ember.tir.te.tensor import ComputeOp, Tensor
from ember.tir.topi.transform import static_shape

TAG = "conv2d_grouped_pointwise"
COLS = 4  # vectors of the spatial axis per tile, at most
ROWS = (4, 3, 2, 1)  # output channels per tile: the first that divides a group's


def applies(x_shape: Any, w_shape: Any, attrs: dict[str, Any]) -> bool:
    """Whether a conv node is this template's: a 4-D float32 1x1 convolution of more than
    one group that is not depthwise, with unit strides and dilations and no padding."""
    if len(x_shape) != 4 or len(w_shape) != 4:
        return False
    if int(attrs.get("group", 1)) == 1:
        return False
    if int(w_shape[1]) == 1:  # depthwise (any multiplier): its own template
        return False
    return is_pointwise(w_shape, attrs)


def grouped_pointwise_conv(x: Tensor, w: Tensor, bias: Tensor | None, groups: int) -> Tensor:
    """The convolution of ``x`` (N, C, H, W) by ``w`` (O, C/groups, 1, 1), plus ``bias``:
    a reduction over the flattened spatial axis (tagged :data:`TAG`) and its 4-D view."""
    N, C, H, W = static_shape(x)
    O, cg = static_shape(w)[:2]
    og = O // groups
    rc = te.reduce_axis((0, cg), name="rc")
    flat = te.compute(
        (N, O, H * W),
        lambda n, o, p: te.sum(x[n, o // og * cg + rc, p // W, p % W] * w[o, rc, 0, 0], axis=rc),
        name="gconv",
        tag=TAG,
        attrs={"group_channels": og},
    )
    if bias is None:
        return te.compute((N, O, H, W), lambda n, o, h, q: flat[n, o, h * W + q], name="gconv_out")
    return te.compute(
        (N, O, H, W), lambda n, o, h, q: flat[n, o, h * W + q] + bias[o], name="gconv_out"
    )


def tile_rows(og: int) -> int:
    """Output channels per register tile for a group of ``og`` output channels."""
    return next(r for r in ROWS if og % r == 0)


def schedule_grouped_pointwise(s: Schedule, out: Tensor, conv: Tensor) -> None:
    """Schedule ``conv`` (the :data:`TAG` stage) whose result reaches ``out`` (N, O, H, W),
    into which the 4-D view and any elementwise epilogue are inlined: ``out``'s spatial
    axes fused and tiled, the accumulator of each tile in registers, (batch, channel
    tile) in parallel."""
    rows = tile_rows(int(dict(_compute(conv).attrs)["group_channels"]))
    unit = vector_unit()
    lanes = unit.lanes(out.dtype)
    cols = min(COLS, max(1, unit.accumulators[1] // rows))
    acc = s.cache_write(conv, "local")
    s[conv].compute_inline()
    n, o, h, q = _compute(out).axis
    p = s[out].fuse(h, q)
    oo, oi = s[out].split(o, factor=rows)
    po, pi = s[out].split(p, factor=lanes * cols)
    s[out].reorder(n, oo, po, oi, pi)
    s[out].parallel(s[out].fuse(n, oo))
    s[out].vectorize(s[out].split(pi, factor=lanes)[1])
    s[acc].compute_at(s[out], po)
    _, ao, ap = _compute(acc).axis
    (rc,) = _compute(acc).reduce_axis
    aj, ak = s[acc].split(ap, factor=lanes)
    s[acc].reorder(rc, ao, aj, ak)
    s[acc].unroll(ao)
    s[acc].unroll(aj)
    s[acc].vectorize(ak)


def _compute(t: Tensor) -> ComputeOp:
    op = t.op
    assert isinstance(op, ComputeOp)
    return op
