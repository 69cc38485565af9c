"""TVM's "External Tensor Functions" tutorial, the part that calls back into Python, with
only the import changed: ``tvm.register_func`` + ``te.extern`` + ``tvm.tir.call_packed``,
NDArrays in and out; plus an extern followed by a scheduled compute."""

from __future__ import annotations

import numpy as np
import pytest

import ember as tvm
from ember import te


@pytest.fixture
def addone():
    calls = []

    @tvm.register_func("tvm.contrib.my_tvm_addone", override=True)
    def my_tvm_addone(x, y):
        calls.append((type(x).__name__, type(y).__name__))
        tvm.nd.array(x.numpy() + 1).copyto(y)

    yield calls
    tvm.remove_global_func("tvm.contrib.my_tvm_addone")


@pytest.mark.parametrize("n", [10, 1, 1023])
def test_tutorial_addone_callback(addone, n):
    A = te.placeholder((n,), name="A")
    B = te.extern(
        A.shape,
        [A],
        lambda ins, outs: tvm.tir.call_packed("tvm.contrib.my_tvm_addone", ins[0], outs[0]),
        name="C",
    )
    s = te.create_schedule(B.op)
    f = tvm.build(s, [A, B], "llvm")
    a = tvm.nd.array(np.random.uniform(size=(n,)).astype(A.dtype))
    b = tvm.nd.array(np.random.uniform(size=(n,)).astype(B.dtype))
    f(a, b)
    np.testing.assert_allclose(b.numpy(), a.numpy() + 1, rtol=1e-5)
    assert addone == [("CPUArray", "CPUArray")]


def test_extern_then_scheduled_compute(addone):
    n = te.var("n")
    A = te.placeholder((n,), name="A")
    B = te.extern(
        (n,),
        [A],
        lambda ins, outs: tvm.tir.call_packed("tvm.contrib.my_tvm_addone", ins[0], outs[0]),
        name="B",
    )
    C = te.compute((n,), lambda i: B[i] * 2, name="C")
    s = te.create_schedule(C.op)
    xo, xi = s[C].split(C.op.axis[0], factor=8)
    s[C].parallel(xo)
    s[C].vectorize(xi)
    f = tvm.build(s, [A, C], "llvm")
    for size in (3, 64, 101):
        a = np.random.uniform(-1, 1, size).astype("float32")
        c = np.full(size, np.nan, "float32")
        f(a, c)
        np.testing.assert_allclose(c, (a + 1) * 2, rtol=1e-5)
