"""Convolution as a GEMM: the computes of the implicit-GEMM convolution templates.

Pure tensor expressions, no schedule; the CUDA templates (``conv2d_nchw_gemm.cuda``,
``conv2d_nhwc_tensorcore.cuda``) and the CUDA strategy's tensor-core convolution schedule
them. Stage names are part of the contract: the schedules find their stages by them.

The tensor-core NCHW convolution (:func:`conv_tensorcore_compute`, the CUDA strategy's
``conv``): ``gemm[m, o] = sum_k A[m, k] * B[o, k]`` with ``m = (n * OH + oh) * OW + ow``
the output pixel and ``k = (c * KH + kh) * KW + kw`` (the weights' own order, so that
``B`` is the ``[O, C, KH, KW]`` weight tensor read as ``[O, K]``: a ``trans_b`` GEMM,
nothing re-laid). ``A`` is the im2col matrix of the NCHW input, never built: its shared
tile reads the input straight from global memory, zero outside the image and in the rows
and columns that round the GEMM up to whole tiles. The stages are those of
``matmul_tensorcore.cuda`` (``AP``, ``BP``, ``CF``, ``CS``); the stage tagged with the
caller's ``tag`` adds the bias in fp32 and casts, and carries ``layout="nchw"`` in its
attrs, so that the schedule keeps it as the tensor-core kernel's ``[M, O]`` output and
leaves the NCHW output stage (``out[n, o, oh, ow] = gemm[(n, oh, ow), o]``) with the
group's elementwise tail to a generic schedule, a second kernel.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ember.errors import ArgumentError
from ember.tir import expr as E
from ember.tir.te import operation as te
from ember.tir.te.tensor import Tensor
from ember.tir.topi.nn import positive_pair
from ember.tir.topi.tensorcore_gemm import (
    IN_DTYPES,
    Epilogue,
    gemm_stages,
    padded_operand,
    round_up,
)
from ember.tir.topi.transform import static_shape

__all__ = [
    "conv2d_nchw_im2col_gemm",
    "conv2d_nhwc_tensorcore_stages",
    "conv_geometry",
    "conv_output_size",
    "conv_tensorcore_compute",
    "im2col_nchw",
    "im2col_operand",
    "weights_operand",
]


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


def conv_output_size(size: int, k: int, stride: int, pad: int, dilation: int) -> int:
    """Output extent of one spatial dim (symmetric padding), to size the im2col operand."""
    return (size + 2 * pad - dilation * (k - 1) - 1) // stride + 1


def im2col_operand(
    X: Tensor, KH: int, KW: int, stride: tuple[int, int], pad: tuple[int, int],
    dilation: tuple[int, int], shape: tuple[int, int],
) -> Tensor:  # fmt: skip
    """The padded ``[Mp, Kp]`` im2col matrix of NHWC ``X`` as a compute (never stored)."""
    N, H, W, C = static_shape(X)
    OH = conv_output_size(H, KH, stride[0], pad[0], dilation[0])
    OW = conv_output_size(W, KW, stride[1], pad[1], dilation[1])
    M, K = N * OH * OW, KH * KW * C

    def fetch(m: E.PrimExpr, k: E.PrimExpr) -> E.PrimExpr:
        n, oh, ow = m // (OH * OW), m // OW % OH, m % OW
        kh, kw, c = k // (KW * C), k // C % KW, k % C
        y = oh * stride[0] + kh * dilation[0] - pad[0]
        x = ow * stride[1] + kw * dilation[1] - pad[1]
        conds = [y >= 0, y < H, x >= 0, x < W]
        if shape[0] != M:
            conds.append(m < M)
        if shape[1] != K:
            conds.append(k < K)
        inside = conds[0]
        for cond in conds[1:]:
            inside = E.logical_and(inside, cond)
        # clamped so that no lane loads outside X, whatever the condition says
        nc = E.min_(n, N - 1) if shape[0] != M else n
        yc, xc = E.min_(E.max_(y, 0), H - 1), E.min_(E.max_(x, 0), W - 1)
        return te.select(inside, X[nc, yc, xc, c], E.const(0, X.dtype))

    return te.compute(shape, fetch, name="AP")


def conv2d_nhwc_tensorcore_stages(
    X: Tensor, Wt: Tensor, KH: int, KW: int, knobs: dict[str, Any], stride: tuple[int, int],
    pad: tuple[int, int], dilation: tuple[int, int], epilogue: Epilogue, acc_dtype: str,
) -> tuple[Tensor, Tensor, Tensor, Tensor, Tensor]:  # fmt: skip
    """``(AP, BP, CF, CS, Y)`` of the NHWC implicit-GEMM convolution ``Y[m, o] = epilogue(
    sum_k A[m, k] * Wt[k, o])``: ``A`` the virtual im2col of ``X [N, H, W, C]`` (``k =
    (kh * KW + kw) * C + c``), ``Wt`` the ``[KH * KW * C, O]`` weights, both padded to
    whole tiles of ``knobs``; ``Y`` is the NHWC output ``[N, OH, OW, O]`` as
    ``[N * OH * OW, O]``."""
    N, H, W, C = static_shape(X)
    K, O = static_shape(Wt)
    OH = conv_output_size(H, KH, stride[0], pad[0], dilation[0])
    OW = conv_output_size(W, KW, stride[1], pad[1], dilation[1])
    M = N * OH * OW
    Mp, Op, Kp = round_up(M, knobs["bm"]), round_up(O, knobs["bn"]), round_up(K, knobs["ks"])
    AP = im2col_operand(X, KH, KW, stride, pad, dilation, (Mp, Kp))
    BP = padded_operand(Wt, (Kp, Op), "BP")
    CF, CS = gemm_stages(AP, BP, acc_dtype, False)
    Y = te.compute((M, O), lambda m, o: epilogue(CS[m, o], (m, o)), name="Y")
    return AP, BP, CF, CS, Y


def _all(conds: list[Any]) -> Any:
    out = conds[0]
    for c in conds[1:]:
        out = E.logical_and(out, c)
    return out


def conv_geometry(
    x_shape: Sequence[int], w_shape: Sequence[int], attrs: dict[str, Any]
) -> tuple[int, int] | None:
    """``(OH, OW)`` of a 2-D, group-1 convolution the implicit GEMM takes, else None."""
    if len(x_shape) != 4 or len(w_shape) != 4 or attrs.get("group", 1) != 1:
        return None
    if x_shape[1] != w_shape[1]:
        return None
    (sh, sw), (dh, dw), p = attrs["strides"], attrs["dilations"], attrs["pads"]
    OH = (x_shape[2] + p[0] + p[2] - dh * (w_shape[2] - 1) - 1) // sh + 1
    OW = (x_shape[3] + p[1] + p[3] - dw * (w_shape[3] - 1) - 1) // sw + 1
    return (OH, OW) if OH > 0 and OW > 0 else None


def im2col_nchw(
    X: Tensor, KH: int, KW: int, attrs: dict[str, Any], out_hw: tuple[int, int],
    shape: tuple[int, int],
) -> Tensor:  # fmt: skip
    """The padded ``[Mp, Kp]`` im2col matrix of NCHW ``X`` as a compute (never stored)."""
    N, C, H, W = static_shape(X)
    OH, OW = out_hw
    (sh, sw), (dh, dw), p = attrs["strides"], attrs["dilations"], attrs["pads"]
    M, K = N * OH * OW, C * KH * KW

    def fetch(m: E.PrimExpr, k: E.PrimExpr) -> E.PrimExpr:
        n, oh, ow = m // (OH * OW), m // OW % OH, m % OW
        c, kh, kw = k // (KH * KW), k // KW % KH, k % KW
        y = oh * sh + kh * dh - p[0]
        x = ow * sw + kw * dw - p[1]
        conds = [y >= 0, y < H, x >= 0, x < W]
        if shape[0] != M:
            conds.append(m < M)
        if shape[1] != K:
            conds.append(k < K)
        # clamped so that no lane loads outside X, whatever the condition says
        nc = E.min_(n, N - 1) if shape[0] != M else n
        cc = E.min_(c, C - 1) if shape[1] != K else c
        yc, xc = E.min_(E.max_(y, 0), H - 1), E.min_(E.max_(x, 0), W - 1)
        return te.select(_all(conds), X[nc, cc, yc, xc], E.const(0, X.dtype))

    return te.compute(shape, fetch, name="AP")


def weights_operand(Wt: Tensor, shape: tuple[int, int]) -> Tensor:
    """The ``[O, C, KH, KW]`` weights as the padded ``[Op, Kp]`` matrix (zero outside)."""
    O, C, KH, KW = static_shape(Wt)
    K = C * KH * KW

    def fetch(o: E.PrimExpr, k: E.PrimExpr) -> E.PrimExpr:
        conds = []
        if shape[0] != O:
            conds.append(o < O)
            o = E.min_(o, O - 1)
        if shape[1] != K:
            conds.append(k < K)
            k = E.min_(k, K - 1)
        val = Wt[o, k // (KH * KW), k // KW % KH, k % KW]
        return te.select(_all(conds), val, E.const(0, Wt.dtype)) if conds else val

    return te.compute(shape, fetch, name="BP")


def conv_tensorcore_compute(
    inputs: Sequence[Any], attrs: dict[str, Any], knobs_for: Any, tag: str
) -> list[Any] | None:
    """The NCHW output of the implicit GEMM (see the module docstring), or None where it
    does not apply; ``knobs_for(M, O)`` gives the template knobs."""
    X, Wt = inputs[0], inputs[1]
    bias = inputs[2] if len(inputs) > 2 else None
    dtype = str(X.dtype)
    if dtype not in IN_DTYPES or str(Wt.dtype) != dtype:
        return None
    if bias is not None and (bias.ndim != 1 or str(bias.dtype) != dtype):
        return None
    out_hw = conv_geometry(static_shape(X), static_shape(Wt), attrs)
    if out_hw is None:
        return None
    N, (O, C, KH, KW), (OH, OW) = static_shape(X)[0], static_shape(Wt), out_hw
    M, K = N * OH * OW, C * KH * KW
    knobs = knobs_for(M, O)
    Mp, Op, Kp = round_up(M, knobs["bm"]), round_up(O, knobs["bn"]), round_up(K, knobs["ks"])
    AP = im2col_nchw(X, KH, KW, attrs, out_hw, (Mp, Kp))
    BP = weights_operand(Wt, (Op, Kp))
    _, CS = gemm_stages(AP, BP, "float32", True)

    def epilogue(m: E.PrimExpr, o: E.PrimExpr) -> E.PrimExpr:
        acc = CS[m, o] if bias is None else CS[m, o] + bias[o].astype("float32")
        return acc.astype(dtype)

    attrs_tc = {
        "knobs": tuple(sorted(knobs.items())), "trans_b": True, "vectors": (1, 1, 1),
        "layout": "nchw",
    }  # fmt: skip
    gemm = te.compute((M, O), epilogue, name="conv_tc", tag=tag, attrs=attrs_tc)

    def nchw(n: E.PrimExpr, o: E.PrimExpr, oh: E.PrimExpr, ow: E.PrimExpr) -> E.PrimExpr:
        # clamped: bound inference relaxes a generic schedule's overshooting thread tail,
        # and an unclamped index would ask for rows past M (a guarded GEMM tile)
        return gemm[E.min_((n * OH + oh) * OW + ow, M - 1), E.min_(o, O - 1)]

    return [te.compute((N, O, OH, OW), nchw, name="conv_nchw", tag="injective")]
