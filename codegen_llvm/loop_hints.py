"""Which loops LLVM's loop vectorizer must leave alone, and the ``llvm.loop`` hints that say so.

Used by :mod:`ember.codegen_llvm.codegen` and :mod:`.parallel` when they emit a loop.
LLVM 21 and later vectorize a ``llvm.maxnum``/``llvm.minnum`` reduction without
fast-math flags by checking every vector of inputs for NaN and leaving for the scalar
loop when one is found (LLVM pull request 148239). In the LLVM that llvmlite ships
(22, built with assertions) that path is wrong twice over:

* on AVX-512 it miscompiles a padded max window whose local accumulator rows are
  unrolled (an unrolled row read one column off; issue 22 item 9), and
* for some constant trip counts (72-79, 88-95, ... on Zen 4) its two cost models
  disagree and an ``assert`` aborts the whole process (issue 22 item 12).

Ember vectorizes the loops a schedule marks itself (``vectorize_loops``), so a float
min/max reduction whose loop the schedule left serial loses nothing it asked for when
LLVM's loop vectorizer skips it: every loop around a store ``B[..] = max(B[..], ..)``
(or ``min``) of a float type gets ``llvm.loop.vectorize.enable = false``. LLVM's
other vectorizers (SLP over unrolled code) still run, and loops without such a store
keep LLVM's loop vectorizer. TVM leaves this to LLVM; Ember differs because this
LLVM is wrong here.

The serial copy of a versioned loop (``vectorize_loops.version_lane_guards``: the lanes
of an edge tile, each under its guard) gets ``llvm.loop.unroll.disable``. LLVM's full
unroll runs before its loop vectorizer, and it turned each 16-lane edge loop of an
unrolled micro-kernel into 16 guarded scalar statements: a 37x150x29 GEMM tile (6 rows,
4 reduction steps unrolled) became 850 scalar multiply-adds, 1.8 MB of optimised IR and
17 s of LLVM's O3. Kept as a loop, it reaches the loop vectorizer, which writes it with
masked vector loads and stores (0.24 MB, the whole build 3x faster). A loop around a
float min/max reduction keeps the old path, for the reasons above.
"""

from __future__ import annotations

from ember.tir import dtype as dt
from ember.tir import expr as E
from ember.tir import stmt as S
from ember.tir.functor import OnceVisitor, Visitor
from ember.tir.transform.vectorize_loops import LANE_EDGE

Hint = str | tuple[str, bool]
NO_LOOP_VECTORIZE: Hint = ("llvm.loop.vectorize.enable", False)
UNROLL_FULL: Hint = "llvm.loop.unroll.full"
NO_UNROLL: Hint = "llvm.loop.unroll.disable"

_MINMAX = (E.BinaryOp.MIN, E.BinaryOp.MAX)


class _MinMaxOfLoad(OnceVisitor):
    """Whether an expression holds a float min/max and a read of ``data`` (at any depth:
    the accumulator may sit under a cast or a ``let``); each distinct node looked at once."""

    def __init__(self, data: E.Var) -> None:
        super().__init__()
        self.data = data
        self.minmax = self.reads = False

    def visit_BinOp(self, e: E.BinOp) -> None:
        self.minmax = self.minmax or (e.op in _MINMAX and dt.is_float(e.dtype))
        self.generic_visit(e)

    def visit_BufferLoad(self, e: E.BufferLoad) -> None:
        self.reads = self.reads or e.buffer.data is self.data
        self.generic_visit(e)


class _ReductionLoops(Visitor):
    """Collects every ``For`` that encloses a float min/max reduction store."""

    def __init__(self) -> None:
        self.open: list[S.For] = []
        self.found: set[S.For] = set()

    def visit_For(self, s: S.For) -> None:
        self.open.append(s)
        self.generic_visit(s)
        self.open.pop()

    def visit_BufferStore(self, s: S.BufferStore) -> None:
        if not self.open or not dt.is_float(s.value.dtype):
            return
        probe = _MinMaxOfLoad(s.buffer.data)
        probe.visit(s.value)
        if probe.minmax and probe.reads:
            self.found.update(self.open)


def minmax_reduction_loops(body: S.Stmt) -> set[S.For]:
    """The loops (by identity) that enclose a float ``B[..] = max/min(B[..], ..)`` store."""
    walker = _ReductionLoops()
    walker.visit(body)
    return walker.found


def loop_hints(loop: S.For, serial_reductions: set[S.For]) -> tuple[Hint, ...]:
    """The ``llvm.loop`` hints for ``loop``: full unroll if the schedule unrolls it, no
    loop vectorization if it encloses a float min/max reduction, no unrolling if it is a
    versioned loop's edge lanes (see the module notes)."""
    hints: list[Hint] = []
    if loop.kind is S.ForKind.UNROLLED:
        hints.append(UNROLL_FULL)
    if loop in serial_reductions:
        hints.append(NO_LOOP_VECTORIZE)
    elif dict(loop.annotations).get(LANE_EDGE):
        hints.append(NO_UNROLL)
    return tuple(hints)
