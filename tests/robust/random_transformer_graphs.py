"""Random small transformer-style ONNX graphs for differential tests against onnxruntime.

A graph starts from one ``[batch, sequence, hidden]`` input of odd size and grows a chain
of 2-7 blocks, each drawn from :data:`BLOCKS`: linear layers, layer norms written out in
primitives (as exporters before opset 17 write them) or as the op, GELUs in their erf,
tanh and sigmoid forms, scaled dot-product attention with its heads' reshapes and
transposes, residual adds, softmaxes, gathers and slices along the sequence. These are
the chains Ember's rewrites (``fuse_attention``, ``fuse_layer_norm``) match, so each
block is drawn either exactly as exporters write it or as a *near miss* the rewrite must
leave alone: a softmax over another axis, a per-key scale, a mask that grows the scores,
a fourth power instead of a square, means over different axes, an ``eps`` per feature,
an intermediate value that is also a graph output. Every draw comes from one seeded
numpy generator, so a seed names a graph (``tests/robust/random_onnx_graphs.py`` does
the same for convolutional chains, and its :class:`Graph` is reused here).
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
from onnx import ModelProto

from tests.robust.random_onnx_graphs import Graph as _Base


class Graph(_Base):
    """A graph being drawn, and the values a block made graph outputs of its own."""

    def __init__(self, rng: np.random.Generator, symbolic: bool) -> None:
        super().__init__(rng, symbolic)
        self.extra_outputs: list[str] = []

    def batch_dim(self, b: int) -> int:
        """The batch entry of a Reshape's shape: 0 (copy the input's, as exporters often
        write it) where the batch is symbolic, and now and then where it is not."""
        return 0 if self.symbolic or self.rng.random() < 0.3 else b


def _pick(g: Graph, options: list) -> object:
    return options[int(g.rng.integers(0, len(options)))]


def _scalar(g: Graph, value: float) -> str:
    """A constant of one element, as exporters write it: a scalar or a 1-element tensor."""
    return g.const(np.array(value) if g.rng.random() < 0.5 else np.array([value]))


def _linear(g: Graph, t: str) -> str | None:
    b, s, d = g.shapes[t]
    o = int(_pick(g, [d, d, 2 * d, int(g.rng.integers(1, 40))]))
    y = g.node("MatMul", [t, g.randn(d, o, scale=1 / np.sqrt(d))], (b, s, o))
    return g.node("Add", [y, g.randn(o)], (b, s, o)) if g.rng.random() < 0.7 else y


def _layer_norm(g: Graph, t: str) -> str | None:
    """Mean, centre, variance, ``/ sqrt(var + eps)``, gamma, beta as primitives, or an
    RMS norm, or the LayerNormalization op; sometimes a near miss."""
    shape = g.shapes[t]
    d = shape[-1]
    r = g.rng
    if r.random() < 0.2:
        return g.node("LayerNormalization", [t, g.randn(d), g.randn(d)], shape, axis=-1)
    miss = str(_pick(g, ["none"] * 4 + ["fourth", "axes", "eps_vector"]))
    axes = g.const(np.array([-1]))
    rms = r.random() < 0.25
    if rms:
        centred = t
    else:
        mean = g.node("ReduceMean", [t, axes], (*shape[:-1], 1), keepdims=1)
        centred = g.node("Sub", [t, mean], shape)
    if miss == "fourth":
        sq = g.node("Pow", [centred, g.const(np.array(4.0))], shape)
    elif r.random() < 0.5:
        sq = g.node("Pow", [centred, g.const(np.array(2.0))], shape)
    else:
        sq = g.node("Mul", [centred, centred], shape)
    if miss == "axes" and shape[1] > 1:
        var = g.node("ReduceMean", [sq, g.const(np.array([1]))], (shape[0], 1, d), keepdims=1)
    else:
        var = g.node("ReduceMean", [sq, axes], (*shape[:-1], 1), keepdims=1)
    var_shape = g.shapes[var]
    eps = g.const(np.full(d, 1e-5)) if miss == "eps_vector" else _scalar(g, 1e-5)
    eps_shape = (*var_shape[:-1], d) if miss == "eps_vector" else var_shape
    std = g.node("Sqrt", [g.node("Add", [var, eps], eps_shape)], eps_shape)
    out_shape = tuple(max(a, b) for a, b in zip(shape, eps_shape))
    if r.random() < 0.5:
        y = g.node("Div", [centred, std], out_shape)
    else:
        y = g.node("Mul", [centred, g.node("Reciprocal", [std], eps_shape)], out_shape)
    if r.random() < 0.8:
        y = g.node("Mul", [y, g.randn(d)], out_shape)
        if r.random() < 0.8:
            y = g.node("Add", [y, g.randn(d)], out_shape)
    return y


def _gelu(g: Graph, t: str) -> str | None:
    shape = g.shapes[t]
    kind = int(g.rng.integers(0, 3))
    if kind == 0:  # 0.5 x (1 + erf(x / sqrt 2))
        scaled = g.node("Div", [t, _scalar(g, float(np.sqrt(2.0)))], shape)
        one = g.node("Add", [g.node("Erf", [scaled], shape), _scalar(g, 1.0)], shape)
        return g.node("Mul", [g.node("Mul", [t, one], shape), _scalar(g, 0.5)], shape)
    if kind == 1:  # 0.5 x (1 + tanh(sqrt(2 / pi) (x + 0.044715 x^3)))
        cube = g.node("Pow", [t, _scalar(g, 3.0)], shape)
        inner = g.node("Add", [t, g.node("Mul", [cube, _scalar(g, 0.044715)], shape)], shape)
        k = float(np.sqrt(2 / np.pi))
        th = g.node("Tanh", [g.node("Mul", [inner, _scalar(g, k)], shape)], shape)
        half = g.node("Mul", [t, _scalar(g, 0.5)], shape)
        return g.node("Mul", [half, g.node("Add", [th, _scalar(g, 1.0)], shape)], shape)
    gate = g.node("Sigmoid", [g.node("Mul", [t, _scalar(g, 1.702)], shape)], shape)
    return g.node("Mul", [t, gate], shape)


def _heads(g: Graph, t: str, h: int, kt: bool) -> str:
    """``[b, s, h·e]`` → ``[b, h, s, e]`` (or, with ``kt``, ``[b, h, e, s]``)."""
    b, s, d = g.shapes[t]
    e = d // h
    split = g.node("Reshape", [t, g.const(np.array([g.batch_dim(b), s, h, e]))], (b, s, h, e))
    if kt:
        return g.node("Transpose", [split], (b, h, e, s), perm=[0, 2, 3, 1])
    return g.node("Transpose", [split], (b, h, s, e), perm=[0, 2, 1, 3])


def _attention(g: Graph, t: str) -> str | None:
    """Q, K and V projected from ``t`` and split into heads, ``softmax(QKᵀ·c + mask) V``
    merged back: exactly as exporters write it, or a near miss."""
    b, s, d = g.shapes[t]
    r = g.rng
    h = int(_pick(g, [k for k in (1, 2, 3, 4) if d % k == 0]))
    e = d // h
    miss = str(_pick(g, ["none"] * 5 + ["softmax_axis", "key_scale", "big_mask", "output"]))
    project = [g.node("MatMul", [t, g.randn(d, d, scale=1 / np.sqrt(d))], (b, s, d)) for _ in "qkv"]
    q = _heads(g, project[0], h, False)
    k_given_t = r.random() < 0.5
    k = _heads(g, project[1], h, k_given_t)
    if not k_given_t:
        k = g.node("Transpose", [k], (b, h, e, s), perm=[0, 1, 3, 2])
    v = _heads(g, project[2], h, False)
    scores = g.node("MatMul", [q, k], (b, h, s, s))
    shape = (b, h, s, s)
    scale = float(1 / np.sqrt(e))
    form = str(_pick(g, ["div", "mul", "mul_left", "none"]))
    if miss == "key_scale":
        scores = g.node("Mul", [scores, g.const(r.uniform(0.1, 0.5, (1, 1, 1, s)))], shape)
    elif form == "div":
        scores = g.node("Div", [scores, _scalar(g, float(np.sqrt(e)))], shape)
    elif form == "mul":
        scores = g.node("Mul", [scores, _scalar(g, scale)], shape)
    elif form == "mul_left":
        scores = g.node("Mul", [_scalar(g, scale), scores], shape)
    if miss == "big_mask" and not g.symbolic:  # a batch of 2 where the scores have 1
        shape = (2 if b == 1 else b, h, s, s)
        scores = g.node("Add", [scores, g.randn(*shape)], shape)
    elif r.random() < 0.6:
        mb = 1 if g.symbolic else b
        mshape = _pick(g, [(mb, 1, 1, s), (1, 1, s, s), (s,), (mb, h, s, s), (1, s)])
        mask = g.const(np.where(r.random(mshape) < 0.2, -1e4, 0.0))
        scores = g.node("Add", [scores, mask] if r.random() < 0.7 else [mask, scores], shape)
    if miss == "output":
        g.extra_outputs.append(scores)
    axis = -2 if miss == "softmax_axis" else int(_pick(g, [-1, 3]))
    probs = g.node("Softmax", [scores], shape, axis=axis)
    out = g.node("MatMul", [probs, v], (shape[0], h, s, e))
    merged = g.node("Transpose", [out], (shape[0], s, h, e), perm=[0, 2, 1, 3])
    back = g.const(np.array([g.batch_dim(shape[0]), s, d]))
    return g.node("Reshape", [merged, back], (shape[0], s, d))


def _residual(g: Graph, t: str) -> str | None:
    others = [u for u, s in g.shapes.items() if s == g.shapes[t] and u != t]
    if not others:
        return None
    return g.node("Add", [t, str(_pick(g, others))], g.shapes[t])


def _softmax(g: Graph, t: str) -> str | None:
    return g.node("Softmax", [t], g.shapes[t], axis=int(_pick(g, [-1, 1, 2, -2])))


def _gather(g: Graph, t: str) -> str | None:
    """Rows of the sequence by constant indices (negative ones count from the end)."""
    b, s, d = g.shapes[t]
    idx = g.rng.integers(-s, s, size=int(g.rng.integers(1, 5)))
    return g.node("Gather", [t, g.const(idx)], (b, len(idx), d), axis=1)


def _slice(g: Graph, t: str) -> str | None:
    b, s, d = g.shapes[t]
    if d < 2:
        return None
    lo = int(g.rng.integers(0, d - 1))
    hi = int(g.rng.integers(lo + 1, d + 1))
    bounds = [g.const(np.array([lo])), g.const(np.array([hi])), g.const(np.array([-1]))]
    return g.node("Slice", [t, *bounds], (b, s, hi - lo))


def _swap(g: Graph, t: str) -> str | None:
    b, s, d = g.shapes[t]
    return g.node("Transpose", [t], (b, d, s), perm=[0, 2, 1])


def _concat(g: Graph, t: str) -> str | None:
    b, s, d = g.shapes[t]
    others = [u for u, sh in g.shapes.items() if len(sh) == 3 and sh[0] == b and sh[1] == s]
    u = str(_pick(g, others))
    return g.node("Concat", [t, u], (b, s, d + g.shapes[u][2]), axis=-1)


def _unary(op: str) -> Callable[[Graph, str], str | None]:
    return lambda g, t: g.node(op, [t], g.shapes[t])


BLOCKS: list[Callable[[Graph, str], str | None]] = [
    _linear, _linear, _layer_norm, _layer_norm, _gelu, _attention, _attention, _residual,
    _softmax, _gather, _slice, _swap, _concat, _unary("Relu"), _unary("Tanh"),
]  # fmt: skip


def random_transformer(
    seed: int, symbolic: bool = False
) -> tuple[ModelProto, dict[str, np.ndarray]]:
    """Graph number ``seed`` and a random input for it; with ``symbolic``, one whose
    blocks hold for any batch size (the caller names the batch dim a symbol)."""
    rng = np.random.default_rng(seed)
    g = Graph(rng, symbolic)
    shape = (int(rng.choice([1, 1, 2])), int(rng.integers(1, 14)), int(rng.integers(1, 25)))
    g.shapes["x"] = shape
    t, outputs = g.grow(int(rng.integers(2, 8)), lambda t: BLOCKS)
    return g.model(f"transformer{seed}", t, outputs + g.extra_outputs)
