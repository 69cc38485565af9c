"""Elementwise and broadcasting ops: arithmetic with numpy broadcasting, activations, copy."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ember.frontend.op_kinds import BROADCAST, ELEMWISE
from ember.frontend.ops.registry import broadcast_same_dtype, register_op, same_as_input
from ember.tir import expr as E
from ember.tir import topi

_BINARY = {
    "add": lambda a, b: a + b,
    "subtract": lambda a, b: a - b,
    "multiply": lambda a, b: a * b,
    "divide": lambda a, b: _divide(a, b),
}


def _divide(a: Any, b: Any) -> Any:
    """ONNX Div: true division for floats, C's truncating division for integers."""
    return a / b if a.dtype.startswith(("float", "bfloat")) else E.truncdiv(a, b)


def _binary(name: str) -> None:
    fn = _BINARY[name]

    @register_op(name, BROADCAST, infer=broadcast_same_dtype, num_inputs=2)
    def compute(inputs: Sequence[Any], attrs: dict[str, Any]) -> list[Any]:
        return [topi.broadcast_binary(inputs[0], inputs[1], fn, name=name)]


for _name in _BINARY:
    _binary(_name)

_UNARY = {
    "relu": topi.relu,
    "sigmoid": topi.sigmoid,
    "tanh": topi.tanh,
    "exp": topi.exp,
    "copy": topi.copy,
}


def _unary(name: str) -> None:
    fn = _UNARY[name]

    @register_op(name, ELEMWISE, infer=same_as_input, num_inputs=1)
    def compute(inputs: Sequence[Any], attrs: dict[str, Any]) -> list[Any]:
        return [fn(inputs[0], name=name)]


for _name in _UNARY:
    _unary(_name)
