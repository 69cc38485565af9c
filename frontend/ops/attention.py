"""The fused ``attention`` op: ``softmax(Q Kᵀ · scale + mask) V`` on 4-D tensors.

Only a graph pass makes it (``frontend/passes/fuse_attention.py``, from the exporters'
MatMul → scale → mask → Softmax → MatMul chain). Attributes (every one present):
``scale`` (float), and ``q_axes``, ``k_axes``, ``v_axes``, ``out_axes``: for each of Q,
K, V and the output, the axis of its 4-D view holding logical axis (batch, head,
position, feature), with ``q_split`` ... ``out_split``: 0 where the tensor is that view,
else the tensor is 3-D and its last axis is the view's last two merged (so many
features) — an :class:`~ember.tir.topi.attention.AttentionLayout`, so the multi-head
reshapes and transposes around the chain fold into how the op reads and writes. Inputs:
Q, K, V, then an optional additive mask broadcasting (numpy-style) to the scores'
logical shape (batch, head, query, key).

``cached_attention`` is the same over a key/value cache with new entries appended
(``frontend/passes/fuse_cache_append.py`` makes it from a decode step's concats): it
also returns the appended caches.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ember.errors import ArgumentError
from ember.frontend.graph import TensorType
from ember.frontend.op_kinds import OPAQUE
from ember.frontend.ops.registry import broadcast_shapes, get_op, register_op
from ember.tir.topi import attention as topi_attention
from ember.tir.topi.attention import AttentionLayout


def _infer_attention(types: Sequence[TensorType], attrs: dict[str, Any]) -> list[TensorType]:
    q, k, v = types[:3]
    layout = AttentionLayout.from_attrs(attrs)
    for which, t in zip("qkv", (q, k, v)):
        split = attrs[f"{which}_split"]
        if t.ndim != (3 if split else 4) or (split and t.shape[2] % split):
            raise ArgumentError(f"attention: {which.upper()} {t} does not fit split {split}")
    if any(t.dtype != q.dtype for t in types):
        raise ArgumentError(f"attention: Q, K, V (and mask) must share a dtype, got {types}")
    B, H, Sq, D = layout.sizes("q", q.shape)
    kb, kh, Sk, kd = layout.sizes("k", k.shape)
    vb, vh, vs, Dv = layout.sizes("v", v.shape)
    if (kb, kh, kd) != (B, H, D) or (vb, vh, vs) != (B, H, Sk):
        raise ArgumentError(f"attention: Q {q}, K {k} and V {v} do not fit together")
    scores = (B, H, Sq, Sk)
    if len(types) > 3 and broadcast_shapes(types[3].shape, scores) != scores:
        raise ArgumentError(f"attention: mask {types[3]} does not broadcast to scores {scores}")
    return [TensorType(layout.shape("out", (B, H, Sq, Dv)), q.dtype)]


@register_op("attention", OPAQUE, infer=_infer_attention, num_inputs=(3, 4))
def attention(inputs: Sequence[Any], attrs: dict[str, Any]) -> list[Any]:
    """Scaled dot-product attention with an optional additive mask (the generic compute
    stores the scores; the CPU's strategy runs a kernel that does not)."""
    mask = inputs[3] if len(inputs) > 3 else None
    layout = AttentionLayout.from_attrs(attrs)
    q, k, v = inputs[:3]
    return [topi_attention.attention(q, k, v, mask, attrs["scale"], layout)]


def _infer_cached(types: Sequence[TensorType], attrs: dict[str, Any]) -> list[TensorType]:
    layout = AttentionLayout.from_attrs(attrs)
    if layout.k_split or layout.v_split:
        raise ArgumentError("cached_attention: K and V must be 4-D tensors (no split)")
    q, past_k, new_k, past_v, new_v = types[:5]
    present = []
    for which, past, new in (("k", past_k, new_k), ("v", past_v, new_v)):
        if past.ndim != 4 or new.ndim != 4 or past.dtype != new.dtype:
            raise ArgumentError(f"cached_attention: cache {past} and new {new} must be 4-D alike")
        try:  # the appended cache: concat's own rule along the position axis
            present += get_op("concat").infer([past, new], {"axis": getattr(layout, which)[2]})
        except ArgumentError:
            message = f"cached_attention: new {new} does not extend cache {past}"
            raise ArgumentError(message) from None
    (out,) = _infer_attention([q, *present, *types[5:]], attrs)
    return [out, *present]


@register_op("cached_attention", OPAQUE, infer=_infer_cached, num_inputs=(5, 6), num_outputs=3)
def cached_attention(inputs: Sequence[Any], attrs: dict[str, Any]) -> list[Any]:
    """Attention over a key/value cache with the new entries appended, and the appended
    caches (``present``) as its second and third outputs. Inputs: Q, the past and new K,
    the past and new V, then the optional mask; attributes as ``attention``'s, K and V
    4-D. Made by ``frontend/passes/fuse_cache_append.py`` (CPU) from a decode step's two
    ``Concat`` nodes and the ``attention`` node reading them."""
    q, past_k, new_k, past_v, new_v = inputs[:5]
    mask = inputs[5] if len(inputs) > 5 else None
    layout = AttentionLayout.from_attrs(attrs)
    return topi_attention.cached_attention(
        q, past_k, new_k, past_v, new_v, mask, attrs["scale"], layout
    )
