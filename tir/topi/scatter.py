"""Computes that gather by searching: scatters, cumulative sums and top-k, as reductions.

A scatter writes where its indices say; a tensor expression can only say what each
output element reads. So each output element reduces over every update that could
land on it (``where`` the index matches): a sum, product, max or min for the ONNX
reductions, and for plain assignment the position of the last matching update
(ONNX leaves duplicates undefined; the last one wins, as in onnxruntime). The max and min
reductions give NaN where the data element or any update landing on it is NaN, as
ReduceMax does (:mod:`.nan_order`) and numpy's ``np.maximum.at``; onnxruntime's result
depends on the order of the updates (``std::max`` keeps whichever operand comes first
when one is NaN), so Ember deliberately differs from it there. CumSum
and TopK are reductions along one axis the same way (a masked sum; a rank count,
then the element of each rank). These cost O(n*m) work, which is fine for the
index-heavy small tensors models use them on; they are COMM_REDUCE-shaped computes
with no schedule of their own.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from ember.errors import ArgumentError
from ember.tir import dtype as dt
from ember.tir import expr as E
from ember.tir.te import operation as te
from ember.tir.te.tensor import Tensor
from ember.tir.topi import nan_order
from ember.tir.topi.broadcast import nan_max, nan_min
from ember.tir.topi.indexing import _wrap_index
from ember.tir.topi.transform import static_shape, unravel

prod = te.comm_reducer(lambda x, y: x * y, lambda t: E.const(1, t), name="prod")

REDUCTIONS = ("none", "add", "mul", "max", "min")


def _all(conds: Sequence[E.PrimExpr]) -> E.PrimExpr:
    out = E.const(True, "bool")
    for c in conds:
        out = E.logical_and(out, c)
    return out


def _combine(X: Tensor, found: Tensor, read: object, reduction: str, name: str) -> Tensor:
    """The output: ``X`` combined with the reduced updates ``found`` (for "none", ``found``
    holds the position of the last match, or -1, and ``read(p, pos)`` fetches it)."""

    def f(*p: E.PrimExpr) -> E.PrimExpr:
        v = found[p]
        if reduction == "none":
            return E.select(v >= 0, read(p, E.max_(v, 0)), X[p])  # type: ignore[operator]
        if reduction == "add":
            return X[p] + v
        if reduction == "mul":
            return X[p] * v
        # an element no update lands on meets the reducer's identity (-inf, +inf): kept
        return (nan_max if reduction == "max" else nan_min)(X[p], v)

    return te.compute(X.shape, f, name=name, tag="injective")


def _reduce(values: E.PrimExpr, axes: object, where: E.PrimExpr, reduction: str) -> E.PrimExpr:
    if reduction == "none":  # the last matching position (an integer)
        return te.max(values, axis=axes, where=where)
    if reduction == "add":
        return te.sum(values, axis=axes, where=where)
    if reduction == "mul":
        return prod(values, axis=axes, where=where)
    return nan_order.reducer(reduction)(values, axis=axes, where=where)


def scatter_elements(
    X: Tensor, indices: Tensor, updates: Tensor, axis: int, reduction: str = "none"
) -> Tensor:
    """ONNX ScatterElements: ``out[i with axis = indices[i]] <op>= updates[i]``."""
    if reduction not in REDUCTIONS:
        raise ArgumentError(f"scatter: unknown reduction {reduction!r}")
    src = static_shape(X)
    ishape = static_shape(indices)
    r = te.reduce_axis((0, ishape[axis]), "r")

    def at(p: Sequence[E.PrimExpr], pos: E.PrimExpr) -> tuple[E.PrimExpr, ...]:
        return tuple(pos if d == axis else E.min_(p[d], ishape[d] - 1) for d in range(len(src)))

    def found(*p: E.PrimExpr) -> E.PrimExpr:
        conds = [p[d] < ishape[d] for d in range(len(src)) if d != axis and ishape[d] < src[d]]
        conds.append(E.eq(_wrap_index(indices[at(p, r.var)], src[axis]), p[axis]))
        value = E.cast("int32", r.var) if reduction == "none" else updates[at(p, r.var)]
        return _reduce(value, r, _all(conds), reduction)

    hit = te.compute(src, found, name="scatter_find")
    return _combine(X, hit, lambda p, pos: updates[at(p, pos)], reduction, "scatter_elements")


def scatter_nd(X: Tensor, indices: Tensor, updates: Tensor, reduction: str = "none") -> Tensor:
    """ONNX ScatterND: ``out[indices[m]] <op>= updates[m]`` for every index tuple ``m``."""
    if reduction not in REDUCTIONS:
        raise ArgumentError(f"scatter_nd: unknown reduction {reduction!r}")
    src = static_shape(X)
    ishape = static_shape(indices)
    lead, k = ishape[:-1], ishape[-1]
    if not lead:
        raise ArgumentError("scatter_nd: indices must have at least 2 dimensions")
    rs = [te.reduce_axis((0, d), f"m{j}") for j, d in enumerate(lead)]

    def found(*p: E.PrimExpr) -> E.PrimExpr:
        m = tuple(r.var for r in rs)
        conds = [E.eq(_wrap_index(indices[(*m, j)], src[j]), p[j]) for j in range(k)]
        if reduction == "none":
            flat: E.PrimExpr = E.const(0, "int32")
            for r, d in zip(rs, lead):
                flat = flat * d + r.var
            return te.max(flat, axis=rs, where=_all(conds))
        return _reduce(updates[(*m, *p[k:])], rs, _all(conds), reduction)

    def read(p: Sequence[E.PrimExpr], pos: E.PrimExpr) -> E.PrimExpr:
        return updates[(*unravel(pos, lead), *p[k:])]

    hit = te.compute(src, found, name="scatter_nd_find")
    return _combine(X, hit, read, reduction, "scatter_nd")


def cumsum(X: Tensor, axis: int, exclusive: bool, reverse: bool) -> Tensor:
    """ONNX CumSum along ``axis`` (see :func:`_cumulative` for how)."""
    return _cumulative(X, axis, exclusive, reverse, te.sum, "cumsum")


def cumprod(X: Tensor, axis: int, exclusive: bool, reverse: bool) -> Tensor:
    """ONNX CumProd along ``axis``, the same two levels with products (exclusive and
    skipped elements count as 1)."""
    return _cumulative(X, axis, exclusive, reverse, _prod, "cumprod")


_prod = te.comm_reducer(lambda x, y: x * y, lambda t: E.const(1, t), name="prod")


def _cumulative(
    X: Tensor, axis: int, exclusive: bool, reverse: bool, reducer: Any, name: str
) -> Tensor:
    """A running sum (or product, by ``reducer``) along ``axis`` in two levels,
    ``O(n sqrt(n))`` work for ``n`` elements along it rather than a masked sum over the
    whole axis (``O(n^2)``: 1,024 x 1,024 ran at 0.02x onnxruntime): the axis is cut
    into blocks of ``b = ceil(sqrt(n))``; each element sums its block's elements up to
    it (a masked sum over ``b``) plus the totals of the blocks before it (a masked sum
    over ``n / b`` block totals)."""
    src = static_shape(X)
    n = src[axis]
    b = math.isqrt(n - 1) + 1 if n > 1 else 1
    nb = -(-n // b)

    def at(p: Sequence[E.PrimExpr], pos: E.PrimExpr, T: Tensor = X) -> E.PrimExpr:
        return T[(*p[:axis], pos, *p[axis + 1 :])]

    t = te.reduce_axis((0, b), "t")

    def total(*p: E.PrimExpr) -> E.PrimExpr:
        pos = p[axis] * b + t.var
        return reducer(at(p, E.min_(pos, n - 1)), axis=t, where=pos < n)

    totals = te.compute((*src[:axis], nb, *src[axis + 1 :]), total, name=f"{name}_blocks")
    j = te.reduce_axis((0, b), "j")
    q = te.reduce_axis((0, nb), "q")

    def keeps(k: E.PrimExpr, i: E.PrimExpr) -> E.PrimExpr:  # element k counts for i
        if reverse:
            return k > i if exclusive else k >= i
        return k < i if exclusive else k <= i

    def within(*p: E.PrimExpr) -> E.PrimExpr:
        i = p[axis]
        pos = (i // b) * b + j.var
        inside = E.logical_and(pos < n, keeps(pos, i))
        return reducer(at(p, E.min_(pos, n - 1)), axis=j, where=inside)

    def earlier(*p: E.PrimExpr) -> E.PrimExpr:
        i = p[axis]
        before = q.var > i // b if reverse else q.var < i // b
        return reducer(at(p, q.var, totals), axis=q, where=before)

    part = te.compute(src, within, name=f"{name}_within")
    blocks = te.compute(src, earlier, name=f"{name}_before")
    if reducer is te.sum:
        return te.compute(src, lambda *p: part[p] + blocks[p], name=name)
    return te.compute(src, lambda *p: part[p] * blocks[p], name=name)


# Up to this k, TopK picks the best remaining element k times (O(k*n)); above it, it
# ranks every element against every other (O(n*n)) once.
SELECT_MAX_K = 8


def topk(X: Tensor, k: int, axis: int, largest: bool) -> tuple[Tensor, Tensor]:
    """ONNX TopK (sorted): the ``k`` largest (or smallest) along ``axis`` and their int64
    positions; equal values keep their order (the lower position first). NaN counts as
    larger than every number, as in onnxruntime (:func:`.nan_order.before`)."""
    n = static_shape(X)[axis]
    if not 0 <= k <= n:
        raise ArgumentError(f"topk: k={k} is out of range for an axis of size {n}")
    if k <= SELECT_MAX_K:
        return _topk_select(X, k, axis, largest)
    return _topk_rank(X, k, axis, largest)


def _topk_select(X: Tensor, k: int, axis: int, largest: bool) -> tuple[Tensor, Tensor]:
    """Pass ``p`` reduces to the best ``(value, position)`` that comes after pass ``p-1``'s
    in the output order; a last compute lays the ``k`` picks along ``axis``."""
    src = static_shape(X)
    keep = (*src[:axis], 1, *src[axis + 1 :])

    def better(va: E.PrimExpr, ia: E.PrimExpr, vb: E.PrimExpr, ib: E.PrimExpr) -> E.PrimExpr:
        return nan_order.before(va, ia, vb, ib, largest)

    def combine(a: tuple, b: tuple) -> tuple:
        pick = better(a[1], a[0], b[1], b[0])
        return E.select(pick, a[0], b[0]), E.select(pick, a[1], b[1])

    def identity(ti: str, tv: str) -> tuple:
        # after every element: the order's last value at a position past the axis (a real
        # -inf, or a real NaN with largest=0, comes first, being at a lower position)
        if not dt.is_float(tv):
            worst = te.min_value(tv) if largest else te.max_value(tv)
        else:
            worst = E.const(float("-inf") if largest else float("nan"), tv)
        return E.const(src[axis], ti), worst

    best = te.comm_reducer(combine, identity, name="topk_best")
    picks: list[tuple[Tensor, Tensor]] = []

    def pick(p: int) -> object:
        j = te.reduce_axis((0, src[axis]), f"j{p}")

        def f(*q: E.PrimExpr) -> object:
            at = (*q[:axis], j.var, *q[axis + 1 :])
            cond = None
            if p:
                pi, pv = picks[p - 1]
                cond = better(pv[q], pi[q], X[at], j.var)
            return best((j.var, X[at]), axis=j, where=cond)

        return f

    for p in range(k):
        picks.append(tuple(te.compute(keep, pick(p), name=f"topk_pick{p}")))  # type: ignore[arg-type]

    def lay(which: int, dtype: str):  # noqa: ANN202
        def f(*o: E.PrimExpr) -> E.PrimExpr:
            q = (*o[:axis], 0, *o[axis + 1 :])
            value: E.PrimExpr = E.cast(dtype, picks[k - 1][which][q])
            for p in reversed(range(k - 1)):
                value = E.select(E.eq(o[axis], p), E.cast(dtype, picks[p][which][q]), value)
            return value

        return f

    out_shape = (*src[:axis], k, *src[axis + 1 :])
    values = te.compute(out_shape, lay(1, X.dtype), name="topk_values", tag="injective")
    where = te.compute(out_shape, lay(0, "int64"), name="topk_index", tag="injective")
    return values, where


def _topk_rank(X: Tensor, k: int, axis: int, largest: bool) -> tuple[Tensor, Tensor]:
    """Each element's rank is the count of elements that beat it; the output at rank ``r``
    is the element whose rank is ``r``."""
    src = static_shape(X)
    n = src[axis]
    j = te.reduce_axis((0, n), "j")

    def rank(*p: E.PrimExpr) -> E.PrimExpr:
        other = X[(*p[:axis], j.var, *p[axis + 1 :])]
        beats = nan_order.before(other, j.var, X[p], p[axis], largest)
        return te.sum(E.const(1, "int32"), axis=j, where=beats)

    ranks = te.compute(src, rank, name="topk_rank")
    out_shape = (*src[:axis], k, *src[axis + 1 :])
    i = te.reduce_axis((0, n), "i")

    def pick(*o: E.PrimExpr) -> E.PrimExpr:
        hit = E.eq(ranks[(*o[:axis], i.var, *o[axis + 1 :])], o[axis])
        return te.sum(E.cast("int64", i.var), axis=i, where=hit)

    where = te.compute(out_shape, pick, name="topk_index")
    values = te.compute(
        out_shape,
        lambda *o: X[(*o[:axis], E.cast("int32", where[o]), *o[axis + 1 :])],
        name="topk_values",
        tag="injective",
    )
    return values, where
