"""Converters for ONNX's sampling and block ops: GridSample, DeformConv, AffineGrid, Col2Im,
CenterCropPad.

GridSample becomes Ember's ``grid_sample`` op (``tir/topi/grid_sample.py``): opset 16
takes 4-D images and calls its modes bilinear/bicubic, opset 20 takes any number of
spatial axes and calls them linear/cubic. DeformConv is its two halves: the
``deform_columns`` op samples the image at each kernel tap's moved position (bilinear,
zeros outside; ``tir/topi/deform_conv.py``), and a grouped ``matmul`` of the weights
with those columns is the convolution (plus the bias). The other three are fixed by
sizes that arrive as inputs (``ctx.constant``; a model that feeds them at run time is
compiled once per value), so they are written as static graphs of existing ops:
AffineGrid is the batch of affine maps ``theta`` applied to a constant grid of
normalised pixel positions (a matmul), CenterCropPad a slice and a zero pad, and Col2Im
Ember's ``col2im`` op, the tap walk of a transposed convolution without its weights
(``tir/topi/conv_transpose.py``).
"""

from __future__ import annotations

import numpy as np

from ember.errors import ArgumentError
from ember.frontend.onnx_import.context import ConvertContext
from ember.frontend.onnx_import.ops_indexing import const_ints, emit_slice
from ember.frontend.onnx_import.ops_nn import int_attr
from ember.frontend.onnx_import.ops_transform import _static
from ember.frontend.onnx_import.registry import converter
from ember.frontend.ops.registry import normalize_axis
from ember.tir.topi.deform_conv import deform_output_shape

PADDING_MODES = ("zeros", "border", "reflection")


def _grid_sample(ctx: ConvertContext, names: dict[str, str], default: str) -> list[str]:
    mode = ctx.attr("mode", default)
    padding = ctx.attr("padding_mode", "zeros")
    if mode not in names or padding not in PADDING_MODES:
        raise ArgumentError(
            f"GridSample '{ctx.name}': mode {mode!r} with padding_mode {padding!r} is not "
            f"supported (modes {sorted(names)}, padding {list(PADDING_MODES)})"
        )
    x, grid = _static(ctx, 0), _static(ctx, 1)
    if not ctx.type(1).dtype.startswith(("float", "bfloat")):
        raise ArgumentError(f"GridSample '{ctx.name}': a {ctx.type(1).dtype} grid is not supported")
    if names[mode] != "nearest" and not ctx.type(0).dtype.startswith(("float", "bfloat")):
        raise ArgumentError(
            f"GridSample '{ctx.name}': {mode} sampling of a {ctx.type(0).dtype} image is not "
            "supported (only nearest reads integers)"
        )
    if len(x) < 3 or len(grid) != len(x) or grid[-1] != len(x) - 2 or grid[0] != x[0]:
        raise ArgumentError(
            f"GridSample '{ctx.name}': grid {list(grid)} does not fit input {list(x)}; it must "
            f"be (N, *output spatial, {max(len(x) - 2, 1)})"
        )
    attrs = {
        "mode": names[mode],
        "padding_mode": padding,
        "align_corners": bool(ctx.attr("align_corners", 0)),
    }
    return ctx.emit("grid_sample", [ctx.input(0), ctx.input(1)], attrs)


@converter("GridSample", since=16, until=19)
def grid_sample_16(ctx: ConvertContext) -> list[str]:
    """ONNX GridSample at opsets 16-19: 4-D images, modes bilinear, nearest, bicubic."""
    if ctx.type(0).ndim != 4:
        raise ArgumentError(
            f"GridSample '{ctx.name}': a {ctx.type(0).ndim}-D input is not supported before "
            "opset 20 (4-D only)"
        )
    names = {"bilinear": "linear", "nearest": "nearest", "bicubic": "cubic"}
    return _grid_sample(ctx, names, "bilinear")


@converter("GridSample", since=20)
def grid_sample_20(ctx: ConvertContext) -> list[str]:
    """ONNX GridSample from opset 20: any number of spatial axes, modes linear, nearest, cubic."""
    names = {"linear": "linear", "nearest": "nearest", "cubic": "cubic"}
    return _grid_sample(ctx, names, "linear")


@converter("DeformConv", since=19)
def deform_conv(ctx: ConvertContext) -> list[str]:
    """ONNX DeformConv: ``Y = W (*) columns + B``, the columns sampled at moved taps."""
    x, w = _static(ctx, 0), _static(ctx, 1)
    r = len(x) - 2
    group, offset_group = int(ctx.attr("group", 1)), int(ctx.attr("offset_group", 1))
    kernel = int_attr(ctx, "kernel_shape", tuple(w[2:]))
    if r < 1 or len(w) != r + 2 or kernel != tuple(w[2:]) or group < 1:
        raise ArgumentError(
            f"DeformConv '{ctx.name}': weights {list(w)} do not fit input {list(x)} "
            f"(kernel_shape {list(kernel)}, group {group})"
        )
    if x[1] != w[1] * group or w[0] % group:
        raise ArgumentError(
            f"DeformConv '{ctx.name}': {x[1]} input channels and weights {list(w)} do not "
            f"make {group} groups"
        )
    dtype = ctx.type(0).dtype
    if ctx.type(1).dtype != dtype or not dtype.startswith(("float", "bfloat")):
        raise ArgumentError(
            f"DeformConv '{ctx.name}': input {dtype} and weights {ctx.type(1).dtype} must be "
            "one floating-point dtype"
        )
    strides = int_attr(ctx, "strides", (1,) * r)
    pads = int_attr(ctx, "pads", (0,) * (2 * r))
    dilations = int_attr(ctx, "dilations", (1,) * r)
    if min(strides) < 1 or min(dilations) < 1 or min(pads) < 0:
        raise ArgumentError(
            f"DeformConv '{ctx.name}': strides, dilations and pads must be positive "
            "(pads non-negative)"
        )
    attrs = {
        "kernel": kernel,
        "strides": strides,
        "pads": pads,
        "dilations": dilations,
        "offset_group": offset_group,
    }
    sampled = [ctx.input(0), ctx.input(2)] + ([ctx.input(4)] if ctx.has_input(4) else [])
    cols = ctx.emit1("deform_columns", sampled, attrs)
    out = deform_output_shape(x[2:], kernel, strides, pads, dilations)
    inner = w[1] * int(np.prod(kernel))
    cols = ctx.emit1(
        "reshape", [cols], {"shape": (x[0], group, inner, int(np.prod(out, dtype=np.int64)))}
    )
    weights = ctx.emit1("reshape", [ctx.input(1)], {"shape": (group, w[0] // group, inner)})
    y = ctx.emit1("matmul", [weights, cols])  # (N, group, out channels per group, outputs)
    y = ctx.emit1("reshape", [y], {"shape": (x[0], w[0], *out)})
    if not ctx.has_input(3):
        return [y]
    bias = ctx.emit1("reshape", [ctx.input(3)], {"shape": (w[0], *(1,) * r)})
    return ctx.emit("add", [y, bias])


def _normalized_positions(n: int, align_corners: bool) -> np.ndarray:
    """The normalised coordinate of each of ``n`` pixels: their centres span [-1, 1] with
    ``align_corners``, else their outer edges do (one pixel: -1, or its centre 0)."""
    i = np.arange(n, dtype=np.float64)
    if align_corners:
        return -1.0 + 2.0 * i / (n - 1) if n > 1 else np.full(1, -1.0)
    return -1.0 + (2.0 * i + 1.0) / n


def _base_grid(spatial: tuple[int, ...], align_corners: bool) -> np.ndarray:
    """(prod(spatial), r + 1) homogeneous positions, row-major over the spatial axes, each
    row (x, y[, z], 1): the last axis's coordinate first, as grids list them."""
    axes = [_normalized_positions(n, align_corners) for n in spatial]
    mesh = np.meshgrid(*axes, indexing="ij")
    cols = [m.reshape(-1) for m in reversed(mesh)]
    return np.stack([*cols, np.ones_like(cols[0])], axis=1)


@converter("AffineGrid", since=20)
def affine_grid(ctx: ConvertContext) -> list[str]:
    """ONNX AffineGrid: ``grid[n, *p] = theta[n] @ (x, y[, z], 1)`` at each output pixel ``p``."""
    theta = _static(ctx, 0)
    size = const_ints(ctx, 1)
    r = len(size) - 2
    if r not in (2, 3) or theta != (theta[0], r, r + 1) or size[0] != theta[0]:
        raise ArgumentError(
            f"AffineGrid '{ctx.name}': theta {list(theta)} and size {list(size)} do not fit; "
            "(N, 2, 3) with (N, C, H, W) or (N, 3, 4) with (N, C, D, H, W) are supported"
        )
    if min(size) < 0:
        raise ArgumentError(f"AffineGrid '{ctx.name}': negative size {list(size)}")
    spatial = size[2:]
    dtype = ctx.type(0).dtype
    base = ctx.const(_base_grid(spatial, bool(ctx.attr("align_corners", 0))).astype(dtype))
    theta_t = ctx.emit1("transpose", [ctx.input(0)], {"perm": (0, 2, 1)})
    grid = ctx.emit1("matmul", [base, theta_t])  # (N, prod(spatial), r)
    return ctx.emit("reshape", [grid], {"shape": (theta[0], *spatial, r)})


@converter("Col2Im", since=18)
def col2im(ctx: ConvertContext) -> list[str]:
    """ONNX Col2Im: sums columns of sliding blocks back into (N, C, *image_shape) images."""
    image, block = const_ints(ctx, 1), const_ints(ctx, 2)
    n = len(image)
    if n < 1 or len(block) != n or min(image) < 1 or min(block) < 1:
        raise ArgumentError(
            f"Col2Im '{ctx.name}': image_shape {list(image)} and block_shape {list(block)} "
            "must be positive and of one length"
        )
    src = _static(ctx, 0)
    strides = int_attr(ctx, "strides", (1,) * n)
    dilations = int_attr(ctx, "dilations", (1,) * n)
    pads = int_attr(ctx, "pads", (0,) * (2 * n))
    if min(strides) < 1 or min(dilations) < 1 or min(pads) < 0:
        raise ArgumentError(
            f"Col2Im '{ctx.name}': strides {list(strides)}, dilations {list(dilations)} and "
            f"pads {list(pads)} must be positive (pads non-negative)"
        )
    taps = int(np.prod(block))
    blocks = [
        (image[d] + pads[d] + pads[n + d] - dilations[d] * (block[d] - 1) - 1) // strides[d] + 1
        for d in range(n)
    ]
    if len(src) != 3 or src[1] % taps or src[2] != int(np.prod(blocks)) or min(blocks) < 1:
        raise ArgumentError(
            f"Col2Im '{ctx.name}': input {list(src)} does not hold {taps}-tap blocks of image "
            f"{list(image)} at {blocks} block positions"
        )
    attrs = {
        "image": image,
        "block": block,
        "strides": strides,
        "pads": pads,
        "dilations": dilations,
    }
    return ctx.emit("col2im", [ctx.input(0)], attrs)


@converter("CenterCropPad", since=18)
def center_crop_pad(ctx: ConvertContext) -> list[str]:
    """ONNX CenterCropPad: each listed axis cropped or zero-padded to its size around the
    centre (an odd difference leaves the extra element at the end)."""
    src = _static(ctx, 0)
    shape = const_ints(ctx, 1)
    axes = ctx.attr("axes", None)
    axes = list(range(len(src))) if axes is None else [int(a) for a in axes]
    axes = [normalize_axis(a, len(src), "CenterCropPad axis") for a in axes]
    if len(shape) != len(axes) or len(set(axes)) != len(axes) or min(shape, default=0) < 0:
        raise ArgumentError(
            f"CenterCropPad '{ctx.name}': shape {list(shape)} does not give one size per "
            f"axis {axes} of input {list(src)}"
        )
    crops: dict[int, tuple[int, int, int]] = {}
    pads = [0] * (2 * len(src))
    for a, want in zip(axes, shape):
        have = src[a]
        if want < have:
            begin = (have - want) // 2
            crops[a] = (begin, begin + want, 1)
        elif want > have:
            pads[a] = (want - have) // 2
            pads[len(src) + a] = want - have - pads[a]
    out = emit_slice(ctx, ctx.input(0), src, crops)
    if not any(pads):
        return [out]
    dtype = ctx.type(0).dtype
    value = False if dtype == "bool" else 0.0 if "float" in dtype else 0
    return ctx.emit("pad", [out], {"pads": tuple(pads), "mode": "constant", "value": value})
