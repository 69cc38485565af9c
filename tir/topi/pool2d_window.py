"""The 2-D NCHW pooling compute the CPU pooling template schedules.

The arithmetic of :func:`ember.tir.topi.nn.pool2d`, in the parts a schedule needs
(padded input, window reduction, output) and with the padding written as a ``likely``
select, so loop partitioning splits the border off and the interior reads unguarded.
"""

from __future__ import annotations

from typing import Any

from ember.tir import expr as E
from ember.tir.te import operation as te
from ember.tir.te.tensor import Tensor
from ember.tir.topi import nan_order
from ember.tir.topi.pool import Window
from ember.tir.topi.reduce import acc_dtype
from ember.tir.topi.rows import likely

Pads = tuple[int, int, int, int]


def padded_likely(X: Tensor, pads: Pads, fill: E.PrimExpr) -> Tensor:
    """X padded with ``fill``; the inside test is ``likely``, so partitioning drops it."""
    N, C, H, W = (int(s.value) for s in X.shape)  # type: ignore[attr-defined]
    pt, pl, pb, pr = pads

    def f(n, c, h, w):  # noqa: ANN001, ANN202
        inside = E.logical_and(
            E.logical_and(h >= pt, h < H + pt), E.logical_and(w >= pl, w < W + pl)
        )
        hh = E.max_(E.min_(h - pt, H - 1), 0)
        ww = E.max_(E.min_(w - pl, W - 1), 0)
        return E.select(likely(inside), X[n, c, hh, ww], fill)

    return te.compute((N, C, H + pt + pb, W + pl + pr), f, name="pool_pad", tag="pad")


def pool2d_window(
    X: Tensor,
    kernel: tuple[int, int],
    stride: tuple[int, int],
    pads: Pads,
    kind: str,
    tag: str = "",
    count_include_pad: bool = True,
) -> tuple[Tensor, Tensor, Tensor]:
    """``(padded input, window reduction, output)``; the last two are one tensor for max.

    ``pads`` is ``(top, left, bottom, right)``; a max is NaN where the window holds a NaN
    and pads with the dtype's lowest value; an average of 16-bit floats sums and scales
    in float32, dividing by the whole window or, without ``count_include_pad``, by its
    taps inside the input (ONNX's default); ``tag`` names the reduction (default
    ``pool_{kind}``)."""
    N, C, H, W = (int(s.value) for s in X.shape)  # type: ignore[attr-defined]
    (kh, kw), (sh, sw) = kernel, stride
    # max pools pad with the dtype's lowest value: -inf, or INT_MIN for integers
    fill = te.min_value(X.dtype) if kind == "max" else E.const(0, X.dtype)
    P = padded_likely(X, pads, fill) if any(pads) else X
    OH = (H + pads[0] + pads[2] - kh) // sh + 1
    OW = (W + pads[1] + pads[3] - kw) // sw + 1
    ry = te.reduce_axis((0, kh), name="ry")
    rx = te.reduce_axis((0, kw), name="rx")
    # max_nan: a NaN in the window gives NaN, as ONNX's reference and PyTorch (te.max, being
    # C's fmax, would drop it); see ember.tir.topi.nan_order
    reducer = nan_order.max_nan if kind == "max" else te.sum
    # an average of 16-bit floats sums and scales in float32 (as onnxruntime), rounds once
    acc = X.dtype if kind == "max" else acc_dtype(X.dtype)

    def tap(n: Any, c: Any, y: Any, x: Any) -> E.PrimExpr:
        v = P[n, c, y * sh + ry.var, x * sw + rx.var]
        return v if acc == X.dtype else E.cast(acc, v)

    red = te.compute(
        (N, C, OH, OW),
        lambda n, c, y, x: reducer(tap(n, c, y, x), axis=(ry, rx)),
        name="pool" if kind == "max" else "pool_sum",
        tag=tag or f"pool_{kind}",
        attrs={"stride_w": sw},
    )
    if kind == "max":
        return P, red, red
    scale = E.const(1.0 / (kh * kw), acc)
    window = Window(kernel, stride, (1, 1), pads[:2], pads[2:], (H, W))

    def average(n: Any, c: Any, y: Any, x: Any) -> E.PrimExpr:
        if count_include_pad or not any(pads):
            value = red[n, c, y, x] * scale
        else:
            value = red[n, c, y, x] / E.cast(acc, window.count((y, x), False))
        return value if acc == X.dtype else E.cast(X.dtype, value)

    out = te.compute((N, C, OH, OW), average, name="pool", tag="pool_avg")
    return P, red, out
