"""The ``ember`` backend of ``torch.compile``: each graph Dynamo captures runs compiled by
Ember.

``torch.compile(model, backend="ember", options={"target": "llvm", "records": path})``.
Dynamo hands over each captured graph (between graph breaks) with example inputs; the
backend returns a function that, per distinct input signature (shapes and dtypes), traces
the graph to core ATen ops (:func:`ember.frontend.torch.from_module`, its parameters
constants), compiles it with :func:`ember.compile` and keeps it: a shape Dynamo did not
specialise on (its automatic dynamic shapes) gets a compiled specialisation of its own,
counted in :data:`STATS`. A graph holding an op Ember cannot import runs eagerly, with a
warning that lists the ops and where they are, so results stay right. Inputs and outputs
cross as CPU numpy arrays for now (``target="llvm"``); tensors on other devices are
refused with the reason.
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

    def run(*args: Any) -> Any:
        import torch  # optional dependency: present whenever Dynamo calls this

        if eager:
            return gm(*args)
        if any(not _number(a) and a.device.type != "cpu" for a in args):
            raise ArgumentError("backend 'ember': inputs must be CPU tensors for target llvm")
        key = _signature(args)
        lib = compiled.get(key)
        if lib is None:
            real = [a if _number(a) else torch.zeros(a.shape, dtype=a.dtype) for a in args]
            try:
                graph = from_module(gm, real)
            except UnsupportedOperatorError as e:
                warnings.warn(f"backend 'ember' runs this graph eagerly: {e}", stacklevel=2)
                STATS["eager graphs"] += 1
                eager.append(True)
                return gm(*args)
            records = options.get("records")
            lib = compiled[key] = ember.compile(graph, target=target, records=records)
            STATS["compiles"] += 1
        STATS["runs"] += 1
        outs = lib.run([a.detach().contiguous().numpy() for a in args if not _number(a)])
        results = [torch.from_numpy(o) for o in outs]
        return tuple(results) if _returns_tuple(gm) else results[0]

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
