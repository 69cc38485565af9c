"""Control-flow ops: ``if``, ``loop`` and ``scan``, registered so every graph node names a known op.

They have no compute: the ONNX converters (``onnx_import/ops_control_flow.py``) type
them from their subgraphs (``Node.subgraphs``) and add them with
``GraphBuilder.add_node``, and the compiler runs them on the host
(``ember/control_flow.py``). They are OPAQUE, so a fusion pass leaves them alone;
asking for their shape rule or compute is an internal error.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ember.errors import InternalError
from ember.frontend.graph import TensorType
from ember.frontend.op_kinds import OPAQUE
from ember.frontend.ops.registry import register_op


def _host_only(name: str) -> Any:
    def infer(types: Sequence[TensorType], attrs: dict[str, Any]) -> list[TensorType]:
        raise InternalError(f"op '{name}' is typed from its subgraphs by its converter")

    def compute(inputs: Sequence[Any], attrs: dict[str, Any]) -> list[Any]:
        raise InternalError(f"op '{name}' runs on the host over its subgraphs; it has no compute")

    register_op(name, OPAQUE, infer=infer, num_inputs=(0, 1 << 16))(compute)


_host_only("if")
_host_only("loop")
_host_only("scan")
