"""Lowering of ``Stage.prefetch``: cache-line hints for the region a later iteration reads.

``s[C].prefetch(A, xo, k)`` means, as in TVM: at the start of each iteration of loop
``xo``, ask for the elements of ``A`` that iteration ``xo + k`` will read. Lowering finds
them in the loop's body (every ``BufferLoad`` of ``A``'s buffer, each loop inside ``xo``
relaxed to its range, ``xo`` replaced by ``xo + k``), giving a box per dimension, and
emits, before the body, loops over that box that issue one ``Intrinsic.PREFETCH`` per
cache line of its innermost dimension (plus one for a line the box's end may start).

Every index is clamped into the buffer, so the last ``k`` iterations (whose ``xo + k``
is past the loop) and the edges of a box fetch elements the buffer holds: a hint never
names an address outside it. A dimension whose box cannot be bounded (an index that
is not affine in the loops) is taken whole.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ember.tir import dtype as dt
from ember.tir import expr as E
from ember.tir import stmt as S
from ember.tir.arith.analyzer import Analyzer
from ember.tir.arith.int_set import IntSet, int_set, is_neg_inf, is_pos_inf
from ember.tir.buffer import Buffer
from ember.tir.functor import post_order_visit, substitute

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
    for tensor, offset in attr.prefetches:
        pst = lw.sch.stage_of(tensor.op)
        buf = None if pst is None else lw.buffer_of(pst, tensor.value_index)
        if buf is None:
            continue  # inlined: nothing in memory to fetch
        hint = region_prefetch(buf, body, iv.var, offset)
        if hint is not None:
            hints.append(hint)
    return S.seq(*hints, body) if hints else body


def region_prefetch(buf: Buffer, body: S.Stmt, var: E.Var, offset: E.PrimExpr) -> S.Stmt | None:
    """Prefetches of the box of ``buf`` that ``body`` reads with ``var`` at ``var + offset``
    (None when ``body`` does not read ``buf``)."""
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
        box.append((ana.simplify(_clamp(lo, top)), ana.simplify(_clamp(hi, top))))
    return _hint_loops(buf, box, ana)


def _clamp(e: E.PrimExpr, top: E.PrimExpr) -> E.PrimExpr:
    return E.max_(E.min_(e, top.astype(e.dtype)), E.const(0, e.dtype))


def _hint_loops(buf: Buffer, box: list[tuple[E.PrimExpr, E.PrimExpr]], ana: Analyzer) -> S.Stmt:
    """Loops over the box (clamped to the buffer) with one hint per cache line of its rows."""
    line = max(CACHE_LINE_BYTES // max(dt.bytes_of(buf.dtype), 1), 1)
    index: list[E.PrimExpr] = []
    loops: list[tuple[E.Var, E.PrimExpr]] = []
    for d, (lo, hi) in enumerate(box):
        v = E.Var(f"{buf.name}_pf{d}", lo.dtype)
        if d == len(box) - 1:  # a hint per line from lo, then one at hi (its line may be new)
            count = ana.simplify(E.floordiv(hi - lo + (line - 1), line) + 1)
            at = E.min_(lo + v * line, hi)
        else:
            count = ana.simplify(hi - lo + 1)
            at = lo + v
        if isinstance(count, E.IntImm) and count.value == 1:
            index.append(lo)
        else:
            index.append(at)
            loops.append((v, count))
    flat: E.PrimExpr = E.const(0, "int32")
    for i, stride in zip(index, buf.row_major_strides()):
        flat = flat + i * stride
    ptr = buf.access_ptr("r", offset=ana.simplify(flat))
    stmt: S.Stmt = S.Evaluate(E.Call("int32", E.Intrinsic.PREFETCH, (ptr,)))
    for v, count in reversed(loops):
        stmt = S.For(v, E.const(0, v.dtype), count, S.ForKind.SERIAL, stmt)
    return stmt
