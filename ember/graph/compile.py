"""``ember.compile``: a model (Graph, ONNX ModelProto or path) to a runnable CompiledModel.

The flow, top to bottom: import the model (``frontend/onnx_import``) unless it is
already a :class:`~ember.frontend.graph.Graph`; hand a model whose inputs keep a
symbolic dim to ``ember/dynamic_model.py`` (compiled per size on first use); build
one kernel per node (``ember/kernels.py``: the op's compute under the target's
generic schedule, cached per workload); hand the kernels to the executor
(``ember/executor.py``), which plans memory once and calls them in order. Graph
passes (folding, fusion) will run between import and kernel building.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ember.errors import ArgumentError, EmberError, InternalError
from ember.frontend.graph import Graph, check_size
from ember.graph import kernel_cache
from ember.graph.dynamic_model import DynamicModel, symbolic_source
from ember.graph.executor import CompiledModel, Step
from ember.target import Target


def compile(
    model: Any,
    target: str | Target = "llvm",
    records: Any = None,
    shapes: Any = None,
    graph_passes: Sequence[Any] | None = None,
) -> CompiledModel | DynamicModel:
    """Compile ``model`` for ``target`` ("llvm" or "cuda"); ``shapes`` fixes symbolic input dims.

    An input dim left symbolic (a batch ``"N"``) gives a :class:`~ember.graph.dynamic_model.
    DynamicModel` instead: it runs on any size of that dim, compiling (and caching) a
    CompiledModel per size on its first run (see ``ember/dynamic_model.py`` for why).

    ``records`` (a tuning records file or files): kernels whose node has a tuning task
    (convolutions on the ``conv2d_nchw.llvm`` template) take the best recorded config
    of their task for this target, else the template's fallback; an enclosing
    ``apply_history_best`` block works the same way (a ``conv2d_NCHWc.llvm`` record
    also chooses its convolution's channel blocks). ``graph_passes`` replaces
    ``ember.conv_layout.default_graph_passes(target)`` (``()`` compiles one kernel per node).
    """
    from ember.conv_layout import default_graph_passes
    from ember.frontend.passes import run_graph_passes

    if isinstance(model, Graph) and shapes:
        raise ArgumentError("shapes= applies when importing; a Graph's shapes are already fixed")
    tgt = Target.parse(target)
    if not isinstance(model, Graph):
        model = _load_onnx(model)
    source = symbolic_source(model, shapes)
    if source is not None:  # a symbolic dim: compiled per size on first use
        return DynamicModel(source, str(tgt), records, graph_passes)
    graph = model if isinstance(model, Graph) else _import(model, shapes)
    _check_sizes(graph)
    passes = default_graph_passes(tgt.kind) if graph_passes is None else graph_passes
    with _records(records, tgt):
        graph = run_graph_passes(graph, passes)
        steps = [_group_step(graph, group, tgt) for group in _groups(graph)]
    kernel_cache.flush()  # the disk cache holds this model's kernels once compile returns
    try:
        return CompiledModel(graph, steps, str(tgt))
    except MemoryError as e:  # the memory plan's buffers: one allocation failed
        raise ArgumentError(
            f"the model needs {_model_bytes(graph) / 2**30:.1f} GiB for its inputs, outputs "
            "and intermediates, more than this machine could allocate; use smaller shapes"
        ) from e


def _check_sizes(graph: Graph) -> None:
    """Refuse a value no machine can hold (a Graph built by hand or by ``nn`` reaches here
    without the importer's checks)."""
    for name, value in graph.values.items():
        check_size(value.type, f"value '{name}'")


def _model_bytes(graph: Graph) -> int:
    """Bytes of every static value of ``graph`` (an upper bound of what the plan allocates)."""
    return sum(v.type.nbytes for v in graph.values.values() if v.type.is_static)


def _records(records: Any, tgt: Target) -> Any:
    """A block using the best records of ``records`` for ``tgt`` (nothing without any)."""
    import contextlib

    if records is None:
        return contextlib.nullcontext()
    from ember.tuner.dispatch import apply_history_best

    return apply_history_best(records, target=tgt)


def _groups(graph: Graph) -> list[list[Any]]:
    """The nodes of each fused group (a node without a group is a group of its own), the
    groups in an order that runs each after the groups it reads from (topological over
    groups; ties by first node)."""
    members: dict[Any, list[Any]] = {}
    for k, node in enumerate(graph.nodes):
        key = ("g", node.group) if node.group is not None else ("n", k)
        members.setdefault(key, []).append(node)
    keys = list(members)
    group_of = {o: key for key, nodes in members.items() for n in nodes for o in n.outputs}
    needs = {
        key: {group_of[i] for n in nodes for i in n.inputs if i in group_of} - {key}
        for key, nodes in members.items()
    }
    order: list[list[Any]] = []
    done: set[Any] = set()
    while len(order) < len(keys):
        ready = [k for k in keys if k not in done and needs[k] <= done]
        if not ready:
            raise InternalError("fused groups depend on each other in a cycle")
        done.add(ready[0])
        order.append(members[ready[0]])
    return order


def _load_onnx(model: Any) -> Any:
    from ember.frontend.onnx_import.importer import load_model

    return load_model(model)


def _import(model: Any, shapes: Any) -> Graph:
    from ember.frontend.onnx_import.importer import from_onnx

    return from_onnx(model, shapes)


def _nothing(*arrays: Any) -> None:
    """The kernel of a node whose outputs have no elements: there is nothing to write."""


def _group_step(graph: Graph, nodes: list[Any], tgt: Target) -> Step:
    from ember.graph.kernels import get_group_kernel

    if len(nodes) == 1:
        return _node_step(graph, nodes[0], tgt)
    made = {o for n in nodes for o in n.outputs}
    inputs = list(dict.fromkeys(i for n in nodes for i in n.inputs if i not in made))
    inside = {id(n) for n in nodes}
    read_outside = {i for n in graph.nodes if id(n) not in inside for i in n.inputs}
    read_outside |= set(graph.output_names)
    outputs = [o for n in nodes for o in n.outputs if o in read_outside]
    where = f"fused group of {', '.join(n.where() for n in nodes)}"
    types = {v: graph.values[v].type for v in (*inputs, *made)}
    if all(types[o].size == 0 for o in outputs):
        return Step(_nothing, tuple(inputs), tuple(outputs), where)
    try:
        kernel = get_group_kernel(nodes, inputs, outputs, types, tgt)
    except EmberError as e:
        raise e.add_context(f"while compiling the {where}") from None
    return Step(kernel, tuple(inputs), tuple(outputs), where)


def _node_step(graph: Graph, node: Any, tgt: Target) -> Step:
    from ember.graph.kernels import get_kernel

    if node.subgraphs:  # If / Loop: runs on the host over compiled subgraphs
        from ember.graph.control_flow import control_step

        return control_step(graph, node, tgt)
    in_types = [graph.values[i].type for i in node.inputs]
    if all(graph.values[o].type.size == 0 for o in node.outputs):
        return Step(_nothing, node.inputs, node.outputs, node.where())  # empty results
    try:
        kernel = get_kernel(node.op, node.attrs, in_types, tgt)
    except EmberError as e:
        raise e.add_context(f"while compiling {node.where()}") from None
    return Step(kernel, node.inputs, node.outputs, node.where())
