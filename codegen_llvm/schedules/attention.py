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
and one store of the rows' accumulators. That tile covers as many of V's columns as the
target's registers hold (:func:`value_chunk`: all 64 of a head on AVX-512, 16 at a time
on AVX2, whose 16 registers a 4 x 64 tile spilled). Where a row has at most
``WHOLE_ROW_KEYS`` keys, the online steps are left out: the ``rows`` rows' scores over all
key blocks go to a ``rows × Sk`` scratch, each row's softmax is taken once, and ``P V``
runs over every key in one register tile. Scratch is ``O(block_q · Dv + D · block_k)``
(``O(rows · Sk)`` for whole rows) per task and at most ``O(H · D · Sk)`` for the keys, so
memory grows with the sequence, never with its square.

A lone query row (a decode step) has nothing to share a transposed key block with: its
scores are dot products along K's rows (:func:`dot_lanes`). :func:`cached_flash_attention`
is the kernel of the ``cached_attention`` op: it reads the cache's past and new entries
in place of K and V and writes each key block's keys and values to the ``present``
outputs as it reaches them.

Query rows past the end of the last block compute a copy of the last row (their Q and
mask reads are clamped) and are not stored; keys past the end score ``-inf`` (weight 0)
and their V rows are never read. A row whose scores are all ``-inf`` (fully masked) keeps
``m = -inf``; the rescaling then uses 0 as its reference so no ``-inf - -inf`` appears,
and the row ends as ``0 / 0`` (NaN), what the unfused softmax gives.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager, nullcontext
from dataclasses import dataclass
from typing import Any

from ember.codegen_llvm.cpu_features import FMA_CHAINS, vector_unit
from ember.codegen_llvm.memory import NONTEMPORAL
from ember.tir import expr as E
from ember.tir import op as T
from ember.tir.buffer import Buffer
from ember.tir.te.extern import extern
from ember.tir.te.tensor import Tensor
from ember.tir.topi.attention import (
    AttentionLayout,
    KernelWriter,
    at,
    attention_extern,
    mask_at,
    sizes_of,
    static_shape,
)
from ember.tir.topi.tensorcore_gemm import round_up

VECTOR = 16  # float32 lanes of an AVX-512 register: the key block is a multiple of it
# Fewest parallel tasks the query blocks are shrunk (down to 4 tiles) to give. With the keys
# transposed once for all tasks, small blocks cost little: at B=1, H=4, S=512, D=64 on one
# Zen 4 core, 4.21-4.28 ms from 4 tasks of 128 rows to 64 of 8. (With each task copying its
# own key blocks, as before, 7.0 ms at the 64-row blocks this gives, timed the same day.)
MIN_TASKS = 32
# Longest key row (rounded up to whole key blocks) whose softmax is taken whole, after all
# its scores, instead of online a key block at a time. 12 heads of 64 on one Zen 3 core
# (AVX2), whole against online: 0.77 / 0.91 ms at 128 positions, 2.44 / 2.92 at 197, 12.9
# / 14.7 at 512, but 70.1 / 66.1 at 1,024; a decode step (one query) the same either way.
WHOLE_ROW_KEYS = 512
# Query rows a register tile holds where there are 32 vector registers (else 4): 6 rows of
# scores by 2 registers of keys and of values by 2 registers of the head are 12
# accumulators each. 12 heads of 64 on one Intel core (AVX-512), by turns in one process,
# with the blocks of _blocks: 197 positions 2.06 ms with 4 rows, 1.78 with 6; 128 0.62 /
# 0.56; 256 2.59 / 2.45; 384 4.67 / 4.52.
ROWS_WIDE = 6
# Keys whose dot products with a lone query row one register tile sums at once (8
# accumulators of one register each: the FMA chains that hide the latency).
DOT_KEYS = 8


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
    whole: bool  # each row's softmax taken whole, after all its scores (else online)
    dot: int = 0  # one query row: features summed this many lanes at a time along K's rows

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
    rows: int | None = None,
    whole_row_keys: int = WHOLE_ROW_KEYS,
) -> Tensor:
    """``softmax(Q Kᵀ · scale + mask) V`` as one extern stage (see the module notes);
    ``block_k`` by default one tile row of the target's registers (64 keys on AVX-512, 16
    on AVX2), ``rows`` by default ``ROWS_WIDE`` with 32 registers, else 4; the blocks
    are then evened out (:func:`_blocks`). Rows of up to ``whole_row_keys`` keys (in
    whole key blocks) take their softmax whole, longer ones online a key block at a
    time."""
    B, H, Sq, Sk, D, Dv = sizes_of(q, k, v, layout)
    shape = _plan((B, H, Sq, Sk, D, Dv), layout, block_q, block_k, rows, whole_row_keys)
    return attention_extern(q, k, v, mask, layout, scale, _Kernel, shape)


def cached_flash_attention(
    q: Tensor,
    past_k: Tensor,
    new_k: Tensor,
    past_v: Tensor,
    new_v: Tensor,
    mask: Tensor | None,
    scale: float,
    layout: AttentionLayout,
    **blocks: Any,
) -> list[Tensor]:
    """``[out, present_k, present_v]`` of the ``cached_attention`` op: attention over the
    keys and values of a cache with the new ones appended, which are also written out
    (``present``). With one query row (a decode step) each task reads its head's keys and
    values once, from the past or the new tensors, a key block at a time: it writes the
    block to ``present`` with non-temporal stores, then attends over it from the L1
    cache. The concatenation costs no pass of its own, the attention no second read of
    the cache, and ``present`` no read of each line before it is written (GPT-2 small at
    a past of 1,024 moves 75 MB of keys and values a step). With more query rows the
    kernel copies the cache first, in a parallel loop of its own, and attends over the
    copy. ``blocks`` as :func:`flash_attention`'s."""
    B, H, Sq, P, D, Dv = sizes_of(q, past_k, past_v, layout)
    Sk = P + layout.sizes("k", static_shape(new_k.shape))[2]
    shape = _plan((B, H, Sq, Sk, D, Dv), layout, **blocks)
    inputs = [q, past_k, new_k, past_v, new_v, *([mask] if mask is not None else [])]
    shapes = [
        layout.shape("out", (B, H, Sq, Dv)),
        layout.shape("k", (B, H, Sk, D)),
        layout.shape("v", (B, H, Sk, Dv)),
    ]

    def body(ins: list[Buffer], outs: list[Buffer]) -> Any:
        return _AppendKernel(shape, layout, scale, ins, outs).build()

    out = extern(shapes, inputs, body, name="cached_attention", tag="attention")
    return list(out) if isinstance(out, (list, tuple)) else [out]


def _plan(
    sizes: tuple[int, int, int, int, int, int],
    layout: AttentionLayout,
    block_q: int = 128,
    block_k: int | None = None,
    rows: int | None = None,
    whole_row_keys: int = WHOLE_ROW_KEYS,
) -> _Shape:
    """The kernel's blocks for logical ``sizes`` (B, H, Sq, Sk, D, Dv): see
    :func:`flash_attention`."""
    B, H, Sq, Sk, D, Dv = sizes
    if block_k is None:
        block_k = vector_unit().row_lanes("float32")
    if rows is None:
        rows = ROWS_WIDE if vector_unit().registers >= 32 else 4
    rows, bq, bk = _blocks(B * H, Sq, Sk, block_q, block_k, rows)
    whole = round_up(Sk, bk) <= whole_row_keys
    return _Shape(B, H, Sq, Sk, D, Dv, bq, bk, rows, whole, dot_lanes(rows, D, layout))


def _blocks(
    heads: int, Sq: int, Sk: int, block_q: int, block_k: int, rows: int
) -> tuple[int, int, int]:
    """``(rows, bq, bk)`` for ``rows``-row tiles: query blocks of about ``block_q`` rows,
    halved down to 4 tiles while the ``heads`` give fewer than ``MIN_TASKS`` tasks, then
    evened out so the last block is not mostly rows past the queries (197 rows in blocks of
    64 computed 256); key blocks the multiple of ``VECTOR`` up to ``block_k`` that pads
    ``Sk`` least (197 keys: 224 in blocks of 32, 256 in blocks of 64), but wide enough
    that the score tile holds ``FMA_CHAINS`` accumulators. ViT's attention (12 heads of
    64 at 197 positions) on one Intel core: 3.05 ms in blocks of 64 and 64, 2.06 ms in
    these (4-row tiles), 1.78 ms with 6-row ones."""
    rows = min(rows, Sq)
    while block_q > 4 * rows and heads * -(-Sq // block_q) < MIN_TASKS:
        block_q //= 2  # short sequences: smaller query blocks, enough tasks for the threads
    bq = min(round_up(block_q, rows), round_up(Sq, rows))
    query_blocks = -(-Sq // bq)
    bq = round_up(-(-Sq // query_blocks), rows)  # the same blocks, evened out
    widest = min(round_up(block_k, VECTOR), round_up(Sk, VECTOR))
    narrowest = min(round_up(-(-FMA_CHAINS // rows) * VECTOR, VECTOR), widest)
    bk = min(range(narrowest, widest + 1, VECTOR), key=lambda b: (round_up(Sk, b), -b))
    return rows, bq, bk


def dot_lanes(rows: int, d: int, layout: AttentionLayout) -> int:
    """Lanes of the dot-product scores (:meth:`_Kernel.dot_scores`), 0 where they do not
    apply. A lone query row (a decode step) gains nothing from the transposed key blocks
    that let a tile of rows share each key load: copying them element by element cost
    more than the whole product (GPT-2's 12 heads over 1,025 keys, two Zen 3 cores: 0.23
    ms a call with the keys warm, most of it the copy). Its scores are then dot products
    along K's rows, which needs K's features contiguous and a power-of-two lane count of
    at least 4 that divides them."""
    if rows != 1 or layout.k[3] != 3:
        return 0
    lanes = vector_unit().lanes("float32")
    while lanes >= 4 and d % lanes:
        lanes //= 2
    return lanes if lanes >= 4 else 0


def value_chunk(rows: int, dv: int) -> int:
    """Columns of V the ``P V`` register tile covers at a time: ``rows`` x that many must
    fit the target's accumulators (:attr:`VectorUnit.accumulators`), else the tile spills
    around every multiply-add. A whole head of 64 is 4 x 4 of AVX-512's registers; on
    AVX2 it was 4 x 8 of its 16 and spilled (ViT's attention, 12 heads at 197 tokens, one
    Zen 3 core: 4.8 ms, onnxruntime's unfused graph 1.9 ms)."""
    unit = vector_unit()
    lanes = unit.lanes("float32")
    fits = max(1, unit.accumulators[1] // rows) * lanes
    if fits >= dv:
        return dv
    # the widest whole number of registers within the budget that divides dv, unless that
    # is under half the budget: then the budget's width, and a narrower last chunk
    for width in range(fits, fits // 2 - 1, -lanes):
        if dv % width == 0:
            return width
    return fits


KeyAt = Callable[[Any, Any], E.PrimExpr]  # key block feature d, key j -> K[j0 + j, d]


def _lane_sum(lane: Callable[[int], E.PrimExpr]) -> E.PrimExpr:
    """The sum of ``lane(0) .. lane(VECTOR - 1)``, the partial sums a row keeps lane by
    lane."""
    total = lane(0)
    for i in range(1, VECTOR):
        total = total + lane(i)
    return total


@dataclass(frozen=True)
class _Task:
    """One parallel task's place (batch ``b``, head ``h``, their flat index ``bh``, first
    query row ``i0``) and its buffers: the shared transposed keys (or None, and the task's
    own key ``block``), the score and value register tiles."""

    shared: Buffer | None
    block: Buffer | None
    tile: Buffer
    pv: Buffer
    b: Any
    h: Any
    bh: Any
    i0: Any


class _Kernel(KernelWriter):
    """Writes the kernel's TIR: one method per step of a task."""

    n: _Shape

    def build(self) -> Any:
        n, ib = self.n, self.ib
        # keys read by several query blocks are transposed once for all of them; a head with
        # one query block (a decode step) copies each key block as it goes, which needs no
        # scratch the size of K (a per-call heap allocation: GPT-2's 1,024 past keys went
        # from 0.98x onnxruntime to 0.87x with one)
        shared = self.transpose_keys() if n.q_blocks > 1 and not n.dot else None
        with ib.for_range(0, n.B * n.H * n.q_blocks, name="task", kind="parallel") as task:
            with self.task_scope():
                self.task(task, shared)
        return ib.get()

    def task_scope(self) -> AbstractContextManager[None]:
        """What encloses each parallel task's statements: nothing here (the appending
        kernel's non-temporal stores)."""
        return nullcontext()

    def task(self, task: Any, shared: Buffer | None) -> None:
        """One parallel task: a query block of one head."""
        n, ib = self.n, self.ib
        bh = task // n.q_blocks
        b, h = bh // n.H, bh % n.H
        i0 = task % n.q_blocks * n.bq
        # register tiles: indexed by unrolled and vectorized loops only, so LLVM may keep
        # them in vector registers across the loop over features (or keys) they sum
        # over, where ``s`` and ``acc`` (indexed by a loop variable) live in memory
        # (alone, without the shared keys, they changed nothing measurable)
        tile = ib.allocate((n.rows, n.bk), self.dtype, "local", "score_tile")
        pv = ib.allocate((n.rows, n.Dv), self.dtype, "local", "value_tile")
        copied = shared is None and not n.dot
        block = ib.allocate((n.D, n.bk), self.dtype, "local", "kt") if copied else None
        t = _Task(shared, block, tile, pv, b, h, bh, i0)
        if n.whole:
            self.whole_rows(t)
        else:
            self.online_rows(t)

    def online_rows(self, t: _Task) -> None:
        """A task's query rows over the keys a block at a time, by the online softmax."""
        n, ib = self.n, self.ib
        b, h, i0 = t.b, t.h, t.i0
        acc = ib.allocate((n.bq, n.Dv), self.dtype, "local", "acc")
        m = ib.allocate((n.bq,), self.dtype, "local", "row_max")
        lsum = ib.allocate((n.bq, VECTOR), self.dtype, "local", "row_sum")
        s = ib.allocate((n.rows, n.bk), self.dtype, "local", "scores")
        with ib.for_range(0, n.bq, name="r") as r:
            ib.store(m, r, self.const(float("-inf")))
            with ib.for_range(0, VECTOR, name="l", kind="vectorized") as lane:
                ib.store(lsum, (r, lane), self.const(0.0))
            with ib.for_range(0, n.Dv, name="e", kind="vectorized") as e:
                ib.store(acc, (r, e), self.const(0.0))
        with ib.for_range(0, n.k_blocks, name="kb") as kb:
            j0 = kb * n.bk
            self.visit_block(t, j0)
            keys = None if n.dot else self.key_block(t, j0)
            with ib.for_range(0, n.bq // n.rows, name="t") as ti:
                r0 = ti * n.rows
                self.scores(s, t.tile, keys, b, h, i0 + r0, j0)
                with ib.for_range(0, n.rows, name="r") as r:
                    self.online_softmax(s, acc, m, lsum, r, r0 + r, j0)
                self.add_values(s, acc, t.pv, b, h, r0, j0)
        self.store(acc, lsum, b, h, i0)

    def whole_rows(self, t: _Task) -> None:
        """A task's query rows, ``rows`` at a time, over all the keys at once: where a row
        of scores is short enough (``WHOLE_ROW_KEYS``) to sit in the L1 cache, its softmax
        is taken once, after all its scores, instead of one online step per key block
        (a running max, a rescale of the accumulators, a load and store of them per block:
        on AVX2 blocks are 16 keys). ``O(rows · Sk)`` scratch per task."""
        n, ib = self.n, self.ib
        keys_total = n.k_blocks * n.bk
        sc = ib.allocate((n.rows, keys_total), self.dtype, "local", "row_scores")
        inv = ib.allocate((n.rows,), self.dtype, "local", "row_inverse")
        with ib.for_range(0, n.bq // n.rows, name="t") as ti:
            r0 = ti * n.rows
            with ib.for_range(0, n.k_blocks, name="kb") as kb:
                j0 = kb * n.bk
                self.visit_block(t, j0)
                keys = None if n.dot else self.key_block(t, j0)
                self.scores(sc, t.tile, keys, t.b, t.h, t.i0 + r0, j0, col=j0)
            with ib.for_range(0, n.rows, name="r") as r:
                self.row_softmax(sc, inv, r, keys_total)
            self.weighted_values(sc, inv, t.pv, t.b, t.h, t.i0 + r0)

    def fold_max(self, lanes: Buffer) -> None:
        """``lanes[0]`` becomes the maximum of the ``VECTOR`` lanes, halving the width each
        step (vector maxima, not a chain of ``VECTOR`` scalar ones)."""
        width = VECTOR // 2
        while width:
            with self.ib.for_range(0, width, name="l", kind="vectorized") as lane:
                self.ib.store(lanes, lane, E.max_(lanes[lane], lanes[lane + width]))
            width //= 2

    def row_softmax(self, sc: Buffer, inv: Buffer, r: Any, keys: int) -> None:
        """``sc[r]`` becomes ``exp(score - max)`` and ``inv[r]`` the inverse of its sum; a
        row of only ``-inf`` scores (fully masked) subtracts 0 and ends ``0 / 0`` (NaN), as
        the unfused softmax does."""
        ib, ninf, zero = self.ib, self.const(float("-inf")), self.const(0.0)
        part = ib.allocate((VECTOR,), self.dtype, "local", "partial")
        with ib.for_range(0, VECTOR, name="l", kind="vectorized") as lane:
            ib.store(part, lane, ninf)
        with ib.for_range(0, keys // VECTOR, name="c") as c:
            with ib.for_range(0, VECTOR, name="l", kind="vectorized") as lane:
                ib.store(part, lane, E.max_(part[lane], sc[r, c * VECTOR + lane]))
        self.fold_max(part)
        ref = ib.let("ref", E.select(part[0] == ninf, zero, part[0]))
        with ib.for_range(0, VECTOR, name="l", kind="vectorized") as lane:
            ib.store(part, lane, zero)
        with ib.for_range(0, keys // VECTOR, name="c") as c:
            with ib.for_range(0, VECTOR, name="l", kind="vectorized") as lane:
                ib.store(sc, (r, c * VECTOR + lane), T.exp(sc[r, c * VECTOR + lane] - ref))
                ib.store(part, lane, part[lane] + sc[r, c * VECTOR + lane])
        ib.store(inv, r, self.const(1.0) / _lane_sum(lambda lane: part[lane]))

    def weighted_values(self, sc: Buffer, inv: Buffer, pv: Buffer, b: Any, h: Any, i: Any) -> None:
        """Rows ``i ..`` of the output: ``inv[r] · sum_j sc[r, j] V[j]`` over the real keys,
        summed in the register tile ``pv`` a chunk of V's columns at a time
        (:func:`value_chunk`); rows past the queries are not stored."""
        n, ib = self.n, self.ib

        def emit(r: Any, c0: int, w: int) -> None:
            with ib.if_then_else(i + r < n.Sq):
                with ib.for_range(0, w, name="e", kind="vectorized") as e:
                    index = self.layout.index("out", b, h, i + r, c0 + e)
                    ib.store(self.O, index, pv[r, e] * inv[r])

        zero = self.const(0.0)
        self.values_tile(sc, pv, b, h, 0, n.Sk, lambda r, e: zero, emit)

    def key(self, b: Any, h: Any, j: Any, d: Any) -> E.PrimExpr:
        """K at logical (b, h, j, d)."""
        return at(self.K, self.layout, "k", b, h, j, d)

    def value(self, b: Any, h: Any, j: Any, e: Any) -> E.PrimExpr:
        """V at logical (b, h, j, e)."""
        return at(self.V, self.layout, "v", b, h, j, e)

    def visit_block(self, t: _Task, j0: Any) -> None:
        """What a task does on reaching the key block at ``j0``, before its scores: nothing
        here (the appending kernel writes the block's keys and values out)."""

    def key_block(self, t: _Task, j0: Any) -> KeyAt:
        """``(d, j) -> K[j0 + j, d]`` for the key block at ``j0``: read from the shared
        transposed keys, else copied into the task's ``block`` first."""
        shared, block = t.shared, t.block
        if shared is not None:
            return lambda d, j: shared[t.bh, d, j0 + j]
        assert block is not None  # allocated by build() exactly when nothing is shared
        self.load_keys(block, t.b, t.h, j0)
        return lambda d, j: block[d, j]

    def load_keys(self, kt: Buffer, b: Any, h: Any, j0: Any) -> None:
        """``kt[d, j] = K[j0 + j, d]``, zero past the last key (those lanes score -inf)."""
        n, ib = self.n, self.ib
        with ib.for_range(0, n.bk, name="j") as j:
            with ib.if_then_else(j0 + j < n.Sk):
                with ib.for_range(0, n.D, name="d") as d:
                    ib.store(kt, (d, j), self.key(b, h, j0 + j, d))
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

    def scores(
        self,
        s: Buffer,
        tile: Buffer,
        keys: KeyAt | None,
        b: Any,
        h: Any,
        i: Any,
        j0: Any,
        col: Any = 0,
    ) -> None:
        """``s[r, col + j] = scale · Q[i + r] · K[j0 + j] + mask``, -inf past the last key:
        a ``rows × bk`` register tile, unrolled over rows and vectorized over keys, summed
        over the features (from the transposed ``keys``, or with None by
        :meth:`dot_scores`) and then scaled, masked and stored to ``s``."""
        n, ib = self.n, self.ib
        if keys is None:
            self.dot_scores(tile, b, h, i, j0)
        else:
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
                ib.store(s, (r, col + j), E.select(j0 + j < n.Sk, x, ninf))

    def dot_scores(self, tile: Buffer, b: Any, h: Any, i: Any, j0: Any) -> None:
        """``tile[0, j] = Q[i] · K[j0 + j]`` for one query row (:func:`dot_lanes`):
        ``DOT_KEYS`` keys at a time, each summed in a register of ``n.dot`` lanes along
        its row, the lanes then folded in halves. Keys past the last read the last one
        (their scores become -inf)."""
        n, ib, w = self.n, self.ib, self.n.dot
        part = ib.allocate((DOT_KEYS, w), self.dtype, "local", "dot_tile")
        row = E.min_(i, n.Sq - 1)
        with ib.for_range(0, n.bk // DOT_KEYS, name="g") as g:
            with ib.for_range(0, DOT_KEYS, name="jj", kind="unrolled") as jj:
                with ib.for_range(0, w, name="l", kind="vectorized") as lane:
                    ib.store(part, (jj, lane), self.const(0.0))
            with ib.for_range(0, n.D // w, name="c") as c:
                with ib.for_range(0, DOT_KEYS, name="jj", kind="unrolled") as jj:
                    j = E.min_(j0 + g * DOT_KEYS + jj, n.Sk - 1)
                    with ib.for_range(0, w, name="l", kind="vectorized") as lane:
                        d = c * w + lane
                        qk = at(self.Q, self.layout, "q", b, h, row, d) * self.key(b, h, j, d)
                        ib.store(part, (jj, lane), part[jj, lane] + qk)
            width = w // 2
            while width:
                with ib.for_range(0, DOT_KEYS, name="jj", kind="unrolled") as jj:
                    with ib.for_range(0, width, name="l", kind="vectorized") as lane:
                        ib.store(part, (jj, lane), part[jj, lane] + part[jj, lane + width])
                width //= 2
            with ib.for_range(0, DOT_KEYS, name="jj", kind="unrolled") as jj:
                ib.store(tile, (0, g * DOT_KEYS + jj), part[jj, 0])

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
        self.fold_max(mx)
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

        def keep(r: Any, c0: int, w: int) -> None:
            with ib.for_range(0, w, name="e", kind="vectorized") as e:
                ib.store(acc, (r0 + r, c0 + e), pv[r, e])

        start = lambda r, e: acc[r0 + r, e]  # noqa: E731
        self.values_tile(s, pv, b, h, j0, E.min_(n.bk, n.Sk - j0), start, keep)

    def values_tile(
        self,
        weights: Buffer,
        pv: Buffer,
        b: Any,
        h: Any,
        j0: Any,
        keys: Any,
        start: Callable[[Any, Any], E.PrimExpr],
        finish: Callable[[Any, int, int], None],
    ) -> None:
        """For each chunk of V's columns (:func:`value_chunk`): the ``rows`` x chunk
        register tile ``pv`` starts at ``start(r, column)``, adds ``weights[r, j] V[j0 + j]``
        over ``keys`` keys, and ``finish(r, chunk start, chunk width)`` stores it."""
        n, ib = self.n, self.ib
        width = value_chunk(n.rows, n.Dv)
        for c0 in range(0, n.Dv, width):
            w = min(width, n.Dv - c0)
            with ib.for_range(0, n.rows, name="r", kind="unrolled") as r:
                with ib.for_range(0, w, name="e", kind="vectorized") as e:
                    ib.store(pv, (r, e), start(r, c0 + e))
            with ib.for_range(0, keys, name="j") as j:
                with ib.for_range(0, n.rows, name="r", kind="unrolled") as r:
                    p = weights[r, j]
                    with ib.for_range(0, w, name="e", kind="vectorized") as e:
                        vj = self.value(b, h, j0 + j, c0 + e)
                        ib.store(pv, (r, e), pv[r, e] + p * vj)
            with ib.for_range(0, n.rows, name="r", kind="unrolled") as r:
                finish(r, c0, w)

    def store(self, acc: Buffer, lsum: Buffer, b: Any, h: Any, i0: Any) -> None:
        """The task's real rows, each divided by its sum, in the output's layout."""
        n, ib = self.n, self.ib
        with ib.for_range(0, n.bq, name="r") as r:
            with ib.if_then_else(i0 + r < n.Sq):
                inv = ib.let("inv", self.const(1.0) / _lane_sum(lambda lane: lsum[r, lane]))
                with ib.for_range(0, n.Dv, name="e", kind="vectorized") as e:
                    index = self.layout.index("out", b, h, i0 + r, e)
                    ib.store(self.O, index, acc[r, e] * inv)


class _AppendKernel(_Kernel):
    """The kernel of :func:`cached_flash_attention`: its inputs are Q, the past and new
    keys, the past and new values (and the mask); its outputs the attention and the
    present keys and values."""

    def __init__(
        self,
        shape: _Shape,
        layout: AttentionLayout,
        scale: float,
        ins: list[Buffer],
        outs: list[Buffer],
    ) -> None:
        q, past_k, new_k, past_v, new_v = ins[:5]
        present_k, present_v = outs[1:]
        super().__init__(shape, layout, scale, [q, present_k, present_v, *ins[5:]], outs[0])
        self.past = {"k": past_k, "v": past_v}
        self.new = {"k": new_k, "v": new_v}
        self.P = layout.sizes("k", static_shape(past_k.shape))[2]
        # one query row: each task reads its head's keys and values once, a block at a time
        self.fused = shape.rows == 1 and shape.q_blocks == 1

    def build(self) -> Any:
        if not self.fused:  # the present tensors first, then attention over them
            self.copy_cache()
        return super().build()

    def appended(self, which: str, b: Any, h: Any, j: Any, x: Any) -> E.PrimExpr:
        """Cache ``which`` ("k" or "v") with the new entries appended, at logical (b, h, j,
        x): a branch, so only the side that holds position ``j`` is read."""
        layout, P = self.layout, self.P
        past = at(self.past[which], layout, which, b, h, j, x)
        new = at(self.new[which], layout, which, b, h, j - P, x)
        return E.if_then_else(j < P, past, new)

    def key(self, b: Any, h: Any, j: Any, d: Any) -> E.PrimExpr:
        return self.appended("k", b, h, j, d) if self.fused else super().key(b, h, j, d)

    def value(self, b: Any, h: Any, j: Any, e: Any) -> E.PrimExpr:
        return self.appended("v", b, h, j, e) if self.fused else super().value(b, h, j, e)

    @contextmanager
    def task_scope(self) -> Iterator[None]:
        """A task's stores to ``present`` bypass the caches (nothing reads them again this
        call; a cache line is not read in before it is written), and are fenced at its
        end."""
        if not self.fused:
            yield
            return
        with self.ib.attr(self.K.data, NONTEMPORAL, 1), self.ib.attr(self.V.data, NONTEMPORAL, 1):
            yield

    def visit_block(self, t: _Task, j0: Any) -> None:
        """The block's keys and values written to ``present`` row by row (non-temporal:
        :meth:`task_scope`), before the scores read them again from the L1 cache. Written
        apart from the scores, whose loop over features walks eight key rows at once:
        eight rows' partial lines would be in flight at a time."""
        if self.fused:
            self.write_present(t.b, t.h, j0, E.min_(self.n.bk, self.n.Sk - j0))

    def copy_cache(self) -> None:
        """Both present tensors written whole, parallel over the heads (several query
        blocks read each key, so no task can write them as it goes)."""
        n = self.n
        with self.ib.for_range(0, n.B * n.H, name="bh", kind="parallel") as bh:
            self.write_present(bh // n.H, bh % n.H, 0, n.Sk)

    def write_present(self, b: Any, h: Any, j0: Any, count: Any) -> None:
        """Positions ``j0 ..`` (``count`` of them) of head (b, h) of both present caches,
        from the past and new entries."""
        n, ib = self.n, self.ib
        for which, present, width in (("k", self.K, n.D), ("v", self.V, n.Dv)):
            with ib.for_range(0, count, name="j") as j:
                with ib.for_range(0, width, name="x", kind="vectorized") as x:
                    index = self.layout.index(which, b, h, j0 + j, x)
                    ib.store(present, index, self.appended(which, b, h, j0 + j, x))
