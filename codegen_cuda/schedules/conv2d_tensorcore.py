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
    schedule_tensorcore_gemm,
)
from ember.errors import ArgumentError
from ember.tir.schedule.schedule import Schedule, create_schedule
from ember.tir.te import operation as te
from ember.tir.topi.conv_gemm import conv2d_nhwc_tensorcore_stages, conv_output_size
from ember.tir.topi.nn import positive_pair
from ember.tir.topi.tensorcore_gemm import make_epilogue, round_up
from ember.tuner.template import template


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
    K = KH * KW * C
    knobs = define_tensorcore_knobs()
    Op, Kp = round_up(O, knobs["bn"]), round_up(K, knobs["ks"])

    X = te.placeholder((N, H, W, C), dtype, name="X")
    Wt = te.placeholder((K, O), dtype, name="W")
    Bias = te.placeholder((O,), dtype, name="bias") if bias else None
    epi = make_epilogue(acc_dtype, out_dtype, Bias, activation)
    AP, BP, CF, CS, Y = conv2d_nhwc_tensorcore_stages(
        X, Wt, KH, KW, knobs, sh_sw, pad, dil, epi, acc_dtype
    )
    s = create_schedule(Y.op)
    vec_b = 8 if O % 8 == 0 and Op == O else 1
    vec_a = 8 if C % 8 == 0 and Kp == K else 1
    schedule_tensorcore_gemm(s, AP, BP, CF, CS, Y, knobs, False, (vec_a, vec_b, 1))
    return s, [X, Wt, *([Bias] if Bias is not None else []), Y]
