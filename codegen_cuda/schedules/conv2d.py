"""GPU template for ``conv2d_nchw``: direct convolution with the weights staged in shared memory.

A block computes ``oc_block`` output channels for ``threads`` consecutive output
pixels (threads of a warp cover neighbouring pixels, so input reads and output
writes coalesce); each thread accumulates one output in a register over the
reduction. For every ``rc_block`` input channels the block copies the
``oc_block x rc_block x KH x KW`` weights it needs into shared memory once,
where all pixel threads read them as broadcasts, while the copy of the next
channels' weights is in flight (``stages``, see ``inject_pipeline``). The padding is inlined as a
guarded read. ``conv2d_nchw_gemm.cuda`` (:mod:`.conv2d_gemm`) is the implicit
GEMM alternative, which also stages the input in shared memory.
"""

from __future__ import annotations

from typing import Any

from ember.codegen_cuda.schedules.common import bind_blocks, cooperative_fetch
from ember.tir.schedule.schedule import Schedule, create_schedule
from ember.tir.te import operation as te
from ember.tir.te.tensor import ComputeOp
from ember.tir.topi.nn import conv2d_nchw
from ember.tir.topi.transform import static_shape
from ember.tuner.template import get_config, template


@template("conv2d_nchw.cuda")
def conv2d_nchw_cuda(
    N: int, C: int, H: int, W: int, O: int, KH: int, KW: int,
    stride: int = 1, padding: int = 0, dilation: int = 1, dtype: str = "float32",
) -> tuple[Schedule, list[Any]]:  # fmt: skip
    """Direct NCHW convolution on CUDA: each thread computes a few output channels at one pixel,
    the weights staged in shared memory; the layers where the implicit GEMM loses."""
    cfg = get_config()
    blocks = [1, 2, 4, 8, 16]
    cfg.define_knob("oc_block", blocks, default=max(b for b in blocks if b <= min(8, O)))
    cfg.define_knob("threads", [32, 64, 128, 256], default=64)
    cfg.define_knob("rc_block", blocks, default=max(b for b in blocks if b <= min(8, C)))
    cfg.define_knob("stages", [1, 2, 3], default=2)
    oc_block, threads, rc_block = cfg["oc_block"].val, cfg["threads"].val, cfg["rc_block"].val
    X = te.placeholder((N, C, H, W), dtype, name="X")
    Wt = te.placeholder((O, C, KH, KW), dtype, name="W")
    Y = conv2d_nchw(X, Wt, stride=stride, padding=padding, dilation=dilation)
    s = create_schedule(Y.op)
    for st in s.stages:
        if isinstance(st.op, ComputeOp) and not st.is_output:
            st.compute_inline()  # the padding
    YL = s.cache_write(Y, "local")
    WS = s.cache_read(Wt, "shared", [YL])
    n, o, y, x = s[Y].op.axis
    oo, oi = s[Y].split(o, factor=oc_block)
    px = s[Y].fuse(y, x)
    po, pi = s[Y].split(px, factor=threads)
    s[Y].reorder(n, oo, po, oi, pi)
    n_, o_, oh, ow = static_shape(Y)
    blocks_y = n_ * -(-o_ // oc_block)  # (image, channel block) pairs: y, if it fits
    bind_blocks(s[Y], [s[Y].fuse(n, oo), po], [blocks_y, -(-(oh * ow) // threads)])
    s[Y].bind(oi, "threadIdx.y")
    s[Y].bind(pi, "threadIdx.x")
    s[YL].compute_at(s[Y], pi)
    rc, ry, rx = s[YL].op.reduce_axis
    rco, rci = s[YL].split(rc, factor=rc_block)
    s[YL].reorder(rco, rci, ry, rx)
    s[YL].unroll(ry)
    s[YL].unroll(rx)
    s[WS].compute_at(s[YL], rco)
    s[WS].pipeline(cfg["stages"].val)
    cooperative_fetch(s[WS], oc_block, threads)
    return s, [X, Wt, Y]
