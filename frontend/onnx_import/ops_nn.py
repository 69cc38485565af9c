"""Converters for ONNX neural-network ops: Conv, pooling, MatMul, Gemm, Softmax.

Padding attributes are resolved here (``auto_pad`` SAME_UPPER/SAME_LOWER/VALID into
explicit begin/end pads), so the Ember ops see one form. A MatMul, Gemm or Conv that
sums over nothing (K = 0, or no input channels) gives zeros plus its bias, as
onnxruntime computes it; that is built here, since a kernel cannot take an empty operand.
"""

from __future__ import annotations

import numpy as np

from ember.errors import ArgumentError
from ember.frontend.onnx_import.context import ConvertContext
from ember.frontend.onnx_import.registry import converter
from ember.frontend.ops.registry import get_op, normalize_axis


def _spatial(ctx: ConvertContext) -> tuple[int, ...]:
    t = ctx.type(0)
    if t.ndim < 3 or not all(isinstance(d, int) for d in t.shape[2:]):
        raise ArgumentError(
            f"{ctx.op_type}: input must be N x C x spatial with static spatial dims, got {t}"
        )
    return tuple(int(d) for d in t.shape[2:])


def static_spatial(ctx: ConvertContext, i: int) -> tuple[int, ...]:
    """The static spatial sizes of input ``i``, whose channels must be static too."""
    t = ctx.type(i)
    if t.ndim < 3 or not all(isinstance(d, int) for d in t.shape[1:]):
        raise ArgumentError(
            f"{ctx.op_type}: input {i} must be N x C x spatial with static C and spatial dims, "
            f"got {t}"
        )
    return tuple(int(d) for d in t.shape[2:])


def int_attr(ctx: ConvertContext, name: str, default: tuple[int, ...]) -> tuple[int, ...]:
    """Int list attribute ``name``, which must have as many values as ``default``."""
    value = tuple(int(v) for v in ctx.attr(name, default))
    if len(value) != len(default):
        raise ArgumentError(
            f"{ctx.op_type}: {name} {list(value)} should have {len(default)} values"
        )
    return value


def resolve_pads(
    ctx: ConvertContext,
    sizes: tuple[int, ...],
    kernel: tuple[int, ...],
    strides: tuple[int, ...],
    dil: tuple[int, ...],
) -> tuple[int, ...]:
    """ONNX's pads as (begin..., end...), with ``auto_pad`` worked out."""
    n = len(sizes)
    auto = ctx.attr("auto_pad", "NOTSET")
    if auto in ("NOTSET", ""):
        pads = tuple(int(p) for p in ctx.attr("pads", (0,) * (2 * n)))
        if len(pads) != 2 * n:
            raise ArgumentError(f"{ctx.op_type}: pads {list(pads)} should have {2 * n} values")
        return pads
    if auto == "VALID":
        return (0,) * (2 * n)
    if auto not in ("SAME_UPPER", "SAME_LOWER"):
        raise ArgumentError(f"{ctx.op_type}: unknown auto_pad {auto!r}")
    begin, end = [], []
    for s, k, st, d in zip(sizes, kernel, strides, dil):
        out = -(-s // st)
        total = max((out - 1) * st + (k - 1) * d + 1 - s, 0)
        small, big = total // 2, total - total // 2
        begin.append(small if auto == "SAME_UPPER" else big)
        end.append(big if auto == "SAME_UPPER" else small)
    return (*begin, *end)


@converter("Conv", since=1)
def conv(ctx: ConvertContext) -> list[str]:
    """ONNX Conv: kernel, strides, pads (auto_pad resolved here), dilations and groups."""
    sizes = _spatial(ctx)
    n = len(sizes)
    w = ctx.type(1)
    kernel = tuple(int(k) for k in ctx.attr("kernel_shape", w.shape[2:]))
    strides = tuple(int(s) for s in ctx.attr("strides", (1,) * n))
    dil = tuple(int(d) for d in ctx.attr("dilations", (1,) * n))
    attrs = {
        "strides": strides,
        "pads": resolve_pads(ctx, sizes, kernel, strides, dil),
        "dilations": dil,
        "group": int(ctx.attr("group", 1)),
    }
    if w.shape[1] == 0:  # no input channels: every output is its bias
        bias = None
        if ctx.has_input(2):
            (bias,) = ctx.emit("reshape", [ctx.input(2)], {"shape": (w.shape[0], *(1,) * n)})
        empty = _empty_sum(ctx, "conv", attrs, bias)
        if empty is not None:
            return empty
    return ctx.emit("conv", ctx.inputs(), attrs)


def _pool(ctx: ConvertContext, op: str) -> list[str]:
    sizes = _spatial(ctx)
    n = len(sizes)
    kernel = tuple(int(k) for k in ctx.attr("kernel_shape"))
    strides = tuple(int(s) for s in ctx.attr("strides", (1,) * n))
    dil = tuple(int(d) for d in ctx.attr("dilations", (1,) * n))
    attrs = {
        "kernel": kernel,
        "strides": strides,
        "pads": resolve_pads(ctx, sizes, kernel, strides, dil),
        "dilations": dil,
        "ceil_mode": bool(ctx.attr("ceil_mode", 0)),
    }
    if op == "avg_pool":
        attrs["count_include_pad"] = bool(ctx.attr("count_include_pad", 0))
    return ctx.emit(op, [ctx.input(0)], attrs)


@converter("MaxPool", since=1)
def max_pool(ctx: ConvertContext) -> list[str]:
    """ONNX MaxPool; asking for the indices output uses the pooling-with-indices op."""
    if ctx.num_outputs > 1 and ctx.node.output[1]:
        return _max_pool_with_indices(ctx)
    return _pool(ctx, "max_pool")


def _max_pool_with_indices(ctx: ConvertContext) -> list[str]:
    """MaxPool with its second output, the flat indices of the maxima."""
    sizes = static_spatial(ctx, 0)
    n = len(sizes)
    kernel = tuple(int(k) for k in ctx.attr("kernel_shape"))
    strides = int_attr(ctx, "strides", (1,) * n)
    dil = int_attr(ctx, "dilations", (1,) * n)
    order = int(ctx.attr("storage_order", 0))
    if order not in (0, 1):
        raise ArgumentError(f"MaxPool: storage_order must be 0 or 1, got {order}")
    attrs = {
        "kernel": kernel,
        "strides": strides,
        "pads": resolve_pads(ctx, sizes, kernel, strides, dil),
        "dilations": dil,
        "ceil_mode": bool(ctx.attr("ceil_mode", 0)),
        "storage_order": order,
    }
    return ctx.emit("max_pool_indices", [ctx.input(0)], attrs)


@converter("AveragePool", since=1)
def average_pool(ctx: ConvertContext) -> list[str]:
    """ONNX AveragePool."""
    return _pool(ctx, "avg_pool")


def _global_pool(ctx: ConvertContext, op: str) -> list[str]:
    sizes = _spatial(ctx)
    n = len(sizes)
    attrs = {
        "kernel": sizes,
        "strides": (1,) * n,
        "pads": (0,) * (2 * n),
        "dilations": (1,) * n,
        "ceil_mode": False,
    }
    if op == "avg_pool":
        attrs["count_include_pad"] = False
    return ctx.emit(op, [ctx.input(0)], attrs)


@converter("GlobalAveragePool", since=1)
def global_average_pool(ctx: ConvertContext) -> list[str]:
    """ONNX GlobalAveragePool, as an average pool over the whole spatial extent."""
    return _global_pool(ctx, "avg_pool")


@converter("GlobalMaxPool", since=1)
def global_max_pool(ctx: ConvertContext) -> list[str]:
    """ONNX GlobalMaxPool, as a max pool over the whole spatial extent."""
    return _global_pool(ctx, "max_pool")


def _empty_sum(ctx: ConvertContext, op: str, attrs: dict, bias: str | None) -> list[str] | None:
    """The result of ``op`` when it sums over no terms: zeros of its output type, plus
    ``bias`` (a value broadcast over it) when given; None while the output shape is
    symbolic (a dynamic model imports again once it is known)."""
    types = [ctx.type(i) for i in range(ctx.num_inputs) if ctx.has_input(i)]
    out = get_op(op).infer_types(types[: 3 if op != "matmul" else 2], attrs)[0]
    if not out.is_static:
        return None
    zeros = ctx.const(np.zeros(out.shape, dtype=out.dtype))
    if bias is None:
        return [zeros]
    return ctx.emit("add", [zeros, bias])


@converter("MatMul", since=1)
def matmul(ctx: ConvertContext) -> list[str]:
    """ONNX MatMul; an empty inner dimension gives zeros without a kernel."""
    if ctx.type(0).shape[-1] == 0:
        empty = _empty_sum(ctx, "matmul", {}, None)
        if empty is not None:
            return empty
    return ctx.emit("matmul", [ctx.input(0), ctx.input(1)])


@converter("Gemm", since=7)
def gemm(ctx: ConvertContext) -> list[str]:
    """ONNX Gemm, with alpha, beta and the transposes as attributes."""
    attrs = {
        "alpha": float(ctx.attr("alpha", 1.0)),
        "beta": float(ctx.attr("beta", 1.0)),
        "trans_a": bool(ctx.attr("transA", 0)),
        "trans_b": bool(ctx.attr("transB", 0)),
    }
    if ctx.type(0).shape[0 if attrs["trans_a"] else 1] == 0:  # K = 0: Y = beta * C
        bias = None
        if ctx.num_inputs > 2 and ctx.has_input(2):
            beta = ctx.const(np.array(attrs["beta"], dtype=ctx.type(2).dtype))
            (bias,) = ctx.emit("multiply", [ctx.input(2), beta])
        empty = _empty_sum(ctx, "gemm", attrs, bias)
        if empty is not None:
            return empty
    return ctx.emit("gemm", ctx.inputs(), attrs)


def _softmax(ctx: ConvertContext, op: str) -> list[str]:
    t = ctx.type(0)
    if ctx.opset >= 13:
        axis = normalize_axis(ctx.attr("axis", -1), t.ndim, f"{ctx.op_type} axis")
        return ctx.emit(op, [ctx.input(0)], {"axis": axis})
    # opsets 1-12: flatten to 2-D at ``axis`` and normalise each row
    axis = normalize_axis(ctx.attr("axis", 1), max(t.ndim, 1), f"{ctx.op_type} axis")
    if not t.is_static:
        raise ArgumentError(f"{ctx.op_type}: needs a static input shape, got {t}")
    src = tuple(int(d) for d in t.shape)
    rows, cols = int(np.prod(src[:axis], dtype=np.int64)), int(np.prod(src[axis:], dtype=np.int64))
    x = ctx.input(0)
    flat = ctx.emit1("reshape", [x], {"shape": (rows, cols)}) if src != (rows, cols) else x
    y = ctx.emit1(op, [flat], {"axis": 1})
    return ctx.emit("reshape", [y], {"shape": src}) if src != (rows, cols) else [y]


@converter("Softmax", since=1)
def softmax(ctx: ConvertContext) -> list[str]:
    """ONNX Softmax, whose axis meaning changed at opset 13 (flattened 2-D before)."""
    return _softmax(ctx, "softmax")


@converter("LogSoftmax", since=1)
def log_softmax(ctx: ConvertContext) -> list[str]:
    """ONNX LogSoftmax, whose axis meaning changed at opset 13 like Softmax's."""
    return _softmax(ctx, "log_softmax")
