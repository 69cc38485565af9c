"""``rfactor`` as TVM's reduction tutorial and its test_reduce.py write it.

The tutorial's program (symbolic shapes, ``ko, ki = split(..., factor=16)``, ``BF =
s.rfactor(B, ki)``, rows over blockIdx.x/threadIdx.y, the factored reduction on
threadIdx.x, ``set_store_predicate(tx.var.equal(0))``) runs in the emulator with race
checks on; the CPU form (``rfactor`` then a parallel factored stage) on LLVM; and TVM's
``test_rfactor*`` programs (factor_axis, a static and a symbolic split, two reduce
axes) compute the same numbers as numpy.
"""

from __future__ import annotations

import numpy as np
import pytest

import ember as tvm
from ember import te
from tests.tvm_scripts.common import CUDA, empty_like, run_emulated, run_llvm


def _random(rng, shape):
    return rng.uniform(-1, 1, shape).astype("float32")


def _tutorial_compute():
    n = te.var("n")
    m = te.var("m")
    A = te.placeholder((n, m), name="A")
    k = te.reduce_axis((0, m), "k")
    B = te.compute((n,), lambda i: te.sum(A[i, k], axis=k), name="B")
    return A, B


def test_tutorial_rfactor_cpu(rng):
    A, B = _tutorial_compute()
    s = te.create_schedule(B.op)
    ko, ki = s[B].split(B.op.reduce_axis[0], factor=16)
    BF = s.rfactor(B, ki)
    text = str(tvm.lower(s, [A, B], simple_mode=True))
    assert "B.rf" in text and "k_inner.v" in text
    s[BF].parallel(BF.op.axis[0])
    for shape in ((3, 5), (7, 100), (1, 16)):
        a = _random(rng, shape)
        b = np.full(shape[0], np.nan, "float32")
        run_llvm(s, [A, B], a, b)
        np.testing.assert_allclose(b, a.sum(axis=1), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("reducer", ["sum", "max"])
def test_tutorial_rfactor_cross_thread(rng, reducer):
    n = te.var("n")
    m = te.var("m")
    A = te.placeholder((n, m), name="A")
    k = te.reduce_axis((0, m), "k")
    fred = te.sum if reducer == "sum" else te.max
    B = te.compute((n,), lambda i: fred(A[i, k], axis=k), name="B")
    s = te.create_schedule(B.op)
    ko, ki = s[B].split(B.op.reduce_axis[0], factor=16)
    BF = s.rfactor(B, ki)
    xo, xi = s[B].split(s[B].op.axis[0], factor=32)
    s[B].bind(xo, te.thread_axis("blockIdx.x"))
    s[B].bind(xi, te.thread_axis("threadIdx.y"))
    tx = te.thread_axis("threadIdx.x")
    s[B].bind(s[B].op.reduce_axis[0], tx)
    s[BF].compute_at(s[B], s[B].op.reduce_axis[0])
    s[B].set_store_predicate(tx.var.equal(0))
    fcuda = tvm.build(s, [A, B], CUDA)
    ref = np.sum if reducer == "sum" else np.max
    for shape in ((37, 50), (5, 3), (64, 129)):
        a = _random(rng, shape)
        b = np.full(shape[0], np.nan, "float32")
        fcuda.emulate(a, b)
        np.testing.assert_allclose(b, ref(a, axis=1), rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("factor_axis", [0, 1])
def test_rfactor_factor_axis(rng, factor_axis):
    """TVM test_reduce.py test_rfactor_factor_axis: ``kf`` of a static split."""
    n = 1027
    A = te.placeholder((n,), name="A")
    k = te.reduce_axis((0, n))
    B = te.compute((1,), lambda i: te.sum(A[k], axis=k), name="B")
    s = te.create_schedule(B.op)
    kf, ki = s[B].split(k, nparts=4)
    BF = s.rfactor(B, kf, factor_axis=factor_axis)
    s[BF].parallel(BF.op.axis[factor_axis])
    a = _random(rng, (1027,))
    b = empty_like(B)
    run_llvm(s, [A, B], a, b)
    np.testing.assert_allclose(b[0], a.sum(), rtol=1e-4)


def test_rfactor_threads_two_reduce_axes(rng):
    """TVM test_reduce.py test_rfactor_threads: ``nthreadx``/``nthready`` over a matrix."""
    nn, mm = 1027, 10
    n, m = nn, mm
    A = te.placeholder((m, n), name="A")
    k = te.reduce_axis((0, n))
    nthread = 16
    B = te.compute((m,), lambda i: te.sum(A[i, k], axis=k, where=(i > 1)), name="B")
    s = te.create_schedule(B.op)
    ko, kf = s[B].split(k, factor=nthread)
    BF = s.rfactor(B, kf)
    bx, ty = s[B].split(s[B].op.axis[0], factor=4)
    s[B].bind(bx, te.thread_axis("blockIdx.x"))
    s[B].bind(ty, te.thread_axis("threadIdx.y"))
    tx = s[B].op.reduce_axis[0]
    thread_x = te.thread_axis("threadIdx.x")
    s[B].bind(tx, thread_x)
    s[BF].compute_at(s[B], tx)
    s[B].set_store_predicate(thread_x.var.equal(0))
    a = _random(rng, (mm, nn))
    b = empty_like(B)
    run_emulated(s, [A, B], a, b)
    want = a.sum(axis=1)
    want[:2] = 0.0
    np.testing.assert_allclose(b, want, rtol=1e-4, atol=1e-5)
