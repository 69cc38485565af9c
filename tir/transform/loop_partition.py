"""Pass ``loop_partition``: split loops so that ``likely`` guards vanish from the main part.

Lowering guards the tail of a split that does not divide its axis with
``if likely(io*32 + ii < 100): ...`` (or ``select(likely(...), ...)``). For each
loop (serial, parallel, unrolled or vectorized; thread loops are left alone)
this pass finds the guards below it whose condition is affine in the loop
variable, with a range that holds for every value of the loops nested
inside, and splits the loop into up to three consecutive loops: a prologue
and an epilogue that keep the guards, and a main loop, with the loop's kind,
where every such guard is provably true and removed. When a loop's whole
body is one guard, the iterations where the guard is false for every inner
value do nothing and are cut off first; if the guard does not depend on inner
loops at all, only the main loop remains, so ``for ii in range(32): if
likely(96 + ii < 100): body`` becomes ``for ii in range(4): body``. Iterations
where every store that outlives one (not to a buffer allocated in the body) is
under a guard false for every inner value are cut off too: a register tile past
a GEMM's last panel, which would only fill its own scratch. A part with
one iteration becomes its body with the variable substituted; parts are
emitted in the original order, so serial semantics are kept exactly. An
unrolled or vectorized loop is split only into parts of constant length, else
left whole with its guards. A short unrolled loop around a vectorized loop whose
guards depend on it (the column phases of a strided copy) is unrolled here, so each
copy's vectorized loop splits into constant parts (``unroll_loops`` would unroll it
anyway).

Expects: guards as ``likely(cond)`` with ``cond`` a conjunction of comparisons.
Guarantees: the same stores in the same order for serial loops; run
``simplify`` afterwards to clean the prologue and epilogue.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ember.tir import expr as E
from ember.tir import stmt as S
from ember.tir.arith import Analyzer, IntSet
from ember.tir.arith.int_set import is_neg_inf, is_pos_inf
from ember.tir.arith.linear import is_index_type, to_expr, to_linear
from ember.tir.functor import (
    HasBelow,
    MemoMutator,
    Mutator,
    Visitor,
    contains,
    post_order_visit,
    substitute,
    substitute_each,
    uses_var,
)

CompareOp = E.CompareOp


def likely_arg(cond: E.PrimExpr) -> E.PrimExpr | None:
    """The condition of a ``likely`` guard; None for any other expression."""
    if isinstance(cond, E.Call) and cond.op is E.Intrinsic.LIKELY:
        return cond.args[0]
    return None


def conjuncts(c: E.PrimExpr) -> list[E.PrimExpr]:
    """``c``'s operands of ``and``, flattened."""
    if isinstance(c, E.BinOp) and c.op is E.BinaryOp.AND:
        return conjuncts(c.a) + conjuncts(c.b)
    return [c]


@dataclass(frozen=True)
class _Zone:
    """Where a guard conjunct holds for all inner values: ``v <= true_at`` (``upper``) or
    ``v >= true_at``; and where it fails for all of them: ``v >= false_at`` or ``v <= false_at``."""

    upper: bool
    true_at: E.PrimExpr
    false_at: E.PrimExpr | None
    exact: bool = False  # independent of inner loops: false wherever it is not true


_UNKNOWN = object()  # a conjunct that mentions the loop variable but cannot be analyzed


_IMPURE = (E.BufferLoad, E.ProducerLoad, E.Call, E.Reduce, E.Let)


def impure(c: E.PrimExpr) -> bool:
    """Whether condition ``c`` reads memory, calls, reduces or binds (so a pass may not
    evaluate it elsewhere than where it stands); ``unswitch_selects`` asks it too."""
    return contains(c, lambda n: isinstance(n, _IMPURE))


def _has_likely() -> HasBelow:
    """Whether an expression holds a ``likely`` call, remembered per node object for the
    whole pass: the guard search skips the expressions without one (the arithmetic of a
    store's value), however often the same subexpression is met."""
    return HasBelow(lambda e: likely_arg(e) is not None)


class _Guards(Visitor):
    """Collects, for loop variable ``v``, the zone of every likely-guard conjunct below.

    What a guard's zone is depends on the enclosing loops and lets (``dom``, ``local``),
    which stay fixed inside an expression: an expression object met again in the same
    context is skipped, so a subexpression shared by many sums is walked once; one
    without a ``likely`` call is not walked at all."""

    def __init__(self, v: E.Var, ana: Analyzer, has_likely: HasBelow) -> None:
        self.v, self.ana, self.has_likely = v, ana, has_likely
        self.dom: dict[E.Var, IntSet] = {}
        self.local: set[E.Var] = set()
        self.zones: dict[int, list[Any]] = {}  # id(guard) -> per conjunct: _Zone | _UNKNOWN | None
        self.nodes: dict[int, Any] = {}
        self.context = 0  # changes with ``dom`` and ``local``
        self.seen: set[tuple[int, int]] = set()  # (id(expr), context) already walked
        self.alive: list[E.PrimExpr] = []  # keeps the ids in ``seen`` from being reused

    def visit(self, node: Any) -> Any:
        if isinstance(node, E.PrimExpr):
            key = (id(node), self.context)
            if key in self.seen or not self.has_likely(node):
                return None
            self.seen.add(key)
            self.alive.append(node)
        return self._method(node)(self, node)

    def visit_For(self, s: S.For) -> None:
        self.visit(s.min)
        self.visit(s.extent)
        saved = self.dom.get(s.loop_var)
        self.dom[s.loop_var] = IntSet.from_range(E.Range(s.min, s.extent))
        self.context += 1
        self.visit(s.body)
        if saved is None:
            del self.dom[s.loop_var]
        else:
            self.dom[s.loop_var] = saved
        self.context += 1

    def visit_LetStmt(self, s: S.LetStmt) -> None:
        self.visit(s.value)
        self.local.add(s.var)
        self.context += 1
        self.visit(s.body)

    def visit_IfThenElse(self, s: S.IfThenElse) -> None:
        self.consider(s, s.condition)
        self.generic_visit(s)

    def visit_Select(self, e: E.Select) -> None:
        self.consider(e, e.cond)
        self.generic_visit(e)

    def consider(self, node: Any, cond: E.PrimExpr) -> None:
        inner = likely_arg(cond)
        if inner is None:
            return
        found = [self.zone(c) for c in conjuncts(inner)]
        old = self.zones.get(id(node))
        if old is not None:  # the same node at another place: keep what holds at both
            found = [a if a is b or a is None else _UNKNOWN for a, b in zip(old, found)]
        self.zones[id(node)] = found
        self.nodes[id(node)] = node

    def zone(self, c: E.PrimExpr) -> Any:
        v = self.v
        if not uses_var(c, lambda x: x is v):
            return None
        ok = (
            isinstance(c, E.Compare)
            and is_index_type(c.a.dtype)
            and c.op
            not in (
                CompareOp.EQ,
                CompareOp.NE,
            )
        )
        if not ok or impure(c) or uses_var(c, lambda x: x in self.local):
            return _UNKNOWN
        assert isinstance(c, E.Compare)
        # c  <=>  d <= 0
        a, b, strict = {
            CompareOp.LT: (c.a, c.b, 1),
            CompareOp.LE: (c.a, c.b, 0),
            CompareOp.GT: (c.b, c.a, 1),
            CompareOp.GE: (c.b, c.a, 0),
        }[c.op]
        form = to_linear(a, self.ana.keys)
        form.add(to_linear(b, self.ana.keys), -1)
        form.const += strict
        vkey = self.ana.keys.key(v)
        coef = form.coef_of(vkey)
        form.terms.pop(vkey, None)
        if coef == 0 or any(uses_var(t, lambda x: x is v) for t, _ in form.terms.values()):
            return _UNKNOWN
        rest = self.ana.int_set(to_expr(form), self.dom)
        if is_pos_inf(rest.max) or self._mentions_inner(rest.max):
            return _UNKNOWN
        rmin = None if is_neg_inf(rest.min) or self._mentions_inner(rest.min) else rest.min
        zone = _zone_of(coef, rest.max, rmin)
        if rest.is_point():
            zone = _Zone(zone.upper, zone.true_at, zone.false_at, exact=True)
        return zone

    def _mentions_inner(self, e: E.PrimExpr) -> bool:
        return uses_var(e, lambda x: x is self.v or x in self.dom or x in self.local)


def _zone_of(a: int, rmax: E.PrimExpr, rmin: E.PrimExpr | None) -> _Zone:
    """Zones of ``a*v + r <= 0`` with ``r`` in ``[rmin, rmax]``."""
    if a > 0:  # true for all r iff v <= floor(-rmax / a); false iff v >= ceil((1 - rmin) / a)
        false_at = None if rmin is None else (a - rmin) // a
        return _Zone(True, (0 - rmax) // a, false_at)
    A = -a  # true iff v >= ceil(rmax / A); false iff v <= floor((rmin - 1) / A)
    false_at = None if rmin is None else (rmin - 1) // A
    return _Zone(False, (rmax + (A - 1)) // A, false_at)


def _whole_body_guard(body: S.Stmt) -> S.IfThenElse | None:
    """The guard that is a loop body's only effect (through nested loops), if there is one."""
    while isinstance(body, S.For) and body.kind is not S.ForKind.THREAD_BINDING:
        body = body.body
    if (
        isinstance(body, S.IfThenElse)
        and body.else_case is None
        and likely_arg(body.condition) is not None
    ):
        return body
    return None


def _guarded_stores(body: S.Stmt) -> list[tuple[int, ...]] | None:
    """For each store of ``body`` that outlives an iteration (a store to a buffer allocated
    inside ``body`` does not), the ids of the ``likely`` guards whose then-branch holds it;
    None where ``body`` has a statement with another effect (a call, an assertion)."""
    stores: list[tuple[int, ...]] = []
    local: set[Any] = set()

    def walk(n: S.Stmt, above: tuple[int, ...]) -> bool:
        if isinstance(n, (S.For, S.LetStmt, S.AttrStmt)):
            return walk(n.body, above)
        if isinstance(n, S.Allocate):
            local.add(n.buffer.data)
            return walk(n.body, above)
        if isinstance(n, S.SeqStmt):
            return all(walk(part, above) for part in n.stmts)
        if isinstance(n, S.IfThenElse):
            guarded = above + (id(n),) if likely_arg(n.condition) is not None else above
            return walk(n.then_case, guarded) and (n.else_case is None or walk(n.else_case, above))
        if isinstance(n, S.BufferStore):
            if n.buffer.data not in local:
                stores.append(above)
            return True
        return False

    return stores if walk(body, ()) else None


def _dead_iterations(
    body: S.Stmt, zones: dict[int, list[Any]]
) -> tuple[E.PrimExpr | None, E.PrimExpr | None] | None:
    """``(upper, lower)``: the loop variable from which on (``v >= upper``), and up to which
    (``v <= lower``), every lasting store of ``body`` is under a guard conjunct false for
    all inner values, so those iterations do nothing; None for a side with no such bound.
    A GEMM's last column block, narrower than the block, ran the whole k loop for a tile
    past the last panel, every lane tested and none stored: a 104 x 402 x 400 product in
    blocks of two 64-lane panels took 0.71 ms, 0.16 in blocks of one or with the tile cut
    (a 2-core Intel Xeon, AVX-512, one thread)."""
    stores = _guarded_stores(body)
    if not stores:
        return None

    def bound(upper: bool) -> E.PrimExpr | None:
        per_store = []
        for above in stores:
            at = [
                z.false_at
                for g in above
                for z in zones.get(g, [])
                if isinstance(z, _Zone) and z.upper is upper and z.false_at is not None
            ]
            if not at:
                return None
            first = at[0]
            for a in at[1:]:  # any false conjunct kills the store
                first = E.min_(first, a) if upper else E.max_(first, a)
            per_store.append(first)
        out = per_store[0]
        for b in per_store[1:]:  # the body is dead once every store is
            out = E.max_(out, b) if upper else E.min_(out, b)
        return out

    return bound(True), bound(False)


class _RemoveGuards(MemoMutator):
    """Drops the conjuncts known true in the main loop; a guard left with none goes away."""

    def __init__(self, removable: dict[int, list[bool]]) -> None:
        super().__init__()
        self.removable = removable

    def _remaining(self, node: Any, cond: E.PrimExpr) -> E.PrimExpr | None:
        conj = conjuncts(likely_arg(cond))  # type: ignore[arg-type]
        keep = [c for c, drop in zip(conj, self.removable[id(node)]) if not drop]
        if not keep:
            return None
        out = keep[0]
        for c in keep[1:]:
            out = E.logical_and(out, c)
        return E.Call("bool", E.Intrinsic.LIKELY, (out,))

    def visit_IfThenElse(self, s: S.IfThenElse) -> S.Stmt:
        new = self.generic_visit(s)
        if id(s) not in self.removable:
            return new
        cond = self._remaining(s, s.condition)
        if cond is None:
            return new.then_case
        return S.IfThenElse(cond, new.then_case, new.else_case)

    def visit_Select(self, e: E.Select) -> E.PrimExpr:
        new = self.generic_visit(e)
        if id(e) not in self.removable:
            return new
        cond = self._remaining(e, e.cond)
        if cond is None:
            return new.true_value
        return E.Select(new.dtype, cond, new.true_value, new.false_value)


class _Partition(Mutator):
    def __init__(self) -> None:
        self.ana = Analyzer()
        self.has_likely = _has_likely()

    def visit(self, node: Any) -> Any:
        if isinstance(node, E.PrimExpr):
            return node
        return self._method(node)(self, node)

    def visit_LetStmt(self, s: S.LetStmt) -> S.Stmt:
        with self.ana.scope():
            if is_index_type(s.value.dtype):
                self.ana.bind_bound(s.var, self.ana.bound(s.value))
            body = self.visit(s.body)
        return s if body is s.body else S.LetStmt(s.var, s.value, body)

    def visit_For(self, s: S.For) -> S.Stmt:
        if s.kind is not S.ForKind.THREAD_BINDING:
            parts = self.partition(s)
            if parts is not None:
                return parts
        if _unroll_first(s):
            values = [s.min + i for i in range(s.extent.value)]
            copies = substitute_each(s.body, s.loop_var, values)
            return S.seq(*[self.visit(c) for c in copies])
        return self.visit_inside(s)

    def visit_inside(self, s: S.For) -> S.Stmt:
        """The loop with its body processed (this loop itself is not split again)."""
        with self.ana.scope():
            self.ana.bind(s.loop_var, E.Range(s.min, s.extent))
            body = self.visit(s.body)
        if body is s.body:
            return s
        return S.For(s.loop_var, s.min, s.extent, s.kind, body, s.thread_tag, s.annotations)

    def partition(self, s: S.For) -> S.Stmt | None:
        guards = _Guards(s.loop_var, self.ana, self.has_likely)
        guards.visit(s.body)
        zones = [z for found in guards.zones.values() for z in found if isinstance(z, _Zone)]
        if not zones:
            return None
        ana, simp = self.ana, self.ana.simplify
        begin, end = s.min, simp(s.min + s.extent)
        whole = _whole_body_guard(s.body)
        if whole is not None:  # cut off the iterations where the only guard is surely false
            for z in guards.zones.get(id(whole), []):
                if isinstance(z, _Zone) and z.false_at is not None:
                    if z.upper:
                        end = simp(E.min_(end, E.max_(begin, z.false_at)))
                    else:
                        begin = simp(E.max_(begin, E.min_(end, z.false_at + 1)))
        else:  # cut off the iterations where every store is under a guard surely false
            dead = _dead_iterations(s.body, guards.zones)
            if dead is not None:
                upper, lower = dead
                if upper is not None:
                    end = simp(E.min_(end, E.max_(begin, upper)))
                if lower is not None:
                    begin = simp(E.max_(begin, E.min_(end, lower + 1)))
        lo, hi = begin, end  # the main loop: [lo, hi)
        for z in zones:
            if z.upper:
                hi = E.min_(hi, z.true_at + 1)
            else:
                lo = E.max_(lo, z.true_at)
        lo = simp(E.min_(E.max_(lo, begin), end))
        hi = simp(E.max_(E.min_(hi, end), lo))
        if ana.can_prove(hi <= lo):
            unchanged = ana.can_prove_equal(begin, s.min) and ana.can_prove_equal(
                end, s.min + s.extent
            )
            if unchanged:
                return None  # no iteration is free of guards, and none can be cut off
        if s.kind in (S.ForKind.UNROLLED, S.ForKind.VECTORIZED) and not all(
            _is_constant(self.ana, b - a) for a, b in ((begin, lo), (lo, hi), (hi, end))
        ):
            # An unrolled or vectorized loop keeps its constant trip count and its guards:
            # each copy (lane) then indexes registers with constants (a symbolic count would
            # leave a loop, and a GPU thread's register tile would move to local memory).
            return None
        removable = {k: [isinstance(z, _Zone) for z in found] for k, found in guards.zones.items()}
        main_body = _RemoveGuards(removable).visit(s.body)
        if whole is not None and set(guards.zones) == {id(whole)} and all(z.exact for z in zones):
            # outside the main range some conjunct of the only guard is false: nothing runs
            return self.piece(s, lo, hi, main_body) or S.no_op()
        pieces = [
            self.piece(s, begin, lo, s.body),
            self.piece(s, lo, hi, main_body),
            self.piece(s, hi, end, s.body),
        ]
        return S.seq(*[p for p in pieces if p is not None]) if any(pieces) else S.no_op()

    def piece(self, s: S.For, begin: E.PrimExpr, end: E.PrimExpr, body: S.Stmt) -> S.Stmt | None:
        ext = self.ana.simplify(end - begin)
        if self.ana.can_prove(ext <= 0):
            return None
        if E.is_const_int(ext, 1):
            return self.visit(substitute(body, {s.loop_var: begin}))
        kind = s.kind
        if kind is S.ForKind.VECTORIZED and not isinstance(ext, E.IntImm):
            kind = S.ForKind.SERIAL
        loop = S.For(s.loop_var, begin, ext, kind, body, s.thread_tag, s.annotations)
        return self.visit_inside(loop)


UNROLL_FIRST_MAX = 8


def _unroll_first(s: S.For) -> bool:
    """Whether to unroll ``s`` here rather than in ``unroll_loops``: a short unrolled loop
    around a vectorized one. A guard of the vectorized loop that depends on the unrolled
    variable (the column phase of a strided copy: ``0 <= col*2 + px - 1``) has a symbolic
    bound, so the vectorized loop would keep its guards and stay scalar; with the
    variable a constant in each copy, every copy splits into constant pieces. Only such a
    guard is a reason: without one the loop is left to ``unroll_loops``."""
    if s.kind is not S.ForKind.UNROLLED or not isinstance(s.extent, E.IntImm):
        return False
    if not isinstance(s.min, E.IntImm) or s.extent.value > UNROLL_FIRST_MAX:
        return False
    found: list[S.For] = []
    guarded: list[E.PrimExpr] = []

    def scan(n: Any) -> None:
        if isinstance(n, S.For) and n.kind is S.ForKind.VECTORIZED:
            if uses_var(n, lambda v: v is s.loop_var):
                found.append(n)
        cond = likely_arg(n)
        if cond is not None and uses_var(cond, lambda v: v is s.loop_var):
            guarded.append(cond)

    post_order_visit(s.body, scan, once=True)
    # With no guard on the variable, constant copies would split nothing: ``unroll_loops``
    # copies the loop later, after ``simplify`` has run once on the one body instead of on
    # each copy (Winograd's input transform: 36 copies of a select chain; compiling
    # ResNet-18 takes a quarter fewer simplifier steps without them).
    return bool(found) and bool(guarded)


def _is_constant(ana: Analyzer, e: E.PrimExpr) -> bool:
    lo, hi = ana.const_int_bound(e)
    return lo == hi


def loop_partition(func: S.PrimFunc) -> S.PrimFunc:
    """``func`` with likely-guarded loops split into guard-free main parts and guarded tails."""
    pass_ = _Partition()
    pass_.ana.bind_shapes(func.buffers)
    pass_.ana.bind_positive(func.attr("positive_vars", ()))
    return pass_.visit_func(func)


def loop_partition_stmt(stmt: S.Stmt) -> S.Stmt:
    """The same on a bare statement."""
    return _Partition().visit(stmt)
