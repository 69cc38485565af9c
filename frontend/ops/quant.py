"""Quantization ops: quantize, dequantize, dynamic range, integer and requantized products.

Attributes (set by the converters, every one present):
- ``quantize_linear`` / ``dequantize_linear``: axis (non-negative int), block_size (int,
  0 when not blocked), out_dtype (str: the quantized type, or the float type produced);
  quantize's saturate (bool: ONNX's, for float8 types), dequantize's x_dtype (str: the
  quantized type; a float8 or float4 kernel input holds bits, which its dtype cannot say).
- ``conv_integer`` / ``qlinear_conv``: strides, pads (begin..., end...), dilations
  (tuples), group (int), as ``conv``.
- ``dynamic_qparams``, ``matmul_integer``, ``qlinear_matmul``: none.
- ``matmul_int8_packed`` (made by ``pack_int8_weights``): n, k (ints: W's columns, rows).

Zero points arrive as tensors of the quantized dtype (a converter makes a zero constant
when ONNX omits one), so a kernel never guesses a type.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ember.errors import ArgumentError
from ember.frontend.graph import TensorType
from ember.frontend.op_kinds import BROADCAST, COMM_REDUCE, OUT_ELEMWISE_FUSABLE
from ember.frontend.ops.registry import get_op, register_op
from ember.tir.topi import quant

Types = Sequence[TensorType]
INT8 = ("int8", "uint8")


def _check_params(types: Types, attrs: dict[str, Any]) -> None:
    """Scales and zero points fit the data per tensor, per axis or per block."""
    x = types[0]
    for t in types[1:]:
        if x.is_static and t.is_static:
            quant.param_layout(t.shape, x.shape, attrs["axis"], attrs["block_size"])
    if len(types) > 2 and _many(types[1]) != _many(types[2]):
        raise ArgumentError(f"the scale {types[1]} and zero point {types[2]} differ in shape")


def _many(t: TensorType) -> bool:
    """More than one element (a scalar scale of shape [1] and a 0-d zero point agree)."""
    return any(d != 1 for d in t.shape)


def _infer_quantize(types: Types, attrs: dict[str, Any]) -> list[TensorType]:
    out = attrs["out_dtype"]
    if out not in quant.QRANGE and out not in quant.QFLOATS:
        raise ArgumentError(f"quantize_linear: cannot quantize to {out}")
    if len(types) > 2 and types[2].dtype != out:
        raise ArgumentError(f"quantize_linear: the zero point is {types[2].dtype}, not {out}")
    _check_params(types, attrs)
    return [TensorType(types[0].shape, attrs["out_dtype"])]


@register_op("quantize_linear", BROADCAST, infer=_infer_quantize, num_inputs=(2, 3))
def quantize_linear(inputs: Sequence[Any], attrs: dict[str, Any]) -> list[Any]:
    """Float to int8/uint8 (or other) by scale and zero point, per tensor, axis or block."""
    zp = inputs[2] if len(inputs) > 2 else None
    a = attrs
    layout = (a["axis"], a["block_size"], a["out_dtype"])
    return [quant.quantize_linear(inputs[0], inputs[1], zp, *layout, saturate=a["saturate"])]


def _infer_dequantize(types: Types, attrs: dict[str, Any]) -> list[TensorType]:
    if types[0].dtype != attrs["x_dtype"]:
        raise ArgumentError(
            f"dequantize_linear: the data is {types[0].dtype}, its x_dtype {attrs['x_dtype']}"
        )
    _check_params(types, attrs)
    return [TensorType(types[0].shape, attrs["out_dtype"])]


@register_op("dequantize_linear", BROADCAST, infer=_infer_dequantize, num_inputs=(2, 3))
def dequantize_linear(inputs: Sequence[Any], attrs: dict[str, Any]) -> list[Any]:
    """Integer (or float8/float4) to float by scale and zero point, per tensor, axis or block."""
    zp = inputs[2] if len(inputs) > 2 else None
    a = attrs
    layout = (a["axis"], a["block_size"], a["out_dtype"])
    return [quant.dequantize_linear(inputs[0], inputs[1], zp, *layout, x_dtype=a["x_dtype"])]


def _infer_qparams(types: Types, attrs: dict[str, Any]) -> list[TensorType]:
    if types[0].dtype != "float32":
        raise ArgumentError(f"dynamic_qparams: the input must be float32, got {types[0]}")
    return [TensorType((), "float32"), TensorType((), "uint8")]


@register_op("dynamic_qparams", COMM_REDUCE, infer=_infer_qparams, num_outputs=2)
def dynamic_qparams(inputs: Sequence[Any], attrs: dict[str, Any]) -> list[Any]:
    """Scale and zero point for uint8 computed from the data's range at run time."""
    return list(quant.dynamic_qparams(inputs[0]))


def _int8_operands(types: Types, which: Sequence[int], op: str) -> None:
    for k in which:
        if types[k].dtype not in INT8:
            raise ArgumentError(f"{op}: input {k} must be int8 or uint8, got {types[k]}")


def _infer_matmul_integer(types: Types, attrs: dict[str, Any]) -> list[TensorType]:
    _int8_operands(types, (0, 1), "matmul_integer")
    return [TensorType(get_op("matmul").infer(types[:2], attrs)[0].shape, "int32")]


@register_op("matmul_integer", OUT_ELEMWISE_FUSABLE, infer=_infer_matmul_integer, num_inputs=(2, 4))
def matmul_integer(inputs: Sequence[Any], attrs: dict[str, Any]) -> list[Any]:
    """Integer matrix product with zero points subtracted, accumulated in int32."""
    a_zp = inputs[2] if len(inputs) > 2 else None
    b_zp = inputs[3] if len(inputs) > 3 else None
    return [quant.matmul_integer(inputs[0], inputs[1], a_zp, b_zp)]


def _infer_matmul_int8_packed(types: Types, attrs: dict[str, Any]) -> list[TensorType]:
    a, p = types
    if a.ndim != 2 or a.dtype != "uint8" or p.dtype != "int8" or p.ndim != 4:
        raise ArgumentError(f"matmul_int8_packed: input {a} and packed weights {p} do not fit")
    return [TensorType((a.shape[0], attrs["n"]), "int32")]


@register_op(
    "matmul_int8_packed", OUT_ELEMWISE_FUSABLE, infer=_infer_matmul_int8_packed, num_inputs=2
)
def matmul_int8_packed(inputs: Sequence[Any], attrs: dict[str, Any]) -> list[Any]:
    """``A @ W`` in int32 with u8 A and s8 weights packed ``P[N/16, K/4, 16, 4]``
    (``pack_int8_weights``); the CPU strategy gives it to the VNNI kernel."""
    return [quant.matmul_int8_packed(inputs[0], inputs[1], attrs["n"], attrs["k"])]


def _infer_conv_integer(types: Types, attrs: dict[str, Any]) -> list[TensorType]:
    _int8_operands(types, (0, 1), "conv_integer")
    return [TensorType(get_op("conv").infer(types[:2], attrs)[0].shape, "int32")]


def _conv_args(
    attrs: dict[str, Any],
) -> tuple[Sequence[int], Sequence[int], Sequence[int], int]:
    return attrs["strides"], attrs["pads"], attrs["dilations"], attrs["group"]


@register_op("conv_integer", OUT_ELEMWISE_FUSABLE, infer=_infer_conv_integer, num_inputs=(2, 4))
def conv_integer(inputs: Sequence[Any], attrs: dict[str, Any]) -> list[Any]:
    """Integer convolution with zero points subtracted, accumulated in int32."""
    x_zp = inputs[2] if len(inputs) > 2 else None
    w_zp = inputs[3] if len(inputs) > 3 else None
    return [quant.conv_integer(inputs[0], inputs[1], x_zp, w_zp, *_conv_args(attrs))]


def _infer_qlinear_matmul(types: Types, attrs: dict[str, Any]) -> list[TensorType]:
    _int8_operands(types, (0, 3, 7), "qlinear_matmul")
    shape = get_op("matmul").infer([types[0], types[3]], attrs)[0].shape
    return [TensorType(shape, types[7].dtype)]


@register_op("qlinear_matmul", OUT_ELEMWISE_FUSABLE, infer=_infer_qlinear_matmul, num_inputs=8)
def qlinear_matmul(inputs: Sequence[Any], attrs: dict[str, Any]) -> list[Any]:
    """Quantized matrix product with requantization of the result to the output scale."""
    return [quant.qlinear_matmul(*inputs)]


def _infer_qlinear_conv(types: Types, attrs: dict[str, Any]) -> list[TensorType]:
    _int8_operands(types, (0, 3, 7), "qlinear_conv")
    if len(types) > 8 and types[8].dtype != "int32":
        raise ArgumentError(f"qlinear_conv: the bias must be int32, got {types[8]}")
    shape = get_op("conv").infer([types[0], types[3]], attrs)[0].shape
    return [TensorType(shape, types[7].dtype)]


@register_op("qlinear_conv", OUT_ELEMWISE_FUSABLE, infer=_infer_qlinear_conv, num_inputs=(8, 9))
def qlinear_conv(inputs: Sequence[Any], attrs: dict[str, Any]) -> list[Any]:
    """Quantized convolution with an int32 bias and requantization to the output scale."""
    bias = inputs[8] if len(inputs) > 8 else None
    x, x_scale, x_zp, w, w_scale, w_zp, y_scale, y_zp = inputs[:8]
    conv = _conv_args(attrs)
    return [quant.qlinear_conv(x, x_scale, x_zp, w, w_scale, w_zp, y_scale, y_zp, bias, *conv)]
