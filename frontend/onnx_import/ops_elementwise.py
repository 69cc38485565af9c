"""Converters for elementwise ONNX ops: arithmetic, activations, Identity, Constant."""

from __future__ import annotations

import numpy as np

from ember.errors import ArgumentError
from ember.frontend.onnx_import.context import ConvertContext
from ember.frontend.onnx_import.registry import converter
from ember.frontend.onnx_import.sequences import Bound

# Opsets 1-6 broadcast only with an explicit ``broadcast`` attribute; those are not supported.
_BINARY = {"Add": "add", "Sub": "subtract", "Mul": "multiply", "Div": "divide"}
_UNARY = {"Relu": "relu", "Sigmoid": "sigmoid", "Tanh": "tanh", "Exp": "exp"}


def _binary_rule(op_type: str, op: str) -> None:
    @converter(op_type, since=7)
    def convert(ctx: ConvertContext) -> list[str]:
        a, b = ctx.type(0), ctx.type(1)
        if a.dtype != b.dtype:
            raise ArgumentError(f"{op_type} inputs have different dtypes ({a.dtype}, {b.dtype})")
        return ctx.emit(op, [ctx.input(0), ctx.input(1)])


def _unary_rule(op_type: str, op: str) -> None:
    # version 1 carried a legacy ``consumed_inputs`` attribute; 6 onwards is the modern form
    @converter(op_type, since=6)
    def convert(ctx: ConvertContext) -> list[str]:
        return ctx.emit(op, [ctx.input(0)])


for _t, _o in _BINARY.items():
    _binary_rule(_t, _o)
for _t, _o in _UNARY.items():
    _unary_rule(_t, _o)


@converter("Identity", since=1)
def identity(ctx: ConvertContext) -> list[Bound]:
    """ONNX Identity: no node, the output is the input's value (a sequence or an optional
    from opsets 14 and 16 on)."""
    return [ctx.value(0)]


_CONSTANT_ATTRS = {
    "value_float": np.float32,
    "value_floats": np.float32,
    "value_int": np.int64,
    "value_ints": np.int64,
}


@converter("Constant", since=1)
def constant(ctx: ConvertContext) -> list[str]:
    """ONNX Constant: becomes a graph param, from whichever ``value*`` attribute is set."""
    if ctx.has_attr("value"):
        return [ctx.const(np.asarray(ctx.attr("value")))]
    for name, dtype in _CONSTANT_ATTRS.items():
        if ctx.has_attr(name):
            return [ctx.const(np.asarray(ctx.attr(name), dtype=dtype))]
    if (
        ctx.has_attr("sparse_value")
        or ctx.has_attr("value_string")
        or ctx.has_attr("value_strings")
    ):
        raise ArgumentError("Constant: sparse and string constants are not supported")
    raise ArgumentError("Constant: no value attribute")
