"""The ONNX-level inputs and outputs of a model that passes sequences or optionals.

Ember's graphs and kernels work on tensors only. An ONNX model may also take or give a
*sequence* (a list of tensors of one dtype, shapes free) or an *optional* (a tensor or a
sequence, or nothing). The importer specializes such a model on the lengths of its
sequence inputs and the presence of its optional ones (``from_onnx``'s ``shapes``) and
flattens every such value into plain tensor values: a sequence input ``x`` of three
elements becomes the graph inputs ``x[0]``, ``x[1]``, ``x[2]``. :class:`Interface`
records how the flat graph inputs and outputs group back into the ONNX ones, so a run
can take lists and ``None`` and give them back (``ember/graph/structured_io.py``).

:class:`SequenceType` and :class:`OptionalType` are the declared types of such inputs
and outputs, what a model reports before any length is known.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

TENSOR = "tensor"
SEQUENCE = "sequence"
NONE = "none"


@dataclass(frozen=True)
class SequenceType:
    """A sequence input or output: any number of tensors of ``dtype`` (their shapes may
    differ, so none is declared here; ONNX files often declare them wrongly)."""

    dtype: str

    shape = None  # no one shape: input_shapes reports None for a sequence
    is_static = False

    def __str__(self) -> str:
        return f"sequence({self.dtype})"


@dataclass(frozen=True)
class OptionalType:
    """An optional input or output: a tensor of ``dtype`` (or, ``of_sequence``, a sequence
    of them), or none (``None``). A present tensor's shape is the one given."""

    dtype: str
    of_sequence: bool = False

    shape = None
    is_static = False

    def __str__(self) -> str:
        return f"optional({SequenceType(self.dtype) if self.of_sequence else self.dtype})"


StructuredType = SequenceType | OptionalType


def is_structured(t: Any) -> bool:
    """Whether ``t`` is a sequence or optional type (not a plain tensor)."""
    return isinstance(t, (SequenceType, OptionalType))


@dataclass(frozen=True)
class Port:
    """One ONNX input or output and the flat graph values it stands for: one tensor
    (``kind`` "tensor"), a sequence of ``len(values)`` tensors ("sequence"), or an empty
    optional ("none", no values). A present optional is the kind of its value."""

    name: str
    kind: str
    values: tuple[str, ...]


@dataclass(frozen=True)
class Interface:
    """How a graph's flat inputs and outputs group into the model's ONNX ones (in order)."""

    inputs: tuple[Port, ...]
    outputs: tuple[Port, ...]
