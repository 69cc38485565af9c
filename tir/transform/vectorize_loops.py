"""Pass ``vectorize_loops``: loops marked ``vectorized`` become vector statements.

Expects: flattened buffers (one index per access); vectorized loops with a
constant extent.
Guarantees: a vectorized loop whose body is a sequence of stores is replaced
by the same stores on vectors of ``extent`` lanes (a guard that does not depend
on the loop stays around them): the loop variable becomes
``ramp(min, 1, lanes)`` (a partitioned loop's main part starts past its guards),
loop-invariant values are broadcast, and an index that is affine in the variable
(through casts that widen a signed integer too) becomes a ``Ramp``, so the backend
emits one vector load or store. A serial loop inside the vectorized one (a reduction ``for k`` under
a vectorized output axis) stays a loop with a vector body, as in TVM: the
vectorized loop moves inward. Where that is not possible (a store whose index does
not move with the loop, an inner loop whose bounds move with it, conditions, an
index that is not affine, a warp
shuffle, an ``if_then_else`` whose sides read memory under a condition that
differs between lanes, a call of a C function)
the loop stays a serial loop — correct, and left to the backend's own
vectorizer — or, with at most 8 iterations, an unrolled one. A loop wider than
``NATIVE_LANES`` is cut into power-of-two pieces (see ``_pieces``).

An ``if_then_else``
whose sides only compute becomes a vector select; one whose sides read memory
under a lane-invariant condition becomes a vector ``if_then_else`` with that
scalar condition, which every backend evaluates lazily (a padded fetch reads the
whole vector only where all of it is in bounds). A loop longer than
``MAX_LANES`` becomes a serial loop over vector chunks of ``MAX_LANES`` lanes and a
shorter vector tail: LLVM aborts on a vector of 100003 lanes (a constant with more
operands than a DAG node holds), and no machine has registers that wide anyway.
With the context's ``tir.disable_vectorize`` (as in TVM) every vectorized loop
becomes a serial loop.

A vectorized loop left serial is marked ``vectorize_fallback``. For CPU code,
:func:`version_lane_guards` (run by the LLVM backend) takes up those whose body is a
guard that differs between lanes but holds on an interval of them (comparisons of
sides affine in the loop variable, joined by ``and``: the edge of a split that does
not divide, inside a fused loop that loop partitioning cannot cut), and versions
them: where the guard holds at the first and the last lane it holds for all, and
the vector statements run; elsewhere (the edge tile) the serial loop does. Each
such test is then unswitched: hoisted to the top of the innermost loop whose
variable it reads, with that loop's body copied under it (at most
``MAX_UNSWITCHED`` tests per loop), so the vector copy holds no serial loop that
indexes its registers' buffer by a variable (which would keep LLVM from promoting a
GEMM's accumulators to registers). Without this, a GEMM tile whose column edge sat
in a fused parallel loop ran its whole micro-kernel as scalar code, 3-10x slower.
"""

from __future__ import annotations

from typing import Any

from ember.tir import dtype as dt
from ember.tir import expr as E
from ember.tir import stmt as S
from ember.tir.functor import (
    MemoMutator,
    Mutator,
    contains,
    free_vars,
    post_order_stmts,
    substitute,
    uses_var,
)
from ember.tir.structural import structural_equal
from ember.tir.transform.context import PassContext


class _CannotVectorize(Exception):
    pass


_UNROLL_FALLBACK = 8  # a loop this short that cannot be vectorized is unrolled instead
MAX_LANES = 64  # the widest vector emitted; longer loops are cut into chunks of this many
NATIVE_LANES = 16  # longer vectors are cut into power-of-two pieces (see _pieces)
Tests = dict[int, E.PrimExpr]  # versioning tests by id (held, so no other node reuses one)


def _lanes(e: E.PrimExpr) -> int:
    return dt.lanes_of(e.dtype)


def _widens(src: str, dst: str) -> bool:
    """Whether a cast from ``src`` to ``dst`` keeps every value: signed integers to a
    signed integer at least as wide."""
    signed = dt.is_int(src) and dt.is_int(dst) and not (dt.is_uint(src) or dt.is_uint(dst))
    return signed and dt.bits_of(dst) >= dt.bits_of(src)


def _broadcast(e: E.PrimExpr, lanes: int) -> E.PrimExpr:
    if _lanes(e) == lanes:
        return e
    if isinstance(e, E.Broadcast):
        return E.Broadcast(dt.with_lanes(e.dtype, lanes), e.value, lanes)
    return E.Broadcast(dt.with_lanes(e.dtype, lanes), e, lanes)


class _VectorizeExpr(MemoMutator):
    """Rewrites one expression with ``var`` standing for ``ramp(0, 1, lanes)``. A node's
    vector form depends on the node alone, so each distinct node is rewritten once: fused
    elementwise chains that read a value twice (``x * sigmoid(x)``, GELU, ``max(x, -x)``)
    are DAGs whose trees double with each such step (a chain of four took minutes)."""

    def __init__(self, var: E.Var, lanes: int) -> None:
        super().__init__()
        self.var, self.lanes = var, lanes

    def visit_Var(self, v: E.Var) -> E.PrimExpr:
        if v is self.var:
            return E.Ramp(
                dt.with_lanes(v.dtype, self.lanes),
                E.const(0, v.dtype),
                E.const(1, v.dtype),
                self.lanes,
            )
        return v

    def visit_BinOp(self, e: E.BinOp) -> E.PrimExpr:
        a, b = self.visit(e.a), self.visit(e.b)
        if a is e.a and b is e.b:
            return e
        la, lb = _lanes(a), _lanes(b)
        n = max(la, lb)
        if e.op in (E.BinaryOp.ADD, E.BinaryOp.SUB) and (
            isinstance(a, E.Ramp) or isinstance(b, E.Ramp)
        ):
            ramp = _ramp_addsub(e.op, a, b)
            if ramp is not None:
                return ramp
        if e.op is E.BinaryOp.MUL:
            ramp = _ramp_mul(a, b)
            if ramp is not None:
                return ramp
        a, b = _broadcast(a, n), _broadcast(b, n)
        return E.BinOp(dt.with_lanes(e.dtype, n), e.op, a, b)

    def visit_Compare(self, e: E.Compare) -> E.PrimExpr:
        a, b = self.visit(e.a), self.visit(e.b)
        if a is e.a and b is e.b:
            return e
        n = max(_lanes(a), _lanes(b))
        return E.Compare(dt.with_lanes("bool", n), e.op, _broadcast(a, n), _broadcast(b, n))

    def visit_Select(self, e: E.Select) -> E.PrimExpr:
        c, t, f = self.visit(e.cond), self.visit(e.true_value), self.visit(e.false_value)
        if c is e.cond and t is e.true_value and f is e.false_value:
            return e
        n = max(_lanes(c), _lanes(t), _lanes(f))
        return E.Select(
            dt.with_lanes(e.dtype, n), _broadcast(c, n), _broadcast(t, n), _broadcast(f, n)
        )

    def visit_Not(self, e: E.Not) -> E.PrimExpr:
        a = self.visit(e.a)
        return e if a is e.a else E.Not(a.dtype, a)

    def visit_Cast(self, e: E.Cast) -> E.PrimExpr:
        v = self.visit(e.value)
        if v is e.value:
            return e
        if isinstance(v, E.Ramp) and _widens(v.dtype, e.dtype):
            # int64(ramp(b, s)) is ramp(int64(b), int64(s)) as an index never wraps: an
            # int32 lane offset added to an int64 base read from memory (an LSTM step's
            # row, a runtime slice start) stays an affine index, not a gather
            scalar = dt.element_of(e.dtype)
            base, stride = (
                E.const(x.value, scalar) if isinstance(x, E.IntImm) else E.Cast(scalar, x)
                for x in (v.base, v.stride)
            )
            return E.Ramp(dt.with_lanes(scalar, v.lanes), base, stride, v.lanes)
        return E.Cast(dt.with_lanes(e.dtype, _lanes(v)), v)

    def visit_Call(self, e: E.Call) -> E.PrimExpr:
        if e.op in E.EXTERN_CALLS and uses_var(e, lambda v: v is self.var):
            raise _CannotVectorize  # a C function of scalars
        if e.op is E.Intrinsic.IF_THEN_ELSE and uses_var(e, lambda v: v is self.var):
            cond, t, f = e.args
            if not (_reads_memory(t) or _reads_memory(f)):
                return self.visit(E.Select(e.dtype, *e.args))  # no side effects: both may run
            if uses_var(cond, lambda v: v is self.var):
                raise _CannotVectorize  # lanes differ in bounds: each lane guards its own load
            # one test for all lanes (a padding on an outer axis): the whole vector is read
            # only where the whole vector is in bounds; backends keep the branch lazy
            vt, vf = self.visit(t), self.visit(f)
            n = max(_lanes(vt), _lanes(vf))
            return E.Call(
                dt.with_lanes(e.dtype, n), e.op, (cond, _broadcast(vt, n), _broadcast(vf, n))
            )
        args = tuple(self.visit(a) for a in e.args)
        if all(a is b for a, b in zip(args, e.args)):
            return e
        if e.op in E.WARP_SHUFFLES:
            raise _CannotVectorize  # a lane exchange of scalars; no vector form
        n = max(_lanes(a) for a in args)
        args = tuple(_broadcast(a, n) for a in args)
        return E.Call(dt.with_lanes(e.dtype, n), e.op, args)

    def visit_BufferLoad(self, e: E.BufferLoad) -> E.PrimExpr:
        (index,) = e.indices
        idx = self.visit(index)
        if idx is index:
            return e
        if not isinstance(idx, E.Ramp):
            raise _CannotVectorize
        return E.BufferLoad(dt.with_lanes(e.dtype, idx.lanes), e.buffer, (idx,))

    def visit_Let(self, e: E.Let) -> E.PrimExpr:
        raise _CannotVectorize

    def visit_Ramp(self, e: E.Ramp) -> E.PrimExpr:
        raise _CannotVectorize

    def visit_Broadcast(self, e: E.Broadcast) -> E.PrimExpr:
        raise _CannotVectorize


def _reads_memory(e: E.PrimExpr) -> bool:
    return contains(e, lambda n: isinstance(n, E.BufferLoad))


def _ramp_addsub(op: E.BinaryOp, a: E.PrimExpr, b: E.PrimExpr) -> E.PrimExpr | None:
    if isinstance(a, E.Ramp) and _lanes(b) == 1:
        base = a.base + b if op is E.BinaryOp.ADD else a.base - b
        return E.Ramp(a.dtype, base, a.stride, a.lanes)
    if isinstance(b, E.Ramp) and _lanes(a) == 1:
        if op is E.BinaryOp.ADD:
            return E.Ramp(b.dtype, a + b.base, b.stride, b.lanes)
        return E.Ramp(b.dtype, a - b.base, E.const(0, b.stride.dtype) - b.stride, b.lanes)
    if isinstance(a, E.Ramp) and isinstance(b, E.Ramp) and a.lanes == b.lanes:
        if op is E.BinaryOp.ADD:
            return E.Ramp(a.dtype, a.base + b.base, a.stride + b.stride, a.lanes)
        return E.Ramp(a.dtype, a.base - b.base, a.stride - b.stride, a.lanes)
    return None


def _ramp_mul(a: E.PrimExpr, b: E.PrimExpr) -> E.PrimExpr | None:
    if isinstance(a, E.Ramp) and _lanes(b) == 1:
        return E.Ramp(a.dtype, a.base * b, a.stride * b, a.lanes)
    if isinstance(b, E.Ramp) and _lanes(a) == 1:
        return E.Ramp(b.dtype, a * b.base, a * b.stride, b.lanes)
    return None


def _vectorize_store(s: S.BufferStore, var: E.Var, lanes: int) -> S.Stmt:
    vec = _VectorizeExpr(var, lanes)
    (index,) = s.indices
    idx = vec.visit(index)
    if not isinstance(idx, E.Ramp):
        raise _CannotVectorize  # the store does not move with the loop: a reduction
    if not isinstance(idx.stride, E.IntImm) or idx.stride.value == 0:
        raise _CannotVectorize  # lanes might write one element
    value = _broadcast(vec.visit(s.value), lanes)
    return S.BufferStore(s.buffer, value, (idx,))


def _vectorize_body(body: S.Stmt, var: E.Var, lanes: int, tests: Tests | None = None) -> S.Stmt:
    """Vector statements for ``body``; with ``tests`` (a CPU build), a guard on an
    interval of lanes is versioned and its test added to ``tests`` (by id)."""
    if isinstance(body, S.BufferStore):
        return _vectorize_store(body, var, lanes)
    if isinstance(body, S.SeqStmt):
        return S.SeqStmt(tuple(_vectorize_body(b, var, lanes, tests) for b in body.stmts))
    if isinstance(body, S.IfThenElse) and not uses_var(body.condition, lambda v: v is var):
        # a guard that does not move with the lanes holds for all of them or none
        other = body.else_case
        return S.IfThenElse(
            body.condition,
            _vectorize_body(body.then_case, var, lanes, tests),
            None if other is None else _vectorize_body(other, var, lanes, tests),
        )
    if isinstance(body, S.For):
        return _vectorize_inner_loop(body, var, lanes, tests)
    if isinstance(body, S.LetStmt) and not uses_var(body.value, lambda v: v is var):
        inner = _vectorize_body(body.body, var, lanes, tests)
        return S.LetStmt(body.var, body.value, inner)
    versioned = None if tests is None else _versioned(body, var, lanes, tests)
    if versioned is not None:
        return versioned
    raise _CannotVectorize


def _vectorize_inner_loop(loop: S.For, var: E.Var, lanes: int, tests: Tests | None) -> S.Stmt:
    """A serial loop inside the vectorized one stays a loop whose body is vector code:
    the vectorized loop moves inward (as TVM's ``VectorizeLoop`` does), so a reduction
    ``for k`` under a vectorized output axis updates a whole vector of outputs per step.
    Each lane's statements still run in their order; only lanes are interleaved, which
    ``vectorize`` asserts is allowed."""
    bounds_move = uses_var(loop.min, lambda v: v is var) or uses_var(
        loop.extent, lambda v: v is var
    )
    if bounds_move or loop.kind not in (S.ForKind.SERIAL, S.ForKind.UNROLLED):
        raise _CannotVectorize  # lanes with different trip counts, or threads / a pool
    body = _vectorize_body(loop.body, var, lanes, tests)
    return S.For(
        loop.loop_var, loop.min, loop.extent, loop.kind, body, loop.thread_tag, loop.annotations
    )


MAX_UNSWITCHED = 2  # versioning tests hoisted per loop (each doubles its body)


def _versioned(body: S.Stmt, var: E.Var, lanes: int, tests: Tests) -> S.Stmt | None:
    """``body``, a guard on lanes without an else, as ``if (guard at every lane) vector
    body else serial loop``; None where the guard's lanes need not form an interval."""
    if not isinstance(body, S.IfThenElse) or body.else_case is not None:
        return None
    every = _at_every_lane(body.condition, var, lanes)
    if every is None:
        return None
    vector = _vectorize_body(body.then_case, var, lanes, tests)  # may raise _CannotVectorize
    serial = S.For(
        var, E.const(0, var.dtype), E.const(lanes, var.dtype), S.ForKind.SERIAL, body,
        annotations=((LANE_EDGE, True),),
    )  # fmt: skip
    test = E.Call("bool", E.Intrinsic.LIKELY, (every,))
    tests[id(test)] = test
    return S.IfThenElse(test, vector, serial)


class _Unswitch(Mutator):
    """Hoist versioning tests (see the module notes; ``tests`` holds their ids) to the
    top of the innermost loop whose variable they read: ``for v: B`` becomes
    ``for v: if t: B[t=1] else B[t=0]``."""

    def __init__(self, tests: Tests) -> None:
        self.tests = tests

    def visit_For(self, s: S.For) -> S.Stmt:
        body = self.visit(s.body)
        bound = _bound_vars(body)
        hoist: list[E.PrimExpr] = []
        for t in _tests_in(body, self.tests):
            names = free_vars(t)
            if s.loop_var in names and not names & bound:
                if not any(structural_equal(t, u) for u in hoist):
                    hoist.append(t)
        for t in hoist[:MAX_UNSWITCHED]:
            taken = _Resolve(self.tests, t, True).visit(body)
            body = S.IfThenElse(t, taken, _Resolve(self.tests, t, False).visit(body))
        if body is s.body:
            return s
        return S.For(s.loop_var, s.min, s.extent, s.kind, body, s.thread_tag, s.annotations)


def _tests_in(node: S.Stmt, tests: Tests) -> list[E.PrimExpr]:
    found: list[E.PrimExpr] = []

    def visit(n: object) -> None:
        if isinstance(n, S.IfThenElse) and id(n.condition) in tests:
            found.append(n.condition)

    post_order_stmts(node, visit)
    return found


def _bound_vars(node: S.Stmt) -> set[E.Var]:
    out: set[E.Var] = set()

    def visit(n: object) -> None:
        if isinstance(n, S.For):
            out.add(n.loop_var)
        elif isinstance(n, S.LetStmt):
            out.add(n.var)
        elif isinstance(n, S.Allocate):
            out.add(n.buffer.data)

    post_order_stmts(node, visit)
    return out


class _Resolve(Mutator):
    """A body with every versioning test equal to ``test`` decided as ``value`` (each
    has its serial loop as the else case)."""

    def __init__(self, tests: Tests, test: E.PrimExpr, value: bool) -> None:
        self.tests, self.test, self.value = tests, test, value

    def visit_IfThenElse(self, s: S.IfThenElse) -> S.Stmt:
        if id(s.condition) in self.tests and structural_equal(s.condition, self.test):
            return self.visit(s.then_case if self.value else s.else_case)
        return self.generic_visit(s)


def _at_every_lane(cond: E.PrimExpr, var: E.Var, lanes: int) -> E.PrimExpr | None:
    """A scalar condition that implies ``cond`` for every ``var`` in ``[0, lanes)``: ``cond``
    at the first and at the last lane, when ``cond`` is a conjunction of comparisons
    whose sides are affine in ``var`` (each holds on an interval of lanes, so holding
    at both ends it holds between). None for any other condition."""
    if isinstance(cond, E.Call) and cond.op is E.Intrinsic.LIKELY:
        return _at_every_lane(cond.args[0], var, lanes)
    if isinstance(cond, E.BinOp) and cond.op is E.BinaryOp.AND:
        a, b = _at_every_lane(cond.a, var, lanes), _at_every_lane(cond.b, var, lanes)
        return None if a is None or b is None else E.logical_and(a, b)
    if not uses_var(cond, lambda v: v is var):
        return cond
    ordered = (E.CompareOp.LT, E.CompareOp.LE, E.CompareOp.GT, E.CompareOp.GE)
    if not isinstance(cond, E.Compare) or cond.op not in ordered or not dt.is_int(cond.a.dtype):
        return None
    try:
        sides = [_VectorizeExpr(var, lanes).visit(x) for x in (cond.a, cond.b)]
    except _CannotVectorize:
        return None
    if not all(isinstance(x, E.Ramp) or _lanes(x) == 1 for x in sides):
        return None  # not affine in the lanes
    first = substitute(cond, {var: E.const(0, var.dtype)})
    last = substitute(cond, {var: E.const(lanes - 1, var.dtype)})
    return E.logical_and(first, last)


def _vectorize_in_chunks(body: S.Stmt, var: E.Var, extent: int, annotations: tuple) -> S.Stmt:
    """``for var in 0..extent: body`` as a serial loop over ``extent // MAX_LANES`` vector
    chunks of ``MAX_LANES`` lanes, then one vector (or scalar) tail of the rest."""
    chunks, tail = divmod(extent, MAX_LANES)
    outer = E.Var(f"{var.name}_chunk", var.dtype)
    lane = E.Var(f"{var.name}_lane", var.dtype)
    start = outer * E.const(MAX_LANES, var.dtype)
    chunk = _vectorize_body(substitute(body, {var: start + lane}), lane, MAX_LANES)
    parts: list[S.Stmt] = [
        S.For(
            outer,
            E.const(0, var.dtype),
            E.const(chunks, var.dtype),
            S.ForKind.SERIAL,
            chunk,
            "",
            annotations,
        )
    ]
    if tail:
        parts.append(_vectorize_pieces(body, var, tail, chunks * MAX_LANES))
    return parts[0] if len(parts) == 1 else S.SeqStmt(tuple(parts))


def _pieces(extent: int) -> list[int]:
    """Vector widths for ``extent`` lanes: powers of two from ``NATIVE_LANES`` up, then
    the rest as one vector. LLVM widens a 48-lane vector to 64 and then moves its
    elements one by one (and keeps a GEMM's 48-lane accumulators on the stack): a
    48-wide GEMM panel ran 5-10x slower than a 32- or 64-wide one."""
    if extent <= NATIVE_LANES or extent & (extent - 1) == 0:
        return [extent]
    out, rest = [], extent
    while rest >= NATIVE_LANES:
        width = 1 << (rest.bit_length() - 1)
        out.append(width)
        rest -= width
    return out + ([rest] if rest else [])


def _vectorize_pieces(
    body: S.Stmt,
    var: E.Var,
    extent: int,
    offset: int = 0,
    tests: Tests | None = None,
) -> S.Stmt:
    """``for var in offset..offset+extent: body`` as one vector statement per piece."""
    lane = E.Var(f"{var.name}_lane", var.dtype)
    parts: list[S.Stmt] = []
    for width in _pieces(extent):
        start = E.const(offset, var.dtype)
        if width == 1:
            parts.append(substitute(body, {var: start}))
        elif width == extent and offset == 0:
            parts.append(_vectorize_body(body, var, width, tests))
        else:
            piece = substitute(body, {var: start + lane})
            parts.append(_vectorize_body(piece, lane, width, tests))
        offset += width
    return parts[0] if len(parts) == 1 else S.SeqStmt(tuple(parts))


FALLBACK = "vectorize_fallback"  # annotation of a vectorized loop left serial
LANE_EDGE = "lane_edge"  # annotation of the serial copy of a versioned loop (the edge tile)


class _Vectorize(Mutator):
    def __init__(self, disabled: bool = False) -> None:
        self.disabled = disabled

    def visit(self, node: Any) -> Any:
        if isinstance(node, E.PrimExpr):  # outside vectorized loops nothing else changes
            return node
        return self._method(node)(self, node)

    def visit_For(self, s: S.For) -> S.Stmt:
        body = self.visit(s.body)
        if s.kind is not S.ForKind.VECTORIZED:
            if body is s.body:
                return s
            return S.For(s.loop_var, s.min, s.extent, s.kind, body, s.thread_tag, s.annotations)
        serial = S.For(
            s.loop_var, s.min, s.extent, S.ForKind.SERIAL, body, s.thread_tag, s.annotations
        )
        if self.disabled or not isinstance(s.extent, E.IntImm) or s.extent.value <= 1:
            return serial
        try:
            return _vectorize_loop(s, body)
        except _CannotVectorize:
            if s.extent.value <= _UNROLL_FALLBACK:
                # unrolled, each lane's accesses have constant offsets (registers on a GPU)
                return S.For(
                    s.loop_var, s.min, s.extent, S.ForKind.UNROLLED, body, "", s.annotations
                )
            marked = (*s.annotations, (FALLBACK, True))
            return S.For(s.loop_var, s.min, s.extent, S.ForKind.SERIAL, body, s.thread_tag, marked)


def _vectorize_loop(s: S.For, body: S.Stmt, tests: Tests | None = None) -> S.Stmt:
    """The vector statements of loop ``s`` (with ``body``); raises ``_CannotVectorize``."""
    extent = s.extent.value  # type: ignore[attr-defined]
    # lanes ``min + i``: the main part of a partitioned loop starts past its guards
    lanes_body = body
    if not E.is_const_int(s.min, 0):
        lanes_body = substitute(body, {s.loop_var: s.min + s.loop_var})
    if extent > MAX_LANES:
        return _vectorize_in_chunks(lanes_body, s.loop_var, extent, s.annotations)
    return _vectorize_pieces(lanes_body, s.loop_var, extent, tests=tests)


class _Version(Mutator):
    """Version the loops marked ``FALLBACK``; the ids of the tests made go to ``tests``."""

    def __init__(self) -> None:
        self.tests: Tests = {}

    def visit(self, node: Any) -> Any:
        if isinstance(node, E.PrimExpr):  # only marked loops change
            return node
        return self._method(node)(self, node)

    def visit_For(self, s: S.For) -> S.Stmt:
        body = self.visit(s.body)
        if dict(s.annotations).get(FALLBACK):
            try:
                return _vectorize_loop(s, body, self.tests)
            except _CannotVectorize:
                pass
        if body is s.body:
            return s
        return S.For(s.loop_var, s.min, s.extent, s.kind, body, s.thread_tag, s.annotations)


def version_lane_guards(func: S.PrimFunc) -> S.PrimFunc:
    """Vectorize the loops ``vectorize_loops`` left serial for a guard on their lanes,
    by versioning and unswitching (see the module notes). For CPU code only: on a GPU
    a lane's guard is its thread's own test, and a versioned branch would split a
    warp around its asynchronous copies. The LLVM backend runs it before codegen."""
    versioner = _Version()
    out = versioner.visit_func(func)
    return _Unswitch(versioner.tests).visit_func(out) if versioner.tests else out


def vectorize_loops(func: S.PrimFunc, ctx: PassContext | None = None) -> S.PrimFunc:
    """Runs the pass; with ``tir.disable_vectorize`` set, vectorized loops become serial ones."""
    disabled = ctx is not None and ctx.get("tir.disable_vectorize")
    return _Vectorize(disabled).visit_func(func)
