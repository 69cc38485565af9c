"""Convolution as a GEMM: the computes of the implicit-GEMM convolution templates.

Pure tensor expressions, no schedule; the CUDA templates (``conv2d_nchw_gemm.cuda``,
``conv2d_nhwc_tensorcore.cuda``) and the CUDA strategy's tensor-core convolution schedule
them. Stage names are part of the contract: the schedules find their stages by them.
"""

from __future__ import annotations

from ember.errors import ArgumentError
from ember.tir import expr as E
from ember.tir.te import operation as te
from ember.tir.te.tensor import Tensor
from ember.tir.topi.nn import positive_pair

__all__ = ["conv2d_nchw_im2col_gemm"]


def _pair(v: int | tuple[int, int]) -> tuple[int, int]:
    return (v, v) if isinstance(v, int) else (int(v[0]), int(v[1]))


def conv2d_nchw_im2col_gemm(
    X: Tensor, Wt: Tensor, stride: int | tuple[int, int] = 1,
    padding: int | tuple[int, int] = 0, dilation: int | tuple[int, int] = 1,
) -> tuple[Tensor, Tensor, Tensor, Tensor]:  # fmt: skip
    """NCHW ``X [N, C, H, W]`` * ``Wt [O, C, KH, KW]`` as ``Y[n, o, p] = sum_k W[o, k] *
    A[n, k, p]`` per image (``p = oh * OW + ow``, ``k = (c, kh, kw)``). Returns the stages
    ``(im2col, wcol, gemm, conv)``: the im2col matrix (zero in the padding), the weights
    as ``[O, K]``, the GEMM ``[N, O, P]`` and the NCHW output, so that a schedule can
    place the first three (e.g. as shared and register tiles)."""
    N, C, H, W = (int(d.value) for d in X.shape)  # type: ignore[attr-defined]
    O, _, KH, KW = (int(d.value) for d in Wt.shape)  # type: ignore[attr-defined]
    dtype = X.dtype
    sh, sw = positive_pair(stride, "stride", "conv2d_nchw_gemm")
    dh, dw = positive_pair(dilation, "dilation", "conv2d_nchw_gemm")
    ph, pw = _pair(padding)
    OH = (H + 2 * ph - dh * (KH - 1) - 1) // sh + 1
    OW = (W + 2 * pw - dw * (KW - 1) - 1) // sw + 1
    if OH <= 0 or OW <= 0:
        raise ArgumentError(f"conv2d_nchw_gemm: output would be empty ({OH}x{OW})")
    P, K, R = OH * OW, C * KH * KW, KH * KW

    def im2col(n: E.PrimExpr, k: E.PrimExpr, p: E.PrimExpr) -> E.PrimExpr:
        c, kh, kw = k // R, k % R // KW, k % KW
        y = p // OW * sh + kh * dh - ph
        x = p % OW * sw + kw * dw - pw
        inside = E.logical_and(E.logical_and(y >= 0, y < H), E.logical_and(x >= 0, x < W))
        yc, xc = E.min_(E.max_(y, 0), H - 1), E.min_(E.max_(x, 0), W - 1)
        return te.select(inside, X[n, c, yc, xc], E.const(0, dtype))

    A = te.compute((N, K, P), im2col, name="im2col")
    B = te.compute((O, K), lambda o, k: Wt[o, k // R, k % R // KW, k % KW], name="wcol")
    k = te.reduce_axis((0, K), name="k")
    G = te.compute((N, O, P), lambda n, o, p: te.sum(B[o, k] * A[n, k, p], axis=k), name="gemm")
    Y = te.compute((N, O, OH, OW), lambda n, o, y, x: G[n, o, y * OW + x], name="conv")
    return A, B, G, Y
