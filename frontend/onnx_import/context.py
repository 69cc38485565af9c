"""The graph under construction and the view of it one converter gets.

:class:`GraphBuilder` owns the values, params and nodes made so far; it types
every new node with its op's shape rule and folds nodes whose inputs are all
constants (``frontend/fold.py``). :class:`ConvertContext` is what a converter
sees of one ONNX node: its inputs as Ember values, its attributes with defaults,
its constant inputs as arrays, and ``emit`` to add Ember ops.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from ember.errors import ArgumentError, InternalError, NeedsConstantError
from ember.frontend.fold import evaluate
from ember.frontend.graph import Node, TensorType, Value, check_size, node_label
from ember.frontend.ops.index_bounds import check_indices
from ember.frontend.ops.registry import get_op

REQUIRED = object()


class GraphBuilder:
    """Collects the values, params and nodes an import produces, with unique names."""

    def __init__(self, reserved: set[str]) -> None:
        self.values: dict[str, Value] = {}
        self.params: dict[str, np.ndarray] = {}
        self.nodes: list[Node] = []
        self.taken = set(reserved)
        self.counter = 0

    def fresh(self, base: str) -> str:
        while True:
            self.counter += 1
            name = f"{base}_{self.counter}"
            if name not in self.taken:
                self.taken.add(name)
                return name

    def add_param(self, name: str, array: np.ndarray) -> str:
        array = np.require(array, requirements="C")
        self.params[name] = array
        self.values[name] = Value(
            name, TensorType(tuple(int(d) for d in array.shape), str(array.dtype))
        )
        self.taken.add(name)
        return name

    def add_input(self, name: str, ttype: TensorType) -> Value:
        v = Value(name, ttype)
        self.values[name] = v
        self.taken.add(name)
        return v

    def emit(
        self, op: str, inputs: Sequence[str], attrs: dict[str, Any], where: tuple[str, str]
    ) -> list[str]:
        """Add ``op`` (typed, or folded to params when every input is constant)."""
        definition = get_op(op)
        definition.check_attrs(attrs)
        types = [self.values[i].type for i in inputs]
        out_types = definition.infer_types(types, attrs)
        node_where = node_label(where[0], where[1], op)
        for t in out_types:
            check_size(t, f"the output of {node_where}")
        # constant indices out of range are refused now, before folding would clamp them
        known = [self.params.get(i) for i in inputs]
        check_indices(op, types, attrs, known, inputs, node_where)
        base = where[0] or op
        names = [self.fresh(base) for _ in out_types]
        if inputs and all(i in self.params for i in inputs) and all(t.is_static for t in out_types):
            arrays = evaluate(op, attrs, [self.params[i] for i in inputs], out_types)
            return [self.add_param(n, a) for n, a in zip(names, arrays)]
        for n, t in zip(names, out_types):
            self.values[n] = Value(n, t)
        self.nodes.append(Node(op, where[0], tuple(inputs), tuple(names), dict(attrs), where[1]))
        return names

    def add_node(
        self,
        node: Node,
        out_types: Sequence[TensorType],
    ) -> list[str]:
        """Append a node that no op definition types or folds (a control-flow node whose
        ``subgraphs`` the host runs); its outputs get fresh names and ``out_types``."""
        names = [self.fresh(node.name or node.op) for _ in out_types]
        for n, t in zip(names, out_types):
            self.values[n] = Value(n, t)
        node.outputs = tuple(names)
        self.nodes.append(node)
        return names

    def rename(self, old: str, new: str, since_node: int) -> None:
        """Give a value made by the current conversion (nodes from ``since_node``) its ONNX name."""
        self.taken.add(new)
        if old in self.params:
            self.params[new] = self.params.pop(old)
        self.values[new] = Value(new, self.values.pop(old).type)
        for n in self.nodes[since_node:]:
            n.inputs = tuple(new if i == old else i for i in n.inputs)
            n.outputs = tuple(new if o == old else o for o in n.outputs)


def _attr_value(a: Any) -> Any:
    """An ONNX AttributeProto as a plain Python value (lists as tuples)."""
    # optional dependency: onnx
    from onnx import helper, numpy_helper

    value = helper.get_attribute_value(a)
    if isinstance(value, bytes):
        return value.decode("utf-8")
    if isinstance(value, list):
        return tuple(v.decode("utf-8") if isinstance(v, bytes) else v for v in value)
    if hasattr(value, "data_type") and hasattr(value, "dims"):
        return numpy_helper.to_array(value)
    return value


class ConvertContext:
    """One ONNX node as its converter sees it."""

    def __init__(
        self,
        node: Any,
        name: str,
        env: dict[str, str],
        builder: GraphBuilder,
        opset: int,
        opsets: dict[str, int] | None = None,
    ) -> None:
        self.node = node
        self.name = name  # the ONNX node's name, or "<op_type>_<index>" when it has none
        self.op_type = node.op_type
        self.opset = opset
        self.opsets = dict(opsets) if opsets is not None else {"": opset}
        self.num_outputs = len(node.output)
        self._env = env
        self._b = builder
        self._attrs = {a.name: a for a in node.attribute}

    # ---- inputs -----------------------------------------------------------------------
    @property
    def num_inputs(self) -> int:
        return len(self.node.input)

    def has_input(self, i: int) -> bool:
        """Whether optional input ``i`` is given (present and not the empty name)."""
        return i < len(self.node.input) and self.node.input[i] != ""

    def input(self, i: int) -> str:
        if not self.has_input(i):
            raise ArgumentError(f"{self.op_type} needs input {i}, which is missing")
        onnx_name = self.node.input[i]
        if onnx_name not in self._env:
            raise InternalError(f"input '{onnx_name}' is used before it is defined")
        return self._env[onnx_name]

    def inputs(self) -> list[str]:
        """Every given input, in order (skipping omitted optional ones)."""
        return [self.input(i) for i in range(self.num_inputs) if self.has_input(i)]

    def type(self, i: int) -> TensorType:
        return self._b.values[self.input(i)].type

    def is_constant(self, i: int) -> bool:
        return self.has_input(i) and self.input(i) in self._b.params

    def constant(self, i: int) -> np.ndarray:
        """Input ``i``'s data; it must be a constant (initializer, Constant or folded)."""
        name = self.input(i)
        if name not in self._b.params:
            raise NeedsConstantError(
                f"{self.op_type} input {i} ('{self.node.input[i]}') must be a constant "
                "(an initializer or computed from constants); Ember needs it at compile time",
                self.node.input[i],
            )
        return self._b.params[name]

    # ---- attributes --------------------------------------------------------------------
    def attr(self, name: str, default: Any = REQUIRED) -> Any:
        if name in self._attrs:
            return _attr_value(self._attrs[name])
        if default is REQUIRED:
            raise ArgumentError(f"{self.op_type} needs attribute '{name}'")
        return default

    def has_attr(self, name: str) -> bool:
        return name in self._attrs

    # ---- outputs -----------------------------------------------------------------------
    def emit(
        self, op: str, inputs: Sequence[str], attrs: dict[str, Any] | None = None
    ) -> list[str]:
        return self._b.emit(op, inputs, attrs or {}, (self.name, self.op_type))

    def emit1(self, op: str, inputs: Sequence[str], attrs: dict[str, Any] | None = None) -> str:
        (out,) = self.emit(op, inputs, attrs)
        return out

    def const(self, array: np.ndarray, base: str = "const") -> str:
        return self._b.add_param(self._b.fresh(self.name or base), np.asarray(array))

    def type_of(self, value: str) -> TensorType:
        return self._b.values[value].type

    # ---- scopes, for converters of nodes with subgraphs (If, Loop) ------------------
    @property
    def env(self) -> dict[str, str]:
        """ONNX name -> Ember value of everything visible here (a subgraph reads outer names)."""
        return self._env

    @property
    def builder(self) -> GraphBuilder:
        return self._b

    def value_of(self, value: str) -> np.ndarray | None:
        """The data of an Ember value if it is a constant, else None."""
        return self._b.params.get(value)
