"""Where a :class:`~ember.graph.dynamic_model.DynamicModel` gets a static graph for each
specialization: its *source*, an ONNX model imported again with the sizes, values and
layouts bound (:class:`OnnxSource`), or an Ember Graph whose node types are re-inferred
through each op's shape rule (:class:`GraphSource`). :func:`symbolic_source` says
whether a model needs one at all. Kept apart from the model that runs the
specializations: this half knows importers and graphs, that half runs and caches."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any

import numpy as np

from ember.errors import ArgumentError, EmberError, NeedsConstantError
from ember.frontend.graph import Graph, TensorType, Value
from ember.frontend.interface import is_structured
from ember.frontend.onnx_import.boundary import structured_type
from ember.frontend.onnx_import.context import tensor_array
from ember.frontend.onnx_import.importer import (
    _elem_dtype,
    _input_type,
    _value_type,
    check_supported,
    from_onnx,
    load_model,
    overridable_initializers,
)
from ember.frontend.onnx_import.value_inputs import (
    freeze_inputs,
    input_ancestors,
)
from ember.frontend.ops.registry import get_op


def concrete(t: TensorType, binding: Mapping[str, int]) -> tuple[int, ...]:
    """``t``'s shape with its symbolic dims bound."""
    return tuple(binding[d] if isinstance(d, str) else d for d in t.shape)


class OnnxSource:
    """An ONNX model, imported again with static shapes for each binding."""

    kind = "onnx"
    exportable = True  # ``.ember`` files hold this source and compile new sizes from it

    def __init__(
        self, proto: Any, shapes: Mapping[str, Sequence[int]], value_inputs: Sequence[str] = ()
    ) -> None:
        self.data: bytes = proto.SerializeToString()
        self.shapes = {k: tuple(int(d) for d in v) for k, v in shapes.items()}
        check_supported(proto)  # an unsupported operator is reported now, not on first run
        self.inputs, self.outputs = onnx_signature(proto, self.shapes)
        self.defaults = onnx_defaults(proto)
        self.value_inputs: list[str] = list(value_inputs)

    def specialize(
        self, binding: Mapping[Any, Any], values: Mapping[str, np.ndarray] | None = None
    ) -> Graph:
        """The graph at these sizes (and layouts of sequence and optional inputs: see
        :data:`Binding`), with ``values`` (of value inputs) as constants."""
        values = values or {}
        shapes: dict[str, Any] = {}
        for v in self.inputs:
            if v.name not in values:  # a sequence's shapes: its element shapes (or None)
                structured = is_structured(v.type)
                shapes[v.name] = (
                    binding[layout_key(v.name)] if structured else concrete(v.type, binding)
                )
        if not values:
            return from_onnx(self.data, shapes)
        return from_onnx(freeze_inputs(load_model(self.data), values), shapes)

    def learn_value_inputs(self, error: NeedsConstantError) -> bool:
        """Add the graph inputs ``error``'s tensor is computed from to ``value_inputs``;
        False when there are none new (a tensor local to a subgraph, or one already
        frozen), so the error stands."""
        new = [
            n
            for n in input_ancestors(load_model(self.data), error.tensor)
            if n not in self.value_inputs
        ]
        self.value_inputs.extend(new)
        return bool(new)


def onnx_signature(proto: Any, shapes: Mapping[str, Sequence[int]]) -> tuple[list[Value], ...]:
    """The graph inputs (symbolic dims kept unless ``shapes`` fixes them) and outputs as the
    model declares them, without importing the nodes (which may need static shapes)."""
    defaults = onnx_defaults(proto)
    known = {i.name for i in proto.graph.initializer} - set(defaults)
    inputs = [
        Value(vi.name, _declared_input_type(vi, shapes, defaults.get(vi.name)))
        for vi in proto.graph.input
        if vi.name not in known
    ]
    unknown = set(shapes) - {v.name for v in inputs}
    if unknown:
        raise ArgumentError(
            f"shapes names unknown inputs {sorted(unknown)}; inputs: {[v.name for v in inputs]}"
        )
    return inputs, [Value(vi.name, _declared_type(vi)) for vi in proto.graph.output]


def _declared_input_type(vi: Any, shapes: Mapping[str, Sequence[int]], default: Any) -> Any:
    """A tensor input's type (``shapes`` fixing symbolic dims), or a sequence or optional
    input's declared type (its lengths are those of each run)."""
    structured = structured_type(vi)
    if structured is None:
        return _input_type(vi, shapes, default)
    if vi.name in shapes:
        raise ArgumentError(
            f"input '{vi.name}' is {structured}: its lengths are taken from each run, "
            "so shapes= cannot fix them"
        )
    return structured


def layout_key(name: str) -> tuple[str, str]:
    """The key of a sequence or optional input's layout in a :data:`Binding` (apart from
    the symbols, which are strings)."""
    return ("layout", name)


def onnx_defaults(proto: Any) -> dict[str, np.ndarray]:
    """The data of the initializers a run may override (inputs it may leave out)."""
    names = overridable_initializers(proto)
    return {t.name: tensor_array(t) for t in proto.graph.initializer if t.name in names}


def _declared_type(vi: Any) -> TensorType:
    """An output's type as the model declares it; ``?`` for what it leaves out (known once
    a size is compiled)."""
    structured = structured_type(vi)
    if structured is not None:
        return structured  # type: ignore[return-value]
    try:
        return _value_type(vi, {})
    except EmberError:
        pass
    try:
        return TensorType(("?",), _elem_dtype(vi))
    except EmberError:
        return TensorType(("?",), "?")


class GraphSource:
    """An Ember Graph with symbolic input dims; each binding re-infers every node's types."""

    kind = "graph"
    exportable = True  # ``.ember`` files hold this source and compile new sizes from it

    def __init__(self, graph: Graph) -> None:
        for n in graph.nodes:
            if n.subgraphs:
                raise ArgumentError(
                    f"{n.where()} holds subgraphs, which are not re-typed for a new batch size; "
                    "compile this graph with static input shapes"
                )
        self.graph = graph
        self.inputs, self.outputs = list(graph.inputs), list(graph.outputs)
        self.defaults = graph.defaults
        self.value_inputs: list[str] = []  # an Ember Graph's ops take no shapes as data

    def specialize(
        self, binding: Mapping[str, int], values: Mapping[str, np.ndarray] | None = None
    ) -> Graph:
        """The graph re-typed at these sizes (``values`` is always empty: see
        ``value_inputs``)."""
        g = self.graph
        typed = {
            n: Value(n, TensorType(concrete(v.type, binding), v.dtype))
            for n, v in g.values.items()
            if n in g.params or n in g.input_names
        }
        for node in g.nodes:
            in_types = [typed[i].type for i in node.inputs]
            try:
                outs = get_op(node.op).infer_types(in_types, node.attrs)
            except EmberError as e:
                raise e.add_context(f"while re-typing {node.where()} for {dict(binding)}") from None
            typed.update((o, Value(o, t)) for o, t in zip(node.outputs, outs))
        return Graph(
            [typed[v.name] for v in g.inputs],
            [typed[v.name] for v in g.outputs],
            [replace(n, attrs=dict(n.attrs)) for n in g.nodes],  # passes may edit nodes
            g.params,
            typed,
            g.name,
            g.defaults,
        ).verify()


def symbolic_source(model: Any, shapes: Mapping[str, Sequence[int]] | None) -> Any | None:
    """A source for :class:`DynamicModel` when ``model`` (an ONNX ModelProto or a Graph)
    keeps a symbolic input dim after ``shapes``; None when every input is static."""
    if isinstance(model, Graph):
        static = all(v.type.is_static for v in model.inputs)
        return None if static else GraphSource(model)
    inputs, outputs = onnx_signature(model, dict(shapes or {}))
    structured = any(is_structured(v.type) for v in (*inputs, *outputs))
    if all(v.type.is_static for v in inputs) and not structured:
        return None
    return OnnxSource(model, dict(shapes or {}))
