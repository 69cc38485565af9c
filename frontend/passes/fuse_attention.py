"""Attention fusion: the exporters' scaled dot-product chain becomes one ``attention`` node.

Expects a verified graph; gives one where each chain

    scores = matmul(Q, Kt)            Kt: K transposed, by a transpose node or as given
    scores = scores / c | scores * c  optional; c a constant of one element
    scores = scores + mask            optional; mask broadcasting to the scores
    probs  = softmax(scores, axis=-1)
    out    = matmul(probs, V)         [then transpose(out, perm), optional]

over 4-D static float tensors (batch, head, position, feature) is one ``attention(Q, K,
V[, mask])`` node (``frontend/ops/attention.py``) with ``scale`` 1/c or c. The reshapes
and transposes that make Q, K and V (BERT's ``[B, S, H·D] → reshape [B, S, H, D] →
transpose [B, H, S, D]``) and those after it (``transpose [B, S, H, D] → reshape [B, S,
H·D]``) fold into the node's axes and split attributes: it reads the reshapes' inputs and
writes the final layout, so those copies go (dead-code elimination drops the ones nobody
else reads). The CPU runs the node as a kernel
that never stores the score matrix (``codegen_llvm/schedules/attention.py``).

It fires only where the node means exactly what the chain does: softmax over the last
axis, a one-element finite (and for division nonzero) constant scale, batch and head
axes equal in both products (no broadcasting), a mask that broadcasts to the scores
without growing them, and every intermediate read only by the next step of the chain
(none a graph output). Anything else is left as it was.
"""

from __future__ import annotations

from dataclasses import dataclass

from ember.errors import ArgumentError
from ember.frontend.graph import Graph, Node, merged_labels
from ember.frontend.ops.registry import broadcast_shapes
from ember.frontend.passes.chain_fusion import Readers, fuse_matches
from ember.frontend.passes.graph_pass import graph_pass
from ember.tir.topi.attention import IDENTITY, AttentionLayout, Axes

FLOATS = ("float32", "float64")


@dataclass
class _Match:
    """One chain found: the nodes it replaces and what the fused node reads."""

    nodes: list[Node]
    q: str
    k: str
    v: str
    mask: str | None
    scale: float
    layout: AttentionLayout
    out: str


class _View(Readers):
    """:class:`Readers` with the static shapes of float values, asked by the matcher."""

    def shape(self, name: str) -> tuple[int, ...] | None:
        """The static shape of a float value, else None."""
        t = self.graph.values[name].type
        if not t.is_static or t.dtype not in FLOATS:
            return None
        return tuple(int(d) for d in t.shape)

    def scalar(self, value: str | None) -> float | None:
        """A one-element finite float constant of at most 4 dims (a 5-D one would grow
        the scores), else None."""
        c = self.graph.params.get(value or "")
        return super().scalar(value) if c is not None and c.ndim <= 4 else None


def _source(view: _View, name: str, kt: bool) -> tuple[str, Axes, int]:
    """The tensor an operand is read from, the axes of its 4-D view, and the split (the
    view's feature count where the tensor is the 3-D one a reshape split into heads, else
    0). A transpose that made the operand folds into the axes, and a reshape that made
    the transpose's input (or the operand) from ``[a, b, h·d]`` into the split. ``kt``: the
    operand is Kᵀ (logical batch, head, feature, position), so K's axes swap the last two."""
    node = view.made_by(name, "transpose")
    src, p = (node.inputs[0], tuple(node.attrs["perm"])) if node else (name, IDENTITY)
    axes = (p[0], p[1], p[3], p[2]) if kt else (p[0], p[1], p[2], p[3])
    merged, split = _merged(view, src)
    return (merged, axes, split) if merged else (src, axes, 0)


def _merged(view: _View, name: str) -> tuple[str | None, int]:
    """``(x, d)`` where ``name`` (4-D ``[a, b, h, d]``) is a reshape of a 3-D ``x`` of
    shape ``[a, b, h·d]``, else ``(None, 0)``."""
    node, shape = view.made_by(name, "reshape"), view.shape(name)
    if node is None or shape is None or len(shape) != 4:
        return None, 0
    if view.shape(node.inputs[0]) != (shape[0], shape[1], shape[2] * shape[3]):
        return None, 0
    return node.inputs[0], shape[3]


def _scale(view: _View, node: Node, scores: str) -> float | None:
    """The factor a divide/multiply applies to ``scores``, or None where it is not a
    one-element constant (or divides the constant by the scores, or by zero)."""
    a, b = node.inputs
    if node.op == "divide":
        c = view.scalar(b) if a == scores else None
        return None if not c else 1.0 / c
    return view.scalar(b if a == scores else a)


def _match(view: _View, softmax: Node) -> _Match | None:
    """The chain around ``softmax``, or None where it is not exactly attention."""
    (cur,) = softmax.inputs
    shape = view.shape(cur)
    if shape is None or len(shape) != 4 or softmax.attrs["axis"] != 3:
        return None
    chain, mask, scale = [softmax], None, 1.0
    node = view.made_by(cur, "add")
    if node is not None and view.sole_reader(cur) is softmax:
        for i in (0, 1):
            m = node.inputs[1 - i]
            mshape = view.graph.values[m].type.shape
            if view.made_by(node.inputs[i], "matmul", "divide", "multiply") and _fits(
                mshape, shape
            ):
                chain, mask, cur = [node, *chain], m, node.inputs[i]
                break
        else:
            return None
    node = view.made_by(cur, "divide", "multiply")
    if node is not None and view.sole_reader(cur) is chain[0]:
        prev = node.inputs[0] if node.op == "divide" else _chain_side(view, node)
        factor = _scale(view, node, prev) if prev else None
        if prev is None or factor is None or view.shape(prev) != shape:
            return None
        chain, scale, cur = [node, *chain], factor, prev
    qk = view.made_by(cur, "matmul")
    if qk is None or view.sole_reader(cur) is not chain[0]:
        return None
    return _finish(view, [qk, *chain], mask, scale, shape)


def _chain_side(view: _View, node: Node) -> str | None:
    """The input of a multiply that is the scores (the other being the constant)."""
    a, b = node.inputs
    return a if view.scalar(b) is not None else b if view.scalar(a) is not None else None


def _fits(mask: tuple, scores: tuple[int, ...]) -> bool:
    try:
        return len(mask) <= 4 and broadcast_shapes(mask, scores) == tuple(scores)
    except ArgumentError:
        return False


def _finish(
    view: _View, chain: list[Node], mask: str | None, scale: float, scores: tuple[int, ...]
) -> _Match | None:
    """The match once the scores' chain is known: checks Q, Kᵀ, V and the product after the
    softmax, and folds the transposes around them."""
    qk, softmax = chain[0], chain[-1]
    pv = view.sole_reader(softmax.outputs[0])
    if pv is None or pv.op != "matmul" or pv.inputs[0] != softmax.outputs[0]:
        return None
    q, kt, v = qk.inputs[0], qk.inputs[1], pv.inputs[1]
    qs, ks, vs = view.shape(q), view.shape(kt), view.shape(v)
    if qs is None or ks is None or vs is None or any(len(s) != 4 for s in (qs, ks, vs)):
        return None
    B, H, Sq, Sk = scores
    if qs[:3] != (B, H, Sq) or ks[:2] != (B, H) or ks[3] != Sk or vs[:3] != (B, H, Sk):
        return None  # batch or head broadcasting: not what the node computes
    dtype = view.graph.values[q].type.dtype
    if any(view.graph.values[n].type.dtype != dtype for n in (kt, v, softmax.outputs[0])):
        return None
    if mask is not None and view.graph.values[mask].type.dtype != dtype:
        return None
    qsrc, qa, qsplit = _source(view, q, False)
    ksrc, ka, ksplit = _source(view, kt, True)
    vsrc, va, vsplit = _source(view, v, False)
    nodes, out, oa = [*chain, pv], pv.outputs[0], IDENTITY
    after = view.sole_reader(out)
    if after is not None and after.op == "transpose":
        inv = [tuple(after.attrs["perm"]).index(i) for i in range(4)]
        nodes, out, oa = [*nodes, after], after.outputs[0], (inv[0], inv[1], inv[2], inv[3])
    osplit, after, shape = 0, view.sole_reader(out), view.shape(out)
    if after is not None and after.op == "reshape" and shape is not None:
        if view.shape(after.outputs[0]) == (shape[0], shape[1], shape[2] * shape[3]):
            nodes, out, osplit = [*nodes, after], after.outputs[0], shape[3]
    layout = AttentionLayout(qa, ka, va, oa, qsplit, ksplit, vsplit, osplit)
    return _Match(nodes, qsrc, ksrc, vsrc, mask, scale, layout, out)


def _fused(m: _Match) -> Node:
    inputs = (m.q, m.k, m.v) if m.mask is None else (m.q, m.k, m.v, m.mask)
    attrs = {"scale": m.scale, **m.layout.attrs()}
    return Node(
        "attention", m.nodes[-1].name, inputs, (m.out,), attrs, "Attention",
        absorbed=merged_labels(m.nodes),
    )  # fmt: skip


@graph_pass
def fuse_attention(graph: Graph) -> Graph:
    """Runs the pass on ``graph`` (see the module notes). Chains are fused one at a time,
    each match found on the graph the previous one left (the output transpose one chain
    takes may be another's input transpose)."""
    return fuse_matches(graph, _match_at, lambda _, m: _fused(m), _View)


def _match_at(view: _View, node: Node) -> _Match | None:
    return _match(view, node) if node.op == "softmax" else None


__all__ = ["fuse_attention"]
