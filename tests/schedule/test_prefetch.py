"""``Stage.prefetch``: the TIR it lowers to, the LLVM it emits, and unchanged results."""

from __future__ import annotations

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
    # Expected: at the top of loop i, A's row i + 1 (clamped to the last row) is hinted at
    # 16-float cache lines: columns 0, 16 and min(32, 19) = 19, the line the row ends in.
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
    row = Analyzer().simplify(E.max_(E.min_(loop.loop_var + 1, 2), 0))
    col = E.min_(v * 16, 19)
    ptr = buf.access_ptr("r", offset=Analyzer().simplify(row * 20 + col))
    expected = S.For(
        v, 0, 3, S.ForKind.SERIAL, S.Evaluate(E.Call("int32", E.Intrinsic.PREFETCH, (ptr,)))
    )
    assert_structural_equal(hint, expected, map_free_vars=True)
    assert isinstance(loop.body.stmts[1], S.For) and loop.body.stmts[1].loop_var.name == "j"


def _hinted(stmt: S.Stmt, env: dict[E.Var, E.PrimExpr], ana: Analyzer) -> list[int]:
    """The element offsets ``stmt``'s prefetches name, its loops enumerated at ``env``."""
    if isinstance(stmt, S.SeqStmt):
        return [o for s in stmt.stmts for o in _hinted(s, env, ana)]
    if isinstance(stmt, S.For):
        ext = ana.simplify(substitute(stmt.extent, env))
        assert isinstance(ext, E.IntImm)
        return [
            o
            for k in range(ext.value)
            for o in _hinted(stmt.body, {**env, stmt.loop_var: E.const(k)}, ana)
        ]
    if isinstance(stmt, S.Evaluate) and isinstance(stmt.value, E.Call):
        assert stmt.value.op is E.Intrinsic.PREFETCH
        (ptr,) = stmt.value.args
        off = ana.simplify(substitute(ptr.args[1], env))
        assert isinstance(off, E.IntImm)
        return [off.value]
    raise AssertionError(f"unexpected statement in a prefetch: {stmt!r}")


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
        got = _hinted(hint, {loop.loop_var: E.const(x)}, ana)
        assert got and all(0 <= o < n * m for o in got)  # clamped into the buffer
        later = min(max(x + offset, 0), outer - 1)  # the clamped iteration's rows
        rows = range(later * factor, min(later * factor + factor, n))
        want = {(r * m + c) // 16 for r in rows for c in range(m)}  # 16-float lines, from 0
        lines = {o // 16 for o in got}
        if 0 <= x + offset < outer:
            assert want <= lines
        assert lines <= {o // 16 for o in range(n * m)}


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
    s[C].prefetch(A, io, 1)
    s[C].prefetch(B, ii, 2)
    check(s, [A, B, C], lambda a, b: a @ b, rng)  # interpreter and LLVM agree with numpy
    ir = ember.build(s, [A, B, C], target="llvm").get_source("ll")
    calls = [line for line in ir.splitlines() if "call void @llvm.prefetch.p0(" in line]
    assert calls and all("i32 0, i32 3, i32 1)" in c for c in calls)


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
