"""Converters for ONNX sequence and optional ops: list manipulations at import time.

A sequence is a :class:`~ember.frontend.onnx_import.sequences.SequenceValue` (a tuple of
Ember tensor values) whose length the compiled model is specialized on, so
SequenceConstruct/Empty/Insert/Erase/At/Length, SplitToSequence and SequenceMap make no
nodes of their own beyond the slices, copies and concatenations their tensors need; an
optional is its value or :data:`~ember.frontend.onnx_import.sequences.EMPTY`. Positions
and split sizes must be known at compile time: ``ctx.constant`` raises
:class:`~ember.errors.NeedsConstantError` for one the model feeds at run time, and
``ember.compile`` then compiles per value of it. A position out of range is an
:class:`~ember.errors.ArgumentError` saying the valid range.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ember.errors import ArgumentError, EmberError
from ember.frontend.onnx_import.context import ConvertContext
from ember.frontend.onnx_import.declared import elem_dtype
from ember.frontend.onnx_import.ops_broadcast import onnx_dtype
from ember.frontend.onnx_import.ops_indexing import emit_slice
from ember.frontend.onnx_import.ops_transform import _reshape, _static
from ember.frontend.onnx_import.registry import converter
from ember.frontend.onnx_import.sequences import (
    EMPTY,
    Bound,
    EmptyOptional,
    SequenceValue,
    describe,
    position,
)
from ember.frontend.onnx_import.subgraph import inline_values
from ember.frontend.ops.registry import normalize_axis


def _check_dtype(ctx: ConvertContext, seq: SequenceValue, value: str) -> None:
    dtype = ctx.type_of(value).dtype
    if dtype != seq.dtype:
        raise ArgumentError(
            f"{ctx.op_type} '{ctx.name}': a {dtype} tensor cannot join a sequence of {seq.dtype}"
        )


def _position(ctx: ConvertContext, i: int, length: int, default: int, insert: bool) -> int:
    """Position input ``i`` (a scalar known at compile time), normalized; ``default`` when
    the node leaves it out."""
    pos = int(np.asarray(ctx.constant(i)).reshape(-1)[0]) if ctx.has_input(i) else default
    return position(ctx.op_type, ctx.name, pos, length, insert)


@converter("SequenceConstruct", since=11)
def sequence_construct(ctx: ConvertContext) -> list[Bound]:
    """ONNX SequenceConstruct: its inputs, which share a dtype, as a sequence."""
    items = ctx.inputs()
    if not items:
        raise ArgumentError(f"SequenceConstruct '{ctx.name}' has no inputs")
    seq = SequenceValue(tuple(items), ctx.type_of(items[0]).dtype)
    for item in items[1:]:
        _check_dtype(ctx, seq, item)
    return [seq]


@converter("SequenceEmpty", since=11)
def sequence_empty(ctx: ConvertContext) -> list[Bound]:
    """ONNX SequenceEmpty: no tensors, of ``dtype`` (float32 unless given)."""
    return [SequenceValue((), onnx_dtype(int(ctx.attr("dtype", 1)), "SequenceEmpty 'dtype'"))]


@converter("SequenceLength", since=11)
def sequence_length(ctx: ConvertContext) -> list[Bound]:
    """ONNX SequenceLength: a constant, as the length is known at compile time."""
    return [ctx.const(np.array(len(ctx.sequence(0).items), dtype=np.int64))]


@converter("SequenceAt", since=11)
def sequence_at(ctx: ConvertContext) -> list[Bound]:
    """ONNX SequenceAt: the element at a position (negative from the end)."""
    seq = ctx.sequence(0)
    return [seq.items[_position(ctx, 1, len(seq.items), 0, insert=False)]]


@converter("SequenceInsert", since=11)
def sequence_insert(ctx: ConvertContext) -> list[Bound]:
    """ONNX SequenceInsert: the tensor inserted before a position (at the end without one)."""
    seq, value = ctx.sequence(0), ctx.input(1)
    _check_dtype(ctx, seq, value)
    n = len(seq.items)
    at = _position(ctx, 2, n, n, insert=True)
    return [SequenceValue((*seq.items[:at], value, *seq.items[at:]), seq.dtype)]


@converter("SequenceErase", since=11)
def sequence_erase(ctx: ConvertContext) -> list[Bound]:
    """ONNX SequenceErase: the sequence without the element at a position (the last one
    without a position)."""
    seq = ctx.sequence(0)
    at = _position(ctx, 1, len(seq.items), -1, insert=False)
    return [SequenceValue((*seq.items[:at], *seq.items[at + 1 :]), seq.dtype)]


@converter("ConcatFromSequence", since=11)
def concat_from_sequence(ctx: ConvertContext) -> list[Bound]:
    """ONNX ConcatFromSequence: the elements joined along ``axis``, or stacked along a new
    one (``new_axis=1``, where ``axis`` may also be the rank)."""
    seq = ctx.sequence(0)
    if not seq.items:
        raise ArgumentError(f"ConcatFromSequence '{ctx.name}': the sequence is empty")
    new_axis = bool(ctx.attr("new_axis", 0))
    rank = ctx.type_of(seq.items[0]).ndim + int(new_axis)
    axis = normalize_axis(int(ctx.attr("axis")), rank, "ConcatFromSequence axis")
    items = list(seq.items)
    if new_axis:
        for k, item in enumerate(items):
            dims = ctx.type_of(item).dims
            items[k] = _reshape(ctx, item, (*dims[:axis], 1, *dims[axis:]))[0]
    # empty pieces add nothing (and a kernel cannot take a tensor without elements)
    nonempty = [v for v in items if not (ctx.type_of(v).is_static and ctx.type_of(v).size == 0)]
    items = nonempty or items[:1]
    if len(items) == 1:
        return [*items]
    return [*ctx.emit("concat", items, {"axis": axis})]


@converter("SplitToSequence", since=11)
def split_to_sequence(ctx: ConvertContext) -> list[Bound]:
    """ONNX SplitToSequence: the input cut along ``axis`` into pieces of the ``split`` sizes
    (a scalar: pieces of that size, the last one shorter), or into pieces of one (with
    ``keepdims=0``, that axis removed)."""
    src = _static(ctx, 0)
    axis = normalize_axis(int(ctx.attr("axis", 0)), len(src), "SplitToSequence axis")
    n = src[axis]
    keep = True
    if not ctx.has_input(1):
        sizes = [1] * n
        keep = bool(ctx.attr("keepdims", 1))
    else:
        split = np.asarray(ctx.constant(1))
        if split.ndim == 0:
            size = int(split)
            if size <= 0:
                raise ArgumentError(f"SplitToSequence '{ctx.name}': split {size} is not positive")
            sizes = [min(size, n - at) for at in range(0, n, size)]
        else:
            sizes = [int(s) for s in split.reshape(-1)]
        if sum(sizes) != n or any(s < 0 for s in sizes):
            raise ArgumentError(
                f"SplitToSequence '{ctx.name}': sizes {sizes} do not split {n} on axis {axis}"
            )
    items, at = [], 0
    for s in sizes:
        piece = emit_slice(ctx, ctx.input(0), src, {axis: (at, at + s, 1)})
        if not keep:
            piece = _reshape(ctx, piece, src[:axis] + src[axis + 1 :])[0]
        items.append(piece)
        at += s
    return [SequenceValue(tuple(items), ctx.type(0).dtype)]


@converter("SequenceMap", since=17)
def sequence_map(ctx: ConvertContext) -> list[Bound]:
    """ONNX SequenceMap: the body inlined once per element of the input sequence(s) (a
    tensor input is passed to every iteration); each body output makes a sequence."""
    body = ctx.attr("body")
    first = ctx.sequence(0)
    n = len(first.items)
    args: list[Bound] = [ctx.value(i) for i in range(ctx.num_inputs) if ctx.has_input(i)]
    for k, arg in enumerate(args):
        if isinstance(arg, SequenceValue) and len(arg.items) != n:
            raise ArgumentError(
                f"SequenceMap '{ctx.name}': input {k} has {len(arg.items)} elements, the first {n}"
            )
        if isinstance(arg, EmptyOptional):
            raise ArgumentError(f"SequenceMap '{ctx.name}': input {k} is {describe(arg)}")
    names = [vi.name for vi in body.input]
    outputs: list[list[str]] = [[] for _ in body.output]
    for i in range(n):
        bound = [a.items[i] if isinstance(a, SequenceValue) else a for a in args]
        results = inline_values(ctx, body, dict(zip(names, bound)))
        for k, r in enumerate(results):
            if not isinstance(r, str):
                raise ArgumentError(
                    f"SequenceMap '{ctx.name}': body output {k} is {describe(r)}, not a tensor"
                )
            outputs[k].append(r)
    dtypes = [
        ctx.type_of(items[0]).dtype if items else _declared_dtype(vi)
        for items, vi in zip(outputs, body.output)
    ]
    return [SequenceValue(tuple(items), d) for items, d in zip(outputs, dtypes)]


def _declared_dtype(vi: Any) -> str:
    """The dtype a body output declares (the dtype of an empty sequence SequenceMap makes)."""
    try:
        return elem_dtype(vi)
    except EmberError:
        return "float32"


@converter("Optional", since=15)
def optional(ctx: ConvertContext) -> list[Bound]:
    """ONNX Optional: its input, or an empty optional (of the ``type`` attribute)."""
    return [ctx.value(0) if ctx.has_input(0) else EMPTY]


@converter("OptionalHasElement", since=15)
def optional_has_element(ctx: ConvertContext) -> list[Bound]:
    """ONNX OptionalHasElement: a constant, as presence is known at compile time (a tensor
    or sequence has an element; from opset 18 a missing input has none)."""
    has = ctx.has_input(0) and not isinstance(ctx.value(0), EmptyOptional)
    return [ctx.const(np.array(has))]


@converter("OptionalGetElement", since=15)
def optional_get_element(ctx: ConvertContext) -> list[Bound]:
    """ONNX OptionalGetElement: the optional's value (from opset 18 a tensor or sequence
    passes through); an empty optional is an error."""
    value = ctx.value(0)
    if isinstance(value, EmptyOptional):
        raise ArgumentError(f"OptionalGetElement '{ctx.name}': the optional is empty")
    return [value]
