"""Normalization ops: moments-based normalize, batch norm (inference), Lp norm, LRN.

Attributes (set by the converters, every one present):
- ``normalize`` / ``normalize_stats``: axes (sorted non-negative ints), eps (float),
  center (bool; False is RMS norm), acc (the accumulation dtype). Inputs: x, then
  optional scale and bias, each broadcasting numpy-style against x.
  ``normalize_stats`` also returns the mean and 1/std (reduced axes kept as 1, in acc).
- ``batch_norm``: eps. Inputs x, scale, bias, mean, var (each of shape [C]).
- ``lp_normalize``: axis (non-negative), p (1 or 2). ``lrn``: size, alpha, beta, bias.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ember.errors import ArgumentError
from ember.frontend.graph import TensorType
from ember.frontend.op_kinds import BROADCAST, OPAQUE
from ember.frontend.ops.registry import broadcast_shapes, register_op, same_as_input
from ember.tir.topi import norm as topi_norm

Types = Sequence[TensorType]


def _check_float(x: TensorType, op: str) -> None:
    if not x.dtype.startswith(("float", "bfloat")):
        raise ArgumentError(f"{op}: input must be a float tensor, got {x}")


def _infer_normalize(types: Types, attrs: dict[str, Any]) -> list[TensorType]:
    x = types[0]
    _check_float(x, "normalize")
    axes = attrs["axes"]
    if not axes or any(not 0 <= a < x.ndim for a in axes):
        raise ArgumentError(f"normalize: axes {list(axes)} do not fit {x}")
    for t in types[1:]:
        if broadcast_shapes(x.shape, t.shape) != tuple(x.shape):
            raise ArgumentError(f"normalize: scale/bias {t} does not broadcast to {x}")
    return [x]


def _infer_stats(types: Types, attrs: dict[str, Any]) -> list[TensorType]:
    (x,) = _infer_normalize(types, attrs)
    kept = tuple(1 if d in attrs["axes"] else s for d, s in enumerate(x.shape))
    return [x, TensorType(kept, attrs["acc"]), TensorType(kept, attrs["acc"])]


def _normalize(inputs: Sequence[Any], attrs: dict[str, Any]) -> list[Any]:
    a = attrs
    scale = inputs[1] if len(inputs) > 1 else None
    bias = inputs[2] if len(inputs) > 2 else None
    return topi_norm.normalize(
        inputs[0], a["axes"], a["eps"], scale, bias, a["center"], a["acc"], name="norm"
    )


@register_op("normalize", OPAQUE, infer=_infer_normalize, num_inputs=(1, 3))
def normalize(inputs: Sequence[Any], attrs: dict[str, Any]) -> list[Any]:
    """Normalization over given axes, centered or RMS, with optional scale and bias: layer, RMS,
    instance and group norms share it."""
    return _normalize(inputs, attrs)[:1]


@register_op("normalize_stats", OPAQUE, infer=_infer_stats, num_inputs=(1, 3), num_outputs=3)
def normalize_stats(inputs: Sequence[Any], attrs: dict[str, Any]) -> list[Any]:
    """:func:`normalize` plus the two statistics it used, for LayerNormalization's optional
    outputs."""
    return _normalize(inputs, attrs)


def _infer_batch_norm(types: Types, attrs: dict[str, Any]) -> list[TensorType]:
    x = types[0]
    _check_float(x, "batch_norm")
    if x.ndim < 2:
        raise ArgumentError(f"batch_norm: input must be N x C x ..., got {x}")
    for t in types[1:]:
        if t.shape != (x.shape[1],):
            raise ArgumentError(f"batch_norm: statistics must have shape [C] for {x}, got {t}")
    return [x]


@register_op("batch_norm", BROADCAST, infer=_infer_batch_norm, num_inputs=5)
def batch_norm(inputs: Sequence[Any], attrs: dict[str, Any]) -> list[Any]:
    """Inference batch norm from running statistics, broadcast over the channel axis."""
    x, scale, bias, mean, var = inputs
    return [topi_norm.batch_norm(x, scale, bias, mean, var, attrs["eps"])]


def _infer_lp(types: Types, attrs: dict[str, Any]) -> list[TensorType]:
    x = types[0]
    _check_float(x, "lp_normalize")
    if not 0 <= attrs["axis"] < x.ndim or attrs["p"] not in (1, 2):
        raise ArgumentError(f"lp_normalize: axis {attrs['axis']}, p {attrs['p']} invalid for {x}")
    return [x]


@register_op("lp_normalize", OPAQUE, infer=_infer_lp)
def lp_normalize(inputs: Sequence[Any], attrs: dict[str, Any]) -> list[Any]:
    """Divides by the L1 or L2 norm along an axis."""
    return [topi_norm.lp_normalize(inputs[0], attrs["axis"], attrs["p"])]


def _infer_lrn(types: Types, attrs: dict[str, Any]) -> list[TensorType]:
    _check_float(types[0], "lrn")
    if types[0].ndim < 3 or attrs["size"] < 1:
        raise ArgumentError(f"lrn: needs an N x C x spatial input and size >= 1, got {types[0]}")
    return same_as_input(types, attrs)


@register_op("lrn", OPAQUE, infer=_infer_lrn)
def lrn(inputs: Sequence[Any], attrs: dict[str, Any]) -> list[Any]:
    """Local response normalization across neighbouring channels."""
    a = attrs
    return [topi_norm.lrn(inputs[0], a["size"], a["alpha"], a["beta"], a["bias"])]
