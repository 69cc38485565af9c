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
from ember.frontend.passes.graph_pass import graph_pass
from ember.tir.topi.attention import AttentionLayout


class _View:
    """The graph's producers and consumers, asked by the matcher."""

    def __init__(self, graph: Graph) -> None:
        self.graph = graph
        self.producers, self.consumers = graph.producers(), graph.consumers()


def _append(view: _View, node: Node, value: str, axis: int) -> Node | None:
    """The two-input concat along ``axis`` with a nonempty first input that makes
    ``value`` and that only ``node`` reads, else None."""
    concat = view.producers.get(value)
    if concat is None or concat.op != "concat" or len(concat.inputs) != 2:
        return None
    readers = view.consumers.get(value, [])
    if len(readers) != 1 or readers[0] is not node:
        return None
    past = view.graph.values[concat.inputs[0]].type
    rank = past.ndim
    if not past.is_static or concat.attrs["axis"] % max(rank, 1) != axis or rank != 4:
        return None
    return concat if int(past.shape[axis]) > 0 else None


def _match(view: _View, node: Node) -> tuple[Node, Node] | None:
    """The key and value concats ``node`` (an ``attention``) can take over, else None."""
    if node.op != "attention":
        return None
    layout = AttentionLayout.from_attrs(node.attrs)
    q = view.graph.values[node.inputs[0]].type
    if layout.k_split or layout.v_split or not q.is_static:
        return None
    if layout.sizes("q", tuple(int(d) for d in q.shape))[2] != 1:
        return None
    k = _append(view, node, node.inputs[1], layout.k[2])
    v = _append(view, node, node.inputs[2], layout.v[2])
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
    """Runs the pass on ``graph`` (see the module notes)."""
    while True:
        view = _View(graph)
        found = next(
            ((n, *m) for n in graph.nodes for m in [_match(view, n)] if m is not None), None
        )
        if found is None:
            return graph
        node, k, v = found
        gone = {id(k), id(v)}
        nodes = [_fused(node, k, v) if n is node else n for n in graph.nodes if id(n) not in gone]
        graph = replace(graph, nodes=nodes)


__all__ = ["fuse_cache_append"]
