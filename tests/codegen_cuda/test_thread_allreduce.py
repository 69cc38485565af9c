"""Cross-thread reductions: a reduction axis bound to threadIdx, against numpy through the emulator.

Every schedule is built for CUDA (NVRTC compiles it where installed) and run on
the SIMT emulator with race checks on, on random data and odd shapes: a split
reduction axis whose inner part is bound, or the whole axis; rows on
``blockIdx.x`` or ``threadIdx.y``; warp-shuffle groups, several warps, partial
warps (the shared-memory tree); sum, max, min and custom ``comm_reducer``s.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

import ember
from ember import te
from ember.codegen_cuda.module import CUDAModule
from ember.errors import EmberError, LoweringError, RaceError, ScheduleError
from ember.tir import expr as E
from ember.tir import stmt as S
from ember.tir.functor import Mutator, post_order_visit
from tests.codegen_cuda.test_cuda_build import _DropBarrier
from tests.nightly import examples
from tests.numerics import assert_close, random_array

REDUCERS: dict[str, tuple[Any, Any]] = {
    "sum": (te.sum, lambda a: a.sum(axis=1)),
    "max": (te.max, lambda a: a.max(axis=1)),
    "min": (te.min, lambda a: a.min(axis=1)),
    # a custom reducer: the sum of squares' bigger sibling, max |x|, through comm_reducer
    "absmax": (
        te.comm_reducer(lambda x, y: E.max_(x, y), lambda t: E.const(0.0, t), name="absmax"),
        lambda a: np.abs(a).max(axis=1),
    ),
    "prod": (
        te.comm_reducer(lambda x, y: x * y, lambda t: E.const(1, t), name="prod"),
        lambda a: a.prod(axis=1),
    ),
}


def reduction(
    M: int, K: int, kind: str, rows: str, factor: int | None, ty: int = 1, dtype: str = "float32"
) -> tuple[Any, list[Any]]:
    """``B[i] = reduce_k f(A[i, k])``; ``factor=None`` binds the whole reduction axis."""
    reducer = REDUCERS[kind][0]
    A = te.placeholder((M, K), name="A", dtype=dtype)
    k = te.reduce_axis((0, K), name="k")
    if kind == "absmax":
        B = te.compute((M,), lambda i: reducer(te.abs(A[i, k]), axis=k), name="B")
    else:
        B = te.compute((M,), lambda i: reducer(A[i, k], axis=k), name="B")
    s = te.create_schedule(B.op)
    (i,) = s[B].op.axis
    ki = k if factor is None else s[B].split(k, factor=factor)[1]
    if rows == "blockIdx.x":
        s[B].bind(i, "blockIdx.x")
    else:
        io, ii = s[B].split(i, factor=ty)
        s[B].bind(io, "blockIdx.x")
        s[B].bind(ii, "threadIdx.y")
    s[B].bind(ki, "threadIdx.x")
    return s, [A, B]


def emulate_against_numpy(s: Any, args: list[Any], kind: str, rng: np.random.Generator) -> Any:
    A, B = args
    M, K = (int(x.value) for x in A.shape)
    mod = ember.build(s, args, target="cuda -arch=sm_80")
    low, high = (0.5, 1.5) if kind == "prod" else (-1.0, 1.0)  # keep products finite
    a = random_array((M, K), A.dtype, rng, low, high)
    b = np.full((M,), np.nan if B.dtype != "int32" else 77, dtype=B.dtype)
    mod.emulate(a, b)  # race checks on
    want = REDUCERS[kind][1](a.astype(np.float64) if A.dtype != "int32" else a)
    assert_close(b, want, B.dtype, what=f"{kind} of {M}x{K}")
    return mod


CASES = [
    # M, K, kind, rows, factor, threadIdx.y
    (5, 37, "sum", "blockIdx.x", 32, 1),  # one warp, K not a multiple
    (5, 100, "max", "blockIdx.x", 64, 1),  # two warps through shared memory
    (3, 300, "min", "blockIdx.x", 96, 1),  # three warps
    (3, 1000, "sum", "blockIdx.x", 1024, 1),  # 32 warps, one pass
    (7, 33, "sum", "threadIdx.y", 8, 4),  # sub-warp groups of 8, rows on threadIdx.y
    (7, 50, "prod", "threadIdx.y", 16, 2),
    (7, 50, "sum", "threadIdx.y", 24, 3),  # groups not dividing a warp: shared tree
    (5, 37, "absmax", "blockIdx.x", 16, 1),  # a partial warp: shared tree
    (4, 45, "sum", "blockIdx.x", None, 1),  # the whole axis bound: 45 threads
    (4, 13, "max", "threadIdx.y", None, 3),
    (5, 7, "sum", "blockIdx.x", 1, 1),  # one thread: nothing to combine
    (2, 200, "sum", "threadIdx.y", 64, 2),  # several warps per row, two rows per block
]


@pytest.mark.parametrize("case", CASES, ids=["-".join(map(str, c)) for c in CASES])
def test_cross_thread_reduction_matches_numpy(rng, case):
    M, K, kind, rows, factor, ty = case
    s, args = reduction(M, K, kind, rows, factor, ty)
    emulate_against_numpy(s, args, kind, rng)


def test_integer_sum(rng):
    s, args = reduction(6, 77, "sum", "blockIdx.x", 64, dtype="int32")
    emulate_against_numpy(s, args, "sum", rng)


def test_the_sum_of_128_ones_is_128():
    """The issue's example: split by 64, the inner part bound to threadIdx.x."""
    s, (A, B) = reduction(4, 128, "sum", "blockIdx.x", 64)
    mod = ember.build(s, [A, B], target="cuda")
    b = np.zeros(4, "float32")
    mod.emulate(np.ones((4, 128), "float32"), b)
    assert (b == 128.0).all()


def test_warp_groups_use_shuffles_and_partial_warps_shared_memory():
    src = ember.build(*reduction(5, 100, "sum", "blockIdx.x", 32), target="cuda").get_source()
    assert "__shfl_xor_sync" in src and "__shared__" not in src and "__syncthreads" not in src
    src = ember.build(*reduction(5, 100, "sum", "blockIdx.x", 64), target="cuda").get_source()
    assert "__shfl_xor_sync" in src and src.count("__syncthreads") == 1
    src = ember.build(*reduction(5, 100, "sum", "blockIdx.x", 20), target="cuda").get_source()
    assert "__shfl" not in src and "__shared__" in src
    assert "if (k_inner == 0)" in src  # one thread of the group writes


def test_two_reduction_tags(rng):
    """The outer part on threadIdx.y, the inner on threadIdx.x: one group of 3 x 32."""
    A = te.placeholder((6, 77), name="A")
    k = te.reduce_axis((0, 77), name="k")
    B = te.compute((6,), lambda i: te.sum(A[i, k] * 2.0, axis=k), name="B")
    s = te.create_schedule(B.op)
    ko, ki = s[B].split(k, factor=32)
    s[B].bind(s[B].op.axis[0], "blockIdx.x")
    s[B].bind(ko, "threadIdx.y")
    s[B].bind(ki, "threadIdx.x")
    mod = ember.build(s, [A, B], target="cuda")
    a = random_array((6, 77), "float32", rng)
    b = np.full(6, np.nan, "float32")
    mod.emulate(a, b)
    assert_close(b, 2 * a.sum(axis=1), "float32")


def test_cache_write_local_and_cache_read_shared(rng):
    """The reduction in a local cache stage, reading a shared copy of A staged at k_outer."""
    A = te.placeholder((6, 77), name="A")
    k = te.reduce_axis((0, 77), name="k")
    B = te.compute((6,), lambda i: te.max(A[i, k], axis=k), name="B")
    s = te.create_schedule(B.op)
    BL = s.cache_write(B, "local")
    AS = s.cache_read(A, "shared", [BL])
    (i,) = s[B].op.axis
    s[B].bind(i, "blockIdx.x")
    s[BL].compute_at(s[B], i)
    ko, ki = s[BL].split(s[BL].op.reduce_axis[0], factor=32)
    s[BL].bind(ki, "threadIdx.x")
    s[AS].compute_at(s[BL], ko)
    s[AS].bind(s[AS].op.axis[1], te.thread_axis("threadIdx.x"))
    mod = ember.build(s, [A, B], target="cuda")
    a = random_array((6, 77), "float32", rng)
    b = np.full(6, np.nan, "float32")
    mod.emulate(a, b)
    assert_close(b, a.max(axis=1), "float32")


@pytest.mark.nvrtc
@pytest.mark.parametrize("arch", ["sm_80", "sm_90"])
@pytest.mark.parametrize("factor", [8, 20, 64], ids=["subwarp", "tree", "warps"])
def test_nvrtc_compiles(arch, factor):
    pytest.importorskip("cuda.bindings.nvrtc")
    from ember.codegen_cuda.nvrtc import compile_cuda

    mod = ember.build(*reduction(7, 50, "max", "threadIdx.y", factor, 4), target="cuda")
    compiled = compile_cuda(mod.get_source(), arch)
    assert f".target {arch}" in compiled.ptx
    assert ("shfl.sync" in compiled.ptx) == (factor != 20)


# -- what Ember refuses ------------------------------------------------------------------


def test_the_cpu_target_refuses_thread_bound_reductions():
    with pytest.raises(EmberError, match="the CPU target .llvm. cannot run"):
        ember.build(*reduction(4, 40, "sum", "blockIdx.x", 8), target="llvm")


def test_the_interpreter_refuses_a_cross_thread_reduction():
    from ember.tir.interp import run

    s, args = reduction(4, 40, "sum", "blockIdx.x", 8)
    with pytest.raises(LoweringError, match="cross-thread reduction"):
        run(ember.lower(s, args), np.ones((4, 40), "float32"), np.zeros(4, "float32"))


def test_a_vectorized_axis_around_a_cross_thread_reduction_is_refused():
    A = te.placeholder((8, 40), name="A")
    k = te.reduce_axis((0, 40), name="k")
    B = te.compute((8,), lambda i: te.sum(A[i, k], axis=k), name="B")
    s = te.create_schedule(B.op)
    io, ii = s[B].split(s[B].op.axis[0], factor=4)
    s[B].bind(io, "blockIdx.x")
    s[B].vectorize(ii)
    s[B].bind(k, "threadIdx.x")
    with pytest.raises(ScheduleError, match="vectorized.*every\\s+thread"):
        ember.lower(s, [A, B])


@pytest.mark.parametrize("tag", ["blockIdx.y", "vthread"])
def test_a_reduction_axis_on_blocks_or_virtual_threads_is_refused(tag):
    """Blocks (and virtual threads) cannot meet to combine partials: this once lowered to
    a kernel where block 0 stored its own partial sum, silently wrong."""
    A = te.placeholder((3, 10), name="A")
    k = te.reduce_axis((0, 10), name="k")
    B = te.compute((3,), lambda i: te.sum(A[i, k], axis=k), name="B")
    s = te.create_schedule(B.op)
    s[B].bind(s[B].op.axis[0], "blockIdx.x")
    s[B].bind(s[B].split(k, factor=4)[1], tag)
    with pytest.raises(ScheduleError, match=f"'k_inner' is bound to {tag}.*threadIdx"):
        ember.build(s, [A, B], target="cuda")


def test_an_unbound_thread_tag_around_the_reduction_is_refused():
    """threadIdx.y varies in the block (a staging copy binds it) but not around the
    reduction: its threads would share the reduction's slots."""
    A = te.placeholder((6, 64), name="A")
    k = te.reduce_axis((0, 64), name="k")
    B = te.compute((6,), lambda i: te.sum(A[i, k], axis=k), name="B")
    s = te.create_schedule(B.op)
    AS = s.cache_read(A, "shared", [B])
    (i,) = s[B].op.axis
    s[B].bind(i, "blockIdx.x")
    ko, ki = s[B].split(k, factor=32)
    s[B].bind(ki, "threadIdx.x")
    s[AS].compute_at(s[B], i)
    f = s[AS].fuse(*s[AS].op.axis)
    fo, fi = s[AS].split(f, factor=32)
    s[AS].bind(fo, "threadIdx.y")
    s[AS].bind(fi, "threadIdx.x")
    with pytest.raises(ScheduleError, match="threadIdx.y is not bound around it"):
        ember.build(s, [A, B], target="cuda")


# -- property: random schedules ------------------------------------------------------------


@st.composite
def schedules(draw: Any) -> tuple[Any, ...]:
    M = draw(st.integers(1, 9))
    K = draw(st.integers(1, 260))
    kind = draw(st.sampled_from(sorted(REDUCERS)))
    rows = draw(st.sampled_from(["blockIdx.x", "threadIdx.y"]))
    factor = draw(st.one_of(st.none(), st.integers(1, 40), st.sampled_from([32, 64, 96, 128, 256])))
    ty = draw(st.integers(1, 4)) if rows == "threadIdx.y" else 1
    return M, K, kind, rows, factor, ty


@settings(max_examples=examples(30), deadline=None)
@given(case=schedules(), seed=st.integers(0, 2**16))
def test_random_cross_thread_reductions_match_numpy(case, seed):
    M, K, kind, rows, factor, ty = case
    assume((K if factor is None else factor) * ty <= 1024)  # threads of a block
    s, args = reduction(M, K, kind, rows, factor, ty)
    emulate_against_numpy(s, args, kind, np.random.default_rng(seed))


# -- mutation: every barrier and shuffle of a lowered all-reduce is needed -----------------


class _DropShuffle(Mutator):
    """Replaces the ``index``-th warp shuffle (in visit order) by the lane's own value."""

    def __init__(self, index: int) -> None:
        self.index, self.seen = index, 0

    def visit_Call(self, e: E.Call) -> E.PrimExpr:
        if e.op in E.WARP_SHUFFLES:
            self.seen += 1
            if self.seen - 1 == self.index:
                return e.args[0]
        return self.generic_visit(e)


def _count(kernel: S.PrimFunc, pred: Any) -> int:
    found: list[Any] = []
    post_order_visit(kernel.body, lambda n: found.append(n) if pred(n) else None)
    return len(found)


MUTATION_CASES = [
    (5, 100, "blockIdx.x", 64, 1),  # butterfly, shared partials, second butterfly
    (3, 300, "blockIdx.x", 96, 1),
    (7, 33, "threadIdx.y", 8, 4),  # sub-warp butterfly
    (7, 50, "threadIdx.y", 24, 3),  # shared tree
    (5, 37, "blockIdx.x", 16, 1),
    (2, 200, "threadIdx.y", 64, 2),  # two warps per row, two rows: shared slots per row
    (3, 1000, "blockIdx.x", 1024, 1),  # 32 warps
    (4, 45, "blockIdx.x", None, 1),  # the whole axis: a partial second warp
]


@pytest.mark.parametrize(
    "case", MUTATION_CASES, ids=["-".join(map(str, c)) for c in MUTATION_CASES]
)
def test_dropping_any_barrier_or_shuffle_is_caught(rng, case):
    M, K, rows, factor, ty = case
    mod = ember.build(*reduction(M, K, "sum", rows, factor, ty), target="cuda")
    (kernel,) = mod.program.kernels
    a = random_array((M, K), "float32", rng)
    want = a.astype(np.float64).sum(axis=1)
    b = np.full(M, np.nan, "float32")
    mod.emulate(a, b)
    assert_close(b, want, "float32")

    barriers = _count(kernel, lambda n: isinstance(n, S.Barrier))
    shuffles = _count(kernel, lambda n: isinstance(n, E.Call) and n.op in E.WARP_SHUFFLES)
    assert barriers + shuffles > 0
    mutants = [(f"barrier {i}", _DropBarrier(i).visit_func(kernel)) for i in range(barriers)]
    mutants += [(f"shuffle {i}", _DropShuffle(i).visit_func(kernel)) for i in range(shuffles)]
    unnoticed = []
    for what, broken in mutants:
        assert broken is not kernel
        program = dataclasses.replace(mod.program, kernels=(broken,))
        b = np.full(M, np.nan, "float32")
        try:
            CUDAModule(program, mod.arch).emulate(a, b)
        except RaceError:
            continue
        if np.allclose(b, want, rtol=1e-4, atol=1e-4):
            unnoticed.append(what)
    assert not unnoticed, f"dropping these went unnoticed: {unnoticed}"


# -- the real device: the emulator's verdict checked against the hardware ------------------


@pytest.mark.gpu
@settings(max_examples=examples(40), deadline=None)
@given(case=schedules(), seed=st.integers(0, 2**16))
def test_random_cross_thread_reductions_on_device(case, seed):
    """The same random schedules launched on the GPU (warp shuffles and shared-memory trees
    as the hardware runs them), against numpy."""
    M, K, kind, rows, factor, ty = case
    assume((K if factor is None else factor) * ty <= 1024)
    s, (A, B) = reduction(M, K, kind, rows, factor, ty)
    mod = ember.build(s, [A, B], target="cuda")
    rng = np.random.default_rng(seed)
    low, high = (0.5, 1.5) if kind == "prod" else (-1.0, 1.0)
    a = random_array((M, K), A.dtype, rng, low, high)
    b = np.full((M,), np.nan, dtype=B.dtype)
    mod(a, b)
    want = REDUCERS[kind][1](a.astype(np.float64))
    assert_close(b, want, B.dtype, what=f"{kind} of {M}x{K} on the device")


@pytest.mark.parametrize(("K", "factor", "ty"), [(100, 64, 1), (77, 24, 2), (50, 8, 3)])
def test_dropping_any_barrier_or_shuffle_of_a_tuple_allreduce_is_caught(rng, K, factor, ty):
    """The same for argmax, whose all-reduce moves (index, value) pairs: each shuffle of
    either value, and each barrier, is needed."""
    from tests.te.reducers import argmax

    M = 5
    idx = te.placeholder((M, K), name="idx", dtype="int32")
    val = te.placeholder((M, K), name="val")
    k = te.reduce_axis((0, K), name="k")
    T0, T1 = te.compute((M,), lambda i: argmax((idx[i, k], val[i, k]), axis=k), name="T")
    s = te.create_schedule(T0.op)
    io, ii = s[T0].split(s[T0].op.axis[0], factor=ty)
    s[T0].bind(io, "blockIdx.x")
    s[T0].bind(ii, "threadIdx.y")
    s[T0].bind(s[T0].split(k, factor=factor)[1], "threadIdx.x")
    mod = ember.build(s, [idx, val, T0, T1], target="cuda -arch=sm_80")
    (kernel,) = mod.program.kernels
    ix = np.tile(np.arange(K, dtype="int32"), (M, 1))
    v = rng.permutation(M * K).reshape(M, K).astype("float32")  # no ties
    want = (v.argmax(axis=1), v.max(axis=1))

    def outputs(module: Any) -> tuple[np.ndarray, np.ndarray]:
        t0, t1 = np.full(M, 77, "int32"), np.full(M, np.nan, "float32")
        module.emulate(ix, v, t0, t1)
        return t0, t1

    got = outputs(mod)
    np.testing.assert_array_equal(got[0], want[0])
    np.testing.assert_array_equal(got[1], want[1])
    barriers = _count(kernel, lambda n: isinstance(n, S.Barrier))
    shuffles = _count(kernel, lambda n: isinstance(n, E.Call) and n.op in E.WARP_SHUFFLES)
    assert barriers + shuffles > 0
    mutants = [(f"barrier {i}", _DropBarrier(i).visit_func(kernel)) for i in range(barriers)]
    mutants += [(f"shuffle {i}", _DropShuffle(i).visit_func(kernel)) for i in range(shuffles)]
    unnoticed = []
    for what, broken in mutants:
        program = dataclasses.replace(mod.program, kernels=(broken,))
        try:
            got = outputs(CUDAModule(program, mod.arch))
        except RaceError:
            continue
        if (got[0] == want[0]).all() and (got[1] == want[1]).all():
            unnoticed.append(what)
    assert not unnoticed, f"dropping these went unnoticed: {unnoticed}"
