"""``Stage.prefetch``: the TIR it lowers to, the LLVM it emits, and unchanged results."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import ember
from ember import te
from ember.errors import ScheduleError
from ember.tir import expr as E
from ember.tir import stmt as S
from ember.tir.arith.analyzer import Analyzer
from ember.tir.functor import post_order_visit, substitute
from ember.tir.schedule.lower import schedule_to_primfunc
from ember.tir.structural import assert_structural_equal
from tests.nightly import examples
from tests.numerics import check


def _rows(n: int, m: int):
    A = te.placeholder((n, m), name="A")
    C = te.compute((n, m), lambda i, j: A[i, j] * 2.0 + 1.0, name="C")
    return A, C


def _loop_of(func: S.PrimFunc, name: str) -> S.For:
    found: list[S.For] = []
    post_order_visit(
        func.body,
        lambda n: found.append(n) if isinstance(n, S.For) and n.loop_var.name == name else None,
    )
    assert len(found) == 1, name
    return found[0]


def test_prefetch_lowers_to_a_hint_per_line_of_the_next_row():
    # Before: for i: for j: C[i, j] = A[i, j] * 2 + 1, with s[C].prefetch(A, i, 1).
    # Expected: at the top of loop i, A's row i + 1 (clamped to the last row), whole, so one
    # contiguous run of 20 floats, hinted at 16-float cache lines from its start: offsets
    # 0 and 16 of the row, and min(32, 19) = 19, the line the row ends in. Locality 3 (L1).
    A, C = _rows(3, 20)
    s = te.create_schedule(C.op)
    i, _ = s[C].op.axis
    s[C].prefetch(A, i, 1)
    func = schedule_to_primfunc(s, [A, C], "main")
    loop = _loop_of(func, "i")
    assert isinstance(loop.body, S.SeqStmt)
    hint = loop.body.stmts[0]
    buf = func.params[0]
    v = E.Var("v", "int32")
    ana = Analyzer()
    row = ana.simplify(E.max_(E.min_(loop.loop_var + 1, 2), 0))
    ptr = buf.access_ptr("r", offset=ana.simplify(E.min_(row * 20 + v * 16, row * 20 + 19)))
    call = E.Call("int32", E.Intrinsic.PREFETCH, (ptr, E.const(3, "int32")))
    expected = S.For(v, 0, 3, S.ForKind.SERIAL, S.Evaluate(call))
    assert_structural_equal(hint, expected, map_free_vars=True)
    assert isinstance(loop.body.stmts[1], S.For) and loop.body.stmts[1].loop_var.name == "j"


def test_a_partial_row_is_hinted_row_by_row():
    # Before: for i: for j in 0..8: C[i, j] = A[i, j + 4] with A of 3 x 40, prefetch(A, i, 1).
    # Expected: the box is row i + 1, columns 4..11 -- not whole rows, so no merged run:
    # one hint at column 4 and one at min(4 + 16, 11) = 11 (the line the run may end in).
    A = te.placeholder((3, 40), name="A")
    C = te.compute((3, 8), lambda i, j: A[i, j + 4], name="C")
    s = te.create_schedule(C.op)
    i, _ = s[C].op.axis
    s[C].prefetch(A, i, 1)
    func = schedule_to_primfunc(s, [A, C], "main")
    loop = _loop_of(func, "i")
    hint = loop.body.stmts[0]
    v = E.Var("v", "int32")
    ana = Analyzer()
    row = ana.simplify(E.max_(E.min_(loop.loop_var + 1, 2), 0))
    ptr = func.params[0].access_ptr("r", offset=ana.simplify(E.min_(v * 16 + 4, 11) + row * 40))
    call = E.Call("int32", E.Intrinsic.PREFETCH, (ptr, E.const(3, "int32")))
    expected = S.For(v, 0, 2, S.ForKind.SERIAL, S.Evaluate(call))
    assert_structural_equal(hint, expected, map_free_vars=True)


def _hints_in(stmt: S.Stmt, env: dict[E.Var, E.PrimExpr], ana: Analyzer) -> list[int]:
    """Every prefetch offset ``stmt`` issues, its loops enumerated at ``env`` (stores and
    the rest issue none)."""
    if isinstance(stmt, S.SeqStmt):
        return [o for s in stmt.stmts for o in _hints_in(s, env, ana)]
    if isinstance(stmt, S.For):
        ext = ana.simplify(substitute(stmt.extent, env))
        assert isinstance(ext, E.IntImm)
        return [
            o
            for k in range(ext.value)
            for o in _hints_in(stmt.body, {**env, stmt.loop_var: E.const(k)}, ana)
        ]
    if isinstance(stmt, S.IfThenElse):
        cond = ana.simplify(substitute(stmt.condition, env))
        assert isinstance(cond, E.IntImm)
        taken = stmt.then_case if cond.value else stmt.else_case
        return [] if taken is None else _hints_in(taken, env, ana)
    if isinstance(stmt, S.Evaluate) and isinstance(stmt.value, E.Call):
        assert stmt.value.op is E.Intrinsic.PREFETCH
        off = ana.simplify(substitute(stmt.value.args[0].args[1], env))
        assert isinstance(off, E.IntImm)
        return [off.value]
    return []


@settings(max_examples=examples(25), deadline=None)
@given(
    n=st.integers(1, 9),
    m=st.integers(1, 45),
    factor=st.integers(1, 4),
    offset=st.integers(-3, 5),
)
def test_prefetched_lines_cover_the_later_iteration_and_stay_in_the_buffer(n, m, factor, offset):
    A, C = _rows(n, m)
    s = te.create_schedule(C.op)
    i, _ = s[C].op.axis
    io, _ = s[C].split(i, factor)
    s[C].prefetch(A, io, offset)
    func = schedule_to_primfunc(s, [A, C], "main")
    loop = _loop_of(func, io.var.name)
    hint = loop.body.stmts[0]
    ana = Analyzer()
    outer = -(-n // factor)
    for x in range(outer):
        got = _hints_in(hint, {loop.loop_var: E.const(x)}, ana)
        assert got and all(0 <= o < n * m for o in got)  # clamped into the buffer
        later = min(max(x + offset, 0), outer - 1)  # the clamped iteration's rows
        rows = range(later * factor, min(later * factor + factor, n))
        want = {(r * m + c) // 16 for r in rows for c in range(m)}  # 16-float lines, from 0
        lines = {o // 16 for o in got}
        if 0 <= x + offset < outer:
            assert want <= lines
        assert lines <= {o // 16 for o in range(n * m)}


def test_spread_deals_the_hints_over_the_inner_loop():
    # Before: for i: for j in 0..4: for k: C[i, j, k] = A[i, j, k] + 1, with A of 3 x 4 x 16
    # and s[C].prefetch(A, i, 1, spread=j, locality=2).
    # Expected: row i + 1 of A is one run of 64 floats, 5 hints (4 lines and the end's);
    # iteration j of loop j issues hints [2j, 2j + 2) of them, those below 5, at the top
    # of its body, into L2 (locality 2), before the loop over k: a constant count behind
    # one comparison, addresses linear in j (no division in an inner loop).
    A = te.placeholder((3, 4, 16), name="A")
    C = te.compute((3, 4, 16), lambda i, j, k: A[i, j, k] + 1.0, name="C")
    s = te.create_schedule(C.op)
    i, j, _ = s[C].op.axis
    s[C].prefetch(A, i, 1, spread=j, locality=2)
    func = schedule_to_primfunc(s, [A, C], "main")
    outer, inner = _loop_of(func, "i"), _loop_of(func, "j")
    assert isinstance(outer.body, S.For) and outer.body.loop_var.name == "j"  # no burst
    assert isinstance(inner.body, S.SeqStmt) and len(inner.body.stmts) == 2
    ana = Analyzer()
    t = E.Var("t", "int32")
    jv = inner.loop_var
    h = jv * 2 + t
    row = E.max_(E.min_(outer.loop_var + 1, 2), 0)
    offset = E.min_(row * 64 + h * 16, row * 64 + 63)
    ptr = func.params[0].access_ptr("r", offset=ana.simplify(offset))
    call = E.Call("int32", E.Intrinsic.PREFETCH, (ptr, E.const(2, "int32")))
    guarded = S.IfThenElse(h < 5, S.Evaluate(call))
    expected = S.For(t, 0, 2, S.ForKind.SERIAL, guarded)
    assert_structural_equal(inner.body.stmts[0], expected, map_free_vars=True)
    assert isinstance(inner.body.stmts[1], S.For) and inner.body.stmts[1].loop_var.name == "k"


@settings(max_examples=examples(25), deadline=None)
@given(
    n=st.integers(1, 6),
    p=st.integers(1, 5),
    m=st.integers(1, 40),
    factor=st.integers(1, 3),
    offset=st.integers(-2, 3),
    at_k=st.booleans(),
)
def test_spread_hints_are_the_bursts_hints_dealt_out(n, p, m, factor, offset, at_k):
    # Over one iteration of the prefetch loop, the spread hints are the burst's, as a
    # multiset: none lost (the later iteration's lines stay covered), none repeated, and
    # every one inside the buffer.
    def lower(spread: bool) -> tuple[S.For, Any]:
        A = te.placeholder((n, p, m), name="A")
        C = te.compute((n, p, m), lambda i, j, k: A[i, j, k] * 2.0, name="C")
        s = te.create_schedule(C.op)
        i, j, k = s[C].op.axis
        io, _ = s[C].split(i, factor)
        where = {"spread": (k if at_k else j), "locality": 2} if spread else {}
        s[C].prefetch(A, io, offset, **where)
        return _loop_of(schedule_to_primfunc(s, [A, C], "main"), io.var.name)

    burst, spread = lower(False), lower(True)
    ana = Analyzer()
    for x in range(-(-n // factor)):
        want = _hints_in(burst.body, {burst.loop_var: E.const(x)}, ana)
        got = _hints_in(spread.body, {spread.loop_var: E.const(x)}, ana)
        assert sorted(got) == sorted(want)
        assert all(0 <= o < n * p * m for o in got)
    if factor <= n:  # a box of constant width: dealt out, not burst at the top
        assert not isinstance(spread.body, S.SeqStmt)


def test_spread_must_be_inside_the_prefetch_loop():
    A, C = _rows(4, 8)
    s = te.create_schedule(C.op)
    i, j = s[C].op.axis
    s[C].prefetch(A, j, 1, spread=i)
    with pytest.raises(ScheduleError, match="loop 'i' is not inside 'j'"):
        ember.lower(s, [A, C])
    with pytest.raises(ScheduleError, match="locality must be 0-3"):
        s[C].prefetch(A, i, 1, locality=4)


def test_prefetch_emits_llvm_prefetch_and_keeps_results(rng):
    M, N, K = 37, 29, 13
    A = te.placeholder((M, K), name="A")
    B = te.placeholder((K, N), name="B")
    k = te.reduce_axis((0, K), name="k")
    C = te.compute((M, N), lambda i, j: te.sum(A[i, k] * B[k, j], axis=k), name="C")
    s = te.create_schedule(C.op)
    i, j = s[C].op.axis
    io, ii = s[C].split(i, 4)
    s[C].parallel(io)
    s[C].prefetch(A, io, 1, spread=j, locality=2)
    s[C].prefetch(B, ii, 2)
    check(s, [A, B, C], lambda a, b: a @ b, rng)  # interpreter and LLVM agree with numpy
    ir = ember.build(s, [A, B, C], target="llvm").get_source("ll")
    calls = [line for line in ir.splitlines() if "call void @llvm.prefetch.p0(" in line]
    l1 = [c for c in calls if "i32 0, i32 3, i32 1)" in c]  # read, L1, data
    l2 = [c for c in calls if "i32 0, i32 2, i32 1)" in c]
    assert l1 and l2 and len(l1) + len(l2) == len(calls)


def test_prefetch_emits_nothing_in_cuda_code(rng):
    A, C = _rows(5, 7)
    s = te.create_schedule(C.op)
    i, j = s[C].op.axis
    s[C].bind(i, "blockIdx.x")
    s[C].bind(j, "threadIdx.x")
    s[C].prefetch(A, j, 1)
    mod = ember.build(s, [A, C], target="cuda")
    assert "prefetch" not in mod.get_source()
    a = rng.uniform(-1, 1, (5, 7)).astype("float32")
    c = np.full((5, 7), np.nan, "float32")
    mod.emulate(a, c)
    np.testing.assert_allclose(c, a * 2 + 1, rtol=1e-6)


def test_prefetch_refuses_what_it_cannot_mean():
    A, C = _rows(4, 8)
    other = te.placeholder((4, 8), name="other")
    s = te.create_schedule(C.op)
    i, j = s[C].op.axis
    with pytest.raises(ScheduleError, match="does not read 'other'"):
        s[C].prefetch(other, i, 1)
    with pytest.raises(ScheduleError, match="offset must be an integer"):
        s[C].prefetch(A, i, 0.5)
    s[C].vectorize(j)
    with pytest.raises(ScheduleError, match="'j' is vectorized"):
        s[C].prefetch(A, j, 1)
    s[C].prefetch(A, i, 2)
    assert s[C].iter_var_attrs[i].prefetch_data == [A]
    assert s[C].iter_var_attrs[i].prefetch_offset[0].value == 2


def test_prefetch_at_a_loop_vectorized_later_is_refused():
    A, C = _rows(4, 8)
    s = te.create_schedule(C.op)
    _, j = s[C].op.axis
    s[C].prefetch(A, j, 1)
    s[C].vectorize(j)
    with pytest.raises(ScheduleError, match="'j' is vectorized"):
        ember.lower(s, [A, C])
