"""ONNX subgraphs (If branches, Loop bodies): inlined into the graph, or imported as Graphs.

A subgraph reads values of the scopes around it by name. :class:`Scope` is the env
a subgraph's nodes are converted with: the subgraph's own names first, then, on a
miss, the enclosing env. Two uses:

- :func:`inline_subgraph` converts the nodes straight into the enclosing builder
  (an If whose condition is a constant, an unrolled Loop iteration): outer names
  resolve to the outer values themselves.
- :func:`import_subgraph` makes a separate :class:`Graph` (a runtime If's branch, a
  Loop body run on the host): an outer constant is copied into the subgraph's params
  (so it still folds), any other outer value becomes an extra subgraph input, listed
  in ``captures`` (outer value -> subgraph input) so the control-flow node can pass it.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ember.errors import ArgumentError
from ember.frontend.graph import Graph, TensorType, Value
from ember.frontend.onnx_import.context import GraphBuilder
from ember.frontend.onnx_import.declared import subgraphs_of
from ember.frontend.onnx_import.importer import convert_node


class Scope(dict):
    """A subgraph's env: its own bindings, falling back to ``outer`` (captured if asked)."""

    def __init__(
        self, outer: dict[str, str], outer_b: GraphBuilder, inner_b: GraphBuilder | None = None
    ) -> None:
        super().__init__()
        self.outer = outer
        self.outer_b = outer_b
        self.inner_b = inner_b  # None: inline, outer values are used as they are
        self.captures: dict[str, str] = {}

    def __contains__(self, key: object) -> bool:
        return dict.__contains__(self, key) or key in self.outer

    def __missing__(self, key: str) -> str:
        if key not in self.outer:
            raise KeyError(key)
        value = self.outer[key]
        if self.inner_b is None:
            return value
        if value in self.outer_b.params:
            inner = self.inner_b.add_param(self.inner_b.fresh(key), self.outer_b.params[value])
        elif value in self.captures:
            inner = self.captures[value]
        else:
            inner = self.inner_b.add_input(
                self.inner_b.fresh(key), self.outer_b.values[value].type
            ).name
            self.captures[value] = inner
        self[key] = inner
        return inner


def _names_read(node: Any) -> list[str]:
    """Every name ``node`` reads, its subgraphs' (at any depth) included."""
    names = list(node.input)
    for sub in subgraphs_of(node):
        for inner in sub.node:
            names += _names_read(inner)
    return names


def _convert_nodes(graph: Any, env: Scope, b: GraphBuilder, opsets: dict[str, int]) -> None:
    # optional dependency: onnx
    from onnx import numpy_helper

    for init in graph.initializer:
        env[init.name] = b.add_param(b.fresh(init.name), numpy_helper.to_array(init))
    for index, node in enumerate(graph.node):
        if env.inner_b is not None:
            # Capture outer values before the node converts: the importer renames a value
            # first seen during a conversion (as a captured one would be) to the node's output.
            for name in _names_read(node):
                if name and not dict.__contains__(env, name) and name in env.outer:
                    env[name]
        convert_node(node, node.name or f"{node.op_type}_{index}", env, b, opsets)


def _output(env: dict[str, str], name: str, where: str) -> str:
    if name not in env:
        raise ArgumentError(f"{where}: subgraph output '{name}' is never defined")
    return env[name]


def inline_subgraph(ctx: Any, graph: Any, bindings: dict[str, str] | None = None) -> list[str]:
    """Convert ``graph``'s nodes into the enclosing graph; its formal inputs are bound to
    the Ember values ``bindings`` gives by ONNX name. Returns its outputs' values."""
    scope = Scope(ctx.env, ctx.builder)
    scope.update(bindings or {})
    _convert_nodes(graph, scope, ctx.builder, ctx.opsets)
    return [_output(scope, o.name, ctx.op_type) for o in graph.output]


def import_subgraph(
    ctx: Any, graph: Any, formal: Sequence[TensorType] = ()
) -> tuple[Graph, dict[str, str]]:
    """``graph`` as a separate Graph whose first inputs are its formal inputs typed
    ``formal``, followed by one input per captured outer value (``captures``'s order)."""
    outer_b: GraphBuilder = ctx.builder
    b = GraphBuilder(set(outer_b.taken))
    scope = Scope(ctx.env, outer_b, b)
    if len(formal) != len(graph.input):
        raise ArgumentError(
            f"{ctx.op_type}: the body takes {len(graph.input)} inputs, the node gives {len(formal)}"
        )
    inputs = []
    for vi, t in zip(graph.input, formal):
        inputs.append(b.add_input(b.fresh(vi.name), t))
        scope[vi.name] = inputs[-1].name
    _convert_nodes(graph, scope, b, ctx.opsets)
    outputs = [b.values[_output(scope, o.name, ctx.op_type)] for o in graph.output]
    inputs += [b.values[v] for v in scope.captures.values()]
    sub = Graph(inputs, outputs, b.nodes, b.params, b.values, name=graph.name or ctx.op_type)
    return sub.verify(), scope.captures


def with_inputs(
    sub: Graph, captures: dict[str, str], order: Sequence[str], types: dict[str, TensorType]
) -> Graph:
    """``sub`` taking the outer values ``order`` as its captured inputs (a branch that does
    not read one gets an unused input for it), after its formal inputs."""
    n_formal = len(sub.inputs) - len(captures)
    inputs = list(sub.inputs[:n_formal])
    values = dict(sub.values)
    taken = set(values)
    for outer in order:
        if outer in captures:
            inputs.append(values[captures[outer]])
            continue
        name, k = f"unused_{outer}", 0
        while name in taken:
            k += 1
            name = f"unused_{outer}_{k}"
        taken.add(name)
        values[name] = Value(name, types[outer])
        inputs.append(values[name])
    return Graph(inputs, sub.outputs, sub.nodes, sub.params, values, sub.name)
