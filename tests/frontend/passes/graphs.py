"""A small builder of graphs by hand, for Before/Expected pass tests.

``b = GraphBuilder(); x = b.input("x", (2, 3)); y = b.node("relu", [x], (2, 3));
b.build(y)`` gives a verified Graph; names are made up where not given, as the graph
comparison ignores them. ``fused=`` sets a node's fused group (``group=`` is an
attribute, a convolution's).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ember.frontend.graph import Graph, Node, TensorType, Value


class GraphBuilder:
    """Inputs, params and nodes in the order they are added."""

    def __init__(self) -> None:
        self.inputs: list[Value] = []
        self.nodes: list[Node] = []
        self.params: dict[str, np.ndarray] = {}
        self.values: dict[str, Value] = {}

    def _value(self, name: str, shape: tuple[Any, ...], dtype: str) -> str:
        assert name not in self.values, name
        self.values[name] = Value(name, TensorType(tuple(shape), dtype))
        return name

    def input(self, name: str, shape: tuple[Any, ...], dtype: str = "float32") -> str:
        self.inputs.append(self.values[self._value(name, shape, dtype)])
        return name

    def param(self, name: str, array: np.ndarray) -> str:
        self.params[name] = array
        return self._value(name, array.shape, str(array.dtype))

    def node(
        self,
        op: str,
        inputs: list[str],
        shape: tuple[Any, ...],
        out_dtype: str = "float32",
        /,  # so ``shape=`` may be an attribute (a reshape's)
        *,
        out: str | None = None,
        fused: int | None = None,
        **attrs: Any,
    ) -> str:
        out = out or f"v{len(self.values)}"
        self._value(out, shape, out_dtype)
        self.nodes.append(Node(op, out, tuple(inputs), (out,), attrs, op.capitalize(), group=fused))
        return out

    def build(self, *outputs: str) -> Graph:
        outs = [self.values[o] for o in outputs]
        return Graph(self.inputs, outs, self.nodes, self.params, self.values).verify()
