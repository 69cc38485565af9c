"""Random small ONNX graphs for differential tests against onnxruntime.

A graph starts from one NCHW input of odd size and grows a chain of 2-8 ops, each drawn
from :data:`OPS_4D` (or :data:`OPS_2D` once the value is flattened), reading the newest
value and sometimes an older one (residual adds, channel concats); some intermediate
values are outputs too. The ops are the ones fusion, the layout passes and the memory plan
treat specially: convolutions (1x1, 3x3, 5x5, depthwise, strided, asymmetric pads, with
and without bias), elementwise chains that read a value twice (SiLU, GELU, HardSwish,
``max(x, -x)``), broadcasts, pools, reductions, concat, split, slice, pad, transpose,
reshape, resize, normalizations and GEMMs. Every draw comes from one seeded numpy
generator, so a seed names a graph. A generator is a test of its own kind: it found that
a chain of ops that read a value twice compiled in time exponential in its length
(``tests/robust/test_shared_expressions.py``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
from onnx import ModelProto, TensorProto, helper, numpy_helper

Shape = tuple[int, ...]
Op = Callable[["Graph", str], "str | None"]  # an op drawn onto a value: the new value


class Graph:
    """The nodes, initializers and value shapes of a graph being drawn. ``symbolic``: the
    batch will be a symbol, so no op may depend on its size."""

    def __init__(self, rng: np.random.Generator, symbolic: bool = False) -> None:
        self.rng = rng
        self.symbolic = symbolic
        self.nodes: list[Any] = []
        self.inits: list[Any] = []
        self.shapes: dict[str, Shape] = {}  # float values an op may read
        self.count = 0

    def fresh(self, prefix: str) -> str:
        self.count += 1
        return f"{prefix}{self.count}"

    def const(self, array: np.ndarray) -> str:
        name = self.fresh("c")
        if array.dtype.kind == "f":
            array = array.astype(np.float32)
        self.inits.append(numpy_helper.from_array(array, name))
        return name

    def node(self, op: str, inputs: list[str], shape: Shape, **attrs: Any) -> str:
        out = self.fresh(op.lower())
        self.nodes.append(helper.make_node(op, inputs, [out], **attrs))
        self.shapes[out] = tuple(shape)
        return out

    def hidden(self, op: str, inputs: list[str], shape: Shape, **attrs: Any) -> str:
        """A value no later op may pick (an int or bool between two float ops)."""
        out = self.node(op, inputs, shape, **attrs)
        del self.shapes[out]
        return out

    def randn(self, *shape: int, scale: float = 1.0) -> str:
        return self.const(self.rng.standard_normal(shape) * scale)

    def grow(
        self, steps: int, ops_for: Callable[[str], list[Op]], limit: int | None = None
    ) -> tuple[str, list[str]]:
        """Draws ``steps`` ops onto input ``x``, each from ``ops_for(the newest value)`` and
        reading it (an op that does not apply is skipped; past ``limit`` elements the chain
        stops): the last value, and the intermediate values that are outputs too."""
        t, outputs = "x", []
        for _ in range(steps):
            ops = ops_for(t)
            new = ops[int(self.rng.integers(0, len(ops)))](self, t)
            if new is None:
                continue
            if self.rng.random() < 0.2:
                outputs.append(t)  # an intermediate value is an output too
            t = new
            if limit is not None and np.prod(self.shapes[t]) > limit:
                break
        return t, outputs

    def model(
        self, name: str, last: str, outputs: list[str]
    ) -> tuple[ModelProto, dict[str, np.ndarray]]:
        """The graph drawn from input ``x``, with ``last`` and ``outputs`` (intermediate
        values) as its outputs, and a random input for it."""
        shape = self.shapes["x"]
        if last == "x":
            last = self.node("Relu", ["x"], shape)
        names = list(dict.fromkeys([o for o in outputs if o not in ("x", last)] + [last]))
        x = helper.make_tensor_value_info("x", TensorProto.FLOAT, list(shape))
        ys = [
            helper.make_tensor_value_info(o, TensorProto.FLOAT, list(self.shapes[o])) for o in names
        ]
        graph = helper.make_graph(self.nodes, name, [x], ys, self.inits)
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
        model.ir_version = 8
        return model, {"x": self.rng.standard_normal(shape).astype(np.float32)}


def _window(size: int, k: int, stride: int, before: int, after: int) -> int:
    return (size + before + after - k) // stride + 1


# -- ops on an NCHW value: each returns the new value, or None where it does not apply --


def _conv(g: Graph, t: str) -> str | None:
    n, c, h, w = g.shapes[t]
    r = g.rng
    k, s, o = int(r.choice([1, 1, 3, 3, 5])), int(r.choice([1, 1, 2])), int(r.integers(1, 40))
    pads = [int(r.integers(0, k)) for _ in range(4)] if r.random() < 0.7 else [0] * 4
    oh, ow = _window(h, k, s, pads[0], pads[2]), _window(w, k, s, pads[1], pads[3])
    if oh < 1 or ow < 1:
        return None
    inputs = [t, g.randn(o, c, k, k, scale=1 / np.sqrt(c * k * k))]
    inputs += [g.randn(o)] if r.random() < 0.6 else []
    return g.node("Conv", inputs, (n, o, oh, ow), kernel_shape=[k, k], strides=[s, s], pads=pads)


def _depthwise(g: Graph, t: str) -> str | None:
    n, c, h, w = g.shapes[t]
    s = int(g.rng.choice([1, 2]))
    shape = (n, c, _window(h, 3, s, 1, 1), _window(w, 3, s, 1, 1))
    inputs = [t, g.randn(c, 1, 3, 3, scale=1 / 3), g.randn(c)]
    return g.node("Conv", inputs, shape, kernel_shape=[3, 3], strides=[s, s], pads=[1] * 4, group=c)


def _conv_transpose(g: Graph, t: str) -> str | None:
    n, c, h, w = g.shapes[t]
    r = g.rng
    k, s, o = int(r.choice([2, 3])), int(r.choice([1, 2])), int(r.integers(1, 12))
    p = int(r.integers(0, k))
    oh, ow = (h - 1) * s - 2 * p + k, (w - 1) * s - 2 * p + k
    if oh < 1 or ow < 1:
        return None
    weights = g.randn(c, o, k, k, scale=1 / np.sqrt(c * k))
    attrs = {"kernel_shape": [k, k], "strides": [s, s], "pads": [p] * 4}
    return g.node("ConvTranspose", [t, weights], (n, o, oh, ow), **attrs)


def _pool(g: Graph, t: str) -> str | None:
    n, c, h, w = g.shapes[t]
    r = g.rng
    kind = str(r.choice(["MaxPool", "AveragePool"]))
    k, s = int(r.choice([2, 3])), int(r.choice([1, 2]))
    p = int(r.integers(0, k // 2 + 1))
    oh, ow = _window(h, k, s, p, p), _window(w, k, s, p, p)
    if oh < 1 or ow < 1:
        return None
    extra = {"count_include_pad": int(r.integers(0, 2))} if kind == "AveragePool" else {}
    attrs = {"kernel_shape": [k, k], "strides": [s, s], "pads": [p] * 4, **extra}
    return g.node(kind, [t], (n, c, oh, ow), **attrs)


def _unary(op: str, **attrs: Any) -> Callable[[Graph, str], str | None]:
    return lambda g, t: g.node(op, [t], g.shapes[t], **attrs)


def _sqrt_abs(g: Graph, t: str) -> str | None:
    """``sqrt(|x|)``: no NaN (whose spread runtimes implement differently: onnxruntime's
    LRN carries one along its running window sum past the channels the window holds)."""
    return g.node("Sqrt", [g.node("Abs", [t], g.shapes[t])], g.shapes[t])


def _clip(g: Graph, t: str) -> str | None:
    bounds = [g.const(np.array(0.0)), g.const(np.array(6.0))]
    return g.node("Clip", [t, *bounds], g.shapes[t])


def _add_broadcast(g: Graph, t: str) -> str | None:
    _, c, h, w = g.shapes[t]
    shapes = [(1, c, 1, 1), (c, 1, 1), (1,), (1, 1, h, w), (w,)]
    other = shapes[int(g.rng.integers(0, len(shapes)))]
    return g.node("Add", [t, g.randn(*other)], g.shapes[t])


def _scale(g: Graph, t: str) -> str | None:
    c = g.shapes[t][1]
    if g.rng.random() < 0.5:
        return g.node("Mul", [t, g.randn(1, c, 1, 1)], g.shapes[t])
    return g.node("Div", [t, g.const(g.rng.uniform(0.5, 2.0, (c, 1, 1)))], g.shapes[t])


def _read_twice(g: Graph, t: str) -> str | None:
    """SiLU, HardSwish, GELU or ``max(x, -x)``: elementwise ops that read ``t`` twice."""
    shape = g.shapes[t]
    kind = int(g.rng.integers(0, 4))
    if kind == 0:
        return g.node("Mul", [t, g.node("Sigmoid", [t], shape)], shape)
    if kind == 1:
        gate = g.node("HardSigmoid", [t], shape, alpha=1 / 6, beta=0.5)
        return g.node("Mul", [t, gate], shape)
    if kind == 2:
        erf = g.node("Erf", [g.node("Mul", [t, g.const(np.array(0.7071))], shape)], shape)
        half = g.node("Add", [erf, g.const(np.array(1.0))], shape)
        return g.node("Mul", [g.node("Mul", [t, half], shape), g.const(np.array(0.5))], shape)
    return g.node("Max", [t, g.node("Neg", [t], shape)], shape)


def _where(g: Graph, t: str) -> str | None:
    shape = g.shapes[t]
    cond = g.hidden("Greater", [t, g.const(np.array(0.1))], shape)
    return g.node("Where", [cond, t, g.randn(1, 1, 1, shape[3])], shape)


def _round_trip_int(g: Graph, t: str) -> str | None:
    shape = g.shapes[t]
    scaled = g.node("Mul", [t, g.const(np.array(3.0))], shape)
    as_int = g.hidden("Cast", [scaled], shape, to=TensorProto.INT32)
    return g.node("Cast", [as_int], shape, to=TensorProto.FLOAT)


def _batch_norm(g: Graph, t: str) -> str | None:
    c = g.shapes[t][1]
    stats = [g.randn(c), g.randn(c), g.randn(c), g.const(g.rng.uniform(0.5, 2, c))]
    return g.node("BatchNormalization", [t, *stats], g.shapes[t], epsilon=1e-5)


def _instance_norm(g: Graph, t: str) -> str | None:
    c = g.shapes[t][1]
    return g.node("InstanceNormalization", [t, g.randn(c), g.randn(c)], g.shapes[t], epsilon=1e-5)


def _concat(g: Graph, t: str) -> str | None:
    n, c, h, w = g.shapes[t]
    others = [u for u, s in g.shapes.items() if len(s) == 4 and s[0] == n and s[2:] == (h, w)]
    u = others[int(g.rng.integers(0, len(others)))]  # t itself is among them
    return g.node("Concat", [t, u], (n, c + g.shapes[u][1], h, w), axis=1)


def _residual(g: Graph, t: str) -> str | None:
    others = [u for u, s in g.shapes.items() if s == g.shapes[t] and u != t]
    if not others:
        return None
    return g.node("Add", [t, others[int(g.rng.integers(0, len(others)))]], g.shapes[t])


def _split(g: Graph, t: str) -> str | None:
    n, c, h, w = g.shapes[t]
    if c < 2:
        return None
    a = int(g.rng.integers(1, c))
    outs = [g.fresh("split"), g.fresh("split")]
    g.nodes.append(helper.make_node("Split", [t, g.const(np.array([a, c - a]))], outs, axis=1))
    g.shapes[outs[0]], g.shapes[outs[1]] = (n, a, h, w), (n, c - a, h, w)
    return outs[int(g.rng.integers(0, 2))]


def _slice(g: Graph, t: str) -> str | None:
    n, c, h, w = g.shapes[t]
    if h < 2:
        return None
    a = int(g.rng.integers(0, h - 1))
    b = int(g.rng.integers(a + 1, h + 1))
    bounds = [g.const(np.array([a])), g.const(np.array([b])), g.const(np.array([2]))]
    return g.node("Slice", [t, *bounds], (n, c, b - a, w))


def _pad(g: Graph, t: str) -> str | None:
    n, c, h, w = g.shapes[t]
    p = [0, 0, 1, int(g.rng.integers(0, 3)), 0, 0, int(g.rng.integers(0, 3)), 1]
    return g.node("Pad", [t, g.const(np.array(p))], (n, c, h + p[2] + p[6], w + p[3] + p[7]))


def _transpose(g: Graph, t: str) -> str | None:
    n, c, h, w = g.shapes[t]
    return g.node("Transpose", [t], (n, c, w, h), perm=[0, 1, 3, 2])


def _reshape(g: Graph, t: str) -> str | None:
    n, c, h, w = g.shapes[t]
    target = [0 if g.symbolic else n, c * h, w, 1]  # 0: the input's batch, whatever it is
    return g.node("Reshape", [t, g.const(np.array(target))], (n, c * h, w, 1))


def _resize(g: Graph, t: str) -> str | None:
    n, c, h, w = g.shapes[t]
    scales = g.const(np.array([1, 1, 2, 2], np.float32))
    if g.rng.random() < 0.5:
        return g.node("Resize", [t, "", scales], (n, c, 2 * h, 2 * w), mode="nearest")
    how = str(g.rng.choice(["half_pixel", "align_corners", "asymmetric"]))
    attrs = {"mode": "linear", "coordinate_transformation_mode": how}
    return g.node("Resize", [t, "", scales], (n, c, 2 * h, 2 * w), **attrs)


def _depth_to_space(g: Graph, t: str) -> str | None:
    n, c, h, w = g.shapes[t]
    if c % 4:
        return None
    mode = str(g.rng.choice(["DCR", "CRD"]))
    return g.node("DepthToSpace", [t], (n, c // 4, 2 * h, 2 * w), blocksize=2, mode=mode)


def _reduce(g: Graph, t: str) -> str | None:
    shape = g.shapes[t]
    op = str(g.rng.choice(["ReduceMean", "ReduceMax", "ReduceSum", "ReduceMin", "ReduceL2"]))
    axes = sorted(int(a) for a in g.rng.choice(4, size=int(g.rng.integers(1, 3)), replace=False))
    if 0 in axes:
        return None  # keep the batch: later ops read it
    out = tuple(1 if i in axes else d for i, d in enumerate(shape))
    return g.node(op, [t, g.const(np.array(axes))], out, keepdims=1)


def _softmax(g: Graph, t: str) -> str | None:
    return g.node("Softmax", [t], g.shapes[t], axis=int(g.rng.integers(1, 4)))


def _matmul(g: Graph, t: str) -> str | None:
    n, c, h, w = g.shapes[t]
    o = int(g.rng.integers(1, 20))
    return g.node("MatMul", [t, g.randn(w, o, scale=1 / np.sqrt(w))], (n, c, h, o))


def _expand(g: Graph, t: str) -> str | None:
    n, c, h, w = g.shapes[t]
    if n != 1 or g.symbolic:
        return None
    return g.node("Expand", [t, g.const(np.array([2, 1, 1, 1]))], (2, c, h, w))


def _global_pool(g: Graph, t: str) -> str | None:
    n, c, _, _ = g.shapes[t]
    return g.node("GlobalAveragePool", [t], (n, c, 1, 1))


def _flatten(g: Graph, t: str) -> str | None:
    n, c, h, w = g.shapes[t]
    return g.node("Flatten", [t], (n, c * h * w), axis=1)


OPS_4D: list[Op] = [
    _conv, _conv, _depthwise, _conv_transpose, _pool, _global_pool,
    _unary("Relu"), _unary("Sigmoid"), _sqrt_abs, _unary("Abs"), _clip,
    _unary("LRN", size=3, alpha=1e-3, beta=0.75, bias=1.0),
    _add_broadcast, _scale, _read_twice, _read_twice, _where, _round_trip_int,
    _batch_norm, _instance_norm, _concat, _residual, _split, _slice, _pad, _transpose,
    _reshape, _resize, _depth_to_space, _reduce, _softmax, _matmul, _expand, _flatten,
]  # fmt: skip


# -- ops on an (N, F) value ------------------------------------------------------------


def _gemm(g: Graph, t: str) -> str | None:
    n, f = g.shapes[t]
    o, trans = int(g.rng.integers(1, 50)), int(g.rng.integers(0, 2))
    w = g.randn(*((o, f) if trans else (f, o)), scale=1 / np.sqrt(f))
    return g.node("Gemm", [t, w, g.randn(o)], (n, o), transB=trans)


def _layer_norm(g: Graph, t: str) -> str | None:
    f = g.shapes[t][1]
    return g.node("LayerNormalization", [t, g.randn(f), g.randn(f)], g.shapes[t], axis=-1)


def _add_row(g: Graph, t: str) -> str | None:
    return g.node("Add", [t, g.randn(g.shapes[t][1])], g.shapes[t])


OPS_2D: list[Op] = [
    _gemm, _gemm, _layer_norm, _add_row, _unary("Relu"), _unary("Tanh"),
    _unary("Softmax", axis=-1), _read_twice,
]  # fmt: skip


def random_model(seed: int, symbolic: bool = False) -> tuple[ModelProto, dict[str, np.ndarray]]:
    """Graph number ``seed`` and a random input for it; with ``symbolic``, one whose ops
    hold for any batch size (the caller names the batch dim a symbol)."""
    rng = np.random.default_rng(seed)
    g = Graph(rng, symbolic)
    shape = (int(rng.choice([1, 1, 2])), int(rng.integers(1, 17)))
    shape += (int(rng.integers(1, 15)), int(rng.integers(1, 15)))
    g.shapes["x"] = shape
    steps = int(rng.integers(2, 9))
    t, outputs = g.grow(steps, lambda t: OPS_4D if len(g.shapes[t]) == 4 else OPS_2D, 400_000)
    return g.model(f"random{seed}", t, outputs)
