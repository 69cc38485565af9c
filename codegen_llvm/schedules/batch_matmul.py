"""CPU template for ``batch_matmul``: ``C[b] = A[b] @ B[b]`` for every batch index ``b``.

Each batch is one GEMM scheduled like :mod:`ember.codegen_llvm.schedules.matmul`,
whose helpers it uses: B is packed into panels ``[batch, N/nr, K, nr]``, each
``mr x nr`` tile of C accumulates in a local buffer held in vector registers (rows
unrolled, ``nr`` lanes vectorized, ``k`` unrolled by ``ku``), and the batch axis is
fused with the column-block and row-block loops into one parallel loop, so even a
batch of small matrices (attention heads) gives every thread work.
"""

from __future__ import annotations

from typing import Any

from ember.codegen_llvm.schedules.matmul import define_gemm_knobs, pack_panels, schedule_gemm
from ember.tir.schedule.schedule import Schedule, create_schedule
from ember.tir.te import operation as te
from ember.tir.topi.nn import batch_matmul
from ember.tuner.template import template


@template("batch_matmul.llvm")
def batch_matmul_llvm(
    B: int, M: int, N: int, K: int, dtype: str = "float32"
) -> tuple[Schedule, list[Any]]:
    """``C[b, i, j] = sum_k A[b, i, k] * Bm[b, k, j]``; A is (B, M, K), Bm is (B, K, N):
    ``tir/topi``'s compute, reading Bm from its packed panels."""
    tiles = define_gemm_knobs(M, N)
    nr = tiles.nr
    A = te.placeholder((B, M, K), dtype, name="A")
    Bm = te.placeholder((B, K, N), dtype, name="B")
    packed = pack_panels(Bm, nr, transposed=False)
    C = batch_matmul(A, Bm, "C", read_b=lambda b, k, j: packed[b, j // nr, k, j % nr])
    s = create_schedule(C.op)
    schedule_gemm(s, C, packed, tiles)
    return s, [A, Bm, C]
