"""Each schedule primitive, lowered and run on the interpreter and LLVM, against numpy."""

from __future__ import annotations

import numpy as np
import pytest

import ember
from ember import te
from tests.numerics import check


def _matmul(M: int, N: int, K: int):
    A = te.placeholder((M, K), name="A")
    B = te.placeholder((K, N), name="B")
    k = te.reduce_axis((0, K), name="k")
    C = te.compute((M, N), lambda i, j: te.sum(A[i, k] * B[k, j], axis=k), name="C")
    return A, B, C


def mm_ref(a, b):
    return a @ b


@pytest.mark.parametrize("factor", [1, 3, 4, 7, 32])
def test_split_factor_non_divisible(rng, factor):
    A, B, C = _matmul(13, 10, 9)
    s = te.create_schedule(C.op)
    i, j = s[C].op.axis
    s[C].split(i, factor=factor)
    s[C].split(s[C].op.reduce_axis[0], factor=factor)
    check(s, [A, B, C], mm_ref, rng)


@pytest.mark.parametrize("nparts", [1, 2, 5, 20])
def test_split_nparts(rng, nparts):
    A, B, C = _matmul(11, 6, 5)
    s = te.create_schedule(C.op)
    s[C].split(s[C].op.axis[1], nparts=nparts)
    check(s, [A, B, C], mm_ref, rng)


def test_tile_reorder_fuse(rng):
    A, B, C = _matmul(17, 19, 7)
    s = te.create_schedule(C.op)
    i, j = s[C].op.axis
    xo, yo, xi, yi = s[C].tile(i, j, 4, 5)
    (k,) = s[C].op.reduce_axis
    s[C].reorder(xo, yo, k, xi, yi)
    f = s[C].fuse(xo, yo)
    s[C].parallel(f)
    s[C].vectorize(yi)
    s[C].unroll(xi)
    check(s, [A, B, C], mm_ref, rng)


def test_reduce_axis_outermost(rng):
    A, B, C = _matmul(5, 6, 7)
    s = te.create_schedule(C.op)
    i, j = s[C].op.axis
    (k,) = s[C].op.reduce_axis
    s[C].reorder(k, i, j)
    check(s, [A, B, C], mm_ref, rng)


def test_compute_at_and_inline(rng):
    A = te.placeholder((10, 12), name="A")
    B = te.compute((10, 12), lambda i, j: A[i, j] * 2.0, name="B")
    C = te.compute((10, 12), lambda i, j: B[i, j] + 1.0, name="C")
    D = te.compute((10, 12), lambda i, j: C[i, j] * C[i, j], name="D")
    s = te.create_schedule(D.op)
    s[B].compute_inline()
    io, ii = s[D].split(s[D].op.axis[0], factor=3)
    s[C].compute_at(s[D], io)
    check(s, [A, D], lambda a: ((a * 2) + 1) ** 2, rng)


def test_compute_at_stencil_region(rng):
    A = te.placeholder((20,), name="A")
    B = te.compute((20,), lambda i: A[i] * 3.0, name="B")
    C = te.compute((18,), lambda i: B[i] + B[i + 1] + B[i + 2], name="C")
    s = te.create_schedule(C.op)
    xo, xi = s[C].split(s[C].op.axis[0], factor=4)
    s[B].compute_at(s[C], xo)

    def ref(a):
        b = a * 3
        return b[:-2] + b[1:-1] + b[2:]

    check(s, [A, C], ref, rng)


def test_cache_read_and_write(rng):
    A, B, C = _matmul(9, 14, 11)
    s = te.create_schedule(C.op)
    CL = s.cache_write(C, "local")
    AL = s.cache_read(A, "local", [CL])
    i, j = s[C].op.axis
    io, jo, ii, ji = s[C].tile(i, j, 4, 8)
    s[CL].compute_at(s[C], jo)
    (k,) = s[CL].op.reduce_axis
    ko, ki = s[CL].split(k, factor=4)
    s[AL].compute_at(s[CL], ko)
    s[C].vectorize(ji)
    check(s, [A, B, C], mm_ref, rng)


def test_storage_align(rng):
    A = te.placeholder((8, 8), name="A")
    B = te.compute((8, 8), lambda i, j: A[i, j] + 1.0, name="B")
    C = te.compute((8, 8), lambda i, j: B[j, i] * 2.0, name="C")
    s = te.create_schedule(C.op)
    s[B].storage_align(s[B].op.axis[0], 16, 3)
    check(s, [A, C], lambda a: (a.T + 1) * 2, rng)
    text = str(ember.lower(s, [A, C]))
    # rows padded from 8 to 19 elements (19 % 16 == 3): 7 * 19 + 8 = 141 elements
    assert "i * 19 + j" in text and "alloc((141)" in text


def test_custom_reducer(rng):
    A = te.placeholder((6, 9), name="A")
    prod = te.comm_reducer(lambda x, y: x * y, lambda t: te.const(1.0, t), name="prod")
    k = te.reduce_axis((0, 9), name="k")
    B = te.compute((6,), lambda i: prod(A[i, k], axis=k), name="B")
    s = te.create_schedule(B.op)
    check(s, [A, B], lambda a: np.prod(a, axis=1), rng)


@pytest.mark.parametrize("reducer,ref", [(te.max, np.max), (te.min, np.min), (te.sum, np.sum)])
def test_reducers(rng, reducer, ref):
    A = te.placeholder((7, 13), name="A")
    k = te.reduce_axis((0, 13), name="k")
    B = te.compute((7,), lambda i: reducer(A[i, k], axis=k), name="B")
    s = te.create_schedule(B.op)
    ko, ki = s[B].split(k, factor=4)
    check(s, [A, B], lambda a: ref(a, axis=1), rng)


def test_reduce_with_where(rng):
    A = te.placeholder((5, 8), name="A")
    k = te.reduce_axis((0, 8), name="k")
    B = te.compute((5,), lambda i: te.sum(A[i, k], axis=k, where=k < 5), name="B")
    s = te.create_schedule(B.op)
    check(s, [A, B], lambda a: a[:, :5].sum(axis=1), rng)


def test_pragma_is_kept_and_harmless(rng):
    A = te.placeholder((16,), name="A")
    B = te.compute((16,), lambda i: A[i] + 1.0, name="B")
    s = te.create_schedule(B.op)
    s[B].pragma(s[B].op.axis[0], "auto_unroll_max_step", 16)
    check(s, [A, B], lambda a: a + 1, rng)


def test_disabled_passes_change_output_not_results(rng):
    A, B, C = _matmul(10, 10, 10)
    s = te.create_schedule(C.op)
    s[C].split(s[C].op.axis[0], factor=3)
    full = str(ember.lower(s, [A, B, C]))
    raw = str(ember.lower(s, [A, B, C], disabled_passes=("loop_partition", "simplify")))
    assert "likely" in raw and full != raw
    check(s, [A, B, C], mm_ref, rng, disabled_passes=("loop_partition",))
