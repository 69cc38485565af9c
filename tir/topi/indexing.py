"""Injective computes that index: strided slice, pad, tile, broadcast, gathers, band masks.

Every output element reads one input element (or a fill value) at an index computed
from its own, so all of these are INJECTIVE for fusion. Shapes are static ints: the
ONNX converters resolve negative, clamped and omitted arguments before they get
here, so each function takes its arguments already in range.
"""

from __future__ import annotations

from collections.abc import Sequence

from ember.errors import ArgumentError
from ember.tir import expr as E
from ember.tir.te import operation as te
from ember.tir.te.tensor import Tensor
from ember.tir.topi.transform import static_shape


def _wrap_index(raw: E.PrimExpr, n: int) -> E.PrimExpr:
    """An index that may count from the end, as a position clamped into ``[0, n)``
    (clamping keeps reads in bounds; the graph executor refuses an index out of range
    before the kernel runs, see ``ember/index_guard.py``). int32 unless the axis is
    longer than int32 counts."""
    raw = E.cast("int32" if n < 2**31 else "int64", raw)
    pos = E.select(raw < 0, raw + n, raw)
    return E.max_(E.min_(pos, n - 1), 0)


def strided_slice(
    X: Tensor, begin: Sequence[int], step: Sequence[int], shape: Sequence[int]
) -> Tensor:
    """``out[i] = X[begin + i * step]`` on every axis (steps may be negative)."""
    if not len(begin) == len(step) == len(shape) == X.ndim:
        raise ArgumentError(f"strided_slice: begin/step/shape must have {X.ndim} entries")
    return te.compute(
        tuple(shape),
        lambda *i: X[tuple(b + s * ix for b, s, ix in zip(begin, step, i))],
        name="slice",
        tag="injective",
    )


def pad(X: Tensor, pads: Sequence[int], mode: str, value: float | int = 0) -> Tensor:
    """numpy's ``pad`` with ``pads`` = (begin..., end...); a negative pad crops. ``mode`` is
    constant, reflect (mirror without the edge), edge, or wrap."""
    src = static_shape(X)
    n = len(src)
    out_shape = tuple(s + pads[k] + pads[n + k] for k, s in enumerate(src))
    if any(d < 0 for d in out_shape):
        raise ArgumentError(f"pad: pads {list(pads)} crop {list(src)} below zero")

    def source(k: int, i: E.PrimExpr) -> E.PrimExpr:
        j = i - pads[k]
        size = src[k]
        if mode == "edge" or (mode == "reflect" and size == 1):
            return E.max_(E.min_(j, size - 1), 0)
        if mode == "wrap":
            return E.floormod(j, size)
        if mode == "reflect":
            period = 2 * (size - 1)
            m = E.floormod(j, period)
            return E.select(m < size, m, period - m)
        return E.max_(E.min_(j, size - 1), 0)  # constant: clamped read, masked below

    def f(*i: E.PrimExpr) -> E.PrimExpr:
        read = X[tuple(source(k, ix) for k, ix in enumerate(i))]
        if mode != "constant":
            return read
        inside = [
            E.logical_and(ix >= pads[k], ix < pads[k] + src[k])
            for k, ix in enumerate(i)
            if pads[k] > 0 or pads[n + k] > 0
        ]
        if not inside:
            return read
        cond = inside[0]
        for c in inside[1:]:
            cond = E.logical_and(cond, c)
        return E.select(cond, read, E.const(value, X.dtype))

    return te.compute(out_shape, f, name="pad", tag="injective")


def tile(X: Tensor, repeats: Sequence[int]) -> Tensor:
    """numpy's ``tile`` with one repeat count per axis."""
    src = static_shape(X)
    out_shape = tuple(s * r for s, r in zip(src, repeats))
    return te.compute(
        out_shape,
        lambda *i: X[tuple(ix % s if r != 1 else ix for ix, s, r in zip(i, src, repeats))],
        name="tile",
        tag="injective",
    )


def broadcast_to(X: Tensor, shape: Sequence[int]) -> Tensor:
    """numpy's ``broadcast_to``: size-1 (and missing leading) axes repeat."""
    src = static_shape(X)
    lead = len(shape) - len(src)

    def f(*i: E.PrimExpr) -> E.PrimExpr:
        idx = [0 if d == 1 else i[lead + k] for k, d in enumerate(src)]
        return X[tuple(idx)]

    return te.compute(tuple(shape), f, name="expand", tag="broadcast")


def gather_elements(X: Tensor, indices: Tensor, axis: int) -> Tensor:
    """``out[i] = X[i with axis replaced by indices[i]]`` (ONNX GatherElements)."""
    n = static_shape(X)[axis]

    def f(*i: E.PrimExpr) -> E.PrimExpr:
        pos = _wrap_index(indices[i], n)
        return X[(*i[:axis], pos, *i[axis + 1 :])]

    return te.compute(static_shape(indices), f, name="gather_elements", tag="injective")


def gather_nd(X: Tensor, indices: Tensor, batch_dims: int) -> Tensor:
    """ONNX GatherND: the last axis of ``indices`` addresses the leading axes of ``X``
    after the first ``batch_dims`` (which both share)."""
    src = static_shape(X)
    ishape = static_shape(indices)
    k = ishape[-1]
    out_shape = ishape[:-1] + src[batch_dims + k :]
    lead = len(ishape) - 1

    def f(*o: E.PrimExpr) -> E.PrimExpr:
        where = o[:lead]
        picked = [_wrap_index(indices[(*where, j)], src[batch_dims + j]) for j in range(k)]
        return X[(*o[:batch_dims], *picked, *o[lead:])]

    return te.compute(out_shape, f, name="gather_nd", tag="injective")


def band(X: Tensor, k: int, upper: bool) -> Tensor:
    """ONNX Trilu: keep ``j - i >= k`` (upper) or ``j - i <= k`` (lower) of the last two
    axes, zero elsewhere."""

    def f(*i: E.PrimExpr) -> E.PrimExpr:
        d = i[-1] - i[-2]
        keep = d >= k if upper else d <= k
        return E.select(keep, X[i], E.const(0, X.dtype))

    return te.compute(static_shape(X), f, name="trilu", tag="injective")


def one_hot(indices: Tensor, values: Tensor, depth: int, axis: int) -> Tensor:
    """ONNX OneHot: ``values[1]`` where the (possibly negative) index equals the position on
    the new ``axis`` of size ``depth``, ``values[0]`` elsewhere."""
    ishape = static_shape(indices)
    out_shape = ishape[:axis] + (depth,) + ishape[axis:]

    def f(*o: E.PrimExpr) -> E.PrimExpr:
        raw = indices[(*o[:axis], *o[axis + 1 :])]
        raw = E.cast("int64", raw)
        pos = E.select(raw < 0, raw + depth, raw)
        hit = E.eq(pos, E.cast("int64", o[axis]))
        return E.select(hit, values[(1,)], values[(0,)])

    return te.compute(out_shape, f, name="one_hot", tag="injective")


def reverse_sequence(X: Tensor, lengths: Tensor, batch_axis: int, time_axis: int) -> Tensor:
    """ONNX ReverseSequence: per batch entry, reverse the first ``lengths[b]`` time steps."""
    src = static_shape(X)

    def f(*i: E.PrimExpr) -> E.PrimExpr:
        n = E.max_(E.min_(E.cast("int32", lengths[(i[batch_axis],)]), src[time_axis]), 0)
        t = i[time_axis]
        flipped = E.max_(E.min_(n - 1 - t, src[time_axis] - 1), 0)
        at = E.select(t < n, flipped, t)
        return X[(*i[:time_axis], at, *i[time_axis + 1 :])]

    return te.compute(src, f, name="reverse_sequence", tag="injective")
