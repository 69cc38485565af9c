"""Converters for broadcasting and type ONNX ops: comparisons, logic, bits, Pow, Mod, Max/Min/
Sum/Mean, PRelu, Where, Cast, CastLike and Dropout (inference).

The Ember ops are in ``frontend/ops/broadcast.py``. Forms before opset 7 that
broadcast only under an explicit ``broadcast`` attribute are not converted;
the variadic ops are taken from opset 6 (same shapes there, a special case of
broadcasting). Dropout is converted for inference: its output is its input and
its mask a constant (all ones from opset 12); a constant ``training_mode`` of
true with a nonzero ratio is refused, since it asks for random numbers.
"""

from __future__ import annotations

import numpy as np

from ember.errors import ArgumentError
from ember.frontend.narrow_dtypes import BIT_STORED
from ember.frontend.onnx_import.context import ConvertContext
from ember.frontend.onnx_import.registry import converter
from ember.tir import dtype as dt
from ember.tir.topi.minifloat import ROUND_MODES

# ONNX op type -> (Ember op, first opset converted)
_BINARY = {
    "Equal": ("equal", 7),
    "Greater": ("greater", 7),
    "Less": ("less", 7),
    "GreaterOrEqual": ("greater_equal", 12),
    "LessOrEqual": ("less_equal", 12),
    "And": ("logical_and", 7),
    "Or": ("logical_or", 7),
    "Xor": ("logical_xor", 7),
    "BitwiseAnd": ("bitwise_and", 18),
    "BitwiseOr": ("bitwise_or", 18),
    "BitwiseXor": ("bitwise_xor", 18),
    "Pow": ("pow", 7),
    "PRelu": ("prelu", 6),
    "Where": ("where", 9),
}
_VARIADIC = {"Max": "max", "Min": "min", "Sum": "sum", "Mean": "mean"}

# TensorProto.DataType -> Ember dtype, for the types Ember computes with.
ONNX_DTYPES = {
    1: "float32",
    2: "uint8",
    3: "int8",
    4: "uint16",
    5: "int16",
    6: "int32",
    7: "int64",
    9: "bool",
    10: "float16",
    11: "float64",
    12: "uint32",
    13: "uint64",
    16: "bfloat16",
}

# The narrower types (frontend/narrow_dtypes.py) Cast and CastLike convert to and from.
NARROW_ONNX_DTYPES = {
    17: "float8_e4m3fn",
    18: "float8_e4m3fnuz",
    19: "float8_e5m2",
    20: "float8_e5m2fnuz",
    21: "uint4",
    22: "int4",
    23: "float4_e2m1fn",
    24: "float8_e8m0fnu",
    25: "uint2",
    26: "int2",
}


def _binary_rule(op_type: str, op: str, since: int) -> None:
    @converter(op_type, since=since)
    def convert(ctx: ConvertContext) -> list[str]:
        return ctx.emit(op, ctx.inputs())


def _variadic_rule(op_type: str, op: str) -> None:
    @converter(op_type, since=6)
    def convert(ctx: ConvertContext) -> list[str]:
        inputs = ctx.inputs()
        if len(inputs) == 1 and op != "mean":
            return inputs  # Max / Min / Sum of one tensor is that tensor
        return ctx.emit(op, inputs)


for _t, (_o, _since) in _BINARY.items():
    _binary_rule(_t, _o, _since)
for _t, _o in _VARIADIC.items():
    _variadic_rule(_t, _o)


@converter("Mod", since=10)
def mod(ctx: ConvertContext) -> list[str]:
    """fmod=0: the remainder takes the divisor's sign (Python's %), integers only;
    fmod=1: C's fmod, the dividend's sign (integers and floats)."""
    fmod = int(ctx.attr("fmod", 0))
    if fmod not in (0, 1):
        raise ArgumentError(f"Mod: fmod must be 0 or 1, got {fmod}")
    if not fmod and dt.is_float(ctx.type(0).dtype):
        raise ArgumentError("Mod: fmod=0 is not defined for floating-point inputs; set fmod=1")
    return ctx.emit("fmod" if fmod else "mod", [ctx.input(0), ctx.input(1)])


@converter("BitShift", since=11)
def bit_shift(ctx: ConvertContext) -> list[str]:
    """ONNX BitShift: the ``direction`` attribute picks the left or right shift op."""
    direction = ctx.attr("direction")
    ops = {"LEFT": "shift_left", "RIGHT": "shift_right"}
    if direction not in ops:
        raise ArgumentError(f"BitShift: direction must be 'LEFT' or 'RIGHT', got {direction!r}")
    return ctx.emit(ops[direction], [ctx.input(0), ctx.input(1)])


def onnx_dtype(code: int, what: str) -> str:
    """The Ember dtype of an ONNX element type code, or why it is not supported."""
    if code not in ONNX_DTYPES:
        # optional dependency: onnx
        from onnx import TensorProto

        try:
            type_name = TensorProto.DataType.Name(code)
        except ValueError:
            raise ArgumentError(f"{what}: {code} is not an ONNX element type") from None
        raise ArgumentError(f"{what}: element type {type_name} is not supported by Ember")
    return ONNX_DTYPES[code]


def _cast_to(ctx: ConvertContext, dtype: str) -> list[str]:
    """A cast of input 0 to ``dtype``; to or from float8, float4, 4- or 2-bit types it is a
    ``cast_narrow``, with ``saturate`` (19+: float8 targets) and ``round_mode`` (24+: e8m0)."""
    src = ctx.type(0).dtype
    if src == dtype:
        return [ctx.input(0)]
    if src not in BIT_STORED and dtype not in BIT_STORED:
        return ctx.emit("cast", [ctx.input(0)], {"dtype": dtype})
    saturate = bool(ctx.attr("saturate", 1)) if ctx.opset >= 19 else True
    round_mode = str(ctx.attr("round_mode", "up")) if ctx.opset >= 24 else "up"
    if round_mode not in ROUND_MODES:
        raise ArgumentError(
            f"{ctx.op_type} '{ctx.name}': round_mode must be one of {ROUND_MODES}, got "
            f"{round_mode!r}"
        )
    attrs = {"src": src, "dtype": dtype, "saturate": saturate, "round_mode": round_mode}
    return ctx.emit("cast_narrow", [ctx.input(0)], attrs)


@converter("BitCast", since=26)
def bitcast(ctx: ConvertContext) -> list[str]:
    """ONNX BitCast: the same bits read as another type of the same width."""
    dtype = onnx_dtype(int(ctx.attr("to")), "BitCast 'to'")
    return ctx.emit("bitcast", [ctx.input(0)], {"dtype": dtype})


@converter("Cast", since=6)
def cast(ctx: ConvertContext) -> list[str]:
    """ONNX Cast; ``saturate`` and ``round_mode`` only concern float8 targets."""
    code = int(ctx.attr("to"))
    return _cast_to(ctx, NARROW_ONNX_DTYPES.get(code) or onnx_dtype(code, "Cast 'to'"))


@converter("CastLike", since=15)
def cast_like(ctx: ConvertContext) -> list[str]:
    """ONNX CastLike: a Cast to the second input's dtype."""
    return _cast_to(ctx, ctx.type(1).dtype)


@converter("Dropout", since=6, until=11)
def dropout_6(ctx: ConvertContext) -> list[str]:
    """Before opset 12 the spec leaves the inference mask unsaid; onnxruntime gives zeros
    (false), so Ember does too. The mask has the input's type before 10, bool from 10."""
    return _dropout_outputs(ctx, "bool" if ctx.opset >= 10 else ctx.type(0).dtype, 0)


@converter("Dropout", since=12)
def dropout_12(ctx: ConvertContext) -> list[str]:
    """ratio and training_mode became optional inputs; training needs both known."""
    if ctx.has_input(2):
        training = bool(np.asarray(ctx.constant(2)).reshape(()).item())
        ratio = float(np.asarray(ctx.constant(1)).reshape(())) if ctx.has_input(1) else 0.5
        if training and ratio != 0.0:
            raise ArgumentError(
                f"Dropout in training mode (ratio {ratio}) draws random numbers; "
                "Ember compiles inference only and this is not supported"
            )
    return _dropout_outputs(ctx, "bool", 1)  # 12+: "the mask will contain all ones"


def _dropout_outputs(ctx: ConvertContext, mask_dtype: str, fill: int) -> list[str]:
    outs = [ctx.input(0)]
    if ctx.num_outputs > 1 and ctx.node.output[1]:
        t = ctx.type(0)
        if not t.is_static:
            raise ArgumentError(
                f"Dropout: the mask output of a tensor of symbolic shape {list(t.shape)} "
                "is not supported"
            )
        mask = np.full(tuple(int(d) for d in t.shape), fill, dtype=dt.numpy_dtype(mask_dtype))
        outs.append(ctx.const(mask))
    return outs
