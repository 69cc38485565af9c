"""TVM's ``opt_conv_cuda`` tutorial schedule (HWCN layout), scaled by parameters.

The padded input is an ``if_then_else`` computed inline into a shared-memory
fetch whose innermost (batch) axis is vectorized, so each ``float4`` fetch is
guarded by a bounds test on the outer spatial axes.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ember import te


def opt_conv(
    batch: int = 32, in_channel: int = 8, out_channel: int = 32, in_size: int = 7,
    kernel: int = 3, pad: int = 1, stride: int = 1, tile: int = 8, num_thread: int = 2,
    step: int = 4, vthread: int = 1, vec: int = 4,
) -> tuple[Any, list[Any]]:  # fmt: skip
    A = te.placeholder((in_size, in_size, in_channel, batch), name="A")
    W = te.placeholder((kernel, kernel, in_channel, out_channel), name="W")
    out_size = (in_size - kernel + 2 * pad) // stride + 1
    Apad = te.compute(
        (in_size + 2 * pad, in_size + 2 * pad, in_channel, batch),
        lambda yy, xx, cc, nn: te.if_then_else(
            te.all(yy >= pad, yy - pad < in_size, xx >= pad, xx - pad < in_size),
            A[yy - pad, xx - pad, cc, nn],
            te.const(0.0, "float32"),
        ),
        name="Apad",
    )
    rc = te.reduce_axis((0, in_channel), name="rc")
    ry = te.reduce_axis((0, kernel), name="ry")
    rx = te.reduce_axis((0, kernel), name="rx")
    B = te.compute(
        (out_size, out_size, out_channel, batch),
        lambda yy, xx, ff, nn: te.sum(
            Apad[yy * stride + ry, xx * stride + rx, rc, nn] * W[ry, rx, rc, ff],
            axis=[ry, rx, rc],
        ),
        name="B",
    )
    s = te.create_schedule(B.op)
    s[Apad].compute_inline()
    AA = s.cache_read(Apad, "shared", [B])
    WW = s.cache_read(W, "shared", [B])
    AL = s.cache_read(AA, "local", [B])
    WL = s.cache_read(WW, "local", [B])
    BL = s.cache_write(B, "local")
    block_factor = tile * num_thread
    thread_x = te.thread_axis((0, num_thread), "threadIdx.x")
    thread_y = te.thread_axis((0, num_thread), "threadIdx.y")
    hi, wi, fi, ni = s[B].op.axis
    bz = s[B].fuse(hi, wi)
    by, fi = s[B].split(fi, factor=block_factor)
    bx, ni = s[B].split(ni, factor=block_factor)
    tyz, fi = s[B].split(fi, nparts=vthread)
    txz, ni = s[B].split(ni, nparts=vthread)
    ty, fi = s[B].split(fi, nparts=num_thread)
    tx, ni = s[B].split(ni, nparts=num_thread)
    s[B].reorder(bz, by, bx, tyz, txz, ty, tx, fi, ni)
    s[B].bind(bz, te.thread_axis("blockIdx.z"))
    s[B].bind(by, te.thread_axis("blockIdx.y"))
    s[B].bind(bx, te.thread_axis("blockIdx.x"))
    s[B].bind(tyz, te.thread_axis((0, vthread), "vthread", name="vy"))
    s[B].bind(txz, te.thread_axis((0, vthread), "vthread", name="vx"))
    s[B].bind(ty, thread_y)
    s[B].bind(tx, thread_x)
    s[BL].compute_at(s[B], tx)
    yi, xi, fi, ni = s[BL].op.axis
    ry, rx, rc = s[BL].op.reduce_axis
    rco, rci = s[BL].split(rc, factor=step)
    s[BL].reorder(rco, ry, rx, rci, fi, ni)
    s[AA].compute_at(s[BL], rx)
    s[WW].compute_at(s[BL], rx)
    s[AL].compute_at(s[BL], rci)
    s[WL].compute_at(s[BL], rci)
    for stage in (AA, WW):  # the batch and the output-channel axes are vectorized
        yi, xi, ci, li = s[stage].op.axis
        ty, ci = s[stage].split(ci, nparts=num_thread)
        tx, li = s[stage].split(li, nparts=num_thread)
        _, li = s[stage].split(li, factor=vec)
        s[stage].reorder(ty, tx, yi, xi, ci, li)
        s[stage].bind(ty, thread_y)
        s[stage].bind(tx, thread_x)
        s[stage].vectorize(li)
    return s, [A, W, B]


def conv_reference(a: np.ndarray, w: np.ndarray, pad: int, stride: int = 1) -> np.ndarray:
    """HWCN x HWIO convolution in numpy (float64 accumulation)."""
    ap = np.pad(a.astype(np.float64), ((pad, pad), (pad, pad), (0, 0), (0, 0)))
    K = w.shape[0]
    O = (a.shape[0] + 2 * pad - K) // stride + 1
    out = np.zeros((O, O, w.shape[3], a.shape[3]))
    for ry in range(K):
        for rx in range(K):
            window = ap[ry : ry + stride * O : stride, rx : rx + stride * O : stride]
            out += np.einsum("yxcn,cf->yxfn", window, w[ry, rx].astype(np.float64))
    return out
