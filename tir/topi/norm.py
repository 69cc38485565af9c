"""Normalization computes: moments over a set of axes, batch norm, Lp norm, LRN.

``normalize`` is the one shape behind LayerNormalization, InstanceNormalization,
GroupNormalization (after a reshape), MeanVarianceNormalization and RMS norm:
``y = (x - mean) * rsqrt(var + eps) * scale + bias`` with the moments over
``axes`` and ``scale``/``bias`` broadcast numpy-style against ``x``. The mean and
the variance are two reductions (the variance of ``x - mean``, not
``E[x^2] - E[x]^2``, which cancels badly), accumulated in ``acc`` (float32 for
16-bit inputs). ``batch_norm`` is inference-mode batch normalization, a single
elementwise stage; ``lp_normalize`` divides by the L1/L2 norm along one axis;
``lrn`` is AlexNet's local response normalization across channels.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from ember.errors import ArgumentError
from ember.tir import expr as E
from ember.tir.te import operation as te
from ember.tir.te.tensor import Tensor
from ember.tir.topi.pool import padded_read
from ember.tir.topi.reduce import full_index
from ember.tir.topi.transform import static_shape


def broadcast_read(T: Tensor, idx: Sequence[E.PrimExpr]) -> E.PrimExpr:
    """``T`` read at output index ``idx`` under numpy broadcasting (``T`` right-aligned)."""
    ts = static_shape(T)
    off = len(idx) - len(ts)
    if off < 0:
        raise ArgumentError(f"tensor '{T.name}' {list(ts)} has more dims than {len(idx)}")
    sub = [E.const(0, "int32") if d == 1 else idx[off + j] for j, d in enumerate(ts)]
    return T[tuple(sub)]


def _check_broadcast(T: Tensor, xs: tuple[int, ...], what: str) -> None:
    ts = static_shape(T)
    off = len(xs) - len(ts)
    if off < 0 or any(d not in (1, xs[off + j]) for j, d in enumerate(ts)):
        raise ArgumentError(f"normalize: {what} of shape {list(ts)} does not broadcast to {xs}")


def _as(dtype: str, v: E.PrimExpr) -> E.PrimExpr:
    return v if v.dtype == dtype else E.cast(dtype, v)


def _moment(X: Tensor, axes: tuple[int, ...], acc: str, term: Callable, name: str) -> Tensor:
    """``mean over axes of term(x, kept index)`` in ``acc``, the reduced axes kept as 1."""
    xs = static_shape(X)
    count = 1
    for a in axes:
        count *= xs[a]
    rs = [te.reduce_axis((0, xs[d]), name=f"k{d}") for d in axes]
    kept = tuple(1 if d in axes else s for d, s in enumerate(xs))

    def f(*i: E.PrimExpr) -> E.PrimExpr:
        v = _as(acc, X[full_index(len(xs), axes, True, i, rs)])
        return te.sum(term(v, i) * E.const(1.0 / count, acc), axis=tuple(rs))

    return te.compute(kept, f, name=name)


def normalize(
    X: Tensor,
    axes: Sequence[int],
    eps: float,
    scale: Tensor | None = None,
    bias: Tensor | None = None,
    center: bool = True,
    acc: str = "float32",
    name: str = "norm",
) -> list[Tensor]:
    """``[y, mean, inv_std]``; mean and inv_std keep the reduced axes as 1 (``center=False``
    gives RMS norm: no mean is subtracted, and the mean returned is zero)."""
    xs = static_shape(X)
    axes = tuple(sorted(set(axes)))
    if not axes or any(not 0 <= a < len(xs) for a in axes):
        raise ArgumentError(f"normalize: axes {list(axes)} do not fit shape {list(xs)}")
    for t, what in ((scale, "scale"), (bias, "bias")):
        if t is not None:
            _check_broadcast(t, xs, what)
    kept = tuple(1 if d in axes else s for d, s in enumerate(xs))
    if center:
        mean = _moment(X, axes, acc, lambda v, i: v, f"{name}_mean")
        var = _moment(X, axes, acc, lambda v, i: (v - mean[i]) * (v - mean[i]), f"{name}_var")
    else:
        mean = te.compute(kept, lambda *i: E.const(0, acc), name=f"{name}_mean")
        var = _moment(X, axes, acc, lambda v, i: v * v, f"{name}_ms")
    inv = te.compute(kept, lambda *i: te.rsqrt(var[i] + E.const(eps, acc)), name=f"{name}_inv")

    def out(*i: E.PrimExpr) -> E.PrimExpr:
        r = tuple(E.const(0, "int32") if d in axes else v for d, v in enumerate(i))
        x = _as(acc, X[i])
        y = (x - mean[r] if center else x) * inv[r]
        if scale is not None:
            y = y * _as(acc, broadcast_read(scale, i))
        if bias is not None:
            y = y + _as(acc, broadcast_read(bias, i))
        return _as(X.dtype, y)

    return [te.compute(xs, out, name=name, tag="norm"), mean, inv]


def batch_norm(
    X: Tensor, scale: Tensor, bias: Tensor, mean: Tensor, var: Tensor, eps: float, name: str = "bn"
) -> Tensor:
    """Inference batch norm over channel axis 1 with the running statistics."""
    xs = static_shape(X)
    if len(xs) < 2:
        raise ArgumentError(f"batch_norm: input must be N x C x ..., got {list(xs)}")
    for t in (scale, bias, mean, var):
        if static_shape(t) != (xs[1],):
            raise ArgumentError(
                f"batch_norm: '{t.name}' must have shape [{xs[1]}], got {list(static_shape(t))}"
            )
    acc = "float32" if X.dtype in ("float16", "bfloat16") else X.dtype

    def f(*i: E.PrimExpr) -> E.PrimExpr:
        c = i[1]
        inv = te.rsqrt(_as(acc, var[c]) + E.const(eps, acc))
        y = (_as(acc, X[i]) - _as(acc, mean[c])) * inv * _as(acc, scale[c]) + _as(acc, bias[c])
        return _as(X.dtype, y)

    return te.compute(xs, f, name=name, tag="broadcast")


def lp_normalize(X: Tensor, axis: int, p: int, name: str = "lpnorm") -> Tensor:
    """``x / ||x||_p`` along ``axis`` (p is 1 or 2)."""
    xs = static_shape(X)
    if p not in (1, 2):
        raise ArgumentError(f"lp_normalize: p must be 1 or 2, got {p}")
    if not 0 <= axis < len(xs):
        raise ArgumentError(f"lp_normalize: axis {axis} out of range for {list(xs)}")
    acc = "float32" if X.dtype in ("float16", "bfloat16") else X.dtype
    k = te.reduce_axis((0, xs[axis]), name="k")
    kept = tuple(1 if d == axis else s for d, s in enumerate(xs))

    def term(*i: E.PrimExpr) -> E.PrimExpr:
        v = _as(acc, X[(*i[:axis], k, *i[axis + 1 :])])
        return te.sum(te.abs(v) if p == 1 else v * v, axis=k)

    total = te.compute(kept, term, name=f"{name}_sum")

    def out(*i: E.PrimExpr) -> E.PrimExpr:
        r = (*i[:axis], E.const(0, "int32"), *i[axis + 1 :])
        norm = total[r] if p == 1 else te.sqrt(total[r])
        # a zero norm means a zero slice: it stays zero (as onnx's reference does)
        safe = E.select(norm == E.const(0, acc), E.const(1, acc), norm)
        return _as(X.dtype, _as(acc, X[i]) / safe)

    return te.compute(xs, out, name=name, tag="norm")


def lrn(X: Tensor, size: int, alpha: float, beta: float, bias: float, name: str = "lrn") -> Tensor:
    """``x / (bias + alpha/size * sum of x^2 over a window of channels) ** beta``; the window
    around channel c is [c - (size-1)//2, c + ceil((size-1)/2)], clipped to the channels."""
    xs = static_shape(X)
    if len(xs) < 2 or size < 1:
        raise ArgumentError(f"lrn: needs N x C x ... input and size >= 1, got {list(xs)}, {size}")
    acc = "float32" if X.dtype in ("float16", "bfloat16") else X.dtype
    lo = (size - 1) // 2
    k = te.reduce_axis((0, size), name="k")
    zero = E.const(0, X.dtype)

    def sq(*i: E.PrimExpr) -> E.PrimExpr:
        v = _as(acc, padded_read(X, i[:1], (i[1] + k - lo, *i[2:]), zero))
        return te.sum(v * v, axis=k)

    ssum = te.compute(xs, sq, name=f"{name}_sq")

    def out(*i: E.PrimExpr) -> E.PrimExpr:
        base = E.const(bias, acc) + E.const(alpha / size, acc) * ssum[i]
        return _as(X.dtype, _as(acc, X[i]) / te.pow(base, E.const(beta, acc)))

    return te.compute(xs, out, name=name, tag="norm")
