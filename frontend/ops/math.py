"""Unary elementwise ops beyond the basic ones: math functions, activations, tests, clip.

Each op here is one tensor in, one tensor of the same shape out, computed by
``tir/topi/activation.py``. Their shape rule also checks the element type class
the op is defined on (``sin`` on floats, ``sign`` on numbers, ``logical_not`` on
bools), so a model feeding the wrong type fails at import with the op named,
not in code generation. Parameters (``alpha``, ``lambd``, clip bounds) arrive as
attributes the ONNX converters normalized.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from ember.errors import ArgumentError
from ember.frontend.graph import TensorType
from ember.frontend.op_kinds import ELEMWISE
from ember.frontend.ops.registry import register_op
from ember.tir import dtype as dt
from ember.tir.topi import activation as act

FLOAT, SIGNED, UNSIGNED, BOOL = "float", "signed", "unsigned", "bool"
NUMBER = (FLOAT, SIGNED, UNSIGNED)


def type_class(dtype: str) -> str:
    """Which of FLOAT / SIGNED / UNSIGNED / BOOL ``dtype`` is."""
    if dt.is_float(dtype):
        return FLOAT
    if dt.is_bool(dtype):
        return BOOL
    return UNSIGNED if dt.is_uint(dtype) else SIGNED


def check_class(op: str, dtype: str, allowed: Sequence[str]) -> None:
    """Refuses a dtype outside the op's allowed classes (float/int/bool) with a clear error."""
    if type_class(dtype) not in allowed:
        raise ArgumentError(
            f"op '{op}' is defined on {'/'.join(allowed)} tensors, got {dtype}"
        )  # fmt: skip


def _unary_infer(op: str, allowed: Sequence[str], to_bool: bool) -> Any:
    def infer(types: Sequence[TensorType], attrs: dict[str, Any]) -> list[TensorType]:
        check_class(op, types[0].dtype, allowed)
        return [TensorType(types[0].shape, "bool") if to_bool else types[0]]

    return infer


Builder = Callable[[Any, dict[str, Any]], Any]


def _register(op: str, allowed: Sequence[str], build: Builder, to_bool: bool = False) -> None:
    @register_op(op, ELEMWISE, infer=_unary_infer(op, allowed, to_bool), num_inputs=1)
    def compute(inputs: Sequence[Any], attrs: dict[str, Any]) -> list[Any]:
        return [build(inputs[0], attrs)]


def _math(fn: str) -> Builder:
    return lambda x, attrs: act.math_unary(x, fn)


_FLOAT_MATH = [
    "floor", "ceil", "round", "sqrt", "log", "erf", "sin", "cos", "tan", "asin", "acos",
    "atan", "sinh", "cosh", "asinh", "acosh", "atanh", "reciprocal", "softsign", "hard_swish",
]  # fmt: skip
for _fn in _FLOAT_MATH:
    _register(_fn, (FLOAT,), _math(_fn))
_register("abs", NUMBER, _math("abs"))
_register("neg", (FLOAT, SIGNED), _math("neg"))
_register("sign", NUMBER, lambda x, a: act.sign(x))
_register("isnan", (FLOAT,), _math("isnan"), to_bool=True)
_register(
    "isinf", (FLOAT,), lambda x, a: act.is_inf(x, a["detect_negative"], a["detect_positive"]), True
)
_register("logical_not", (BOOL,), _math("logical_not"))
_register("bitwise_not", (SIGNED, UNSIGNED), _math("bitwise_not"))

# activations: attrs as the ONNX converters set them (every one present)
_register("leaky_relu", (FLOAT,), lambda x, a: act.leaky_relu(x, a["alpha"]))
_register("elu", (FLOAT,), lambda x, a: act.elu(x, a["alpha"]))
_register("selu", (FLOAT,), lambda x, a: act.selu(x, a["alpha"], a["gamma"]))
_register("celu", (FLOAT,), lambda x, a: act.celu(x, a["alpha"]))
_register("hard_sigmoid", (FLOAT,), lambda x, a: act.hard_sigmoid(x, a["alpha"], a["beta"]))
_register("softplus", (FLOAT,), lambda x, a: act.softplus(x))
_register("mish", (FLOAT,), lambda x, a: act.mish(x))
_register("thresholded_relu", (FLOAT,), lambda x, a: act.thresholded_relu(x, a["alpha"]))
_register("gelu", (FLOAT,), lambda x, a: act.gelu(x, a["approximate"]))
_register("shrink", NUMBER, lambda x, a: act.shrink(x, a["lambd"], a["bias"]))
_register("clip", NUMBER, lambda x, a: act.clip(x, a["min"], a["max"]))

__all__ = ["check_class", "type_class"]
