"""emulate(..., profile=True): sectors per warp request and shared bank conflicts, by hand."""

from __future__ import annotations

import re

import numpy as np
import pytest

import ember
from ember.codegen_cuda.emulator import emulate
from ember.codegen_cuda.emulator.profile import SECTOR_BYTES, WARP
from ember.tir import expr as E
from ember.tir.ir_builder import IRBuilder
from tests.codegen_cuda.handmade_kernels import _bind, _kernel


def _strided_copy(stride: int, n: int = 64):
    """B[t] = A[t * stride]: one warp request per 32 threads."""
    ib = IRBuilder()
    A = ib.param((n * stride,), "float32", name="A")
    B = ib.param((n,), "float32", name="B")
    with _bind(ib, n, "threadIdx.x", "tx") as tx:
        ib.store(B, tx, A[tx * stride])
    return _kernel(ib, "strided", (1, 1, 1), (n, 1, 1)), n * stride, n


def _shared_stride(stride: int):
    """Each of 32 threads writes and reads S[t * stride] of a shared array."""
    ib = IRBuilder()
    A = ib.param((32,), "float32", name="A")
    B = ib.param((32,), "float32", name="B")
    S = ib.allocate((32 * stride,), "float32", scope="shared", name="S")
    with _bind(ib, 32, "threadIdx.x", "tx") as tx:
        ib.store(S, tx * stride, A[tx])
        ib.store(B, tx, S[tx * stride] + E.const(1.0))
    return _kernel(ib, "bank", (1, 1, 1), (32, 1, 1))


@pytest.mark.parametrize("stride,sectors", [(1, 4), (2, 8), (32, 32)])
def test_global_sectors_per_request(rng, stride, sectors):
    kernel, n_in, n_out = _strided_copy(stride)
    a = rng.uniform(-1, 1, n_in).astype("float32")
    b = np.empty(n_out, "float32")
    prof = emulate(kernel, a, b, profile=True)
    np.testing.assert_array_equal(b, a[::stride])
    assert prof.global_load_requests == 2  # 64 threads = 2 warps
    assert prof.global_load_sectors == 2 * sectors
    assert prof.global_store_sectors == 2 * 4
    load_site = next(iter(prof.global_loads))
    assert f"A[tx * {stride}]" in load_site or stride == 1


@pytest.mark.parametrize("stride,extra", [(1, 0), (2, 1), (32, 31), (33, 0)])
def test_shared_bank_conflicts(rng, stride, extra):
    kernel = _shared_stride(stride)
    a = rng.uniform(-1, 1, 32).astype("float32")
    b = np.empty(32, "float32")
    prof = emulate(kernel, a, b, profile=True)
    np.testing.assert_allclose(b, a + 1)
    assert prof.shared_store_requests == 1 and prof.shared_load_requests == 1
    assert prof.shared_bank_conflicts == 2 * extra
    assert "bank conflicts" in str(prof)


def test_profile_off_returns_none(rng):
    kernel, n_in, n_out = _strided_copy(1)
    assert emulate(kernel, np.ones(n_in, "float32"), np.empty(n_out, "float32")) is None


def test_module_profile_of_matmul_template(rng):
    from ember.tuner import create_task

    task = create_task("matmul.cuda", args=(64, 64, 32, "float32"), target="cuda")
    s, args = task.instantiate()
    mod = ember.build(s, args, target="cuda")
    a = rng.uniform(-1, 1, (64, 32)).astype("float32")
    b = rng.uniform(-1, 1, (32, 64)).astype("float32")
    c = np.empty((64, 64), "float32")
    (prof,) = mod.emulate(a, b, c, profile=True)
    np.testing.assert_allclose(c, a @ b, rtol=1e-4, atol=1e-4)
    assert prof.global_load_requests > 0 and prof.shared_load_requests > 0
    assert mod.emulate(a, b, c) is None


def _broadcast_read(read_index):  # noqa: ANN001, ANN202 - read_index(tx) -> index into S
    """Every thread stores S[t]; after a barrier each reads S[read_index(t)]."""
    ib = IRBuilder()
    A = ib.param((64,), "float32", name="A")
    B = ib.param((32,), "float32", name="B")
    S = ib.allocate((64,), "float32", scope="shared", name="S")
    with _bind(ib, 32, "threadIdx.x", "tx") as tx:
        ib.store(S, tx, A[tx])
        ib.store(S, tx + 32, A[tx + 32])
        ib.barrier()
        ib.store(B, tx, S[read_index(tx)])
    return _kernel(ib, "broadcast", (1, 1, 1), (32, 1, 1))


@pytest.mark.parametrize(
    "read_index,words,extra",
    [
        (lambda tx: E.const(0), [0] * 32, 0),  # one word for the whole warp: a broadcast
        (lambda tx: tx % 2, [0, 1] * 16, 0),  # two words in two banks
        (lambda tx: tx % 2 * 32, [0, 32] * 16, 1),  # two words in one bank: 2-way
    ],
    ids=["one-word", "two-banks", "one-bank-two-words"],
)
def test_shared_broadcast_is_not_a_conflict(rng, read_index, words, extra):
    kernel = _broadcast_read(read_index)
    a = rng.uniform(-1, 1, 64).astype("float32")
    b = np.full(32, np.nan, "float32")
    prof = emulate(kernel, a, b, profile=True)
    np.testing.assert_array_equal(b, a[words])
    ((site, load),) = prof.shared_loads.items()
    assert site.startswith("B[tx] = S[")
    assert load.requests == 1 and load.conflicts == extra
    assert all(st.conflicts == 0 for st in prof.shared_stores.values())


def _transpose(pitch: int):
    """A 32x32 tile through shared memory: stored by rows, read by columns (``pitch`` words)."""
    ib = IRBuilder()
    A = ib.param((32 * 32,), "float32", name="A")
    B = ib.param((32 * 32,), "float32", name="B")
    S = ib.allocate((32 * pitch,), "float32", scope="shared", name="S")
    with _bind(ib, 32, "threadIdx.y", "ty") as ty, _bind(ib, 32, "threadIdx.x", "tx") as tx:
        ib.store(S, ty * pitch + tx, A[ty * 32 + tx])
        ib.barrier()
        ib.store(B, ty * 32 + tx, S[tx * pitch + ty])
    return _kernel(ib, "transpose", (1, 1, 1), (32, 32, 1))


@pytest.mark.parametrize("pitch,extra", [(32, 31), (33, 0)])  # 33: the padding that fixes it
def test_transposed_shared_read_in_the_per_statement_breakdown(rng, pitch, extra):
    a = rng.uniform(-1, 1, 32 * 32).astype("float32")
    b = np.full_like(a, np.nan)
    prof = emulate(_transpose(pitch), a, b, profile=True)
    np.testing.assert_array_equal(b.reshape(32, 32), a.reshape(32, 32).T)
    # One warp per threadIdx.y row; its 32 lanes read one column: 32 words, `pitch` apart.
    (read,) = [st for site, st in prof.shared_loads.items() if f"S[tx * {pitch} + ty]" in site]
    assert read.requests == 32 and read.conflicts == 32 * extra
    (write,) = prof.shared_stores.values()
    assert write.requests == 32 and write.conflicts == 0
    assert prof.shared_bank_conflicts == 32 * extra
    assert f"{extra:6.2f} conflicts/request" in str(prof)


def _matmul_profile(rng, M: int, N: int, K: int):  # noqa: ANN001, ANN202
    from ember.tuner import create_task
    from ember.tuner.space import FallbackConfig

    task = create_task("matmul.cuda", args=(M, N, K, "float32"), target="cuda")
    cfg = FallbackConfig()
    s, args = task.instantiate(cfg)
    mod = ember.build(s, args, target="cuda")
    a = rng.uniform(-1, 1, (M, K)).astype("float32")
    b = rng.uniform(-1, 1, (K, N)).astype("float32")
    c = np.full((M, N), np.nan, "float32")
    (prof,) = mod.emulate(a, b, c, profile=True)
    np.testing.assert_allclose(c, a @ b, rtol=1e-4, atol=1e-4)
    return cfg, mod, prof


_READS_GLOBAL_B = re.compile(r"(?<![\w.])B\[")  # B[...], not B.shared[...]


def test_matmul_template_global_loads_of_b_coalesce(rng):
    M, N, K = 64, 64, 32
    cfg, mod, prof = _matmul_profile(rng, M, N, K)
    vector = cfg["fetch_vector"].val  # the fetch is vectorized when rows stay aligned ...
    assert K % vector == 0 and N % vector == 0 and cfg["bn"].val % vector == 0  # ... as here
    # A warp's B fetch covers 32 * vector consecutive floats of whole tile rows (bn * 4 bytes,
    # a multiple of 32): the fewest sectors that can hold them.
    ideal = WARP * vector * 4 // SECTOR_BYTES
    b_loads = [st for site, st in prof.global_loads.items() if _READS_GLOBAL_B.search(site)]
    assert b_loads, list(prof.global_loads)
    for st in b_loads:
        assert st.sectors == ideal * st.requests, (st, ideal)
    # and every byte of B is fetched once per block row of C
    grid, _ = mod.kernels[0].attr("launch")
    assert sum(st.sectors for st in b_loads) * SECTOR_BYTES == K * N * 4 * grid[1]


def test_matmul_template_reads_shared_tiles_without_conflicts(rng):
    # B: each thread reads its tn columns as one vector (a quarter warp covers 32 banks);
    # A: its rows are padded so the threadIdx.y rows a warp reads fall in different banks
    _, _, prof = _matmul_profile(rng, 64, 64, 32)
    reads = {site: st for site, st in prof.shared_loads.items() if ".shared[" in site}
    assert any("B.shared[ramp(" in site for site in reads), list(reads)
    assert any("A.shared[" in site for site in reads), list(reads)
    assert {site: st.conflicts for site, st in reads.items()} == dict.fromkeys(reads, 0)


def test_matmul_template_writes_c_as_vectors(rng):
    _, _, prof = _matmul_profile(rng, 64, 64, 32)
    stores = prof.global_stores
    assert len(stores) == 4  # one per row of the 4x4 thread tile, unrolled
    for site, st in stores.items():
        assert "C[ramp(" in site
        assert st.sectors / st.requests == 16  # 32 threads x 16 bytes, nothing wasted


def _shared_vector(stride: int):
    """Each of 32 threads writes and reads the float4 S[t * stride : t * stride + 4]."""
    ib = IRBuilder()
    A = ib.param((128,), "float32", name="A")
    B = ib.param((128,), "float32", name="B")
    S = ib.allocate((32 * stride,), "float32", scope="shared", name="S")
    with _bind(ib, 32, "threadIdx.x", "tx") as tx:
        src = E.Ramp("int32x4", tx * 4, E.const(1), 4)
        dst = E.Ramp("int32x4", tx * stride, E.const(1), 4)
        ib.store(S, dst, A[src])
        ib.store(B, src, S[dst])
    return _kernel(ib, "bank4", (1, 1, 1), (32, 1, 1))


@pytest.mark.parametrize("stride,extra", [(4, 0), (8, 1), (12, 0), (32, 7)])
def test_vector_shared_accesses_count_per_quarter_warp(rng, stride, extra):
    # 16-byte accesses are served 8 threads (128 bytes) at a time: contiguous float4s are
    # conflict-free; a stride of 8 words puts threads t and t + 4 of a quarter in one bank
    kernel = _shared_vector(stride)
    a = rng.uniform(-1, 1, 128).astype("float32")
    b = np.empty(128, "float32")
    prof = emulate(kernel, a, b, profile=True)
    want = np.concatenate([a[4 * t : 4 * t + 4] for t in range(32)])
    np.testing.assert_array_equal(b, want)
    assert prof.shared_bank_conflicts == 2 * 4 * extra  # store and load, four quarters each


def _many_blocks(blocks: int, stride: int):
    """B[b*32 + t] = A[(b*32 + t) * stride] over ``blocks`` blocks of 32 threads."""
    ib = IRBuilder()
    n = blocks * 32
    A = ib.param((n * stride,), "float32", name="A")
    B = ib.param((n,), "float32", name="B")
    with _bind(ib, blocks, "blockIdx.x", "bx") as bx:
        with _bind(ib, 32, "threadIdx.x", "tx") as tx:
            ib.store(B, bx * 32 + tx, A[(bx * 32 + tx) * stride])
    return _kernel(ib, "many", (blocks, 1, 1), (32, 1, 1)), n * stride, n


def test_profile_of_a_large_grid_counts_a_sample_of_blocks(rng, monkeypatch):
    """A large grid is profiled on its first blocks (a 1024^3 GEMM took 11 minutes whole),
    says so, still computes every output, and gives the whole grid's per-request ratio."""
    from ember.codegen_cuda import emulator
    from ember.codegen_cuda.emulator.profile import PROFILE_BLOCKS

    blocks = 4 * PROFILE_BLOCKS + 3
    kernel, n_in, n_out = _many_blocks(blocks, stride=2)
    a = rng.uniform(-1, 1, n_in).astype("float32")
    b = np.empty(n_out, "float32")
    prof = emulate(kernel, a, b, profile=True)
    np.testing.assert_array_equal(b, a[::2])
    assert prof.blocks_total == blocks
    assert PROFILE_BLOCKS <= prof.blocks_profiled < blocks
    assert prof.global_load_requests == prof.blocks_profiled  # one warp per block
    assert f"of {blocks} blocks counted" in str(prof)
    monkeypatch.setattr(emulator, "PROFILE_BLOCKS", 10**9)
    whole = emulate(kernel, a, np.empty(n_out, "float32"), profile=True)
    assert whole.blocks_profiled == blocks and "blocks counted" not in str(whole)
    assert whole.sectors_per_request == pytest.approx(prof.sectors_per_request)
