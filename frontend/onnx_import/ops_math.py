"""Converters for unary elementwise ONNX ops: math functions, activations, Clip.

Each converter maps one ONNX node onto one Ember op of ``frontend/ops/math.py``,
filling every attribute with ONNX's default. Opset versions that only widened
the accepted types or dropped the legacy ``consumed_inputs`` hint (an in-place
hint with no effect on results) share a rule; forms that changed meaning get
their own (Clip's bounds became inputs in 11).
"""

from __future__ import annotations

from ember.errors import ArgumentError
from ember.frontend.onnx_import.context import ConvertContext
from ember.frontend.onnx_import.registry import converter
from ember.tir import dtype as dt

# ONNX op type -> (Ember op, first opset converted)
_UNARY = {
    "Abs": ("abs", 1),
    "Neg": ("neg", 1),
    "Floor": ("floor", 1),
    "Ceil": ("ceil", 1),
    "Round": ("round", 11),
    "Sqrt": ("sqrt", 1),
    "Reciprocal": ("reciprocal", 1),
    "Log": ("log", 1),
    "Sin": ("sin", 7),
    "Cos": ("cos", 7),
    "Tan": ("tan", 7),
    "Asin": ("asin", 7),
    "Acos": ("acos", 7),
    "Atan": ("atan", 7),
    "Sinh": ("sinh", 9),
    "Cosh": ("cosh", 9),
    "Asinh": ("asinh", 9),
    "Acosh": ("acosh", 9),
    "Atanh": ("atanh", 9),
    "Erf": ("erf", 9),
    "Sign": ("sign", 9),
    "IsNaN": ("isnan", 9),
    "Not": ("logical_not", 1),
    "BitwiseNot": ("bitwise_not", 18),
    "Softplus": ("softplus", 1),
    "Softsign": ("softsign", 1),
    "HardSwish": ("hard_swish", 14),
    "Mish": ("mish", 18),
}

# ONNX op type -> (Ember op, first opset, {attribute: ONNX default})
_WITH_ATTRS = {
    "LeakyRelu": ("leaky_relu", 6, {"alpha": 0.01}),
    "Elu": ("elu", 6, {"alpha": 1.0}),
    "Selu": ("selu", 6, {"alpha": 1.67326319217681884765625, "gamma": 1.05070102214813232421875}),
    "Celu": ("celu", 12, {"alpha": 1.0}),
    "HardSigmoid": ("hard_sigmoid", 6, {"alpha": 0.2, "beta": 0.5}),
    "ThresholdedRelu": ("thresholded_relu", 10, {"alpha": 1.0}),
    "Shrink": ("shrink", 9, {"lambd": 0.5, "bias": 0.0}),
}


def _unary_rule(op_type: str, op: str, since: int) -> None:
    @converter(op_type, since=since)
    def convert(ctx: ConvertContext) -> list[str]:
        return ctx.emit(op, [ctx.input(0)])


def _attr_rule(op_type: str, op: str, since: int, defaults: dict[str, float]) -> None:
    @converter(op_type, since=since)
    def convert(ctx: ConvertContext) -> list[str]:
        attrs = {k: float(ctx.attr(k, v)) for k, v in defaults.items()}
        return ctx.emit(op, [ctx.input(0)], attrs)


for _t, (_o, _since) in _UNARY.items():
    _unary_rule(_t, _o, _since)
for _t, (_o, _since, _defaults) in _WITH_ATTRS.items():
    _attr_rule(_t, _o, _since, _defaults)


@converter("IsInf", since=10)
def is_inf(ctx: ConvertContext) -> list[str]:
    """ONNX IsInf, with its sign switches."""
    attrs = {
        "detect_negative": bool(ctx.attr("detect_negative", 1)),
        "detect_positive": bool(ctx.attr("detect_positive", 1)),
    }
    return ctx.emit("isinf", [ctx.input(0)], attrs)


@converter("Gelu", since=20)
def gelu(ctx: ConvertContext) -> list[str]:
    """ONNX Gelu (opset 20), exact or tanh-approximated."""
    approximate = ctx.attr("approximate", "none")
    if approximate not in ("none", "tanh"):
        raise ArgumentError(f"Gelu: approximate must be 'none' or 'tanh', got {approximate!r}")
    return ctx.emit("gelu", [ctx.input(0)], {"approximate": approximate})


def _bound(value: float | None, dtype: str) -> float | int | None:
    """A clip bound as a plain number of the input's kind (None: unbounded)."""
    if value is None:
        return None
    if dt.is_float(dtype):
        return float(value)
    return int(value)


@converter("Clip", since=6, until=10)
def clip_6(ctx: ConvertContext) -> list[str]:
    """ONNX Clip opsets 6-10: the bounds are attributes, converted to the input's dtype."""
    dtype = ctx.type(0).dtype
    lo = _bound(ctx.attr("min", None), dtype)
    hi = _bound(ctx.attr("max", None), dtype)
    return ctx.emit("clip", [ctx.input(0)], {"min": lo, "max": hi})


@converter("Clip", since=11)
def clip_11(ctx: ConvertContext) -> list[str]:
    """Bounds are optional scalar inputs: constants become attributes of one ``clip``; a
    bound computed at run time becomes a ``max`` / ``min`` op, applied min first (as
    ``min(max(x, lo), hi)``, which gives ``hi`` everywhere when ``lo > hi``)."""
    x = ctx.input(0)
    dtype = ctx.type(0).dtype
    fixed: dict[str, float | int | None] = {"min": None, "max": None}
    for k, key, op in ((1, "min", "max"), (2, "max", "min")):
        if not ctx.has_input(k):
            continue
        if ctx.type(k).dtype != dtype:
            raise ArgumentError(f"Clip: {key} has dtype {ctx.type(k).dtype}, input {dtype}")
        if ctx.type(k).shape not in ((), (1,)):
            raise ArgumentError(f"Clip: {key} must be a scalar, got {list(ctx.type(k).shape)}")
        if ctx.is_constant(k):
            fixed[key] = _bound(ctx.constant(k).reshape(()).item(), dtype)
            continue
        if fixed["min"] is not None:  # a constant min comes before a run-time max
            x = ctx.emit1("clip", [x], {"min": fixed["min"], "max": None})
            fixed["min"] = None
        bound = ctx.input(k)
        if ctx.type(k).shape != ():  # a one-element 1-D bound: keep the input's rank
            bound = ctx.emit1("reshape", [bound], {"shape": ()})
        x = ctx.emit1(op, [x, bound])
    if fixed["min"] is None and fixed["max"] is None:
        return [x] if x != ctx.input(0) else ctx.emit("copy", [x])
    return ctx.emit("clip", [x], fixed)
