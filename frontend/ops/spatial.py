"""Spatial ops beyond conv and pooling: transposed convolution, Col2Im and Lp pooling.

Attributes (set by the converters, every one present):
- ``conv_transpose``: strides, pads_begin, dilations, out_spatial (tuples; the
  converter resolves output_shape/output_padding/auto_pad into the begin pads and
  the output size), group (int). Inputs x, w (C x O/group x kernel), optional bias.
- ``lp_pool``: p (float), kernel, strides, pads (begin..., end...), dilations
  (tuples), ceil_mode (bool).
- ``max_pool_indices``: max_pool's attributes plus storage_order (0/1); outputs the
  values and their int64 flat indices (ONNX MaxPool's Indices).
- ``max_unpool``: kernel, strides, pads (begin..., end...), out_spatial. Inputs x and
  the int64 indices.
- ``col2im``: image, block, strides, pads (begin..., end...), dilations (tuples, one
  entry per spatial axis). Input: columns (N, C * prod(block), number of blocks).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ember.errors import ArgumentError
from ember.frontend.graph import TensorType
from ember.frontend.op_kinds import INJECTIVE, OPAQUE, OUT_ELEMWISE_FUSABLE
from ember.frontend.ops.layout import output_plane
from ember.frontend.ops.nn import infer_pool_window
from ember.frontend.ops.registry import register_op
from ember.tir.topi import conv_gemm
from ember.tir.topi import conv_transpose as topi_ct
from ember.tir.topi import lppool as topi_lp
from ember.tir.topi import pool_indices as topi_pi

Types = Sequence[TensorType]


def _infer_conv_transpose(types: Types, attrs: dict[str, Any]) -> list[TensorType]:
    x, w = types[0], types[1]
    nsp = x.ndim - 2
    if nsp < 1 or w.ndim != x.ndim or len(attrs["out_spatial"]) != nsp:
        raise ArgumentError(f"conv_transpose: input {x} and weights {w} ranks do not fit")
    if x.shape[1] != w.shape[0] or not isinstance(w.shape[1], int):
        raise ArgumentError(f"conv_transpose: input {x} and weights {w} channels do not fit")
    return [TensorType((x.shape[0], w.shape[1] * attrs["group"], *attrs["out_spatial"]), x.dtype)]


@register_op("conv_transpose", OUT_ELEMWISE_FUSABLE, infer=_infer_conv_transpose, num_inputs=(2, 3))
def conv_transpose(inputs: Sequence[Any], attrs: dict[str, Any]) -> list[Any]:
    """N-d transposed convolution (the gradient of conv), with optional bias."""
    a = attrs
    bias = inputs[2] if len(inputs) > 2 else None
    return [
        topi_ct.conv_transpose_nd(
            inputs[0],
            inputs[1],
            bias,
            a["strides"],
            a["pads_begin"],
            a["dilations"],
            a["out_spatial"],
            a["group"],
        )
    ]


def _infer_window(types: Types, attrs: dict[str, Any]) -> list[TensorType]:
    x, nsp = types[0], len(attrs["kernel"])
    if not all(isinstance(n, int) for n in x.shape[2:]):
        raise ArgumentError(f"pool: a {nsp}-D kernel needs a static {nsp + 2}-D input, got {x}")
    return infer_pool_window(types, attrs)


@register_op("lp_pool", OUT_ELEMWISE_FUSABLE, infer=_infer_window)
def lp_pool(inputs: Sequence[Any], attrs: dict[str, Any]) -> list[Any]:
    """N-d Lp pooling: the p-norm of each window."""
    a = attrs
    return [
        topi_lp.lp_pool_nd(
            inputs[0], a["p"], a["kernel"], a["strides"], a["pads"], a["dilations"], a["ceil_mode"]
        )
    ]


def _infer_pool_indices(types: Types, attrs: dict[str, Any]) -> list[TensorType]:
    (out,) = _infer_window(types, attrs)
    return [out, TensorType(out.shape, "int64")]


@register_op("max_pool_indices", OPAQUE, infer=_infer_pool_indices, num_outputs=2)
def max_pool_indices(inputs: Sequence[Any], attrs: dict[str, Any]) -> list[Any]:
    """Max pooling that also returns each maximum's flat index, as MaxPool's second output."""
    a = attrs
    return topi_pi.max_pool_with_indices(
        inputs[0],
        a["kernel"],
        a["strides"],
        a["pads"],
        a["dilations"],
        a["ceil_mode"],
        a["storage_order"],
    )


def _infer_unpool(types: Types, attrs: dict[str, Any]) -> list[TensorType]:
    x, idx = types
    if idx.shape != x.shape or idx.dtype != "int64":
        raise ArgumentError(f"max_unpool: indices {idx} must be int64 of the shape of {x}")
    if len(attrs["out_spatial"]) != x.ndim - 2:
        raise ArgumentError(f"max_unpool: output size {attrs['out_spatial']} does not fit {x}")
    return [TensorType((*x.shape[:2], *attrs["out_spatial"]), x.dtype)]


@register_op("max_unpool", OPAQUE, infer=_infer_unpool, num_inputs=2)
def max_unpool(inputs: Sequence[Any], attrs: dict[str, Any]) -> list[Any]:
    """Places values back at the indices max pooling recorded, zero elsewhere."""
    a = attrs
    return [
        topi_pi.max_unpool(
            inputs[0], inputs[1], a["kernel"], a["strides"], a["pads"], a["out_spatial"]
        )
    ]


def _infer_col2im(types: Types, attrs: dict[str, Any]) -> list[TensorType]:
    x, block = types[0], attrs["block"]
    taps = 1
    for b in block:
        taps *= b
    n = len(attrs["image"])
    if x.ndim != 3 or not isinstance(x.shape[1], int) or x.shape[1] % taps:
        raise ArgumentError(f"col2im: input {x} is not (N, C x {taps} block taps, blocks)")
    sizes = [len(attrs[k]) for k in ("block", "strides", "dilations")] + [len(attrs["pads"]) // 2]
    if n < 1 or sizes != [n] * 4 or len(attrs["pads"]) != 2 * n:
        raise ArgumentError(f"col2im: block, strides, dilations and pads do not fit {n} axes")
    return [TensorType((x.shape[0], x.shape[1] // taps, *attrs["image"]), x.dtype)]


@register_op("col2im", OUT_ELEMWISE_FUSABLE, infer=_infer_col2im)
def col2im(inputs: Sequence[Any], attrs: dict[str, Any]) -> list[Any]:
    """Sums columns of sliding blocks back into images (ONNX Col2Im, the inverse of im2col)."""
    a = attrs
    return [
        topi_ct.col2im(inputs[0], a["image"], a["block"], a["strides"], a["pads"], a["dilations"])
    ]


def _infer_im2col(types: Types, attrs: dict[str, Any]) -> list[TensorType]:
    x = types[0]
    if x.ndim != 4 or not x.is_static or len(attrs["kernel"]) != 2 or len(attrs["pads"]) != 4:
        raise ArgumentError(f"im2col: input {x} is not a static NCHW image with a 2-D window")
    kh, kw = attrs["kernel"]
    oh, ow = output_plane(x, kh, kw, attrs)
    if oh < 1 or ow < 1:
        raise ArgumentError(f"im2col: the window {attrs['kernel']} leaves no output of {x}")
    n, c = x.shape[0], x.shape[1]
    return [TensorType((n * oh * ow, c * attrs["kernel"][0] * attrs["kernel"][1]), x.dtype)]


@register_op("im2col", INJECTIVE, infer=_infer_im2col)
def im2col(inputs: Sequence[Any], attrs: dict[str, Any]) -> list[Any]:
    """The ``[N * OH * OW, C * KH * KW]`` matrix of a convolution's input windows (zero in
    the padding): not an ONNX op, the first half of a convolution as a GEMM
    (``frontend/passes/conv_as_gemm.py``)."""
    (x,) = inputs
    shape = tuple(int(d.value) for d in x.shape)
    (kh, kw), c = attrs["kernel"], shape[1]
    oh, ow = output_plane(TensorType(shape, x.dtype), kh, kw, attrs)
    m, k = shape[0] * oh * ow, c * kh * kw
    return [conv_gemm.im2col_nchw(x, kh, kw, attrs, (oh, ow), (m, k))]
