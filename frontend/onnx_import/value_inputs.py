"""Graph inputs whose values Ember needs at compile time, and the model with them frozen.

Some ONNX inputs carry shapes rather than data: Reshape's ``shape``, Tile's ``repeats``,
TopK's ``k``, Resize's ``sizes``, Trilu's ``k``; and every string tensor, which Ember
computes with at import (``frontend/string_tensors.py``). A model may feed them at run
time (the ONNX backend tests all do; onnxruntime computes such shapes on the host per
run). Ember
compiles kernels for static shapes, so ``ember.compile`` answers an importer's
:class:`~ember.errors.NeedsConstantError` by compiling the model once per distinct value
of the graph inputs the named tensor is computed from (``ember/graph/dynamic_model.py``).
This module finds those inputs and writes the copy of the model with their values as
initializers, which imports like any model with constant shapes.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from ember.frontend.onnx_import.declared import subgraphs_of
from ember.frontend.onnx_import.importer import _all_nodes

MAX_VALUE_ELEMENTS = 4096
"""The most elements an input may have for Ember to compile per value of it: shape-like
inputs are a handful of integers; a model that needs an image's pixels at compile time
(a NonZero over it) would compile per image, which is refused instead."""


def input_ancestors(proto: Any, tensor: str) -> list[str]:
    """The graph inputs ``tensor`` is computed from (itself, if it is one), in input order.

    A node holding subgraphs (If, Loop, Scan) depends on every outer name they read, so
    the walk follows those too; a ``tensor`` made inside a subgraph (a function's
    expansion under an If) is followed out through the names its subgraph reads."""
    graph = proto.graph
    producer = {out: node for node in _all_nodes(graph) for out in node.output}
    inputs = [vi.name for vi in graph.input]
    seen: set[str] = set()
    stack = [tensor]
    while stack:
        name = stack.pop()
        if name in seen:
            continue
        seen.add(name)
        node = producer.get(name)
        if node is not None:
            stack.extend(n for n in (*node.input, *_outer_reads(node)) if n)
    return [n for n in inputs if n in seen]


def _outer_reads(node: Any) -> list[str]:
    """Every name the subgraphs of ``node`` read (a superset of the outer names they use:
    names local to a subgraph match no producer of the outer graph and are dropped)."""
    return [name for sub in subgraphs_of(node) for n in _all_nodes(sub) for name in n.input]


def freeze_inputs(proto: Any, values: Mapping[str, np.ndarray]) -> Any:
    """A copy of ``proto`` whose inputs named in ``values`` are initializers holding them."""
    # optional dependency: onnx
    from onnx import numpy_helper

    model = type(proto)()
    model.CopyFrom(proto)
    graph = model.graph
    overridden = set(values)
    kept = [vi for vi in graph.input if vi.name not in overridden]
    # an overridable initializer given a value at run time: the value replaces the default
    defaults = [t for t in graph.initializer if t.name not in overridden]
    del graph.input[:]
    graph.input.extend(kept)
    del graph.initializer[:]
    graph.initializer.extend(defaults)
    for name, array in values.items():
        graph.initializer.append(numpy_helper.from_array(np.asarray(array), name))
    return model
