"""Reduce axes can be used directly in index arithmetic, on either side of an operator."""

from __future__ import annotations

from ember import te
from tests.numerics import check


def test_expr_plus_iter_var(rng):
    A = te.placeholder((10,), name="A")
    r = te.reduce_axis((0, 3), name="r")
    B = te.compute((8,), lambda i: te.sum(A[i * 1 + r], axis=r), name="B")
    s = te.create_schedule(B.op)
    check(s, [A, B], lambda a: a[:-2] + a[1:-1] + a[2:], rng)
