"""The SIMT emulator on hand-built device kernels: numerics against numpy, races, bounds, errors.

Kernels are written with the IR builder in the shape ``split_host_device``
hands to the CUDA printer: attrs ``kernel`` and ``launch``, flattened accesses,
loops bound to ``blockIdx``/``threadIdx`` (a loop shorter than the launch is a
guard), ``shared``/``local`` allocations and barriers. No CUDA is needed.
"""

from __future__ import annotations

import time

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ember.codegen_cuda.emulator import compile_kernel, emulate
from ember.errors import ArgumentError, InternalError, RaceError
from ember.tir import stmt as S
from ember.tir.bf16 import bf16_to_float32, float32_to_bf16
from ember.tir.expr import Broadcast, Ramp, Var, cast, const, eq, max_, select, truncdiv
from ember.tir.ir_builder import IRBuilder
from tests.nightly import examples

TX, TY, BX, BY = "threadIdx.x", "threadIdx.y", "blockIdx.x", "blockIdx.y"


def _kernel(ib: IRBuilder, name: str, grid: tuple, block: tuple) -> S.PrimFunc:
    grid3 = tuple(grid) + (1,) * (3 - len(grid))
    block3 = tuple(block) + (1,) * (3 - len(block))
    return ib.get_func(name, attrs=(("kernel", True), ("launch", (grid3, block3))))


def _bind(ib: IRBuilder, extent: int, tag: str, name: str):  # noqa: ANN202
    return ib.for_range(0, extent, name=name, kind="thread_binding", thread_tag=tag)


# -- kernels -----------------------------------------------------------------------------


def scale_add(n: int, threads: int = 64, dtype: str = "float32") -> S.PrimFunc:
    """``C[i] = A[i] * 2 + B[i]`` with a tail guard when ``n`` is not a multiple of the block."""
    ib = IRBuilder()
    a, b, c = (ib.param((n,), dtype, name=x) for x in "ABC")
    blocks = -(-n // threads)
    with _bind(ib, blocks, BX, "bx") as bx, _bind(ib, threads, TX, "tx") as tx:
        i = bx * threads + tx
        with ib.if_then_else(i < n):
            ib.store(c, i, a[i] * const(2.0, dtype) + b[i])
    return _kernel(ib, "scale_add", (blocks,), (threads,))


def tiled_matmul(
    m: int,
    n: int,
    k: int,
    tile: int = 16,
    first_barrier: bool = True,
    second: bool = True,
    alloc_in_loop: bool = False,
) -> S.PrimFunc:
    """``C = A @ B`` with ``tile``x``tile`` shared tiles, one output per thread, edge guards.

    ``alloc_in_loop`` places the shared allocations inside the k loop, as lowering does.
    """
    ib = IRBuilder()
    a = ib.param((m, k), name="A")
    b = ib.param((k, n), name="B")
    c = ib.param((m, n), name="C")
    gx, gy, steps = -(-n // tile), -(-m // tile), -(-k // tile)
    with _bind(ib, gy, BY, "by") as by, _bind(ib, gx, BX, "bx") as bx:
        if not alloc_in_loop:
            a_s = ib.allocate((tile * tile,), scope="shared", name="A_shared")
            b_s = ib.allocate((tile * tile,), scope="shared", name="B_shared")
        acc = ib.allocate((1,), scope="local", name="C_local")
        with _bind(ib, tile, TY, "ty") as ty, _bind(ib, tile, TX, "tx") as tx:
            ib.store(acc, 0, 0.0)
        with ib.for_range(0, steps, name="ko") as ko:
            if alloc_in_loop:
                a_s = ib.allocate((tile * tile,), scope="shared", name="A_shared")
                b_s = ib.allocate((tile * tile,), scope="shared", name="B_shared")
            # cooperative fetch: each thread copies one element of each tile (zero outside)
            with _bind(ib, tile, TY, "ty_f") as ty, _bind(ib, tile, TX, "tx_f") as tx:
                row, col = by * tile + ty, ko * tile + tx
                ok = (row < m) & (col < k)
                ib.store(a_s, ty * tile + tx, select(ok, a[row * k + col], 0.0))
                row, col = ko * tile + ty, bx * tile + tx
                with ib.if_then_else((row < k) & (col < n)):
                    ib.store(b_s, ty * tile + tx, b[row * n + col])
                with ib.else_():
                    ib.store(b_s, ty * tile + tx, 0.0)
            if first_barrier:
                ib.barrier()
            with _bind(ib, tile, TY, "ty") as ty, _bind(ib, tile, TX, "tx") as tx:
                with ib.for_range(0, tile, name="ki", kind="unroll") as ki:
                    ib.store(acc, 0, acc[0] + a_s[ty * tile + ki] * b_s[ki * tile + tx])
            if second:
                ib.barrier()
        with _bind(ib, tile, TY, "ty") as ty, _bind(ib, tile, TX, "tx") as tx:
            row, col = by * tile + ty, bx * tile + tx
            with ib.if_then_else((row < m) & (col < n)):
                ib.store(c, row * n + col, acc[0])
    return _kernel(ib, "matmul", (gx, gy), (tile, tile))


def block_sum(n: int, threads: int = 64, divergent_barrier: bool = False) -> S.PrimFunc:
    """``Out[b] = sum(A[b*threads : (b+1)*threads])``: a tree reduction in shared memory."""
    ib = IRBuilder()
    a, out = ib.param((n,), name="A"), ib.param((-(-n // threads),), name="Out")
    blocks = -(-n // threads)
    with _bind(ib, blocks, BX, "bx") as bx:
        red = ib.allocate((threads,), scope="shared", name="red")
        with _bind(ib, threads, TX, "tx") as tx:
            i = bx * threads + tx
            ib.store(red, tx, select(i < n, a[i], 0.0))
            ib.barrier()
            s = threads // 2
            while s >= 1:
                with ib.if_then_else(tx < s):
                    ib.store(red, tx, red[tx] + red[tx + s])
                    if divergent_barrier:
                        ib.barrier()
                if not divergent_barrier:
                    ib.barrier()
                s //= 2
            with ib.if_then_else(eq(tx, 0)):
                ib.store(out, bx, red[0])
    return _kernel(ib, "block_sum", (blocks,), (threads,))


def local_prefix(n: int, width: int = 5, threads: int = 32) -> S.PrimFunc:
    """Each thread loads ``width`` values into a local array and writes their running max."""
    ib = IRBuilder()
    a, out = ib.param((n, width), name="A"), ib.param((n, width), name="Out")
    blocks = -(-n // threads)
    with _bind(ib, blocks, BX, "bx") as bx, _bind(ib, threads, TX, "tx") as tx:
        row = bx * threads + tx
        with ib.if_then_else(row < n):
            buf = ib.allocate((width,), scope="local", name="vals")
            with ib.for_range(0, width, name="j") as j:
                ib.store(buf, j, a[row * width + j])
            with ib.for_range(1, width, name="j") as j:
                ib.store(buf, j, max_(buf[j], buf[j - 1]))
            with ib.for_range(0, width, name="j") as j:
                ib.store(out, row * width + j, buf[j])
    return _kernel(ib, "local_prefix", (blocks,), (threads,))


# -- numerics ----------------------------------------------------------------------------


@pytest.mark.parametrize("n", [1, 64, 100, 1000])
def test_elementwise_with_tail_guard(n: int, rng: np.random.Generator) -> None:
    a, b = rng.standard_normal(n).astype("float32"), rng.standard_normal(n).astype("float32")
    c = np.full(n, np.nan, dtype="float32")
    emulate(scale_add(n), a, b, c)
    np.testing.assert_allclose(c, a * 2 + b, rtol=1e-6)


def test_bfloat16_and_float16_storage(rng: np.random.Generator) -> None:
    n = 77
    a32, b32 = rng.standard_normal(n).astype("float32"), rng.standard_normal(n).astype("float32")
    a, b = float32_to_bf16(a32), float32_to_bf16(b32)
    c = np.zeros(n, dtype="uint16")
    emulate(scale_add(n, 32, "bfloat16"), a, b, c)
    expect = float32_to_bf16(bf16_to_float32(a) * 2 + bf16_to_float32(b))
    np.testing.assert_array_equal(c, expect)
    h, g = a32.astype("float16"), b32.astype("float16")
    out = np.zeros(n, dtype="float16")
    emulate(scale_add(n, 32, "float16"), h, g, out)
    np.testing.assert_array_equal(out, h * np.float16(2) + g)


@pytest.mark.parametrize("alloc_in_loop", [False, True])
@pytest.mark.parametrize("shape", [(32, 32, 32), (70, 50, 33), (5, 17, 3)])
def test_tiled_matmul_with_barriers(
    shape: tuple, alloc_in_loop: bool, rng: np.random.Generator
) -> None:
    m, n, k = shape
    a = rng.standard_normal((m, k)).astype("float32")
    b = rng.standard_normal((k, n)).astype("float32")
    c = np.full((m, n), np.nan, dtype="float32")
    emulate(tiled_matmul(m, n, k, alloc_in_loop=alloc_in_loop), a, b, c)
    np.testing.assert_allclose(c, a @ b, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("n", [64, 200, 1000])
def test_block_tree_reduction(n: int, rng: np.random.Generator) -> None:
    a = rng.standard_normal(n).astype("float32")
    out = np.full(-(-n // 64), np.nan, dtype="float32")
    emulate(block_sum(n), a, out)
    padded = np.concatenate([a, np.zeros(-n % 64, "float32")]).reshape(-1, 64)
    np.testing.assert_allclose(out, padded.sum(axis=1), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("n", [1, 45, 96])
def test_local_arrays(n: int, rng: np.random.Generator) -> None:
    a = rng.standard_normal((n, 5)).astype("float32")
    out = np.full((n, 5), np.nan, dtype="float32")
    emulate(local_prefix(n), a, out)
    np.testing.assert_array_equal(out, np.maximum.accumulate(a, axis=1))


def test_vector_ramp_loads_and_stores(rng: np.random.Generator) -> None:
    """Each thread scales 4 contiguous elements with one vector load and store."""
    n, lanes, threads = 4 * 40, 4, 16
    ib = IRBuilder()
    a, out = ib.param((n,), name="A"), ib.param((n,), name="Out")
    with _bind(ib, 3, BX, "bx") as bx, _bind(ib, threads, TX, "tx") as tx:
        t = bx * threads + tx
        with ib.if_then_else(t < n // lanes):
            idx = Ramp("int32x4", t * lanes, const(1), lanes)
            two = Broadcast("float32x4", const(2.0), lanes)
            ib.emit(S.BufferStore(out, a[idx] * two + Broadcast("float32x4", a[t], 4), (idx,)))
    func = _kernel(ib, "vec", (3,), (threads,))
    x = rng.standard_normal(n).astype("float32")
    y = np.full(n, np.nan, dtype="float32")
    emulate(func, x, y)
    np.testing.assert_allclose(y, x * 2 + np.repeat(x[: n // lanes], lanes), rtol=1e-6)


def test_thread_dependent_serial_loop_and_integer_ops(rng: np.random.Generator) -> None:
    """``Out[t] = sum(A[0:t % 7])`` with C division on negative values: a per-thread trip count."""
    threads = 50
    ib = IRBuilder()
    a, out = ib.param((8,), "int32", name="A"), ib.param((threads,), "int32", name="Out")
    with _bind(ib, 1, BX, "bx"), _bind(ib, threads, TX, "tx") as tx:
        acc = ib.allocate((1,), "int32", scope="local", name="acc")
        ib.store(acc, 0, 0)
        with ib.for_range(0, tx % 7, name="j") as j:
            ib.store(acc, 0, acc[0] + a[j])
        ib.store(out, tx, truncdiv(acc[0] - 20, 3))
    func = _kernel(ib, "tri", (1,), (threads,))
    x = rng.integers(-9, 9, 8).astype("int32")
    y = np.zeros(threads, "int32")
    emulate(func, x, y)
    sums = np.array([x[: t % 7].sum() for t in range(threads)]) - 20
    np.testing.assert_array_equal(y, np.trunc(sums / 3).astype("int32"))


@settings(max_examples=examples(15), deadline=None)
@given(
    n=st.integers(1, 300),
    threads=st.sampled_from([1, 7, 32, 128]),
    seed=st.integers(0, 2**16),
)
def test_elementwise_any_shape(n: int, threads: int, seed: int) -> None:
    rng = np.random.default_rng(seed)
    a, b = rng.standard_normal(n).astype("float32"), rng.standard_normal(n).astype("float32")
    c = np.full(n, np.nan, dtype="float32")
    emulate(scale_add(n, threads), a, b, c)
    np.testing.assert_allclose(c, a * 2 + b, rtol=1e-6)


def test_matmul_256_is_fast(rng: np.random.Generator) -> None:
    a = rng.standard_normal((256, 256)).astype("float32")
    b = rng.standard_normal((256, 256)).astype("float32")
    c = np.zeros((256, 256), dtype="float32")
    func = tiled_matmul(256, 256, 256)
    start = time.perf_counter()
    emulate(func, a, b, c)
    elapsed = time.perf_counter() - start
    np.testing.assert_allclose(c, a @ b, rtol=1e-4, atol=1e-3)
    assert elapsed < 10, f"the 256^3 tiled matmul took {elapsed:.1f} s in the emulator"


# -- races -------------------------------------------------------------------------------


def _matmul_args(m: int, n: int, k: int, rng: np.random.Generator) -> tuple:
    return (
        rng.standard_normal((m, k)).astype("float32"),
        rng.standard_normal((k, n)).astype("float32"),
        np.zeros((m, n), dtype="float32"),
    )


def test_missing_barrier_is_a_read_after_write_race(rng: np.random.Generator) -> None:
    func = tiled_matmul(40, 40, 40, first_barrier=False)
    with pytest.raises(RaceError) as info:
        emulate(func, *_matmul_args(40, 40, 40, rng))
    msg = str(info.value)
    assert "read-after-write" in msg and "_shared[" in msg
    assert msg.count("block (") == 2 and msg.count("thread (") == 2
    assert "C_local[0] = " in msg and "barrier" in msg


@pytest.mark.parametrize("alloc_in_loop", [False, True])
def test_overwriting_a_tile_before_it_is_read_is_a_write_after_read_race(
    alloc_in_loop: bool, rng: np.random.Generator
) -> None:
    """Also when the allocation sits in the loop: a ``__shared__`` array is the same memory."""
    func = tiled_matmul(40, 40, 40, second=False, alloc_in_loop=alloc_in_loop)
    with pytest.raises(RaceError, match="write-after-read") as info:
        emulate(func, *_matmul_args(40, 40, 40, rng))
    assert "A_shared" in str(info.value)


def test_race_checks_can_be_turned_off(rng: np.random.Generator) -> None:
    args = _matmul_args(16, 16, 16, rng)
    emulate(tiled_matmul(16, 16, 16, first_barrier=False), *args, check_races=False)


def test_two_threads_writing_one_shared_element_race() -> None:
    ib = IRBuilder()
    out = ib.param((4,), name="Out")
    with _bind(ib, 1, BX, "bx"), _bind(ib, 4, TX, "tx") as tx:
        sh = ib.allocate((2,), scope="shared", name="sh")
        ib.store(sh, tx // 2, 1.0)
        ib.barrier()
        ib.store(out, tx, sh[tx // 2])
    with pytest.raises(RaceError, match=r"write-after-write.*'sh\[0\]'"):
        emulate(_kernel(ib, "waw", (1,), (4,)), np.zeros(4, "float32"))


def test_barrier_in_divergent_code() -> None:
    with pytest.raises(RaceError, match="barrier in divergent code") as info:
        emulate(block_sum(64, divergent_barrier=True), np.ones(64, "float32"), np.zeros(1, "f4"))
    assert "thread (" in str(info.value)


def test_barrier_under_a_block_uniform_condition_is_fine(rng: np.random.Generator) -> None:
    """A condition on blockIdx alone is the same for all threads of a block."""
    ib = IRBuilder()
    out = ib.param((4, 8), name="Out")
    with _bind(ib, 4, BX, "bx") as bx, _bind(ib, 8, TX, "tx") as tx:
        sh = ib.allocate((8,), scope="shared", name="sh")
        ib.store(sh, tx, bx * 10.0 + tx)
        with ib.if_then_else(bx < 2):
            ib.barrier()
            ib.store(out, bx * 8 + tx, sh[7 - tx])
        with ib.else_():
            ib.store(out, bx * 8 + tx, -1.0)
    y = np.zeros((4, 8), "float32")
    emulate(_kernel(ib, "uniform", (4,), (8,)), y)
    expect = np.array([[b * 10.0 + 7 - t if b < 2 else -1.0 for t in range(8)] for b in range(4)])
    np.testing.assert_array_equal(y, expect)


# -- bounds and arguments ------------------------------------------------------------------


def test_out_of_bounds_access_names_buffer_thread_and_statement() -> None:
    ib = IRBuilder()
    a, out = ib.param((10,), name="A"), ib.param((16,), name="Out")
    with _bind(ib, 2, BX, "bx") as bx, _bind(ib, 8, TX, "tx") as tx:
        ib.store(out, bx * 8 + tx, a[bx * 8 + tx])  # no tail guard: A has 10 elements
    with pytest.raises(ArgumentError) as info:
        emulate(_kernel(ib, "oob", (2,), (8,)), np.ones(10, "f4"), np.zeros(16, "f4"))
    msg = str(info.value)
    assert "'A'" in msg and "index 10" in msg and "block (1, 0, 0) thread (2, 0, 0)" in msg
    assert "Out[" in msg and "oob" in msg


def test_guarded_out_of_bounds_indices_are_not_accessed() -> None:
    """Threads masked off by a guard, ``&&`` or ``select`` never touch memory."""
    ib = IRBuilder()
    a, out = ib.param((10,), name="A"), ib.param((16,), name="Out")
    with _bind(ib, 16, TX, "tx") as tx:
        ok = (tx < 10) & (a[tx] > 0.0)
        ib.store(out, tx, select(ok, a[tx], const(-1.0)))
    x = np.linspace(-1, 1, 10).astype("float32")
    y = np.zeros(16, "float32")
    emulate(_kernel(ib, "guarded", (1,), (16,)), x, y)
    np.testing.assert_array_equal(y, np.concatenate([np.where(x > 0, x, -1), -np.ones(6)]))


def test_shared_out_of_bounds_is_an_error() -> None:
    ib = IRBuilder()
    out = ib.param((8,), name="Out")
    with _bind(ib, 8, TX, "tx") as tx:
        sh = ib.allocate((4,), scope="shared", name="tile")
        ib.store(sh, tx, 1.0)
        ib.store(out, tx, 0.0)
    with pytest.raises(ArgumentError, match=r"shared buffer 'tile' at index 4"):
        emulate(_kernel(ib, "sh_oob", (1,), (8,)), np.zeros(8, "f4"))


def test_argument_errors(rng: np.random.Generator) -> None:
    func = scale_add(100)
    a = rng.standard_normal(100).astype("float32")
    with pytest.raises(ArgumentError, match=r"takes 3 arguments \(A, B, C\), got 2"):
        emulate(func, a, a)
    with pytest.raises(ArgumentError, match=r"argument 'B' .* dtype float32, got float64"):
        emulate(func, a, a.astype("float64"), a)
    with pytest.raises(ArgumentError, match=r"argument 'C' .* shape \(100\), got \(99,\)"):
        emulate(func, a, a, a[:99].copy())
    with pytest.raises(ArgumentError, match="must be a numpy array, got list"):
        emulate(func, a, a, [0.0] * 100)
    with pytest.raises(ArgumentError, match="bfloat16 is passed as its uint16 bits"):
        emulate(scale_add(8, 8, "bfloat16"), *(np.zeros(8, "f4"),) * 3)


def test_not_a_kernel_is_an_argument_error() -> None:
    ib = IRBuilder()
    a = ib.param((4,), name="A")
    with ib.for_range(0, 4) as i:
        ib.store(a, i, 1.0)
    with pytest.raises(ArgumentError, match="not a device kernel"):
        emulate(ib.get_func("plain"), np.zeros(4, "f4"))
    with pytest.raises(ArgumentError, match="expected a device kernel PrimFunc"):
        compile_kernel("kernel")  # type: ignore[arg-type]


def test_non_contiguous_outputs_are_written_back(rng: np.random.Generator) -> None:
    n = 50
    a, b = rng.standard_normal(n).astype("float32"), rng.standard_normal(n).astype("float32")
    c = np.zeros((n, 2), dtype="float32")[:, 0]
    emulate(scale_add(n), a, b, c)
    np.testing.assert_allclose(c, a * 2 + b, rtol=1e-6)


# -- more shapes, chunking, vectors in shared/local, integer types ----------------------------


@settings(max_examples=examples(12), deadline=None)
@given(
    m=st.integers(1, 40),
    n=st.integers(1, 40),
    k=st.integers(1, 40),
    tile=st.sampled_from([4, 8]),
    lanes_per_chunk=st.sampled_from([16, 64, 1 << 16]),
)
def test_tiled_matmul_any_shape_and_chunking(
    m: int, n: int, k: int, tile: int, lanes_per_chunk: int
) -> None:
    """Blocks run in chunks of any size (down to one block) with the same result."""
    import ember.codegen_cuda.emulator.grid as grid

    rng = np.random.default_rng(m * 10000 + n * 100 + k)
    a, b, c = _matmul_args(m, n, k, rng)
    saved = grid.MAX_LANES
    grid.MAX_LANES = lanes_per_chunk
    try:
        emulate(tiled_matmul(m, n, k, tile=tile), a, b, c)
    finally:
        grid.MAX_LANES = saved
    np.testing.assert_allclose(c, a @ b, rtol=1e-4, atol=1e-4)


def test_vector_accesses_to_shared_and_local(rng: np.random.Generator) -> None:
    """Threads stage 4-wide vectors through shared memory, then reverse them via a local array."""
    threads, lanes, blocks = 8, 4, 3
    n = blocks * threads * lanes
    ib = IRBuilder()
    a, out = ib.param((n,), name="A"), ib.param((n,), name="Out")
    with _bind(ib, blocks, BX, "bx") as bx:
        sh = ib.allocate((threads * lanes,), scope="shared", name="stage")
        with _bind(ib, threads, TX, "tx") as tx:
            base = (bx * threads + tx) * lanes
            ib.emit(
                S.BufferStore(
                    sh,
                    a[Ramp("int32x4", base, const(1), lanes)],
                    (Ramp("int32x4", tx * lanes, const(1), lanes),),
                )
            )
            ib.barrier()
            loc = ib.allocate((lanes,), scope="local", name="vec")
            other = (threads - 1 - tx) * lanes  # read the tile another thread wrote
            ib.emit(
                S.BufferStore(
                    loc,
                    sh[Ramp("int32x4", other, const(1), lanes)],
                    (Ramp("int32x4", const(0), const(1), lanes),),
                )
            )
            with ib.for_range(0, lanes, name="j") as j:
                ib.store(out, base + j, loc[lanes - 1 - j])
    x = rng.standard_normal(n).astype("float32")
    y = np.full(n, np.nan, "float32")
    emulate(_kernel(ib, "vec_stage", (blocks,), (threads,)), x, y)
    expect = x.reshape(blocks, threads, lanes)[:, ::-1, ::-1].reshape(-1)
    np.testing.assert_array_equal(y, expect)


def test_integer_and_bool_types_with_masked_division(rng: np.random.Generator) -> None:
    """int8 inputs, a bool mask, int64 output; a division by zero only in masked-off threads."""
    n = 37
    ib = IRBuilder()
    x = ib.param((n,), "int8", name="X")
    keep = ib.param((n,), "bool", name="Keep")
    out = ib.param((n,), "int64", name="Out")
    with _bind(ib, 2, BX, "bx") as bx, _bind(ib, 32, TX, "tx") as tx:
        i = bx * 32 + tx
        with ib.if_then_else(i < n):
            wide = cast("int64", x[i])
            ib.store(out, i, select(keep[i], truncdiv(const(1000, "int64"), wide), wide * 3))
    xs = rng.integers(-100, 100, n).astype("int8")
    mask = rng.random(n) < 0.5
    xs[mask & (xs == 0)] = 1
    xs[np.flatnonzero(~mask)[:3]] = 0  # divisions by zero that the select discards
    ys = np.zeros(n, "int64")
    emulate(_kernel(ib, "ints", (2,), (32,)), xs, mask, ys)
    wide = xs.astype("int64")
    safe = np.where(wide == 0, 1, wide)
    expect = np.where(mask, np.trunc(1000 / safe).astype("int64"), wide * 3)
    np.testing.assert_array_equal(ys, expect)


def _exchange(threads: int, barrier: bool) -> S.PrimFunc:
    """Thread t writes ``sh[W[t]] = t`` then reads ``Out[t] = sh[R[t]]``."""
    ib = IRBuilder()
    w = ib.param((threads,), "int32", name="W")
    r = ib.param((threads,), "int32", name="R")
    out = ib.param((threads,), "int32", name="Out")
    with _bind(ib, 2, BX, "bx"), _bind(ib, threads, TX, "tx") as tx:
        sh = ib.allocate((threads,), "int32", scope="shared", name="sh")
        ib.store(sh, w[tx], tx)
        if barrier:
            ib.barrier()
        ib.store(out, tx, sh[r[tx]])
    return _kernel(ib, "exchange", (2,), (threads,))


@settings(max_examples=examples(30), deadline=None)
@given(data=st.data(), threads=st.integers(1, 12))
def test_race_reported_exactly_when_a_thread_reads_another_threads_write(
    data: st.DataObject, threads: int
) -> None:
    perm = st.permutations(list(range(threads)))
    w = np.array(data.draw(perm), dtype="int32")
    r = np.array(data.draw(perm), dtype="int32")
    out = np.zeros(threads, "int32")
    emulate(_exchange(threads, barrier=True), w, r, out)
    writer = np.argsort(w)  # writer[e]: the thread that wrote element e
    np.testing.assert_array_equal(out, writer[r])
    if np.array_equal(w, r):
        emulate(_exchange(threads, barrier=False), w, r, out)
    else:
        with pytest.raises(RaceError, match="read-after-write"):
            emulate(_exchange(threads, barrier=False), w, r, out)


def test_symbolic_shapes_bind_from_arguments(rng: np.random.Generator) -> None:
    n = Var("n")
    ib = IRBuilder()
    a, out = ib.param((n,), name="A"), ib.param((n,), name="Out")
    with _bind(ib, 4, BX, "bx") as bx, _bind(ib, 32, TX, "tx") as tx:
        i = bx * 32 + tx
        with ib.if_then_else(i < n):
            ib.store(out, i, a[i] + 1.0)
    func = _kernel(ib, "sym", (4,), (32,))
    x = rng.standard_normal(100).astype("float32")
    y = np.zeros(100, "float32")
    emulate(func, x, y)
    np.testing.assert_array_equal(y, x + 1)
    with pytest.raises(ArgumentError, match=r"argument 'Out' .* shape \(n\), got \(99,\)"):
        emulate(func, x, y[:99])


def test_assert_checks_active_threads_only() -> None:
    ib = IRBuilder()
    out = ib.param((8,), name="Out")
    with _bind(ib, 8, TX, "tx") as tx:
        with ib.if_then_else(tx < 4):
            ib.assert_(tx < 4, "never fails for the threads that run it")
            ib.assert_(tx < 3, "thread index too large")
            ib.store(out, tx, 1.0)
    with pytest.raises(ArgumentError, match="thread index too large"):
        emulate(_kernel(ib, "asserts", (1,), (8,)), np.zeros(8, "f4"))


def _one_loop_kernel(tag: str, extent: int, launch: int, scope: str = "shared") -> S.PrimFunc:
    ib = IRBuilder()
    out = ib.param((64,), name="Out")
    with _bind(ib, extent, tag, "t") as t:
        tmp = ib.allocate((64,), scope=scope, name="tmp")
        ib.store(tmp, t, 1.0)
        ib.store(out, t, tmp[t])
    return _kernel(ib, "bad", (1,), (launch,))


@pytest.mark.parametrize(
    ("func", "phrase"),
    [
        (_one_loop_kernel(TX, 64, 32), "needs 64 values of threadIdx.x but the kernel is launched"),
        (_one_loop_kernel("vthread", 4, 4), "unknown thread tag 'vthread'"),
        (_one_loop_kernel(TX, 4, 4, scope="global"), "in scope 'global' inside a kernel"),
    ],
)
def test_malformed_kernels_are_internal_errors(func: S.PrimFunc, phrase: str) -> None:
    with pytest.raises(InternalError, match=phrase):
        emulate(func, np.zeros(64, "f4"))
