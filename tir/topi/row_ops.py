"""Softmax and normalization over the last axis of an N-D tensor, computed row by row.

The graph's ``softmax`` and ``normalize`` ops (``tir/topi/pool.py``, ``tir/topi/norm.py``)
compute over any axes, as N-D reductions that a generic schedule runs one whole pass at a
time, evaluating softmax's exponential twice. When the axis is the last one, the tensor is
R rows of C contiguous elements, and these computes say so: every statistic is an (R,)
row stage reduced through a :data:`~ember.tir.topi.rows.RowReduce` (the CPU's lane
partials vectorize), softmax's exponentials are an (R, C) stage of their own, read by the
sum and by the output, and the output is the op's N-D tensor reading those stages at its
row ``flat(i[:-1])``. A schedule can then compute everything a row needs at the output's
row loop while the row is in cache, as the ``softmax.llvm`` and ``layer_norm.llvm``
templates do for 2-D tensors (``codegen_llvm/schedules/anchors.py``: ``rows``).
"""

from __future__ import annotations

from collections.abc import Sequence

from ember.errors import ArgumentError
from ember.tir import expr as E
from ember.tir.te import operation as te
from ember.tir.te.tensor import Tensor
from ember.tir.topi.norm import broadcast_read
from ember.tir.topi.rows import RowReduce, plain_row_reduce
from ember.tir.topi.transform import static_shape

ROWS_TAG = "rows_last_axis"  # the output stage; its attrs hold the (rows, columns) shape


def _row_view(X: Tensor) -> tuple[int, int, list[int]]:
    """``(R, C, lead)``: rows, row length and the leading dims whose flat index is the row."""
    xs = static_shape(X)
    if len(xs) < 2:
        raise ArgumentError(f"row computes need a tensor of 2 or more dims, got {list(xs)}")
    lead = list(xs[:-1])
    rows = 1
    for d in lead:
        rows *= d
    return rows, xs[-1], lead


def _unflat(r: E.PrimExpr, lead: Sequence[int]) -> tuple[E.PrimExpr, ...]:
    """The leading indices of flat row ``r`` (row-major)."""
    idx: list[E.PrimExpr] = []
    for d in reversed(lead[1:]):
        idx.append(E.floormod(r, d) if d > 1 else E.const(0, r.dtype))
        r = E.floordiv(r, d) if d > 1 else r
    idx.append(r)
    return tuple(reversed(idx))


def _flat(i: Sequence[E.PrimExpr], lead: Sequence[int]) -> E.PrimExpr:
    """The flat row of leading indices ``i``."""
    r = i[0]
    for d, v in zip(lead[1:], i[1:]):
        r = r * d + v
    return r


def softmax_rows(
    X: Tensor, log: bool = False, row_reduce: RowReduce = plain_row_reduce, name: str = "softmax"
) -> Tensor:
    """Softmax (or log-softmax) over the last axis of float X, stabilised by the row maximum.

    Stages: ``{name}_max`` and ``{name}_sum`` (R,) through ``row_reduce``; for softmax the
    exponentials ``{name}_exp`` (R, C) and the reciprocal sum ``{name}_inv`` (R,), so each
    element is exponentiated once and multiplied, not divided; for log-softmax the log of
    the sum ``{name}_lse`` (R,), the sum reading ``exp`` directly (it is read once)."""
    R, C, lead = _row_view(X)
    xs = static_shape(X)

    def src(r: E.PrimExpr, k: E.PrimExpr) -> E.PrimExpr:
        return X[(*_unflat(r, lead), k)]

    mx = row_reduce(src, R, C, "max", f"{name}_max")
    attrs = {"rows": R, "columns": C, "log": log}
    if log:
        sm = row_reduce(lambda r, k: te.exp(src(r, k) - mx[r]), R, C, "sum", f"{name}_sum")
        lse = te.compute((R,), lambda r: te.log(sm[r]), name=f"{name}_lse")

        def log_out(*i: E.PrimExpr) -> E.PrimExpr:
            r = _flat(i[:-1], lead)
            return X[i] - mx[r] - lse[r]

        return te.compute(xs, log_out, name=name, tag=ROWS_TAG, attrs=attrs)
    ex = te.compute((R, C), lambda r, c: te.exp(src(r, c) - mx[r]), name=f"{name}_exp")
    sm = row_reduce(lambda r, k: ex[r, k], R, C, "sum", f"{name}_sum")
    inv = te.compute((R,), lambda r: E.const(1, X.dtype) / sm[r], name=f"{name}_inv")

    def out(*i: E.PrimExpr) -> E.PrimExpr:
        r = _flat(i[:-1], lead)
        return ex[r, i[-1]] * inv[r]

    return te.compute(xs, out, name=name, tag=ROWS_TAG, attrs=attrs)


def normalize_rows(
    X: Tensor,
    eps: float,
    scale: Tensor | None = None,
    bias: Tensor | None = None,
    center: bool = True,
    row_reduce: RowReduce = plain_row_reduce,
    name: str = "norm",
) -> Tensor:
    """Layer norm (``center``) or RMS norm over the last axis of float X, accumulated in
    X's dtype, with ``scale`` and ``bias`` broadcasting to X.

    Stages: ``{name}_mean`` (centred only) and ``{name}_var`` (R,) through ``row_reduce``,
    the variance around the mean (two passes: accurate when the mean is large), and the
    reciprocal standard deviation ``{name}_rstd`` (R,), once per row."""
    R, C, lead = _row_view(X)
    xs = static_shape(X)
    inv_c = 1.0 / C

    def src(r: E.PrimExpr, k: E.PrimExpr) -> E.PrimExpr:
        return X[(*_unflat(r, lead), k)]

    if center:
        mean = row_reduce(src, R, C, "sum", f"{name}_mean", scale=inv_c)

        def square(r: E.PrimExpr, k: E.PrimExpr) -> E.PrimExpr:
            return (src(r, k) - mean[r]) * (src(r, k) - mean[r])
    else:

        def square(r: E.PrimExpr, k: E.PrimExpr) -> E.PrimExpr:
            return src(r, k) * src(r, k)

    var = row_reduce(square, R, C, "sum", f"{name}_var", scale=inv_c)
    rstd = te.compute((R,), lambda r: te.rsqrt(var[r] + E.const(eps, X.dtype)), name=f"{name}_rstd")

    def out(*i: E.PrimExpr) -> E.PrimExpr:
        r = _flat(i[:-1], lead)
        y = (X[i] - mean[r] if center else X[i]) * rstd[r]
        if scale is not None:
            y = y * broadcast_read(scale, i)
        if bias is not None:
            y = y + broadcast_read(bias, i)
        return y

    attrs = {"rows": R, "columns": C, "center": center}
    return te.compute(xs, out, name=name, tag=ROWS_TAG, attrs=attrs)
