"""Every illegal schedule raises ScheduleError naming the stage and the axis."""

from __future__ import annotations

import pytest

import ember
from ember import te


def _matmul(n: int = 16):
    A = te.placeholder((n, n), name="A")
    B = te.placeholder((n, n), name="B")
    k = te.reduce_axis((0, n), name="k")
    C = te.compute((n, n), lambda i, j: te.sum(A[i, k] * B[k, j], axis=k), name="C")
    return A, B, C


def test_split_twice_names_stage_and_axis():
    _, _, C = _matmul()
    s = te.create_schedule(C.op)
    i, _ = s[C].op.axis
    s[C].split(i, factor=4)
    with pytest.raises(ember.ScheduleError, match=r"stage 'C'.*axis 'i' was already split"):
        s[C].split(i, factor=2)


@pytest.mark.parametrize("factor", [0, -3])
def test_split_factor_must_be_positive(factor):
    _, _, C = _matmul()
    s = te.create_schedule(C.op)
    i, _ = s[C].op.axis
    with pytest.raises(ember.ScheduleError, match=r"stage 'C'.*factor must be a positive integer"):
        s[C].split(i, factor=factor)


def test_split_nparts_must_be_positive():
    _, _, C = _matmul()
    s = te.create_schedule(C.op)
    i, _ = s[C].op.axis
    with pytest.raises(ember.ScheduleError, match="nparts must be a positive integer"):
        s[C].split(i, nparts=0)


def test_reorder_axis_of_another_stage():
    A, B, C = _matmul()
    D = te.compute((16, 16), lambda i, j: C[i, j] + 1.0, name="D")
    s = te.create_schedule(D.op)
    ci, _ = s[C].op.axis
    di, dj = s[D].op.axis
    with pytest.raises(ember.ScheduleError, match=r"stage 'D'.*'i' does not belong to stage 'D'"):
        s[D].reorder(dj, ci)


def test_reorder_duplicate_axis():
    _, _, C = _matmul()
    s = te.create_schedule(C.op)
    i, j = s[C].op.axis
    with pytest.raises(ember.ScheduleError, match="appears twice"):
        s[C].reorder(i, i)


def test_vectorize_non_constant_extent():
    n = te.var("n")
    A = te.placeholder((n,), name="A")
    B = te.compute((n,), lambda i: A[i] * 2.0, name="B")
    s = te.create_schedule(B.op)
    s[B].vectorize(s[B].op.axis[0])
    with pytest.raises(
        ember.ScheduleError, match=r"stage 'B'.*vectorize: axis 'i' has a non-constant extent"
    ):
        ember.lower(s, [A, B])


def test_compute_at_stage_that_does_not_consume():
    A, B, C = _matmul()
    D = te.compute((16, 16), lambda i, j: A[i, j] * 2.0, name="D")
    E = te.compute((16, 16), lambda i, j: C[i, j] + D[i, j], name="E")
    s = te.create_schedule(E.op)
    with pytest.raises(ember.ScheduleError, match=r"stage 'C' does not consume 'D'"):
        s[D].compute_at(s[C], s[C].op.axis[0])


def test_compute_at_axis_not_a_loop_of_parent():
    A, B, C = _matmul()
    D = te.compute((16, 16), lambda i, j: C[i, j] + 1.0, name="D")
    s = te.create_schedule(D.op)
    with pytest.raises(ember.ScheduleError, match="is not a current loop of stage 'D'"):
        s[C].compute_at(s[D], s[C].op.axis[0])


def test_fuse_non_adjacent():
    _, _, C = _matmul()
    s = te.create_schedule(C.op)
    i, j = s[C].op.axis
    (k,) = s[C].op.reduce_axis
    s[C].reorder(i, k, j)
    with pytest.raises(ember.ScheduleError, match="not adjacent"):
        s[C].fuse(i, j)


def test_compute_inline_reduction():
    A, B, C = _matmul()
    D = te.compute((16, 16), lambda i, j: C[i, j] + 1.0, name="D")
    s = te.create_schedule(D.op)
    with pytest.raises(ember.ScheduleError, match="a reduction cannot be inlined"):
        s[C].compute_inline()


def test_parallel_reduction_axis():
    _, _, C = _matmul()
    s = te.create_schedule(C.op)
    with pytest.raises(ember.ScheduleError, match="reduction axis"):
        s[C].parallel(s[C].op.reduce_axis[0])


def test_error_shows_loop_nest_with_marker():
    _, _, C = _matmul()
    s = te.create_schedule(C.op)
    i, _ = s[C].op.axis
    io, ii = s[C].split(i, factor=4)
    with pytest.raises(ember.ScheduleError) as info:
        s[C].split(i, factor=2)
    text = str(info.value)
    assert "loop nest of the stage" in text and "for i_outer" in text


def test_compute_at_then_fuse_as_outer_axis():
    """A split attach point moves to its inner loop (as TVM legalizes it); an axis fused
    as the outer operand has no loop to move to, which TVM refuses too."""
    A, B, C = _matmul()
    D = te.compute((16, 16), lambda i, j: C[i, j] + 1.0, name="D")
    s = te.create_schedule(D.op)
    i, j = s[D].op.axis
    s[C].compute_at(s[D], i)
    s[D].fuse(i, j)
    with pytest.raises(ember.ScheduleError, match="split or fused afterwards"):
        ember.lower(s, [A, B, D])


def test_reader_outside_attach_point():
    A = te.placeholder((16,), name="A")
    B = te.compute((16,), lambda i: A[i] + 1.0, name="B")
    C = te.compute((16,), lambda i: B[i] * 2.0, name="C")
    D = te.compute((16,), lambda i: B[i] + C[i], name="D")
    s = te.create_schedule(D.op)
    s[B].compute_at(s[C], s[C].op.axis[0])
    with pytest.raises(ember.ScheduleError, match="reads it outside that loop"):
        ember.lower(s, [A, D])
