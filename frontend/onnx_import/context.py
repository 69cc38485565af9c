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
from ember.frontend.onnx_import.sequences import Bound, SequenceValue, describe
from ember.frontend.onnx_import.string_fold import fold_on_strings
from ember.frontend.ops.index_bounds import check_indices
from ember.frontend.ops.registry import get_op
from ember.frontend.string_tensors import STRING, as_strings, is_string_array, string_array

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
        strings = is_string_array(np.asarray(array))  # one form: object arrays of str
        array = np.require(as_strings(array) if strings else array, requirements="C")
        self.params[name] = array
        dtype = STRING if strings else str(array.dtype)
        self.values[name] = Value(name, TensorType(tuple(int(d) for d in array.shape), dtype))
        self.taken.add(name)
        return name

    def add_input(self, name: str, ttype: TensorType) -> Value:
        if ttype.dtype == STRING:  # kernels hold no strings: compiled per value instead
            raise NeedsConstantError(
                f"input '{name}' is a string tensor, which Ember needs at compile time "
                "(ember.compile compiles the model once per value of it)",
                name,
            )
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
        node_where = node_label(where[0], where[1], op)
        if any(t.dtype == STRING for t in types):
            known = [self.params.get(i) for i in inputs]
            arrays = fold_on_strings(op, attrs, types, known, inputs, node_where)
            return [self.add_param(self.fresh(where[0] or op), a) for a in arrays]
        out_types = definition.infer_types(types, attrs)
        for t in out_types:
            check_size(t, f"the output of {node_where}")
        # constant indices out of range are refused now, before folding would clamp them
        known = [self.params.get(i) for i in inputs]
        check_indices(op, types, attrs, known, inputs, node_where)
        base = where[0] or op
        names = [self.fresh(base) for _ in out_types]
        # (an op with no inputs, such as random_uniform, always folds: passes expect inputs)
        if all(i in self.params for i in inputs) and all(t.is_static for t in out_types):
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


def tensor_array(tensor: Any) -> np.ndarray:
    """An ONNX TensorProto's data (``numpy_helper.to_array``, except that a string tensor
    keeps every character: numpy's fixed-width strings, which it passes through, drop
    trailing NULs)."""
    # optional dependency: onnx
    from onnx import TensorProto, numpy_helper

    if tensor.data_type != TensorProto.STRING:
        return numpy_helper.to_array(tensor)
    return string_array([s.decode("utf-8") for s in tensor.string_data], tensor.dims)


def _attr_value(a: Any) -> Any:
    """An ONNX AttributeProto as a plain Python value (lists as tuples)."""
    # optional dependency: onnx
    from onnx import helper

    value = helper.get_attribute_value(a)
    if isinstance(value, bytes):
        return value.decode("utf-8")
    if isinstance(value, list):
        return tuple(v.decode("utf-8") if isinstance(v, bytes) else v for v in value)
    if hasattr(value, "data_type") and hasattr(value, "dims"):
        return tensor_array(value)
    return value


class ConvertContext:
    """One ONNX node as its converter sees it."""

    def __init__(
        self,
        node: Any,
        name: str,
        env: dict[str, Bound],
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
        """Input ``i``'s Ember tensor value; a sequence or optional there is refused (the
        converters that take them read :meth:`value` or :meth:`sequence`)."""
        value = self.value(i)
        if not isinstance(value, str):
            raise self._wrong_kind(i, value, "a tensor")
        return value

    def value(self, i: int) -> Bound:
        """Input ``i`` of any kind: a tensor's value name, a :class:`SequenceValue` or
        :data:`~ember.frontend.onnx_import.sequences.EMPTY` (an empty optional)."""
        if not self.has_input(i):
            raise ArgumentError(f"{self.op_type} needs input {i}, which is missing")
        onnx_name = self.node.input[i]
        if onnx_name not in self._env:
            raise InternalError(f"input '{onnx_name}' is used before it is defined")
        return self._env[onnx_name]

    def sequence(self, i: int) -> SequenceValue:
        """Input ``i``, which must be a sequence (or an optional holding one)."""
        value = self.value(i)
        if not isinstance(value, SequenceValue):
            raise self._wrong_kind(i, value, "a sequence")
        return value

    def _wrong_kind(self, i: int, value: Bound, wanted: str) -> ArgumentError:
        return ArgumentError(
            f"{self.op_type} input {i} ('{self.node.input[i]}') is {describe(value)}, "
            f"where {self.op_type} takes {wanted}"
        )

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
    def env(self) -> dict[str, Bound]:
        """ONNX name -> Ember value (or sequence) of everything visible here (a subgraph
        reads outer names)."""
        return self._env

    @property
    def builder(self) -> GraphBuilder:
        return self._b

    def value_of(self, value: str) -> np.ndarray | None:
        """The data of an Ember value if it is a constant, else None."""
        return self._b.params.get(value)
