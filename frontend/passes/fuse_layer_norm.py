"""Layer-norm fusion: a LayerNorm or RMSNorm written out in primitives becomes ``normalize``.

Exporters before ONNX opset 17 (and many since) write layer normalization as

    mu  = reduce_mean(x, axes, keepdims)        (layer norm only)
    d   = x - mu                                 (RMS norm: d is x)
    var = reduce_mean(pow(d, 2) | d * d, axes, keepdims)
    y   = d / sqrt(var + eps)                    or d * reciprocal(sqrt(var + eps))
    y   = y * gamma                              optional
    y   = y + beta                               optional, after gamma

which Ember would run as four kernels (two reductions, each followed by elementwise
work). Expects a verified graph; gives one where each such chain over float32 or float64
is one ``normalize`` node (``frontend/ops/norm.py``: axes, eps, ``center`` False for RMS,
accumulation in the input's dtype) — what onnxruntime's LayerNormFusion and
SimplifiedLayerNormFusion do. The residual add before it (SkipLayerNorm) needs no pass:
it is elementwise, and ``fuse_ops`` already puts it in the epilogue of the GEMM before
it, as it does bias + GELU (which ``fuse_gelu`` first makes one ``gelu`` node, for its
arithmetic).

It fires only where the node means what the chain does: both means over the same axes
with keepdims, a constant exponent of 2, a one-element finite constant ``eps``, gamma
and beta broadcasting to ``x`` without growing it and made outside the chain, and every
intermediate read only inside the chain (none a graph output). Anything else is left as
it was.
"""

from __future__ import annotations

from dataclasses import dataclass

from ember.errors import ArgumentError
from ember.frontend.graph import Graph, Node, merged_labels
from ember.frontend.ops.registry import broadcast_shapes
from ember.frontend.passes.chain_fusion import Readers, fuse_matches, other_input
from ember.frontend.passes.graph_pass import graph_pass

FLOATS = ("float32", "float64")


@dataclass
class _Match:
    nodes: list[Node]  # the chain, in graph order; the last one's output is the result
    x: str
    axes: tuple[int, ...]
    eps: float
    center: bool
    gamma: str | None
    beta: str | None


def _shape(view: Readers, name: str) -> tuple:
    return tuple(view.graph.values[name].type.shape)


def _mean(view: Readers, name: str) -> Node | None:
    node = view.made_by(name, "reduce")
    ok = node is not None and node.attrs["kind"] == "mean" and node.attrs["keepdims"]
    return node if ok else None


def _square_of(view: Readers, name: str) -> tuple[Node, str] | None:
    """``(node, d)`` where ``name = pow(d, 2)`` or ``d * d``."""
    node = view.producer(name)
    if node is None:
        return None
    if node.op == "pow" and view.scalar(node.inputs[1]) == 2.0:
        return node, node.inputs[0]
    if node.op == "multiply" and node.inputs[0] == node.inputs[1]:
        return node, node.inputs[0]
    return None


def _match(view: Readers, sqrt: Node) -> _Match | None:
    """The chain through ``sqrt`` (the one node every form has once), or None."""
    add = view.made_by(sqrt.inputs[0], "add")
    var_mean = None if add is None else _mean(view, add.inputs[0]) or _mean(view, add.inputs[1])
    if add is None or var_mean is None:
        return None
    eps = view.scalar(other_input(add, var_mean.outputs[0]))
    squared = _square_of(view, var_mean.inputs[0])
    if eps is None or eps < 0 or squared is None:
        return None
    square, d = squared
    axes = tuple(var_mean.attrs["axes"])
    x, centring = d, []  # RMS norm unless d is x minus its mean over the same axes
    sub = view.made_by(d, "subtract")
    mean = _mean(view, sub.inputs[1]) if sub is not None else None
    if sub is not None and mean is not None:
        if mean.inputs[0] == sub.inputs[0] and tuple(mean.attrs["axes"]) == axes:
            x, centring = sub.inputs[0], [mean, sub]
    t = view.graph.values[x].type
    if t.dtype not in FLOATS or _shape(view, d) != tuple(t.shape):
        return None
    found = _normalized(view, sqrt, d)
    if found is None:
        return None
    steps, y = found
    chain = [*centring, square, var_mean, add, sqrt, *steps]
    gamma = beta = None
    for op in ("multiply", "add"):
        user = view.sole_reader(y)
        if user is None or user.op != op or (op == "add" and gamma is None):
            break
        other = other_input(user, y)
        if other is None or not _fits(_shape(view, other), tuple(t.shape)) or other == y:
            break
        gamma, beta = (other, None) if op == "multiply" else (gamma, other)
        chain.append(user)
        y = user.outputs[0]
    m = _Match(chain, x, axes, eps, bool(centring), gamma, beta)
    return m if _closed(view, m) else None


def _normalized(view: Readers, sqrt: Node, d: str) -> tuple[list[Node], str] | None:
    """The nodes dividing ``d`` by the root (a divide, or a reciprocal and a multiply) and
    the value they give."""
    user = view.sole_reader(sqrt.outputs[0])
    if user is None:
        return None
    if user.op == "divide" and user.inputs == (d, sqrt.outputs[0]):
        return [user], user.outputs[0]
    if user.op == "reciprocal":
        mul = view.sole_reader(user.outputs[0])
        if mul is not None and mul.op == "multiply" and other_input(mul, user.outputs[0]) == d:
            return [user, mul], mul.outputs[0]
    return None


def _fits(shape: tuple, x: tuple) -> bool:
    try:
        return broadcast_shapes(shape, x) == x
    except ArgumentError:
        return False


def _closed(view: Readers, m: _Match) -> bool:
    """Every value the chain makes, but its result, is read only inside the chain, and
    gamma and beta come from outside it: ``y * gamma + d²`` (beta the chain's own square)
    reads inside the chain, yet the fused node could not read a value it removes."""
    made = {o for n in m.nodes for o in n.outputs}
    if m.gamma in made or m.beta in made:
        return False
    inside = {id(n) for n in m.nodes}
    for node in m.nodes[:-1]:
        for o in node.outputs:
            if view.is_output(o) or any(id(u) not in inside for u in view.readers(o)):
                return False
    return True


def _fused(graph: Graph, m: _Match) -> Node:
    """The ``normalize`` node for the chain of ``m``, named after its last node."""
    last = m.nodes[-1]
    inputs = tuple(i for i in (m.x, m.gamma, m.beta) if i is not None)
    dtype = graph.values[m.x].type.dtype
    attrs = {"axes": m.axes, "eps": m.eps, "center": m.center, "acc": dtype}
    return Node(
        "normalize", last.name, inputs, last.outputs, attrs, "LayerNormalization",
        absorbed=merged_labels(m.nodes),
    )  # fmt: skip


@graph_pass
def fuse_layer_norm(graph: Graph) -> Graph:
    """Runs the pass on ``graph`` (see the module notes), one chain at a time."""
    return fuse_matches(graph, _match_at, _fused, Readers)


def _match_at(view: Readers, node: Node) -> _Match | None:
    return _match(view, node) if node.op == "sqrt" else None


__all__ = ["fuse_layer_norm"]
