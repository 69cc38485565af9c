"""Graph passes as named :class:`~ember.tir.transform.runner.Pass` objects of the graph kind.

The runner (``tir/transform/runner.py``) is shared with the TIR passes and cannot import
the frontend, so the graph brings its own hooks in :data:`GRAPH`: ``Graph.verify`` after
each pass (with the pass named in the error), the text of ``format_graph`` for
``EMBER_DUMP_DIR`` (``main.03.fuse_ops.after.graph``), and one unit, the graph itself.
With them a graph pass is skipped by name (``PassContext(disabled_pass=["fuse_ops"])``),
seen by the context's instruments, timed, dumped, and a crash inside it is an
``InternalError`` naming it, as for any TIR pass.

``@graph_pass`` makes a function ``Graph -> Graph`` such a pass (the object is still
called as ``fuse_ops(graph)``); :func:`as_graph_pass` takes what a user hands
``ember.compile(graph_passes=...)``: a graph pass, or a plain function named by its
``__name__``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import replace
from typing import Any

from ember.errors import ArgumentError, InternalError
from ember.frontend.graph import Graph, Node, TensorType, Value, format_graph
from ember.tir.transform.runner import IRKind, Pass

GraphFn = Callable[[Graph], Graph]


def fresh_name(base: str, taken: Mapping[str, object]) -> str:
    """``base``, or ``base`` with underscores appended until no key of ``taken`` has it:
    the name of a value or param a pass adds."""
    name = base
    while name in taken:
        name += "_"
    return name


def add_value(values: dict[str, Value], base: str, shape: Sequence[Any], dtype: str) -> str:
    """A new value named after ``base`` (:func:`fresh_name`) of ``shape`` and ``dtype``,
    added to ``values``; its name."""
    name = fresh_name(base, values)
    values[name] = Value(name, TensorType(tuple(shape), dtype))
    return name


def add_param(values: dict[str, Value], params: dict[str, Any], base: str, array: Any) -> str:
    """A new constant ``array`` named after ``base``, added to ``params`` and ``values``;
    its name."""
    name = add_value(values, base, array.shape, str(array.dtype))
    params[name] = array
    return name


def rebuilt(
    graph: Graph,
    nodes: list[Node],
    values: dict[str, Value],
    params: dict[str, Any],
    replaced: Iterable[str],
) -> Graph:
    """``graph`` with ``nodes``, ``values`` and ``params``, less those of the constants
    ``replaced`` that no node and no output reads any more (the weights a rewrite
    re-laid out)."""
    read = {i for n in nodes for i in n.inputs} | set(graph.output_names)
    for name in set(replaced) - read:
        del params[name], values[name]
    return replace(graph, nodes=nodes, values=values, params=params)


Rewrite = Callable[[Node, dict[str, Value], dict[str, Any]], list[Node]]


def rewrite_nodes(graph: Graph, takes: Callable[[Node, Graph], bool], rewrite: Rewrite) -> Graph:
    """``graph`` with each node ``takes`` accepts replaced by the nodes ``rewrite(node,
    values, params)`` returns (adding what they make to those dicts), less the constants
    the replaced nodes read that nothing reads any more; ``graph`` itself where no node is
    taken."""
    if not any(takes(n, graph) for n in graph.nodes):
        return graph
    values, params = dict(graph.values), dict(graph.params)
    nodes: list[Node] = []
    replaced: set[str] = set()
    for node in graph.nodes:
        if takes(node, graph):
            replaced.update(i for i in node.inputs if i in graph.params)
            nodes += rewrite(node, values, params)
        else:
            nodes.append(node)
    return rebuilt(graph, nodes, values, params, replaced)


def _verify(graph: Graph, after: str) -> None:
    if not isinstance(graph, Graph):
        raise InternalError(f"graph pass '{after}' returned {type(graph).__name__}, not a Graph")
    try:
        graph.verify()
    except InternalError as e:
        raise e.add_context(f"after graph pass '{after}'") from None


def _one(graph: Graph) -> tuple[Graph]:
    return (graph,)


def _put_back(graph: Graph, units: Sequence[Graph]) -> Graph:
    (out,) = units
    return out


GRAPH = IRKind("graph", "graph", _verify, format_graph, _one, _put_back)


def graph_pass(fn: GraphFn | None = None, *, name: str | None = None, opt_level: int = 0) -> Any:
    """``fn`` as a graph :class:`Pass` named ``name`` (its ``__name__`` by default);
    with no ``fn``, a decorator taking the options."""

    def make(f: GraphFn) -> Pass:
        return Pass(name or f.__name__, f, opt_level=opt_level, ir=GRAPH)

    return make if fn is None else make(fn)


def as_graph_pass(p: Any) -> Pass:
    """A graph pass as is; a plain function ``Graph -> Graph`` as a pass of its name."""
    if isinstance(p, Pass):
        if p.ir is not GRAPH:
            raise ArgumentError(
                f"graph_passes: '{p.name}' is a pass over {p.ir.name}, not over a graph"
            )
        return p
    if not callable(p):
        raise ArgumentError(
            f"graph_passes takes graph passes or functions Graph -> Graph, got {p!r}"
        )
    return graph_pass(p, name=getattr(p, "__name__", None) or repr(p))


__all__ = ["GRAPH", "GraphFn", "as_graph_pass", "graph_pass"]
