"""Indexing ops: strided slice, pad, tile, expand, gathers, scatters, and their kin.

Attributes (set by the converters, every one present, all already resolved: no
negative axes, no clamping left to do):
- ``slice``: begin, step, shape (tuples, one per axis).
- ``pad``: pads (begin..., end...), mode ("constant", "reflect", "edge", "wrap"), value.
- ``tile``: repeats. ``expand``: shape.
- ``gather_elements``: axis. ``gather_nd``: batch_dims.
- ``scatter_elements``: axis, reduction. ``scatter_nd``: reduction.
- ``trilu``: k, upper. ``one_hot``: depth, axis. ``reverse_sequence``: batch_axis, time_axis.
- ``cumsum`` and ``cumprod``: axis, exclusive, reverse. ``topk``: k, axis, largest (two outputs).
- ``resize``: axes (the resized ones), layout (per axis, the tables it has: "i", "iw",
  "im" or "iwm" for index, weight, inside-mask), extrapolation. Its inputs are the data,
  then each resized axis's tables (see ``tir/topi/resize.py``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ember.errors import ArgumentError
from ember.frontend.graph import TensorType
from ember.frontend.op_kinds import BROADCAST, INJECTIVE, OPAQUE
from ember.frontend.ops.registry import broadcast_shapes, register_op, same_as_input
from ember.tir.topi import indexing, resize, scatter

Types = Sequence[TensorType]
MANY = 1 << 16


def _int_indices(t: TensorType, op: str) -> None:
    if not (t.dtype.startswith("int") or t.dtype.startswith("uint")):
        raise ArgumentError(f"{op}: indices must be integers, got {t.dtype}")


def _infer_slice(types: Types, attrs: dict[str, Any]) -> list[TensorType]:
    x = types[0]
    if not len(attrs["begin"]) == len(attrs["step"]) == len(attrs["shape"]) == x.ndim:
        raise ArgumentError(f"slice: begin/step/shape must have one entry per axis of {x}")
    return [TensorType(tuple(attrs["shape"]), x.dtype)]


@register_op("slice", INJECTIVE, infer=_infer_slice)
def slice_(inputs: Sequence[Any], attrs: dict[str, Any]) -> list[Any]:
    """A strided slice with every bound already resolved by the converter (static shapes)."""
    return [indexing.strided_slice(inputs[0], attrs["begin"], attrs["step"], attrs["shape"])]


def _infer_pad(types: Types, attrs: dict[str, Any]) -> list[TensorType]:
    x = types[0]
    pads = attrs["pads"]
    if len(pads) != 2 * x.ndim:
        raise ArgumentError(f"pad: pads {list(pads)} need {2 * x.ndim} entries for {x}")
    shape = tuple(d + pads[k] + pads[x.ndim + k] for k, d in enumerate(x.shape))
    if any(d < 0 for d in shape):
        raise ArgumentError(f"pad: pads {list(pads)} crop {x} below zero")
    if attrs["mode"] in ("reflect", "wrap") and any(
        d == 0 and (pads[k] or pads[x.ndim + k]) for k, d in enumerate(x.shape)
    ):
        raise ArgumentError(f"pad: {attrs['mode']} mode cannot pad an empty axis of {x}")
    return [TensorType(shape, x.dtype)]


@register_op("pad", INJECTIVE, infer=_infer_pad)
def pad(inputs: Sequence[Any], attrs: dict[str, Any]) -> list[Any]:
    """Constant, edge or reflect padding; the converter resolves pads and mode."""
    return [indexing.pad(inputs[0], attrs["pads"], attrs["mode"], attrs["value"])]


def _infer_tile(types: Types, attrs: dict[str, Any]) -> list[TensorType]:
    x = types[0]
    reps = attrs["repeats"]
    if len(reps) != x.ndim or any(r < 0 for r in reps):
        raise ArgumentError(f"tile: repeats {list(reps)} do not fit {x}")
    return [TensorType(tuple(d * r for d, r in zip(x.shape, reps)), x.dtype)]


@register_op("tile", INJECTIVE, infer=_infer_tile)
def tile(inputs: Sequence[Any], attrs: dict[str, Any]) -> list[Any]:
    """The input repeated along each axis."""
    return [indexing.tile(inputs[0], attrs["repeats"])]


def _infer_expand(types: Types, attrs: dict[str, Any]) -> list[TensorType]:
    x = types[0]
    shape = broadcast_shapes(x.shape, attrs["shape"])
    if shape != tuple(attrs["shape"]):
        raise ArgumentError(f"expand: {x} does not expand to {list(attrs['shape'])}")
    return [TensorType(shape, x.dtype)]


@register_op("expand", BROADCAST, infer=_infer_expand)
def expand(inputs: Sequence[Any], attrs: dict[str, Any]) -> list[Any]:
    """The input broadcast to a larger shape without copying in the graph."""
    return [indexing.broadcast_to(inputs[0], attrs["shape"])]


def _infer_gather_elements(types: Types, attrs: dict[str, Any]) -> list[TensorType]:
    x, idx = types
    _int_indices(idx, "gather_elements")
    if idx.ndim != x.ndim:
        raise ArgumentError(f"gather_elements: indices {idx} and data {x} ranks differ")
    return [TensorType(idx.shape, x.dtype)]


@register_op("gather_elements", INJECTIVE, infer=_infer_gather_elements, num_inputs=2)
def gather_elements(inputs: Sequence[Any], attrs: dict[str, Any]) -> list[Any]:
    """Picks one element per index along an axis (ONNX GatherElements)."""
    return [indexing.gather_elements(inputs[0], inputs[1], attrs["axis"])]


def _infer_gather_nd(types: Types, attrs: dict[str, Any]) -> list[TensorType]:
    x, idx = types
    _int_indices(idx, "gather_nd")
    b = attrs["batch_dims"]
    k = idx.shape[-1] if idx.ndim else 0
    if idx.ndim < 1 or not isinstance(k, int) or b + k > x.ndim or idx.shape[:b] != x.shape[:b]:
        raise ArgumentError(f"gather_nd: indices {idx} do not address data {x} (batch_dims {b})")
    return [TensorType((*idx.shape[:-1], *x.shape[b + k :]), x.dtype)]


@register_op("gather_nd", INJECTIVE, infer=_infer_gather_nd, num_inputs=2)
def gather_nd(inputs: Sequence[Any], attrs: dict[str, Any]) -> list[Any]:
    """Gathers slices addressed by index tuples, after ``batch_dims`` leading batch axes."""
    return [indexing.gather_nd(inputs[0], inputs[1], attrs["batch_dims"])]


def _infer_scatter_elements(types: Types, attrs: dict[str, Any]) -> list[TensorType]:
    x, idx, upd = types
    _int_indices(idx, "scatter_elements")
    if idx.shape != upd.shape or idx.ndim != x.ndim or upd.dtype != x.dtype:
        raise ArgumentError(f"scatter_elements: data {x}, indices {idx}, updates {upd} do not fit")
    return [x]


@register_op("scatter_elements", OPAQUE, infer=_infer_scatter_elements, num_inputs=3)
def scatter_elements(inputs: Sequence[Any], attrs: dict[str, Any]) -> list[Any]:
    """Writes updates at per-element indices, optionally reducing; opaque to fusion."""
    x, idx, upd = inputs
    return [scatter.scatter_elements(x, idx, upd, attrs["axis"], attrs["reduction"])]


def _infer_scatter_nd(types: Types, attrs: dict[str, Any]) -> list[TensorType]:
    x, idx, upd = types
    _int_indices(idx, "scatter_nd")
    k = idx.shape[-1] if idx.ndim else None
    ok = idx.ndim >= 2 and isinstance(k, int) and k <= x.ndim and upd.dtype == x.dtype
    if not ok or upd.shape != (*idx.shape[:-1], *x.shape[k:]):
        raise ArgumentError(f"scatter_nd: data {x}, indices {idx}, updates {upd} do not fit")
    return [x]


@register_op("scatter_nd", OPAQUE, infer=_infer_scatter_nd, num_inputs=3)
def scatter_nd(inputs: Sequence[Any], attrs: dict[str, Any]) -> list[Any]:
    """Writes update slices at index tuples, optionally reducing; opaque to fusion."""
    x, idx, upd = inputs
    return [scatter.scatter_nd(x, idx, upd, attrs["reduction"])]


def _infer_trilu(types: Types, attrs: dict[str, Any]) -> list[TensorType]:
    if types[0].ndim < 2:
        raise ArgumentError(f"trilu: input {types[0]} must have at least 2 dimensions")
    return [types[0]]


@register_op("trilu", INJECTIVE, infer=_infer_trilu)
def trilu(inputs: Sequence[Any], attrs: dict[str, Any]) -> list[Any]:
    """Keeps the upper or lower triangle of the last two axes, from diagonal ``k``."""
    return [indexing.band(inputs[0], attrs["k"], attrs["upper"])]


def _infer_one_hot(types: Types, attrs: dict[str, Any]) -> list[TensorType]:
    idx, values = types
    if values.shape != (2,):
        raise ArgumentError(f"one_hot: values must hold 2 elements (off, on), got {values}")
    a = attrs["axis"]
    return [TensorType((*idx.shape[:a], attrs["depth"], *idx.shape[a:]), values.dtype)]


@register_op("one_hot", INJECTIVE, infer=_infer_one_hot, num_inputs=2)
def one_hot(inputs: Sequence[Any], attrs: dict[str, Any]) -> list[Any]:
    """One-hot encoding of indices into ``depth`` classes along ``axis``."""
    return [indexing.one_hot(inputs[0], inputs[1], attrs["depth"], attrs["axis"])]


def _infer_reverse_sequence(types: Types, attrs: dict[str, Any]) -> list[TensorType]:
    x, lens = types
    _int_indices(lens, "reverse_sequence")
    if lens.shape != (x.shape[attrs["batch_axis"]],):
        raise ArgumentError(f"reverse_sequence: lengths {lens} do not match the batch of {x}")
    return [x]


@register_op("reverse_sequence", INJECTIVE, infer=_infer_reverse_sequence, num_inputs=2)
def reverse_sequence(inputs: Sequence[Any], attrs: dict[str, Any]) -> list[Any]:
    """Reverses each batch entry's first ``len`` time steps, as RNN pipelines need."""
    a = attrs
    return [indexing.reverse_sequence(inputs[0], inputs[1], a["batch_axis"], a["time_axis"])]


@register_op("cumsum", OPAQUE, infer=same_as_input)
def cumsum(inputs: Sequence[Any], attrs: dict[str, Any]) -> list[Any]:
    """Running sum along an axis, optionally exclusive or reversed; opaque to fusion."""
    a = attrs
    return [scatter.cumsum(inputs[0], a["axis"], a["exclusive"], a["reverse"])]


@register_op("cumprod", OPAQUE, infer=same_as_input)
def cumprod(inputs: Sequence[Any], attrs: dict[str, Any]) -> list[Any]:
    """Running product along an axis, as ``cumsum`` takes it; opaque to fusion."""
    a = attrs
    return [scatter.cumprod(inputs[0], a["axis"], a["exclusive"], a["reverse"])]


def _infer_topk(types: Types, attrs: dict[str, Any]) -> list[TensorType]:
    x = types[0]
    a, k = attrs["axis"], attrs["k"]
    if isinstance(x.shape[a], int) and not 0 <= k <= x.shape[a]:
        raise ArgumentError(f"topk: k={k} is out of range for axis {a} of {x}")
    shape = (*x.shape[:a], k, *x.shape[a + 1 :])
    return [TensorType(shape, x.dtype), TensorType(shape, "int64")]


@register_op("topk", OPAQUE, infer=_infer_topk, num_outputs=2)
def topk(inputs: Sequence[Any], attrs: dict[str, Any]) -> list[Any]:
    """The ``k`` largest (or smallest) values along an axis and their indices."""
    return list(scatter.topk(inputs[0], attrs["k"], attrs["axis"], attrs["largest"]))


def _infer_resize(types: Types, attrs: dict[str, Any]) -> list[TensorType]:
    x = types[0]
    layout, axes = attrs["layout"], attrs["axes"]
    if len(types) != 1 + sum(len(s) for s in layout) or len(layout) != len(axes):
        raise ArgumentError(f"resize: {len(types) - 1} tables do not fit layout {layout}")
    shape = list(x.shape)
    for a, table in zip(axes, _split_tables(types[1:], layout)):
        shape[a] = table[0].shape[0]
    return [TensorType(tuple(shape), x.dtype)]


def _split_tables(items: Sequence[Any], layout: Sequence[str]) -> list[list[Any]]:
    out, pos = [], 0
    for spec in layout:
        out.append(list(items[pos : pos + len(spec)]))
        pos += len(spec)
    return out


@register_op("resize", INJECTIVE, infer=_infer_resize, num_inputs=(1, MANY))
def resize_(inputs: Sequence[Any], attrs: dict[str, Any]) -> list[Any]:
    """Resizing by precomputed per-axis index and weight tables, so any ONNX mode shares one
    compute."""
    tables = _split_tables(inputs[1:], attrs["layout"])
    return [resize.resize(inputs[0], attrs["axes"], tables, attrs["extrapolation"])]
