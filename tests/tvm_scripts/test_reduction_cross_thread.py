"""Cross-thread reductions without rfactor, as TVM's reduction tutorial and its
integration tests (test_reduce.py: ``test_crossthread_reduction1/2``) write them:
the reduce axis split, its part bound to ``threadIdx``, rows on ``blockIdx`` (and
``threadIdx.y``). Symbolic and static shapes, odd sizes, the emulator against numpy;
the same computes with a CPU schedule on LLVM.
"""

from __future__ import annotations

import numpy as np
import pytest

import ember as tvm
from ember import te
from tests.tvm_scripts.common import CUDA, run_emulated, run_llvm


def _row_sum(symbolic: bool, shape=(13, 70), reducer=te.sum):
    n, m = (te.var("n"), te.var("m")) if symbolic else shape
    A = te.placeholder((n, m), name="A")
    k = te.reduce_axis((0, m), "k")
    B = te.compute((n,), lambda i: reducer(A[i, k], axis=k), name="B")
    return A, B


def _random(rng, shape):
    return rng.uniform(-1, 1, shape).astype("float32")


@pytest.mark.parametrize("nthd", [1, 2, 3, 5, 16, 32, 64])
def test_crossthread_reduction1(rng, nthd):
    A, B = _row_sum(symbolic=True)
    s = te.create_schedule(B.op)
    ko, _ = s[B].split(B.op.reduce_axis[0], nparts=nthd)
    s[B].bind(ko, te.thread_axis("threadIdx.x"))
    s[B].bind(B.op.axis[0], te.thread_axis("blockIdx.x"))
    mod = tvm.build(s, [A, B], CUDA)
    for n, m in ((1, 1), (2, 3), (7, 97), (5, 200)):
        a = _random(rng, (n, m))
        b = np.full(n, np.nan, "float32")
        mod.emulate(a, b)
        np.testing.assert_allclose(b, a.sum(axis=1), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize(("nthdx", "nthdy"), [(1, 1), (4, 3), (8, 8), (16, 2)])
def test_crossthread_reduction2(rng, nthdx, nthdy):
    n, k0, k1 = te.var("n"), te.var("k0"), te.var("k1")
    A = te.placeholder((n, k0, k1), name="A")
    r0 = te.reduce_axis((0, k0), "k0")
    r1 = te.reduce_axis((0, k1), "k1")
    B = te.compute((n,), lambda i: te.sum(A[i, r0, r1], axis=(r0, r1)), name="B")
    s = te.create_schedule(B.op)
    k0o, _ = s[B].split(B.op.reduce_axis[0], nparts=nthdx)
    k1o, _ = s[B].split(B.op.reduce_axis[1], nparts=nthdy)
    s[B].bind(k0o, te.thread_axis("threadIdx.x"))
    s[B].bind(k1o, te.thread_axis("threadIdx.y"))
    s[B].bind(B.op.axis[0], te.thread_axis("blockIdx.x"))
    mod = tvm.build(s, [A, B], CUDA)
    for shape in ((3, 5, 7), (2, 16, 9), (4, 1, 2)):
        a = _random(rng, shape)
        b = np.full(shape[0], np.nan, "float32")
        mod.emulate(a, b)
        np.testing.assert_allclose(b, a.sum(axis=(1, 2)), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("symbolic", [False, True])
@pytest.mark.parametrize(("reducer", "ref"), [(te.sum, np.sum), (te.max, np.max), (te.min, np.min)])
def test_tutorial_rows_on_threadidx_y(rng, symbolic, reducer, ref):
    """The tutorial's layout: k split by 16 with the inner part on threadIdx.x, rows
    split by 4 over blockIdx.x and threadIdx.y; the row count does not divide by 4."""
    A, B = _row_sum(symbolic, reducer=reducer)
    s = te.create_schedule(B.op)
    ko, ki = s[B].split(B.op.reduce_axis[0], factor=16)
    xo, xi = s[B].split(B.op.axis[0], factor=4)
    s[B].bind(xo, te.thread_axis("blockIdx.x"))
    s[B].bind(xi, te.thread_axis("threadIdx.y"))
    s[B].bind(ki, te.thread_axis("threadIdx.x"))
    a = _random(rng, (13, 70))
    b = np.full(13, np.nan, "float32")
    run_emulated(s, [A, B], a, b)
    np.testing.assert_allclose(b, ref(a, axis=1), rtol=1e-5, atol=1e-5)


def test_tutorial_cache_write_local_reduction(rng):
    """The result reduced across threads into a local cache stage, then written out."""
    A, B = _row_sum(symbolic=False, shape=(9, 45))
    s = te.create_schedule(B.op)
    BL = s.cache_write(B, "local")
    xo, xi = s[B].split(B.op.axis[0], factor=4)
    s[B].bind(xo, te.thread_axis("blockIdx.x"))
    s[B].bind(xi, te.thread_axis("threadIdx.y"))
    s[BL].compute_at(s[B], xi)
    _, ki = s[BL].split(BL.op.reduce_axis[0], factor=32)
    s[BL].bind(ki, te.thread_axis("threadIdx.x"))
    a = _random(rng, (9, 45))
    b = np.full(9, np.nan, "float32")
    run_emulated(s, [A, B], a, b)
    np.testing.assert_allclose(b, a.sum(axis=1), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("symbolic", [False, True])
def test_same_reduction_on_llvm(rng, symbolic):
    A, B = _row_sum(symbolic)
    s = te.create_schedule(B.op)
    ko, ki = s[B].split(B.op.reduce_axis[0], factor=16)
    a = _random(rng, (13, 70))
    b = np.full(13, np.nan, "float32")
    run_llvm(s, [A, B], a, b)
    np.testing.assert_allclose(b, a.sum(axis=1), rtol=1e-5, atol=1e-5)
