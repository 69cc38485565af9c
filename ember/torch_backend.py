"""The ``ember`` backend of ``torch.compile``: each graph Dynamo captures runs compiled by
Ember.

``torch.compile(model, backend="ember", options={"target": "llvm", "records": path})``.
Dynamo hands over each captured graph (between graph breaks) with example inputs. A graph
with static sizes is traced per distinct input signature (shapes and dtypes) to core ATen
ops (:func:`ember.frontend.torch.from_module`, its parameters constants), compiled with
:func:`ember.compile` and kept. A graph Dynamo captures with symbolic sizes (its automatic
dynamic shapes, after a size changed) becomes a
:class:`~ember.graph.dynamic_model.DynamicModel` whose symbolic dims are Dynamo's symbols
(``s0``, ``frontend/torch/source.py``): each new binding is traced and compiled once, every
size shares one copy of the weights, and Dynamo's own guards decide when a graph no longer
applies (it captures another). Compiles are counted in :data:`STATS`; a binding that traces
to the same Ember graph as one compiled before (the first size, compiled for the static
graph that Dynamo no longer tries first) reuses that model (``STATS["shared"]``).
The parameters and buffers Dynamo lifts into graph inputs are taken as constants when a
specialisation is compiled (as inductor's freezing does): a model whose weights change
afterwards must be compiled again. So are the Python numbers it passes as 0-dim tensors
(a module's floats under ``dynamic=True``), at each call's values: a new value compiles a
specialisation of its own. The backend compiles for
inference: its outputs carry no gradient, and a graph first called with gradients on and
tensors that want them warns once that it gives none. A graph holding an op Ember
cannot import runs eagerly, with a warning that lists the ops and where they are, so
results stay right. Tensors cross by DLPack (``np.from_dlpack`` in, ``torch.from_dlpack``
out: no copies at the boundary) for an ``llvm`` target, which refuses tensors on other
devices with the reason. ``target="cuda"`` compiles the graph's kernels for the GPU
(NVRTC) and copies the tensors through host memory, outputs returned on the inputs'
device; zero-copy device tensors are not wired yet.

``mode="max-autotune"`` (or ``options={"tune": N}``) tunes each graph's kernels before it
is compiled: every fused group and template task (``extract_tasks(search="both")``) under
one budget of ``N`` measured candidates (:data:`AUTOTUNE_TRIALS` for the mode), then the
records that make the graph slower are dropped (``check_records``) — into
``options["records"]``, else a records file of that graph in the cache folder.
Compiled graphs are kept on disk (``ember/graph/model_cache.py``) under a key hashed from
the FX graph's code, every tensor it reads, the input signature, the target and the
records, so a second process loads the model instead of tracing and compiling it (and a
tuned graph is not tuned again). A symbolic graph's sizes are kept under the traced Ember
graph's content instead: a second process traces each size again, but does not compile
it. ``options={"cache": False}`` or ``EMBER_DISK_CACHE=0``
turns that off.
"""

from __future__ import annotations

import warnings
import weakref
from collections import Counter
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

# the rest of Ember is imported inside the functions (a start-up cost): PyTorch imports
# this module through its entry point whenever it lists its backends
from ember.errors import ArgumentError, UnsupportedOperatorError

STATS: Counter[str] = Counter()  # "graphs", "compiles", "eager graphs", "runs", "tuned", "shared"
# Compiled models by the content of the Ember graph traced at one signature: Dynamo may hand
# over a second graph for the same code (with sizes made symbolic after a size change) and
# try it first, and the size it traces there was already compiled for the first graph.
# Weak: an entry lives as long as some graph's specialisations hold it.
_BY_CONTENT: weakref.WeakValueDictionary[str, Any] = weakref.WeakValueDictionary()
OPTIONS = ("target", "records", "tune", "cache")
AUTOTUNE_MODES = ("max-autotune", "max-autotune-no-cudagraphs")
AUTOTUNE_TRIALS = 64  # measured candidates per graph under mode="max-autotune"


def _signature(args: Sequence[Any]) -> tuple[Any, ...]:
    """What a compiled specialisation is kept by: each tensor's shape and dtype, each
    number (a size Dynamo passes for a dynamic dim) by value."""
    return tuple(a if _number(a) else (tuple(int(d) for d in a.shape), str(a.dtype)) for a in args)


def _number(value: Any) -> bool:
    return isinstance(value, (int, float, bool))


def _weight(value: Any) -> bool:
    """Whether Dynamo passes ``value`` as a lifted parameter or buffer (what it marks
    static) rather than as the caller's input."""
    import torch  # optional dependency: present whenever Dynamo calls the backend

    return isinstance(value, torch.nn.Parameter) or (
        getattr(value, "_dynamo_static_input_type", None) is not None
    )


def _passed_as_tensor(node: Any) -> bool:
    """Whether Dynamo passes this placeholder's Python number as a 0-dim tensor (a module's
    float, such as a LayerNorm's eps or a dropout rate, under ``dynamic=True``): the graph
    reads it with ``.item()``, which ``make_fx`` cannot trace."""
    return bool(getattr(node.meta.get("grapharg"), "pass_arg_as_tensor", False))


def _frozen(
    gm: Any, example_inputs: Sequence[Any]
) -> tuple[Callable[[Sequence[Any]], Callable[..., Any]], list[int], list[int]]:
    """``gm`` as a function of the caller's tensors alone: the weights Dynamo lifted into
    inputs closed over (``make_fx`` then records them as constants, so batch norms fold
    and weights are packed at compile time: MobileNetV2 ran 3x slower with them as
    inputs), and so are the numbers it passes as 0-dim tensors, at the values of the call
    being compiled (a specialisation is kept per value). Returns the function of those
    numbers that makes it, and the positions of the inputs it keeps and of the numbers."""
    nodes = [n for n in gm.graph.nodes if n.op == "placeholder"]
    weights = {i: v for i, v in enumerate(example_inputs) if _weight(v)}
    numbers = [i for i, n in enumerate(nodes) if i not in weights and _passed_as_tensor(n)]
    keep = [i for i in range(len(example_inputs)) if i not in weights and i not in numbers]

    def freeze(values: Sequence[Any]) -> Callable[..., Any]:
        # copies: the caller's tensors are not ours to keep
        fixed = {**weights, **{i: v.detach().clone() for i, v in zip(numbers, values)}}

        def call(*args: Any) -> Any:
            full, it = [], iter(args)
            for i in range(len(example_inputs)):
                full.append(fixed[i] if i in fixed else next(it))
            return gm(*full)

        return call

    return freeze, keep, numbers


def ember_backend(gm: Any, example_inputs: Sequence[Any], **kwargs: Any) -> Callable[..., Any]:
    """Dynamo's backend entry point (registered as ``"ember"``); ``mode`` and ``options``
    of ``torch.compile`` arrive as keywords."""
    from ember.frontend.torch.importer import from_module
    from ember.graph.model_cache import cached_model

    options = dict(kwargs.get("options") or {})
    unknown = set(options) - set(OPTIONS)
    if unknown:
        raise ArgumentError(f"backend 'ember': unknown options {sorted(unknown)}; known {OPTIONS}")
    target = options.get("target", "llvm")
    on_gpu = str(target).startswith("cuda")
    if not on_gpu and not str(target).startswith("llvm"):
        raise ArgumentError(f"backend 'ember': target {target!r}: use an llvm or cuda target")
    trials = _trials(kwargs.get("mode"), options.get("tune"))
    use_cache = bool(options.get("cache", True))
    STATS["graphs"] += 1
    compiled: dict[tuple[Any, ...], Any] = {}
    eager: list[bool] = []
    warned: list[bool] = []  # the no-gradient warning, once per graph
    freeze, keep, numbers = _frozen(gm, example_inputs)
    as_tuple, n_outputs = _outputs(gm)
    # a symbolic graph's DynamicModel (None: a static graph), per value of the numbers
    dynamic: dict[tuple[Any, ...], Any] = {}

    def build(args: list[Any], fixed: list[Any], key: str) -> Any:
        graph = from_module(freeze(fixed), [a if _number(a) else a.detach() for a in args])
        return _compiled(graph, target, options.get("records"), trials, key)

    def specialisation(args: list[Any], fixed: list[Any], values: tuple[Any, ...]) -> Any:
        """The model compiled for this call's signature (a graph with no symbolic sizes)."""
        signature = (*_signature(args), *values)
        lib = compiled.get(signature)
        if lib is None:
            key = _graph_key(gm, example_inputs, signature, target, options, trials)
            make = lambda: build(args, fixed, key)  # noqa: E731
            lib = cached_model(key, make) if use_cache else make()
            compiled[signature] = lib
        return lib

    def model_for(args: list[Any], fixed: list[Any]) -> Any:
        values = tuple(repr(t.item()) for t in fixed)  # by text: a NaN equals itself
        if values not in dynamic:
            records = options.get("records")
            dynamic[values] = _dynamic_model(
                gm, freeze(fixed), keep, n_outputs, target, records, trials, use_cache
            )
            run.model = dynamic[values]  # type: ignore[attr-defined]
        # a symbolic graph's model binds the sizes from the tensors and compiles each new
        # binding on its first run
        return dynamic[values] or specialisation(args, fixed, values)

    def run(*all_args: Any) -> Any:
        import numpy as np
        import torch  # optional dependency: present whenever Dynamo calls this

        if eager:
            return gm(*all_args)
        if not warned and torch.is_grad_enabled() and _needs_grad(all_args):
            warned.append(True)
            warnings.warn(
                "backend 'ember' compiles for inference: its outputs carry no gradient, so "
                "the parameters of this graph get none from a backward pass; run inference "
                "under torch.no_grad() (or torch.inference_mode()), and train with another "
                "backend",
                UserWarning,
                stacklevel=2,
            )
        args = [all_args[i] for i in keep]
        tensors = [a for a in args if not _number(a)]
        if not on_gpu and any(a.device.type != "cpu" for a in tensors):
            raise ArgumentError("backend 'ember': inputs must be CPU tensors for target llvm")
        try:
            model = model_for(args, [all_args[i] for i in numbers])
            if on_gpu:
                results = _run_on_gpu(model, tensors)
            else:
                outs = model.run([np.from_dlpack(a.detach()) for a in tensors])
                results = [torch.from_dlpack(o) for o in outs]
        except UnsupportedOperatorError as e:
            warnings.warn(f"backend 'ember' runs this graph eagerly: {e}", stacklevel=2)
            STATS["eager graphs"] += 1
            eager.append(True)
            return gm(*all_args)
        STATS["runs"] += 1
        return tuple(results) if as_tuple else results[0]

    run.compiled = compiled  # type: ignore[attr-defined]  # a static graph's, by signature
    run.model = None  # type: ignore[attr-defined]  # a symbolic graph's latest DynamicModel
    return run


def _needs_grad(args: Sequence[Any]) -> bool:
    """Whether a call would give gradients eagerly: a tensor in it requires grad."""
    return any(getattr(a, "requires_grad", False) for a in args)


def _compiled(graph: Any, target: Any, records: Any, trials: int, key: str = "") -> Any:
    """``graph`` (traced at one signature) tuned and compiled, or the model compiled
    before from the same content (another graph of the same code)."""
    import ember  # the package itself: compile

    content = _content_key(graph, target, records, trials)
    lib = _BY_CONTENT.get(content)
    if lib is not None:
        STATS["shared"] += 1
        return lib
    if trials:
        records = records or _records_path(key or content)
        _tune(graph, target, records, trials)
        STATS["tuned"] += 1
    STATS["compiles"] += 1
    lib = ember.compile(graph, target=target, records=records)
    _BY_CONTENT[content] = lib
    return lib


def _dynamic_model(
    gm: Any,
    call: Callable[..., Any],
    keep: list[int],
    n_outputs: int,
    target: Any,
    records: Any,
    trials: int,
    use_cache: bool,
) -> Any:
    """For a graph Dynamo captured with symbolic sizes (``SymInt``), the
    :class:`~ember.graph.dynamic_model.DynamicModel` of ``call`` with those sizes as
    Ember's symbolic dims (``frontend/torch/source.py``); None for a static graph, or one
    whose sizes Ember's dims cannot name, which specialise per call signature."""
    from ember.backend import get_backend
    from ember.frontend.graph import TensorType
    from ember.frontend.torch.source import TorchSource, symbolic_placeholders
    from ember.graph.dynamic_model import DynamicModel
    from ember.graph.model_cache import cached_model

    nodes = [n for n in gm.graph.nodes if n.op == "placeholder"]
    kinds = symbolic_placeholders([nodes[i].meta.get("example_value") for i in keep])
    if kinds is None:
        return None
    names = [nodes[i].name for i, k in zip(keep, kinds) if isinstance(k, TensorType)]
    source = TorchSource(call, kinds, names, n_outputs)

    def compile_traced(graph: Any, *_: Any) -> Any:
        def build() -> Any:
            return _compiled(graph, target, records, trials)

        if not use_cache:
            return build()
        return cached_model(_content_key(graph, target, records, trials), build)

    return DynamicModel(source, get_backend(target).target, records, None, compile_traced)


def _run_on_gpu(lib: Any, tensors: Sequence[Any]) -> list[Any]:
    """Run a model compiled for CUDA: the tensors cross through host memory (a copy each
    way, unlike the CPU path's DLPack views) and the outputs go back to the device the
    inputs were on (the CPU where they were, as with the CUDA emulator)."""
    import torch  # optional dependency: present whenever Dynamo calls this

    device = tensors[0].device if tensors else torch.device("cpu")
    outs = lib.run([a.detach().cpu().numpy() for a in tensors])
    return [torch.from_numpy(o).to(device) for o in outs]


def _trials(mode: Any, tune: Any) -> int:
    """Measured candidates to tune each graph with: ``options["tune"]`` (a count, or True
    for the mode's budget), else :data:`AUTOTUNE_TRIALS` under ``max-autotune``, else 0."""
    if tune is None or tune is False:
        return AUTOTUNE_TRIALS if mode in AUTOTUNE_MODES else 0
    if tune is True:
        return AUTOTUNE_TRIALS
    if isinstance(tune, bool) or not isinstance(tune, int) or tune < 0:
        raise ArgumentError(f"backend 'ember': options['tune'] must be a trial count, got {tune!r}")
    return tune


def _graph_key(
    gm: Any,
    example_inputs: Sequence[Any],
    signature: tuple[Any, ...],
    target: Any,
    options: dict[str, Any],
    trials: int,
) -> str:
    """The disk cache's name for this graph at ``signature``: its code, every tensor it
    reads (the lifted weights and its own attributes), target, tuning budget and the
    records file's content — what the compiled model depends on, found without tracing."""
    import torch  # optional dependency: present whenever Dynamo calls the backend

    from ember.graph.model_cache import model_key

    parts: list[Any] = [gm.code, repr(signature), str(target), f"tune={trials}"]
    tensors = [v for v in example_inputs if _weight(v)]
    tensors += [_attr(gm, n.target) for n in gm.graph.nodes if n.op == "get_attr"]
    for t in tensors:
        if hasattr(t, "detach"):
            flat = t.detach().contiguous().cpu().reshape(-1)
            parts += [f"{t.dtype}{tuple(t.shape)}", flat.view(torch.uint8).numpy()]
        else:
            parts.append(repr(t))
    records = options.get("records")
    for path in [records] if isinstance(records, (str, Path)) else list(records or ()):
        parts.append(Path(path).read_bytes() if Path(path).is_file() else f"no {path}")
    return model_key(parts)


def _content_key(graph: Any, target: Any, records: Any, trials: int) -> str:
    """The key of a traced Ember graph's content: its nodes (exact attribute values), input
    types, outputs and constants, with what else the compiled model depends on."""
    import numpy as np

    from ember.graph.model_cache import model_key

    # inputs by position: a graph Dynamo made with symbolic sizes takes the sizes first, so
    # the same tensor input is arg1_1 there and arg0_1 in the static graph
    name = {v.name: f"input{k}" for k, v in enumerate(graph.inputs)}

    def names(values: Any) -> tuple[str, ...]:
        return tuple(name.get(v, v) for v in values)

    parts: list[Any] = [str(target), repr(records), f"tune={trials}"]
    parts += [repr(v.type) for v in graph.inputs]
    parts += [
        repr((n.op, names(n.inputs), names(n.outputs), sorted(n.attrs.items())))
        for n in graph.nodes
    ]
    parts += [str(sub) for n in graph.nodes for sub in n.subgraphs.values()]
    parts.append(repr(names(graph.output_names)))
    for name in sorted(graph.params):
        array = graph.params[name]
        parts += [f"{name}:{array.dtype}{array.shape}", np.ascontiguousarray(array)]
    return model_key(parts)


def _attr(gm: Any, target: str) -> Any:
    obj = gm
    for name in target.split("."):
        obj = getattr(obj, name)
    return obj


def _records_path(key: str) -> str:
    """Where a graph tuned without ``options["records"]`` keeps its records."""
    from ember import config

    folder = config.cache_dir() / "torch"
    folder.mkdir(parents=True, exist_ok=True)
    return str(folder / f"{key}.jsonl")


def _tune(graph: Any, target: Any, records: str, trials: int) -> None:
    """Tune ``graph``'s kernels (templates and fused groups) into ``records``, then drop
    the records that make the whole graph slower."""
    from ember.graph.model_tuning import check_records, extract_tasks
    from ember.tuner import tune_tasks

    tasks = extract_tasks(graph, target, search="both")
    if not tasks or not trials:
        return
    tune_tasks(tasks, n_trials=trials, records=records)
    if Path(records).is_file():
        check_records(graph, records, tasks, target)


def _outputs(gm: Any) -> tuple[bool, int]:
    """Whether ``gm`` returns a tuple (else one tensor), and how many outputs it gives."""
    output = next(n for n in reversed(gm.graph.nodes) if n.op == "output")
    value = output.args[0]
    return (True, len(value)) if isinstance(value, (list, tuple)) else (False, 1)


def register() -> None:
    """Register ``"ember"`` with Dynamo by hand (the package's entry point does this where
    Ember is installed with pip)."""
    from torch._dynamo import list_backends, register_backend

    if "ember" not in list_backends(exclude_tags=()):
        register_backend(name="ember")(ember_backend)
