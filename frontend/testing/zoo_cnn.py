"""More CNNs as exporters write them, with seeded random weights: ResNet-50, SqueezeNet 1.1
and ShuffleNet v2, built with onnx.helper.

The layer structure and operator patterns are torchvision's (bottleneck blocks with the
stride on the 3x3 conv; fire modules whose two expand branches meet in a Concat, max
pools with ``ceil_mode``; ShuffleNet v2's channel split as a ``Split``, its channel
shuffle as Reshape-Transpose-Reshape, depthwise 3x3 convs); weights are random, scaled
so activations keep their range. Each builder has the catalog's signature
``builder(rng, quick) -> (model, inputs)``: ``quick`` keeps every block and operator but
shrinks the image and the channel widths so that a test compiles it in about a second.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ember.frontend.testing.models import build_model
from ember.frontend.testing.zoo import _Builder


def _head(b: _Builder, x: str, cin: int, classes: int) -> str:
    """Global average pool, Flatten and the classifier Gemm."""
    x = b.node("Flatten", [b.node("GlobalAveragePool", [x])], axis=1)
    w = (b.rng.standard_normal((classes, cin)) / np.sqrt(cin)).astype("float32")
    bias = (b.rng.standard_normal(classes) * 0.02).astype("float32")
    return b.node("Gemm", [x, b.const(w, "fc"), b.const(bias, "fb")], transB=1)


def _finish(b: _Builder, out: str, batch: int, size: int) -> tuple[Any, dict]:
    inp = b.rng.standard_normal((batch, 3, size, size)).astype("float32")
    return build_model(b.nodes, {"input": inp}, [out], b.weights), {"input": inp}


def resnet50_sized(
    rng: np.random.Generator,
    batch: int = 1,
    size: int = 224,
    width: int = 64,
    blocks: tuple[int, ...] = (3, 4, 6, 3),
    classes: int = 1000,
) -> tuple[Any, dict]:
    """torchvision's ResNet-50 (v1.5: the stride on each stage's first 3x3 conv); ``width``
    is the stem's channels (64), each stage's bottleneck is ``width * 2**stage`` wide and
    four times that out."""
    b = _Builder(rng)
    x = b.node("Relu", [b.conv_bn("input", 3, width, 7, stride=2)])
    x = b.node("MaxPool", [x], kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1])
    cin = width
    for stage, n in enumerate(blocks):
        mid = width * 2**stage
        cout = 4 * mid
        for block in range(n):
            stride = 2 if stage > 0 and block == 0 else 1
            y = b.node("Relu", [b.conv_bn(x, cin, mid, 1)])
            y = b.node("Relu", [b.conv_bn(y, mid, mid, 3, stride)])
            y = b.conv_bn(y, mid, cout, 1)
            skip = b.conv_bn(x, cin, cout, 1, stride) if block == 0 else x
            x = b.node("Relu", [b.node("Add", [y, skip])])
            cin = cout
    return _finish(b, _head(b, x, cin, classes), batch, size)


def resnet50(rng: np.random.Generator, quick: bool = False) -> tuple[Any, dict]:
    """ResNet-50 at 224x224 (quick: 19x19, width 4, two stages of one block, 10 classes)."""
    if quick:
        return resnet50_sized(rng, 1, 19, width=4, blocks=(1, 1), classes=10)
    return resnet50_sized(rng)


def _conv_relu(b: _Builder, x: str, cin: int, cout: int, k: int, stride: int = 1) -> str:
    """Conv with bias and ReLU, no batch norm (SqueezeNet's layers)."""
    w = b.rng.standard_normal((cout, cin, k, k)) * np.sqrt(2.0 / (cin * k * k))
    bias = b.rng.standard_normal(cout) * 0.05
    p = k // 2 if stride == 1 else 0
    c = b.node(
        "Conv",
        [x, b.const(w.astype("float32"), "w"), b.const(bias.astype("float32"), "b")],
        kernel_shape=[k, k],
        strides=[stride, stride],
        pads=[p, p, p, p],
    )
    return b.node("Relu", [c])


def _fire(b: _Builder, x: str, cin: int, squeeze: int, expand: int) -> str:
    s = _conv_relu(b, x, cin, squeeze, 1)
    branches = [_conv_relu(b, s, squeeze, expand, k) for k in (1, 3)]
    return b.node("Concat", branches, axis=1)


FIRES_1_1 = ((16, 64), (16, 64), None, (32, 128), (32, 128), None, (48, 192), (48, 192),
             (64, 256), (64, 256))  # fmt: skip
"""SqueezeNet 1.1's fire modules as (squeeze, expand) channels; None is a max pool."""


def squeezenet_sized(
    rng: np.random.Generator,
    batch: int = 1,
    size: int = 224,
    scale: int = 1,
    classes: int = 1000,
    fires: tuple[tuple[int, int] | None, ...] = FIRES_1_1,
) -> tuple[Any, dict]:
    """torchvision's SqueezeNet 1.1: fire modules (squeeze 1x1, expand 1x1 and 3x3
    concatenated), ceil-mode max pools, a 1x1 conv classifier; channels divided by
    ``scale``."""
    b = _Builder(rng)

    def pool(x: str) -> str:
        return b.node("MaxPool", [x], kernel_shape=[3, 3], strides=[2, 2], ceil_mode=1)

    x = pool(_conv_relu(b, "input", 3, 64 // scale, 3, stride=2))
    cin = 64 // scale
    for fire in fires:
        if fire is None:
            x = pool(x)
            continue
        squeeze, expand = fire[0] // scale, fire[1] // scale
        x, cin = _fire(b, x, cin, squeeze, expand), 2 * expand
    x = b.node("Dropout", [x])  # an identity at inference, as exported
    x = _conv_relu(b, x, cin, classes, 1)
    out = b.node("Flatten", [b.node("GlobalAveragePool", [x])], axis=1)
    return _finish(b, out, batch, size)


def squeezenet(rng: np.random.Generator, quick: bool = False) -> tuple[Any, dict]:
    """SqueezeNet 1.1 at 224x224 (quick: 23x23, channels / 8, one fire, 10 classes)."""
    if quick:
        return squeezenet_sized(rng, 1, 23, 8, 10, fires=((16, 64), None))
    return squeezenet_sized(rng)


def _shuffle(b: _Builder, x: str, batch: int, c: int, hw: int) -> str:
    """Channel shuffle of two groups as torchvision exports it: Reshape-Transpose-Reshape."""
    grouped = b.const(np.array([batch, 2, c // 2, hw, hw], "int64"), "shape")
    y = b.node("Transpose", [b.node("Reshape", [x, grouped])], perm=[0, 2, 1, 3, 4])
    return b.node("Reshape", [y, b.const(np.array([batch, c, hw, hw], "int64"), "shape")])


def _branch(b: _Builder, x: str, cin: int, c: int, stride: int) -> str:
    """1x1 conv-BN-ReLU, depthwise 3x3 conv-BN, 1x1 conv-BN-ReLU."""
    y = b.node("Relu", [b.conv_bn(x, cin, c, 1)])
    y = b.conv_bn(y, c, c, 3, stride, groups=c)
    return b.node("Relu", [b.conv_bn(y, c, c, 1)])


def shufflenet_v2_sized(
    rng: np.random.Generator,
    batch: int = 1,
    size: int = 224,
    widths: tuple[int, ...] = (24, 116, 232, 464, 1024),
    repeats: tuple[int, ...] = (4, 8, 4),
    classes: int = 1000,
) -> tuple[Any, dict]:
    """torchvision's ShuffleNet v2 (x1.0 widths by default): stride-2 units with two
    branches, stride-1 units splitting the channels in halves, a shuffle after each."""
    b = _Builder(rng)
    x = b.node("Relu", [b.conv_bn("input", 3, widths[0], 3, stride=2)])
    x = b.node("MaxPool", [x], kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1])
    cin, hw = widths[0], ((size + 1) // 2 + 1) // 2  # after the stem conv and pool
    for cout, n in zip(widths[1:], repeats):
        half = cout // 2
        for unit in range(n):
            if unit == 0:
                left = b.conv_bn(x, cin, cin, 3, 2, groups=cin)
                left = b.node("Relu", [b.conv_bn(left, cin, half, 1)])
                right = _branch(b, x, cin, half, 2)
                hw = (hw + 1) // 2
            else:
                sizes = b.const(np.array([half, half], "int64"), "split")
                b.nodes.append(_split(b, x, sizes))
                left, rest = b.nodes[-1].output
                right = _branch(b, rest, half, half, 1)
            x = _shuffle(b, b.node("Concat", [left, right], axis=1), batch, cout, hw)
            cin = cout
    x = b.node("Relu", [b.conv_bn(x, cin, widths[-1], 1)])
    return _finish(b, _head(b, x, widths[-1], classes), batch, size)


def _split(b: _Builder, x: str, sizes: str) -> Any:
    """``torch.chunk(x, 2, dim=1)`` as exported: a Split with its sizes as an input."""
    # optional dependency: onnx
    from onnx import helper

    name = b.name("split")
    return helper.make_node("Split", [x, sizes], [f"{name}_a", f"{name}_b"], name=name, axis=1)


def shufflenet_v2(rng: np.random.Generator, quick: bool = False) -> tuple[Any, dict]:
    """ShuffleNet v2 x1.0 at 224x224 (quick: 19x19, narrow, one stage of two units)."""
    if quick:
        return shufflenet_v2_sized(rng, 1, 19, (8, 16, 32), (2,), classes=10)
    return shufflenet_v2_sized(rng)


BUILDERS = {"resnet50": resnet50, "squeezenet": squeezenet, "shufflenet_v2": shufflenet_v2}
"""This module's models by name, each ``builder(rng, quick) -> (model, inputs)``."""
