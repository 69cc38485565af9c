"""Device kernels written by hand in the form ``split_host_device`` produces (printer tests)."""

from __future__ import annotations

from ember.tir import expr as E
from ember.tir import stmt as S
from ember.tir.ir_builder import IRBuilder

I = E.Intrinsic  # noqa: E741


def _kernel(ib: IRBuilder, name: str, grid: tuple[int, ...], block: tuple[int, ...]) -> S.PrimFunc:
    g = tuple(grid) + (1,) * (3 - len(grid))
    b = tuple(block) + (1,) * (3 - len(block))
    return ib.get_func(name, attrs=(("kernel", True), ("launch", (g, b))))


def _bind(ib: IRBuilder, extent: int, tag: str, name: str):
    return ib.for_range(0, extent, name=name, kind="thread_binding", thread_tag=tag)


def elementwise(n: int = 1000, threads: int = 128, dtype: str = "float32") -> S.PrimFunc:
    """``B[i] = A[i] * 2 + 1`` over blockIdx.x * threads + threadIdx.x, guarded by ``i < n``."""
    blocks = -(-n // threads)
    ib = IRBuilder()
    A = ib.param((n,), dtype, name="A")
    B = ib.param((n,), dtype, name="B")
    with _bind(ib, blocks, "blockIdx.x", "bx") as bx:
        with _bind(ib, threads, "threadIdx.x", "tx") as tx:
            with ib.if_then_else(bx * threads + tx < n):
                i = bx * threads + tx
                ib.store(B, i, A[i] * E.const(2.0, dtype) + E.const(1.0, dtype))
    return _kernel(ib, "elementwise", (blocks,), (threads,))


def tiled_matmul(M: int, N: int, K: int, tile: int = 16) -> S.PrimFunc:
    """C = A @ B with tile x tile blocks staging A and B tiles in shared memory.

    The cooperative fetch of each tile and the compute are separate loops bound to
    threadIdx.y/threadIdx.x, with barriers between; edges are guarded.
    """
    gy, gx, kt = -(-M // tile), -(-N // tile), -(-K // tile)
    ib = IRBuilder()
    A = ib.param((M * K,), "float32", name="A")
    B = ib.param((K * N,), "float32", name="B")
    C = ib.param((M * N,), "float32", name="C")
    with _bind(ib, gy, "blockIdx.y", "by") as by, _bind(ib, gx, "blockIdx.x", "bx") as bx:
        As = ib.allocate((tile * tile,), "float32", scope="shared", name="A_shared")
        Bs = ib.allocate((tile * tile,), "float32", scope="shared", name="B_shared")
        with _bind(ib, tile, "threadIdx.y", "ty") as ty, _bind(ib, tile, "threadIdx.x", "tx") as tx:
            acc = ib.allocate((1,), "float32", scope="local", name="acc")
            ib.store(acc, 0, 0.0)
            with ib.for_range(0, kt, name="k_outer") as ko:
                row, col = by * tile + ty, ko * tile + tx
                ok = (row < M) & (col < K)
                ib.store(As, ty * tile + tx, E.select(ok, A[row * K + col], E.const(0.0)))
                row, col = ko * tile + ty, bx * tile + tx
                ok = (row < K) & (col < N)
                ib.store(Bs, ty * tile + tx, E.select(ok, B[row * N + col], E.const(0.0)))
                ib.barrier()
                with ib.for_range(0, tile, name="k_inner", kind="unroll") as ki:
                    ib.store(acc, 0, acc[0] + As[ty * tile + ki] * Bs[ki * tile + tx])
                ib.barrier()
            with ib.if_then_else((by * tile + ty < M) & (bx * tile + tx < N)):
                ib.store(C, (by * tile + ty) * N + bx * tile + tx, acc[0])
    return _kernel(ib, "tiled_matmul", (gx, gy), (tile, tile))


def cooperative_fetch(n: int = 512) -> S.PrimFunc:
    """A 2 KiB shared tile filled by one threadIdx.x loop and read by another (64 threads)."""
    ib = IRBuilder()
    A = ib.param((n * 4,), "float32", name="A")
    B = ib.param((n * 4,), "float32", name="B")
    with _bind(ib, 4, "blockIdx.x", "bx") as bx:
        tile = ib.allocate((n,), "float32", scope="shared", name="tile")
        with _bind(ib, 64, "threadIdx.x", "tx_fetch") as tf:
            with ib.for_range(0, n // 64, name="f") as f:
                ib.store(tile, f * 64 + tf, A[bx * n + f * 64 + tf])
        ib.barrier()
        with _bind(ib, 32, "threadIdx.x", "tx") as tx:  # half the threads compute
            with ib.for_range(0, n // 32, name="r") as r:
                ib.store(B, bx * n + r * 32 + tx, tile[n - 1 - (r * 32 + tx)])
    return _kernel(ib, "reverse_tiles", (4,), (64,))


def vector_copy(n: int = 1024, lanes: int = 4, dtype: str = "float32", offset: int = 0):
    """``B[4i : 4i+4] = A[4i + offset : ...] * 2`` with Ramp indices (vector loads and stores)."""
    threads = n // lanes
    ib = IRBuilder()
    A = ib.param((n + offset,), dtype, name="A")
    B = ib.param((n,), dtype, name="B")
    with _bind(ib, 1, "blockIdx.x", "bx"), _bind(ib, threads, "threadIdx.x", "tx") as tx:
        src = E.Ramp(f"int32x{lanes}", tx * lanes + offset, E.const(1), lanes)
        dst = E.Ramp(f"int32x{lanes}", tx * lanes, E.const(1), lanes)
        two = E.Broadcast(f"{dtype}x{lanes}", E.const(2.0, dtype), lanes)
        ib.store(B, dst, A[src] * two)
    return _kernel(ib, f"vector_copy_{dtype}x{lanes}", (1,), (threads,))


def strided_gather(n: int = 256) -> S.PrimFunc:
    """A stride-2 Ramp load: never a whole-vector access, always lane code."""
    ib = IRBuilder()
    A = ib.param((2 * n,), "float32", name="A")
    B = ib.param((n,), "float32", name="B")
    with _bind(ib, 1, "blockIdx.x", "bx"), _bind(ib, n // 4, "threadIdx.x", "tx") as tx:
        src = E.Ramp("int32x4", tx * 8, E.const(2), 4)
        dst = E.Ramp("int32x4", tx * 4, E.const(1), 4)
        ib.store(B, dst, A[src])
    return _kernel(ib, "strided_gather", (1,), (n // 4,))


UNARY = (I.EXP, I.LOG, I.SQRT, I.RSQRT, I.TANH, I.ERF, I.SIGMOID, I.ABS, I.FLOOR, I.CEIL)
UNARY += (I.ROUND, I.NEARBYINT, I.TRUNC, I.SIN, I.COS, I.TAN, I.ASIN, I.ACOS, I.ATAN)
UNARY += (I.SINH, I.COSH, I.ASINH, I.ACOSH, I.ATANH, I.EXP2, I.EXP10, I.LOG2, I.LOG10, I.LOG1P)
BINARY = (I.FMOD, I.ATAN2, I.HYPOT, I.COPYSIGN)
# what `intrinsics` writes, in order: op(x) or op(x, y) with y = x reversed
INTRINSIC_OPS = UNARY + BINARY + (I.POW, I.FMA, "min", "max", "floordiv", "floormod")
INTRINSIC_OPS += ("truncdiv", "truncmod")


NAMED_BINARY = {
    "min": E.min_,
    "max": E.max_,
    "floordiv": E.floordiv,
    "floormod": E.floormod,
    "truncdiv": E.truncdiv,
    "truncmod": E.truncmod,
}


def apply_op(op: object, x: E.PrimExpr, y: E.PrimExpr) -> E.PrimExpr:
    """``op`` of :data:`INTRINSIC_OPS` on ``x`` (and ``y``): unary intrinsics take ``x``,
    FMA computes ``x * y + x``, the rest are binary."""
    if op == I.FMA:
        return E.call(I.FMA, x, y, x)
    if op in BINARY or op == I.POW:
        return E.call(op, x, y)
    if isinstance(op, E.Intrinsic):
        return E.call(op, x)
    return NAMED_BINARY[op](x, y)


def intrinsics(dtype: str = "float32", n: int = 256) -> S.PrimFunc:
    """One output per intrinsic (and MIN/MAX, float floordiv/floormod) over one input."""
    ops = INTRINSIC_OPS
    ib = IRBuilder()
    X = ib.param((n,), dtype, name="X")
    Y = ib.param((len(ops) * n,), dtype, name="Y")
    with _bind(ib, 1, "blockIdx.x", "bx"), _bind(ib, n, "threadIdx.x", "tx") as tx:
        x = X[tx]
        y = X[n - 1 - tx]
        for k, op in enumerate(ops):
            base = E.call(I.ABS, x) if op == I.POW else x  # a real power of a negative is NaN
            ib.store(Y, k * n + tx, apply_op(op, base, y))
    return _kernel(ib, f"intrinsics_{dtype}", (1,), (n,))


def casts(n: int = 256) -> S.PrimFunc:
    """bfloat16 <-> float32 / float16 / int32 / int8 casts, and bool from a compare."""
    ib = IRBuilder()
    X = ib.param((n,), "bfloat16", name="X")
    F = ib.param((n,), "float32", name="F")
    H = ib.param((n,), "float16", name="H")
    Q = ib.param((n,), "int8", name="Q")
    Z = ib.param((n,), "bool", name="Z")
    Y = ib.param((n,), "bfloat16", name="Y")
    with _bind(ib, 1, "blockIdx.x", "bx"), _bind(ib, n, "threadIdx.x", "tx") as tx:
        ib.store(F, tx, E.cast("float32", X[tx]))
        ib.store(H, tx, E.cast("float16", X[tx]))
        ib.store(Q, tx, E.cast("int8", X[tx]))
        ib.store(Z, tx, X[tx] > E.const(0.5, "bfloat16"))
        mixed = E.cast("bfloat16", F[tx]) + E.cast("bfloat16", H[tx]) + E.cast("bfloat16", tx)
        ib.store(Y, tx, E.select(Z[tx], mixed, E.cast("bfloat16", Q[tx])))
    return _kernel(ib, "bf16_casts", (1,), (n,))


def index_division(n: int = 300, dtype: str = "int32") -> S.PrimFunc:
    """Floor division and modulo of possibly negative indices (helpers) and of loop indices."""
    ib = IRBuilder()
    A = ib.param((n,), dtype, name="A")
    B = ib.param((4 * n,), dtype, name="B")
    with _bind(ib, 3, "blockIdx.x", "bx") as bx, _bind(ib, 100, "threadIdx.x", "tx") as tx:
        i = bx * 100 + tx
        d = E.cast(dtype, i - 150)
        ib.store(B, i, E.floordiv(d, E.const(7, dtype)))
        ib.store(B, n + i, E.floormod(d, E.const(7, dtype)))
        ib.store(
            B, 2 * n + i, E.floordiv(A[i], E.const(-3, dtype)) + E.floormod(A[i], A[n - 1 - i])
        )
        ib.store(B, 3 * n + i, E.cast(dtype, E.floordiv(i, 8) + E.floormod(i, 8)))
    return _kernel(ib, f"index_division_{dtype}", (3,), (100,))
