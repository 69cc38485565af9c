"""Sequence and optional graph inputs and outputs of an ONNX model, as flat tensors.

The importer specializes a model on its sequence and optional inputs: ``shapes[name]``
gives a sequence input's element shapes (a list, one shape per element; empty for an
empty sequence) and an optional input's presence (None: absent; else its tensor's shape,
or its sequence's element shapes). :func:`add_input` makes the flat graph inputs
(``x[0]``, ``x[1]``, ... for a sequence ``x``; the name itself for a present optional
tensor) and binds the ONNX name to the value the converters see
(``onnx_import/sequences.py``); :func:`bind_output` flattens an output the same way,
copying each tensor under a name of its own (``y[0]``, ...). Each returns the
:class:`~ember.frontend.interface.Port` that lets a run group the flat tensors again.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ember.errors import ArgumentError, InvalidModelError, UnsupportedOperatorError
from ember.frontend.graph import TensorType, Value, check_size
from ember.frontend.interface import (
    NONE,
    SEQUENCE,
    TENSOR,
    OptionalType,
    Port,
    SequenceType,
    StructuredType,
)
from ember.frontend.onnx_import.context import GraphBuilder
from ember.frontend.onnx_import.declared import elem_dtype
from ember.frontend.onnx_import.sequences import EMPTY, Bound, SequenceValue
from ember.frontend.string_tensors import STRING

SPEC_HINT = (
    "a list of its elements' shapes for a sequence, None for an empty optional, "
    "else the shape(s) of its value"
)


def structured_type(vi: Any) -> StructuredType | None:
    """The declared type of a sequence or optional input or output; None for a tensor (or
    anything else, which the tensor path refuses by name)."""
    t = vi.type
    if t.HasField("sequence_type"):
        return SequenceType(_element_dtype(vi.name, t.sequence_type.elem_type))
    if t.HasField("optional_type"):
        inner = t.optional_type.elem_type
        if inner.HasField("sequence_type"):
            return OptionalType(_element_dtype(vi.name, inner.sequence_type.elem_type), True)
        return OptionalType(_element_dtype(vi.name, inner))
    return None


def _element_dtype(name: str, type_proto: Any) -> str:
    """The dtype of the tensors a sequence or optional holds (read as a tensor's would be)."""
    # optional dependency: onnx
    from onnx import helper

    if not type_proto.HasField("tensor_type"):
        raise UnsupportedOperatorError(
            f"'{name}' is a sequence or optional of non-tensors (sequences of sequences, "
            "maps), which Ember does not support"
        )
    dtype = elem_dtype(helper.make_value_info(name, type_proto))
    if dtype == STRING:  # string tensors are constants; a run's list of them is not (yet)
        raise UnsupportedOperatorError(
            f"'{name}' is a sequence or optional of strings, which Ember does not support"
        )
    return dtype


def add_input(
    b: GraphBuilder,
    env: dict[str, Bound],
    name: str,
    t: StructuredType,
    shapes: Mapping[str, Any],
) -> tuple[list[Value], Port]:
    """The flat graph inputs of the sequence or optional input ``name`` as ``shapes``
    specializes it, with ``env[name]`` bound to what the converters see."""
    if name not in shapes:
        raise ArgumentError(
            f"input '{name}' is {t}; Ember compiles it for given lengths: pass "
            f"shapes={{'{name}': ...}} ({SPEC_HINT})"
        )
    spec = shapes[name]
    if isinstance(t, OptionalType):
        if spec is None:
            env[name] = EMPTY
            return [], Port(name, NONE, ())
        if not t.of_sequence:
            ttype = TensorType(_shape(name, spec), t.dtype)
            check_size(ttype, f"input '{name}'")
            env[name] = b.add_input(name, ttype).name
            return [b.values[name]], Port(name, TENSOR, (name,))
    if spec is None or not all(isinstance(s, (list, tuple)) for s in spec):
        raise ArgumentError(
            f"shapes['{name}'] must list the shapes of the sequence's elements, got {spec!r}"
        )
    values = []
    for k, shape in enumerate(spec):
        ttype = TensorType(_shape(name, shape), t.dtype)
        check_size(ttype, f"element {k} of input '{name}'")
        values.append(b.add_input(_flat_name(b, f"{name}[{k}]"), ttype))
    items = tuple(v.name for v in values)
    env[name] = SequenceValue(items, t.dtype)
    return values, Port(name, SEQUENCE, items)


def _shape(name: str, spec: Any) -> tuple[int, ...]:
    try:
        return tuple(int(d) for d in spec)
    except (TypeError, ValueError) as e:
        raise ArgumentError(f"shapes['{name}']: {spec!r} is not a shape ({SPEC_HINT})") from e


def _flat_name(b: GraphBuilder, name: str) -> str:
    if name in b.taken:
        return b.fresh(name)
    b.taken.add(name)
    return name


def bind_output(
    name: str, value: Bound, declared: Any, b: GraphBuilder
) -> tuple[list[Value], Port]:
    """The flat graph outputs of the ONNX output ``name`` (a sequence or an empty optional;
    ``declared`` its ValueInfo), each tensor copied under a name of its own."""
    if declared.type.HasField("tensor_type"):
        raise InvalidModelError(
            f"output '{name}' is declared a tensor, but the graph makes {value}"
        )
    if not isinstance(value, SequenceValue):
        return [], Port(name, NONE, ())
    outputs = []
    for k, item in enumerate(value.items):
        start = len(b.nodes)
        (copy,) = b.emit("copy", [item], {}, (f"output_{name}", "Identity"))
        flat = _flat_name(b, f"{name}[{k}]")
        b.rename(copy, flat, start)
        outputs.append(b.values[flat])
    return outputs, Port(name, SEQUENCE, tuple(v.name for v in outputs))
