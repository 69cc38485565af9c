"""A decode step's cache append joins its attention: two ``Concat`` nodes and the
``attention`` node reading them become one ``cached_attention`` node.

A decoder exported for generation with a key/value cache (GPT-2's ``past_key_values`` in,
``present`` out) appends each layer's new key and value to the cache with a ``Concat``
and attends over the result. Run apart, the concat reads the cache and writes
``present``, and the attention reads ``present`` again: at a past of 1,024 positions GPT-2
small moves 75 MB of keys and values a step that way, twice. The fused node's CPU kernel
(``codegen_llvm/schedules/attention.py``) reads each cached key and value once, writes it
to ``present`` and uses it. GPT-2 small's decode step at a past of 1,024, two Zen 3
threads, in the model by turns (ms, all 12 layers): the concats and attention apart 5.5 +
1.5, fused 4.9.

It fires where an ``attention`` node (``fuse_attention``) has one query row (static
shapes: a decode step), reads K and V 4-D (no split) from two ``Concat`` nodes of two
inputs each along the position axis, with a nonempty past, and nothing else reads the
concats (``present`` may be a graph output: the fused node writes it).
"""

from __future__ import annotations

from dataclasses import replace

from ember.frontend.graph import Graph, Node, merged_labels
from ember.frontend.passes.chain_fusion import Readers
from ember.frontend.passes.graph_pass import graph_pass
from ember.tir.topi.attention import AttentionLayout


def _append(readers: Readers, node: Node, value: str, axis: int) -> Node | None:
    """The two-input concat along ``axis`` with a nonempty, static, 4-D first input that
    makes ``value`` and that only ``node`` reads, else None."""
    concat = readers.made_by(value, "concat")
    if concat is None or len(concat.inputs) != 2:
        return None
    users = readers.readers(value)
    if len(users) != 1 or users[0] is not node:
        return None
    past = readers.graph.values[concat.inputs[0]].type
    if past.ndim != 4 or not past.is_static or concat.attrs["axis"] % 4 != axis:
        return None
    return concat if int(past.shape[axis]) > 0 else None


def _match(readers: Readers, node: Node) -> tuple[Node, Node] | None:
    """The key and value concats ``node`` (an ``attention``) can take over, else None."""
    if node.op != "attention":
        return None
    layout = AttentionLayout.from_attrs(node.attrs)
    q = readers.graph.values[node.inputs[0]].type
    if layout.k_split or layout.v_split or not q.is_static:
        return None
    if layout.sizes("q", tuple(int(d) for d in q.shape))[2] != 1:
        return None
    k = _append(readers, node, node.inputs[1], layout.k[2])
    v = _append(readers, node, node.inputs[2], layout.v[2])
    return None if k is None or v is None or k is v else (k, v)


def _fused(node: Node, k: Node, v: Node) -> Node:
    inputs = (node.inputs[0], *k.inputs, *v.inputs, *node.inputs[3:])
    outputs = (*node.outputs, *k.outputs, *v.outputs)
    absorbed = node.absorbed or merged_labels([node])
    return Node(
        "cached_attention", node.name, inputs, outputs, dict(node.attrs), node.op_type,
        absorbed=(*merged_labels([k, v]), *absorbed),
    )  # fmt: skip


@graph_pass
def fuse_cache_append(graph: Graph) -> Graph:
    """Runs the pass on ``graph`` (see the module notes). The matches never share a node
    (each concat is read by its attention alone), so one walk finds them all."""
    readers = Readers(graph)
    matches = {id(n): m for n in graph.nodes for m in [_match(readers, n)] if m is not None}
    if not matches:
        return graph
    gone = {id(c) for k, v in matches.values() for c in (k, v)}
    nodes = [
        _fused(n, *matches[id(n)]) if id(n) in matches else n
        for n in graph.nodes
        if id(n) not in gone
    ]
    return replace(graph, nodes=nodes)


__all__ = ["fuse_cache_append"]
