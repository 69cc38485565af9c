"""Lp pooling (ONNX LpPool, GlobalLpPool): ``(sum over the window of |x|^p) ** (1/p)``.

It reuses the sliding :class:`~ember.tir.topi.pool.Window` of max/average pooling
(pads, strides, dilations, ``ceil_mode``); positions in the padding add zero. p = 1
and p = 2 avoid ``pow`` (an abs, a square and a square root).
"""

from __future__ import annotations

from collections.abc import Sequence

from ember.errors import ArgumentError
from ember.tir import expr as E
from ember.tir.te import operation as te
from ember.tir.te.tensor import Tensor
from ember.tir.topi.pool import Window, padded_read
from ember.tir.topi.reduce import acc_dtype
from ember.tir.topi.transform import static_shape


def lp_pool_nd(
    X: Tensor,
    p: float,
    kernel: Sequence[int],
    strides: Sequence[int],
    pads: Sequence[int],
    dilations: Sequence[int],
    ceil_mode: bool = False,
    name: str = "lppool",
) -> Tensor:
    """Lp-pool the spatial dims of ``X`` (N, C, *spatial) with ONNX's window options."""
    xs = static_shape(X)
    nsp = len(xs) - 2
    if nsp < 1 or len(kernel) != nsp:
        raise ArgumentError(f"lp_pool: kernel {list(kernel)} does not fit input {list(xs)}")
    if p <= 0:
        raise ArgumentError(f"lp_pool: p must be positive, got {p}")
    dil = tuple(dilations)
    w = Window(tuple(kernel), tuple(strides), dil, tuple(pads[:nsp]), tuple(pads[nsp:]), xs[2:])
    out_sp = w.out_sizes(ceil_mode, "lp_pool")
    rs = [te.reduce_axis((0, kernel[d]), name=f"r{d}") for d in range(nsp)]
    zero = E.const(0, X.dtype)
    wide = acc_dtype(X.dtype)  # 16-bit floats sum in float32, as onnxruntime

    def power(v: E.PrimExpr) -> E.PrimExpr:
        v = v if v.dtype == wide else E.cast(wide, v)
        if p == 1:
            return te.abs(v)
        if p == 2:
            return v * v
        return te.pow(te.abs(v), E.const(float(p), wide))

    acc = te.compute(
        (*xs[:2], *out_sp),
        lambda *i: te.sum(power(padded_read(X, i[:2], w.taps(i[2:], rs), zero)), axis=tuple(rs)),
        name=f"{name}_sum",
    )

    def root(*i: E.PrimExpr) -> E.PrimExpr:
        if p == 1:
            value = acc[i]
        elif p == 2:
            value = te.sqrt(acc[i])
        else:
            value = te.pow(acc[i], E.const(1.0 / p, wide))
        return value if wide == X.dtype else E.cast(X.dtype, value)

    return te.compute(acc.shape, root, name=name, tag="pool_lp")
