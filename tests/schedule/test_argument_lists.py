"""Argument lists as TVM takes them, checked against numpy on random data (llvm and emulator).

An intermediate left out of the list is allocated inside the function; an input
the schedule never reads is still a parameter; integral floats (``1024 / 16``)
are integers in shapes and split factors, other floats are errors; and a stage
whose tensor is an argument may be computed at another stage's loop, writing
its parameter buffer there.
"""

from __future__ import annotations

import numpy as np
import pytest

import ember
from ember import te
from ember.errors import ArgumentError, ScheduleError
from tests.numerics import assert_close, random_array

CUDA = "cuda -arch=sm_80"


def _chain(rows: int = 1024 / 16, cols: int = 13):
    A = te.placeholder((rows, cols), name="A")
    B = te.compute(A.shape, lambda i, j: A[i, j] * 2.0 - 0.5, name="B")
    C = te.compute(A.shape, lambda i, j: B[i, j] * B[i, j] + A[i, j], name="C")
    return A, B, C


def _reference(a: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    b = a * 2.0 - 0.5
    return b, b * b + a


def test_integral_float_shape_and_factor_are_integers(rng):
    A, B, C = _chain()
    assert [int(x.value) for x in A.shape] == [64, 13]
    s = te.create_schedule(C.op)
    s[C].split(C.op.axis[1], factor=4.0)
    s[C].split(C.op.axis[0], nparts=6.0)
    mod = ember.build(s, [A, C])  # B is left out: allocated inside
    a = random_array((64, 13), "float32", rng)
    c = np.zeros_like(a)
    mod(a, c)
    assert_close(c, _reference(a)[1], "float32")


def test_non_integral_floats_are_errors():
    with pytest.raises(ArgumentError, match=r"shape of placeholder 'X' must be an integer.*2.5"):
        te.placeholder((2.5, 4), name="X")
    with pytest.raises(ArgumentError, match=r"range extent must be an integer"):
        te.reduce_axis(3.5, name="k")
    A, B, C = _chain()
    s = te.create_schedule(C.op)
    with pytest.raises(ScheduleError, match=r"factor must be a positive integer"):
        s[C].split(C.op.axis[0], factor=2.5)


def test_unused_placeholder_is_accepted(rng):
    A, B, C = _chain(rows=9)
    X = te.placeholder((5,), name="X")
    s = te.create_schedule(C.op)
    mod = ember.build(s, [A, X, C])
    a = random_array((9, 13), "float32", rng)
    x = random_array((5,), "float32", rng)
    c = np.zeros_like(a)
    mod(a, x, c)
    assert_close(c, _reference(a)[1], "float32")
    with pytest.raises(ArgumentError, match=r"argument 'X' expects shape \(5,\)"):
        mod(a, np.zeros(4, dtype="float32"), c)


@pytest.mark.parametrize("target", ["llvm", CUDA])
def test_compute_at_of_an_argument_stage_writes_its_parameter(rng, target):
    A, B, C = _chain(rows=37)
    s = te.create_schedule(C.op)
    if target == "llvm":
        s[B].compute_at(s[C], C.op.axis[0])
    else:
        io, ii = s[C].split(C.op.axis[0], factor=8)
        s[C].bind(io, te.thread_axis("blockIdx.x"))
        s[C].bind(ii, te.thread_axis("threadIdx.x"))
        s[B].compute_at(s[C], ii)
    mod = ember.build(s, [A, B, C], target=target)
    a = random_array((37, 13), "float32", rng)
    b = np.full_like(a, np.nan)
    c = np.full_like(a, np.nan)
    if target == "llvm":
        mod(a, b, c)
    else:
        # As in TVM (InferStorageScope), a stage without set_scope attached under a
        # threadIdx loop has local rank, so its region is not relaxed over the threads:
        # each thread writes only the rows of B it reads, and no two threads race.
        mod.emulate(a, b, c)
    want_b, want_c = _reference(a)
    assert_close(b, want_b, "float32", "B")
    assert_close(c, want_c, "float32", "C")


def test_inlined_argument_stage_is_left_unwritten_with_a_warning(rng):
    """As in TVM (its schedule_primitives tutorial): C is computed from the inlined body and
    B stays a parameter that the function never writes."""
    A, B, C = _chain(rows=4)
    s = te.create_schedule(C.op)
    s[B].compute_inline()
    with pytest.warns(UserWarning, match=r"stage 'B' is inlined .* never writes"):
        mod = ember.build(s, [A, B, C], target="llvm")
    a = rng.uniform(-1, 1, (4, 13)).astype("float32")
    b = np.full((4, 13), 3.0, "float32")
    c = np.full((4, 13), np.nan, "float32")
    mod(a, b, c)
    assert_close(c, _reference(a)[1], "float32", "C")
    assert (b == 3.0).all()


def test_left_out_intermediate_unused_input_and_float_factors_in_the_emulator(rng):
    """The three rules above on CUDA: B is left out (a global workspace between its kernel
    and C's), X is never read but stays a parameter, the factors are integral floats."""
    A, B, C = _chain(rows=1000 / 8)
    X = te.placeholder((5,), name="X")
    s = te.create_schedule(C.op)
    for stage in (B, C):
        fused = s[stage].fuse(*s[stage].op.axis)
        bx, tx = s[stage].split(fused, factor=64.0)
        s[stage].bind(bx, "blockIdx.x")
        s[stage].bind(tx, "threadIdx.x")
    mod = ember.build(s, [A, X, C], target=CUDA)
    assert len(mod.program.kernels) == 2
    a = random_array((125, 13), "float32", rng)
    c = np.full_like(a, np.nan)
    mod.emulate(a, random_array((5,), "float32", rng), c)
    assert_close(c, _reference(a)[1], "float32")
    with pytest.raises(ArgumentError, match=r"'X'.*\(5,\)"):
        mod.emulate(a, np.zeros(4, "float32"), c)
