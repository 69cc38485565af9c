"""The ``ember`` backend of ``torch.compile``: each graph Dynamo captures runs compiled by
Ember.

``torch.compile(model, backend="ember", options={"target": "llvm", "records": path})``.
Dynamo hands over each captured graph (between graph breaks) with example inputs; the
backend returns a function that, per distinct input signature (shapes and dtypes), traces
the graph to core ATen ops (:func:`ember.frontend.torch.from_module`, its parameters
constants), compiles it with :func:`ember.compile` and keeps it: a shape Dynamo did not
specialise on (its automatic dynamic shapes) gets a compiled specialisation of its own,
counted in :data:`STATS`. The parameters and buffers Dynamo lifts into graph inputs are
taken as constants when a specialisation is compiled (as inductor's freezing does): a
model whose weights change afterwards must be compiled again. A graph holding an op Ember
cannot import runs eagerly, with a warning that lists the ops and where they are, so
results stay right. Inputs and outputs cross as CPU numpy arrays for now (views, no
copies; ``target="llvm"``); tensors on other devices are refused with the reason.
"""

from __future__ import annotations

import warnings
from collections import Counter
from collections.abc import Callable, Sequence
from typing import Any

from ember.errors import ArgumentError, UnsupportedOperatorError

STATS: Counter[str] = Counter()  # "graphs", "compiles", "eager graphs", "runs"
OPTIONS = ("target", "records")


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


def _frozen(gm: Any, example_inputs: Sequence[Any]) -> tuple[Callable[..., Any], list[int]]:
    """``gm`` as a function of the caller's inputs alone, the weights Dynamo lifted into
    inputs closed over (``make_fx`` then records them as constants, so batch norms fold
    and weights are packed at compile time: MobileNetV2 ran 3x slower with them as
    inputs), and the positions of the inputs it keeps."""
    keep = [i for i, v in enumerate(example_inputs) if not _weight(v)]
    weights = {i: v for i, v in enumerate(example_inputs) if _weight(v)}

    def call(*args: Any) -> Any:
        full, it = [], iter(args)
        for i in range(len(example_inputs)):
            full.append(weights[i] if i in weights else next(it))
        return gm(*full)

    return call, keep


def ember_backend(gm: Any, example_inputs: Sequence[Any], **kwargs: Any) -> Callable[..., Any]:
    """Dynamo's backend entry point (registered as ``"ember"``); ``options`` of
    ``torch.compile`` arrive as keyword ``options``."""
    import ember  # the package itself: compile
    from ember.frontend.torch.importer import from_module

    options = dict(kwargs.get("options") or {})
    unknown = set(options) - set(OPTIONS)
    if unknown:
        raise ArgumentError(f"backend 'ember': unknown options {sorted(unknown)}; known {OPTIONS}")
    target = options.get("target", "llvm")
    if target != "llvm" and not str(target).startswith("llvm"):
        raise ArgumentError(f"backend 'ember': target {target!r}: only CPU targets run yet")
    STATS["graphs"] += 1
    compiled: dict[tuple[Any, ...], Any] = {}
    eager: list[bool] = []
    call, keep = _frozen(gm, example_inputs)
    as_tuple = _returns_tuple(gm)

    def run(*all_args: Any) -> Any:
        import torch  # optional dependency: present whenever Dynamo calls this

        if eager:
            return gm(*all_args)
        args = [all_args[i] for i in keep]
        if any(not _number(a) and a.device.type != "cpu" for a in args):
            raise ArgumentError("backend 'ember': inputs must be CPU tensors for target llvm")
        key = _signature(args)
        lib = compiled.get(key)
        if lib is None:
            try:
                graph = from_module(call, [a if _number(a) else a.detach() for a in args])
            except UnsupportedOperatorError as e:
                warnings.warn(f"backend 'ember' runs this graph eagerly: {e}", stacklevel=2)
                STATS["eager graphs"] += 1
                eager.append(True)
                return gm(*all_args)
            records = options.get("records")
            lib = compiled[key] = ember.compile(graph, target=target, records=records)
            STATS["compiles"] += 1
        STATS["runs"] += 1
        outs = lib.run([a.detach().contiguous().numpy() for a in args if not _number(a)])
        results = [torch.from_numpy(o) for o in outs]
        return tuple(results) if as_tuple else results[0]

    run.compiled = compiled  # type: ignore[attr-defined]  # the specialisations, by signature
    return run


def _returns_tuple(gm: Any) -> bool:
    output = next(n for n in reversed(gm.graph.nodes) if n.op == "output")
    return isinstance(output.args[0], (list, tuple))


def register() -> None:
    """Register ``"ember"`` with Dynamo by hand (the package's entry point does this where
    Ember is installed with pip)."""
    from torch._dynamo import list_backends, register_backend

    if "ember" not in list_backends(exclude_tags=()):
        register_backend(name="ember")(ember_backend)
