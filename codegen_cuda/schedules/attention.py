"""The GPU's fused attention kernel: softmax(Q Kᵀ · scale + mask) V without the score matrix.

The CUDA counterpart of ``codegen_llvm/schedules/attention.py``: ``fuse_attention`` makes
one ``attention`` node of the exporters' MatMul → scale → mask → Softmax → MatMul chain,
and the CUDA strategy runs it here. Like the CPU kernel it is TIR written with an
:class:`IRBuilder` (an online softmax carries a running maximum, a running sum and a
rescaled accumulator across key blocks, which a tensor expression cannot say), here with
its loops bound to blocks and threads.

One thread block takes ``rows`` query rows of one (batch, head): ``blockIdx.x`` the query
block, ``blockIdx.y`` the head, one thread per query row (flash attention's first form,
a row per thread). The block's threads copy ``block_k`` keys and their values into shared
memory together (consecutive threads read consecutive features), wait, and each thread
walks the block ``CHUNK`` keys at a time: the chunk's scores (its Q row held in registers,
K read from shared memory, which every thread of a warp reads at the same address: a
broadcast), their maximum, one rescale of the accumulator by ``exp(m_old - m_new)`` per
chunk, and ``P V`` added into ``Dv`` accumulator registers. Every array a thread owns is
indexed by unrolled loops only, so NVRTC keeps it in registers. Memory beyond Q, K, V and
the output: the block's ``block_k · (D + Dv)`` shared floats. Nothing grows with the
square of the sequence.

Edges: a query row past the end computes a copy of the last row (its Q and mask reads are
clamped) and stores nothing; keys past the end score ``-inf`` (weight 0) and their shared
slots hold zeros. A row whose scores are all ``-inf`` keeps ``m = -inf``, the exponents
then subtract 0 instead (no ``-inf - -inf``), and the row ends as ``0 / 0`` (NaN), as the
unfused softmax does.

Where it is weak (not measured yet on a GPU): a decode step (one query row) keeps one
thread of each warp busy, and heads wider than :data:`MAX_HEAD_DIM` features would spill
the registers, so those take the op's unfused compute (the strategy asks :func:`fits`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ember.codegen_cuda.schedules.common import MAX_GRID_YZ
from ember.tir import expr as E
from ember.tir import op as T
from ember.tir.buffer import Buffer
from ember.tir.te.tensor import Tensor
from ember.tir.topi.attention import (
    AttentionLayout,
    KernelWriter,
    at,
    attention_extern,
    mask_at,
    sizes_of,
)

CHUNK = 8  # keys scored, then folded into the softmax, at a time (registers per thread)
MAX_HEAD_DIM = 64  # Q and the accumulator (D + Dv floats) live in each thread's registers:
# 168-254 of them at 64 (sm_90, sm_80), none spilled; at 128, 470 bytes spilled on both
SHARED_FLOATS = 8192  # the key and value block: 32 KiB, under the 48 KiB static limit
MAX_BLOCK_K = 64
WARP = 32


@dataclass(frozen=True)
class _Shape:
    """The sizes and blocks of one kernel (logical B, H, Sq, Sk, D, Dv)."""

    B: int
    H: int
    Sq: int
    Sk: int
    D: int
    Dv: int
    rows: int  # query rows per thread block: its threads
    bk: int  # keys per shared block, a multiple of CHUNK

    @property
    def q_blocks(self) -> int:
        return -(-self.Sq // self.rows)

    @property
    def k_blocks(self) -> int:
        return -(-self.Sk // self.bk)


def fits(D: int, Dv: int, heads: int = 1) -> bool:
    """Whether ``heads`` heads (batch times heads: the grid's y) of ``D`` query/key and
    ``Dv`` value features take this kernel."""
    return 0 < D <= MAX_HEAD_DIM and 0 < Dv <= MAX_HEAD_DIM and 0 < heads <= MAX_GRID_YZ


def block_keys(D: int, Dv: int) -> int:
    """Keys per shared block: as many whole chunks as :data:`SHARED_FLOATS` holds, up to
    :data:`MAX_BLOCK_K`."""
    return max(CHUNK, min(MAX_BLOCK_K, SHARED_FLOATS // (D + Dv) // CHUNK * CHUNK))


def flash_attention_cuda(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    mask: Tensor | None,
    scale: float,
    layout: AttentionLayout,
    rows: int = 64,
) -> Tensor:
    """``softmax(Q Kᵀ · scale + mask) V`` as one extern stage of a CUDA kernel (see the
    module notes); ``rows`` threads per block, fewer (whole warps) for short queries."""
    B, H, Sq, Sk, D, Dv = sizes_of(q, k, v, layout)
    rows = min(rows, -(-Sq // WARP) * WARP)
    shape = _Shape(B, H, Sq, Sk, D, Dv, rows, min(block_keys(D, Dv), -(-Sk // CHUNK) * CHUNK))

    return attention_extern(q, k, v, mask, layout, scale, _Kernel, shape)


class _Kernel(KernelWriter):
    """Writes the kernel's TIR: one method per step of a thread's work."""

    n: _Shape

    def build(self) -> Any:
        n, ib = self.n, self.ib
        with ib.for_range(0, n.q_blocks, "qb", "thread_binding", thread_tag="blockIdx.x") as qb:
            with ib.for_range(0, n.B * n.H, "bh", "thread_binding", thread_tag="blockIdx.y") as bh:
                ks = ib.allocate((n.bk * n.D,), self.dtype, "shared", "k_block")
                vs = ib.allocate((n.bk * n.Dv,), self.dtype, "shared", "v_block")
                tx_loop = ib.for_range(0, n.rows, "tx", "thread_binding", thread_tag="threadIdx.x")
                with tx_loop as tx:
                    self.thread(ks, vs, bh // n.H, bh % n.H, qb * n.rows + tx, tx)
        return ib.get()

    def thread(self, ks: Buffer, vs: Buffer, b: Any, h: Any, i: Any, tx: Any) -> None:
        """Query row ``i`` (thread ``tx`` of its block): load Q, walk the key blocks, store."""
        n, ib = self.n, self.ib
        row = E.min_(i, n.Sq - 1)  # rows past the end compute the last row's copy
        qr = ib.allocate((n.D,), self.dtype, "local", "q_row")
        acc = ib.allocate((n.Dv,), self.dtype, "local", "acc")
        m = ib.allocate((1,), self.dtype, "local", "row_max")
        lsum = ib.allocate((1,), self.dtype, "local", "row_sum")
        s = ib.allocate((CHUNK,), self.dtype, "local", "scores")
        with ib.for_range(0, n.D, "d", "unrolled") as d:
            ib.store(qr, d, at(self.Q, self.layout, "q", b, h, row, d))
        with ib.for_range(0, n.Dv, "e", "unrolled") as e:
            ib.store(acc, e, self.const(0.0))
        ib.store(m, 0, self.const(float("-inf")))
        ib.store(lsum, 0, self.const(0.0))
        with ib.for_range(0, n.k_blocks, "kb") as kb:
            j0 = kb * n.bk
            self.load_block(ks, self.K, "k", n.D, b, h, j0, tx)
            self.load_block(vs, self.V, "v", n.Dv, b, h, j0, tx)
            ib.barrier()
            with ib.for_range(0, n.bk // CHUNK, "c") as c:
                jc = c * CHUNK
                self.scores(s, qr, ks, b, h, row, j0 + jc, jc)
                self.online_softmax(s, acc, m, lsum)
                self.add_values(s, acc, vs, jc)
            ib.barrier()  # every thread done with the block before the next overwrites it
        with ib.if_then_else(i < n.Sq):
            inv = ib.let("inv", self.const(1.0) / lsum[0])
            with ib.for_range(0, n.Dv, "e", "unrolled") as e:
                ib.store(self.O, self.layout.index("out", b, h, i, e), acc[e] * inv)

    def load_block(
        self, dst: Buffer, src: Buffer, which: str, width: int, b: Any, h: Any, j0: Any, tx: Any
    ) -> None:
        """``dst[j · width + d] = src[j0 + j, d]`` for the block's keys, zero past the last:
        the block's threads take consecutive elements, ``rows`` apart."""
        n, ib = self.n, self.ib
        total = n.bk * width
        with ib.for_range(0, -(-total // n.rows), "f") as f:
            idx = f * n.rows + tx
            j = idx // width
            inside = j0 + j < n.Sk
            value = at(src, self.layout, which, b, h, E.min_(j0 + j, n.Sk - 1), idx % width)
            if total % n.rows:
                with ib.if_then_else(idx < total):
                    ib.store(dst, idx, E.select(inside, value, self.const(0.0)))
            else:
                ib.store(dst, idx, E.select(inside, value, self.const(0.0)))

    def scores(
        self, s: Buffer, qr: Buffer, ks: Buffer, b: Any, h: Any, row: Any, j: Any, jc: Any
    ) -> None:
        """``s[c] = scale · Q[row] · K[j + c] + mask``, ``-inf`` past the last key."""
        n, ib = self.n, self.ib
        with ib.for_range(0, CHUNK, "c", "unrolled") as c:
            ib.store(s, c, self.const(0.0))
        with ib.for_range(0, n.D, "d", "unrolled") as d:
            with ib.for_range(0, CHUNK, "c", "unrolled") as c:
                ib.store(s, c, s[c] + qr[d] * ks[(jc + c) * n.D + d])
        with ib.for_range(0, CHUNK, "c", "unrolled") as c:
            x = s[c] * self.const(self.scale)
            if self.M is not None:  # keys past the end read the last key's mask
                x = x + mask_at(self.M, b, h, row, E.min_(j + c, n.Sk - 1))
            ib.store(s, c, E.select(j + c < n.Sk, x, self.const(float("-inf"))))

    def online_softmax(self, s: Buffer, acc: Buffer, m: Buffer, lsum: Buffer) -> None:
        """Fold the chunk's scores into the running max, sum and accumulator; ``s`` becomes
        the chunk's weights ``exp(score - max)``."""
        n, ib = self.n, self.ib
        top = m[0]
        for key in range(CHUNK):
            top = E.max_(top, s[key])
        new = ib.let("m_new", top)
        # the reference each exponent subtracts: the new max, or 0 while the row is all -inf
        ref = ib.let("ref", E.select(new == self.const(float("-inf")), self.const(0.0), new))
        alpha = ib.let("alpha", T.exp(m[0] - ref))
        with ib.for_range(0, CHUNK, "c", "unrolled") as c:
            ib.store(s, c, T.exp(s[c] - ref))
        total = lsum[0] * alpha
        for key in range(CHUNK):
            total = total + s[key]
        ib.store(lsum, 0, total)
        ib.store(m, 0, new)
        with ib.for_range(0, n.Dv, "e", "unrolled") as e:
            ib.store(acc, e, acc[e] * alpha)

    def add_values(self, s: Buffer, acc: Buffer, vs: Buffer, jc: Any) -> None:
        """``acc += sum_c s[c] · V[jc + c]`` from the shared value block."""
        n, ib = self.n, self.ib
        with ib.for_range(0, CHUNK, "c", "unrolled") as c:
            with ib.for_range(0, n.Dv, "e", "unrolled") as e:
                ib.store(acc, e, acc[e] + s[c] * vs[(jc + c) * n.Dv + e])
