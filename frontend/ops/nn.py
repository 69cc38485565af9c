"""Neural-network ops: convolution, pooling, matrix products, softmax.

Attributes (set by the converters, every one present):
- ``conv``: strides, pads (begin..., end...), dilations (tuples), group (int).
- ``max_pool`` / ``avg_pool``: kernel, strides, pads, dilations (tuples), ceil_mode,
  and for avg_pool count_include_pad (bools).
- ``matmul``: none. ``gemm``: alpha, beta (floats), trans_a, trans_b (bools).
- ``softmax`` / ``log_softmax``: axis (non-negative int).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ember.errors import ArgumentError
from ember.frontend.graph import TensorType
from ember.frontend.op_kinds import OPAQUE, OUT_ELEMWISE_FUSABLE
from ember.frontend.ops.registry import broadcast_shapes, register_op
from ember.tir import topi
from ember.tir.topi.conv import conv_out_size
from ember.tir.topi.pool import pool_out_size

Types = Sequence[TensorType]


def _dim_out(size: Any, fn: Any) -> Any:
    return fn(size) if isinstance(size, int) else size


def _infer_conv(types: Types, attrs: dict[str, Any]) -> list[TensorType]:
    x, w = types[0], types[1]
    nsp = x.ndim - 2
    if nsp < 1 or w.ndim != x.ndim:
        raise ArgumentError(f"conv: input {x} and weights {w} ranks do not fit")
    s, p, d = attrs["strides"], attrs["pads"], attrs["dilations"]
    sp = [
        _dim_out(
            x.shape[2 + i],
            lambda n, i=i: conv_out_size(n, w.shape[2 + i], s[i], d[i], p[i], p[nsp + i]),
        )
        for i in range(nsp)
    ]
    return [TensorType((x.shape[0], w.shape[0], *sp), x.dtype)]


@register_op("conv", OUT_ELEMWISE_FUSABLE, infer=_infer_conv, num_inputs=(2, 3))
def conv(inputs: Sequence[Any], attrs: dict[str, Any]) -> list[Any]:
    """N-d convolution with optional bias; the strategies pick a schedule for it by workload."""
    bias = inputs[2] if len(inputs) > 2 else None
    return [
        topi.conv_nd(
            inputs[0],
            inputs[1],
            bias,
            attrs["strides"],
            attrs["pads"],
            attrs["dilations"],
            attrs["group"],
        )
    ]


def infer_pool_window(types: Types, attrs: dict[str, Any]) -> list[TensorType]:
    """The shape rule of every windowed op (pools, LpPool, MaxPool with indices)."""
    x = types[0]
    k, s, p, d = attrs["kernel"], attrs["strides"], attrs["pads"], attrs["dilations"]
    nsp = len(k)
    if x.ndim != nsp + 2:
        raise ArgumentError(f"pool: a {nsp}-D kernel needs a {nsp + 2}-D input, got {x}")
    sp = [
        _dim_out(
            x.shape[2 + i],
            lambda n, i=i: pool_out_size(n, k[i], s[i], d[i], p[i], p[nsp + i], attrs["ceil_mode"]),
        )
        for i in range(nsp)
    ]
    return [TensorType((*x.shape[:2], *sp), x.dtype)]


@register_op("max_pool", OUT_ELEMWISE_FUSABLE, infer=infer_pool_window)
def max_pool(inputs: Sequence[Any], attrs: dict[str, Any]) -> list[Any]:
    """N-d max pooling with strides, pads, dilations and ceil mode."""
    a = attrs
    return [
        topi.pool_nd(
            inputs[0], "max", a["kernel"], a["strides"], a["pads"], a["dilations"], a["ceil_mode"]
        )
    ]


@register_op("avg_pool", OUT_ELEMWISE_FUSABLE, infer=infer_pool_window)
def avg_pool(inputs: Sequence[Any], attrs: dict[str, Any]) -> list[Any]:
    """N-d average pooling; whether padding counts toward the mean is an attribute."""
    a = attrs
    return [
        topi.pool_nd(
            inputs[0],
            "avg",
            a["kernel"],
            a["strides"],
            a["pads"],
            a["dilations"],
            a["ceil_mode"],
            a["count_include_pad"],
        )
    ]


def _infer_matmul(types: Types, attrs: dict[str, Any]) -> list[TensorType]:
    a, b = types[0], types[1]
    if a.ndim == 0 or b.ndim == 0:
        raise ArgumentError("matmul: operands must have at least one dimension")
    sa = (1, *a.shape) if a.ndim == 1 else a.shape
    sb = (*b.shape, 1) if b.ndim == 1 else b.shape
    if isinstance(sa[-1], int) and isinstance(sb[-2], int) and sa[-1] != sb[-2]:
        raise ArgumentError(f"matmul: shapes {list(a.shape)} and {list(b.shape)} do not align")
    batch = broadcast_shapes(sa[:-2], sb[:-2])
    shape = (*batch, *([sa[-2]] if a.ndim > 1 else []), *([sb[-1]] if b.ndim > 1 else []))
    return [TensorType(shape, a.dtype)]


@register_op("matmul", OUT_ELEMWISE_FUSABLE, infer=_infer_matmul, num_inputs=2)
def matmul(inputs: Sequence[Any], attrs: dict[str, Any]) -> list[Any]:
    """Batched matrix product with numpy broadcasting of the batch axes."""
    return [topi.matmul_nd(inputs[0], inputs[1])]


def _infer_dense_packed(types: Types, attrs: dict[str, Any]) -> list[TensorType]:
    a, w = types[0], types[1]
    if a.ndim < 2 or w.ndim != 3 or a.shape[-1] != w.shape[1] or a.dtype != w.dtype:
        raise ArgumentError(f"dense_packed: input {a} and weight panels {w} do not fit")
    return [TensorType((*a.shape[:-1], attrs["n"]), a.dtype)]


@register_op("dense_packed", OUT_ELEMWISE_FUSABLE, infer=_infer_dense_packed, num_inputs=2)
def dense_packed(inputs: Sequence[Any], attrs: dict[str, Any]) -> list[Any]:
    """``A @ W`` with constant weights pre-packed into panels (``pack_dense_weights``)."""
    return [topi.dense_packed(inputs[0], inputs[1], attrs["n"])]


def _infer_gemm(types: Types, attrs: dict[str, Any]) -> list[TensorType]:
    a, b = types[0], types[1]
    if a.ndim != 2 or b.ndim != 2:
        raise ArgumentError(f"gemm: A and B must be 2-D, got {a} and {b}")
    m = a.shape[1] if attrs["trans_a"] else a.shape[0]
    n = b.shape[0] if attrs["trans_b"] else b.shape[1]
    return [TensorType((m, n), a.dtype)]


@register_op("gemm", OUT_ELEMWISE_FUSABLE, infer=_infer_gemm, num_inputs=(2, 3))
def gemm(inputs: Sequence[Any], attrs: dict[str, Any]) -> list[Any]:
    """``alpha * A' @ B' + beta * C`` with optional transposes, as ONNX Gemm defines it."""
    c = inputs[2] if len(inputs) > 2 else None
    a = attrs
    return [topi.gemm(inputs[0], inputs[1], c, a["alpha"], a["beta"], a["trans_a"], a["trans_b"])]


def _infer_softmax(types: Types, attrs: dict[str, Any]) -> list[TensorType]:
    x = types[0]
    if not 0 <= attrs["axis"] < max(x.ndim, 1):
        raise ArgumentError(f"softmax: axis {attrs['axis']} is out of range for {x}")
    return [x]


@register_op("softmax", OPAQUE, infer=_infer_softmax)
def softmax(inputs: Sequence[Any], attrs: dict[str, Any]) -> list[Any]:
    """Softmax along one axis, computed stably (the max is subtracted first)."""
    return [topi.softmax_axis(inputs[0], attrs["axis"])]


@register_op("log_softmax", OPAQUE, infer=_infer_softmax)
def log_softmax(inputs: Sequence[Any], attrs: dict[str, Any]) -> list[Any]:
    """Log-softmax along one axis, stabilised by the maximum like :func:`softmax`."""
    return [topi.softmax_axis(inputs[0], attrs["axis"], log=True, name="log_softmax")]
