"""Broadcasting ops of two or more tensors: comparisons, logic, bits, pow, mod, max/min/sum/mean,
where, prelu; and ``cast`` (``cast_narrow`` for float8, float4, 4- and 2-bit types).

Computes live in ``tir/topi/broadcast.py``. The shape rules broadcast as numpy
does and check dtypes as ONNX does: both operands of a comparison share a type
and give bools, ``pow`` keeps its base's type whatever its exponent's, ``prelu``
broadcasts its slope to the input's shape only (never the other way round).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ember.errors import ArgumentError
from ember.frontend.graph import TensorType
from ember.frontend.narrow_dtypes import BIT_STORED
from ember.frontend.op_kinds import BROADCAST, ELEMWISE
from ember.frontend.ops.math import BOOL, FLOAT, NUMBER, SIGNED, UNSIGNED, check_class
from ember.frontend.ops.registry import broadcast_shapes, register_op
from ember.tir import dtype as dt
from ember.tir.topi import broadcast as bc
from ember.tir.topi import minifloat as mf

INTEGER = (SIGNED, UNSIGNED)
MANY = 1 << 16  # no practical bound on variadic inputs


def _shape(types: Sequence[TensorType]) -> tuple[Any, ...]:
    shape: tuple[Any, ...] = ()
    for t in types:
        shape = broadcast_shapes(shape, t.shape)
    return shape


def _same_infer(op: str, allowed: Sequence[str], out: str | None = None) -> Any:
    """All inputs of one dtype in ``allowed``; output that dtype (or ``out``)."""

    def infer(types: Sequence[TensorType], attrs: dict[str, Any]) -> list[TensorType]:
        dtypes = sorted({t.dtype for t in types})
        if len(dtypes) != 1:
            raise ArgumentError(f"op '{op}' needs inputs of one dtype, got {dtypes}")
        check_class(op, dtypes[0], allowed)
        return [TensorType(_shape(types), out or dtypes[0])]

    return infer


def _register_binary(op: str, allowed: Sequence[str], out: str | None = None) -> None:
    @register_op(op, BROADCAST, infer=_same_infer(op, allowed, out), num_inputs=2)
    def compute(inputs: Sequence[Any], attrs: dict[str, Any]) -> list[Any]:
        return [bc.binary(inputs[0], inputs[1], op)]


for _op in ("equal", "greater", "less", "greater_equal", "less_equal"):
    _register_binary(_op, (*NUMBER, BOOL), out="bool")
for _op in ("logical_and", "logical_or", "logical_xor"):
    _register_binary(_op, (BOOL,))
for _op in ("bitwise_and", "bitwise_or", "bitwise_xor", "shift_left", "shift_right"):
    _register_binary(_op, INTEGER)
_register_binary("mod", INTEGER)
_register_binary("fmod", NUMBER)


def _register_variadic(op: str, allowed: Sequence[str]) -> None:
    @register_op(op, BROADCAST, infer=_same_infer(op, allowed), num_inputs=(1, MANY))
    def compute(inputs: Sequence[Any], attrs: dict[str, Any]) -> list[Any]:
        if op == "mean":
            return [bc.mean(inputs)]
        return [bc.variadic(inputs, op)]


_register_variadic("max", NUMBER)
_register_variadic("min", NUMBER)
_register_variadic("sum", NUMBER)
_register_variadic("mean", (FLOAT,))


def _infer_pow(types: Sequence[TensorType], attrs: dict[str, Any]) -> list[TensorType]:
    check_class("pow", types[0].dtype, NUMBER)
    check_class("pow", types[1].dtype, NUMBER)
    return [TensorType(_shape(types), types[0].dtype)]


@register_op("pow", BROADCAST, infer=_infer_pow, num_inputs=2)
def pow_(inputs: Sequence[Any], attrs: dict[str, Any]) -> list[Any]:
    """``x ** y`` in x's dtype; the exponent may have any numeric dtype."""
    return [bc.binary(inputs[0], inputs[1], "pow")]


def _infer_prelu(types: Sequence[TensorType], attrs: dict[str, Any]) -> list[TensorType]:
    x, slope = types
    _same_infer("prelu", (FLOAT, SIGNED, UNSIGNED))(types, attrs)
    if _shape(types) != tuple(x.shape):
        raise ArgumentError(
            f"prelu: slope of shape {list(slope.shape)} does not broadcast to the input's "
            f"{list(x.shape)}"
        )
    return [x]


@register_op("prelu", BROADCAST, infer=_infer_prelu, num_inputs=2)
def prelu(inputs: Sequence[Any], attrs: dict[str, Any]) -> list[Any]:
    """``x`` where positive, else ``slope * x``, with the slope broadcast (ONNX PRelu)."""
    return [bc.binary(inputs[0], inputs[1], "prelu")]


def _infer_where(types: Sequence[TensorType], attrs: dict[str, Any]) -> list[TensorType]:
    cond, x, y = types
    if cond.dtype != "bool":
        raise ArgumentError(f"where: the condition must be bool, got {cond.dtype}")
    if x.dtype != y.dtype:
        raise ArgumentError(f"where: the two branches differ in dtype ({x.dtype}, {y.dtype})")
    return [TensorType(_shape(types), x.dtype)]


@register_op("where", BROADCAST, infer=_infer_where, num_inputs=3)
def where(inputs: Sequence[Any], attrs: dict[str, Any]) -> list[Any]:
    """Element-wise choice between two tensors by a broadcast condition."""
    return [bc.where(*inputs)]


def _infer_cast(types: Sequence[TensorType], attrs: dict[str, Any]) -> list[TensorType]:
    return [TensorType(types[0].shape, dt.check_dtype(attrs["dtype"]))]


def _infer_bitcast(types: Sequence[TensorType], attrs: dict[str, Any]) -> list[TensorType]:
    (x,) = types
    dtype = dt.check_dtype(attrs["dtype"])
    if dt.bytes_of(x.dtype) != dt.bytes_of(dtype) or "bfloat16" in (x.dtype, dtype):
        raise ArgumentError(f"bitcast: {x.dtype} to {dtype} is not a bit cast Ember supports")
    return [TensorType(x.shape, dtype)]


@register_op("bitcast", ELEMWISE, infer=_infer_bitcast, num_inputs=1)
def bitcast(inputs: Sequence[Any], attrs: dict[str, Any]) -> list[Any]:
    """attrs: ``{"dtype": str}``, a type of the same width whose bits the elements keep."""
    return [bc.bitcast(inputs[0], attrs["dtype"])]


@register_op("cast", ELEMWISE, infer=_infer_cast, num_inputs=1)
def cast(inputs: Sequence[Any], attrs: dict[str, Any]) -> list[Any]:
    """attrs: ``{"dtype": str}``, the target element type."""
    return [bc.cast(inputs[0], attrs["dtype"])]


def _infer_cast_narrow(types: Sequence[TensorType], attrs: dict[str, Any]) -> list[TensorType]:
    (x,) = types
    src, dst = attrs["src"], attrs["dtype"]
    if x.dtype != src:
        raise ArgumentError(f"cast_narrow: the input is {x.dtype}, the 'src' attribute {src}")
    if not {src, dst} & BIT_STORED:
        raise ArgumentError(f"cast_narrow: neither {src} nor {dst} is a narrow type; use cast")
    for d in {src, dst} - BIT_STORED:
        dt.check_dtype(d)
    if attrs["round_mode"] not in mf.ROUND_MODES:
        raise ArgumentError(f"cast_narrow: round_mode must be one of {mf.ROUND_MODES}")
    return [TensorType(x.shape, dst)]


@register_op("cast_narrow", ELEMWISE, infer=_infer_cast_narrow, num_inputs=1)
def cast_narrow(inputs: Sequence[Any], attrs: dict[str, Any]) -> list[Any]:
    """A cast to or from a type kernels hold in a byte (float8, float4, int2/uint2:
    ``frontend/narrow_dtypes.py``), whose kernel dtype does not say which it is: attrs
    ``{"src": str, "dtype": str, "saturate": bool, "round_mode": str}`` (ONNX Cast's
    ``saturate`` for float8 targets and ``round_mode`` for e8m0)."""
    a = attrs
    return [mf.narrow_cast(inputs[0], a["src"], a["dtype"], a["saturate"], a["round_mode"])]
