"""The ``deform_columns`` op: a deformable convolution's image samples (ONNX DeformConv).

Attributes (set by the converter, every one present): kernel, strides, dilations (one
per spatial axis), pads (begins then ends), offset_group. Inputs: the image (N, C,
*spatial), the offsets (N, offset_group * K * r, *output spatial) and optionally the
mask (N, offset_group * K, *output spatial), K the kernel's tap count and r the number
of spatial axes. The output is (N, C, *kernel, *output spatial) in the image's dtype;
the converter contracts it with the weights through ``matmul``. The compute is
``tir/topi/deform_conv.py``; it reads taps at data-dependent positions, one output
element at a time, so it is INJECTIVE like ``grid_sample``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ember.errors import ArgumentError
from ember.frontend.graph import TensorType
from ember.frontend.op_kinds import INJECTIVE
from ember.frontend.ops.registry import register_op
from ember.tir.topi import deform_conv as topi_dc


def _infer_deform_columns(types: Sequence[TensorType], attrs: dict[str, Any]) -> list[TensorType]:
    x, offset = types[0], types[1]
    a = attrs
    r = x.ndim - 2
    if r < 1 or not x.is_static or len(a["kernel"]) != r:
        raise ArgumentError(
            f"deform_columns: image {x} must be (N, C, *spatial) with static dims and a "
            f"kernel of {max(r, 1)} sizes, got {list(a['kernel'])}"
        )
    if not x.dtype.startswith(("float", "bfloat")) or offset.dtype != x.dtype:
        raise ArgumentError(
            f"deform_columns: image {x} and offsets {offset} must share a floating-point dtype"
        )
    if len(types) > 2 and types[2].dtype != x.dtype:
        raise ArgumentError(f"deform_columns: mask {types[2]} must be {x.dtype} like the image")
    spatial = tuple(int(d) for d in x.shape[2:])  # static: checked above
    out = topi_dc.deform_output_shape(spatial, a["kernel"], a["strides"], a["pads"], a["dilations"])
    taps = 1
    for k in a["kernel"]:
        taps *= k
    g = a["offset_group"]
    if offset.shape != (x.shape[0], g * taps * r, *out):
        raise ArgumentError(
            f"deform_columns: offsets {offset} do not fit image {x}: expected "
            f"{[x.shape[0], g * taps * r, *out]}"
        )
    if len(types) > 2 and types[2].shape != (x.shape[0], g * taps, *out):
        raise ArgumentError(
            f"deform_columns: mask {types[2]} does not fit: expected {[x.shape[0], g * taps, *out]}"
        )
    return [TensorType((*x.shape[:2], *a["kernel"], *out), x.dtype)]


@register_op("deform_columns", INJECTIVE, infer=_infer_deform_columns, num_inputs=(2, 3))
def deform_columns(inputs: Sequence[Any], attrs: dict[str, Any]) -> list[Any]:
    """Samples each kernel tap of each output position at its offset position."""
    a = attrs
    mask = inputs[2] if len(inputs) > 2 else None
    return [
        topi_dc.deform_columns(
            inputs[0], inputs[1], mask, a["kernel"], a["strides"], a["pads"], a["dilations"],
            a["offset_group"],
        )
    ]  # fmt: skip
