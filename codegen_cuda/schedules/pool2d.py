"""GPU templates for pooling and depthwise convolution: one thread per output element.

Neither reuses data across output channels, so there is nothing to stage in
shared memory: threads of a warp take neighbouring output pixels (their input
windows overlap and the reads coalesce in the caches), and the window loops
are unrolled.
"""

from __future__ import annotations

from typing import Any

from ember.tir.schedule.schedule import Schedule, create_schedule
from ember.tir.te import operation as te
from ember.tir.te.tensor import ComputeOp, Tensor
from ember.tir.topi.nn import depthwise_conv2d_nchw, pool2d
from ember.tuner.template import get_config, template


def _one_thread_per_output(out: Tensor) -> Schedule:
    cfg = get_config()
    cfg.define_knob("threads", [64, 128, 256, 512], default=256)
    s = create_schedule(out.op)
    fused = s[out].fuse(*s[out].op.axis)
    bx, tx = s[out].split(fused, factor=cfg["threads"].val)
    s[out].bind(bx, "blockIdx.x")
    s[out].bind(tx, "threadIdx.x")
    reducing = [s[out]]
    for st in s.stages:
        if not isinstance(st.op, ComputeOp) or st.is_output:
            continue
        if st.op.reduce_axis:  # an average's window sum: in a register of its thread
            st.set_scope("local")
            st.compute_at(s[out], tx)
            reducing.append(st)
        else:
            st.compute_inline()  # the padding
    for st in reducing:
        for axis in st.op.reduce_axis:
            st.unroll(axis)
    return s


def _pads(padding: int | tuple[int, ...]) -> tuple[int, int, int, int]:
    if isinstance(padding, int):
        return (padding,) * 4
    return tuple(padding) if len(padding) == 4 else (padding[0], padding[1]) * 2  # type: ignore[return-value]


@template("pool2d.cuda")
def pool2d_cuda(
    N: int, C: int, H: int, W: int, kernel: tuple[int, int], stride: tuple[int, int],
    padding: int | tuple[int, ...] = 0, kind: str = "max", dtype: str = "float32",
) -> tuple[Schedule, list[Any]]:  # fmt: skip
    """2-D max/avg pooling on CUDA, one thread per output element (pooling is memory-bound)."""
    (kh, kw), (sh, sw) = kernel, stride  # lists, when the arguments come from JSON records
    X = te.placeholder((N, C, H, W), dtype, name="X")
    Y = pool2d(X, (kh, kw), (sh, sw), _pads(padding), kind=kind)
    return _one_thread_per_output(Y), [X, Y]


@template("depthwise_conv2d_nchw.cuda")
def depthwise_conv2d_nchw_cuda(
    N: int, C: int, H: int, W: int, KH: int, KW: int, stride: int = 1, padding: int = 0,
    dtype: str = "float32",
) -> tuple[Schedule, list[Any]]:  # fmt: skip
    """Depthwise NCHW convolution on CUDA, one thread per output: too little reuse per output to
    be worth shared-memory tiling."""
    X = te.placeholder((N, C, H, W), dtype, name="X")
    Wt = te.placeholder((C, 1, KH, KW), dtype, name="W")
    Y = depthwise_conv2d_nchw(X, Wt, stride=stride, padding=padding)
    return _one_thread_per_output(Y), [X, Wt, Y]
