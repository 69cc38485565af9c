"""Converters for ONNX reductions: Reduce* (axes as attribute, later as input), ArgMax/ArgMin.

ReduceSum takes ``axes`` as an input from opset 13, the other Reduce* ops from 18;
before that it is an attribute. No axes means every axis, unless
``noop_with_empty_axes`` (input form only) asks for the input unchanged.
"""

from __future__ import annotations

import numpy as np

from ember.errors import ArgumentError
from ember.frontend.onnx_import.context import ConvertContext
from ember.frontend.onnx_import.registry import converter
from ember.frontend.ops.registry import normalize_axis
from ember.tir.topi.reduce import reduced_shape

# ONNX op -> (Ember kind, first opset taking axes as an input)
REDUCE_OPS = {
    "ReduceSum": ("sum", 13),
    "ReduceMean": ("mean", 18),
    "ReduceMax": ("max", 18),
    "ReduceMin": ("min", 18),
    "ReduceProd": ("prod", 18),
    "ReduceL1": ("l1", 18),
    "ReduceL2": ("l2", 18),
    "ReduceSumSquare": ("sum_square", 18),
    "ReduceLogSum": ("log_sum", 18),
    "ReduceLogSumExp": ("log_sum_exp", 18),
}


def _emit_reduce(ctx: ConvertContext, kind: str, axes: tuple[int, ...] | None) -> list[str]:
    t = ctx.type(0)
    if t.ndim == 0:
        return ctx.emit("copy", [ctx.input(0)])
    if axes is None or not axes:
        axes = tuple(range(t.ndim))
    norm = tuple(sorted({normalize_axis(int(a), t.ndim, f"{ctx.op_type} axis") for a in axes}))
    keepdims = bool(ctx.attr("keepdims", 1))
    if any(t.shape[a] == 0 for a in norm):
        return [_empty_reduction(ctx, kind, norm, keepdims)]
    return ctx.emit("reduce", [ctx.input(0)], {"kind": kind, "axes": norm, "keepdims": keepdims})


# the value of a reduction over no elements (ONNX's reference: the reducer's identity;
# a mean is 0, as onnxruntime gives it for floats and integers alike, not 0 / 0)
EMPTY_VALUE = {
    "sum": 0.0,
    "mean": 0.0,
    "max": float("-inf"),
    "min": float("inf"),
    "prod": 1.0,
    "l1": 0.0,
    "l2": 0.0,
    "sum_square": 0.0,
    "log_sum": float("-inf"),
    "log_sum_exp": float("-inf"),
}


def _empty_reduction(ctx: ConvertContext, kind: str, axes: tuple[int, ...], keepdims: bool) -> str:
    """A reduction over an empty axis is a constant: the reducer's identity, shape known."""
    t = ctx.type(0)
    if not t.is_static:
        raise ArgumentError(f"{ctx.op_type}: an empty reduction needs a static shape, got {t}")
    shape = reduced_shape(tuple(int(d) for d in t.shape), axes, keepdims)
    dtype = np.dtype(t.dtype)
    value = EMPTY_VALUE[kind]
    if dtype.kind in "iub" and not np.isfinite(value):
        info = np.iinfo(dtype) if dtype.kind != "b" else None
        value = 0 if info is None else (info.min if value < 0 else info.max)
    return ctx.const(np.full(shape, value, dtype=dtype))


def _reduce_rules(op_type: str, kind: str, input_since: int) -> None:
    @converter(op_type, since=1, until=input_since - 1)
    def with_attr(ctx: ConvertContext) -> list[str]:
        axes = ctx.attr("axes", None)
        return _emit_reduce(ctx, kind, None if axes is None else tuple(axes))

    @converter(op_type, since=input_since)
    def with_input(ctx: ConvertContext) -> list[str]:
        axes = None
        if ctx.has_input(1):
            axes = tuple(int(a) for a in ctx.constant(1).reshape(-1))
        if not axes and ctx.attr("noop_with_empty_axes", 0):
            return [ctx.input(0)]
        return _emit_reduce(ctx, kind, axes)


for _op, (_kind, _since) in REDUCE_OPS.items():
    _reduce_rules(_op, _kind, _since)


def _arg_rule(op_type: str, kind: str) -> None:
    @converter(op_type, since=1)
    def convert(ctx: ConvertContext) -> list[str]:
        t = ctx.type(0)
        axis = normalize_axis(int(ctx.attr("axis", 0)), t.ndim, f"{op_type} axis")
        attrs = {
            "kind": kind,
            "axis": axis,
            "keepdims": bool(ctx.attr("keepdims", 1)),
            "select_last": bool(ctx.attr("select_last_index", 0)),
        }
        return ctx.emit("arg_reduce", [ctx.input(0)], attrs)


_arg_rule("ArgMax", "max")
_arg_rule("ArgMin", "min")


@converter("Hardmax", since=13)
def hardmax_13(ctx: ConvertContext) -> list[str]:
    """ONNX Hardmax from opset 13, along one axis (earlier opsets flatten to 2-D)."""
    axis = normalize_axis(int(ctx.attr("axis", -1)), ctx.type(0).ndim, "Hardmax axis")
    return ctx.emit("hardmax", [ctx.input(0)], {"axis": axis})


@converter("Hardmax", since=1, until=12)
def hardmax_1(ctx: ConvertContext) -> list[str]:
    """Opsets 1-12 flatten the input to 2-D at ``axis`` and take each row's hardmax."""
    t = ctx.type(0)
    axis = normalize_axis(int(ctx.attr("axis", 1)), max(t.ndim, 1), "Hardmax axis")
    if not t.is_static:
        raise ArgumentError(f"Hardmax: needs a static input shape, got {t}")
    src = tuple(int(d) for d in t.shape)
    rows = int(np.prod(src[:axis], dtype=np.int64))
    cols = int(np.prod(src[axis:], dtype=np.int64))
    x = ctx.input(0)
    if src == (rows, cols):
        return ctx.emit("hardmax", [x], {"axis": 1})
    flat = ctx.emit1("reshape", [x], {"shape": (rows, cols)})
    y = ctx.emit1("hardmax", [flat], {"axis": 1})
    return ctx.emit("reshape", [y], {"shape": src})
