"""Virtual threads: ``bind(axis, te.thread_axis("vthread"))`` as a TVM schedule writes it."""

from __future__ import annotations

import numpy as np
import pytest

import ember
from ember import te


def _matmul_with_vthreads(M: int, N: int, K: int, vthreads: int):  # noqa: ANN202
    """The TVM tutorial's shape: each thread owns ``vthreads x vthreads`` strided
    sub-tiles of the block tile instead of one contiguous patch."""
    A = te.placeholder((M, K), "float32", name="A")
    B = te.placeholder((K, N), "float32", name="B")
    k = te.reduce_axis((0, K), name="k")
    C = te.compute((M, N), lambda i, j: te.sum(A[i, k] * B[k, j], axis=k), name="C")
    s = te.create_schedule(C.op)
    AA, BB = s.cache_read(A, "shared", [C]), s.cache_read(B, "shared", [C])
    AL, BL = s.cache_read(AA, "local", [C]), s.cache_read(BB, "local", [C])
    CL = s.cache_write(C, "local")
    i, j = s[C].op.axis
    by, yi = s[C].split(i, factor=32)
    bx, xi = s[C].split(j, factor=32)
    vy, yi = s[C].split(yi, nparts=vthreads)
    vx, xi = s[C].split(xi, nparts=vthreads)
    ty, yi = s[C].split(yi, nparts=8)
    tx, xi = s[C].split(xi, nparts=8)
    s[C].reorder(by, bx, vy, vx, ty, tx, yi, xi)
    s[C].bind(by, "blockIdx.y")
    s[C].bind(bx, "blockIdx.x")
    s[C].bind(vy, te.thread_axis("vthread"))
    s[C].bind(vx, te.thread_axis("vthread"))
    s[C].bind(ty, "threadIdx.y")
    s[C].bind(tx, "threadIdx.x")
    s[CL].compute_at(s[C], tx)
    ko, ki = s[CL].split(s[CL].op.reduce_axis[0], factor=8)
    for shared in (AA, BB):
        s[shared].compute_at(s[CL], ko)
        fused = s[shared].fuse(*s[shared].op.axis)
        _, fused = s[shared].split(fused, factor=64)
        t1, t2 = s[shared].split(fused, factor=8)
        s[shared].bind(t1, "threadIdx.y")
        s[shared].bind(t2, "threadIdx.x")
    for local in (AL, BL):
        s[local].compute_at(s[CL], ki)
    return s, [A, B, C]


@pytest.mark.parametrize(
    ("shape", "vthreads"), [((64, 64, 32), 2), ((70, 66, 37), 2), ((33, 40, 9), 4)]
)
def test_vthread_matmul_emulated(rng, shape, vthreads):
    M, N, K = shape
    s, args = _matmul_with_vthreads(M, N, K, vthreads)
    mod = ember.build(s, args, target="cuda")
    (kernel,) = mod.program.kernels
    assert kernel.attr("launch")[1] == (8, 8, 1)  # virtual threads launch no threads
    a = rng.uniform(-1, 1, (M, K)).astype("float32")
    b = rng.uniform(-1, 1, (K, N)).astype("float32")
    c = np.full((M, N), np.nan, "float32")
    mod.emulate(a, b, c)
    np.testing.assert_allclose(c, a @ b, rtol=1e-4, atol=1e-4)


@pytest.mark.nvrtc
def test_vthread_matmul_compiles():
    s, args = _matmul_with_vthreads(128, 128, 64, 2)
    mod = ember.build(s, args, target="cuda -arch=sm_80")
    assert mod.resource_usage()["main_kernel"].spill_bytes == 0
