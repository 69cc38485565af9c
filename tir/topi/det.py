"""Determinants of small square matrices (ONNX Det) by the Leibniz formula.

``det`` takes (..., n, n) and gives (...): the signed sum over the n! permutations of
products of one entry per row, unrolled into one elementwise expression. That is
exact arithmetic-wise for the small matrices models use (n <= MAX_N, 120 terms of
5 factors at most); larger n would need a pivoted LU, which is not implemented.
"""

from __future__ import annotations

import itertools

from ember.errors import ArgumentError
from ember.tir import expr as E
from ember.tir.te import operation as te
from ember.tir.te.tensor import Tensor
from ember.tir.topi.transform import static_shape

MAX_N = 5


def _sign(perm: tuple[int, ...]) -> int:
    inversions = sum(
        1 for i in range(len(perm)) for j in range(i + 1, len(perm)) if perm[i] > perm[j]
    )
    return -1 if inversions % 2 else 1


def det(X: Tensor, name: str = "det") -> Tensor:
    """The determinant of each trailing n x n matrix of ``X``."""
    xs = static_shape(X)
    if len(xs) < 2 or xs[-1] != xs[-2]:
        raise ArgumentError(f"det: expected (..., n, n), got {list(xs)}")
    n = xs[-1]
    if n > MAX_N:
        raise ArgumentError(f"det: {n} x {n} matrices are not supported (at most {MAX_N})")
    acc = "float32" if X.dtype in ("float16", "bfloat16") else X.dtype
    perms = list(itertools.permutations(range(n)))

    def f(*b: E.PrimExpr) -> E.PrimExpr:
        total = None
        for perm in perms:
            term = None
            for row, col in enumerate(perm):
                v = X[(*b, row, col)]
                v = v if acc == X.dtype else E.cast(acc, v)
                term = v if term is None else term * v
            assert term is not None
            if total is None:
                total = term if _sign(perm) > 0 else -term
            else:
                total = total + term if _sign(perm) > 0 else total - term
        assert total is not None
        return total if acc == X.dtype else E.cast(X.dtype, total)

    return te.compute(xs[:-2], f, name=name, tag="det")
