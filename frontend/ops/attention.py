"""The fused ``attention`` op: ``softmax(Q Kᵀ · scale + mask) V`` on 4-D tensors.

Only a graph pass makes it (``frontend/passes/fuse_attention.py``, from the exporters'
MatMul → scale → mask → Softmax → MatMul chain). Attributes (every one present):
``scale`` (float), and ``q_axes``, ``k_axes``, ``v_axes``, ``out_axes``: for each of Q,
K, V and the output, the tensor axis holding logical axis (batch, head, position,
feature) — an :class:`~ember.tir.topi.attention.AttentionLayout`, so the multi-head
transposes around the chain fold into how the op reads and writes. Inputs: Q, K, V, then
an optional additive mask broadcasting (numpy-style) to the scores' logical shape
(batch, head, query, key).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ember.errors import ArgumentError
from ember.frontend.graph import TensorType
from ember.frontend.op_kinds import OPAQUE
from ember.frontend.ops.registry import broadcast_shapes, register_op
from ember.tir.topi import attention as topi_attention
from ember.tir.topi.attention import AttentionLayout


def _infer_attention(types: Sequence[TensorType], attrs: dict[str, Any]) -> list[TensorType]:
    q, k, v = types[:3]
    layout = AttentionLayout.from_attrs(attrs)
    if any(t.ndim != 4 for t in (q, k, v)) or any(t.dtype != q.dtype for t in types):
        raise ArgumentError(f"attention: Q, K and V must be 4-D of one dtype, got {q}, {k}, {v}")
    B, H, Sq, D = layout.logical(q.shape, layout.q)
    kb, kh, Sk, kd = layout.logical(k.shape, layout.k)
    vb, vh, vs, Dv = layout.logical(v.shape, layout.v)
    if (kb, kh, kd) != (B, H, D) or (vb, vh, vs) != (B, H, Sk):
        raise ArgumentError(f"attention: Q {q}, K {k} and V {v} do not fit together")
    scores = (B, H, Sq, Sk)
    if len(types) > 3 and broadcast_shapes(types[3].shape, scores) != scores:
        raise ArgumentError(f"attention: mask {types[3]} does not broadcast to scores {scores}")
    return [TensorType(layout.physical((B, H, Sq, Dv), layout.out), q.dtype)]


@register_op("attention", OPAQUE, infer=_infer_attention, num_inputs=(3, 4))
def attention(inputs: Sequence[Any], attrs: dict[str, Any]) -> list[Any]:
    """Scaled dot-product attention with an optional additive mask (the generic compute
    stores the scores; the CPU's strategy runs a kernel that does not)."""
    mask = inputs[3] if len(inputs) > 3 else None
    layout = AttentionLayout.from_attrs(attrs)
    q, k, v = inputs[:3]
    return [topi_attention.attention(q, k, v, mask, attrs["scale"], layout)]
