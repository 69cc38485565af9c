"""GELU fusion: GELU written out in primitives becomes one ``gelu`` node.

Exporters before ONNX opset 20 (and many since) write BERT's and ViT's GELU as

    y = x * 0.5 * (1 + erf(x / sqrt(2)))                        (or x * (1 / sqrt(2)))

and GPT-2's as

    y = x * 0.5 * (1 + tanh(sqrt(2 / pi) * (x + 0.044715 * pow(x, 3))))

with the two factors ``x`` and ``0.5`` applied in either order (``(x * 0.5) * (1 + ...)``
too). Elementwise, each chain already runs inside the epilogue of the GEMM before it
(``fuse_ops``); what the pass changes is the arithmetic. The chain divides by a square
root loaded from a constant where the ``gelu`` node multiplies by its reciprocal, and
``pow`` with a loaded exponent calls libm's ``powf`` lane by lane (6.5 ns an element in
GPT-2's decode step) where the node cubes by multiplying. The node computes what
onnxruntime's ``Gelu`` and ``FastGelu`` compute after its GeluFusion and FastGeluFusion,
so both runtimes round alike. Expects a verified graph; gives one where each such chain
over float32 or float64 is one ``gelu`` node (``approximate`` "none" or "tanh").

It fires only where the node means what the chain does: the constants are one-element
and within float32 rounding of their exact values, every value of the chain has ``x``'s
shape and type, and every intermediate is read only inside the chain (none a graph
output). Anything else is left as it was.
"""

from __future__ import annotations

import math

from ember.frontend.graph import Graph, Node, merged_labels
from ember.frontend.passes.chain_fusion import Readers, fuse_chains, other_input
from ember.frontend.passes.graph_pass import graph_pass

FLOATS = ("float32", "float64")
SQRT2 = math.sqrt(2.0)
TANH_SCALE = math.sqrt(2.0 / math.pi)
CUBIC = 0.044715
CLOSE = 1e-6  # relative: float32 rounding of the constants (2**-24 is 6e-8) with room


def _near(r: Readers, name: str | None, value: float) -> bool:
    """Whether ``name`` is a one-element constant within float32 rounding of ``value``."""
    got = r.scalar(name)
    return got is not None and abs(got - value) <= CLOSE * abs(value)


def _scaled(r: Readers, name: str, x: str) -> list[Node] | None:
    """The node making ``name`` from ``x`` alone times ``1 / sqrt(2)`` (the erf's
    argument), or None."""
    div = r.made_by(name, "divide")
    if div is not None and div.inputs[0] == x and _near(r, div.inputs[1], SQRT2):
        return [div]
    mul = r.made_by(name, "multiply")
    if mul is not None and _near(r, other_input(mul, x), 1.0 / SQRT2):
        return [mul]
    return None


def _tanh_argument(r: Readers, name: str) -> tuple[str, list[Node]] | None:
    """``(x, nodes)`` where ``name = sqrt(2 / pi) * (x + 0.044715 * pow(x, 3))``."""
    outer = r.made_by(name, "multiply")
    if outer is None:
        return None
    s = next((i for i in outer.inputs if _near(r, other_input(outer, i), TANH_SCALE)), "")
    inner = r.made_by(s, "add")
    if inner is None:
        return None
    for x in inner.inputs:
        cubic = r.made_by(other_input(inner, x) or "", "multiply")
        if cubic is None:
            continue
        for p in cubic.inputs:
            power = r.made_by(p, "pow")
            if (
                power is not None
                and power.inputs[0] == x
                and _near(r, power.inputs[1], 3.0)
                and _near(r, other_input(cubic, p), CUBIC)
            ):
                return x, [power, cubic, inner, outer]
    return None


def _tail(r: Readers, one_plus: str, x: str) -> list[Node] | None:
    """The multiplies after ``1 + erf(...)`` that apply the factors ``x`` and ``0.5``
    (one of them may be ``x * 0.5`` made beforehand), the last one the chain's end."""
    nodes: list[Node] = []
    factors: list[str] = []
    y = one_plus
    while len(factors) < 2:
        mul = r.sole_reader(y)
        other = other_input(mul, y) if mul is not None and mul.op == "multiply" else None
        if mul is None or other is None:
            return None
        half_x = r.made_by(other, "multiply")
        if other == x:
            factors.append("x")
        elif _near(r, other, 0.5):
            factors.append("half")
        elif (
            half_x is not None
            and _near(r, other_input(half_x, x), 0.5)
            and r.sole_reader(other) is mul
        ):
            factors += ["x", "half"]
            nodes.append(half_x)
        else:
            return None
        nodes.append(mul)
        y = mul.outputs[0]
    return nodes if sorted(factors) == ["half", "x"] else None


def _match(r: Readers, fn: Node) -> tuple[list[Node], str, str] | None:
    """``(chain, x, approximate)`` for the GELU through ``fn`` (its erf or tanh), the
    chain in graph order."""
    head: list[Node] | None = None
    x: str | None = None
    approximate = "none" if fn.op == "erf" else "tanh"
    if fn.op == "erf":
        scaled = r.producer(fn.inputs[0])
        for x in scaled.inputs if scaled is not None else ():
            head = _scaled(r, fn.inputs[0], x)
            if head is not None:
                break
    else:
        found = _tanh_argument(r, fn.inputs[0])
        x, head = found if found is not None else (None, None)
    add = r.sole_reader(fn.outputs[0])
    if x is None or head is None or add is None or add.op != "add":
        return None
    one = _near(r, other_input(add, fn.outputs[0]), 1.0)
    tail = _tail(r, add.outputs[0], x) if one else None
    if tail is None:
        return None
    order = {id(n): k for k, n in enumerate(r.graph.nodes)}
    chain = sorted([*head, fn, add, *tail], key=lambda n: order[id(n)])
    return (chain, x, approximate) if _closed(r, chain, x) else None


def _closed(r: Readers, chain: list[Node], x: str) -> bool:
    """Every value of the chain has ``x``'s type (no broadcast grows it), and all but
    the result are read only inside the chain."""
    t = r.graph.values[x].type
    if t.dtype not in FLOATS:
        return False
    inside = {id(n) for n in chain}
    for node in chain:
        out = node.outputs[0]
        if r.graph.values[out].type != t:
            return False
        if node is not chain[-1] and (
            r.is_output(out) or any(id(u) not in inside for u in r.readers(out))
        ):
            return False
    return True


@graph_pass
def fuse_gelu(graph: Graph) -> Graph:
    """Runs the pass on ``graph`` (see the module notes), one chain at a time."""
    inputs: dict[int, tuple[str, str]] = {}  # the found chains' x and approximate, by end

    def chain_at(r: Readers, node: Node) -> tuple[Node, ...] | None:
        found = _match(r, node) if node.op in ("erf", "tanh") else None
        if found is None:
            return None
        chain, x, approximate = found
        inputs[id(chain[-1])] = (x, approximate)
        return tuple(chain)

    def fuse(*chain: Node) -> Node:
        x, approximate = inputs[id(chain[-1])]
        last = chain[-1]
        return Node(
            "gelu", last.name, (x,), last.outputs, {"approximate": approximate}, "Gelu",
            absorbed=merged_labels(chain),
        )  # fmt: skip

    return fuse_chains(graph, chain_at, fuse)


__all__ = ["fuse_gelu"]
