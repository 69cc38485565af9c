"""The CPU's fused attention kernel: softmax(Q Kᵀ · scale + mask) V without the score matrix.

``fuse_attention`` (``frontend/passes/fuse_attention.py``) turns the exporters' MatMul →
scale → mask → Softmax → MatMul chain into one ``attention`` node; the CPU strategy runs
it here. The kernel is written as TIR (``te.extern`` over an :class:`IRBuilder` body)
because its online softmax carries state across key blocks — a running row maximum
``m``, a running sum ``l`` and an accumulator rescaled by ``exp(m_old - m_new)`` whenever
the maximum grows — which a tensor expression cannot say.

First, where a head has several query blocks, one pass parallel over the heads copies
every head's keys, transposed, into a scratch ``kt[head, d, j]`` (with one query block,
as in a decode step, each task copies its key blocks into a ``kt[d, j]`` of one block as
it reaches them). Then per task (batch, head and a block of ``block_q`` query
rows: the parallel loop) it walks the keys in blocks of ``block_k``. The rows go ``rows``
at a time: their ``rows × block_k`` scores are one register tile (unrolled over rows,
vectorized over keys, one broadcast of Q and one load of ``kt`` per feature), then each
row's maximum, exponentials and sum, and ``P V`` adds into a ``rows × Dv`` register tile,
vectorized over the head dim with V's row loaded once for all of them, between one load
and one store of the rows' accumulators. Scratch is ``O(block_q · Dv + D · block_k)`` per
task and at most ``O(H · D · Sk)`` for the keys, so memory grows with the sequence, never
with its square.

Query rows past the end of the last block compute a copy of the last row (their Q and
mask reads are clamped) and are not stored; keys past the end score ``-inf`` (weight 0)
and their V rows are never read. A row whose scores are all ``-inf`` (fully masked) keeps
``m = -inf``; the rescaling then uses 0 as its reference so no ``-inf - -inf`` appears,
and the row ends as ``0 / 0`` (NaN), what the unfused softmax gives.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ember.codegen_llvm.cpu_features import vector_unit
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

VECTOR = 16  # float32 lanes of an AVX-512 register: the key block is a multiple of it
# Fewest parallel tasks the query blocks are shrunk (down to 4 tiles) to give. With the keys
# transposed once for all tasks, small blocks cost little: at B=1, H=4, S=512, D=64 on one
# Zen 4 core, 4.21-4.28 ms from 4 tasks of 128 rows to 64 of 8. (With each task copying its
# own key blocks, as before, 7.0 ms at the 64-row blocks this gives, timed the same day.)
MIN_TASKS = 32


@dataclass(frozen=True)
class _Shape:
    """The sizes and blocks of one kernel (logical B, H, Sq, Sk, D, Dv)."""

    B: int
    H: int
    Sq: int
    Sk: int
    D: int
    Dv: int
    bq: int  # query rows per task, a multiple of ``rows``
    bk: int  # keys per block, a multiple of VECTOR
    rows: int  # query rows per register tile

    @property
    def q_blocks(self) -> int:
        return -(-self.Sq // self.bq)

    @property
    def k_blocks(self) -> int:
        return -(-self.Sk // self.bk)


def flash_attention(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    mask: Tensor | None,
    scale: float,
    layout: AttentionLayout,
    block_q: int = 128,
    block_k: int | None = None,
    rows: int = 4,
) -> Tensor:
    """``softmax(Q Kᵀ · scale + mask) V`` as one extern stage (see the module notes);
    ``block_k`` by default one tile row of the target's registers (64 keys on AVX-512, 16
    on AVX2)."""
    B, H, Sq, Sk, D, Dv = sizes_of(q, k, v, layout)
    if block_k is None:
        block_k = vector_unit().row_lanes("float32")
    rows = min(rows, Sq)
    while block_q > 4 * rows and B * H * -(-Sq // block_q) < MIN_TASKS:
        block_q //= 2  # short sequences: smaller query blocks, enough tasks for the threads
    bq = min(-(-block_q // rows) * rows, -(-Sq // rows) * rows)
    bk = min(-(-block_k // VECTOR) * VECTOR, -(-Sk // VECTOR) * VECTOR)
    shape = _Shape(B, H, Sq, Sk, D, Dv, bq, bk, rows)

    return attention_extern(q, k, v, mask, layout, scale, _Kernel, shape)


KeyAt = Callable[[Any, Any], E.PrimExpr]  # key block feature d, key j -> K[j0 + j, d]


class _Kernel(KernelWriter):
    """Writes the kernel's TIR: one method per step of a task."""

    n: _Shape

    def build(self) -> Any:
        n, ib = self.n, self.ib
        # keys read by several query blocks are transposed once for all of them; a head with
        # one query block (a decode step) copies each key block as it goes, which needs no
        # scratch the size of K (a per-call heap allocation: GPT-2's 1,024 past keys went
        # from 0.98x onnxruntime to 0.87x with one)
        shared = self.transpose_keys() if n.q_blocks > 1 else None
        with ib.for_range(0, n.B * n.H * n.q_blocks, name="task", kind="parallel") as task:
            bh = task // n.q_blocks
            b, h = bh // n.H, bh % n.H
            i0 = task % n.q_blocks * n.bq
            acc = ib.allocate((n.bq, n.Dv), self.dtype, "local", "acc")
            m = ib.allocate((n.bq,), self.dtype, "local", "row_max")
            lsum = ib.allocate((n.bq, VECTOR), self.dtype, "local", "row_sum")
            s = ib.allocate((n.rows, n.bk), self.dtype, "local", "scores")
            # register tiles: indexed by unrolled and vectorized loops only, so LLVM may keep
            # them in vector registers across the loop over features (or keys) they sum
            # over, where ``s`` and ``acc`` (indexed by a loop variable) live in memory
            # (alone, without the shared keys, they changed nothing measurable)
            tile = ib.allocate((n.rows, n.bk), self.dtype, "local", "score_tile")
            pv = ib.allocate((n.rows, n.Dv), self.dtype, "local", "value_tile")
            block = (
                None if shared is not None else ib.allocate((n.D, n.bk), self.dtype, "local", "kt")
            )
            with ib.for_range(0, n.bq, name="r") as r:
                ib.store(m, r, self.const(float("-inf")))
                with ib.for_range(0, VECTOR, name="l", kind="vectorized") as lane:
                    ib.store(lsum, (r, lane), self.const(0.0))
                with ib.for_range(0, n.Dv, name="e", kind="vectorized") as e:
                    ib.store(acc, (r, e), self.const(0.0))
            with ib.for_range(0, n.k_blocks, name="kb") as kb:
                j0 = kb * n.bk
                keys = self.key_block(shared, block, b, h, bh, j0)
                with ib.for_range(0, n.bq // n.rows, name="t") as t:
                    r0 = t * n.rows
                    self.scores(s, tile, keys, b, h, i0 + r0, j0)
                    with ib.for_range(0, n.rows, name="r") as r:
                        self.online_softmax(s, acc, m, lsum, r, r0 + r, j0)
                    self.add_values(s, acc, pv, b, h, r0, j0)
            self.store(acc, lsum, b, h, i0)
        return ib.get()

    def key_block(
        self, shared: Buffer | None, block: Buffer | None, b: Any, h: Any, bh: Any, j0: Any
    ) -> KeyAt:
        """``(d, j) -> K[j0 + j, d]`` for the key block at ``j0``: read from the shared
        transposed keys, else copied into the task's ``block`` first."""
        if shared is not None:
            return lambda d, j: shared[bh, d, j0 + j]
        assert block is not None  # allocated by build() exactly when nothing is shared
        self.load_keys(block, b, h, j0)
        return lambda d, j: block[d, j]

    def load_keys(self, kt: Buffer, b: Any, h: Any, j0: Any) -> None:
        """``kt[d, j] = K[j0 + j, d]``, zero past the last key (those lanes score -inf)."""
        n, ib = self.n, self.ib
        with ib.for_range(0, n.bk, name="j") as j:
            with ib.if_then_else(j0 + j < n.Sk):
                with ib.for_range(0, n.D, name="d") as d:
                    ib.store(kt, (d, j), at(self.K, self.layout, "k", b, h, j0 + j, d))
            with ib.else_():
                with ib.for_range(0, n.D, name="d") as d:
                    ib.store(kt, (d, j), self.const(0.0))

    def transpose_keys(self) -> Buffer:
        """``kt[b·H + h, d, j] = K[b, h, j, d]``, zero past the last key (those lanes score
        -inf) up to whole key blocks: one pass, parallel over the heads, before the tasks,
        whose key blocks then read ``kt`` a vector at a time. (Each task used to copy its
        own key blocks: 4 heads at 128 positions in 16-row query blocks, one core, 0.44 ms
        then, 0.31 ms now.) ``O(sequence)`` scratch per head, as K itself."""
        n, ib = self.n, self.ib
        keys = n.k_blocks * n.bk
        kt = ib.allocate((n.B * n.H, n.D, keys), self.dtype, "global", "keys_t")
        with ib.for_range(0, n.B * n.H, name="bh", kind="parallel") as bh:
            b, h = bh // n.H, bh % n.H
            with ib.for_range(0, keys, name="j") as j:
                with ib.if_then_else(j < n.Sk):
                    with ib.for_range(0, n.D, name="d") as d:
                        ib.store(kt, (bh, d, j), at(self.K, self.layout, "k", b, h, j, d))
                with ib.else_():
                    with ib.for_range(0, n.D, name="d") as d:
                        ib.store(kt, (bh, d, j), self.const(0.0))
        return kt

    def scores(self, s: Buffer, tile: Buffer, keys: KeyAt, b: Any, h: Any, i: Any, j0: Any) -> None:
        """``s[r, j] = scale · Q[i + r] · K[j0 + j] + mask``, -inf past the last key: a
        ``rows × bk`` register tile, unrolled over rows and vectorized over keys, summed
        over the features and then scaled, masked and stored to ``s``."""
        n, ib = self.n, self.ib
        with ib.for_range(0, n.rows, name="r", kind="unrolled") as r:
            with ib.for_range(0, n.bk, name="j", kind="vectorized") as j:
                ib.store(tile, (r, j), self.const(0.0))
        with ib.for_range(0, n.D, name="d") as d:
            with ib.for_range(0, n.rows, name="r", kind="unrolled") as r:
                qd = at(self.Q, self.layout, "q", b, h, E.min_(i + r, n.Sq - 1), d)
                with ib.for_range(0, n.bk, name="j", kind="vectorized") as j:
                    ib.store(tile, (r, j), tile[r, j] + qd * keys(d, j))
        c, ninf = self.const(self.scale), self.const(float("-inf"))
        with ib.for_range(0, n.rows, name="r", kind="unrolled") as r:
            with ib.for_range(0, n.bk, name="j", kind="vectorized") as j:
                x = tile[r, j] * c
                if self.M is not None:  # lanes past the keys read the last key's mask
                    ii, jj = E.min_(i + r, n.Sq - 1), E.min_(j0 + j, n.Sk - 1)
                    x = x + mask_at(self.M, b, h, ii, jj)
                ib.store(s, (r, j), E.select(j0 + j < n.Sk, x, ninf))

    def online_softmax(
        self, s: Buffer, acc: Buffer, m: Buffer, lsum: Buffer, r: Any, row: Any, j0: Any
    ) -> None:
        """Fold tile row ``r`` (task row ``row``) into the running max, sum and accumulator;
        ``s[r]`` becomes the block's weights ``exp(score - max)``. The max and the sum go
        lane by lane (``VECTOR`` partials; the sum's stay partial until :meth:`store`), so
        neither is a chain of ``bk`` dependent scalar operations."""
        n, ib = self.n, self.ib
        zero, ninf = self.const(0.0), self.const(float("-inf"))
        chunks = n.bk // VECTOR
        mx = ib.allocate((VECTOR,), self.dtype, "local", "block_max")
        with ib.for_range(0, VECTOR, name="l", kind="vectorized") as lane:
            ib.store(mx, lane, m[row])
        for c in range(chunks):
            with ib.for_range(0, VECTOR, name="l", kind="vectorized") as lane:
                ib.store(mx, lane, E.max_(mx[lane], s[r, c * VECTOR + lane]))
        width = VECTOR // 2
        while width:
            with ib.for_range(0, width, name="l", kind="vectorized") as lane:
                ib.store(mx, lane, E.max_(mx[lane], mx[lane + width]))
            width //= 2
        # the reference each exponent subtracts: the new max, or 0 while the row is all -inf
        ref = ib.let("ref", E.select(mx[0] == ninf, zero, mx[0]))
        alpha = ib.let("alpha", T.exp(m[row] - ref))
        with ib.for_range(0, n.bk, name="j", kind="vectorized") as j:
            ib.store(s, (r, j), T.exp(s[r, j] - ref))
        with ib.for_range(0, VECTOR, name="l", kind="vectorized") as lane:
            total = lsum[row, lane] * alpha
            for c in range(chunks):
                total = total + s[r, c * VECTOR + lane]
            ib.store(lsum, (row, lane), total)
        ib.store(m, row, mx[0])
        with ib.for_range(0, n.Dv, name="e", kind="vectorized") as e:
            ib.store(acc, (row, e), acc[row, e] * alpha)

    def add_values(
        self, s: Buffer, acc: Buffer, pv: Buffer, b: Any, h: Any, r0: Any, j0: Any
    ) -> None:
        """``acc[r0 + r] += sum_j s[r, j] V[j0 + j]`` over the block's real keys, summed in
        the register tile ``pv`` (rows × Dv) between one load and one store of ``acc``."""
        n, ib = self.n, self.ib
        with ib.for_range(0, n.rows, name="r", kind="unrolled") as r:
            with ib.for_range(0, n.Dv, name="e", kind="vectorized") as e:
                ib.store(pv, (r, e), acc[r0 + r, e])
        with ib.for_range(0, E.min_(n.bk, n.Sk - j0), name="j") as j:
            with ib.for_range(0, n.rows, name="r", kind="unrolled") as r:
                p = s[r, j]
                with ib.for_range(0, n.Dv, name="e", kind="vectorized") as e:
                    vj = at(self.V, self.layout, "v", b, h, j0 + j, e)
                    ib.store(pv, (r, e), pv[r, e] + p * vj)
        with ib.for_range(0, n.rows, name="r", kind="unrolled") as r:
            with ib.for_range(0, n.Dv, name="e", kind="vectorized") as e:
                ib.store(acc, (r0 + r, e), pv[r, e])

    def store(self, acc: Buffer, lsum: Buffer, b: Any, h: Any, i0: Any) -> None:
        """The task's real rows, each divided by its sum, in the output's layout."""
        n, ib = self.n, self.ib
        with ib.for_range(0, n.bq, name="r") as r:
            with ib.if_then_else(i0 + r < n.Sq):
                total = lsum[r, 0]
                for lane in range(1, VECTOR):
                    total = total + lsum[r, lane]
                inv = ib.let("inv", self.const(1.0) / total)
                with ib.for_range(0, n.Dv, name="e", kind="vectorized") as e:
                    index = self.layout.index("out", b, h, i0 + r, e)
                    ib.store(self.O, index, acc[r, e] * inv)
