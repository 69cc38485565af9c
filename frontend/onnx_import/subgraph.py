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
  An outer sequence is captured element by element; :func:`import_branch` also lets the
  subgraph give sequences and optionals, as flat tensors and the layouts that rebuild them.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ember.errors import ArgumentError
from ember.frontend.graph import Graph, TensorType, Value
from ember.frontend.interface import TENSOR
from ember.frontend.onnx_import.context import GraphBuilder, tensor_array
from ember.frontend.onnx_import.declared import subgraphs_of
from ember.frontend.onnx_import.importer import convert_node
from ember.frontend.onnx_import.sequences import (
    Bound,
    EmptyOptional,
    Layout,
    SequenceValue,
    describe,
    flatten,
)


class Scope(dict):
    """A subgraph's env: its own bindings, falling back to ``outer`` (captured if asked; a
    captured sequence is captured element by element)."""

    def __init__(
        self, outer: dict[str, Bound], outer_b: GraphBuilder, inner_b: GraphBuilder | None = None
    ) -> None:
        super().__init__()
        self.outer = outer
        self.outer_b = outer_b
        self.inner_b = inner_b  # None: inline, outer values are used as they are
        self.captures: dict[str, str] = {}

    def __contains__(self, key: object) -> bool:
        return dict.__contains__(self, key) or key in self.outer

    def __missing__(self, key: str) -> Bound:
        if key not in self.outer:
            raise KeyError(key)
        value = self.outer[key]
        if self.inner_b is None:
            return value
        inner: Bound
        if isinstance(value, SequenceValue):
            inner = SequenceValue(tuple(self._capture(v, key) for v in value.items), value.dtype)
        elif isinstance(value, str):
            inner = self._capture(value, key)
        else:
            inner = value  # an empty optional holds nothing to capture
        self[key] = inner
        return inner

    def _capture(self, value: str, key: str) -> str:
        """The subgraph's own value for the outer tensor ``value`` (read as ``key``)."""
        assert self.inner_b is not None
        if value in self.outer_b.params:
            inner = self.inner_b.add_param(self.inner_b.fresh(key), self.outer_b.params[value])
        elif value in self.captures:
            inner = self.captures[value]
        else:
            inner = self.inner_b.add_input(
                self.inner_b.fresh(key), self.outer_b.values[value].type
            ).name
            self.captures[value] = inner
        return inner


def peek(env: dict[str, Bound], name: str) -> Bound | None:
    """What ``name`` is bound to in ``env`` or the scopes around it, without capturing it
    (None when unbound): a converter's look at an outer value's kind."""
    while True:
        if dict.__contains__(env, name):
            return dict.__getitem__(env, name)  # type: ignore[no-any-return]
        if not isinstance(env, Scope):
            return None
        env = env.outer


def reads_structured(ctx: Any, graph: Any) -> bool:
    """Whether ``graph``'s nodes (at any depth) read an outer sequence or empty optional."""
    names = {n for node in graph.node for n in _names_read(node) if n}
    return any(isinstance(peek(ctx.env, n), (SequenceValue, EmptyOptional)) for n in names)


def _names_read(node: Any) -> list[str]:
    """Every name ``node`` reads, its subgraphs' (at any depth) included."""
    names = list(node.input)
    for sub in subgraphs_of(node):
        for inner in sub.node:
            names += _names_read(inner)
    return names


def _convert_nodes(graph: Any, env: Scope, b: GraphBuilder, opsets: dict[str, int]) -> None:
    for init in graph.initializer:
        env[init.name] = b.add_param(b.fresh(init.name), tensor_array(init))
    for index, node in enumerate(graph.node):
        if env.inner_b is not None:
            # Capture outer values before the node converts: the importer renames a value
            # first seen during a conversion (as a captured one would be) to the node's output.
            for name in _names_read(node):
                if name and not dict.__contains__(env, name) and name in env.outer:
                    env[name]
        convert_node(node, node.name or f"{node.op_type}_{index}", env, b, opsets)


def _output(env: dict[str, Bound], name: str, where: str) -> Bound:
    if name not in env:
        raise ArgumentError(f"{where}: subgraph output '{name}' is never defined")
    return env[name]


def inline_subgraph(ctx: Any, graph: Any, bindings: dict[str, str] | None = None) -> list[str]:
    """Convert ``graph``'s nodes into the enclosing graph; its formal inputs are bound to
    the Ember values ``bindings`` gives by ONNX name. Returns its outputs' values, which
    must be tensors (:func:`inline_values` also passes sequences and optionals)."""
    outputs = inline_values(ctx, graph, dict(bindings or {}))
    tensors = [v for v in outputs if isinstance(v, str)]
    for o, value in zip(graph.output, outputs):
        if not isinstance(value, str):
            raise ArgumentError(f"{ctx.op_type}: subgraph output '{o.name}' is {describe(value)}")
    return tensors


def inline_values(ctx: Any, graph: Any, bindings: dict[str, Bound] | None = None) -> list[Bound]:
    """As :func:`inline_subgraph`, and inputs and outputs may be sequences or optionals."""
    scope = Scope(ctx.env, ctx.builder)
    scope.update(bindings or {})
    _convert_nodes(graph, scope, ctx.builder, ctx.opsets)
    return [_output(scope, o.name, ctx.op_type) for o in graph.output]


def import_subgraph(
    ctx: Any, graph: Any, formal: Sequence[TensorType] = ()
) -> tuple[Graph, dict[str, str]]:
    """``graph`` as a separate Graph whose first inputs are its formal inputs typed
    ``formal``, followed by one input per captured outer value (``captures``'s order)."""
    sub, captures, layouts = import_branch(ctx, graph, formal)
    if any(kind != TENSOR for kind, _, _ in layouts):
        raise ArgumentError(
            f"{ctx.op_type}: the body gives a sequence or optional, which Ember passes out of "
            "a subgraph run at run time only for If (a Loop carrying one is unrolled)"
        )
    return sub, captures


def import_branch(
    ctx: Any, graph: Any, formal: Sequence[TensorType] = ()
) -> tuple[Graph, dict[str, str], list[Layout]]:
    """As :func:`import_subgraph`, and the graph's outputs may be sequences or optionals:
    the Graph's outputs are their tensors (:func:`~.sequences.flatten`), and ``layouts``
    (one per ONNX output) rebuilds them."""
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
    outputs, layouts = [], []
    for o in graph.output:
        flat, layout = flatten(_output(scope, o.name, ctx.op_type))
        outputs += [b.values[v] for v in flat]
        layouts.append(layout)
    inputs += [b.values[v] for v in scope.captures.values()]
    sub = Graph(inputs, outputs, b.nodes, b.params, b.values, name=graph.name or ctx.op_type)
    return sub.verify(), scope.captures, layouts


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
