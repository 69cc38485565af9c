"""A BERT-style self-attention block as exporters write it, for tests and benchmarks.

``x [B, S, H·D]`` → (optional Q/K/V projections) → ``Reshape [B, S, H, D]`` → ``Transpose``
(K straight to ``[B, H, D, S]``) → ``MatMul`` → ``Div`` by √D (or ``Mul`` by 1/√D) → ``Add``
of the padding mask (``(1 - attention_mask) · -10000`` unsqueezed to ``[B, 1, 1, S]``, the
way Hugging Face's BERT export computes it from the int64 ``attention_mask`` input) →
``Softmax(axis=-1)`` → ``MatMul`` with V → ``Transpose`` → ``Reshape [B, S, H·D]`` →
(optional output projection). Weights are seeded.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ember.frontend.testing.models import build_model


def attention_block(
    rng: np.random.Generator,
    batch: int = 1,
    seq: int = 16,
    heads: int = 2,
    head_dim: int = 8,
    projections: bool = True,
    multiply: bool = False,
) -> tuple[Any, dict[str, np.ndarray]]:
    """The ONNX model and sample inputs (``x``, and ``attention_mask`` with padding at the
    end of every sequence but the first)."""
    # optional dependency: onnx
    from onnx import TensorProto, helper

    e = heads * head_dim
    nodes: list[Any] = []
    weights: dict[str, np.ndarray] = {}

    def node(op: str, inputs: list[str], **attrs: Any) -> str:
        out = f"{op.lower()}_{len(nodes)}"
        nodes.append(helper.make_node(op, inputs, [out], name=out, **attrs))
        return out

    def const(name: str, value: np.ndarray) -> str:
        weights[name] = np.ascontiguousarray(value)
        return name

    def linear(x: str, name: str) -> str:
        if not projections:
            return x
        w = (rng.standard_normal((e, e)) / np.sqrt(e)).astype(np.float32)
        b = (rng.standard_normal(e) * 0.1).astype(np.float32)
        return node("Add", [node("MatMul", [x, const(f"{name}_w", w)]), const(f"{name}_b", b)])

    split = const("split", np.array([batch, seq, heads, head_dim], np.int64))
    q, k, v = (
        node("Transpose", [node("Reshape", [linear("x", n), split])], perm=perm)
        for n, perm in (("q", [0, 2, 1, 3]), ("k", [0, 2, 3, 1]), ("v", [0, 2, 1, 3]))
    )
    scores = node("MatMul", [q, k])
    if multiply:
        scores = node("Mul", [scores, const("scale", np.array(1 / np.sqrt(head_dim), "float32"))])
    else:
        scores = node("Div", [scores, const("sqrt_d", np.array(np.sqrt(head_dim), "float32"))])
    keep = node("Cast", ["attention_mask"], to=TensorProto.FLOAT)
    pad = node("Sub", [const("one", np.array(1.0, np.float32)), keep])
    bias = node("Mul", [pad, const("neg", np.array(-10000.0, np.float32))])
    bias = node("Unsqueeze", [bias, const("axes", np.array([1, 2], np.int64))])
    probs = node("Softmax", [node("Add", [scores, bias])], axis=-1)
    ctx = node("Transpose", [node("MatMul", [probs, v])], perm=[0, 2, 1, 3])
    merged = node("Reshape", [ctx, const("merge", np.array([batch, seq, e], np.int64))])
    out = linear(merged, "o")
    x = rng.standard_normal((batch, seq, e)).astype(np.float32)
    mask = np.ones((batch, seq), np.int64)
    for b in range(1, batch):
        mask[b, seq - (b * seq) // (batch + 1) :] = 0  # a shorter sentence, padded
    inputs: dict[str, np.ndarray] = {"x": x, "attention_mask": mask}
    return build_model(nodes, inputs, [out], weights), inputs


__all__ = ["attention_block"]
