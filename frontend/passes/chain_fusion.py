"""Chains of nodes replaced by one node: what the graph's fusion passes share
(``fuse_dw_pointwise``, ``fuse_expand_dw_pointwise``, ``fuse_gelu``, ``fuse_cache_append``,
``fuse_layer_norm``, ``fuse_attention``).

A chain is a run of nodes each of whose output only the next one reads (and which is no
graph output), ending at the node whose outputs the fused node takes over. A pass finds
the chain ending at a node with :class:`Readers`, and :func:`fuse_chains` replaces the
first found and looks again, until none is left. A pass whose match carries more than
its nodes (a layer norm's axes and eps, attention's layout) gives :func:`fuse_matches`
its matches, and may ask them of a :class:`Readers` subclass.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Protocol, TypeVar

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


class Match(Protocol):
    """What a pass found: the chain's nodes in order, the last the one whose outputs the
    fused node keeps (and whatever else the pass needs to build that node)."""

    @property
    def nodes(self) -> Sequence[Node]: ...


R = TypeVar("R", bound=Readers)
M = TypeVar("M", bound=Match)


def fuse_matches(
    graph: Graph,
    match_at: Callable[[R, Node], M | None],
    fused: Callable[[Graph, M], Node],
    readers: Callable[[Graph], R],
) -> Graph:
    """``graph`` with the first match ``match_at`` finds at a node (asked with ``readers``
    of the graph) replaced by ``fused(graph, match)``, one at a time, the graph searched
    again after each, until none is found. The inner nodes' outputs leave the graph's
    values."""
    while True:
        r = readers(graph)
        found = next((m for m in (match_at(r, n) for n in graph.nodes) if m is not None), None)
        if found is None:
            return graph
        graph = _replace_chain(graph, found.nodes, fused(graph, found))


@dataclass(frozen=True)
class _Chain:
    nodes: tuple[Node, ...]


def fuse_chains(graph: Graph, chain_at: ChainAt, fuse: Callable[..., Node]) -> Graph:
    """:func:`fuse_matches` where a match is the chain itself: each chain that ``chain_at``
    finds ending at a node (its nodes in order, the last that node) replaced by
    ``fuse(*chain)``."""

    def match_at(readers: Readers, node: Node) -> _Chain | None:
        chain = chain_at(readers, node)
        return None if chain is None else _Chain(tuple(chain))

    return fuse_matches(graph, match_at, lambda _, m: fuse(*m.nodes), Readers)


def _replace_chain(graph: Graph, chain: Sequence[Node], fused: Node) -> Graph:
    """``graph`` with ``fused`` where the chain's last node was and its other nodes gone,
    with the values they made."""
    *inner, last = chain
    gone = {id(n) for n in inner}
    nodes = [fused if n is last else n for n in graph.nodes if id(n) not in gone]
    dead = {v for n in inner for v in n.outputs}
    values = {k: v for k, v in graph.values.items() if k not in dead}
    return replace(graph, nodes=nodes, values=values)


__all__ = ["Match", "Readers", "fuse_chains", "fuse_matches", "other_input"]
