"""The CPU's fused attention kernel: softmax(Q Kᵀ · scale + mask) V without the score matrix.

``fuse_attention`` (``frontend/passes/fuse_attention.py``) turns the exporters' MatMul →
scale → mask → Softmax → MatMul chain into one ``attention`` node; the CPU strategy runs
it here. The kernel is written as TIR (``te.extern`` over an :class:`IRBuilder` body)
because its online softmax carries state across key blocks — a running row maximum
``m``, a running sum ``l`` and an accumulator rescaled by ``exp(m_old - m_new)`` whenever
the maximum grows — which a tensor expression cannot say.

Per task (batch, head and a block of ``block_q`` query rows: the parallel loop) it walks
the keys in blocks of ``block_k``. The key block is copied once, transposed, into a
scratch ``kt[d, j]`` that all the task's query rows reuse. The rows go ``rows`` at a time:
their ``rows × block_k`` scores are one register tile (unrolled over rows, vectorized over
keys, one broadcast of Q and one load of ``kt`` per feature), then each row's maximum,
exponentials and sum, and ``P V`` adds into the rows' accumulators, vectorized over the
head dim with V's row loaded once for all of them. Scratch is ``O(block_q · Dv + D ·
block_k)`` per task, so memory grows with the sequence, never with its square.

Query rows past the end of the last block compute a copy of the last row (their Q and
mask reads are clamped) and are not stored; keys past the end score ``-inf`` (weight 0)
and their V rows are never read. A row whose scores are all ``-inf`` (fully masked) keeps
``m = -inf``; the rescaling then uses 0 as its reference so no ``-inf - -inf`` appears,
and the row ends as ``0 / 0`` (NaN), what the unfused softmax gives.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ember.tir import expr as E
from ember.tir import op as T
from ember.tir.buffer import Buffer
from ember.tir.ir_builder import IRBuilder
from ember.tir.te.extern import extern
from ember.tir.te.tensor import Tensor
from ember.tir.topi.attention import AttentionLayout, at, mask_at, static_shape

VECTOR = 16  # float32 lanes of an AVX-512 register: the key block is a multiple of it
# Fewest parallel tasks the query blocks are shrunk (down to 4 tiles) to give. Blocks of 128
# rows amortize each key block's transposed copy: at B=1, H=4, S=512, D=64 on one Zen 4
# core, 3.8 ms at 128 rows, 4.5 ms at 32 (onnxruntime's unfused graph 3.9 ms).
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
    block_k: int = 64,
    rows: int = 4,
) -> Tensor:
    """``softmax(Q Kᵀ · scale + mask) V`` as one extern stage (see the module notes)."""
    B, H, Sq, D = layout.sizes("q", static_shape(q.shape))
    Sk = layout.sizes("k", static_shape(k.shape))[2]
    Dv = layout.sizes("v", static_shape(v.shape))[3]
    rows = min(rows, Sq)
    while block_q > 4 * rows and B * H * -(-Sq // block_q) < MIN_TASKS:
        block_q //= 2  # short sequences: smaller query blocks, enough tasks for the threads
    bq = min(-(-block_q // rows) * rows, -(-Sq // rows) * rows)
    bk = min(-(-block_k // VECTOR) * VECTOR, -(-Sk // VECTOR) * VECTOR)
    shape = _Shape(B, H, Sq, Sk, D, Dv, bq, bk, rows)

    def body(ins: list[Buffer], outs: list[Buffer]) -> Any:
        return _Kernel(shape, layout, scale, ins, outs[0]).build()

    inputs = [q, k, v] if mask is None else [q, k, v, mask]
    out_shape = layout.shape("out", (B, H, Sq, Dv))
    return extern(out_shape, inputs, body, name="attention", tag="attention")


class _Kernel:
    """Writes the kernel's TIR: one method per step of a task."""

    def __init__(
        self, shape: _Shape, layout: AttentionLayout, scale: float, ins: list[Buffer], out: Buffer
    ) -> None:
        self.n, self.layout, self.scale = shape, layout, scale
        self.Q, self.K, self.V = ins[:3]
        self.M = ins[3] if len(ins) > 3 else None
        self.O = out
        self.dtype = out.dtype
        self.ib = IRBuilder()

    def const(self, value: float) -> E.PrimExpr:
        return E.const(value, self.dtype)

    def build(self) -> Any:
        n, ib = self.n, self.ib
        with ib.for_range(0, n.B * n.H * n.q_blocks, name="task", kind="parallel") as task:
            b = task // (n.H * n.q_blocks)
            h = task // n.q_blocks % n.H
            i0 = task % n.q_blocks * n.bq
            acc = ib.allocate((n.bq, n.Dv), self.dtype, "local", "acc")
            m = ib.allocate((n.bq,), self.dtype, "local", "row_max")
            lsum = ib.allocate((n.bq, VECTOR), self.dtype, "local", "row_sum")
            kt = ib.allocate((n.D, n.bk), self.dtype, "local", "kt")
            s = ib.allocate((n.rows, n.bk), self.dtype, "local", "scores")
            with ib.for_range(0, n.bq, name="r") as r:
                ib.store(m, r, self.const(float("-inf")))
                with ib.for_range(0, VECTOR, name="l", kind="vectorized") as lane:
                    ib.store(lsum, (r, lane), self.const(0.0))
                with ib.for_range(0, n.Dv, name="e", kind="vectorized") as e:
                    ib.store(acc, (r, e), self.const(0.0))
            with ib.for_range(0, n.k_blocks, name="kb") as kb:
                j0 = kb * n.bk
                self.load_keys(kt, b, h, j0)
                with ib.for_range(0, n.bq // n.rows, name="t") as t:
                    r0 = t * n.rows
                    self.scores(s, kt, b, h, i0 + r0, j0)
                    with ib.for_range(0, n.rows, name="r") as r:
                        self.online_softmax(s, acc, m, lsum, r, r0 + r, j0)
                    self.add_values(s, acc, b, h, r0, j0)
            self.store(acc, lsum, b, h, i0)
        return ib.get()

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

    def scores(self, s: Buffer, kt: Buffer, b: Any, h: Any, i: Any, j0: Any) -> None:
        """``s[r, j] = scale · Q[i + r] · K[j0 + j] + mask``, -inf past the last key: a
        ``rows × bk`` tile, unrolled over rows and vectorized over keys."""
        n, ib = self.n, self.ib
        with ib.for_range(0, n.rows, name="r", kind="unrolled") as r:
            with ib.for_range(0, n.bk, name="j", kind="vectorized") as j:
                ib.store(s, (r, j), self.const(0.0))
        with ib.for_range(0, n.D, name="d") as d:
            with ib.for_range(0, n.rows, name="r", kind="unrolled") as r:
                qd = at(self.Q, self.layout, "q", b, h, E.min_(i + r, n.Sq - 1), d)
                with ib.for_range(0, n.bk, name="j", kind="vectorized") as j:
                    ib.store(s, (r, j), s[r, j] + qd * kt[d, j])
        c, ninf = self.const(self.scale), self.const(float("-inf"))
        with ib.for_range(0, n.rows, name="r", kind="unrolled") as r:
            with ib.for_range(0, n.bk, name="j", kind="vectorized") as j:
                x = s[r, j] * c
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

    def add_values(self, s: Buffer, acc: Buffer, b: Any, h: Any, r0: Any, j0: Any) -> None:
        """``acc[r0 + r] += sum_j s[r, j] V[j0 + j]`` over the block's real keys."""
        n, ib = self.n, self.ib
        with ib.for_range(0, E.min_(n.bk, n.Sk - j0), name="j") as j:
            with ib.for_range(0, n.rows, name="r", kind="unrolled") as r:
                p = s[r, j]
                with ib.for_range(0, n.Dv, name="e", kind="vectorized") as e:
                    vj = at(self.V, self.layout, "v", b, h, j0 + j, e)
                    ib.store(acc, (r0 + r, e), acc[r0 + r, e] + p * vj)

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
