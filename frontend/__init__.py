"""``ember.frontend``: the graph IR, the operator library and the ONNX importer.

``from_onnx`` loads onnx only when called, so ``import ember.frontend`` stays light.
"""

from __future__ import annotations

from typing import Any

from ember.frontend.graph import Graph, Node, TensorType, Value


def from_onnx(model: Any, shapes: Any = None) -> Graph:
    """Import an ONNX model (path, bytes or ModelProto) as a :class:`Graph`."""
    # start-up cost: the importer loads every converter and op family (~0.5 s of imports)
    from ember.frontend.onnx_import.importer import from_onnx as _from_onnx

    return _from_onnx(model, shapes)


__all__ = ["Graph", "Node", "TensorType", "Value", "from_onnx"]
