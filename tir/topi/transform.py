"""Injective computes that move data: reshape, transpose, concatenate, gather.

Each output element reads one input element at an index computed from its own,
so they are all INJECTIVE for fusion. Shapes are static ints; the graph frontend
resolves ``-1`` and symbolic dims before it calls these.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from ember.errors import ArgumentError
from ember.tir import expr as E
from ember.tir.te import operation as te
from ember.tir.te.tensor import Tensor


def static_shape(t: Tensor) -> tuple[int, ...]:
    """``t``'s shape as ints; ArgumentError if a dim is symbolic."""
    out = []
    for s in t.shape:
        if not isinstance(s, E.IntImm):
            raise ArgumentError(f"tensor '{t.name}' has a symbolic shape {list(t.shape)}")
        out.append(int(s.value))
    return tuple(out)


def unravel(flat: E.PrimExpr, shape: Sequence[int]) -> list[E.PrimExpr]:
    """The row-major multi-index of ``flat`` in ``shape``."""
    idx: list[E.PrimExpr] = []
    for d in reversed(shape):
        idx.append(flat % d if d != 1 else E.const(0, "int32"))
        flat = flat // d
    return idx[::-1]


def reshape(X: Tensor, shape: Sequence[int], name: str = "reshape") -> Tensor:
    """Row-major reshape to ``shape`` (same element count)."""
    src = static_shape(X)
    if int(np.prod(src)) != int(np.prod(shape)):
        raise ArgumentError(f"reshape: cannot reshape {list(src)} into {list(shape)}")

    def f(*i: E.PrimExpr) -> E.PrimExpr:
        flat: E.PrimExpr = E.const(0, "int32")
        for ix, d in zip(i, shape):
            flat = flat * d + ix
        return X[tuple(unravel(flat, src))] if src else X[()]

    return te.compute(tuple(shape), f, name=name, tag="injective")


def transpose(X: Tensor, perm: Sequence[int], name: str = "transpose") -> Tensor:
    """``out[i_0, ..] = X[i_perm^-1 ...]``: numpy's ``X.transpose(perm)``."""
    src = static_shape(X)
    if sorted(perm) != list(range(len(src))):
        raise ArgumentError(f"transpose: {list(perm)} is not a permutation of {len(src)} axes")
    out_shape = tuple(src[p] for p in perm)

    def f(*i: E.PrimExpr) -> E.PrimExpr:
        idx: list[E.PrimExpr] = [E.const(0, "int32")] * len(src)
        for out_axis, p in enumerate(perm):
            idx[p] = i[out_axis]
        return X[tuple(idx)]

    return te.compute(out_shape, f, name=name, tag="injective")


def concatenate(xs: Sequence[Tensor], axis: int, name: str = "concat") -> Tensor:
    """Join tensors along ``axis``; each input is read at a clamped index so no branch
    reads out of bounds, and a select picks the one that owns the element."""
    shapes = [static_shape(x) for x in xs]
    sizes = [s[axis] for s in shapes]
    offsets = np.cumsum([0, *sizes]).tolist()
    out_shape = list(shapes[0])
    out_shape[axis] = int(offsets[-1])

    def f(*i: E.PrimExpr) -> E.PrimExpr:
        j = i[axis]
        value: E.PrimExpr | None = None
        for k in reversed(range(len(xs))):
            if sizes[k] == 0:
                continue
            local = E.max_(E.min_(j - offsets[k], sizes[k] - 1), 0)
            read = xs[k][(*i[:axis], local, *i[axis + 1 :])]
            value = read if value is None else E.select(j < offsets[k + 1], read, value)
        assert value is not None
        return value

    return te.compute(tuple(out_shape), f, name=name, tag="injective")


def take(X: Tensor, indices: Tensor, axis: int, name: str = "gather") -> Tensor:
    """numpy's ``np.take(X, indices, axis)``; negative indices count from the end, and an
    index out of range is clamped (the graph executor refuses one before the kernel runs,
    see ``ember/index_guard.py``)."""
    src = static_shape(X)
    ishape = static_shape(indices)
    out_shape = src[:axis] + ishape + src[axis + 1 :]
    n = src[axis]

    def f(*i: E.PrimExpr) -> E.PrimExpr:
        raw = E.cast(
            "int32" if n < 2**31 else "int64", indices[tuple(i[axis : axis + len(ishape)])]
        )
        pos = E.select(raw < 0, raw + n, raw)
        pos = E.max_(E.min_(pos, n - 1), 0)
        return X[(*i[:axis], pos, *i[axis + len(ishape) :])]

    return te.compute(out_shape, f, name=name, tag="injective")
