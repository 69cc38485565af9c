"""instrument_bound_checkers: Before/Expected on small IR, then through ember.build: an
out-of-bounds access raises an Ember error at run time on llvm and in the CUDA emulator,
and an in-bounds run computes numpy's numbers."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import ember
from ember import te
from ember.errors import ArgumentError
from ember.tir import expr as E
from ember.tir import stmt as S
from ember.tir.buffer import decl_buffer
from ember.tir.functor import post_order_visit
from ember.tir.interp import run
from ember.tir.ir_builder import IRBuilder
from ember.tir.structural import assert_structural_equal
from ember.tir.transform.instrument_bound_checkers import instrument_bound_checkers
from ember.transform import PassContext
from tests.nightly import examples
from tests.numerics import assert_close, random_array

ON = PassContext(config={"tir.instrument_bound_checkers": True})


def _func(body: S.Stmt, *bufs) -> S.PrimFunc:  # type: ignore[no-untyped-def]
    return S.PrimFunc("f", tuple(bufs), body)


def _gather_ir():  # type: ignore[no-untyped-def]
    a = decl_buffer((7,), "float32", "A")
    idx = decl_buffer((4,), "int32", "I")
    b = decl_buffer((4,), "float32", "B")
    i = E.Var("i", "int32")
    load = a[idx[i]]
    store = S.BufferStore(b, load, (i,))
    return a, idx, b, i, store


def test_before_expected_gather():
    a, idx, b, i, store = _gather_ir()
    before = _func(S.For(i, E.const(0), E.const(4), S.ForKind.SERIAL, store), a, idx, b)
    j = idx[i]
    message = "out-of-bounds load of buffer 'A' in 'f': the index must be in [0, 7)"
    expected = _func(
        S.For(
            i,
            E.const(0),
            E.const(4),
            S.ForKind.SERIAL,
            S.AssertStmt(E.logical_and(j >= 0, j < 7), message, store),
        ),
        a,
        idx,
        b,
    )
    assert_structural_equal(instrument_bound_checkers(before, ON), expected)


def test_off_by_default_and_proven_accesses_need_no_check():
    a, idx, b, i, store = _gather_ir()
    func = _func(S.For(i, E.const(0), E.const(4), S.ForKind.SERIAL, store), a, idx, b)
    assert instrument_bound_checkers(func, PassContext()) is func
    assert instrument_bound_checkers(func) is func
    c = decl_buffer((4,), "float32", "C")
    copy = S.BufferStore(c, b[i], (i,))
    plain = _func(S.For(i, E.const(0), E.const(4), S.ForKind.SERIAL, copy), b, c)
    assert_structural_equal(instrument_bound_checkers(plain, ON), plain)


def test_a_guarded_load_is_checked_only_under_its_guard():
    a, idx, b, i, _ = _gather_ir()
    j = idx[i]
    guarded = E.Call("float32", E.Intrinsic.IF_THEN_ELSE, (j < 7, a[j], E.const(0.0, "float32")))
    body = S.BufferStore(b, guarded, (i,))
    func = _func(S.For(i, E.const(0), E.const(4), S.ForKind.SERIAL, body), a, idx, b)
    out = instrument_bound_checkers(func, ON)
    assert len([s for s in _stmts(out) if isinstance(s, S.AssertStmt)]) == 1
    vals = np.random.default_rng(1).uniform(-1, 1, 7).astype("float32")
    res = np.full(4, np.nan, "float32")
    run(out, vals, np.array([0, 9, 6, 7], "int32"), res)  # >= 7 only where the guard excludes it
    np.testing.assert_array_equal(res, [vals[0], 0.0, vals[6], 0.0])
    with pytest.raises(ArgumentError, match="out-of-bounds load of buffer 'A'"):
        run(out, vals, np.array([0, -1, 6, 7], "int32"), res)  # the guard does not excuse -1


def test_both_sides_of_a_select_are_checked():
    """Select evaluates both sides (TVM's meaning), so its condition guards nothing."""
    a, idx, b, i, _ = _gather_ir()
    j = idx[i]
    body = S.BufferStore(b, E.Select("float32", j < 7, a[j], E.const(0.0, "float32")), (i,))
    func = _func(S.For(i, E.const(0), E.const(4), S.ForKind.SERIAL, body), a, idx, b)
    out = instrument_bound_checkers(func, ON)
    vals = np.random.default_rng(2).uniform(-1, 1, 7).astype("float32")
    with pytest.raises(ArgumentError, match="out-of-bounds load of buffer 'A'"):
        run(out, vals, np.array([0, 9, 6, 1], "int32"), np.zeros(4, "float32"))


def _stmts(func: S.PrimFunc) -> list[S.Stmt]:
    out: list[S.Stmt] = []
    post_order_visit(func.body, lambda n: out.append(n) if isinstance(n, S.Stmt) else None)
    return out


def _gather(n: int, m: int):  # type: ignore[no-untyped-def]
    A = te.placeholder((m,), name="A")
    Idx = te.placeholder((n,), name="Idx", dtype="int32")
    B = te.compute((n,), lambda i: A[Idx[i]] * 2.0 + 1.0, name="B")
    return te.create_schedule(B.op), [A, Idx, B]


@pytest.mark.parametrize("bad", [7, 100, -1])
def test_out_of_bounds_gather_raises_on_llvm(rng, bad):
    n, m = 11, 7
    s, args = _gather(n, m)
    with ON:
        mod = ember.build(s, args, target="llvm")
    a = random_array((m,), "float32", rng)
    idx = rng.integers(0, m, n).astype("int32")
    b = np.full(n, np.nan, "float32")
    mod(a, idx, b)
    assert_close(b, a[idx] * 2.0 + 1.0, "float32")
    idx[5] = bad
    with pytest.raises(ArgumentError, match=r"out-of-bounds load of buffer 'A'.*\[0, 7\)"):
        mod(a, idx, b)
    assert "assert" not in repr(ember.lower(s, args)), "off unless the context asks"


def test_out_of_bounds_gather_raises_in_the_cuda_emulator(rng):
    n, m = 100, 9
    s, args = _gather(n, m)
    B = args[-1]
    bx, tx = s[B].split(B.op.axis[0], factor=32)
    s[B].bind(bx, te.thread_axis("blockIdx.x"))
    s[B].bind(tx, te.thread_axis("threadIdx.x"))
    with ON:
        mod = ember.build(s, args, target="cuda -arch=sm_80")
    assert "__trap()" in mod.get_source("cuda")
    a = random_array((m,), "float32", rng)
    idx = rng.integers(0, m, n).astype("int32")
    b = np.full(n, np.nan, "float32")
    mod.emulate(a, idx, b)
    assert_close(b, a[idx] * 2.0 + 1.0, "float32")
    idx[77] = m
    with pytest.raises(ArgumentError, match="out-of-bounds load of buffer 'A'"):
        mod.emulate(a, idx, b)


def test_symbolic_sizes_are_checked_against_the_arguments(rng):
    n, m = te.var("n"), te.var("m")
    A = te.placeholder((m,), name="A")
    Idx = te.placeholder((n,), name="Idx", dtype="int32")
    B = te.compute((n,), lambda i: A[Idx[i]] - 3.0, name="B")
    s = te.create_schedule(B.op)
    with ON:
        mod = ember.build(s, [A, Idx, B], target="llvm")
    for size, length in ((5, 3), (17, 12)):
        a = random_array((length,), "float32", rng)
        idx = rng.integers(0, length, size).astype("int32")
        b = np.full(size, np.nan, "float32")
        mod(a, idx, b)
        assert_close(b, a[idx] - 3.0, "float32")
        idx[-1] = length
        with pytest.raises(ArgumentError, match="out-of-bounds load of buffer 'A'"):
            mod(a, idx, b)


def test_out_of_bounds_store_raises(rng):
    n = 9
    ib = IRBuilder()  # a scatter: O[Idx[i]] = V[i]
    v, idx, out = ib.param((n,), name="V"), ib.param((n,), "int32", "Idx"), ib.param((5,), name="O")
    with ib.for_range(0, n, name="i") as i:
        ib.store(out, idx[i], v[i])
    func = S.PrimFunc("scatter", (v, idx, out), ib.get())
    checked = instrument_bound_checkers(func, ON)
    assert "out-of-bounds store of buffer 'O'" in repr(checked)
    mod = ember.build(checked, target="llvm")
    vals = random_array((n,), "float32", rng)
    ids = np.arange(n).astype("int32") % 5
    o = np.full(5, np.nan, "float32")
    mod(vals, ids, o)
    want = np.full(5, np.nan, "float32")
    want[ids] = vals
    assert_close(o, want, "float32")
    ids[2] = 5
    with pytest.raises(ArgumentError, match="out-of-bounds store of buffer 'O'"):
        mod(vals, ids, o)


@settings(max_examples=examples(20), deadline=None)
@given(
    n=st.integers(1, 40),
    m=st.integers(1, 12),
    offsets=st.lists(st.integers(-3, 15), min_size=1, max_size=40),
)
def test_checked_gather_fails_exactly_when_an_index_is_out_of_range(n, m, offsets):
    rng = np.random.default_rng(n * 100 + m)
    s, args = _gather(n, m)
    with ON:
        mod = ember.build(s, args, target="llvm")
    idx = np.resize(np.array(offsets, dtype="int32"), n)
    a = random_array((m,), "float32", rng)
    b = np.full(n, np.nan, "float32")
    if ((idx < 0) | (idx >= m)).any():
        with pytest.raises(ArgumentError, match="out-of-bounds"):
            mod(a, idx, b)
    else:
        mod(a, idx, b)
        assert_close(b, a[idx] * 2.0 + 1.0, "float32")
