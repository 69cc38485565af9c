"""Chains of nodes replaced by one node: what the graph's fusion passes share
(``fuse_dw_pointwise``, ``fuse_expand_dw_pointwise``, ``fuse_gelu``, ``fuse_cache_append``,
``fuse_layer_norm``, ``fuse_attention``).

A chain is a run of nodes each of whose output only the next one reads (and which is no
graph output), ending at the node whose outputs the fused node takes over. A pass finds
the chain ending at a node with :class:`Readers`, and :func:`fuse_chains` replaces the
first found and looks again, until none is left. A pass whose match carries more than
its nodes (a layer norm's axes and eps, attention's layout) runs its own loop over a
:class:`Readers` subclass and replaces each chain with :func:`replace_chain`.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import replace

from ember.frontend.graph import Graph, Node


class Readers:
    """Who makes and who reads each value of a graph, as a chain finder asks."""

    def __init__(self, graph: Graph) -> None:
        self.graph = graph
        self._producers, self._users = graph.producers(), graph.consumers()
        self._outputs = set(graph.output_names)

    def producer(self, value: str) -> Node | None:
        """The node that makes ``value`` (None for an input or a param)."""
        return self._producers.get(value)

    def readers(self, value: str) -> list[Node]:
        """The nodes that read ``value``."""
        return self._users.get(value, [])

    def made_by(self, value: str, *ops: str) -> Node | None:
        """The node of one of ``ops`` that makes ``value``, else None."""
        node = self.producer(value)
        return node if node is not None and node.op in ops else None

    def scalar(self, value: str | None) -> float | None:
        """The value of ``value`` where it is a one-element finite float constant, else
        None."""
        c = self.graph.params.get(value or "")
        if c is None or c.size != 1 or c.dtype.kind != "f":
            return None
        found = float(c.reshape(-1)[0])
        return found if math.isfinite(found) else None

    def sole_reader(self, value: str) -> Node | None:
        """The node that reads ``value``, where only it does and ``value`` is no graph
        output; else None."""
        found = self.readers(value)
        return found[0] if len(found) == 1 and value not in self._outputs else None

    def is_output(self, value: str) -> bool:
        return value in self._outputs

    def sole_producer(self, value: str, ops: tuple[str, ...]) -> Node | None:
        """The node of one of ``ops`` that makes ``value``, where only one node reads
        ``value`` and it is no graph output; else None."""
        node = self.producer(value)
        if node is None or node.op not in ops or value in self._outputs:
            return None
        return node if len(self.readers(value)) == 1 else None


def other_input(node: Node, name: str) -> str | None:
    """The other input of a binary ``node`` reading ``name``, else None."""
    a, b = node.inputs
    return b if a == name else a if b == name else None


ChainAt = Callable[[Readers, Node], "tuple[Node, ...] | None"]


def fuse_chains(graph: Graph, chain_at: ChainAt, fuse: Callable[..., Node]) -> Graph:
    """``graph`` with each chain that ``chain_at`` finds ending at a node (its nodes in
    order, the last that node, whose outputs the fused node keeps) replaced by
    ``fuse(*chain)``, one at a time, the graph searched again after each, until no node
    ends one. The inner nodes' outputs leave the graph's values."""
    while True:
        readers = Readers(graph)
        found = (chain_at(readers, node) for node in graph.nodes)
        chain = next((c for c in found if c is not None), None)
        if chain is None:
            return graph
        graph = replace_chain(graph, chain, fuse(*chain))


def replace_chain(graph: Graph, chain: Sequence[Node], fused: Node) -> Graph:
    """``graph`` with ``fused`` where the chain's last node was and its other nodes gone,
    with the values they made."""
    *inner, last = chain
    gone = {id(n) for n in inner}
    nodes = [fused if n is last else n for n in graph.nodes if id(n) not in gone]
    dead = {v for n in inner for v in n.outputs}
    values = {k: v for k, v in graph.values.items() if k not in dead}
    return replace(graph, nodes=nodes, values=values)


__all__ = ["Readers", "fuse_chains", "other_input", "replace_chain"]
