"""Real architectures as exporters write them, with seeded random weights: ResNet-18,
MobileNetV2 and a BERT-style encoder, built with onnx.helper.

No weights are downloaded: the layers, shapes and operator patterns are those of the
published models (torchvision's ResNet-18 and MobileNetV2, BERT-base's encoder
layer with fewer and narrower layers), the numbers are random but scaled so that
activations stay in a sane range through every layer. Each builder returns
``(model, inputs)`` like ``frontend/testing/models.py``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from ember.errors import ArgumentError
from ember.frontend.testing.models import build_model


class _Builder:
    """Accumulates nodes and initializers with unique names."""

    def __init__(self, rng: np.random.Generator) -> None:
        self.rng, self.k = rng, 0
        self.nodes: list[Any] = []  # onnx NodeProtos (onnx is optional)
        self.weights: dict[str, np.ndarray] = {}

    def name(self, base: str) -> str:
        self.k += 1
        return f"{base}_{self.k}"

    def const(self, array: np.ndarray, base: str = "c") -> str:
        n = self.name(base)
        self.weights[n] = np.ascontiguousarray(array)
        return n

    def node(self, op: str, inputs: list[str], **attrs: Any) -> str:
        # optional dependency: onnx
        from onnx import helper

        out = self.name(op.lower())
        self.nodes.append(helper.make_node(op, inputs, [out], name=out, **attrs))
        return out

    def conv_bn(self, x: str, cin: int, cout: int, k: int, stride: int = 1, groups: int = 1) -> str:
        fan_in = cin // groups * k * k
        w = self.rng.standard_normal((cout, cin // groups, k, k)) * np.sqrt(2.0 / fan_in)
        p = k // 2
        c = self.node(
            "Conv",
            [x, self.const(w.astype("float32"), "w")],
            kernel_shape=[k, k],
            strides=[stride, stride],
            pads=[p, p, p, p],
            group=groups,
        )
        stats = [
            self.rng.uniform(0.5, 1.0, cout),  # gamma
            self.rng.standard_normal(cout) * 0.1,  # beta
            self.rng.standard_normal(cout) * 0.1,  # running mean
            self.rng.uniform(0.5, 1.5, cout),  # running var
        ]
        names = [self.const(s.astype("float32"), "bn") for s in stats]
        return self.node("BatchNormalization", [c, *names], epsilon=1e-5)

    def linear(self, x: str, cin: int, cout: int) -> str:
        w = self.rng.standard_normal((cin, cout)) / np.sqrt(cin)
        b = self.rng.standard_normal(cout) * 0.02
        m = self.node("MatMul", [x, self.const(w.astype("float32"), "w")])
        return self.node("Add", [m, self.const(b.astype("float32"), "b")])


def resnet18(rng: np.random.Generator, batch: int = 1, size: int = 224) -> tuple[Any, dict]:
    """torchvision's ResNet-18: 7x7 stem, four stages of two basic blocks, 1000 classes."""
    b = _Builder(rng)
    x = b.node("Relu", [b.conv_bn("input", 3, 64, 7, stride=2)])
    x = b.node("MaxPool", [x], kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1])
    cin = 64
    for stage, cout in enumerate((64, 128, 256, 512)):
        for block in range(2):
            stride = 2 if stage > 0 and block == 0 else 1
            y = b.node("Relu", [b.conv_bn(x, cin, cout, 3, stride)])
            y = b.conv_bn(y, cout, cout, 3)
            skip = b.conv_bn(x, cin, cout, 1, stride) if stride != 1 or cin != cout else x
            x = b.node("Relu", [b.node("Add", [y, skip])])
            cin = cout
    x = b.node("Flatten", [b.node("GlobalAveragePool", [x])], axis=1)
    w = (rng.standard_normal((1000, 512)) / np.sqrt(512)).astype("float32")
    logits = b.node(
        "Gemm", [x, b.const(w, "fc"), b.const(np.zeros(1000, "float32"), "fb")], transB=1
    )
    inp = rng.standard_normal((batch, 3, size, size)).astype("float32")
    return build_model(b.nodes, {"input": inp}, [logits], b.weights), {"input": inp}


def _relu6(b: _Builder, x: str) -> str:
    return b.node(
        "Clip", [x, b.const(np.array(0, "float32"), "lo"), b.const(np.array(6, "float32"), "hi")]
    )


def mobilenet_v2(rng: np.random.Generator, batch: int = 1, size: int = 224) -> tuple[Any, dict]:
    """torchvision's MobileNetV2 (width 1.0): inverted residual blocks with depthwise convs
    and ReLU6 (Clip), 1000 classes."""
    b = _Builder(rng)
    x = _relu6(b, b.conv_bn("input", 3, 32, 3, stride=2))
    cin = 32
    settings = [
        (1, 16, 1, 1),
        (6, 24, 2, 2),
        (6, 32, 3, 2),
        (6, 64, 4, 2),
        (6, 96, 3, 1),
        (6, 160, 3, 2),
        (6, 320, 1, 1),
    ]
    for t, c, n, s in settings:
        for i in range(n):
            stride = s if i == 0 else 1
            hidden = cin * t
            y = _relu6(b, b.conv_bn(x, cin, hidden, 1)) if t != 1 else x
            y = _relu6(b, b.conv_bn(y, hidden, hidden, 3, stride, groups=hidden))
            y = b.conv_bn(y, hidden, c, 1)
            x = b.node("Add", [x, y]) if stride == 1 and cin == c else y
            cin = c
    x = _relu6(b, b.conv_bn(x, cin, 1280, 1))
    x = b.node("Flatten", [b.node("GlobalAveragePool", [x])], axis=1)
    w = (rng.standard_normal((1000, 1280)) / np.sqrt(1280)).astype("float32")
    logits = b.node(
        "Gemm", [x, b.const(w, "fc"), b.const(np.zeros(1000, "float32"), "fb")], transB=1
    )
    inp = rng.standard_normal((batch, 3, size, size)).astype("float32")
    return build_model(b.nodes, {"input": inp}, [logits], b.weights), {"input": inp}


def _layer_norm(b: _Builder, x: str, e: int) -> str:
    g = b.const(b.rng.uniform(0.8, 1.2, e).astype("float32"), "ln_g")
    beta = b.const((b.rng.standard_normal(e) * 0.05).astype("float32"), "ln_b")
    return b.node("LayerNormalization", [x, g, beta], axis=-1, epsilon=1e-12)


def _gelu_erf(b: _Builder, x: str) -> str:
    """GELU as BERT exporters write it: x * 0.5 * (1 + erf(x / sqrt(2)))."""
    e = b.node("Erf", [b.node("Div", [x, b.const(np.array(np.sqrt(2.0), "float32"))])])
    one = b.node("Add", [e, b.const(np.array(1.0, "float32"))])
    return b.node("Mul", [b.node("Mul", [x, one]), b.const(np.array(0.5, "float32"))])


def _attention(b: _Builder, x: str, batch: int, seq: int, e: int, heads: int) -> str:
    d = e // heads
    split = b.const(np.array([batch, seq, heads, d], "int64"), "shape")
    q, k, v = (
        b.node("Transpose", [b.node("Reshape", [b.linear(x, e, e), split])], perm=perm)
        for perm in ([0, 2, 1, 3], [0, 2, 3, 1], [0, 2, 1, 3])
    )
    scores = b.node("Div", [b.node("MatMul", [q, k]), b.const(np.array(np.sqrt(d), "float32"))])
    ctx = b.node("MatMul", [b.node("Softmax", [scores], axis=-1), v])
    merged = b.node("Transpose", [ctx], perm=[0, 2, 1, 3])
    merged = b.node("Reshape", [merged, b.const(np.array([batch, seq, e], "int64"), "shape")])
    return b.linear(merged, e, e)


def bert_encoder(
    rng: np.random.Generator,
    batch: int = 1,
    seq: int = 128,
    layers: int = 4,
    hidden: int = 256,
    heads: int = 4,
    vocab: int = 1000,
) -> tuple[Any, dict]:
    """A BERT-style encoder (post-norm layers, erf GELU, learned positions) on token ids."""
    b = _Builder(rng)
    tok = b.const((rng.standard_normal((vocab, hidden)) * 0.5).astype("float32"), "tok")
    pos = b.const((rng.standard_normal((seq, hidden)) * 0.1).astype("float32"), "pos")
    x = b.node("Add", [b.node("Gather", [tok, "input_ids"], axis=0), pos])
    x = _layer_norm(b, x, hidden)
    for _ in range(layers):
        x = _layer_norm(b, b.node("Add", [x, _attention(b, x, batch, seq, hidden, heads)]), hidden)
        ff = b.linear(_gelu_erf(b, b.linear(x, hidden, 4 * hidden)), 4 * hidden, hidden)
        x = _layer_norm(b, b.node("Add", [x, ff]), hidden)
    ids = rng.integers(0, vocab, size=(batch, seq)).astype("int64")
    return build_model(b.nodes, {"input_ids": ids}, [x], b.weights), {"input_ids": ids}


MODELS = {"resnet18": resnet18, "mobilenet_v2": mobilenet_v2, "bert_encoder": bert_encoder}


def save(name: str, path: str = "model.onnx", seed: int = 0, **kwargs: Any) -> dict[str, str]:
    """Write the zoo model ``name`` to ``path`` and one sample input per graph input beside
    it (``<input name>.npy``); returns ``{input name: .npy path}``.

    It is the README's one line to a model to try Ember on without a download:
    ``python -c "from ember.frontend.testing import zoo; zoo.save('resnet18')"``.
    """
    # optional dependency: onnx
    import onnx

    if name not in MODELS:
        raise ArgumentError(f"no zoo model {name!r}; choose one of {', '.join(MODELS)}")
    model, inputs = MODELS[name](np.random.default_rng(seed), **kwargs)
    onnx.save(model, path)
    written = {}
    for input_name, value in inputs.items():
        npy = Path(path).parent / f"{input_name}.npy"
        np.save(npy, value)
        written[input_name] = str(npy)
    return written
