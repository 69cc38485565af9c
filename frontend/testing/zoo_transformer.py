"""Transformers as exporters write them, with seeded random weights: BERT-base, a ViT-style
image encoder and a GPT-2-style decoder run as one decode step with a KV cache.

Attention is written the way torch.onnx exports it, which is what an attention fusion
pattern-matches: per-head Reshape and Transpose(0, 2, 1, 3) of Q, K and V,
``MatMul(Q, Transpose(K, perm=(0, 1, 3, 2)))``, ``Div`` by sqrt(head size), ``Add`` of an
additive mask (GPT-2: a slice of the causal mask, whose bounds come from the cache's
Shape), ``Softmax`` over the last axis, ``MatMul`` with V, Transpose and Reshape back.
The decode step takes the past keys and values as graph inputs whose sequence dim is the
symbol ``past_sequence_length`` (as Hugging Face's exporter names it), so one model runs
at any cache length; ``ember.compile`` gives a DynamicModel that compiles per length.
Builders have the catalog's signature ``builder(rng, quick) -> (model, inputs)``.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ember.frontend.testing.models import build_model
from ember.frontend.testing.zoo import _Builder, _gelu_erf, _layer_norm, bert_encoder

PAST = "past_sequence_length"


def bert_base(rng: np.random.Generator, quick: bool = False) -> tuple[Any, dict]:
    """BERT-base's encoder: 12 layers, hidden 768, 12 heads, sequence 128, vocabulary
    30,522 (quick: 1 layer, hidden 32, 2 heads, 8 tokens)."""
    if quick:
        return bert_encoder(rng, 1, seq=8, layers=1, hidden=32, heads=2, vocab=50)
    return bert_encoder(rng, 1, seq=128, layers=12, hidden=768, heads=12, vocab=30522)


def _scalar(b: _Builder, index: int) -> str:
    """A 0-d int64 initializer (``_Builder.const`` makes arrays at least 1-d), for a Gather
    that drops the axis it indexes."""
    name = b.name("index")
    b.weights[name] = np.array(index, "int64")
    return name


def _heads(b: _Builder, x: str, shape: list[int]) -> str:
    """[batch, seq, hidden] -> [batch, heads, seq, head size]."""
    split = b.node("Reshape", [x, b.const(np.array(shape, "int64"), "shape")])
    return b.node("Transpose", [split], perm=[0, 2, 1, 3])


def _attend(b: _Builder, q: str, k: str, v: str, d: int, mask: str | None) -> str:
    """softmax(Q K^T / sqrt(d) + mask) V over [batch, heads, seq, d] operands."""
    scores = b.node("MatMul", [q, b.node("Transpose", [k], perm=[0, 1, 3, 2])])
    scores = b.node("Div", [scores, b.const(np.array(np.sqrt(d), "float32"), "scale")])
    if mask is not None:
        scores = b.node("Add", [scores, mask])
    return b.node("MatMul", [b.node("Softmax", [scores], axis=-1), v])


def _merge(b: _Builder, ctx: str, shape: list[int]) -> str:
    """[batch, heads, seq, head size] -> [batch, seq, hidden]."""
    merged = b.node("Transpose", [ctx], perm=[0, 2, 1, 3])
    return b.node("Reshape", [merged, b.const(np.array(shape, "int64"), "shape")])


def _vit_block(b: _Builder, x: str, seq: int, e: int, heads: int) -> str:
    """A pre-LN encoder block: x + attention(LN(x)), then x + MLP(LN(x)) with erf GELU."""
    h = _layer_norm(b, x, e)
    q, k, v = (_heads(b, b.linear(h, e, e), [1, seq, heads, e // heads]) for _ in range(3))
    ctx = _merge(b, _attend(b, q, k, v, e // heads, None), [1, seq, e])
    x = b.node("Add", [x, b.linear(ctx, e, e)])
    ff = b.linear(_gelu_erf(b, b.linear(_layer_norm(b, x, e), e, 4 * e)), 4 * e, e)
    return b.node("Add", [x, ff])


def vit_sized(
    rng: np.random.Generator,
    size: int = 224,
    patch: int = 16,
    layers: int = 12,
    hidden: int = 768,
    heads: int = 12,
    classes: int = 1000,
) -> tuple[Any, dict]:
    """A ViT encoder (ViT-B/16 by default): a patch-embedding Conv (kernel and stride
    ``patch``), Flatten and Transpose to tokens, a class token concatenated in front,
    learned position embeddings, pre-LN blocks, a final LayerNorm and a classifier on the
    class token."""
    b = _Builder(rng)
    n = (size // patch) ** 2
    w = rng.standard_normal((hidden, 3, patch, patch)) * np.sqrt(1.0 / (3 * patch * patch))
    emb = b.node(
        "Conv",
        ["pixel_values", b.const(w.astype("float32"), "w"), b.const(np.zeros(hidden, "float32"))],
        kernel_shape=[patch, patch],
        strides=[patch, patch],
    )
    tokens = b.node("Reshape", [emb, b.const(np.array([1, hidden, n], "int64"), "shape")])
    tokens = b.node("Transpose", [tokens], perm=[0, 2, 1])
    cls = b.const((rng.standard_normal((1, 1, hidden)) * 0.5).astype("float32"), "cls")
    cls = b.node("Expand", [cls, b.const(np.array([1, 1, hidden], "int64"), "shape")])
    pos = b.const((rng.standard_normal((1, n + 1, hidden)) * 0.1).astype("float32"), "pos")
    x = b.node("Add", [b.node("Concat", [cls, tokens], axis=1), pos])
    for _ in range(layers):
        x = _vit_block(b, x, n + 1, hidden, heads)
    first = b.node("Gather", [_layer_norm(b, x, hidden), _scalar(b, 0)], axis=1)  # class token
    logits = b.linear(first, hidden, classes)
    img = rng.standard_normal((1, 3, size, size)).astype("float32")
    return build_model(b.nodes, {"pixel_values": img}, [logits], b.weights), {"pixel_values": img}


def vit(rng: np.random.Generator, quick: bool = False) -> tuple[Any, dict]:
    """ViT-B/16 at 224x224 (quick: 48x48 image, 16x16 patches, 1 layer, hidden 32)."""
    if quick:
        return vit_sized(rng, size=48, layers=1, hidden=32, heads=2, classes=10)
    return vit_sized(rng)


def _gelu_tanh(b: _Builder, x: str) -> str:
    """GPT-2's GELU: 0.5 x (1 + tanh(sqrt(2 / pi) (x + 0.044715 x^3)))."""

    def c(v: float) -> str:
        return b.const(np.array(v, "float32"))

    cube = b.node("Mul", [b.node("Pow", [x, c(3.0)]), c(0.044715)])
    inner = b.node("Mul", [b.node("Add", [x, cube]), c(float(np.sqrt(2.0 / np.pi)))])
    one = b.node("Add", [b.node("Tanh", [inner]), c(1.0)])
    return b.node("Mul", [b.node("Mul", [x, c(0.5)]), one])


def _causal_mask(b: _Builder, past_key: str, positions: int) -> tuple[str, str]:
    """The rows of the additive causal mask for the new token, ``mask[past : past + 1,
    : past + 1]``, sliced with bounds read from the cache's Shape as exporters write it;
    also the new token's position ids ``[[past]]``."""
    big = np.triu(np.full((positions, positions), np.finfo("float32").min, "float32"), k=1)
    past = b.node("Gather", [b.node("Shape", [past_key]), _scalar(b, 2)])
    past = b.node("Unsqueeze", [past, b.const(np.array([0], "int64"), "axes")])
    total = b.node("Add", [past, b.const(np.array([1], "int64"), "one")])
    starts = b.node("Concat", [past, b.const(np.array([0], "int64"), "zero")], axis=0)
    ends = b.node("Concat", [total, total], axis=0)
    axes = b.const(np.array([0, 1], "int64"), "axes")
    mask = b.node("Slice", [b.const(big, "causal_mask"), starts, ends, axes])
    position_ids = b.node("Reshape", [past, b.const(np.array([1, 1], "int64"), "shape")])
    return mask, position_ids


def _decoder_block(b: _Builder, x: str, layer: int, mask: str, e: int, heads: int) -> str:
    """GPT-2's pre-LN block on one new token: fused QKV projection split in three, the new
    key and value appended to the cache (the ``present`` outputs), causal attention over
    the whole cache, the tanh-GELU MLP."""
    # optional dependency: onnx
    from onnx import helper

    d = e // heads
    qkv = b.linear(_layer_norm(b, x, e), e, 3 * e)
    parts = [b.name(p) for p in "qkv"]
    sizes = b.const(np.array([e, e, e], "int64"), "split")
    b.nodes.append(helper.make_node("Split", [qkv, sizes], parts, name=b.name("split"), axis=2))
    q, k, v = (_heads(b, p, [1, 1, heads, d]) for p in parts)
    cache = []
    for kind, new in (("key", k), ("value", v)):
        present = f"present.{layer}.{kind}"
        b.nodes.append(
            helper.make_node(
                "Concat", [f"past_key_values.{layer}.{kind}", new], [present], name=present, axis=2
            )
        )
        cache.append(present)
    ctx = _merge(b, _attend(b, q, cache[0], cache[1], d, mask), [1, 1, e])
    x = b.node("Add", [x, b.linear(ctx, e, e)])
    ff = b.linear(_gelu_tanh(b, b.linear(_layer_norm(b, x, e), e, 4 * e)), 4 * e, e)
    return b.node("Add", [x, ff])


def gpt2_decode_sized(
    rng: np.random.Generator,
    layers: int = 12,
    hidden: int = 768,
    heads: int = 12,
    vocab: int = 50257,
    positions: int = 2048,
    past: int = 128,
) -> tuple[Any, dict]:
    """A GPT-2-small-style decode step: one new token id and the past keys and values of
    every layer (``[1, heads, past_sequence_length, head size]``, a symbolic dim) in; the
    next token's logits and the ``present`` keys and values (the past with the new token
    appended) out. Logits use the tied token embedding. ``positions`` bounds the cache
    (2,048 here, so a past of 1,024 fits); ``past`` sizes the sample inputs."""
    b = _Builder(rng)
    d = hidden // heads
    wte = rng.standard_normal((vocab, hidden), dtype=np.float32) * np.float32(0.02)
    wpe = rng.standard_normal((positions, hidden), dtype=np.float32) * np.float32(0.01)
    mask, position_ids = _causal_mask(b, "past_key_values.0.key", positions)
    x = b.node(
        "Add",
        [
            b.node("Gather", [b.const(wte, "wte"), "input_ids"], axis=0),
            b.node("Gather", [b.const(wpe, "wpe"), position_ids], axis=0),
        ],
    )
    for layer in range(layers):
        x = _decoder_block(b, x, layer, mask, hidden, heads)
    logits = b.node("MatMul", [_layer_norm(b, x, hidden), b.const(wte.T.copy(), "lm_head")])
    inputs = {"input_ids": rng.integers(0, vocab, (1, 1)).astype("int64")}
    for layer in range(layers):
        for kind in ("key", "value"):
            cache = rng.standard_normal((1, heads, past, d), dtype=np.float32)
            inputs[f"past_key_values.{layer}.{kind}"] = cache
    outputs = [logits, *(f"present.{i}.{k}" for i in range(layers) for k in ("key", "value"))]
    model = build_model(b.nodes, inputs, outputs, b.weights)
    _symbolic_sequence(model)
    return model, inputs


def _symbolic_sequence(model: Any) -> None:
    """Name the cache's sequence dim as Hugging Face's exporter does, in and out."""
    for vi in model.graph.input:
        if vi.name.startswith("past_key_values."):
            vi.type.tensor_type.shape.dim[2].dim_param = PAST
    for vi in model.graph.output:
        if vi.name.startswith("present."):
            vi.type.tensor_type.shape.dim[2].dim_param = f"{PAST} + 1"


def decode_inputs(model_inputs: dict, past: int, rng: np.random.Generator) -> dict:
    """Sample inputs like ``model_inputs`` with a cache of ``past`` positions."""
    out = {}
    for name, value in model_inputs.items():
        shape = list(value.shape)
        if name.startswith("past_key_values."):
            shape[2] = past
            out[name] = rng.standard_normal(shape, dtype=np.float32)
        else:
            out[name] = value
    return out


def gpt2_decode(
    rng: np.random.Generator, quick: bool = False, past: int | None = None, layers: int = 12
) -> tuple[Any, dict]:
    """GPT-2 small (``layers`` of hidden 768, 12 heads, vocabulary 50,257) as a decode step
    with a cache of ``past`` positions, 128 by default (quick: 2 layers, hidden 32, 2
    heads, vocabulary 64, 5 past positions)."""
    if quick:  # the mask bounds the cache: room for twice the sample length
        past = past or 5
        return gpt2_decode_sized(rng, 2, 32, 2, vocab=64, positions=max(32, 2 * past), past=past)
    return gpt2_decode_sized(rng, layers, past=past or 128)


BUILDERS = {"bert_base": bert_base, "vit": vit, "gpt2_decode": gpt2_decode}
"""This module's models by name, each ``builder(rng, quick) -> (model, inputs)``."""
