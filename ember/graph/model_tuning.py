"""``ember.extract_tasks``: the tuning tasks behind a model's graph kernels.

Sits on top, beside ``ember.compile``: it runs the compile driver's first two steps
(import, the backend's graph passes: ``compile.py``) and asks the target's backend
(its strategy) which template task each node's kernel takes:
convolutions the conv strategy takes become ``conv2d_nchw.llvm`` tasks, ``dense_packed``
GEMMs ``matmul.llvm`` tasks, fp16/bf16 GEMMs on CUDA ``matmul_tensorcore.cuda`` ones. The tuner
cannot do this itself (it never imports the graph compiler or a code generator), so
the result is a plain list that :func:`ember.tuner.tune_tasks` takes.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from ember.backend import Backend, get_backend
from ember.errors import ArgumentError
from ember.frontend.graph import SHAPES_HINT, Graph
from ember.graph.compile import import_model, optimize
from ember.target import Target
from ember.tuner.task import create_task, workload_key


@dataclass
class ModelTask:
    """A distinct tuning task of a model and how many of its kernels use it."""

    task: Any
    weight: int
    nodes: list[str]


def extract_tasks(
    model: Any,
    target: str | Target | Backend = "llvm",
    shapes: Any = None,
    graph_passes: Sequence[Any] | None = None,
) -> list[ModelTask]:
    """The distinct template tasks behind ``model``'s kernels for ``target``, in graph
    order, each with its weight (the number of nodes that run it). A target whose
    backend has no tuning tasks gives ``ArgumentError``."""
    backend = get_backend(target)
    if not _has_tasks(backend):
        raise ArgumentError(f"extract_tasks: target {backend.target} has no tunable graph kernels")
    graph = import_model(model, shapes)  # 1. import
    _require_static_inputs(graph)
    graph = optimize(graph, backend, graph_passes)  # 2. the same graph passes as compile
    found: dict[tuple[str, str], ModelTask] = {}
    for node, name, args in _node_tasks(graph, backend):
        key = (name, workload_key(name, args))
        if key not in found:
            found[key] = ModelTask(create_task(name, args, backend.target), 0, [])
        found[key].weight += 1
        found[key].nodes.append(node.name)
    return list(found.values())


def _has_tasks(backend: Backend) -> bool:
    """Whether the backend names tuning tasks at all (a target without any is refused,
    rather than reported as a model with nothing to tune)."""
    return backend.strategy is not None or type(backend).task_for is not Backend.task_for


def _require_static_inputs(graph: Graph) -> None:
    """Tasks are per shape: a symbolic input would leave its kernels out unseen."""
    loose = [f"'{v.name}' {v.type}" for v in graph.inputs if not v.type.is_static]
    if loose:
        raise ArgumentError(
            f"extract_tasks: input {', '.join(loose)} has symbolic dims; tuning needs the "
            f"shapes the model will run at {SHAPES_HINT}"
        )


def _node_tasks(graph: Graph, backend: Backend) -> list[tuple[Any, str, tuple[Any, ...]]]:
    out = []
    for node in graph.nodes:
        if node.subgraphs:
            continue  # If/Loop bodies are compiled on their own; not tuned here
        in_types = [graph.values[i].type for i in node.inputs]
        if any(not t.is_static for t in in_types):
            continue
        hit = backend.task_for(node.op, in_types, node.attrs)
        if hit is not None:
            out.append((node, *hit))
    return out
