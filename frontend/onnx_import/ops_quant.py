"""Converters for ONNX's quantization ops: Quantize/DequantizeLinear, DynamicQuantizeLinear,
MatMulInteger, ConvInteger, QLinearMatMul, QLinearConv.

The opset forms: QuantizeLinear/DequantizeLinear 10 (per tensor only), 13 (``axis``),
19 (float16 data, float8 types, ``saturate``), 21 (``block_size``, 16-bit and 4-bit
types, Quantize's ``output_dtype``), 23 (Quantize's ``precision``, Dequantize's
``output_dtype``), 24-25 (more float8/4/2-bit types). One rule per form that changes
what the converter reads. The quantized dtype comes from the zero point, else
``output_dtype``, else uint8: an 8- or 16-bit integer, a 4- or 2-bit one, float8 (e4m3fn,
e4m3fnuz, e5m2, e5m2fnuz; its zero point must be 0 and is not read, ``saturate`` as
Cast's) or float4 e2m1 (its zero point added before rounding when quantizing, not read
when dequantizing, as ONNX's reference does).
Omitted optional zero points in the middle of an input list become zero constants.
"""

from __future__ import annotations

import numpy as np

from ember.errors import ArgumentError, UnsupportedOperatorError
from ember.frontend.onnx_import.context import ConvertContext
from ember.frontend.onnx_import.ops_nn import _spatial, resolve_pads
from ember.frontend.onnx_import.registry import converter
from ember.frontend.ops.registry import normalize_axis
from ember.tir.topi.quant import QFLOATS, QRANGE

DEQUANT_INPUTS = (*QRANGE, *QFLOATS, "int32")
FLOAT_OUT = ("float32", "float16")


def _onnx_dtype(code: int) -> str:
    # optional dependency: onnx
    from onnx import helper

    try:
        return str(np.dtype(helper.tensor_dtype_to_np_dtype(code)))
    except (KeyError, TypeError, ValueError):
        return f"ONNX type {code}"


def _unsupported(ctx: ConvertContext, what: str) -> UnsupportedOperatorError:
    return UnsupportedOperatorError(f"{ctx.op_type} node '{ctx.name}': {what} is not supported")


def _axis_and_block(ctx: ConvertContext) -> tuple[int, int]:
    ndim = ctx.type(0).ndim
    block = int(ctx.attr("block_size", 0)) if ctx.opset >= 21 else 0
    if block < 0:
        raise ArgumentError(f"{ctx.op_type} node '{ctx.name}': block_size {block} is negative")
    per_tensor = all(d == 1 for d in ctx.type(1).shape)  # a symbolic dim counts as many
    if block == 0 and per_tensor:
        return 0, 0  # per tensor: the axis is ignored (its default 1 may not even exist)
    if ctx.opset < 13:
        raise ArgumentError(
            f"{ctx.op_type} node '{ctx.name}': opset {ctx.opset} quantizes per tensor only; "
            f"the scale has shape {list(ctx.type(1).shape)}"
        )
    axis = normalize_axis(int(ctx.attr("axis", 1)), ndim, f"{ctx.op_type} node '{ctx.name}': axis")
    return axis, block


def _params(ctx: ConvertContext) -> list[str]:
    return [ctx.input(0), ctx.input(1), *([ctx.input(2)] if ctx.has_input(2) else [])]


@converter("QuantizeLinear", since=10)
def quantize_linear(ctx: ConvertContext) -> list[str]:
    """ONNX QuantizeLinear; the output dtype comes from the zero point or the opset-21 attribute."""
    if ctx.has_input(2):
        out = ctx.type(2).dtype
    elif ctx.opset >= 21 and int(ctx.attr("output_dtype", 0)):
        out = _onnx_dtype(int(ctx.attr("output_dtype")))
    else:
        out = "uint8"
    if out not in QRANGE and out not in QFLOATS:
        raise _unsupported(ctx, f"quantizing to {out}")
    x = ctx.type(0).dtype
    if x not in ("float32", "float16", "int32"):
        raise _unsupported(ctx, f"quantizing {x} data")
    precision = int(ctx.attr("precision", 0)) if ctx.opset >= 23 else 0
    if precision and _onnx_dtype(precision) != "float32":
        raise _unsupported(ctx, f"precision={_onnx_dtype(precision)} (float32 only)")
    axis, block = _axis_and_block(ctx)
    saturate = bool(ctx.attr("saturate", 1)) if ctx.opset >= 19 else True
    attrs = {"axis": axis, "block_size": block, "out_dtype": out, "saturate": saturate}
    return ctx.emit("quantize_linear", _params(ctx), attrs)


@converter("DequantizeLinear", since=10)
def dequantize_linear(ctx: ConvertContext) -> list[str]:
    """ONNX DequantizeLinear; the output dtype comes from the scale or the opset-23 attribute."""
    x = ctx.type(0).dtype
    if x not in DEQUANT_INPUTS:
        raise _unsupported(ctx, f"dequantizing {x} data")
    out = ctx.type(1).dtype
    if ctx.opset >= 23 and int(ctx.attr("output_dtype", 0)):
        out = _onnx_dtype(int(ctx.attr("output_dtype")))
    if out not in FLOAT_OUT:
        raise _unsupported(ctx, f"dequantizing to {out}")
    if ctx.has_input(2) and ctx.type(2).dtype != x:
        raise ArgumentError(
            f"DequantizeLinear node '{ctx.name}': the zero point is {ctx.type(2).dtype}, "
            f"the data {x}; they must match"
        )
    axis, block = _axis_and_block(ctx)
    attrs = {"axis": axis, "block_size": block, "out_dtype": out, "x_dtype": x}
    return ctx.emit("dequantize_linear", _params(ctx), attrs)


@converter("DynamicQuantizeLinear", since=11)
def dynamic_quantize_linear(ctx: ConvertContext) -> list[str]:
    """ONNX DynamicQuantizeLinear as run-time qparams followed by a quantize."""
    if ctx.type(0).dtype != "float32":
        raise ArgumentError(f"DynamicQuantizeLinear: the input must be float32, got {ctx.type(0)}")
    scale, zp = ctx.emit("dynamic_qparams", [ctx.input(0)])
    attrs = {"axis": 0, "block_size": 0, "out_dtype": "uint8", "saturate": True}
    y = ctx.emit1("quantize_linear", [ctx.input(0), scale, zp], attrs)
    return [y, scale, zp]


def _zero_points(ctx: ConvertContext, first: int, operands: tuple[int, int]) -> list[str]:
    """The two optional zero points at ``first`` and ``first + 1``; a missing first one
    becomes a zero of its operand's dtype when the second is given."""
    have = [ctx.has_input(first), ctx.has_input(first + 1)]
    if not have[1]:
        return [ctx.input(first)] if have[0] else []
    a = ctx.input(first) if have[0] else ctx.const(np.zeros((), ctx.type(operands[0]).dtype))
    return [a, ctx.input(first + 1)]


def _check_int8(ctx: ConvertContext, indices: tuple[int, ...]) -> None:
    for k in indices:
        if ctx.type(k).dtype not in ("int8", "uint8"):
            raise _unsupported(ctx, f"input {k} of dtype {ctx.type(k).dtype} (int8/uint8 only)")


@converter("MatMulInteger", since=10)
def matmul_integer(ctx: ConvertContext) -> list[str]:
    """ONNX MatMulInteger on int8/uint8 with optional zero points."""
    _check_int8(ctx, (0, 1))
    zps = _zero_points(ctx, 2, (0, 1))
    return ctx.emit("matmul_integer", [ctx.input(0), ctx.input(1), *zps])


def _conv_attrs(ctx: ConvertContext, w_index: int) -> dict:
    sizes = _spatial(ctx)
    n = len(sizes)
    w = ctx.type(w_index)
    kernel = tuple(int(k) for k in ctx.attr("kernel_shape", w.shape[2:]))
    strides = tuple(int(s) for s in ctx.attr("strides", (1,) * n))
    dil = tuple(int(d) for d in ctx.attr("dilations", (1,) * n))
    return {
        "strides": strides,
        "pads": resolve_pads(ctx, sizes, kernel, strides, dil),
        "dilations": dil,
        "group": int(ctx.attr("group", 1)),
    }


@converter("ConvInteger", since=10)
def conv_integer(ctx: ConvertContext) -> list[str]:
    """ONNX ConvInteger on int8/uint8 with optional zero points."""
    _check_int8(ctx, (0, 1))
    zps = _zero_points(ctx, 2, (0, 1))
    return ctx.emit("conv_integer", [ctx.input(0), ctx.input(1), *zps], _conv_attrs(ctx, 1))


@converter("QLinearMatMul", since=10)
def qlinear_matmul(ctx: ConvertContext) -> list[str]:
    """ONNX QLinearMatMul on int8/uint8."""
    _check_int8(ctx, (0, 3, 7))
    return ctx.emit("qlinear_matmul", [ctx.input(i) for i in range(8)])


@converter("QLinearConv", since=10)
def qlinear_conv(ctx: ConvertContext) -> list[str]:
    """ONNX QLinearConv on int8/uint8, with an optional int32 bias."""
    _check_int8(ctx, (0, 3, 7))
    ins = [ctx.input(i) for i in range(8)] + ([ctx.input(8)] if ctx.has_input(8) else [])
    return ctx.emit("qlinear_conv", ins, _conv_attrs(ctx, 3))
