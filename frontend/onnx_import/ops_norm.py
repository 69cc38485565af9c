"""Converters for ONNX normalizations onto the ``normalize`` family of Ember ops.

LayerNormalization, RMSNormalization, InstanceNormalization, MeanVarianceNormalization
map to ``normalize`` over their axes (scale/bias reshaped to broadcast against x);
GroupNormalization reshapes x to (N, G, C/G, spatial) around it. BatchNormalization
maps to ``batch_norm``; its training mode (opset 14 on: normalised by the batch's own
statistics, the running ones updated as outputs) is written out with reductions.
"""

from __future__ import annotations

import numpy as np

from ember.errors import ArgumentError
from ember.frontend.onnx_import.context import ConvertContext
from ember.frontend.onnx_import.registry import converter
from ember.frontend.ops.registry import normalize_axis


def _acc(ctx: ConvertContext, dtype: str) -> str:
    """The stash/accumulation dtype: float32 (stash_type 1, the default) or the input's;
    float64 inputs keep float64 (as onnxruntime does), never losing precision."""
    if dtype == "float64":
        return dtype
    return "float32" if int(ctx.attr("stash_type", 1)) == 1 else dtype


def _static(ctx: ConvertContext, i: int = 0) -> tuple[int, ...]:
    t = ctx.type(i)
    if not t.is_static:
        raise ArgumentError(f"{ctx.op_type}: needs a static input shape, got {t}")
    return tuple(int(d) for d in t.shape)


def _reshape(ctx: ConvertContext, value: str, shape: tuple[int, ...]) -> str:
    if tuple(ctx.type_of(value).shape) == shape:
        return value
    return ctx.emit1("reshape", [value], {"shape": shape})


def _batch_norm_training(ctx: ConvertContext) -> list[str]:
    """Training mode (opset 14 on): normalised by the batch's own mean and (population)
    variance per channel, and the running statistics moved toward them by ``momentum``."""
    shape = _static(ctx, 0)
    if len(shape) < 2:
        raise ArgumentError(f"BatchNormalization: input {shape} has no channel axis")
    channels, dtype = shape[1], ctx.type(0).dtype
    per_channel = (1, channels) + (1,) * (len(shape) - 2)
    axes = (0, *range(2, len(shape)))
    stats = {"kind": "mean", "axes": axes, "keepdims": True}
    x = ctx.input(0)
    mean = ctx.emit1("reduce", [x], stats)
    centred = ctx.emit1("subtract", [x, mean])
    var = ctx.emit1("reduce", [ctx.emit1("multiply", [centred, centred])], stats)
    eps = ctx.const(np.array(ctx.attr("epsilon", 1e-5), dtype=dtype))
    y = ctx.emit1("divide", [centred, ctx.emit1("sqrt", [ctx.emit1("add", [var, eps])])])
    y = ctx.emit1("multiply", [y, _reshape(ctx, ctx.input(1), per_channel)])
    y = ctx.emit1("add", [y, _reshape(ctx, ctx.input(2), per_channel)])
    momentum = float(ctx.attr("momentum", 0.9))
    keep = ctx.const(np.array(momentum, dtype=dtype))
    take = ctx.const(np.array(1 - momentum, dtype=dtype))
    running = []
    for old, batch in ((ctx.input(3), mean), (ctx.input(4), var)):
        moved = ctx.emit1("multiply", [_reshape(ctx, batch, (channels,)), take])
        running.append(ctx.emit1("add", [ctx.emit1("multiply", [old, keep]), moved]))
    return [y, *running][: ctx.num_outputs]


@converter("BatchNormalization", since=1)
def batch_norm(ctx: ConvertContext) -> list[str]:
    """ONNX BatchNormalization; training mode (opset 14 on) as :func:`_batch_norm_training`."""
    if ctx.attr("training_mode", 0) and ctx.opset >= 14:
        return _batch_norm_training(ctx)
    if ctx.num_outputs > 1 or ctx.attr("training_mode", 0):
        raise ArgumentError(
            "BatchNormalization: training mode before opset 14 is not supported (inference only)"
        )
    if ctx.opset < 9 and not ctx.attr("spatial", 1):
        raise ArgumentError("BatchNormalization: spatial=0 (per-activation) is not supported")
    attrs = {"eps": float(ctx.attr("epsilon", 1e-5))}
    return ctx.emit("batch_norm", [ctx.input(i) for i in range(5)], attrs)


def _layer_norm(ctx: ConvertContext, center: bool) -> list[str]:
    t = ctx.type(0)
    axis = normalize_axis(int(ctx.attr("axis", -1)), t.ndim, f"{ctx.op_type} axis")
    attrs = {
        "axes": tuple(range(axis, t.ndim)),
        "eps": float(ctx.attr("epsilon", 1e-5)),
        "center": center,
        "acc": _acc(ctx, t.dtype),
    }
    stats = ctx.num_outputs > 1
    return ctx.emit("normalize_stats" if stats else "normalize", ctx.inputs(), attrs)


@converter("LayerNormalization", since=17)
def layer_norm(ctx: ConvertContext) -> list[str]:
    """ONNX LayerNormalization (opset 17), with its optional mean and inverse-std outputs."""
    return _layer_norm(ctx, center=True)


@converter("RMSNormalization", since=23)
def rms_norm(ctx: ConvertContext) -> list[str]:
    """ONNX RMSNormalization (opset 23): layer norm without centering."""
    if ctx.num_outputs > 1:
        raise ArgumentError("RMSNormalization has one output")
    return _layer_norm(ctx, center=False)


def _per_channel(ctx: ConvertContext, i: int, ndim: int) -> str:
    """Input ``i`` of shape [C] reshaped to broadcast over axis 1 of an ``ndim``-D tensor."""
    (c,) = _static(ctx, i)
    return _reshape(ctx, ctx.input(i), (c,) + (1,) * (ndim - 2))


@converter("InstanceNormalization", since=1)
def instance_norm(ctx: ConvertContext) -> list[str]:
    """ONNX InstanceNormalization: normalization over the spatial axes of each channel."""
    xs = _static(ctx)
    if len(xs) < 3:
        raise ArgumentError(f"InstanceNormalization: input must be N x C x spatial, got {xs}")
    attrs = {
        "axes": tuple(range(2, len(xs))),
        "eps": float(ctx.attr("epsilon", 1e-5)),
        "center": True,
        "acc": _acc(ctx, ctx.type(0).dtype),
    }
    scale, bias = _per_channel(ctx, 1, len(xs)), _per_channel(ctx, 2, len(xs))
    return ctx.emit("normalize", [ctx.input(0), scale, bias], attrs)


def _group_norm(ctx: ConvertContext, per_channel: bool) -> list[str]:
    xs = _static(ctx)
    groups = int(ctx.attr("num_groups"))
    if len(xs) < 2 or groups < 1 or xs[1] % groups:
        raise ArgumentError(f"GroupNormalization: {xs[1:2]} channels and num_groups={groups}")
    n, c = xs[:2]
    spatial = int(np.prod(xs[2:], dtype=np.int64))
    cg = c // groups
    x = _reshape(ctx, ctx.input(0), (n, groups, cg, spatial))
    param_shape = (groups, cg, 1) if per_channel else (groups, 1, 1)
    want = c if per_channel else groups
    params = []
    for i in (1, 2):
        if _static(ctx, i) != (want,):
            raise ArgumentError(
                f"GroupNormalization: input {i} must have shape [{want}], got {ctx.type(i)}"
            )
        params.append(_reshape(ctx, ctx.input(i), param_shape))
    attrs = {
        "axes": (2, 3),
        "eps": float(ctx.attr("epsilon", 1e-5)),
        "center": True,
        "acc": _acc(ctx, ctx.type(0).dtype),
    }
    y = ctx.emit1("normalize", [x, *params], attrs)
    return [_reshape(ctx, y, xs)]


@converter("GroupNormalization", since=18, until=20)
def group_norm_18(ctx: ConvertContext) -> list[str]:
    """ONNX GroupNormalization opsets 18-20: scale and bias are per group."""
    return _group_norm(ctx, per_channel=False)


@converter("GroupNormalization", since=21)
def group_norm_21(ctx: ConvertContext) -> list[str]:
    """ONNX GroupNormalization from opset 21: scale and bias are per channel."""
    return _group_norm(ctx, per_channel=True)


@converter("MeanVarianceNormalization", since=9)
def mean_variance_norm(ctx: ConvertContext) -> list[str]:
    """ONNX MeanVarianceNormalization over the given axes (N, H, W by default)."""
    t = ctx.type(0)
    axes = ctx.attr("axes", (0, 2, 3))
    what = "MeanVarianceNormalization axis"
    norm = tuple(sorted({normalize_axis(int(a), t.ndim, what) for a in axes}))
    attrs = {"axes": norm, "eps": 1e-9, "center": True, "acc": _acc(ctx, t.dtype)}
    return ctx.emit("normalize", [ctx.input(0)], attrs)


@converter("LpNormalization", since=1)
def lp_normalization(ctx: ConvertContext) -> list[str]:
    """ONNX LpNormalization for p of 1 or 2."""
    t = ctx.type(0)
    p = int(ctx.attr("p", 2))
    if p not in (1, 2):
        raise ArgumentError(f"LpNormalization: p must be 1 or 2, got {p}")
    axis = normalize_axis(int(ctx.attr("axis", -1)), t.ndim, "LpNormalization axis")
    return ctx.emit("lp_normalize", [ctx.input(0)], {"axis": axis, "p": p})


@converter("LRN", since=1)
def lrn(ctx: ConvertContext) -> list[str]:
    """ONNX LRN."""
    size = int(ctx.attr("size"))
    if size < 1:
        raise ArgumentError(f"LRN: size must be positive, got {size}")
    attrs = {
        "size": size,
        "alpha": float(ctx.attr("alpha", 1e-4)),
        "beta": float(ctx.attr("beta", 0.75)),
        "bias": float(ctx.attr("bias", 1.0)),
    }
    return ctx.emit("lrn", [ctx.input(0)], attrs)
