"""``ember.compile``: a model (Graph, ONNX ModelProto or path, ``torch.export`` program) to a
runnable CompiledModel.

Read top to bottom, this file is the model compiler; every target question goes to the
target's :class:`~ember.backend.Backend`, made once at the top and passed down:

1. import: an ONNX model becomes a :class:`~ember.frontend.graph.Graph` (``frontend/
   onnx_import``); a model whose inputs keep a symbolic dim becomes a
   :class:`~ember.graph.dynamic_model.DynamicModel` instead, which runs steps 2-5 per
   size on first use, as does a model that feeds a shape (a Reshape's) at run time, per
   value; an exported PyTorch program is traced to a Graph (``frontend/torch``), per
   binding of its symbolic sizes where it has them;
2. graph passes: the backend's list (``frontend/passes`` with its own among them:
   the CPU's convolution layout), fusion last, under the tuning records in force;
3. strategies: each fused group's nodes take the backend's compute where it has one;
4. kernels: each group is scheduled by the backend and built (``kernels.py``, cached
   per workload in memory and on disk); control-flow nodes compile their subgraphs
   with these same steps (``control_flow.py``);
5. plan: the executor (``executor.py``) plans memory once and runs the steps in order.

``ember.extract_tasks`` (``model_tuning.py``) runs steps 1-2 and asks the backend for
each node's tuning task instead of building.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable, Iterator, Sequence
from typing import Any

from ember import config
from ember.backend import Backend, get_backend
from ember.driver import target_passes
from ember.errors import ArgumentError, EmberError, NeedsConstantError
from ember.frontend.graph import Graph, Node, check_size
from ember.frontend.onnx_import.importer import from_onnx, load_model, read_model_file
from ember.frontend.passes import DEFAULT_PASSES, run_graph_passes
from ember.frontend.passes.graph_pass import GraphFn, as_graph_pass
from ember.frontend.torch import from_exported
from ember.frontend.torch.source import exported_source, is_exported_program
from ember.graph import kernel_cache
from ember.graph.control_flow import control_step
from ember.graph.dynamic_model import DynamicModel
from ember.graph.executor import CompiledModel
from ember.graph.groups import GroupIO, fused_groups, group_io
from ember.graph.kernels import context_key, get_group_kernel, node_group
from ember.graph.model_cache import cached_model, model_key
from ember.graph.model_source import OnnxSource, symbolic_source
from ember.graph.parallel_build import prebuild
from ember.graph.step import Step, empty_kernel
from ember.target import Target
from ember.tir.transform.context import PassContext
from ember.tir.transform.pipeline import Pass, check_disabled
from ember.tuner.dispatch import active_fingerprint, apply_history_best

SubgraphCompiler = Callable[[Graph], "CompiledModel | DynamicModel"]
"""How control flow compiles its subgraphs: the driver's own steps, handed down."""


def compile(
    model: Any,
    target: str | Target | Backend = "llvm",
    records: Any = None,
    shapes: Any = None,
    graph_passes: Sequence[Pass | GraphFn] | None = None,
) -> CompiledModel | DynamicModel:
    """Compile ``model`` for ``target`` ("llvm", "cuda", or any registered backend);
    ``shapes`` fixes symbolic input dims.

    An input dim left symbolic (a batch ``"N"``) gives a :class:`~ember.graph.dynamic_model.
    DynamicModel` instead: it runs on any size of that dim, compiling (and caching) a
    CompiledModel per size on its first run (see ``dynamic_model.py`` for why). So does a
    model with sequence or optional inputs or outputs: its run takes and gives lists of
    arrays and None, compiling per length of its sequence inputs (``structured_io.py``).

    ``records`` (a tuning records file or files): kernels whose node has a tuning task
    (convolutions on the ``conv2d_nchw.llvm`` template) take the best recorded config
    of their task for this target, else the template's fallback; an enclosing
    ``apply_history_best`` block works the same way (a ``conv2d_NCHWc.llvm`` record
    also chooses its convolution's channel blocks). ``graph_passes`` replaces the
    backend's list (``()`` compiles one kernel per node).

    A ``torch.export.ExportedProgram`` is traced to core ATen ops at its example inputs,
    its weights constants; exported with ``dynamic_shapes``, its symbols (``s0``) are
    the DynamicModel's symbolic dims, each size traced and compiled on first use, and a
    size outside the range it was exported for is refused.

    An ONNX file compiled for the CPU is kept whole in the disk cache (``model_cache.py``):
    a later compile of the same bytes, target, shapes, records and PassContext options, in
    any process, loads it (see :func:`_model_cache_key` for what always compiles).
    """
    backend = get_backend(target)
    if is_exported_program(model):
        if shapes:
            raise ArgumentError("shapes= applies to ONNX models; export the program at its sizes")
        traced = exported_source(model)
        if traced is None:
            return compile_graph(from_exported(model), backend, records, graph_passes)
        return DynamicModel(traced, backend.target, records, graph_passes, compile_graph)
    if isinstance(model, Graph) and shapes:
        raise ArgumentError("shapes= applies when importing; a Graph's shapes are already fixed")
    if isinstance(model, (str, os.PathLike)) and graph_passes is None:
        data = read_model_file(model)  # read once: the key names what is compiled
        key = _model_cache_key(data, backend, records, shapes)
        if key is not None:  # a whole model this machine compiled before, from disk
            return cached_model(
                key, lambda: _compile_model(load_model(model, data), backend, records, shapes, None)
            )
        model = load_model(model, data)
    return _compile_model(model, backend, records, shapes, graph_passes)


def _compile_model(
    model: Any,
    backend: Backend,
    records: Any,
    shapes: Any,
    graph_passes: Sequence[Pass | GraphFn] | None,
) -> CompiledModel | DynamicModel:
    """Steps 1-5 for an ONNX model (path, bytes, ModelProto) or a Graph."""
    model = model if isinstance(model, Graph) else load_model(model)  # 1. import
    source = symbolic_source(model, shapes)
    if source is None:
        try:
            graph = model if isinstance(model, Graph) else from_onnx(model, shapes)
        except NeedsConstantError as e:  # a shape fed at run time: steps 2-5 per value
            source = OnnxSource(model, dict(shapes or {}))
            if not source.learn_value_inputs(e):
                raise
        else:
            if graph.interface is None or isinstance(model, Graph):  # a Graph runs flat
                return compile_graph(graph, backend, records, graph_passes)
            # sequences or optionals the file does not declare: run as lists, per layout
            source = OnnxSource(model, dict(shapes or {}))
    # a symbolic dim, a value input, a sequence or optional: steps 2-5 per size (and value,
    # and layout), on first use
    return DynamicModel(source, backend.target, records, graph_passes, compile_graph)


# An ONNX tensor whose data lives in another file names it in an entry keyed "location"
# (field 1 of a StringStringEntryProto: tag 0x0a, length 8). A file holding these bytes may
# read weights the file's own bytes do not show, so its compile is not cached whole.
_EXTERNAL_DATA = b"\x0a\x08location"


def _model_cache_key(data: bytes, backend: Backend, records: Any, shapes: Any) -> str | None:
    """The whole-model disk cache's key for compiling the ONNX file ``data`` here (see
    ``model_cache.py``), or None where the compile must run: the cache is off or does not
    hold this backend's code, passes are dumped or observed, or weights live outside the
    file. The key holds everything else a compiled model depends on: the file's bytes, the
    target and the machine its code is built for, ``shapes``, the PassContext's options, and
    the tuning records in force (``records`` and enclosing ``apply_history_best`` blocks)."""
    machine = backend.disk_cache_key()
    ctx = PassContext.current()
    if (
        machine is None
        or not config.disk_cache_enabled()
        or config.dump_dir() is not None
        or ctx.instruments
        or ctx.get("tir.add_lower_pass")
        or _EXTERNAL_DATA in data
    ):
        return None
    with _records(records, backend.target):
        chosen = active_fingerprint()
    parts = [str(backend.target), machine, repr(shapes), repr(context_key()), repr(chosen)]
    return model_key(["onnx", data, *parts])


def compile_graph(
    graph: Graph,
    target: str | Target | Backend,
    records: Any = None,
    graph_passes: Sequence[Pass | GraphFn] | None = None,
) -> CompiledModel:
    """Steps 2-5 on an imported graph of static shapes (what a DynamicModel runs per size)."""
    backend = get_backend(target)
    _check_sizes(graph)
    passes = [as_graph_pass(p) for p in _graph_passes(backend, graph_passes)]
    ctx = PassContext.current()  # names it disables must be passes this compile can run
    check_disabled(ctx, [*target_passes(backend.target, ctx), *passes], str(backend.target))
    try:
        # the target in scope: templates and layout passes size tiles by its registers
        with _records(records, backend.target), backend.target:
            graph = optimize(graph, backend, passes)  # 2. graph passes, fusion last

            def compile_subgraph(sub: Graph) -> CompiledModel | DynamicModel:
                return compile(sub, backend, None, None, graph_passes)

            groups = fused_groups(graph)
            prebuild(_kernel_jobs(graph, groups), backend)  # missing kernels, on every core
            steps = [  # 3-4. strategies and kernels, one per fused group
                _group_step(graph, group, backend, compile_subgraph) for group in groups
            ]
    finally:  # the disk cache holds the kernels built once compile returns or raises
        kernel_cache.flush()
    try:
        return CompiledModel(graph, steps, backend.target)  # 5. plan
    except MemoryError as e:  # the memory plan's buffers: one allocation failed
        raise ArgumentError(
            f"the model needs {_model_bytes(graph) / 2**30:.1f} GiB for its inputs, outputs "
            "and intermediates, more than this machine could allocate; use smaller shapes"
        ) from e


def optimize(
    graph: Graph, backend: Backend, graph_passes: Sequence[Pass | GraphFn] | None = None
) -> Graph:
    """Step 2: the backend's graph passes (or ``graph_passes``), fusion among them."""
    with backend.target:
        return run_graph_passes(graph, _graph_passes(backend, graph_passes))


def _graph_passes(
    backend: Backend, graph_passes: Sequence[Pass | GraphFn] | None
) -> Sequence[Pass | GraphFn]:
    return backend.graph_passes(DEFAULT_PASSES) if graph_passes is None else graph_passes


def import_model(model: Any, shapes: Any = None) -> Graph:
    """Step 1 for a model of static shapes: a Graph as it is, else the ONNX model imported."""
    if isinstance(model, Graph):
        if shapes:
            raise ArgumentError(
                "shapes= applies when importing; a Graph's shapes are already fixed"
            )
        return model
    return from_onnx(load_model(model), shapes)


def _check_sizes(graph: Graph) -> None:
    """Refuse a value no machine can hold (a Graph built by hand or by ``nn`` reaches here
    without the importer's checks)."""
    for name, value in graph.values.items():
        check_size(value.type, f"value '{name}'")


def _model_bytes(graph: Graph) -> int:
    """Bytes of every static value of ``graph`` (an upper bound of what the plan allocates)."""
    return sum(v.type.nbytes for v in graph.values.values() if v.type.is_static)


@contextlib.contextmanager
def _records(records: Any, tgt: Target) -> Iterator[None]:
    """A block using the best records of ``records`` for ``tgt`` (nothing without any)."""
    if records is None:
        yield
        return
    with apply_history_best(records, target=tgt):
        yield


def _kernel_job(graph: Graph, nodes: list[Node]) -> GroupIO | None:
    """What a group's kernel is built from, as ``kernels.py`` is asked for it (a single
    node's values renamed by position, so repeated layers share one kernel); None where
    no kernel is built: control flow (its subgraphs are compiled on their own) and a group
    whose outputs are all empty."""
    if len(nodes) > 1:
        io = group_io(graph, nodes)
        return None if all(io.types[o].size == 0 for o in io.outputs) else io
    node = nodes[0]
    if node.subgraphs or all(graph.values[o].type.size == 0 for o in node.outputs):
        return None
    return node_group(node.op, node.attrs, [graph.values[i].type for i in node.inputs])


def _kernel_jobs(graph: Graph, groups: list[list[Node]]) -> list[GroupIO]:
    """The kernels :func:`_group_step` will ask for (a group whose kernel cannot even be
    asked for is left to it, which reports where)."""
    jobs = []
    for nodes in groups:
        with contextlib.suppress(EmberError):
            job = _kernel_job(graph, nodes)
            if job is not None:
                jobs.append(job)
    return jobs


def _group_step(
    graph: Graph, nodes: list[Node], backend: Backend, compile_subgraph: SubgraphCompiler
) -> Step:
    first = nodes[0]
    if len(nodes) == 1 and first.subgraphs:  # If / Loop / Scan: on the host, over subgraphs
        return control_step(graph, first, compile_subgraph)
    if len(nodes) == 1:
        inputs, outputs, where = first.inputs, first.outputs, first.where()
        context = f"while compiling {where}"
    else:
        io = group_io(graph, nodes)
        inputs, outputs = io.inputs, io.outputs
        where = f"fused group of {', '.join(n.where() for n in nodes)}"
        context = f"while compiling the {where}"
    try:
        job = _kernel_job(graph, nodes)
        if job is None:  # empty results
            return Step(empty_kernel, tuple(inputs), tuple(outputs), where)
        kernel = get_group_kernel(job.nodes, job.inputs, job.outputs, job.types, backend)
    except EmberError as e:
        raise e.add_context(context) from None
    return Step(kernel, tuple(inputs), tuple(outputs), where)
