"""Schedule primitives mean what TVM (<= 0.19) means: which stage owns which axes after
``cache_write``, ``split(disable_predication=True)``, ``fuse`` of zero, one or swapped
axes, and ``reorder`` of partial or trivial orders. Checked against numpy on random
data, on the interpreter and LLVM, and through the CUDA emulator where a GPU schedule
is the point."""

from __future__ import annotations

import numpy as np
import pytest

import ember
from ember import te
from ember.errors import ScheduleError
from ember.tir.schedule.lower import schedule_to_primfunc
from tests.numerics import check


def _matmul(M: int, N: int, K: int):
    A = te.placeholder((M, K), name="A")
    B = te.placeholder((K, N), name="B")
    k = te.reduce_axis((0, K), name="k")
    C = te.compute((M, N), lambda i, j: te.sum(A[i, k] * B[k, j], axis=k), name="C")
    return A, B, C


def mm_ref(a, b):
    return a @ b


# -- cache_write ------------------------------------------------------------------------------
def test_cache_write_keeps_original_axes_on_the_output_stage():
    A, B, C = _matmul(8, 8, 8)
    i, j = C.op.axis
    (k,) = C.op.reduce_axis
    s = te.create_schedule(C.op)
    CL = s.cache_write(C, "local")
    assert s[C].op.axis == (i, j)  # the tensor's own axes keep naming s[C]'s loops
    assert s[C].leaf_iter_vars == [i, j]
    assert s[C].op.reduce_axis == ()  # the output stage is now a plain copy
    assert s[CL].op.reduce_axis == (k,)  # the reduction moved with the computation
    assert not {id(iv) for iv in s[CL].op.axis} & {id(i), id(j)}  # fresh cache axes
    assert [iv.name for iv in s[CL].op.axis] == ["i.c", "j.c"]
    # the cache's axes belong to the cache stage only
    with pytest.raises(ScheduleError, match="does not belong"):
        s[C].split(s[CL].op.axis[0], factor=2)
    with pytest.raises(ScheduleError, match="does not belong"):
        s[C].split(k, factor=2)


@pytest.mark.parametrize(("M", "N", "K"), [(37, 29, 13), (16, 16, 8), (5, 3, 1)])
def test_cache_write_split_of_tensor_axis_cpu(rng, M, N, K):
    """TVM style: split ``C.op.axis`` (not ``s[C].op.axis``) after ``cache_write``."""
    A, B, C = _matmul(M, N, K)
    s = te.create_schedule(C.op)
    CL = s.cache_write(C, "local")
    i, j = C.op.axis
    io, jo, ii, ji = s[C].tile(i, j, 8, 4)
    s[CL].compute_at(s[C], jo)
    (k,) = C.op.reduce_axis
    ko, ki = s[CL].split(k, factor=4)
    ic, jc = s[CL].op.axis
    s[CL].reorder(ko, ki, ic, jc)
    s[C].vectorize(ji)
    check(s, [A, B, C], mm_ref, rng)


def test_cache_write_of_elementwise(rng):
    A = te.placeholder((11, 7), name="A")
    B = te.compute((11, 7), lambda i, j: A[i, j] * 2.0 + 1.0, name="B")
    s = te.create_schedule(B.op)
    BL = s.cache_write(B, "local")
    i, j = B.op.axis
    io, ii = s[B].split(i, factor=4)
    s[BL].compute_at(s[B], io)
    check(s, [A, B], lambda a: a * 2 + 1, rng)


def test_cache_write_after_cache_read_with_the_output_as_reader(rng):
    """TVM's GEMM test order: ``cache_read(A, ..., [C])`` first, then ``cache_write(C)``:
    the cache stage computes from the shared copy, and C's axes still name s[C]."""
    A, B, C = _matmul(19, 21, 10)
    s = te.create_schedule(C.op)
    AA = s.cache_read(A, "local", [C])
    CL = s.cache_write(C, "local")
    assert any(t == AA for t in s[CL].op.input_tensors)
    assert not any(t == AA for t in s[C].op.input_tensors)
    i, j = C.op.axis
    io, ii = s[C].split(i, factor=4)
    s[CL].compute_at(s[C], io)
    s[AA].compute_at(s[CL], s[CL].op.reduce_axis[0])
    check(s, [A, B, C], mm_ref, rng)


def test_cache_write_after_split_is_refused():
    A, B, C = _matmul(8, 8, 8)
    s = te.create_schedule(C.op)
    s[C].split(C.op.axis[0], factor=2)
    with pytest.raises(ScheduleError, match="cache_write must come before"):
        s.cache_write(C, "local")


def _cuda_gemm_on_tensor_axes(M: int, N: int, K: int):
    """A TVM CUDA GEMM that splits ``C.op.axis`` and ``C.op.reduce_axis`` after cache_write."""
    A, B, C = _matmul(M, N, K)
    s = te.create_schedule(C.op)
    CL = s.cache_write(C, "local")
    AS = s.cache_read(A, "shared", [CL])
    BS = s.cache_read(B, "shared", [CL])
    y, x = C.op.axis
    by, yi = s[C].split(y, factor=16)
    bx, xi = s[C].split(x, factor=16)
    ty, yi = s[C].split(yi, nparts=8)
    tx, xi = s[C].split(xi, nparts=8)
    s[C].reorder(by, bx, ty, tx, yi, xi)
    s[C].bind(by, te.thread_axis("blockIdx.y"))
    s[C].bind(bx, te.thread_axis("blockIdx.x"))
    s[C].bind(ty, te.thread_axis("threadIdx.y"))
    s[C].bind(tx, te.thread_axis("threadIdx.x"))
    s[CL].compute_at(s[C], tx)
    (k,) = C.op.reduce_axis  # the original reduce axis now belongs to the cache stage
    ko, ki = s[CL].split(k, factor=4)
    s[CL].reorder(ko, ki, *s[CL].op.axis)
    for shared in (AS, BS):
        s[shared].compute_at(s[CL], ko)
        f = s[shared].fuse(*s[shared].op.axis)
        fo, fi = s[shared].split(f, factor=8)
        s[shared].bind(fi, te.thread_axis("threadIdx.x"))
        _, fo = s[shared].split(fo, factor=8)
        s[shared].bind(fo, te.thread_axis("threadIdx.y"))
    return s, [A, B, C]


@pytest.mark.parametrize(("M", "N", "K"), [(32, 32, 16), (45, 37, 11)])
def test_cache_write_cuda_gemm_emulated(rng, M, N, K):
    s, args = _cuda_gemm_on_tensor_axes(M, N, K)
    a = rng.uniform(-1, 1, (M, K)).astype("float32")
    b = rng.uniform(-1, 1, (K, N)).astype("float32")
    c = np.full((M, N), np.nan, "float32")
    ember.build(s, args, target="cuda -arch=sm_80").emulate(a, b, c)
    np.testing.assert_allclose(c, a @ b, rtol=1e-4, atol=1e-4)


@pytest.mark.nvrtc
def test_cache_write_cuda_gemm_compiles():
    s, args = _cuda_gemm_on_tensor_axes(64, 64, 32)
    src = ember.build(s, args, target="cuda -arch=sm_80").get_source()
    assert "__shared__" in src
    assert "i.c" not in src  # dotted TE names become legal C identifiers


# -- split(disable_predication=True) --------------------------------------------------------------
def test_split_disable_predication_drops_the_guard(rng):
    A = te.placeholder((10,), name="A")
    B = te.compute((10,), lambda i: A[i] + 1.0, name="B")
    s = te.create_schedule(B.op)
    s[B].split(B.op.axis[0], factor=3)
    assert "likely" in str(ember.lower(s, [A, B], disabled_passes=("loop_partition",)))
    s = te.create_schedule(B.op)
    s[B].split(B.op.axis[0], factor=3, disable_predication=True)
    text = str(ember.lower(s, [A, B], disabled_passes=("loop_partition",)))
    assert "likely" not in text and "if " not in text


@pytest.mark.parametrize("factor", [4, 5, 7])
def test_split_disable_predication_reads_the_padded_tail(rng, factor):
    """The reduction over k < K is split without a guard, so its tail iterations read
    columns K.. of A and rows K.. of B, which the buffers hold (padded to Kp). With
    zero padding the user's promise holds and the result is the K-term product; with
    random padding the tail's terms show up, which proves no guard was emitted."""
    M, N, K = 6, 5, 13
    Kp = -(-K // factor) * factor
    A = te.placeholder((M, Kp), name="A")
    B = te.placeholder((Kp, N), name="B")
    k = te.reduce_axis((0, K), name="k")
    C = te.compute((M, N), lambda i, j: te.sum(A[i, k] * B[k, j], axis=k), name="C")
    s = te.create_schedule(C.op)
    ko, ki = s[C].split(k, factor=factor, disable_predication=True)
    s[C].unroll(ki)
    mod = ember.build(s, [A, B, C], target="llvm")
    a = rng.uniform(-1, 1, (M, Kp)).astype("float32")
    b = rng.uniform(-1, 1, (Kp, N)).astype("float32")
    c = np.full((M, N), np.nan, "float32")
    mod(a, b, c)
    np.testing.assert_allclose(c, a @ b, rtol=1e-5, atol=1e-5)  # all Kp terms
    a[:, K:] = 0.0
    mod(a, b, c)
    np.testing.assert_allclose(c, a[:, :K] @ b[:K], rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("factor", [4, 5, 7])
def test_split_disable_predication_in_the_emulator(rng, factor):
    """The same promise on CUDA: rows and columns on threads, the reduction split without
    a guard; the emulator's bounds check passes because the buffers are padded, and the
    tail's terms show up in the result."""
    M, N, K = 6, 5, 13
    Kp = -(-K // factor) * factor
    A = te.placeholder((M, Kp), name="A")
    B = te.placeholder((Kp, N), name="B")
    k = te.reduce_axis((0, K), name="k")
    C = te.compute((M, N), lambda i, j: te.sum(A[i, k] * B[k, j], axis=k), name="C")
    s = te.create_schedule(C.op)
    s[C].split(k, factor=factor, disable_predication=True)
    s[C].bind(C.op.axis[0], "blockIdx.x")
    s[C].bind(C.op.axis[1], "threadIdx.x")
    mod = ember.build(s, [A, B, C], target="cuda -arch=sm_80")
    assert "if (" not in mod.get_source()
    a = rng.uniform(-1, 1, (M, Kp)).astype("float32")
    b = rng.uniform(-1, 1, (Kp, N)).astype("float32")
    c = np.full((M, N), np.nan, "float32")
    mod.emulate(a, b, c)
    np.testing.assert_allclose(c, a @ b, rtol=1e-5, atol=1e-5)  # all Kp terms


@pytest.mark.parametrize("factor", [3, 8])
def test_split_disable_predication_exact_results_when_divisible(rng, factor):
    A, B, C = _matmul(24, 16, 9)
    s = te.create_schedule(C.op)
    i, j = C.op.axis
    io, ii = s[C].split(i, factor=factor, disable_predication=True)
    jo, ji = s[C].split(j, nparts=4, disable_predication=True)
    check(s, [A, B, C], mm_ref, rng)


# -- fuse ----------------------------------------------------------------------------------------
def test_fuse_of_no_axes_adds_an_outer_unit_loop(rng):
    A, B, C = _matmul(7, 5, 3)
    s = te.create_schedule(C.op)
    unit = s[C].fuse()
    assert s[C].leaf_iter_vars[0] is unit
    assert unit.dom is not None and int(unit.dom.extent.value) == 1
    i, j = C.op.axis
    io, ii = s[C].split(i, factor=2)
    check(s, [A, B, C], mm_ref, rng)
    raw = str(schedule_to_primfunc(s, [A, B, C], "main"))  # before passes drop unit loops
    assert "for singleton in range(1)" in raw


def test_fuse_of_no_axes_bound_to_a_block_emulated(rng):
    A = te.placeholder((9, 6), name="A")
    B = te.compute((9, 6), lambda i, j: A[i, j] * A[i, j] + 2.0, name="B")
    s = te.create_schedule(B.op)
    i, j = B.op.axis
    s[B].bind(s[B].fuse(), "blockIdx.x")
    s[B].bind(s[B].fuse(i, j), "threadIdx.x")
    a = rng.uniform(-1, 1, (9, 6)).astype("float32")
    b = np.full((9, 6), np.nan, "float32")
    ember.build(s, [A, B], target="cuda").emulate(a, b)
    np.testing.assert_allclose(b, a * a + 2, rtol=1e-6)


def test_fuse_of_one_axis_returns_it():
    A, B, C = _matmul(7, 5, 3)
    s = te.create_schedule(C.op)
    i, _ = C.op.axis
    assert s[C].fuse(i) is i
    assert s[C].fuse([i]) is i
    assert s[C].leaf_iter_vars[0] is i


def test_fuse_inner_first_fuses_in_loop_order(rng):
    A, B, C = _matmul(6, 7, 4)
    s = te.create_schedule(C.op)
    i, j = C.op.axis
    f = s[C].fuse(j, i)  # TVM swaps neighbours given inner first
    assert s[C].leaf_iter_vars[0] is f
    fo, fi = s[C].split(f, factor=5)
    check(s, [A, B, C], mm_ref, rng)


def test_fuse_of_non_neighbours_is_refused():
    A = te.placeholder((3, 4, 5), name="A")
    B = te.compute((3, 4, 5), lambda i, j, k: A[i, j, k] + 1.0, name="B")
    s = te.create_schedule(B.op)
    i, _, k = B.op.axis
    with pytest.raises(ScheduleError, match="not adjacent"):
        s[B].fuse(i, k)


# -- reorder -------------------------------------------------------------------------------------
def test_reorder_trivial_orders_change_nothing():
    A, B, C = _matmul(4, 4, 4)
    s = te.create_schedule(C.op)
    before = list(s[C].leaf_iter_vars)
    s[C].reorder()
    s[C].reorder(C.op.axis[1])
    s[C].reorder(*before)
    assert s[C].leaf_iter_vars == before


def test_reorder_partial_keeps_other_loops_in_place(rng):
    A = te.placeholder((3, 4, 5, 2), name="A")
    B = te.compute((3, 4, 5, 2), lambda a, b, c, d: A[a, b, c, d] * 2.0, name="B")
    s = te.create_schedule(B.op)
    a, b, c, d = B.op.axis
    s[B].reorder(d, a)  # a and d swap; b and c stay where they are
    assert s[B].leaf_iter_vars == [d, b, c, a]
    s[B].reorder([c, d])
    assert s[B].leaf_iter_vars == [c, b, d, a]
    check(s, [A, B], lambda x: x * 2, rng)


def test_reorder_duplicate_and_stale_axes_are_refused():
    A, B, C = _matmul(4, 4, 4)
    s = te.create_schedule(C.op)
    i, j = C.op.axis
    with pytest.raises(ScheduleError, match="twice"):
        s[C].reorder(i, j, i)
    s[C].split(i, factor=2)
    with pytest.raises(ScheduleError, match="already split"):
        s[C].reorder(j, i)
