"""Tuple reducers (argmax/argmin as in TVM's tutorial): several outputs from one reduction.

On random, tie-heavy data against a numpy fold that applies TVM's fcombine tie rule in
the order the schedule reduces (see :mod:`tests.te.reducers`): on the interpreter, LLVM,
and the CUDA emulator with race checks on, serially and with the reduction axis bound to
``threadIdx.x`` (cross-thread: all values combined together).
"""

from __future__ import annotations

import numpy as np
import pytest

import ember
from ember import te
from ember.errors import ArgumentError
from ember.tir import expr as E
from tests.numerics import assert_close
from tests.te.reducers import (
    argmax,
    argmin,
    fold_reference,
    lane_order,
    lanes_reference,
    serial_order,
    tie_heavy,
)

CUDA = "cuda -arch=sm_80"
REDUCERS = {"argmax": argmax, "argmin": argmin}


def argreduce(m: int, n: int, kind: str = "argmax", vdtype: str = "float32", where: bool = False):
    idx = te.placeholder((m, n), name="idx", dtype="int32")
    val = te.placeholder((m, n), name="val", dtype=vdtype)
    k = te.reduce_axis((0, n), name="k")
    red = REDUCERS[kind]
    if where:
        T0, T1 = te.compute(
            (m,), lambda i: red((idx[i, k], val[i, k]), axis=k, where=k % 3 != 1), name="T"
        )
    else:
        T0, T1 = te.compute((m,), lambda i: red((idx[i, k], val[i, k]), axis=k), name="T")
    return idx, val, T0, T1


def run(executor, s, args, ins):
    m = int(args[2].shape[0].value)
    outs = [
        np.full(m, 77, "int32"),
        np.full(m, 77 if args[3].dtype == "int32" else np.nan, args[3].dtype),
    ]
    if executor == "interp":
        from ember.tir.interp import run as interp_run

        interp_run(ember.lower(s, args), *ins, *outs)
    elif executor == "llvm":
        ember.build(s, args, target="llvm")(*ins, *outs)
    else:
        ember.build(s, args, target=CUDA).emulate(*ins, *outs)  # race checks on
    return outs


def inputs(m, n, rng, vdtype="float32"):
    idx = rng.permutation(m * n).reshape(m, n).astype("int32") + 100  # distinct ids
    return idx, tie_heavy((m, n), rng, vdtype)


@pytest.mark.parametrize("executor", ["interp", "llvm"])
@pytest.mark.parametrize("kind", ["argmax", "argmin"])
@pytest.mark.parametrize("shape", [(7, 33), (1, 1), (4, 5)])
def test_serial_tuple_reduction(rng, executor, kind, shape):
    args = argreduce(*shape, kind)
    s = te.create_schedule(args[2].op)
    idx, val = inputs(*shape, rng)
    got = run(executor, s, list(args), [idx, val])
    want = fold_reference(idx, val, serial_order(shape[1]), kind)
    np.testing.assert_array_equal(got[0], want[0])
    assert_close(got[1], want[1], "float32")


@pytest.mark.parametrize("executor", ["interp", "llvm"])
def test_split_and_reordered_reduction_changes_the_tie_order(rng, executor):
    """ki outside ko: the fold visits each k % 8 lane in turn, as the reference does."""
    args = argreduce(6, 29)
    s = te.create_schedule(args[2].op)
    ko, ki = s[args[2]].split(s[args[2]].op.reduce_axis[0], factor=8)
    s[args[2]].reorder(ki, ko)
    idx, val = inputs(6, 29, rng)
    got = run(executor, s, list(args), [idx, val])
    want = fold_reference(idx, val, lane_order(29, 8))
    np.testing.assert_array_equal(got[0], want[0])
    assert not np.array_equal(want[0], fold_reference(idx, val, serial_order(29))[0])


@pytest.mark.parametrize("executor", ["interp", "llvm"])
def test_tuple_reduction_with_where_and_int_values(rng, executor):
    args = argreduce(5, 23, "argmax", vdtype="int32", where=True)
    s = te.create_schedule(args[2].op)
    idx, val = inputs(5, 23, rng, "int32")
    got = run(executor, s, list(args), [idx, val])
    keep = [k for k in range(23) if k % 3 != 1]
    want = fold_reference(idx, val, keep)
    np.testing.assert_array_equal(got[0], want[0])
    np.testing.assert_array_equal(got[1], want[1])


def test_tuple_reduction_with_init(rng):
    idx = te.placeholder((4, 9), name="idx", dtype="int32")
    val = te.placeholder((4, 9), name="val")
    k = te.reduce_axis((0, 9), name="k")
    T0, T1 = te.compute(
        (4,), lambda i: argmax((idx[i, k], val[i, k]), axis=k, init=(-7, 0.5)), name="T"
    )
    s = te.create_schedule(T0.op)
    i_, v_ = inputs(4, 9, rng)
    got = run("llvm", s, [idx, val, T0, T1], [i_, v_])
    want_i, want_v = fold_reference(i_, v_, serial_order(9))
    below = want_v <= 0.5  # the init pair wins unless a value beats it (ties keep init)
    np.testing.assert_array_equal(got[0], np.where(below, -7, want_i))
    assert_close(got[1], np.where(below, 0.5, want_v), "float32")


CROSS = [
    # M, N, split factor (None: the whole axis on threads), rows on threadIdx.y
    (5, 45, 16, 1),  # a partial warp: the shared-memory tree
    (3, 77, 32, 1),  # one warp: shuffles
    (4, 150, 64, 1),  # two warps
    (7, 33, 8, 4),  # sub-warp groups, rows on threadIdx.y
    (4, 13, None, 1),  # the whole axis bound
]


@pytest.mark.parametrize("case", CROSS, ids=["-".join(map(str, c)) for c in CROSS])
@pytest.mark.parametrize("kind", ["argmax", "argmin"])
def test_cross_thread_tuple_reduction(rng, case, kind):
    M, N, factor, ty = case
    args = argreduce(M, N, kind)
    T0 = args[2]
    s = te.create_schedule(T0.op)
    (i,) = s[T0].op.axis
    k = s[T0].op.reduce_axis[0]
    ki = k if factor is None else s[T0].split(k, factor=factor)[1]
    if ty == 1:
        s[T0].bind(i, te.thread_axis("blockIdx.x"))
    else:
        io, ii = s[T0].split(i, factor=ty)
        s[T0].bind(io, te.thread_axis("blockIdx.x"))
        s[T0].bind(ii, te.thread_axis("threadIdx.y"))
    s[T0].bind(ki, te.thread_axis("threadIdx.x"))
    idx, val = inputs(M, N, rng)
    got = run("cuda", s, list(args), [idx, val])
    want = lanes_reference(idx, val, factor or N, kind)
    np.testing.assert_array_equal(got[0], want[0])
    assert_close(got[1], want[1], "float32")


@pytest.mark.nvrtc
def test_cross_thread_tuple_reduction_compiles_with_nvrtc():
    pytest.importorskip("cuda.bindings.nvrtc")
    from ember.codegen_cuda.nvrtc import compile_cuda

    args = argreduce(4, 100)
    s = te.create_schedule(args[2].op)
    ko, ki = s[args[2]].split(s[args[2]].op.reduce_axis[0], factor=64)
    s[args[2]].bind(s[args[2]].op.axis[0], te.thread_axis("blockIdx.x"))
    s[args[2]].bind(ki, te.thread_axis("threadIdx.x"))
    src = ember.build(s, list(args), target=CUDA).get_source()
    for arch in ("sm_80", "sm_90"):
        assert "shfl.sync" in compile_cuda(src, arch).ptx


def test_fcombine_and_fidentity_must_give_one_value_per_element():
    bad = te.comm_reducer(lambda x, y: x[0] + y[0], lambda t0, t1: (0, 0), name="bad")
    A = te.placeholder((3, 4), name="A")
    k = te.reduce_axis((0, 4), name="k")
    with pytest.raises(ArgumentError, match="bad: fcombine gave 1 value"):
        te.compute((3,), lambda i: bad((A[i, k], A[i, k]), axis=k))
    worse = te.comm_reducer(lambda x, y: (x[0], y[1]), lambda t0, t1: E.const(0, t0), name="w")
    with pytest.raises(ArgumentError, match="w: fidentity gave 1 value"):
        te.compute((3,), lambda i: worse((A[i, k], A[i, k]), axis=k))


def test_a_one_value_tuple_reduces_like_a_plain_reducer(rng):
    add = te.comm_reducer(lambda x, y: (x[0] + y[0],), lambda t: (E.const(0, t),), name="add1")
    A = te.placeholder((6, 11), name="A")
    k = te.reduce_axis((0, 11), name="k")
    B = te.compute((6,), lambda i: add((A[i, k],), axis=k), name="B")
    assert B.op.num_outputs == 1
    s = te.create_schedule(B.op)
    a = np.random.default_rng(3).uniform(-1, 1, (6, 11)).astype("float32")
    b = np.full(6, np.nan, "float32")
    ember.build(s, [A, B])(a, b)
    assert_close(b, a.sum(axis=1), "float32")
