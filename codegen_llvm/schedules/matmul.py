"""CPU templates for ``matmul`` (``A @ B``) and ``dense`` (``X @ W.T``), and the GEMM helpers
that ``batch_matmul`` shares.

The schedule is the classic register-blocked GEMM. B is packed into panels
``packed[..., N/nr, K, nr]`` so the micro-kernel reads it with unit stride; each
``mr x nr`` tile of C is accumulated in a small local buffer that LLVM keeps in
vector registers (``mr`` rows unrolled, ``nr`` lanes vectorized, the ``k`` loop
unrolled by ``ku``), then copied out. Tiles are grouped into ``nc``-wide column
blocks so one block of packed B stays in the L2 cache while every row block of A
streams past it. The ``pack`` knob says where B is packed: ``"ahead"``, all of it
in a parallel pass before the product (the column-block and row-block loops, fused
with any batch axes, then run in parallel); ``"block"``, one column block at a time
inside the parallel column-block loop, into a buffer that stays in that thread's
L2, so packed B never goes out to memory and back (the row blocks then run in
order within their column block); ``"none"``, B read in place.
Shapes that the tiles do not divide are handled by the guards lowering adds and
loop partitioning confines to the edge tiles. A one-row ``matmul`` (a GEMV) may
instead stream B in memory order with K split across threads
(:mod:`ember.codegen_llvm.schedules.gemv`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ember.codegen_llvm.cpu_features import vector_unit
from ember.codegen_llvm.schedules.gemv import define_gemv_knobs, schedule_gemv_stream
from ember.tir import expr as E
from ember.tir.schedule.schedule import Schedule, create_schedule
from ember.tir.te import operation as te
from ember.tir.te.tensor import Tensor
from ember.tir.topi.nn import dense, matmul
from ember.tuner.template import get_config, template


@dataclass(frozen=True)
class GemmTiles:
    """Tile sizes of the GEMM micro-kernel: ``mr`` rows x ``nr`` lanes, ``k`` unrolled by
    ``ku``, ``nc_panels`` panels of packed B per parallel column block."""

    mr: int
    nr: int
    ku: int
    nc_panels: int


def define_gemm_knobs(M: int, N: int, whole_blocks: bool = False) -> GemmTiles:
    """Define the GEMM knobs on the running template's config and read them.

    Defaults: a 6 x 64 micro-kernel (24 AVX-512 accumulators; 6 x 16 on AVX2:
    :attr:`~ember.codegen_llvm.cpu_features.VectorUnit.gemm_rows`), whose A rows stay in
    L1 while packed B streams from L2. A panel is never wider than needed for N.
    With a single row (a GEMV) the kernel is one row by 256 lanes instead: the
    same 16 accumulators, and four times fewer passes over B's rows. ``whole_blocks``:
    the default column block (``nr * nc_panels``) divides N where a narrower one can
    (:func:`whole_column_block`).
    """
    cfg = get_config()
    nrs = [16, 32, 48, 64, 128, 256]
    unit = vector_unit()
    lanes, acc = unit.lanes("float32"), unit.accumulators[1]
    if M < 2:  # AVX-512: 1 x 256 (16 registers); AVX2: 1 x 64 (8 of its 12)
        mr, nr = 1, max(n for n in nrs if n <= lanes * acc)
    else:  # AVX-512: 6 x 64; AVX2: 6 x 16 (3 x 32 spilled and ran 2.1x slower)
        mr, nr = unit.gemm_rows, unit.row_lanes("float32")
    nr = next((n for n in nrs if n >= min(N, nr)), nr)
    nc_panels = 2 if M >= 2 else 1
    if whole_blocks:
        nr, nc_panels = whole_column_block(N, nr, nc_panels)
    cfg.define_knob("mr", sorted({mr, 1, 2, 4, 6, 8, 12}), default=mr)
    cfg.define_knob("nr", nrs, default=nr)
    cfg.define_knob("ku", [1, 2, 4, 8], default=4)
    cfg.define_knob("nc_panels", [1, 2, 4, 8], default=nc_panels)
    return GemmTiles(cfg["mr"].val, cfg["nr"].val, cfg["ku"].val, cfg["nc_panels"].val)


def whole_column_block(N: int, nr: int, nc_panels: int) -> tuple[int, int]:
    """``(nr, nc_panels)`` narrowed, by halving the panel (down to 16 lanes) and then
    dropping to one panel a block, until a column block divides ``N``; unchanged where
    none does. :func:`schedule_gemm` splits the columns by the block, and a partial last
    block ran 2-7x slower than whole ones: Winograd's GEMMs on a 2-core Intel Xeon
    (AVX-512), one thread, 64 x 64 at 56x56 1.68 ms with 4 x 64 x 2 panels against 0.90
    with one panel, 160 channels at 14x14 2.96 ms against 0.36 with 32-lane panels, 96 at
    28x28 3.3 ms on 64-lane panels alone against 0.45."""
    for width in (nr, nr // 2, nr // 4):
        if width >= 16 and N % width == 0:
            return width, nc_panels if N % (width * nc_panels) == 0 else 1
    return nr, nc_panels


def pack_panels(B: Tensor, nr: int, transposed: bool) -> Tensor:
    """``packed[..., x, k, z] = B[..., k, x*nr + z]`` (``B[..., x*nr + z, k]`` when
    ``transposed``), zero past N; leading axes of B are batch axes."""
    shape = [int(s.value) for s in B.shape]  # type: ignore[attr-defined]
    *batch, K, N = shape
    if transposed:
        N, K = K, N
    panels = -(-N // nr)

    def f(*idx):  # noqa: ANN002, ANN202
        *b, x, k, z = idx
        col = x * nr + z
        safe = E.min_(col, N - 1)
        value = B[(*b, safe, k)] if transposed else B[(*b, k, safe)]
        return E.select(col < N, value, E.const(0, B.dtype))

    return te.compute((*batch, panels, K, nr), f, name=f"{B.name}_packed")


def schedule_gemm(
    s: Schedule,
    C: Tensor,
    packed: Tensor | None,
    tiles: GemmTiles,
    pack_per_block: bool = False,
    out: Tensor | None = None,
) -> None:
    """Schedule ``C[..., i, j] = sum_k A[..., i, k] * packed[..., j // nr, k, j % nr]``.

    Leading (batch) axes of C are fused with the column-block and row-block loops
    into one parallel loop, or, with ``pack_per_block``, with the column-block loop
    alone, inside which the block's panels are packed; ``C`` must not have been
    scheduled yet. ``out``, where given, is an elementwise stage of C's shape reading C
    at its own indices (an epilogue: bias, residual, activation, every stage between
    inlined): C is inlined into it and ``out`` takes C's loops, so each register tile
    goes through the epilogue as it is stored, instead of C being written whole and
    read back by a second parallel loop.
    """
    mr, nr, ku = tiles.mr, tiles.nr, tiles.ku
    acc = s.cache_write(C, "local")
    T = C
    if out is not None and out.op is not C.op:
        s[C].compute_inline()
        T = out
    *lead, i, j = s[T].op.axis
    jb, ji = s[T].split(j, factor=nr * tiles.nc_panels)
    io, ii = s[T].split(i, factor=mr)
    jo, jt = s[T].split(ji, factor=nr)
    s[T].reorder(*lead, jb, io, jo, ii, jt)
    s[T].vectorize(jt)
    per_block = pack_per_block and packed is not None
    outer = s[T].fuse(*lead, jb) if per_block else s[T].fuse(*lead, jb, io)
    s[T].parallel(outer)
    s[acc].compute_at(s[T], jo)
    *_, ic, jc = s[acc].op.axis
    (kk,) = s[acc].op.reduce_axis
    ko, ki = s[acc].split(kk, factor=ku)
    s[acc].reorder(ko, ki, ic, jc)
    s[acc].unroll(ki)
    s[acc].unroll(ic)
    s[acc].vectorize(jc)
    if packed is not None:
        *pb, x, _, z = s[packed].op.axis
        s[packed].vectorize(z)
        if per_block:
            s[packed].compute_at(s[T], outer)
        else:
            s[packed].parallel(s[packed].fuse(*pb, x))


def _gemm(M: int, N: int, K: int, dtype: str, transposed: bool) -> tuple[Schedule, list[Tensor]]:
    tiles = define_gemm_knobs(M, N)
    nr = tiles.nr
    pack = define_pack_knob(M, N, tiles, transposed)
    stream, k_split = define_gemv_knobs(M) if not transposed else (False, 1)
    A = te.placeholder((M, K), dtype, name="A")
    B = te.placeholder((N, K) if transposed else (K, N), dtype, name="B")
    packed = pack_panels(B, nr, transposed) if pack != "none" and not stream else None
    if packed is None:  # a GEMV or a few rows read B in place (dense always packs)
        C = matmul(A, B, "C")
    elif transposed:
        C = dense(A, B, "C", read_w=lambda j, k: packed[j // nr, k, j % nr])
    else:
        C = matmul(A, B, "C", read_b=lambda k, j: packed[j // nr, k, j % nr])
    s = create_schedule(C.op)
    if stream:
        schedule_gemv_stream(s, C, nr, tiles.ku, k_split)
    else:
        schedule_gemm(s, C, packed, tiles, pack_per_block=pack == "block")
    return s, [A, B, C]


def define_pack_knob(M: int, N: int, tiles: GemmTiles, transposed: bool) -> str:
    """Define the ``pack`` knob (see the module notes) and read it; ``dense`` reads
    ``"none"`` as ``"ahead"``, as its B rows run along k, not along the vector lanes.

    Packing B costs a pass over it; it pays only when many row blocks reuse each
    panel, so a few rows (a GEMV, a small batch) read B in place by default. Packing
    per block saved 8-10% at 128x3072x768 on a 2-core AVX-512 machine (packed B is
    9.4 MB there) and never lost where there were at least 8 column blocks to share
    out, so it is the default from there on; below, packing ahead keeps the row
    blocks in the parallel loop for the threads to share.
    """
    cfg = get_config()
    blocks = -(-N // (tiles.nr * tiles.nc_panels))
    if not (transposed or M >= 4 * tiles.mr):
        default = "none"
    else:
        default = "block" if blocks >= 8 else "ahead"
    cfg.define_knob("pack", ["ahead", "block", "none"], default=default)
    pack = cfg["pack"].val
    return "ahead" if transposed and pack == "none" else pack


def _matmul_reference(a: Any, b: Any) -> Any:
    return a @ b


def _dense_reference(x: Any, w: Any) -> Any:
    return x @ w.T


@template("matmul.llvm", version=2, reference=_matmul_reference)  # 2: pack per block
def matmul_llvm(M: int, N: int, K: int, dtype: str = "float32") -> tuple[Schedule, list[Any]]:
    """``C = A @ B`` with A of shape (M, K) and B of shape (K, N)."""
    return _gemm(M, N, K, dtype, transposed=False)


@template("dense.llvm", version=2, reference=_dense_reference)  # 2: pack per block
def dense_llvm(M: int, N: int, K: int, dtype: str = "float32") -> tuple[Schedule, list[Any]]:
    """``Y = X @ W.T`` with X of shape (M, K) and weights W of shape (N, K)."""
    return _gemm(M, N, K, dtype, transposed=True)
