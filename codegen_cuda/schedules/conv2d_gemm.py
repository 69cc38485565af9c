"""GPU template ``conv2d_nchw_gemm.cuda``: convolution as an implicit GEMM.

Per image, a 2-D convolution is the matrix product ``Y[o, p] = sum_k W[o, k] *
A[k, p]`` with ``p`` the output pixel (``oh * OW + ow``), ``k`` the reduction
index ``(c, kh, kw)`` and ``A`` the im2col matrix of the padded input. The
matrix is never built in global memory: each block gathers the ``bk x bn``
slice of it that it needs straight into shared memory (``im2col`` is a shared
stage whose elements read the input, zero in the padding), beside the ``bm x bk``
slice of the weights, and then runs the matmul template's register tiling on
them: every thread accumulates ``tm`` output channels by ``tn`` pixels. Both
shared slices are pipelined over the ``k`` tiles. The GEMM result lives in
registers (a ``local`` stage) and is stored straight into the NCHW output,
whose pixels are contiguous, so the stores of a warp coalesce. The image index
is ``blockIdx.z``.

Compared with the direct template (``conv2d_nchw.cuda``) every input element a
block needs is read from global memory once per block instead of once per
thread, at the price of the gather's index arithmetic; which wins depends on
the layer, so both are tunable templates.
"""

from __future__ import annotations

from typing import Any

from ember.codegen_cuda.schedules.common import bind_blocks, cooperative_fetch
from ember.tir.schedule.schedule import Schedule, create_schedule
from ember.tir.te import operation as te
from ember.tir.topi.conv_gemm import conv2d_nchw_im2col_gemm
from ember.tuner.template import get_config, template


@template("conv2d_nchw_gemm.cuda")
def conv2d_nchw_gemm_cuda(
    N: int, C: int, H: int, W: int, O: int, KH: int, KW: int,
    stride: int = 1, padding: int = 0, dilation: int = 1, dtype: str = "float32",
) -> tuple[Schedule, list[Any]]:  # fmt: skip
    """NCHW convolution on CUDA as an implicit-im2col GEMM in shared-memory tiles (see the module
    docstring); tuned against the direct template, layer by layer."""
    cfg = get_config()
    cfg.define_knob("bm", [16, 32, 64, 128], default=64 if O >= 64 else 32)
    cfg.define_knob("bn", [16, 32, 64, 128], default=64)
    cfg.define_knob("bk", [4, 8, 16, 32], default=8)
    cfg.define_knob("tm", [1, 2, 4, 8], default=4)
    cfg.define_knob("tn", [1, 2, 4, 8], default=4)
    cfg.define_knob("stages", [1, 2, 3], default=2)
    cfg.add_constraint(
        lambda c: (c["bm"].val // c["tm"].val) * (c["bn"].val // c["tn"].val) <= 1024,
        "at most 1024 threads per block",
    )
    bm, bn, bk = cfg["bm"].val, cfg["bn"].val, cfg["bk"].val
    tm, tn = min(cfg["tm"].val, bm), min(cfg["tn"].val, bn)

    X = te.placeholder((N, C, H, W), dtype, name="X")
    Wt = te.placeholder((O, C, KH, KW), dtype, name="W")

    A, B, G, Y = conv2d_nchw_im2col_gemm(X, Wt, stride, padding, dilation)
    P = int(G.shape[2].value)  # type: ignore[attr-defined]

    s = create_schedule(Y.op)
    for stage, scope in ((A, "shared"), (B, "shared"), (G, "local")):
        s[stage].set_scope(scope)
    AL = s.cache_read(A, "local", [G])
    BL = s.cache_read(B, "local", [G])

    n, o, y, x = s[Y].op.axis
    p = s[Y].fuse(y, x)
    by, oi = s[Y].split(o, factor=bm)
    bx, pi = s[Y].split(p, factor=bn)
    ty, orow = s[Y].split(oi, nparts=bm // tm)
    tx, pcol = s[Y].split(pi, nparts=bn // tn)
    s[Y].reorder(n, by, bx, ty, tx, orow, pcol)
    bind_blocks(s[Y], [n, by, bx], [N, -(-O // bm), -(-P // bn)])
    s[Y].bind(ty, "threadIdx.y")
    s[Y].bind(tx, "threadIdx.x")
    s[Y].unroll(orow)
    s[Y].unroll(pcol)

    s[G].compute_at(s[Y], tx)
    _, oc, pc = s[G].op.axis
    ko, ki = s[G].split(s[G].op.reduce_axis[0], factor=bk)
    s[G].reorder(ko, ki, oc, pc)
    for axis in (ki, oc, pc):
        s[G].unroll(axis)
    for shared in (A, B):
        s[shared].compute_at(s[G], ko)
        s[shared].pipeline(cfg["stages"].val)
        cooperative_fetch(s[shared], bm // tm, bn // tn)
    for local in (AL, BL):
        s[local].compute_at(s[G], ki)
        for axis in s[local].op.axis:
            s[local].unroll(axis)
    return s, [X, Wt, Y]
