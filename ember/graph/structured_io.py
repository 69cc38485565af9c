"""Runs of models that take or give sequences and optionals: lists and None in and out.

An ONNX model with sequence or optional inputs or outputs compiles, per layout (the
lengths and element shapes of its sequence inputs, the presence of its optional ones),
to a graph of flat tensors whose ``interface`` says how they group
(``frontend/interface.py``, ``frontend/onnx_import/boundary.py``). The
:class:`~ember.graph.dynamic_model.DynamicModel` that runs it checks each such input
here (:func:`bind_structured`: a sequence is a list or tuple of arrays of its element
dtype, an optional is None or its value), which also gives the layout keying the
compiled specializations; :func:`run_structured` then feeds the compiled model the flat
tensors and groups its flat outputs back: a sequence output is a list of arrays, an
empty optional ``None``. onnxruntime takes and gives the same Python values.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from ember.errors import ArgumentError
from ember.frontend.interface import SEQUENCE, TENSOR, Interface, OptionalType, StructuredType
from ember.graph.executor import input_array

Layout = Any
"""Hashable: a sequence's element shapes (a tuple of tuples), an optional's None (empty) or
its value's layout (a tensor's shape). It is the ``shapes`` entry ``from_onnx`` takes."""


def bind_structured(name: str, t: StructuredType, value: Any) -> tuple[Any, Layout]:
    """Input ``name``'s ``value`` checked against its type ``t`` (arrays of its dtype, no
    conversion, as for tensors), and its layout."""
    if isinstance(t, OptionalType):
        if value is None:
            return None, None
        if not t.of_sequence:
            if isinstance(value, (list, tuple)):
                raise ArgumentError(
                    f"input '{name}' is {t}: pass an array or None, got a {type(value).__name__}"
                )
            arr = input_array(name, value, t.dtype)
            return arr, tuple(arr.shape)
    if not isinstance(value, (list, tuple)):
        got = "None" if value is None else type(value).__name__
        raise ArgumentError(
            f"input '{name}' is a sequence of {t.dtype} tensors: pass a list of arrays, got {got}"
        )
    arrays = [input_array(f"{name}[{k}]", v, t.dtype) for k, v in enumerate(value)]
    return arrays, tuple(tuple(a.shape) for a in arrays)


def flatten_inputs(interface: Interface, values: Sequence[Any]) -> list[Any]:
    """The compiled graph's flat inputs from the checked ONNX-level ``values`` (which fit
    its layout: the specialization was chosen by it)."""
    flat: list[Any] = []
    for port, value in zip(interface.inputs, values):
        if port.kind == TENSOR:
            flat.append(value)
        elif port.kind == SEQUENCE:
            flat.extend(value)
    return flat


def group_outputs(interface: Interface, flat: Sequence[np.ndarray]) -> list[Any]:
    """The ONNX-level outputs from the flat ones: arrays, lists of arrays and None."""
    it = iter(flat)
    out: list[Any] = []
    for port in interface.outputs:
        if port.kind == TENSOR:
            out.append(next(it))
        elif port.kind == SEQUENCE:
            out.append([next(it) for _ in port.values])
        else:
            out.append(None)
    return out


def run_structured(model: Any, values: Sequence[Any]) -> list[Any]:
    """Run the compiled ``model`` on ONNX-level ``values`` (plain arrays where its graph
    has no ``interface``)."""
    interface = model.graph.interface
    if interface is None:
        return model.run(values)  # type: ignore[no-any-return]
    return group_outputs(interface, model.run(flatten_inputs(interface, values)))
