"""Computes of the neural-network operators: matmul, dense, conv2d, pooling, softmax, norms."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ember.errors import ArgumentError
from ember.tir import expr as E
from ember.tir.te import operation as te
from ember.tir.te.tensor import Tensor
from ember.tir.topi.rows import RowReduce, plain_row_reduce


def _dims(t: Tensor, n: int, what: str) -> tuple[int, ...]:
    if t.ndim != n:
        raise ArgumentError(
            f"{what}: expected a {n}-D tensor, got '{t.name}' with shape {list(t.shape)}"
        )
    return tuple(int(s.value) if isinstance(s, E.IntImm) else s for s in t.shape)  # type: ignore[misc]


def positive_pair(value: object, what: str, op: str) -> tuple[int, int]:
    """``value`` as a pair of ints of at least 1; anything else names ``what`` in an error."""
    pair = (value, value) if isinstance(value, int) else value
    ok = isinstance(pair, (tuple, list)) and len(pair) == 2
    if not ok or any(isinstance(v, bool) or not isinstance(v, int) or v < 1 for v in pair):
        raise ArgumentError(f"{op}: {what} must be a positive int or a pair of them, got {value!r}")
    return int(pair[0]), int(pair[1])


def matmul(
    A: Tensor,
    B: Tensor,
    name: str = "C",
    out_dtype: str | None = None,
    read_b: Callable[[Any, Any], E.PrimExpr] | None = None,
) -> Tensor:
    """``C[i, j] = sum_k A[i, k] * B[k, j]`` (numpy's ``A @ B``). ``read_b(k, j)``, where
    given, reads B's element from another layout (a template's packed panels)."""
    M, K = _dims(A, 2, "matmul")
    K2, N = _dims(B, 2, "matmul")
    if K != K2:
        raise ArgumentError(f"matmul: inner dimensions differ ({K} vs {K2})")
    dtype = out_dtype or A.dtype
    rb = read_b or (lambda kk, j: B[kk, j])
    k = te.reduce_axis((0, K), name="k")
    return te.compute(
        (M, N),
        lambda i, j: te.sum(E.cast(dtype, A[i, k]) * E.cast(dtype, rb(k, j)), axis=k),
        name=name,
        tag="matmul",
    )


def dense(
    X: Tensor,
    W: Tensor,
    name: str = "Y",
    out_dtype: str | None = None,
    read_w: Callable[[Any, Any], E.PrimExpr] | None = None,
) -> Tensor:
    """``Y[i, j] = sum_k X[i, k] * W[j, k]`` (a fully connected layer, weights N x K).
    ``read_w(j, k)``, where given, reads W's element from another layout."""
    M, K = _dims(X, 2, "dense")
    N, K2 = _dims(W, 2, "dense")
    if K != K2:
        raise ArgumentError(f"dense: reduction dimensions differ ({K} vs {K2})")
    dtype = out_dtype or X.dtype
    rw = read_w or (lambda j, kk: W[j, kk])
    k = te.reduce_axis((0, K), name="k")
    return te.compute(
        (M, N),
        lambda i, j: te.sum(E.cast(dtype, X[i, k]) * E.cast(dtype, rw(j, k)), axis=k),
        name=name,
        tag="dense",
    )


def batch_matmul(
    A: Tensor,
    B: Tensor,
    name: str = "C",
    read_b: Callable[[Any, Any, Any], E.PrimExpr] | None = None,
) -> Tensor:
    """``C[b, i, j] = sum_k A[b, i, k] * B[b, k, j]``. ``read_b(b, k, j)``, where given,
    reads B's element from another layout (a template's packed panels)."""
    Bt, M, K = _dims(A, 3, "batch_matmul")
    Bt2, K2, N = _dims(B, 3, "batch_matmul")
    if K != K2 or Bt != Bt2:
        raise ArgumentError(
            f"batch_matmul: shapes {list(A.shape)} and {list(B.shape)} do not match"
        )
    rb = read_b or (lambda b, kk, j: B[b, kk, j])
    k = te.reduce_axis((0, K), name="k")
    return te.compute(
        (Bt, M, N),
        lambda b, i, j: te.sum(A[b, i, k] * rb(b, k, j), axis=k),
        name=name,
        tag="batch_matmul",
    )


def pad(
    X: Tensor, pads: tuple[int, ...], value: float | E.PrimExpr = 0.0, name: str = "pad"
) -> Tensor:
    """Pad the last two dimensions of an NCHW tensor by (top, left, bottom, right)."""
    N, C, H, W = _dims(X, 4, "pad")
    pt, pl, pb, pr = pads
    if not any(pads):
        return X

    def f(n, c, h, w):  # noqa: ANN001, ANN202
        inside = E.logical_and(
            E.logical_and(h >= pt, h < H + pt), E.logical_and(w >= pl, w < W + pl)
        )
        hh = E.max_(E.min_(h - pt, H - 1), 0)
        ww = E.max_(E.min_(w - pl, W - 1), 0)
        fill = value if isinstance(value, E.PrimExpr) else E.const(value, X.dtype)
        return E.select(inside, X[n, c, hh, ww], fill)

    return te.compute((N, C, H + pt + pb, W + pl + pr), f, name=name, tag="pad")


def conv2d_nchw(
    X: Tensor,
    Wt: Tensor,
    stride: int | tuple[int, int] = 1,
    padding: int | tuple[int, int, int, int] = 0,
    dilation: int | tuple[int, int] = 1,
    name: str = "conv",
) -> Tensor:
    """2-D convolution, NCHW input, OIHW weights."""
    N, C, H, W = _dims(X, 4, "conv2d")
    O, C2, KH, KW = _dims(Wt, 4, "conv2d")
    if C != C2:
        raise ArgumentError(f"conv2d: input has {C} channels, weights expect {C2}")
    sh, sw = positive_pair(stride, "stride", "conv2d")
    dh, dw = positive_pair(dilation, "dilation", "conv2d")
    pads = (padding,) * 4 if isinstance(padding, int) else tuple(padding)
    if len(pads) == 2:
        pads = (pads[0], pads[1], pads[0], pads[1])
    P = pad(X, pads, name=f"{name}_pad")
    OH = (H + pads[0] + pads[2] - dh * (KH - 1) - 1) // sh + 1
    OW = (W + pads[1] + pads[3] - dw * (KW - 1) - 1) // sw + 1
    if OH <= 0 or OW <= 0:
        raise ArgumentError(f"conv2d: output would be empty ({OH}x{OW})")
    rc = te.reduce_axis((0, C), name="rc")
    ry = te.reduce_axis((0, KH), name="ry")
    rx = te.reduce_axis((0, KW), name="rx")
    return te.compute(
        (N, O, OH, OW),
        lambda n, o, y, x: te.sum(
            P[n, rc, y * sh + ry * dh, x * sw + rx * dw] * Wt[o, rc, ry, rx], axis=(rc, ry, rx)
        ),
        name=name,
        tag="conv2d_nchw",
    )


def depthwise_conv2d_nchw(
    X: Tensor, Wt: Tensor, stride: int = 1, padding: int = 0, name: str = "dwconv"
) -> Tensor:
    """Depthwise 2-D convolution: channel ``c`` of the output filters channel ``c`` of the
    input with ``Wt[c, 0]`` (weights of shape C x 1 x KH x KW)."""
    N, C, H, W = _dims(X, 4, "depthwise_conv2d")
    C2, one, KH, KW = _dims(Wt, 4, "depthwise_conv2d")
    if C2 != C or one != 1:
        raise ArgumentError(
            f"depthwise_conv2d: weights must be {C}x1xKHxKW for {C} channels, got {list(Wt.shape)}"
        )
    positive_pair(stride, "stride", "depthwise_conv2d")
    P = pad(X, (padding,) * 4, name=f"{name}_pad")
    OH = (H + 2 * padding - KH) // stride + 1
    OW = (W + 2 * padding - KW) // stride + 1
    if OH <= 0 or OW <= 0:
        raise ArgumentError(f"depthwise_conv2d: output would be empty ({OH}x{OW})")
    ry = te.reduce_axis((0, KH), name="ry")
    rx = te.reduce_axis((0, KW), name="rx")
    return te.compute(
        (N, C, OH, OW),
        lambda n, c, y, x: te.sum(
            P[n, c, y * stride + ry, x * stride + rx] * Wt[c, 0, ry, rx], axis=(ry, rx)
        ),
        name=name,
        tag="depthwise_conv2d_nchw",
    )


def pool2d(
    X: Tensor,
    kernel: tuple[int, int],
    stride: tuple[int, int],
    padding: tuple[int, int, int, int] = (0, 0, 0, 0),
    kind: str = "max",
    name: str = "pool",
) -> Tensor:
    """Max or average pooling over NCHW; average divides by the full window (count_include_pad)."""
    N, C, H, W = _dims(X, 4, "pool2d")
    kh, kw = positive_pair(kernel, "kernel", "pool2d")
    sh, sw = positive_pair(stride, "stride", "pool2d")
    if kind not in ("max", "avg"):
        raise ArgumentError(f"pool2d: kind must be 'max' or 'avg', got {kind!r}")
    # max pooling pads with the dtype's lowest value (-inf, or INT_MIN for integers)
    fill = te.min_value(X.dtype) if kind == "max" else E.const(0, X.dtype)
    P = pad(X, padding, value=fill, name=f"{name}_pad")
    OH = (H + padding[0] + padding[2] - kh) // sh + 1
    OW = (W + padding[1] + padding[3] - kw) // sw + 1
    if OH <= 0 or OW <= 0:
        raise ArgumentError(f"pool2d: output would be empty ({OH}x{OW})")
    ry = te.reduce_axis((0, kh), name="ry")
    rx = te.reduce_axis((0, kw), name="rx")
    reducer = te.max if kind == "max" else te.sum
    out = te.compute(
        (N, C, OH, OW),
        lambda n, c, y, x: reducer(P[n, c, y * sh + ry.var, x * sw + rx.var], axis=(ry, rx)),
        name=name if kind == "max" else f"{name}_sum",
        tag=f"pool_{kind}",
    )
    if kind == "avg":
        scale = 1.0 / (kh * kw)
        out = te.compute(
            (N, C, OH, OW), lambda n, c, y, x: out[n, c, y, x] * scale, name=name, tag="pool_avg"
        )
    return out


def reduce_rows(
    X: Tensor, kind: str = "sum", name: str = "red", row_reduce: RowReduce = plain_row_reduce
) -> Tensor:
    """Reduce the last axis of a 2-D tensor: sum, max or min (``row_reduce`` builds it)."""
    R, C = _dims(X, 2, "reduce")
    if kind not in ("sum", "max", "min"):
        raise ArgumentError(f"reduce: kind must be sum, max or min, got {kind!r}")
    return row_reduce(lambda r, k: X[r, k], R, C, kind, name, tag=f"reduce_{kind}")


def softmax(
    X: Tensor,
    name: str = "softmax",
    row_reduce: RowReduce = plain_row_reduce,
    row_factor: bool = False,
) -> Tensor:
    """Softmax over the last axis of a 2-D tensor, stabilised by the row maximum.

    ``row_reduce`` builds the row maximum and sum (:mod:`ember.tir.topi.rows`). With
    ``row_factor`` the row's reciprocal sum is a stage of its own (``{name}_inv``) and the
    exponentials are multiplied by it: one division per row, which a schedule computes at
    the row loop (a vector divide is slow); else each element is divided by the sum."""
    R, C = _dims(X, 2, "softmax")
    mx = row_reduce(lambda r, k: X[r, k], R, C, "max", f"{name}_max")
    ex = te.compute((R, C), lambda r, c: te.exp(X[r, c] - mx[r]), name=f"{name}_exp")
    sm = row_reduce(lambda r, k: ex[r, k], R, C, "sum", f"{name}_sum")
    if not row_factor:
        return te.compute((R, C), lambda r, c: ex[r, c] / sm[r], name=name, tag="softmax")
    inv = te.compute((R,), lambda r: E.const(1, X.dtype) / sm[r], name=f"{name}_inv")
    return te.compute((R, C), lambda r, c: ex[r, c] * inv[r], name=name, tag="softmax")


def layer_norm(
    X: Tensor,
    gamma: Tensor,
    beta: Tensor,
    eps: float = 1e-5,
    name: str = "ln",
    row_reduce: RowReduce = plain_row_reduce,
    row_factor: bool = False,
) -> Tensor:
    """Layer normalisation over the last axis of a 2-D tensor: the row's mean, then the
    (biased) variance around it (two passes, accurate when the mean is large).

    ``row_reduce`` builds both row sums (:mod:`ember.tir.topi.rows`). With ``row_factor``
    ``rsqrt(var + eps)`` is a stage of its own (``{name}_rstd``), once per row."""
    R, C = _dims(X, 2, "layer_norm")
    inv_c = 1.0 / C
    mean = row_reduce(lambda r, k: X[r, k], R, C, "sum", f"{name}_mean", scale=inv_c)

    def centred_square(r: E.PrimExpr, k: E.PrimExpr) -> E.PrimExpr:
        return (X[r, k] - mean[r]) * (X[r, k] - mean[r])

    var = row_reduce(centred_square, R, C, "sum", f"{name}_var", scale=inv_c)
    if not row_factor:
        return te.compute(
            (R, C),
            lambda r, c: (X[r, c] - mean[r]) * te.rsqrt(var[r] + eps) * gamma[c] + beta[c],
            name=name,
            tag="layer_norm",
        )
    rstd = te.compute((R,), lambda r: te.rsqrt(var[r] + eps), name=f"{name}_rstd")
    return te.compute(
        (R, C),
        lambda r, c: (X[r, c] - mean[r]) * rstd[r] * gamma[c] + beta[c],
        name=name,
        tag="layer_norm",
    )
