"""Data-movement ops: reshape, transpose, concat, gather (all INJECTIVE).

Attributes: ``reshape``: shape (tuple of ints, already resolved: no -1 or 0);
``transpose``: perm; ``concat``: axis (non-negative); ``gather``: axis (non-negative).
Squeeze, Unsqueeze and Flatten convert to ``reshape``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ember.errors import ArgumentError
from ember.frontend.graph import TensorType
from ember.frontend.op_kinds import INJECTIVE
from ember.frontend.ops.registry import register_op
from ember.tir import topi

Types = Sequence[TensorType]


def _infer_reshape(types: Types, attrs: dict[str, Any]) -> list[TensorType]:
    x = types[0]
    shape = attrs["shape"]
    if x.is_static and x.size != TensorType(shape, x.dtype).size:
        raise ArgumentError(f"reshape: cannot reshape {x} into {list(shape)}")
    return [TensorType(tuple(shape), x.dtype)]


@register_op("reshape", INJECTIVE, infer=_infer_reshape)
def reshape(inputs: Sequence[Any], attrs: dict[str, Any]) -> list[Any]:
    """The input viewed under a new shape, resolved by the converter."""
    return [topi.reshape(inputs[0], attrs["shape"])]


def _infer_transpose(types: Types, attrs: dict[str, Any]) -> list[TensorType]:
    x = types[0]
    perm = attrs["perm"]
    if sorted(perm) != list(range(x.ndim)):
        raise ArgumentError(f"transpose: perm {list(perm)} is not a permutation of {x.ndim} axes")
    return [TensorType(tuple(x.shape[p] for p in perm), x.dtype)]


@register_op("transpose", INJECTIVE, infer=_infer_transpose)
def transpose(inputs: Sequence[Any], attrs: dict[str, Any]) -> list[Any]:
    """The axes permuted."""
    return [topi.transpose(inputs[0], attrs["perm"])]


def _infer_concat(types: Types, attrs: dict[str, Any]) -> list[TensorType]:
    axis = attrs["axis"]
    first = types[0]
    total: Any = 0
    for t in types:
        same = t.ndim == first.ndim and t.dtype == first.dtype
        if not same or any(
            a != b for i, (a, b) in enumerate(zip(t.shape, first.shape)) if i != axis
        ):
            raise ArgumentError(
                f"concat: inputs {', '.join(str(x) for x in types)} do not fit on axis {axis}"
            )
        d = t.shape[axis]
        total = total + d if isinstance(total, int) and isinstance(d, int) else f"concat_{axis}"
    shape = list(first.shape)
    shape[axis] = total
    return [TensorType(tuple(shape), first.dtype)]


@register_op("concat", INJECTIVE, infer=_infer_concat, num_inputs=(1, 1 << 16))
def concat(inputs: Sequence[Any], attrs: dict[str, Any]) -> list[Any]:
    """Inputs joined along one axis."""
    return [topi.concatenate(inputs, attrs["axis"])]


def _infer_gather(types: Types, attrs: dict[str, Any]) -> list[TensorType]:
    x, idx = types[0], types[1]
    axis = attrs["axis"]
    if not idx.dtype.startswith("int"):
        raise ArgumentError(f"gather: indices must be integers, got {idx.dtype}")
    return [TensorType((*x.shape[:axis], *idx.shape, *x.shape[axis + 1 :]), x.dtype)]


@register_op("gather", INJECTIVE, infer=_infer_gather, num_inputs=2)
def gather(inputs: Sequence[Any], attrs: dict[str, Any]) -> list[Any]:
    """Rows (along ``axis``) picked by an index tensor (ONNX Gather)."""
    return [topi.take(inputs[0], inputs[1], attrs["axis"])]
