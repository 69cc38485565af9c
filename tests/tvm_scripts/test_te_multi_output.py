"""Multi-output TE programs as TVM v0.18 writes them (issue 22): ``cache_write`` of the
outputs of one compute (test_te_schedule_ops.test_schedule_compute_inline), a
``te.extern`` with two outputs, and a ``te.scan`` of two states (test_te_tensor's
test_scan_multi_out), on LLVM and, for the scan, in the CUDA emulator, against numpy."""

from __future__ import annotations

import numpy as np
import pytest

import ember as tvm
from ember import te
from tests.tvm_scripts.common import CUDA


@pytest.mark.parametrize("shape", [[10, 1024], [3, 37]])
def test_schedule_compute_inline_with_multi_output_cache_write(shape):
    A = te.placeholder(shape, name="A")
    B = te.placeholder(shape, name="B")
    C = te.compute(shape, lambda *index: A(*index) + B(*index), name="C")

    def _compute(*index):
        return C(*index), C(*index) * B(*index)

    F, E = te.compute(shape, _compute, name="F")
    s = te.create_schedule([F.op, E.op])
    AL = s.cache_read(A, "local", [C])  # noqa: F841
    BL = s.cache_read(B, "local", [C, E])  # noqa: F841
    CL = s.cache_write(C, "local")  # noqa: F841
    FL, EL = s.cache_write([F, E], "local")
    s[C].compute_inline()
    s = s.normalize()
    assert FL.op is EL.op and FL.value_index == 0 and EL.value_index == 1
    f = tvm.build(s, [A, B, F, E], "llvm")
    a, b = np.random.uniform(-1, 1, (2, *shape)).astype("float32")
    fo = np.full(shape, np.nan, "float32")
    eo = np.full(shape, np.nan, "float32")
    f(a, b, fo, eo)
    np.testing.assert_allclose(fo, a + b, rtol=1e-6)
    np.testing.assert_allclose(eo, (a + b) * b, rtol=1e-6)


def test_multi_output_cache_write_computed_at_a_split_loop():
    A = te.placeholder((7, 19), name="A")
    F, E = te.compute((7, 19), lambda i, j: (A[i, j] + 1, A[i, j] * A[i, j]), name="F")
    s = te.create_schedule(F.op)
    FL, EL = s.cache_write([F, E], "local")
    jo, ji = s[F].split(F.op.axis[1], factor=4)
    s[FL].compute_at(s[F], jo)
    f = tvm.build(s, [A, F, E], "llvm")
    a = np.random.uniform(-2, 2, (7, 19)).astype("float32")
    fo = np.full((7, 19), np.nan, "float32")
    eo = np.full((7, 19), np.nan, "float32")
    f(a, fo, eo)
    np.testing.assert_allclose(fo, a + 1, rtol=1e-6)
    np.testing.assert_allclose(eo, a * a, rtol=1e-6)


@pytest.fixture
def split2():
    @tvm.register_func("tvm_scripts.test.split2", override=True)
    def split2(x, y, z):
        a = x.numpy()
        tvm.nd.array(a * 2).copyto(y)
        tvm.nd.array(a[:, :3].sum(axis=1).astype("int32")).copyto(z)

    yield
    tvm.remove_global_func("tvm_scripts.test.split2")


def test_extern_with_two_outputs(split2):
    n = 5
    A = te.placeholder((n, 4), name="A")
    B, C = te.extern(
        [(n, 4), (n,)],
        [A],
        lambda ins, outs: tvm.tir.call_packed("tvm_scripts.test.split2", ins[0], outs[0], outs[1]),
        dtype=["float32", "int32"],
        name="B",
    )
    assert tuple(int(d) for d in C.shape) == (n,) and C.dtype == "int32"
    D = te.compute((n,), lambda i: B[i, 3] + C[i].astype("float32"), name="D")
    s = te.create_schedule(D.op)
    a = np.random.uniform(-9, 9, (n, 4)).astype("float32")
    want_c = a[:, :3].sum(axis=1).astype("int32")
    d = np.full(n, np.nan, "float32")
    tvm.build(s, [A, D], "llvm")(a, d)
    np.testing.assert_allclose(d, a[:, 3] * 2 + want_c, rtol=1e-6)
    c = np.full(n, 77, "int32")
    d[:] = np.nan
    tvm.build(s, [A, C, D], "llvm")(a, c, d)
    np.testing.assert_array_equal(c, want_c)
    np.testing.assert_allclose(d, a[:, 3] * 2 + want_c, rtol=1e-6)


def _scan_multi_out():
    m = te.size_var("m")
    n = te.size_var("n")
    x1 = te.placeholder((m, n), name="x1")
    s1 = te.placeholder((m, n))
    x2 = te.placeholder((m, n), name="x2")
    s2 = te.placeholder((m, n))
    s1_init = te.compute((1, n), lambda _, i: x1[0, i])
    s2_init = te.compute((1, n), lambda _, i: x2[0, i])
    s1_update = te.compute((m, n), lambda t, i: s1[t - 1, i] + s2[t - 1, i] + x1[t, i])
    s2_update = te.compute((m, n), lambda t, i: x2[t, i] + s2[t - 1, i])
    r0, r1 = tvm.te.scan([s1_init, s2_init], [s1_update, s2_update], [s1, s2])
    return x1, x2, (s1_init, s2_init), (s1_update, s2_update), r0, r1


def _scan_reference(a1, a2):
    w0, w1 = a1.astype(np.float64), a2.astype(np.float64)
    for t in range(1, len(a1)):
        w0[t] = w0[t - 1] + w1[t - 1] + a1[t]
        w1[t] = a2[t] + w1[t - 1]
    return w0, w1


@pytest.mark.parametrize("shape", [(6, 5), (1, 3), (9, 40)])
def test_scan_multi_out_llvm(shape):
    x1, x2, _, _, r0, r1 = _scan_multi_out()
    assert r0.op is r1.op and r0.op.num_outputs == 2
    s = te.create_schedule([r0.op])
    f = tvm.build(s, [x1, x2, r0, r1], "llvm")
    a1, a2 = np.random.uniform(-1, 1, (2, *shape)).astype("float32")
    o0 = np.full(shape, np.nan, "float32")
    o1 = np.full(shape, np.nan, "float32")
    f(a1, a2, o0, o1)
    w0, w1 = _scan_reference(a1, a2)
    np.testing.assert_allclose(o0, w0, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(o1, w1, rtol=1e-5, atol=1e-5)
    only0 = tvm.build(s, [x1, x2, r0], "llvm")  # the other state lives inside
    o0[:] = np.nan
    only0(a1, a2, o0)
    np.testing.assert_allclose(o0, w0, rtol=1e-5, atol=1e-5)


def test_scan_multi_out_cuda_emulated():
    x1, x2, inits, updates, r0, r1 = _scan_multi_out()
    s = te.create_schedule([r0.op])
    for stage in (*inits, *updates):
        xo, xi = s[stage].split(stage.op.axis[1], factor=16)
        s[stage].bind(xo, te.thread_axis("blockIdx.x"))
        s[stage].bind(xi, te.thread_axis("threadIdx.x"))
    f = tvm.build(s, [x1, x2, r0, r1], CUDA)
    shape = (5, 37)
    a1, a2 = np.random.uniform(-1, 1, (2, *shape)).astype("float32")
    o0 = np.full(shape, np.nan, "float32")
    o1 = np.full(shape, np.nan, "float32")
    f.emulate(a1, a2, o0, o1)
    w0, w1 = _scan_reference(a1, a2)
    np.testing.assert_allclose(o0, w0, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(o1, w1, rtol=1e-5, atol=1e-5)
