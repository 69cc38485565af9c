"""GPU template ``conv2d_nhwc_tensorcore.cuda``: an NHWC convolution as an implicit GEMM on the
tensor cores, with the fused epilogue of the matmul template.

``Y[m, o] = sum_k A[m, k] * W[k, o]`` with ``m = (n * OH + oh) * OW + ow`` the output
pixel, ``k = (kh * KW + kw) * C + c`` the reduction index (the channel innermost, so
that a run of ``k`` is a run of contiguous input channels) and ``A`` the im2col
matrix of the zero-padded NHWC input. ``A`` is never built: its shared tile is a
stage whose elements read the input straight from global memory (zero outside the
image, and in the rows and columns that round the GEMM up to whole tiles); when the
channels come in runs of 8 (and K fills whole K steps), each 16-byte piece of a row
lies in one (kh, kw) tap and is one zero-filling ``cp.async``. The
weights come as the ``[KH * KW * C, O]`` matrix (a frontend packs them once). Everything
after the operands is :func:`~.matmul_tensorcore.schedule_tensorcore_gemm`: the same
stages, knobs and epilogue. The output is the NHWC tensor ``[N, OH, OW, O]`` as its
``[N * OH * OW, O]`` view (the same bytes; a 4-D output stage would hide from bound
inference that a block's rows are one aligned run of the shared accumulator tile).
"""

from __future__ import annotations

from typing import Any

from ember.codegen_cuda.schedules.matmul_tensorcore import (
    _check_dtypes,
    define_tensorcore_knobs,
    gemm_stages,
    make_epilogue,
    padded_operand,
    round_up,
    schedule_tensorcore_gemm,
)
from ember.errors import ArgumentError
from ember.tir import expr as E
from ember.tir.schedule.schedule import Schedule, create_schedule
from ember.tir.te import operation as te
from ember.tir.te.tensor import Tensor
from ember.tir.topi.nn import positive_pair
from ember.tir.topi.transform import static_shape
from ember.tuner.template import template


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


@template("conv2d_nhwc_tensorcore.cuda")
def conv2d_nhwc_tensorcore_cuda(
    N: int, H: int, W: int, C: int, O: int, KH: int, KW: int,
    stride: int | tuple[int, int] = 1, padding: int | tuple[int, int] = 0,
    dilation: int | tuple[int, int] = 1, dtype: str = "float16", out_dtype: str = "float32",
    bias: bool = False, activation: str = "none", acc_dtype: str = "float32",
) -> tuple[Schedule, list[Any]]:  # fmt: skip
    """NHWC ``X [N, H, W, C]`` * ``W [KH * KW * C, O]`` (+ bias ``[O]``) -> ``Y``, the NHWC
    output ``[N, OH, OW, O]`` as ``[N * OH * OW, O]``; arguments ``X, W[, bias], Y``."""
    what = "conv2d_nhwc_tensorcore"
    _check_dtypes(dtype, acc_dtype, out_dtype)
    sh_sw = positive_pair(stride, "stride", what)
    dil = positive_pair(dilation, "dilation", what)
    pad = (padding, padding) if isinstance(padding, int) else tuple(padding)
    if len(pad) != 2 or min(pad) < 0:
        raise ArgumentError(f"{what}: padding must be a non-negative int or pair, got {padding!r}")
    if min(N, H, W, C, O, KH, KW) < 1:
        raise ArgumentError(f"{what}: sizes must be positive, got {(N, H, W, C, O, KH, KW)}")
    OH = conv_output_size(H, KH, sh_sw[0], pad[0], dil[0])
    OW = conv_output_size(W, KW, sh_sw[1], pad[1], dil[1])
    if OH < 1 or OW < 1:
        raise ArgumentError(f"{what}: the output would be empty ({OH}x{OW})")
    M, K = N * OH * OW, KH * KW * C
    knobs = define_tensorcore_knobs()
    Mp, Op, Kp = round_up(M, knobs["bm"]), round_up(O, knobs["bn"]), round_up(K, knobs["ks"])

    X = te.placeholder((N, H, W, C), dtype, name="X")
    Wt = te.placeholder((K, O), dtype, name="W")
    Bias = te.placeholder((O,), dtype, name="bias") if bias else None
    AP = im2col_operand(X, KH, KW, sh_sw, pad, dil, (Mp, Kp))
    BP = padded_operand(Wt, (Kp, Op), "BP")
    epi = make_epilogue(acc_dtype, out_dtype, Bias, activation)
    CF, CS = gemm_stages(AP, BP, acc_dtype, False)
    Y = te.compute((M, O), lambda m, o: epi(CS[m, o], (m, o)), name="Y")
    s = create_schedule(Y.op)
    vec_b = 8 if O % 8 == 0 and Op == O else 1
    vec_a = 8 if C % 8 == 0 and Kp == K else 1
    schedule_tensorcore_gemm(s, AP, BP, CF, CS, Y, knobs, False, (vec_a, vec_b, 1))
    return s, [X, Wt, *([Bias] if Bias is not None else []), Y]
