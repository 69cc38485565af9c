"""TVM programs that Ember ran wrong or crashed on (issue 22), written as TVM v0.18's own
tests write them, checked against numpy: vector-dtype arrays from ``nd.empty``
(``test_llvm_vadd_pipeline``, ``test_cuda_vectorize_add``), a store predicate on a thread
axis that an inner stage binds (``test_rfactor_elemwise_threads``), ``cache_write`` of a
reduction whose extent is the output index (``test_loop_dep_reduce_cache_write``), and
``te.reduce_axis((0, n))`` keeping ``n`` as its extent."""

from __future__ import annotations

import numpy as np
import pytest

import ember as tvm
from ember import te
from tests.tvm_scripts.common import CUDA


@pytest.mark.parametrize("n, lanes", [(64, 2), (512, 2), (12, 4)])
def test_tvm_nd_empty_vector_dtype_llvm_vadd_pipeline(n, lanes):
    A = te.placeholder((n,), name="A", dtype="float32x%d" % lanes)  # noqa: UP031 - as TVM writes it
    B = te.compute((n,), lambda i: A[i], name="B")
    C = te.compute((n,), lambda i: B[i] + tvm.tir.const(1, A.dtype), name="C")
    s = te.create_schedule(C.op)
    xo, xi = s[C].split(C.op.axis[0], nparts=2)
    _, xi = s[C].split(xi, factor=2)
    s[C].parallel(xo)
    s[C].vectorize(xi)
    s[B].compute_at(s[C], xo)
    xo, xi = s[B].split(B.op.axis[0], factor=2)
    s[B].vectorize(xi)
    f = tvm.build(s, [A, C], "llvm")
    dev = tvm.cpu(0)
    src = np.random.uniform(size=(n, lanes))
    a = tvm.nd.empty((n,), A.dtype).copyfrom(src)
    c = tvm.nd.empty((n,), C.dtype, dev)
    assert a.numpy().shape == (n, lanes) and a.numpy().dtype == np.float32
    f(a, c)
    np.testing.assert_allclose(c.numpy(), src.astype("float32") + 1, rtol=1e-6)


@pytest.mark.parametrize("dtype, lanes", [("float32", 2), ("float32", 3), ("int8", 4)])
def test_tvm_nd_empty_vector_dtype_cuda_vectorize_add(dtype, lanes):
    num_thread, n = 8, 64
    bx, tx = te.thread_axis("blockIdx.x"), te.thread_axis("threadIdx.x")
    A = te.placeholder((n,), name="A", dtype="%sx%d" % (dtype, lanes))  # noqa: UP031 - as TVM writes it
    B = te.compute((n,), lambda i: A[i] + tvm.tir.const(1, A.dtype), name="B")
    s = te.create_schedule(B.op)
    xo, xi = s[B].split(B.op.axis[0], factor=num_thread)
    s[B].bind(xo, bx)
    s[B].bind(xi, tx)
    fun = tvm.build(s, [A, B], CUDA)
    src = np.random.uniform(-50, 50, size=(n, lanes)).astype(dtype)
    a = tvm.nd.empty((n,), A.dtype).copyfrom(src)
    c = tvm.nd.empty((n,), B.dtype)
    assert c.numpy().shape == (n, lanes)
    fun.emulate(a, c)
    np.testing.assert_allclose(c.numpy(), src + np.array(1, dtype))


def test_tvm_nd_empty_vector_dtype_sizes():
    a = tvm.nd.empty((3, 5), "int8x4")
    assert a.numpy().shape == (3, 5, 4) and a.numpy().dtype == np.int8
    with pytest.raises(tvm.EmberError, match="shape"):
        a.copyfrom(np.zeros((3, 5)))


@pytest.mark.parametrize("num_m, num_n", [(10, 1025), (3, 40)])
def test_tvm_rfactor_elemwise_threads_store_predicate(num_m, num_n):
    placeholder_a = te.placeholder((num_m, num_n), name="A")
    axis_k = te.reduce_axis((0, num_n))
    nthread = 16
    result_b = te.compute(
        (num_m,), lambda i: te.sum(placeholder_a[i, axis_k], axis=axis_k), name="B"
    )
    result_bb = te.compute((num_m,), lambda i: result_b[i] + 1, name="BB")
    result_c = te.compute((num_m,), lambda i: result_bb[i] + 1, name="C")
    schedule = te.create_schedule(result_c.op)
    schedule[result_bb].compute_inline()
    axis_bx, axis_ty = schedule[result_c].split(schedule[result_c].op.axis[0], factor=nthread)
    _, axis_kf = schedule[result_b].split(axis_k, factor=nthread)
    rfactor_bf = schedule.rfactor(result_b, axis_kf)
    schedule[result_b].compute_at(schedule[result_c], axis_ty)
    schedule[result_c].bind(axis_bx, te.thread_axis("blockIdx.x"))
    schedule[result_c].bind(axis_ty, te.thread_axis("threadIdx.y"))
    axis_tx = schedule[result_b].op.reduce_axis[0]
    thread_x = te.thread_axis("threadIdx.x")
    schedule[result_b].bind(axis_tx, thread_x)
    schedule[rfactor_bf].compute_at(schedule[result_b], axis_tx)
    # Since thread_x is shared across reductions only one of them need to do write back
    schedule[result_b].set_store_predicate(thread_x.var.equal(0))
    schedule[result_c].set_store_predicate(thread_x.var.equal(0))
    fapi = tvm.lower(schedule, args=[placeholder_a, result_c])
    fsum = tvm.build(fapi, target=CUDA, name="mysum")
    a = np.random.uniform(size=(num_m, num_n)).astype(placeholder_a.dtype)
    b = np.full(num_m, np.nan, dtype=result_b.dtype)
    fsum.emulate(a, b)
    np.testing.assert_allclose(b, a.astype(np.float64).sum(axis=1) + 2, rtol=1e-4)


def _loop_dep_reference(x: np.ndarray) -> np.ndarray:
    """y[n] = fold over x[0..n) of max(acc + x, n), from the initial value n > 1 ? 0 : n."""
    out = np.empty_like(x)
    for n in range(len(x)):
        acc = np.float32(0 if n > 1 else n)
        for r in range(n):
            acc = max(np.float32(acc + x[r]), np.float32(n))
        out[n] = acc
    return out


@pytest.mark.parametrize("cache", [False, True])
def test_tvm_loop_dep_reduce_cache_write(cache):
    X = te.placeholder(shape=(10,), name="x")

    def f(n):
        rv = te.reduce_axis((0, n))
        init = lambda dtype: tvm.tir.Select(n > 1, tvm.tir.const(0, dtype), n.astype(dtype))  # noqa: E731
        sum = te.comm_reducer(lambda x, y: tvm.te.max(x + y, n.astype("float32")), init, name="sum")
        return sum(X[rv], axis=rv)

    Y = te.compute(X.shape, f, name="y")
    s = te.create_schedule([Y.op])
    if cache:
        s.cache_write(Y, "local")
    f = tvm.build(s, [X, Y])
    x = np.random.uniform(-3, 3, 10).astype("float32")
    y = np.full(10, np.nan, "float32")
    f(x, y)
    np.testing.assert_allclose(y, _loop_dep_reference(x), rtol=1e-6)


def test_tvm_loop_dep_reduce_sum_cache_write_split():
    """A triangular sum, cached and split after cache_write, on odd sizes."""
    X = te.placeholder(shape=(13,), name="x")

    def f(i):
        r = te.reduce_axis((0, i + 1), "r")
        return te.sum(X[r], axis=r)

    Y = te.compute(X.shape, f, name="y")
    s = te.create_schedule(Y.op)
    YL = s.cache_write(Y, "local")
    xo, xi = s[Y].split(Y.op.axis[0], factor=4)
    s[YL].compute_at(s[Y], xo)
    f = tvm.build(s, [X, Y])
    x = np.random.uniform(-1, 1, 13).astype("float32")
    y = np.full(13, np.nan, "float32")
    f(x, y)
    np.testing.assert_allclose(y, np.cumsum(x), rtol=1e-5, atol=1e-6)


def test_tvm_reduce_axis_keeps_end_as_extent():
    n = te.var("n")
    k = te.reduce_axis((0, n), name="k")
    assert k.dom.extent is n
    assert k.dom.min.value == 0
    k2 = te.reduce_axis((2, n), name="k2")
    assert "n - 2" in str(k2.dom.extent)
    A = te.placeholder((n,), name="A")
    B = te.compute((1,), lambda _: te.sum(A[k], axis=k), name="B")
    s = te.create_schedule(B.op)
    text = str(tvm.lower(s, [A, B], simple_mode=True))
    assert "n - 0" not in text
    f = tvm.build(s, [A, B], "llvm")
    a = np.random.uniform(-1, 1, 7).astype("float32")
    b = np.full(1, np.nan, "float32")
    f(a, b)
    np.testing.assert_allclose(b, [a.sum()], rtol=1e-5)


@pytest.mark.gpu
def test_tvm_nd_empty_vector_dtype_on_the_gpu(monkeypatch):
    """test_cuda_vectorize_add as TVM writes it, on a real device."""
    monkeypatch.delenv("EMBER_CUDA_EMULATE", raising=False)
    n, lanes = 64, 3
    A = te.placeholder((n,), name="A", dtype="float32x%d" % lanes)  # noqa: UP031
    B = te.compute((n,), lambda i: A[i] + tvm.tir.const(1, A.dtype), name="B")
    s = te.create_schedule(B.op)
    xo, xi = s[B].split(B.op.axis[0], factor=8)
    s[B].bind(xo, te.thread_axis("blockIdx.x"))
    s[B].bind(xi, te.thread_axis("threadIdx.x"))
    fun = tvm.build(s, [A, B], "cuda")
    dev = tvm.cuda(0)
    src = np.random.uniform(size=(n, lanes))
    a = tvm.nd.empty((n,), A.dtype, dev).copyfrom(src)
    c = tvm.nd.empty((n,), B.dtype, dev)
    fun(a, c)
    np.testing.assert_allclose(c.numpy(), src.astype("float32") + 1, rtol=1e-6)
