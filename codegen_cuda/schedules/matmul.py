"""GPU template for ``matmul`` (``A @ B``): shared-memory block tiles, register thread tiles.

Each block computes a ``bm x bn`` tile of C with ``(bm/tm) x (bn/tn)`` threads;
each thread accumulates a ``tm x tn`` sub-tile in registers. For every ``bk``
slice of K the block first copies the A and B tiles it needs into shared memory
(all threads cooperating, so each global element is read once per block), waits
at a barrier, then every thread reads its rows and columns from shared memory
into registers and updates its sub-tile. Threads of a warp cover consecutive
columns, so their global reads of B and writes of C coalesce. The shared tiles
are pipelined over the K loop (``stages`` knob): the copies of the next tiles
are in flight (``cp.async`` on sm_80+) while the block computes on the current one.
"""

from __future__ import annotations

from typing import Any

from ember.codegen_cuda.schedules.common import bind_blocks, cooperative_fetch
from ember.tir.schedule.schedule import Schedule, create_schedule
from ember.tir.te import operation as te
from ember.tir.topi.nn import batch_matmul, matmul
from ember.tir.topi.transform import static_shape
from ember.tuner.template import get_config, template


def _define_tiles() -> tuple[int, int, int, int, int]:
    cfg = get_config()
    cfg.define_knob("bm", [16, 32, 64, 128], default=64)
    cfg.define_knob("bn", [16, 32, 64, 128], default=64)
    cfg.define_knob("bk", [4, 8, 16, 32], default=8)
    cfg.define_knob("tm", [1, 2, 4, 8], default=4)
    cfg.define_knob("tn", [1, 2, 4, 8], default=4)
    cfg.add_constraint(
        lambda c: (c["bm"].val // c["tm"].val) * (c["bn"].val // c["tn"].val) <= 1024,
        "at most 1024 threads per block",
    )
    bm, bn, bk = cfg["bm"].val, cfg["bn"].val, cfg["bk"].val
    return bm, bn, bk, min(cfg["tm"].val, bm), min(cfg["tn"].val, bn)


def schedule_matmul_cuda(s: Schedule, C: Any, A: Any, B: Any, K: int, N: int) -> None:
    """Block and thread tiles for ``C[..., i, j] = sum_k A[..., i, k] * B[..., k, j]``;
    a leading batch axis, if any, is bound to ``blockIdx.z`` (every block axis to ``x``
    where ``y`` or ``z`` would pass CUDA's 65535)."""
    cfg = get_config()
    bm, bn, bk, tm, tn = _define_tiles()
    CL = s.cache_write(C, "local")
    AS = s.cache_read(A, "shared", [CL])
    BS = s.cache_read(B, "shared", [CL])
    AL = s.cache_read(AS, "local", [CL])
    BL = s.cache_read(BS, "local", [CL])

    *batch, i, j = s[C].op.axis
    by, yi = s[C].split(i, factor=bm)
    bx, xi = s[C].split(j, factor=bn)
    ty, yr = s[C].split(yi, nparts=bm // tm)
    tx, xr = s[C].split(xi, nparts=bn // tn)
    s[C].reorder(*batch, by, bx, ty, tx, yr, xr)
    dims = list(static_shape(C))
    bind_blocks(s[C], [*batch, by, bx], [*dims[:-2], -(-dims[-2] // bm), -(-dims[-1] // bn)])
    s[C].bind(ty, "threadIdx.y")
    s[C].bind(tx, "threadIdx.x")

    s[CL].compute_at(s[C], tx)
    *_, yc, xc = s[CL].op.axis
    (kk,) = s[CL].op.reduce_axis
    ko, ki = s[CL].split(kk, factor=bk)
    s[CL].reorder(ko, ki, yc, xc)
    s[CL].unroll(ki)
    s[CL].unroll(yc)
    s[CL].unroll(xc)

    cfg.define_knob("fetch_vector", [1, 2, 4], default=4)
    cfg.define_knob("stages", [1, 2, 3, 4], default=3)
    vec = cfg["fetch_vector"].val
    for shared, row in ((AS, bk), (BS, bn)):
        s[shared].compute_at(s[CL], ko)
        s[shared].pipeline(cfg["stages"].val)
        # a vector must not cross a tile row, and a tile row must start aligned
        v = vec if row % vec == 0 and K % vec == 0 and N % vec == 0 else 1
        cooperative_fetch(s[shared], bm // tm, bn // tn, v)
    pad = _row_padding(bm // tm, bn // tn, tm, bk, vec)
    if pad:
        s[AS].storage_align(s[AS].op.axis[-2], 32, (bk + pad) % 32)
    for local in (AL, BL):
        s[local].compute_at(s[CL], ki)
        for axis in s[local].op.axis:
            s[local].unroll(axis)
    # Every loop over a thread's tile is unrolled, so that its registers are indexed by
    # constants (an edge tile keeps them, guarded, instead of moving to local memory). A
    # thread's tn columns of B are one vector read from shared memory, and its rows of C
    # one vector write each.
    if tn in (2, 4):
        s[BL].vectorize(s[BL].op.axis[-1])
    s[C].unroll(yr)
    if tn in (2, 4) and N % tn == 0:
        s[C].vectorize(xr)
    else:
        s[C].unroll(xr)


def _row_padding(threads_y: int, threads_x: int, tm: int, bk: int, vec: int) -> int:
    """Words to pad each row of the A tile by so that the rows one warp reads at a time
    (``threadIdx.y`` varies across the warp, ``threadIdx.x`` reads the same word) fall
    in different banks; a multiple of ``vec`` so that the fetch's vectors stay aligned."""
    rows_per_warp = max(1, min(32 // threads_x, threads_y)) if threads_x < 32 else 1

    def worst(pad: int) -> int:
        banks = [(r * tm * (bk + pad)) % 32 for r in range(rows_per_warp)]
        return max(banks.count(b) for b in banks)

    step = max(vec, 1)
    return min(range(0, 32, step), key=lambda p: (worst(p), p))


@template("matmul.cuda")
def matmul_cuda(M: int, N: int, K: int, dtype: str = "float32") -> tuple[Schedule, list[Any]]:
    """``C = A @ B`` (``tir/topi``'s matmul) in block and thread tiles."""
    A = te.placeholder((M, K), dtype, name="A")
    B = te.placeholder((K, N), dtype, name="B")
    C = matmul(A, B, "C")
    s = create_schedule(C.op)
    schedule_matmul_cuda(s, C, A, B, K, N)
    return s, [A, B, C]


@template("batch_matmul.cuda")
def batch_matmul_cuda(
    batch: int, M: int, N: int, K: int, dtype: str = "float32"
) -> tuple[Schedule, list[Any]]:
    """``C[b] = A[b] @ B[b]`` (``tir/topi``'s batch_matmul): the matmul tiles, one grid
    layer (blockIdx.z) per batch."""
    A = te.placeholder((batch, M, K), dtype, name="A")
    B = te.placeholder((batch, K, N), dtype, name="B")
    C = batch_matmul(A, B, "C")
    s = create_schedule(C.op)
    schedule_matmul_cuda(s, C, A, B, K, N)
    return s, [A, B, C]
