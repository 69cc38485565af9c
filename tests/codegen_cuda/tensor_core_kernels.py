"""Tensor-core kernels written by hand with the IR builder (tests of tir.tensor_core).

The per-lane fragment layouts below are written from the PTX ISA's formulas
(``g = lane // 4``, ``t = lane % 4``) as TIR index expressions, independently of
:func:`ember.tir.tensor_core.mma_layout`, which the emulator uses.
"""

from __future__ import annotations

from ember.tir import expr as E
from ember.tir import stmt as S
from ember.tir import tensor_core as tc
from ember.tir.ir_builder import IRBuilder

TILE = 64  # block tile (M and N); 4 warps of 32 x 32


def _kernel(ib: IRBuilder, name: str, grid: tuple, block: tuple) -> S.PrimFunc:
    return ib.get_func(name, attrs=(("kernel", True), ("launch", (grid, block))))


def _bind(ib: IRBuilder, extent: int, tag: str, name: str):
    return ib.for_range(0, extent, name=name, kind="thread_binding", thread_tag=tag)


def single_mma(in_dtype: str = "float16", acc: str = "float32", shape: str = "m16n8k16"):
    """One warp: ``D = A @ B + C`` (16 x k by k x 8), fragments gathered from global memory."""
    k = 16 if shape == "m16n8k16" else 8
    store = "float32" if in_dtype == "tf32" else in_dtype
    ib = IRBuilder()
    A = ib.param((16 * k,), store, name="A")
    B = ib.param((k * 8,), store, name="B")
    C = ib.param((16 * 8,), acc, name="C")
    D = ib.param((16 * 8,), acc, name="D")
    with _bind(ib, 1, "blockIdx.x", "bx"), _bind(ib, 32, "threadIdx.x", "tx") as tx:
        g, t = tx // 4, tx % 4
        na, nb = (8, 4) if k == 16 else (4, 2)
        fa = ib.allocate((na,), store, scope="local", name="a_frag")
        fb = ib.allocate((nb,), store, scope="local", name="b_frag")
        fc = ib.allocate((4,), acc, scope="local", name="c_frag")
        if k == 16:
            for r in range(4):
                for j in range(2):
                    row, col = g + 8 * (r % 2), 2 * t + j + 8 * (r // 2)
                    ib.store(fa, 2 * r + j, A[row * k + col])
            for r in range(2):
                for j in range(2):
                    ib.store(fb, 2 * r + j, B[(2 * t + j + 8 * r) * 8 + g])
        else:
            for r in range(4):
                ib.store(fa, r, A[(g + 8 * (r % 2)) * k + t + 4 * (r // 2)])
            for r in range(2):
                ib.store(fb, r, B[(t + 4 * r) * 8 + g])
        for r in range(2):
            for j in range(2):
                ib.store(fc, 2 * r + j, C[(g + 8 * r) * 8 + 2 * t + j])
        ib.evaluate(tc.ptx_mma(shape, in_dtype, acc, fa, 0, fb, 0, fc, 0))
        for r in range(2):
            for j in range(2):
                ib.store(D, (g + 8 * r) * 8 + 2 * t + j, fc[2 * r + j])
    return _kernel(ib, f"mma_{shape}_{in_dtype}_{acc}", (1, 1, 1), (32, 1, 1))


def _smem_index(layout: str, row, col, width: int):
    """Where (row, col) of a row-major tile ``width`` wide lives in shared memory."""
    if layout == "pad":
        return row * (width + 8) + col
    if layout == "swizzle":  # 16-byte chunk c of row r at chunk c ^ (r % 8)
        return row * width + ((col // 8) ^ (row % 8)) * 8 + col % 8
    return row * width + col


def _smem_size(layout: str, rows: int, width: int) -> int:
    return rows * (width + 8 if layout == "pad" else width)


def ldmatrix_gemm(
    M: int,
    N: int,
    K: int,
    layout: str = "swizzle",
    dtype: str = "float16",
    barrier: bool = True,
    mutate: str = "",
    copy: str = "sync",
) -> S.PrimFunc:
    """C (f32) = A @ B with 64 x 64 block tiles: shared A and B (whole K), ldmatrix.x4 for A,
    ldmatrix.x4.trans for B, mma.sync m16n8k16; ``layout``: plain, pad or swizzle.

    ``mutate``: "swap_a" swaps two of A's fragment registers (matrices 1 and 2 of the
    ldmatrix); "swizzle_one_side" swizzles the stores but not the ldmatrix addresses.
    ``copy``: "sync" (plain stores), "async" (cp.async, commit, wait) or "async_nowait"."""
    ib = IRBuilder()
    A = ib.param((M * K,), dtype, name="A")
    B = ib.param((K * N,), dtype, name="B")
    C = ib.param((M * N,), "float32", name="C")
    load_layout = "plain" if mutate == "swizzle_one_side" else layout
    with (
        _bind(ib, N // TILE, "blockIdx.x", "bx") as bx,
        _bind(ib, M // TILE, "blockIdx.y", "by") as by,
    ):
        As = ib.allocate((_smem_size(layout, TILE, K),), dtype, scope="shared", name="A_shared")
        Bs = ib.allocate((_smem_size(layout, K, TILE),), dtype, scope="shared", name="B_shared")
        with _bind(ib, 128, "threadIdx.x", "tx") as tx:
            v = 1 if copy == "sync" else 8  # cp.async copies 16 bytes: 8 elements
            with ib.for_range(0, TILE * K // 128 // v, name="i") as i:
                e = (i * 128 + tx) * v
                r, c = e // K, e % K
                _fill(ib, v, As, _smem_index(layout, r, c, K), A, (by * TILE + r) * K + c)
            with ib.for_range(0, K * TILE // 128 // v, name="j") as j:
                e = (j * 128 + tx) * v
                r, c = e // TILE, e % TILE
                _fill(ib, v, Bs, _smem_index(layout, r, c, TILE), B, r * N + bx * TILE + c)
            if copy != "sync":
                ib.emit(S.AsyncCommit())
            if copy == "async":
                ib.emit(S.AsyncWait(0))
            if barrier:
                ib.barrier()
            _warp_mma(ib, As, Bs, C, tx, bx, by, N, K, load_layout, dtype, mutate)
    grid = (N // TILE, M // TILE, 1)
    return _kernel(ib, f"ldmatrix_gemm_{layout}", grid, (128, 1, 1))


def _fill(ib: IRBuilder, v: int, dst, at, src, src_at) -> None:
    """``dst[at] = src[src_at]``, or ``v`` elements from there with one cp.async."""
    if v == 1:
        ib.store(dst, at, src[src_at])
        return
    load = src[E.Ramp(f"int32x{v}", src_at, E.const(1), v)]
    ib.emit(S.AsyncCopy(S.BufferStore(dst, load, (E.Ramp(f"int32x{v}", at, E.const(1), v),))))


def _warp_mma(ib, As, Bs, C, tx, bx, by, N, K, layout, dtype, mutate) -> None:
    warp, lane = tx // 32, tx % 32
    wm, wn = warp // 2, warp % 2
    fa = ib.allocate((16,), dtype, scope="local", name="a_frag")  # 2 m16 tiles
    fb = ib.allocate((16,), dtype, scope="local", name="b_frag")  # 4 n8 tiles
    acc = ib.allocate((32,), "float32", scope="local", name="acc")
    with ib.for_range(0, 32, name="z") as z:
        ib.store(acc, z, E.const(0.0, "float32"))
    with ib.for_range(0, K // 16, name="kk") as kk:
        for mi in range(2):
            if mutate == "swap_a":  # lanes 8-15 and 16-23 trade roles: registers 1 and 2 swap
                row, col = lane % 8 + 8 * (lane // 16), kk * 16 + (lane // 8) % 2 * 8
            else:
                row, col = lane % 16, kk * 16 + lane // 16 * 8
            src = _smem_index(layout, wm * 32 + mi * 16 + row, col, K)
            ib.evaluate(tc.ptx_ldmatrix(False, 4, fa, mi * 8, As, src))
        for nj in range(2):
            k_row, n_col = kk * 16 + lane % 16, wn * 32 + nj * 16 + lane // 16 * 8
            src = _smem_index(layout, k_row, n_col, TILE)
            ib.evaluate(tc.ptx_ldmatrix(True, 4, fb, nj * 8, Bs, src))
        for mi in range(2):
            for nj in range(4):
                ib.evaluate(
                    tc.ptx_mma("m16n8k16", dtype, "float32", fa, mi * 8, fb, nj * 4, acc,
                               (mi * 4 + nj) * 4)
                )  # fmt: skip
    g, t = lane // 4, lane % 4
    for mi in range(2):
        for nj in range(4):
            for r in range(2):
                for j in range(2):
                    row = by * TILE + wm * 32 + mi * 16 + g + 8 * r
                    col = bx * TILE + wn * 32 + nj * 8 + 2 * t + j
                    ib.store(C, row * N + col, acc[(mi * 4 + nj) * 4 + 2 * r + j])


def wmma_gemm(
    M: int, N: int, K: int, dtype: str = "float16", acc: str = "float32", barrier: bool = True
):
    """C = A @ B with 64 x 64 block tiles, padded shared A and B, 2 x 2 wmma tiles per warp."""
    ib = IRBuilder()
    A = ib.param((M * K,), dtype, name="A")
    B = ib.param((K * N,), dtype, name="B")
    C = ib.param((M * N,), acc, name="C")
    lda, ldb = K + 8, TILE + 8
    with (
        _bind(ib, N // TILE, "blockIdx.x", "bx") as bx,
        _bind(ib, M // TILE, "blockIdx.y", "by") as by,
    ):
        As = ib.allocate((TILE * lda,), dtype, scope="shared", name="A_shared")
        Bs = ib.allocate((K * ldb,), dtype, scope="shared", name="B_shared")
        with _bind(ib, 128, "threadIdx.x", "tx") as tx:
            with ib.for_range(0, TILE * K // 128, name="i") as i:
                e = i * 128 + tx
                ib.store(As, e // K * lda + e % K, A[(by * TILE + e // K) * K + e % K])
            with ib.for_range(0, K * TILE // 128, name="j") as j:
                e = j * 128 + tx
                ib.store(Bs, e // TILE * ldb + e % TILE, B[e // TILE * N + bx * TILE + e % TILE])
            if barrier:
                ib.barrier()
            wm, wn = tx // 32 // 2, tx // 32 % 2
            fa = ib.allocate((2 * 256,), dtype, scope="wmma.matrix_a", name="a_frag")
            fb = ib.allocate((2 * 256,), dtype, scope="wmma.matrix_b", name="b_frag")
            fc = ib.allocate((4 * 256,), acc, scope="wmma.accumulator", name="acc")
            for f in range(4):
                ib.evaluate(tc.tvm_fill_fragment(fc, f, 0.0))
            with ib.for_range(0, K // 16, name="kk") as kk:
                for mi in range(2):
                    a_at = (wm * 32 + mi * 16) * lda + kk * 16
                    ib.evaluate(tc.tvm_load_matrix_sync(fa, mi, As, a_at, lda))
                for nj in range(2):
                    b_at = kk * 16 * ldb + wn * 32 + nj * 16
                    ib.evaluate(tc.tvm_load_matrix_sync(fb, nj, Bs, b_at, ldb))
                for mi in range(2):
                    for nj in range(2):
                        f = mi * 2 + nj
                        ib.evaluate(tc.tvm_mma_sync(fc, f, fa, mi, fb, nj, fc, f))
            for mi in range(2):
                for nj in range(2):
                    at = (by * TILE + wm * 32 + mi * 16) * N + bx * TILE + wn * 32 + nj * 16
                    ib.evaluate(tc.tvm_store_matrix_sync(fc, mi * 2 + nj, C, at, N))
    return _kernel(ib, f"wmma_gemm_{dtype}_{acc}", (N // TILE, M // TILE, 1), (128, 1, 1))


def wmma_single(a_layout: str, b_layout: str) -> S.PrimFunc:
    """One warp: D = A @ B + C on one 16 x 16 tile, A and B read in the given layouts, C
    loaded row-major into the accumulator, D stored column-major."""
    ib = IRBuilder()
    A = ib.param((256,), "float16", name="A")
    B = ib.param((256,), "float16", name="B")
    C = ib.param((256,), "float32", name="C")
    D = ib.param((256,), "float32", name="D")
    with _bind(ib, 1, "blockIdx.x", "bx"), _bind(ib, 32, "threadIdx.x", "tx"):
        fa = ib.allocate((256,), "float16", scope="wmma.matrix_a", name="fa")
        fb = ib.allocate((256,), "float16", scope="wmma.matrix_b", name="fb")
        fc = ib.allocate((256,), "float32", scope="wmma.accumulator", name="fc")
        ib.evaluate(tc.tvm_load_matrix_sync(fa, 0, A, 0, 16, a_layout))
        ib.evaluate(tc.tvm_load_matrix_sync(fb, 0, B, 0, 16, b_layout))
        ib.evaluate(tc.tvm_load_matrix_sync(fc, 0, C, 0, 16, "row_major"))
        ib.evaluate(tc.tvm_mma_sync(fc, 0, fa, 0, fb, 0, fc, 0))
        ib.evaluate(tc.tvm_store_matrix_sync(fc, 0, D, 0, 16, "col_major"))
    return _kernel(ib, "wmma_one", (1, 1, 1), (32, 1, 1))
