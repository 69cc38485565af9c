"""CPU templates for ``matmul`` (``A @ B``) and ``dense`` (``X @ W.T``).

The schedule is the classic register-blocked GEMM. B is first packed into panels
``packed[N/nr, K, nr]`` so the micro-kernel reads it with unit stride; each
``mr x nr`` tile of C is accumulated in a small local buffer that LLVM keeps in
vector registers (``mr`` rows unrolled, ``nr`` lanes vectorized, the ``k`` loop
unrolled by ``ku``), then copied out. Tiles are grouped into ``nc``-wide column
blocks so one block of packed B stays in the L2 cache while every row block of A
streams past it; the block loop runs in parallel. Shapes that the tiles do not
divide are handled by the guards lowering adds and loop partitioning confines to
the edge tiles.
"""

from __future__ import annotations

from typing import Any

from ember.tir import expr as E
from ember.tir.te import operation as te
from ember.tir.te.tensor import Tensor
from ember.tir.schedule.schedule import Schedule, create_schedule
from ember.tuner.template import get_config, template


def _pack(B: Tensor, K: int, N: int, nr: int, transposed: bool) -> Tensor:
    """``packed[x, k, z] = B[k, x*nr + z]`` (zero past N)."""
    panels = -(-N // nr)

    def f(x, k, z):  # noqa: ANN001, ANN202
        col = x * nr + z
        safe = E.min_(col, N - 1)
        value = B[safe, k] if transposed else B[k, safe]
        return E.select(col < N, value, E.const(0, B.dtype))

    return te.compute((panels, K, nr), f, name="B_packed")


def _gemm(M: int, N: int, K: int, dtype: str, transposed: bool) -> tuple[Schedule, list[Tensor]]:
    cfg = get_config()
    cfg.define_knob("mr", [2, 4, 6, 8, 12], default=4)
    cfg.define_knob("nr", [16, 32, 48, 64], default=64)
    cfg.define_knob("ku", [1, 2, 4, 8], default=4)
    cfg.define_knob("nc_panels", [1, 2, 4, 8], default=4)
    mr, nr, ku = cfg["mr"].val, cfg["nr"].val, cfg["ku"].val
    A = te.placeholder((M, K), dtype, name="A")
    B = te.placeholder((N, K) if transposed else (K, N), dtype, name="B")
    packed = _pack(B, K, N, nr, transposed)
    k = te.reduce_axis((0, K), name="k")
    C = te.compute(
        (M, N),
        lambda i, j: te.sum(A[i, k] * packed[j // nr, k, j % nr], axis=k),
        name="C",
        tag="dense" if transposed else "matmul",
    )
    s = create_schedule(C.op)
    acc = s.cache_write(C, "local")
    i, j = s[C].op.axis
    jb, ji = s[C].split(j, factor=nr * cfg["nc_panels"].val)
    io, ii = s[C].split(i, factor=mr)
    jo, jt = s[C].split(ji, factor=nr)
    s[C].reorder(jb, io, jo, ii, jt)
    s[C].vectorize(jt)
    par = s[C].fuse(jb, io)
    s[C].parallel(par)
    s[acc].compute_at(s[C], jo)
    ic, jc = s[acc].op.axis
    (kk,) = s[acc].op.reduce_axis
    ko, ki = s[acc].split(kk, factor=ku)
    s[acc].reorder(ko, ki, ic, jc)
    s[acc].unroll(ki)
    s[acc].unroll(ic)
    s[acc].vectorize(jc)
    x, kp, z = s[packed].op.axis
    s[packed].vectorize(z)
    s[packed].parallel(x)
    return s, [A, B, C]


@template("matmul.llvm")
def matmul_llvm(M: int, N: int, K: int, dtype: str = "float32") -> tuple[Schedule, list[Any]]:
    """``C = A @ B`` with A of shape (M, K) and B of shape (K, N)."""
    return _gemm(M, N, K, dtype, transposed=False)


@template("dense.llvm")
def dense_llvm(M: int, N: int, K: int, dtype: str = "float32") -> tuple[Schedule, list[Any]]:
    """``Y = X @ W.T`` with X of shape (M, K) and weights W of shape (N, K)."""
    return _gemm(M, N, K, dtype, transposed=True)
