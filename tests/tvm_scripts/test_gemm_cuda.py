"""TVM's CUDA GEMMs, written as TVM's integration test and GEMM recipe write them.

``integration_gemm`` follows tests/python/integration/test_gemm.py: ``cache_write``
to local, ``cache_read`` of both operands to shared at the reduction axis, threads
and blocks bound in two dimensions, ``double_buffer``. ``square_gemm`` follows
topi/recipe/gemm/cuda_gemm_square.py: shared and local ``cache_read`` stages,
virtual threads, a vectorised cooperative fetch, ``unroll`` and ``double_buffer``.
Only the import differs; sizes are smaller (and also non-divisible) so the SIMT
emulator runs them quickly. The same compute with a CPU schedule runs on LLVM.
"""

from __future__ import annotations

import numpy as np
import pytest

import ember as tvm
from ember import te
from tests.tvm_scripts.common import empty_like, run_emulated, run_llvm


def integration_gemm(n, m, l, scale=2, num_thread=8, double_buffer=True):  # noqa: E741
    A = te.placeholder((n, l), name="A")
    B = te.placeholder((m, l), name="B")
    k = te.reduce_axis((0, l), name="k")
    C = te.compute((n, m), lambda ii, jj: te.sum(A[ii, k] * B[jj, k], axis=k), name="CC")
    s = te.create_schedule(C.op)
    block_factor = scale * num_thread
    block_x = te.thread_axis("blockIdx.x")
    thread_x = te.thread_axis("threadIdx.x")
    block_y = te.thread_axis("blockIdx.y")
    thread_y = te.thread_axis("threadIdx.y")

    CC = s.cache_write(C, "local")
    AA = s.cache_read(A, "shared", [CC])
    BB = s.cache_read(B, "shared", [CC])
    by, yi = s[C].split(C.op.axis[0], factor=block_factor)
    bx, xi = s[C].split(C.op.axis[1], factor=block_factor)
    s[C].reorder(by, bx, yi, xi)
    s[C].bind(by, block_y)
    s[C].bind(bx, block_x)
    ty, yi = s[C].split(yi, nparts=num_thread)
    tx, xi = s[C].split(xi, nparts=num_thread)
    s[C].reorder(ty, tx, yi, xi)
    s[C].bind(ty, thread_y)
    s[C].bind(tx, thread_x)
    yo, xo = CC.op.axis
    s[CC].reorder(k, yo, xo)

    s[CC].compute_at(s[C], tx)
    s[AA].compute_at(s[CC], k)
    s[BB].compute_at(s[CC], k)

    ty, xi = s[AA].split(s[AA].op.axis[0], nparts=num_thread)
    tx, xi = s[AA].split(xi, nparts=num_thread)
    s[AA].bind(ty, thread_y)
    s[AA].bind(tx, thread_x)

    ty, xi = s[BB].split(s[BB].op.axis[0], nparts=num_thread)
    tx, xi = s[BB].split(xi, nparts=num_thread)
    s[BB].bind(ty, thread_y)
    s[BB].bind(tx, thread_x)
    if double_buffer:
        s[AA].double_buffer()
        s[BB].double_buffer()
    return s, [A, B, C]


def square_gemm(n, scale=2, num_thread=8):
    """C[i, j] = sum_k A[k, i] * B[k, j], the recipe's transposed-A GEMM."""
    A = te.placeholder((n, n), name="A")
    B = te.placeholder((n, n), name="B")
    k = te.reduce_axis((0, n), name="k")
    C = te.compute((n, n), lambda ii, jj: te.sum(A[k, ii] * B[k, jj], axis=k), name="C")
    s = te.create_schedule(C.op)
    AA = s.cache_read(A, "shared", [C])
    BB = s.cache_read(B, "shared", [C])
    AL = s.cache_read(AA, "local", [C])
    BL = s.cache_read(BB, "local", [C])
    CC = s.cache_write(C, "local")

    block_factor = scale * num_thread
    block_x = te.thread_axis("blockIdx.x")
    thread_x = te.thread_axis((0, num_thread), "threadIdx.x")
    block_y = te.thread_axis("blockIdx.y")
    thread_y = te.thread_axis((0, num_thread), "threadIdx.y")
    thread_xz = te.thread_axis((0, 2), "vthread", name="vx")
    thread_yz = te.thread_axis((0, 2), "vthread", name="vy")

    by, yi = s[C].split(C.op.axis[0], factor=block_factor)
    bx, xi = s[C].split(C.op.axis[1], factor=block_factor)
    s[C].bind(by, block_y)
    s[C].bind(bx, block_x)
    s[C].reorder(by, bx, yi, xi)

    tyz, yi = s[C].split(yi, nparts=2)
    ty, yi = s[C].split(yi, nparts=num_thread)
    txz, xi = s[C].split(xi, nparts=2)
    tx, xi = s[C].split(xi, nparts=num_thread)
    s[C].bind(tyz, thread_yz)
    s[C].bind(txz, thread_xz)
    s[C].bind(ty, thread_y)
    s[C].bind(tx, thread_x)
    s[C].reorder(tyz, txz, ty, tx, yi, xi)
    s[CC].compute_at(s[C], tx)

    yo, xo = CC.op.axis
    ko, ki = s[CC].split(k, factor=8)
    kt, ki = s[CC].split(ki, factor=1)
    s[CC].reorder(ko, kt, ki, yo, xo)
    s[AA].compute_at(s[CC], ko)
    s[BB].compute_at(s[CC], ko)
    s[CC].unroll(kt)
    s[AL].compute_at(s[CC], kt)
    s[BL].compute_at(s[CC], kt)
    for shared in (AA, BB):
        ty, xi = s[shared].split(s[shared].op.axis[0], nparts=num_thread)
        _, xi = s[shared].split(s[shared].op.axis[1], factor=num_thread * 4)
        tx, xi = s[shared].split(xi, nparts=num_thread)
        s[shared].bind(ty, thread_y)
        s[shared].bind(tx, thread_x)
        s[shared].vectorize(xi)
        s[shared].double_buffer()
    return s, [A, B, C]


def _inputs(rng, *shapes):
    return [rng.uniform(-1, 1, shape).astype("float32") for shape in shapes]


@pytest.mark.parametrize("shape", [(64, 64, 32), (50, 37, 19), (16, 17, 1)])
@pytest.mark.parametrize("double_buffer", [True, False])
def test_integration_gemm_emulated(rng, shape, double_buffer):
    n, m, l = shape  # noqa: E741
    s, args = integration_gemm(n, m, l, double_buffer=double_buffer)
    a, b = _inputs(rng, (n, l), (m, l))
    c = empty_like(args[2])
    run_emulated(s, args, a, b, c)
    np.testing.assert_allclose(c, a @ b.T, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("n", [64, 48, 41])
def test_square_gemm_recipe_emulated(rng, n):
    s, args = square_gemm(n)
    a, b = _inputs(rng, (n, n), (n, n))
    c = empty_like(args[2])
    mod = run_emulated(s, args, a, b, c)
    np.testing.assert_allclose(c, a.T @ b, rtol=1e-4, atol=1e-4)
    (kernel,) = mod.program.kernels
    assert kernel.attr("launch")[1] == (8, 8, 1)  # vthreads launch no threads


@pytest.mark.nvrtc
def test_square_gemm_recipe_compiles_with_nvrtc():
    s, args = square_gemm(64)
    mod = tvm.build(s, args, target="cuda -arch=sm_80")
    (usage,) = mod.resource_usage().values()
    assert usage.spill_bytes == 0 and usage.shared_bytes <= 48 * 1024
    # double-buffered: the next k-tile is fetched into the other half while this one is read
    assert "(k_outer + 1) % 2" in mod.get_source()


@pytest.mark.parametrize("shape", [(64, 64, 32), (50, 37, 19)])
def test_same_compute_on_llvm(rng, shape):
    """TVM builds a GPU schedule only for GPUs; the scripts run the compute on the CPU
    with a default schedule, as TVM's tests do for their ``llvm`` target."""
    n, m, l = shape  # noqa: E741
    _, args = integration_gemm(n, m, l)
    s = te.create_schedule(args[2].op)
    a, b = _inputs(rng, (n, l), (m, l))
    c = empty_like(args[2])
    run_llvm(s, args, a, b, c)
    np.testing.assert_allclose(c, a @ b.T, rtol=1e-4, atol=1e-4)
