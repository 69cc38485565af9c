"""``ember.extract_tasks``: the tuning tasks behind a model's graph kernels.

Sits on top, beside ``ember.compile``: it imports the model the same way (ONNX path,
``ModelProto`` or :class:`~ember.frontend.graph.Graph`), runs the same graph passes,
and asks the target's strategy (``codegen_llvm/strategy.py``, or for CUDA
``codegen_cuda/strategy.py``) which template task each node's kernel takes:
convolutions the conv strategy takes become ``conv2d_nchw.llvm`` tasks, ``dense_packed``
GEMMs ``matmul.llvm`` tasks, fp16/bf16 GEMMs on CUDA ``matmul_tensorcore.cuda`` ones. The tuner
cannot do this itself (it never imports the graph compiler or a code generator), so
the result is a plain list that :func:`ember.tuner.tune_tasks` takes.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from ember.errors import ArgumentError
from ember.target import Target


@dataclass
class ModelTask:
    """A distinct tuning task of a model and how many of its kernels use it."""

    task: Any
    weight: int
    nodes: list[str]


def extract_tasks(
    model: Any,
    target: str | Target = "llvm",
    shapes: Any = None,
    graph_passes: Sequence[Any] | None = None,
) -> list[ModelTask]:
    """The distinct template tasks behind ``model``'s kernels for ``target``, in graph
    order, each with its weight (the number of nodes that run it). CPU (``llvm``) and
    ``cuda`` targets have a strategy table; another target gives ``ArgumentError``."""
    from ember.conv_layout import default_graph_passes
    from ember.frontend.graph import Graph
    from ember.frontend.passes import run_graph_passes
    from ember.tuner.task import create_task

    tgt = Target.parse(target)
    if tgt.kind not in ("llvm", "cuda"):
        raise ArgumentError(
            f"extract_tasks: only llvm and cuda targets have tunable graph kernels, not {tgt}"
        )
    if isinstance(model, Graph) and shapes:
        raise ArgumentError("shapes= applies when importing; a Graph's shapes are already fixed")
    if isinstance(model, Graph):
        graph = model
    else:
        from ember.frontend.onnx_import.importer import from_onnx

        graph = from_onnx(model, shapes)
    _require_static_inputs(graph)
    passes = default_graph_passes(tgt.kind) if graph_passes is None else graph_passes
    graph = run_graph_passes(graph, passes)
    found: dict[tuple[str, str], ModelTask] = {}
    for node, name, args in _node_tasks(graph, tgt):
        from ember.tuner.task import workload_key

        key = (name, workload_key(name, args))
        if key not in found:
            found[key] = ModelTask(create_task(name, args, tgt), 0, [])
        found[key].weight += 1
        found[key].nodes.append(node.name)
    return list(found.values())


def _require_static_inputs(graph: Any) -> None:
    """Tasks are per shape: a symbolic input would leave its kernels out unseen."""
    from ember.frontend.graph import SHAPES_HINT

    loose = [f"'{v.name}' {v.type}" for v in graph.inputs if not v.type.is_static]
    if loose:
        raise ArgumentError(
            f"extract_tasks: input {', '.join(loose)} has symbolic dims; tuning needs the "
            f"shapes the model will run at {SHAPES_HINT}"
        )


def _node_tasks(graph: Any, tgt: Target) -> list[tuple[Any, str, tuple[Any, ...]]]:
    out = []
    for node in graph.nodes:
        if node.subgraphs:
            continue  # If/Loop bodies are compiled on their own; not tuned here
        in_types = [graph.values[i].type for i in node.inputs]
        if any(not t.is_static for t in in_types):
            continue
        hit = _task_for(tgt, node.op, in_types, node.attrs)
        if hit is not None:
            out.append((node, *hit))
    return out


def _task_for(
    tgt: Target, op: str, in_types: list[Any], attrs: dict[str, Any]
) -> tuple[str, tuple[Any, ...]] | None:
    """The task of the target kind's strategy table (CUDA's depends on the architecture)."""
    if tgt.kind == "cuda":
        from ember.codegen_cuda import strategy as cuda_strategy

        return cuda_strategy.task_for(op, in_types, attrs, tgt.arch)
    from ember.codegen_llvm.strategy import task_for

    return task_for(op, in_types, attrs)
