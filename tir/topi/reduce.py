"""Reductions over any set of axes (ONNX's Reduce* family) and arg-reductions.

``reduce_axes`` takes a tensor, the axes to reduce (non-negative, sorted) and one of
the kinds sum, mean, max, min, prod, l1, l2, sum_square, log_sum, log_sum_exp;
it gives the reduced tensor with the axes kept as 1 or dropped. Half-precision
inputs accumulate in float32 and are cast back at the end. max and min give NaN
where the reduced window holds one (:mod:`.nan_order`). LogSumExp subtracts the
maximum before exponentiating (one extra reduction stage), so large inputs do not
overflow. ``arg_reduce`` gives the int64 index of the first (or last) extreme
element along one axis: a max/min stage, then the smallest (largest) index that
holds it.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from ember.errors import ArgumentError
from ember.tir import dtype as dt
from ember.tir import expr as E
from ember.tir import op as tir_op
from ember.tir.te import operation as te
from ember.tir.te.tensor import Tensor
from ember.tir.topi import nan_order
from ember.tir.topi.transform import static_shape

REDUCE_KINDS = (
    "sum",
    "mean",
    "max",
    "min",
    "prod",
    "l1",
    "l2",
    "sum_square",
    "log_sum",
    "log_sum_exp",
)

prod = te.comm_reducer(lambda x, y: x * y, lambda t: E.const(1, t), name="prod")


def acc_dtype(dtype: str) -> str:
    """The dtype a reduction accumulates in: float32 for 16-bit floats, else ``dtype``."""
    return "float32" if dtype in ("float16", "bfloat16") else dtype


def widen(v: E.PrimExpr, acc: str) -> E.PrimExpr:
    """``v`` in the accumulator dtype ``acc`` (a cast only where it differs)."""
    return v if v.dtype == acc else E.cast(acc, v)


def reduced_shape(shape: Sequence[int], axes: Sequence[int], keepdims: bool) -> tuple[int, ...]:
    """The shape after reducing ``axes``: kept as 1s with ``keepdims``, else dropped."""
    if keepdims:
        return tuple(1 if d in axes else s for d, s in enumerate(shape))
    return tuple(s for d, s in enumerate(shape) if d not in axes)


def full_index(
    ndim: int, axes: Sequence[int], keepdims: bool, out: Sequence[E.PrimExpr], red: Sequence
) -> tuple:
    """The input index of output index ``out`` at reduction point ``red``."""
    idx, j, k = [], 0, 0
    for d in range(ndim):
        if d in axes:
            idx.append(red[k])
            k += 1
            j += 1 if keepdims else 0
        else:
            idx.append(out[j])
            j += 1
    return tuple(idx)


def _reduce_stage(
    X: Tensor,
    axes: Sequence[int],
    keepdims: bool,
    term: Callable[[E.PrimExpr, tuple], E.PrimExpr],
    reducer: Callable[..., E.PrimExpr],
    name: str,
) -> Tensor:
    """``reducer(term(X[idx], out_idx))`` over ``axes``: one reduction stage."""
    xs = static_shape(X)
    rs = [te.reduce_axis((0, xs[d]), name=f"k{d}") for d in axes]
    out_shape = reduced_shape(xs, axes, keepdims)

    def f(*i: E.PrimExpr) -> E.PrimExpr:
        value = X[full_index(len(xs), axes, keepdims, i, rs)]
        return reducer(term(value, i), axis=tuple(rs))

    return te.compute(out_shape, f, name=name, tag="reduce")


def _check(xs: tuple[int, ...], kind: str, axes: tuple[int, ...]) -> None:
    if kind not in REDUCE_KINDS:
        raise ArgumentError(f"reduce: unknown kind {kind!r}; expected one of {REDUCE_KINDS}")
    if any(not 0 <= a < len(xs) for a in axes):
        raise ArgumentError(f"reduce: axes {list(axes)} out of range for shape {list(xs)}")
    if any(xs[a] == 0 for a in axes):
        raise ArgumentError(f"reduce: cannot reduce an empty axis of shape {list(xs)}")


# the value each kind accumulates from one (already widened) element
_TERMS: dict[str, Callable[[E.PrimExpr], E.PrimExpr]] = {
    "sum": lambda v: v,
    "mean": lambda v: v,
    "log_sum": lambda v: v,
    "prod": lambda v: v,
    "l1": lambda v: te.abs(v),
    "l2": lambda v: v * v,
    "sum_square": lambda v: v * v,
}


def reduce_axes(
    X: Tensor, kind: str, axes: Sequence[int], keepdims: bool, name: str = "reduce"
) -> Tensor:
    """Reduce ``X`` over ``axes`` with ``kind`` (see the module docstring)."""
    xs = static_shape(X)
    axes = tuple(sorted(set(axes)))
    _check(xs, kind, axes)
    acc = acc_dtype(X.dtype)
    if kind in ("max", "min"):  # a NaN in the window gives NaN (see nan_order)
        return _reduce_stage(X, axes, keepdims, lambda v, i: v, nan_order.reducer(kind), name)
    if kind == "log_sum_exp":
        return _log_sum_exp(X, axes, keepdims, acc, name)
    count = 1
    for a in axes:
        count *= xs[a]
    term = _TERMS[kind]
    red = prod if kind == "prod" else te.sum
    total = _reduce_stage(X, axes, keepdims, lambda v, i: term(_back(v, acc)), red, f"{name}_acc")
    finish: dict[str, Callable[[E.PrimExpr], E.PrimExpr]] = {
        "mean": lambda v: _mean(v, count),
        "l2": _sqrt,
        "log_sum": te.log,
    }
    post = finish.get(kind)
    if post is None and acc == X.dtype:
        return total
    post = post or (lambda v: v)
    return te.compute(
        total.shape, lambda *i: _back(post(total[i]), X.dtype), name=name, tag="reduce"
    )


def _log_sum_exp(X: Tensor, axes: tuple[int, ...], keepdims: bool, acc: str, name: str) -> Tensor:
    """``log(sum(exp(x - m))) + m`` with m the maximum, so large inputs do not overflow."""
    mx = _reduce_stage(X, axes, keepdims, lambda v, i: _back(v, acc), te.max, f"{name}_max")
    # all -inf would make x - max NaN; shift by 0 there instead
    safe = te.compute(
        mx.shape,
        lambda *i: E.select(tir_op.isinf(mx[i]), E.const(0, acc), mx[i]),
        name=f"{name}_shift",
    )
    sm = _reduce_stage(
        X, axes, keepdims, lambda v, i: te.exp(_back(v, acc) - safe[i]), te.sum, f"{name}_sum"
    )
    return te.compute(
        sm.shape, lambda *i: _back(te.log(sm[i]) + safe[i], X.dtype), name=name, tag="reduce"
    )


def _mean(v: E.PrimExpr, count: int) -> E.PrimExpr:
    if dt.is_float(v.dtype):
        return v / E.const(count, v.dtype)
    return E.truncdiv(v, E.const(count, v.dtype))


def _sqrt(v: E.PrimExpr) -> E.PrimExpr:
    if dt.is_float(v.dtype):
        return te.sqrt(v)
    return E.cast(v.dtype, te.sqrt(E.cast("float64", v)))


def _back(v: E.PrimExpr, dtype: str) -> E.PrimExpr:
    return v if v.dtype == dtype else E.cast(dtype, v)


def arg_reduce(
    X: Tensor,
    kind: str,
    axis: int,
    keepdims: bool,
    select_last: bool = False,
    name: str = "argreduce",
) -> Tensor:
    """int64 index of the max (``kind="max"``) or min along ``axis``; ties go to the first
    index, or the last with ``select_last``. A row holding NaN gives its first (last) NaN's
    index, as numpy's argmax and ONNX's reference (see :mod:`.nan_order`)."""
    xs = static_shape(X)
    if kind not in ("max", "min"):
        raise ArgumentError(f"arg_reduce: kind must be 'max' or 'min', got {kind!r}")
    if not 0 <= axis < len(xs) or xs[axis] == 0:
        raise ArgumentError(f"arg_reduce: axis {axis} does not fit shape {list(xs)}")
    n = xs[axis]
    # the extreme keeps a NaN, and a NaN matches a NaN: a row holding one points at it
    red = nan_order.reducer(kind)
    ext = _reduce_stage(X, (axis,), True, lambda v, i: v, red, f"{name}_{kind}")
    k = te.reduce_axis((0, n), name="k")
    out_shape = reduced_shape(xs, (axis,), keepdims)

    def f(*i: E.PrimExpr) -> E.PrimExpr:
        full = full_index(len(xs), (axis,), keepdims, i, (k,))
        at_ext = (*full[:axis], E.const(0, "int32"), *full[axis + 1 :])
        hit = nan_order.same_value(X[full], ext[at_ext])
        kk = E.cast("int64", k)
        if select_last:
            return te.max(E.select(hit, kk, E.const(-1, "int64")), axis=k)
        return te.min(E.select(hit, kk, E.const(n, "int64")), axis=k)

    return te.compute(out_shape, f, name=name, tag="reduce")


def hardmax(X: Tensor, axis: int, name: str = "hardmax") -> Tensor:
    """1 at the first maximum along ``axis``, 0 elsewhere."""
    xs = static_shape(X)
    idx = arg_reduce(X, "max", axis, True, name=f"{name}_arg")
    one, zero = E.const(1, X.dtype), E.const(0, X.dtype)

    def f(*i: E.PrimExpr) -> E.PrimExpr:
        at = (*i[:axis], E.const(0, "int32"), *i[axis + 1 :])
        return E.select(E.cast("int64", i[axis]) == idx[at], one, zero)

    return te.compute(xs, f, name=name, tag="hardmax")
