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

import functools
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from ember.backend import Backend, get_backend
from ember.errors import ArgumentError, EmberError
from ember.frontend.graph import SHAPES_HINT, Graph
from ember.graph.compile import import_model, optimize
from ember.graph.group_tasks import auto_schedulable, group_task
from ember.graph.groups import fused_groups, group_io, group_spec
from ember.target import Target
from ember.tuner.task import create_task, workload_key


@dataclass
class ModelTask:
    """A distinct tuning task of a model and how many of its kernels use it."""

    task: Any
    weight: int
    nodes: list[str]


SEARCHES = ("templates", "auto", "both")


def extract_tasks(
    model: Any,
    target: str | Target | Backend = "llvm",
    shapes: Any = None,
    graph_passes: Sequence[Any] | None = None,
    search: str = "templates",
) -> list[ModelTask]:
    """The distinct tuning tasks behind ``model``'s kernels for ``target``, in graph
    order, each with its weight (the number of nodes or groups that run it).

    ``search``: ``"templates"`` (the template task of each node a strategy takes),
    ``"auto"`` (every fused group as an auto-scheduling task, :mod:`.group_tasks`) or
    ``"both"``. A target whose backend has no tuning tasks gives ``ArgumentError``."""
    if search not in SEARCHES:
        raise ArgumentError(f"extract_tasks: search must be one of {SEARCHES}, got {search!r}")
    backend = get_backend(target)
    if not _has_tasks(backend):
        raise ArgumentError(f"extract_tasks: target {backend.target} has no tunable graph kernels")
    graph = import_model(model, shapes)  # 1. import
    _require_static_inputs(graph)
    graph = optimize(graph, backend, graph_passes)  # 2. the same graph passes as compile
    found: dict[tuple[str, str], ModelTask] = {}
    if search in ("templates", "both"):
        for node, name, args in _node_tasks(graph, backend):
            _count(
                found,
                (name, workload_key(name, args)),
                [node.name],
                functools.partial(create_task, name, args, backend.target),
            )
    if search in ("auto", "both"):
        for nodes in fused_groups(graph):
            if any(n.subgraphs for n in nodes):
                continue  # If/Loop bodies are compiled on their own; not tuned here
            io = group_io(graph, nodes)
            key = ("auto", group_spec(io))
            if key not in found:
                if not auto_schedulable(io, backend):
                    continue
                try:
                    found[key] = ModelTask(group_task(io, backend), 0, [])
                except EmberError:  # no sketch fits (an extern kernel): the group stays untuned
                    continue
            found[key].weight += 1
            found[key].nodes.extend(n.name for n in nodes)
    return list(found.values())


def _count(
    found: dict[tuple[str, str], ModelTask],
    key: tuple[str, str],
    nodes: list[str],
    make: Callable[[], Any],
) -> None:
    if key not in found:
        found[key] = ModelTask(make(), 0, [])
    found[key].weight += 1
    found[key].nodes.extend(nodes)


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
