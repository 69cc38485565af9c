"""``ember.compile``: a model (Graph, ONNX ModelProto or path) to a runnable CompiledModel.

The flow, top to bottom: import the model (``frontend/onnx_import``) unless it is
already a :class:`~ember.frontend.graph.Graph`; check its shapes are static; build
one kernel per node (``ember/kernels.py``: the op's compute under the target's
generic schedule, cached per workload); hand the kernels to the executor
(``ember/executor.py``), which plans memory once and calls them in order. Graph
passes (folding, fusion) will run between import and kernel building.
"""

from __future__ import annotations

from typing import Any

from ember.errors import ArgumentError, EmberError
from ember.executor import CompiledModel, Step
from ember.frontend.graph import Graph
from ember.target import Target


def compile(
    model: Any, target: str | Target = "llvm", records: Any = None, shapes: Any = None
) -> CompiledModel:  # noqa: A001
    """Compile ``model`` for ``target`` ("llvm" or "cuda"); ``shapes`` fixes symbolic input dims.

    ``records`` (tuning logs) is accepted for the tuner's ``apply_history_best`` and
    not yet used: every kernel takes the generic schedule.
    """
    graph = model if isinstance(model, Graph) else _import(model, shapes)
    tgt = Target.parse(target)
    for v in graph.inputs:
        if not v.type.is_static:
            raise ArgumentError(
                f"input '{v.name}' has symbolic shape {v.type}; "
                "pass shapes={name: shape} to compile or from_onnx"
            )
    steps = [_node_step(graph, node, tgt) for node in graph.nodes]
    return CompiledModel(graph, steps, str(tgt))


def _import(model: Any, shapes: Any) -> Graph:
    from ember.frontend.onnx_import.importer import from_onnx

    return from_onnx(model, shapes)


def _node_step(graph: Graph, node: Any, tgt: Target) -> Step:
    from ember.kernels import get_kernel

    if node.subgraphs:  # If / Loop: runs on the host over compiled subgraphs
        from ember.control_flow import control_step

        return control_step(graph, node, tgt)
    in_types = [graph.values[i].type for i in node.inputs]
    try:
        kernel = get_kernel(node.op, node.attrs, in_types, tgt)
    except EmberError as e:
        raise e.add_context(f"while compiling {node.where()}") from None
    return Step(kernel, node.inputs, node.outputs, node.where())
