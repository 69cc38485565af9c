"""Small GPU schedules shared by the CUDA tests (hand-written, not templates)."""

from __future__ import annotations

import ember
from ember import te


def elementwise(n: int = 1000, threads: int = 128):
    A = te.placeholder((n,), name="A")
    B = te.compute((n,), lambda i: A[i] * 2.0 + 1.0, name="B")
    s = te.create_schedule(B.op)
    bx, tx = s[B].split(s[B].op.axis[0], factor=threads)
    s[B].bind(bx, "blockIdx.x")
    s[B].bind(tx, "threadIdx.x")
    return s, [A, B]


def tiled_matmul(M: int = 64, N: int = 64, K: int = 64, tile: int = 16):
    """Shared-memory tiled matmul: each block stages a tile of A and B per k step."""
    A = te.placeholder((M, K), name="A")
    B = te.placeholder((K, N), name="B")
    k = te.reduce_axis((0, K), name="k")
    C = te.compute((M, N), lambda i, j: te.sum(A[i, k] * B[k, j], axis=k), name="C")
    s = te.create_schedule(C.op)
    AS = s.cache_read(A, "shared", [C])
    BS = s.cache_read(B, "shared", [C])
    i, j = s[C].op.axis
    bi, ti = s[C].split(i, factor=tile)
    bj, tj = s[C].split(j, factor=tile)
    ko, ki = s[C].split(k, factor=tile)
    s[C].reorder(bi, bj, ti, tj, ko, ki)
    s[C].bind(bi, "blockIdx.y")
    s[C].bind(bj, "blockIdx.x")
    s[C].bind(ti, "threadIdx.y")
    s[C].bind(tj, "threadIdx.x")
    for S in (AS, BS):
        s[S].compute_at(s[C], ko)
        a, b = s[S].op.axis
        s[S].bind(a, "threadIdx.y")
        s[S].bind(b, "threadIdx.x")
    return s, [A, B, C]


def lowered(sch_args, name: str = "main"):
    s, args = sch_args
    return ember.lower(s, args, name=name)
