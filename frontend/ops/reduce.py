"""Reduction ops: ``reduce`` (every ONNX Reduce* kind) and ``arg_reduce`` (ArgMax/ArgMin).

Attributes (set by the converters, every one present):
- ``reduce``: kind (one of ``topi.reduce.REDUCE_KINDS``), axes (sorted non-negative
  ints, at least one), keepdims (bool). The output has the input's dtype.
- ``arg_reduce``: kind ("max"/"min"), axis (non-negative), keepdims, select_last
  (bools). The output is int64.
- ``hardmax``: axis (non-negative): 1 at the first maximum along it, 0 elsewhere.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ember.errors import ArgumentError
from ember.frontend.graph import TensorType
from ember.frontend.op_kinds import COMM_REDUCE, OPAQUE
from ember.frontend.ops.registry import register_op
from ember.tir.topi import reduce as topi_reduce

Types = Sequence[TensorType]


def _infer_reduce(types: Types, attrs: dict[str, Any]) -> list[TensorType]:
    x = types[0]
    axes = attrs["axes"]
    if not axes or any(not 0 <= a < x.ndim for a in axes):
        raise ArgumentError(f"reduce: axes {list(axes)} do not fit {x}")
    if attrs["kind"] not in topi_reduce.REDUCE_KINDS:
        raise ArgumentError(f"reduce: unknown kind {attrs['kind']!r}")
    shape = topi_reduce.reduced_shape(x.shape, axes, attrs["keepdims"])
    return [TensorType(shape, x.dtype)]


@register_op("reduce", COMM_REDUCE, infer=_infer_reduce)
def reduce(inputs: Sequence[Any], attrs: dict[str, Any]) -> list[Any]:
    """A reduction (sum, mean, max, ...) over axes, the ``kind`` attribute saying which."""
    a = attrs
    return [topi_reduce.reduce_axes(inputs[0], a["kind"], a["axes"], a["keepdims"])]


def _infer_arg(types: Types, attrs: dict[str, Any]) -> list[TensorType]:
    x = types[0]
    if not 0 <= attrs["axis"] < x.ndim:
        raise ArgumentError(f"arg_reduce: axis {attrs['axis']} is out of range for {x}")
    shape = topi_reduce.reduced_shape(x.shape, (attrs["axis"],), attrs["keepdims"])
    return [TensorType(shape, "int64")]


@register_op("arg_reduce", COMM_REDUCE, infer=_infer_arg)
def arg_reduce(inputs: Sequence[Any], attrs: dict[str, Any]) -> list[Any]:
    """Index of the max or min along an axis, first or last on ties."""
    a = attrs
    return [
        topi_reduce.arg_reduce(
            inputs[0], a["kind"], a["axis"], a["keepdims"], a["select_last"], name="argreduce"
        )
    ]


def _infer_hardmax(types: Types, attrs: dict[str, Any]) -> list[TensorType]:
    x = types[0]
    if not 0 <= attrs["axis"] < x.ndim:
        raise ArgumentError(f"hardmax: axis {attrs['axis']} is out of range for {x}")
    return [x]


@register_op("hardmax", OPAQUE, infer=_infer_hardmax)
def hardmax(inputs: Sequence[Any], attrs: dict[str, Any]) -> list[Any]:
    """One at the first maximum along an axis, zero elsewhere."""
    return [topi_reduce.hardmax(inputs[0], attrs["axis"])]
