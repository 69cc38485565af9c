"""``s.rfactor``: TVM's semantics, on the CPU (interpreter, LLVM) and in the CUDA emulator.

Every case runs on random data of odd shapes against numpy: non-divisible splits (the
factored stage's bound check), remaining reduce axes, ``where=``, ``init=``, tuple
reducers, both positions of the factored axis, and TVM's cross-thread pattern (the
factored stage computed at the thread-bound ``k_inner.v``) with race checks on.
"""

from __future__ import annotations

import numpy as np
import pytest

import ember
from ember import te
from ember.errors import ScheduleError
from tests.numerics import assert_close, check, random_array
from tests.te.reducers import argmax, inputs_for_argmax, lanes_reference

CUDA = "cuda -arch=sm_80"
REDUCERS = {"sum": (te.sum, np.sum), "max": (te.max, np.max), "min": (te.min, np.min)}


def row_reduce(m: int, n: int, kind: str = "sum"):
    A = te.placeholder((m, n), name="A")
    k = te.reduce_axis((0, n), name="k")
    B = te.compute((m,), lambda i: REDUCERS[kind][0](A[i, k], axis=k), name="B")
    return A, B, k


def test_axes_and_names_follow_tvm():
    A, B, k = row_reduce(5, 77)
    s = te.create_schedule(B.op)
    ko, ki = s[B].split(k, factor=32)
    BF = s.rfactor(B, ki)
    assert BF.op.name == "B.rf" and [int(x.value) for x in BF.shape] == [32, 5]
    assert [iv.name for iv in BF.op.axis] == ["k_inner", "i"]
    assert [iv.name for iv in BF.op.reduce_axis] == ["k_outer"]
    (rv,) = s[B].op.reduce_axis
    assert rv.name == "k_inner.v" and int(rv.dom.extent.value) == 32
    assert s[B].op.name == "B.repl" and s[B].leaf_iter_vars == [*s[B].op.axis, rv]
    assert s[B].op.input_tensors == (BF,)
    assert s.stages.index(s[BF]) == s.stages.index(s[B]) - 1


@pytest.mark.parametrize("factor_axis,pos", [(0, 0), (1, 1), (-1, 1), (-2, 0)])
def test_factor_axis_places_the_new_dimension(factor_axis, pos):
    """A negative factor_axis counts from the end of the new shape, as in TVM."""
    A, B, k = row_reduce(5, 20)
    s = te.create_schedule(B.op)
    BF = s.rfactor(B, s[B].split(k, factor=4)[1], factor_axis=factor_axis)
    assert int(BF.shape[pos].value) == 4 and int(BF.shape[1 - pos].value) == 5


@pytest.mark.parametrize("kind", ["sum", "max", "min"])
@pytest.mark.parametrize("factor_axis", [0, 1])
@pytest.mark.parametrize("n,factor", [(77, 32), (64, 16), (5, 8)])
def test_cpu_rfactor_matches_numpy(rng, kind, factor_axis, n, factor):
    A, B, k = row_reduce(7, n, kind)
    s = te.create_schedule(B.op)
    ko, ki = s[B].split(k, factor=factor)
    s.rfactor(B, ki, factor_axis=factor_axis)
    check(s, [A, B], lambda a: REDUCERS[kind][1](a, axis=1), rng)


def test_rfactor_of_the_outer_part_runs_the_partials_in_parallel(rng):
    A, B, k = row_reduce(3, 1001)
    s = te.create_schedule(B.op)
    ko, ki = s[B].split(k, nparts=4)
    BF = s.rfactor(B, ko)
    s[BF].parallel(s[BF].op.axis[0])
    check(s, [A, B], lambda a: a.sum(axis=1), rng)


def test_rfactor_of_an_unsplit_axis_with_other_reduce_axes(rng):
    A = te.placeholder((4, 6, 9), name="A")
    r = te.reduce_axis((0, 6), name="r")
    c = te.reduce_axis((1, 9), name="c")  # a domain not starting at 0
    B = te.compute((4,), lambda i: te.sum(A[i, r, c], axis=[r, c]), name="B")
    s = te.create_schedule(B.op)
    BF = s.rfactor(B, c, factor_axis=1)
    assert [iv.name for iv in BF.op.reduce_axis] == ["r"] and int(BF.shape[1].value) == 8
    check(s, [A, B], lambda a: a[:, :, 1:].sum(axis=(1, 2)), rng)


def test_remaining_reduce_axes_and_fused_family(rng):
    """k1, k2 fused then split: factoring the inner part keeps the outer one, and the
    untouched axis r stays a reduce axis of the factored stage."""
    A = te.placeholder((3, 5, 7, 11), name="A")
    r = te.reduce_axis((0, 5), name="r")
    k1 = te.reduce_axis((0, 7), name="k1")
    k2 = te.reduce_axis((0, 11), name="k2")
    B = te.compute((3,), lambda i: te.sum(A[i, r, k1, k2], axis=[r, k1, k2]), name="B")
    s = te.create_schedule(B.op)
    f = s[B].fuse(k1, k2)
    fo, fi = s[B].split(f, factor=10)  # 77 = 7*10 + 7: a bound check
    BF = s.rfactor(B, fi)
    assert [iv.name for iv in BF.op.reduce_axis] == ["r", "k1_k2_fused_outer"]
    check(s, [A, B], lambda a: a.sum(axis=(1, 2, 3)), rng)


def test_rfactor_with_where(rng):
    A = te.placeholder((6, 50), name="A")
    k = te.reduce_axis((0, 50), name="k")
    B = te.compute((6,), lambda i: te.sum(A[i, k], axis=k, where=A[i, k] > 0.2), name="B")
    s = te.create_schedule(B.op)
    s.rfactor(B, s[B].split(k, factor=7)[1])
    check(s, [A, B], lambda a: np.where(a > 0.2, a, 0).sum(axis=1), rng)


def test_init_stays_with_the_original_stage(rng):
    A = te.placeholder((6, 30), name="A")
    C = te.placeholder((6,), name="C")
    k = te.reduce_axis((0, 30), name="k")
    B = te.compute((6,), lambda i: te.sum(A[i, k], axis=k, init=C[i] * 2.0), name="B")
    s = te.create_schedule(B.op)
    BF = s.rfactor(B, s[B].split(k, factor=8)[1])
    assert BF.op.body.init is None and s[B].op.body.init is not None
    check(s, [A, C, B], lambda a, c: a.sum(axis=1) + 2 * c, rng)


def test_readers_of_the_reduction_read_the_replacement(rng):
    A, B, k = row_reduce(9, 40)
    C = te.compute((9,), lambda i: B[i] * 3.0 + 1.0, name="C")
    s = te.create_schedule(C.op)
    s.rfactor(B, s[B].split(k, factor=16)[1])
    assert s[C].op.input_tensors == (s[B].op.output(0),)
    check(s, [A, C], lambda a: a.sum(axis=1) * 3 + 1, rng)


@pytest.mark.parametrize("executor", ["interp", "llvm"])
@pytest.mark.parametrize("factor_axis", [0, 1])
def test_rfactor_of_a_tuple_reducer(rng, executor, factor_axis):
    idx, val, T0, T1 = argmax_compute(6, 45)
    s = te.create_schedule(T0.op)
    ko, ki = s[T0].split(s[T0].op.reduce_axis[0], factor=8)
    factored = s.rfactor(T0, ki, factor_axis=factor_axis)
    assert isinstance(factored, list) and len(factored) == 2
    assert factored[0].op is factored[1].op and factored[1].dtype == "float32"
    i_, v_ = inputs_for_argmax(6, 45, rng)
    outs = [np.full(6, 77, "int32"), np.full(6, np.nan, "float32")]
    args = [idx, val, T0, T1]
    if executor == "interp":
        from ember.tir.interp import run

        run(ember.lower(s, args), i_, v_, *outs)
    else:
        ember.build(s, args)(i_, v_, *outs)
    want = lanes_reference(i_, v_, 8, threads=False)  # B folds the lanes in order
    np.testing.assert_array_equal(outs[0], want[0])
    assert_close(outs[1], want[1], "float32")


def argmax_compute(m: int, n: int):
    idx = te.placeholder((m, n), name="idx", dtype="int32")
    val = te.placeholder((m, n), name="val")
    k = te.reduce_axis((0, n), name="k")
    T0, T1 = te.compute((m,), lambda i: argmax((idx[i, k], val[i, k]), axis=k), name="T")
    return idx, val, T0, T1


# -- TVM's cross-thread pattern ------------------------------------------------------------


def tvm_pattern(s, B, k, factor: int, ty: int = 0):
    """TVM's reduction tutorial: rfactor the inner part, reduce it across threadIdx.x."""
    ko, ki = s[B].split(k, factor=factor)
    BF = s.rfactor(B, ki)
    tx = te.thread_axis("threadIdx.x")
    s[B].bind(s[B].op.reduce_axis[0], tx)
    s[BF].compute_at(s[B], s[B].op.reduce_axis[0])
    if ty:
        bo, bi = s[B].split(s[B].op.axis[0], factor=ty)
        s[B].bind(bo, te.thread_axis("blockIdx.x"))
        s[B].bind(bi, te.thread_axis("threadIdx.y"))
    else:
        s[B].bind(s[B].op.axis[0], te.thread_axis("blockIdx.x"))
    return BF


GPU_CASES = [
    # M, N, factor, rows on threadIdx.y (0: on blockIdx.x), reducer
    (5, 77, 32, 0, "sum"),
    (3, 1000, 64, 0, "max"),
    (7, 45, 16, 0, "min"),
    (9, 100, 32, 4, "sum"),
    (6, 33, 8, 3, "max"),
    (4, 10, 32, 0, "sum"),  # fewer elements than threads
]


@pytest.mark.parametrize("case", GPU_CASES, ids=["-".join(map(str, c)) for c in GPU_CASES])
def test_tvm_cross_thread_pattern_in_the_emulator(rng, case):
    M, N, factor, ty, kind = case
    A, B, k = row_reduce(M, N, kind)
    s = te.create_schedule(B.op)
    tvm_pattern(s, B, k, factor, ty)
    mod = ember.build(s, [A, B], target=CUDA)
    a = random_array((M, N), "float32", rng)
    b = np.full(M, np.nan, "float32")
    mod.emulate(a, b)  # race checks on
    assert_close(b, REDUCERS[kind][1](a.astype(np.float64), axis=1), "float32")
    src = mod.get_source()
    assert "float B_rf[1];" in src  # TVM's inferred scope: one register per thread


def test_tvm_cross_thread_pattern_with_a_tuple_reducer(rng):
    idx, val, T0, T1 = argmax_compute(5, 70)
    s = te.create_schedule(T0.op)
    ko, ki = s[T0].split(s[T0].op.reduce_axis[0], factor=32)
    BF0, BF1 = s.rfactor(T0, ki)
    s[T0].bind(s[T0].op.reduce_axis[0], te.thread_axis("threadIdx.x"))
    s[BF0].compute_at(s[T0], s[T0].op.reduce_axis[0])
    s[T1].bind(s[T1].op.axis[0], te.thread_axis("blockIdx.x"))
    mod = ember.build(s, [idx, val, T0, T1], target=CUDA)
    i_, v_ = inputs_for_argmax(5, 70, rng)
    outs = [np.full(5, 77, "int32"), np.full(5, np.nan, "float32")]
    mod.emulate(i_, v_, *outs)
    want = lanes_reference(i_, v_, 32)
    np.testing.assert_array_equal(outs[0], want[0])
    assert_close(outs[1], want[1], "float32")


@pytest.mark.nvrtc
def test_tvm_cross_thread_pattern_compiles_with_nvrtc():
    pytest.importorskip("cuda.bindings.nvrtc")
    from ember.codegen_cuda.nvrtc import compile_cuda

    A, B, k = row_reduce(9, 100)
    s = te.create_schedule(B.op)
    tvm_pattern(s, B, k, 32, ty=4)
    src = ember.build(s, [A, B], target=CUDA).get_source()
    for arch in ("sm_80", "sm_90"):
        assert "shfl.sync" in compile_cuda(src, arch).ptx


# -- errors ------------------------------------------------------------------------------------


def test_rfactor_of_a_data_axis_is_an_error():
    A, B, k = row_reduce(4, 8)
    s = te.create_schedule(B.op)
    with pytest.raises(ScheduleError, match="'i' is not a reduction axis"):
        s.rfactor(B, s[B].op.axis[0])


def test_rfactor_of_a_non_reduction_is_an_error():
    A = te.placeholder((4,), name="A")
    C = te.compute((4,), lambda i: A[i] + 1.0, name="C")
    s = te.create_schedule(C.op)
    with pytest.raises(ScheduleError, match="rfactor applies to a reduction"):
        s.rfactor(C, s[C].op.axis[0])


def test_rfactor_of_a_split_axis_is_an_error():
    A, B, k = row_reduce(4, 8)
    s = te.create_schedule(B.op)
    s[B].split(k, factor=2)
    with pytest.raises(ScheduleError, match="already split or fused"):
        s.rfactor(B, k)


def test_factor_axis_out_of_range_is_an_error():
    A, B, k = row_reduce(4, 8)
    s = te.create_schedule(B.op)
    with pytest.raises(ScheduleError, match="factor_axis=3 is out of range"):
        s.rfactor(B, k, factor_axis=3)


# -- what the TVM pattern leans on: inferred scopes, set_store_predicate ------------------------


def test_a_stage_without_set_scope_takes_tvms_default_for_its_attach_point():
    A, B, k = row_reduce(8, 64)
    s = te.create_schedule(B.op)
    BF = tvm_pattern(s, B, k, 32)
    assert s[BF].scope == "local"  # under threadIdx.x
    s[BF].compute_at(s[B], s[B].op.axis[0])  # under blockIdx.x only
    assert s[BF].scope == "shared"
    s[BF].compute_root()
    assert s[BF].scope == "global"
    s[BF].set_scope("global")
    s[BF].compute_at(s[B], s[B].op.reduce_axis[0])
    assert s[BF].scope == "global"  # an explicit scope stays


def test_set_store_predicate_guards_the_stores(rng):
    A = te.placeholder((7, 5), name="A")
    C = te.compute((7, 5), lambda i, j: A[i, j] * 2.0, name="C")
    s = te.create_schedule(C.op)
    s[C].set_store_predicate(C.op.axis[0].var.equal(2) | (C.op.axis[1] > 2))
    a = random_array((7, 5), "float32", rng)
    c = np.full((7, 5), 9.0, "float32")
    ember.build(s, [A, C])(a, c)
    rows, cols = np.indices((7, 5))
    assert_close(c, np.where((rows == 2) | (cols > 2), 2 * a, 9.0), "float32")
