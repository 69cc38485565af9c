"""Argmax as TVM's reduction tutorial writes it ("Describe Reduction with Collaborative
Inputs"): ``te.comm_reducer`` over (index, value) pairs with ``tvm.tir.Select``, one
compute with two outputs. Serial on LLVM, with the reduce axis on threadIdx.x in the
emulator, and rfactor'd as TVM's test_reduce.py ``test_argmax``/``test_rfactor_argmax``
do; ties broken by the tutorial's ``>=`` in the order each schedule combines values.
"""

from __future__ import annotations

import numpy as np
import pytest

import ember as tvm
from ember import te
from tests.te.reducers import fold_reference, lanes_reference
from tests.tvm_scripts.common import CUDA, empty_like, run_llvm


def fcombine(x, y):
    lhs = tvm.tir.Select((x[1] >= y[1]), x[0], y[0])
    rhs = tvm.tir.Select((x[1] >= y[1]), x[1], y[1])
    return lhs, rhs


def fidentity(t0, t1):
    return tvm.tir.const(-1, t0), tvm.te.min_value(t1)


argmax = te.comm_reducer(fcombine, fidentity, name="argmax")


def tutorial_compute(shape=None, val_dtype="int32"):
    m, n = (te.var("m"), te.var("n")) if shape is None else shape
    idx = te.placeholder((m, n), name="idx", dtype="int32")
    val = te.placeholder((m, n), name="val", dtype=val_dtype)
    k = te.reduce_axis((0, n), "k")
    T0, T1 = te.compute((m,), lambda i: argmax((idx[i, k], val[i, k]), axis=k), name="T")
    return idx, val, T0, T1


def data(rng, shape, dtype="int32"):
    idx = rng.permutation(int(np.prod(shape))).reshape(shape).astype("int32")
    val = rng.integers(-4, 5, size=shape).astype(dtype)  # few levels: many ties
    return idx, val


def test_tutorial_argmax_llvm(rng):
    idx, val, T0, T1 = tutorial_compute()
    s = te.create_schedule(T0.op)
    text = str(tvm.lower(s, [idx, val, T0, T1], simple_mode=True))
    assert "T.v0" in text and "T.v1" in text
    for shape in ((5, 17), (1, 1), (12, 64)):
        i_, v_ = data(rng, shape)
        t0, t1 = np.full(shape[0], 77, "int32"), np.full(shape[0], 77, "int32")
        run_llvm(s, [idx, val, T0, T1], i_, v_, t0, t1)
        want = fold_reference(i_, v_, list(range(shape[1])))
        np.testing.assert_array_equal(t0, want[0])
        np.testing.assert_array_equal(t1, want[1])
        np.testing.assert_array_equal(t1, v_.max(axis=1))


@pytest.mark.parametrize("nthread", [16, 32, 64])
def test_argmax_cross_thread_emulated(rng, nthread):
    """TVM test_reduce.py test_argmax style: rows on blockIdx.x, k split over threads."""
    idx, val, T0, T1 = tutorial_compute((11, 300), "float32")
    s = te.create_schedule(T0.op)
    ko, ki = s[T0].split(T0.op.reduce_axis[0], factor=nthread)
    s[T0].bind(ki, te.thread_axis("threadIdx.x"))
    s[T0].bind(T0.op.axis[0], te.thread_axis("blockIdx.x"))
    fargmax = tvm.build(s, [idx, val, T0, T1], CUDA)
    i_, v_ = data(rng, (11, 300), "float32")
    t0, t1 = empty_like(T0), empty_like(T1)
    fargmax.emulate(i_, v_, t0, t1)
    want = lanes_reference(i_, v_, nthread)
    np.testing.assert_array_equal(t0, want[0])
    np.testing.assert_array_equal(t1, v_.max(axis=1))


def test_rfactor_argmax_emulated(rng):
    """TVM test_reduce.py test_rfactor_argmax: rfactor a tuple reduction, cross-thread."""
    idx, val, T0, T1 = tutorial_compute((12, 1027), "float32")
    s = te.create_schedule(T0.op)
    ko, kf = s[T0].split(T0.op.reduce_axis[0], factor=32)
    BF = s.rfactor(T0, kf)
    bx, ty = s[T0].split(s[T0].op.axis[0], factor=4)
    s[T0].bind(bx, te.thread_axis("blockIdx.x"))
    s[T0].bind(ty, te.thread_axis("threadIdx.y"))
    tx = s[T0].op.reduce_axis[0]
    thread_x = te.thread_axis("threadIdx.x")
    s[T0].bind(tx, thread_x)
    s[BF[0]].compute_at(s[T0], tx)
    s[T0].set_store_predicate(thread_x.var.equal(0))
    fargmax = tvm.build(s, [idx, val, T0, T1], CUDA)
    i_, v_ = data(rng, (12, 1027), "float32")
    t0, t1 = empty_like(T0), empty_like(T1)
    fargmax.emulate(i_, v_, t0, t1)
    want = lanes_reference(i_, v_, 32)
    np.testing.assert_array_equal(t0, want[0])
    np.testing.assert_array_equal(t1, v_.max(axis=1))


def test_rfactor_argmax_llvm(rng):
    idx, val, T0, T1 = tutorial_compute((6, 77))
    s = te.create_schedule(T0.op)
    ko, kf = s[T0].split(T0.op.reduce_axis[0], factor=8)
    BF = s.rfactor(T0, kf, factor_axis=1)
    s[BF[0]].parallel(BF[0].op.axis[0])
    i_, v_ = data(rng, (6, 77))
    t0, t1 = empty_like(T0), empty_like(T1)
    run_llvm(s, [idx, val, T0, T1], i_, v_, t0, t1)
    want = lanes_reference(i_, v_, 8, threads=False)
    np.testing.assert_array_equal(t0, want[0])
    np.testing.assert_array_equal(t1, want[1])
