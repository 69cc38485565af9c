"""Sequence and optional values while a model imports: lists of graph tensors, known now.

An ONNX sequence is a list of tensors; an optional is a value or nothing. Ember compiles
a model specialized on the lengths of its sequences (``from_onnx``'s ``shapes`` gives
those of the inputs), so while the importer converts a graph a sequence is a
:class:`SequenceValue`, a tuple of Ember tensor values, and every sequence operator is a
list manipulation done at import time (``ops_sequence.py``). An optional holding a value
is that value itself; an empty one is :data:`EMPTY`. These are what a converter's env
binds an ONNX name to besides a tensor's value name (:data:`Bound`).

A value that crosses a subgraph boundary whose host runs at run time (a runtime If's
branches) is flattened to its tensors and rebuilt on the other side
(:func:`flatten`, :func:`rebuild`).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

from ember.errors import ArgumentError
from ember.frontend.interface import NONE, SEQUENCE, TENSOR


@dataclass(frozen=True)
class SequenceValue:
    """An ONNX sequence at import: its elements' Ember values, in order, and their dtype
    (kept for an empty sequence, which has no element to ask)."""

    items: tuple[str, ...]
    dtype: str

    def __str__(self) -> str:
        return f"a sequence of {len(self.items)} {self.dtype} tensor(s)"


@dataclass(frozen=True)
class EmptyOptional:
    """An ONNX optional holding no value (an optional holding one is just that value)."""

    def __str__(self) -> str:
        return "an empty optional"


EMPTY = EmptyOptional()

Bound = str | SequenceValue | EmptyOptional
"""What an ONNX name is bound to while importing: a tensor's Ember value name, a
sequence, or an empty optional."""

Layout = tuple[str, str, int]
"""The shape of a bound value's flattening: (kind, dtype, number of tensors)."""


def describe(value: Bound) -> str:
    """A bound value as a message names it: "a tensor", "a sequence of 3 float32 ..."."""
    return "a tensor" if isinstance(value, str) else str(value)


def flatten(value: Bound) -> tuple[list[str], Layout]:
    """The tensor values ``value`` stands for, and how to :func:`rebuild` it from them."""
    if isinstance(value, str):
        return [value], (TENSOR, "", 1)
    if isinstance(value, SequenceValue):
        return list(value.items), (SEQUENCE, value.dtype, len(value.items))
    return [], (NONE, "", 0)


def rebuild(layout: Layout, values: Iterator[str]) -> Bound:
    """The value :func:`flatten` gave ``layout`` for, from the next tensors of ``values``."""
    kind, dtype, count = layout
    if kind == TENSOR:
        return next(values)
    if kind == SEQUENCE:
        return SequenceValue(tuple(next(values) for _ in range(count)), dtype)
    return EMPTY


def position(op: str, name: str, pos: int, length: int, insert: bool = False) -> int:
    """A sequence position normalized to 0..length-1 (0..length to insert); negative ones
    count from the end, as ONNX has it. Out of range is an ArgumentError."""
    high = length if insert else length - 1
    if not -length <= pos <= high:
        valid = f"{-length}..{high}" if high >= -length else "none: the sequence is empty"
        raise ArgumentError(
            f"{op} '{name}': position {pos} is out of range for a sequence of {length} "
            f"tensor(s) (valid: {valid})"
        )
    return pos + length if pos < 0 else pos
