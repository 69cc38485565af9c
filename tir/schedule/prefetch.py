"""Lowering of ``Stage.prefetch``: cache-line hints for the region a later iteration reads.

``s[C].prefetch(A, xo, k)`` means, as in TVM: at the start of each iteration of loop
``xo``, ask for the elements of ``A`` that iteration ``xo + k`` will read. Lowering finds
them in the loop's body (every ``BufferLoad`` of ``A``'s buffer, each loop inside ``xo``
relaxed to its range, ``xo`` replaced by ``xo + k``), giving a box per dimension, and
emits, before the body, loops over that box that issue one ``Intrinsic.PREFETCH`` per
cache line of its innermost dimension (plus one for a line the box's end may start).

Every box is moved into the buffer (slid whole where its width is constant, else
clamped), so the last ``k`` iterations (whose ``xo + k`` is past the loop) and the edges
of a box fetch elements the buffer holds: a hint never names an address outside it. A
dimension whose box cannot be bounded (an index that is not affine in the loops) is taken
whole. Trailing dimensions the box covers whole are one contiguous run, hinted as one (a
weight block of 36 KB is 576 lines, not 864 hints for 288 rows of two lines).

``spread=yi`` (Ember's, not TVM's) deals the box's hints out over the iterations of the
loops from ``xo``'s body down to ``yi``: with ``L`` hints over ``E`` iterations, iteration
``j`` issues hints ``[j * P, (j + 1) * P)`` of them, ``P = ceil(L / E)``, those below
``L``, at the top of ``yi``'s body. A core keeps only a few misses in flight (10-16 fill
buffers on Intel), so a burst of hundreds waits as long as the cold read it replaces; a
few per iteration of an inner loop arrive while the body computes. Each iteration issues
the same constant count behind one comparison, with addresses linear in the loops: an
even share (``[j * L // E, (j + 1) * L // E)``, a count of 1 or 2 that varies) took a loop
of unknown trip count and two divisions at every tap of a conv's micro-kernel, and ran it
1.4-2x slower on Zen 3 (AVX2). A spread whose counts are not constants (a symbolic
extent, a box wider than the buffer) falls back to the burst.
"""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING

import numpy as np

from ember.tir import dtype as dt
from ember.tir import expr as E
from ember.tir import stmt as S
from ember.tir.arith.analyzer import Analyzer
from ember.tir.arith.int_set import IntSet, int_set, is_neg_inf, is_pos_inf
from ember.tir.buffer import Buffer
from ember.tir.functor import Mutator, field_values, post_order_visit, substitute

if TYPE_CHECKING:
    from ember.tir.schedule.lower import _Lowering
    from ember.tir.schedule.schedule import Stage
    from ember.tir.te.tensor import IterVar

CACHE_LINE_BYTES = 64


def prefetch_nest(lw: _Lowering, st: Stage, iv: IterVar, body: S.Stmt) -> S.Stmt:
    """``body`` of loop ``iv`` preceded by the prefetches ``st.prefetch`` asked for there."""
    attr = st.iter_attrs.get(iv)
    if attr is None or not attr.prefetches:
        return body
    if attr.kind is S.ForKind.VECTORIZED:  # vectorized after the prefetch was asked for
        raise st._error(f"prefetch: axis '{iv.name}' is vectorized; prefetch at an outer loop", iv)
    hints: list[S.Stmt] = []
    for p in attr.prefetches:
        pst = lw.sch.stage_of(p.tensor.op)
        buf = None if pst is None else lw.buffer_of(pst, p.tensor.value_index)
        if buf is None:
            continue  # inlined: nothing in memory to fetch
        box = read_box(buf, body, iv.var, p.offset)
        if box is None:
            continue
        if p.spread is not None:
            spread = _spread_hints(buf, box, body, p.spread.var, p.locality)
            if spread is None:
                raise st._error(
                    f"prefetch: loop '{p.spread.name}' is not inside '{iv.name}'", p.spread
                )
            if spread is not body:
                body = spread
                continue
        hints.append(_hint_loops(buf, box, Analyzer(), p.locality))
    return S.seq(*hints, body) if hints else body


Box = list[tuple[E.PrimExpr, E.PrimExpr]]


def region_prefetch(
    buf: Buffer, body: S.Stmt, var: E.Var, offset: E.PrimExpr, locality: int = 3
) -> S.Stmt | None:
    """Prefetches of the box of ``buf`` that ``body`` reads with ``var`` at ``var + offset``
    (None when ``body`` does not read ``buf``)."""
    box = read_box(buf, body, var, offset)
    return None if box is None else _hint_loops(buf, box, Analyzer(), locality)


def read_box(buf: Buffer, body: S.Stmt, var: E.Var, offset: E.PrimExpr) -> Box | None:
    """Per dimension of ``buf``, the clamped ``(lo, hi)`` of what ``body`` reads with
    ``var`` at ``var + offset`` (None when ``body`` does not read ``buf``)."""
    loads: list[E.BufferLoad] = []
    loops: dict[E.Var, IntSet] = {}

    def collect(node: object) -> None:
        if isinstance(node, E.BufferLoad) and node.buffer.data is buf.data:
            loads.append(node)
        elif isinstance(node, S.For):
            last = node.min + node.extent - 1
            loops[node.loop_var] = IntSet.interval(node.min, last)

    post_order_visit(body, collect, once=True)
    if not loads:
        return None
    ana = Analyzer()
    shift = {var: var + offset}
    box: list[tuple[E.PrimExpr, E.PrimExpr]] = []
    for d, extent in enumerate(buf.shape):
        top = extent - 1
        lo: E.PrimExpr | None = None
        hi: E.PrimExpr | None = None
        for load in loads:
            s = int_set(substitute(load.indices[d], shift), loops, ana)
            if dt.lanes_of(load.indices[d].dtype) > 1 or is_neg_inf(s.min) or is_pos_inf(s.max):
                lo, hi = E.const(0, extent.dtype), top
                break
            lo = s.min if lo is None else E.min_(lo, s.min)
            hi = s.max if hi is None else E.max_(hi, s.max)
        assert lo is not None and hi is not None
        box.append(_into(lo, hi, top, ana))
    return box


def _into(
    lo: E.PrimExpr, hi: E.PrimExpr, top: E.PrimExpr, ana: Analyzer
) -> tuple[E.PrimExpr, E.PrimExpr]:
    """``[lo, hi]`` moved into ``[0, top]``: slid whole where its width is a constant that
    fits (so the hint count stays a constant a spread can deal out), else clamped at both
    ends."""
    width, top = ana.simplify(hi - lo), ana.simplify(top)
    if isinstance(width, E.IntImm) and isinstance(top, E.IntImm) and width.value <= top.value:
        start = ana.simplify(_clamp(lo, E.const(top.value - width.value, top.dtype)))
        return start, ana.simplify(start + width)
    return ana.simplify(_clamp(lo, top)), ana.simplify(_clamp(hi, top))


def _clamp(e: E.PrimExpr, top: E.PrimExpr) -> E.PrimExpr:
    return E.max_(E.min_(e, top.astype(e.dtype)), E.const(0, e.dtype))


def _runs(buf: Buffer, box: Box, ana: Analyzer) -> tuple[list[E.PrimExpr], Box]:
    """``buf``'s shape and ``box`` with the trailing dimensions the box covers whole merged
    into the one before them: that stretch of memory is contiguous."""
    shape, box = list(buf.shape), list(box)
    if buf.strides:
        return shape, box
    while len(box) > 1 and _whole(box[-1], shape[-1], ana):
        inner = shape.pop()
        lo, hi = box.pop()
        top_lo, top_hi = box.pop()
        box.append((ana.simplify(top_lo * inner), ana.simplify(top_hi * inner + inner - 1)))
        shape[-1] = ana.simplify(shape[-1] * inner)
    return shape, box


def _whole(dim: tuple[E.PrimExpr, E.PrimExpr], extent: E.PrimExpr, ana: Analyzer) -> bool:
    lo, hi = dim
    return ana.can_prove_equal(lo, 0) and ana.can_prove_equal(hi, extent - 1)


def _hint_counts(box: Box, line: int, ana: Analyzer) -> list[E.PrimExpr]:
    """Hints per dimension: one per row of the outer ones, and per cache line of the
    innermost from ``lo``, plus one at ``hi`` (its line may be new)."""
    counts = [ana.simplify(hi - lo + 1) for lo, hi in box[:-1]]
    lo, hi = box[-1]
    return [*counts, ana.simplify(E.floordiv(hi - lo + (line - 1), line) + 1)]


def _hint(
    buf: Buffer,
    shape: list[E.PrimExpr],
    box: Box,
    at: list[E.PrimExpr],
    line: int,
    locality: int,
    ana: Analyzer,
) -> S.Stmt:
    """The hint at index ``at`` of each dimension's hints (``shape`` the merged one)."""
    index = [lo + i for (lo, _), i in zip(box[:-1], at[:-1])]
    lo, hi = box[-1]
    index.append(E.min_(lo + at[-1] * line, hi))
    flat: E.PrimExpr = E.const(0, "int32")
    stride: E.PrimExpr = E.const(1, "int32")
    for i, extent in zip(reversed(index), reversed(shape)):
        flat = flat + i * stride
        stride = stride * extent
    ptr = buf.access_ptr("r", offset=ana.simplify(flat))
    return S.Evaluate(E.Call("int32", E.Intrinsic.PREFETCH, (ptr, E.const(locality, "int32"))))


def _line(buf: Buffer) -> int:
    return max(CACHE_LINE_BYTES // max(dt.bytes_of(buf.dtype), 1), 1)


def _hint_loops(buf: Buffer, box: Box, ana: Analyzer, locality: int = 3) -> S.Stmt:
    """Loops over the box (clamped to the buffer) with one hint per cache line of its rows."""
    line = _line(buf)
    shape, box = _runs(buf, box, ana)
    counts = _hint_counts(box, line, ana)
    at: list[E.PrimExpr] = []
    loops: list[tuple[E.Var, E.PrimExpr]] = []
    for d, count in enumerate(counts):
        if isinstance(count, E.IntImm) and count.value == 1:
            at.append(E.const(0, box[d][0].dtype))
        else:
            v = E.Var(f"{buf.name}_pf{d}", box[d][0].dtype)
            at.append(v)
            loops.append((v, count))
    stmt = _hint(buf, shape, box, at, line, locality, ana)
    for v, count in reversed(loops):
        stmt = S.For(v, E.const(0, v.dtype), count, S.ForKind.SERIAL, stmt)
    return stmt


def _spread_hints(
    buf: Buffer, box: Box, body: S.Stmt, spread: E.Var, locality: int
) -> S.Stmt | None:
    """``body`` with the box's hints dealt out over the loops down to ``spread`` (see the
    module's docstring); ``body`` itself when the counts are not constants, None when no
    loop ``spread`` lies in ``body``."""
    ana = Analyzer()
    path = _path_to(body, spread)
    if path is None:
        return None
    line = _line(buf)
    shape, box = _runs(buf, box, ana)
    counts = _hint_counts(box, line, ana)
    extents = [ana.simplify(f.extent) for f in path]
    sizes = [c.value for c in counts if isinstance(c, E.IntImm)]
    trips = [e.value for e in extents if isinstance(e, E.IntImm)]
    if len(sizes) < len(counts) or len(trips) < len(extents):
        return body
    total, share = int(np.prod(sizes)), int(np.prod(trips))
    per = -(-total // share)  # hints per iteration
    j: E.PrimExpr = E.const(0, "int32")
    for f, extent in zip(path, extents):
        j = j * extent + (f.loop_var - f.min)
    t = E.Var(f"{buf.name}_pf", "int32")
    h = ana.simplify(j * per + t) if per > 1 else ana.simplify(j)
    at: list[E.PrimExpr] = []
    below = total
    for d, size in enumerate(sizes):
        below //= size
        index = E.floordiv(h, below) if below > 1 else h
        at.append(index if d == 0 else E.floormod(index, size))  # h < total: no wrap at 0
    hints = _hint(buf, shape, box, at, line, locality, ana)
    if per * share > total:
        hints = S.IfThenElse(h < E.const(total, h.dtype), hints)
    if per > 1:
        hints = S.For(t, E.const(0, "int32"), E.const(per, "int32"), S.ForKind.SERIAL, hints)
    return _insert_at(body, spread, hints)


def _path_to(stmt: S.Stmt, var: E.Var) -> list[S.For] | None:
    """The loops from ``stmt`` down to (and including) the one over ``var``."""
    if isinstance(stmt, S.For):
        if stmt.loop_var is var:
            return [stmt]
        below = _path_to(stmt.body, var)
        return None if below is None else [stmt, *below]
    for child in _stmt_children(stmt):
        found = _path_to(child, var)
        if found is not None:
            return found
    return None


def _stmt_children(stmt: S.Stmt) -> list[S.Stmt]:
    return [c for c in field_values(stmt) if isinstance(c, S.Stmt)] + [
        c for v in field_values(stmt) if isinstance(v, tuple) for c in v if isinstance(c, S.Stmt)
    ]


class _Insert(Mutator):
    def __init__(self, var: E.Var, hints: S.Stmt) -> None:
        self.var, self.hints = var, hints

    def visit_For(self, s: S.For) -> S.Stmt:
        if s.loop_var is self.var:
            return replace(s, body=S.seq(self.hints, s.body))
        return self.generic_visit(s)

    def visit_expr(self, e: E.PrimExpr) -> E.PrimExpr:
        return e


def _insert_at(body: S.Stmt, var: E.Var, hints: S.Stmt) -> S.Stmt:
    return _Insert(var, hints).visit(body)
