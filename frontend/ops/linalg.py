"""Linear-algebra ops beyond matmul: ``einsum`` and ``det``.

Attributes: ``einsum``: equation (str, as ONNX gives it). Inputs: one or more
tensors of one dtype. The equation is lowered to one compute by ``topi.einsum``.
``det``: none; (..., n, n) -> (...) for n up to ``topi.det.MAX_N``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ember.errors import ArgumentError
from ember.frontend.graph import TensorType
from ember.frontend.op_kinds import INJECTIVE, OUT_ELEMWISE_FUSABLE
from ember.frontend.ops.registry import register_op
from ember.tir.topi.det import MAX_N
from ember.tir.topi.det import det as det_compute
from ember.tir.topi.einsum import einsum as einsum_compute
from ember.tir.topi.einsum import parse_einsum


def _infer_einsum(types: Sequence[TensorType], attrs: dict[str, Any]) -> list[TensorType]:
    if not all(t.is_static for t in types):
        raise ArgumentError("einsum: inputs need static shapes")
    if len({t.dtype for t in types}) != 1:
        raise ArgumentError(f"einsum: inputs have different dtypes {[t.dtype for t in types]}")
    spec = parse_einsum(attrs["equation"], [t.shape for t in types])
    return [TensorType(tuple(spec.sizes[lab] for lab in spec.output), types[0].dtype)]


@register_op("einsum", OUT_ELEMWISE_FUSABLE, infer=_infer_einsum, num_inputs=(1, 64))
def einsum(inputs: Sequence[Any], attrs: dict[str, Any]) -> list[Any]:
    """Einstein summation over up to 64 inputs, from its equation."""
    return [einsum_compute(attrs["equation"], inputs)]


def _infer_det(types: Sequence[TensorType], attrs: dict[str, Any]) -> list[TensorType]:
    x = types[0]
    if x.ndim < 2 or x.shape[-1] != x.shape[-2] or not x.dtype.startswith(("float", "bfloat")):
        raise ArgumentError(f"det: expected float (..., n, n) matrices, got {x}")
    if isinstance(x.shape[-1], int) and x.shape[-1] > MAX_N:
        raise ArgumentError(f"det: {x.shape[-1]} x {x.shape[-1]} matrices are not supported")
    return [TensorType(tuple(x.shape[:-2]), x.dtype)]


@register_op("det", INJECTIVE, infer=_infer_det)
def det(inputs: Sequence[Any], attrs: dict[str, Any]) -> list[Any]:
    """Determinant of the trailing square matrices."""
    return [det_compute(inputs[0])]
