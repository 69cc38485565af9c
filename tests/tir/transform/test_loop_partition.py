"""loop_partition: Before/Expected on the typical split tail, and a property test that the
partitioned nest performs exactly the same stores as the guarded one."""

from __future__ import annotations

from collections import Counter

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from ember.tir import expr as E
from ember.tir import stmt as S
from ember.tir.buffer import decl_buffer
from ember.tir.transform.loop_partition import loop_partition, loop_partition_stmt
from ember.tir.transform.simplify import simplify
from tests.nightly import examples
from tests.tir.transform.tir_exec import run

K = S.ForKind


def likely(c: E.PrimExpr) -> E.PrimExpr:
    return E.Call("bool", E.Intrinsic.LIKELY, (c,))


def loop(v: E.Var, extent: E.ExprLike, body: S.Stmt, kind: S.ForKind = K.SERIAL) -> S.For:
    return S.For(v, E.const(0), E.convert(extent), kind, body)


def func(body: S.Stmt, *bufs) -> S.PrimFunc:  # type: ignore[no-untyped-def]
    return S.PrimFunc("f", tuple(bufs), body)


def _text(f: S.PrimFunc | S.Stmt) -> str:
    return repr(f)


def _ceil(a: int, b: int) -> int:
    return -(-a // b)


def _same_stores(
    before: S.PrimFunc, after: S.PrimFunc, env: dict | None = None, buffers=None
) -> None:  # type: ignore[no-untyped-def]
    want = run(before, env, _copy(buffers))
    got = run(after, env, _copy(buffers))
    assert Counter(got) == Counter(want)
    assert got == want  # the pass also keeps the order


def _copy(buffers):  # type: ignore[no-untyped-def]
    return None if buffers is None else {k: v.copy() for k, v in buffers.items()}


# -- Before / Expected -------------------------------------------------------------------
def test_split_tail_becomes_main_loop_and_short_tail() -> None:
    A = decl_buffer((100,), "float32", "A")
    io, ii = E.Var("io"), E.Var("ii")
    idx = io * 32 + ii
    store = S.BufferStore(A, E.const(1.0), (idx,))
    before = func(loop(io, 4, loop(ii, 32, S.IfThenElse(likely(idx < 100), store)), K.PARALLEL), A)
    after = simplify(loop_partition(before))
    expected = "\n".join(
        [
            'def f(A: Buffer((100), "float32")):',
            "    for io in parallel(3):",
            "        for ii in range(32):",
            "            A[io * 32 + ii] = 1.0",
            "    for ii in range(4):",
            "        A[ii + 96] = 1.0",
        ]
    )
    assert _text(after) == expected
    _same_stores(before, after)


def test_whole_body_guard_shrinks_the_loop() -> None:
    A = decl_buffer((100,), "float32", "A")
    ii = E.Var("ii")
    store = S.BufferStore(A, E.const(2.0), (ii + 96,))
    before = loop(ii, 32, S.IfThenElse(likely(96 + ii < 100), store))
    assert _text(loop_partition_stmt(before)) == "for ii in range(4):\n    A[ii + 96] = 2.0"


def test_select_guard_and_lower_bound_guard() -> None:
    A, B = decl_buffer((40,), "float32", "A"), decl_buffer((40,), "float32", "B")
    i = E.Var("i")
    # a halo read: i - 3 must stay inside B, so the first iterations keep the select
    value = E.select(likely(i - 3 >= 0), B[i - 3], E.const(0.0))
    before = func(loop(i, 40, S.BufferStore(A, value, (i,))), A, B)
    after = simplify(loop_partition(before))
    text = _text(after)
    assert "for i in range(3, 3 + 37):\n        A[i] = B[i - 3]" in text
    # in the prologue the guard is false throughout, so simplify resolves the select there too
    assert "for i in range(3):\n        A[i] = 0.0" in text and "select" not in text
    buffers = {B: np.arange(40, dtype=np.float64) + 1}
    _same_stores(before, after, buffers=buffers)


def test_phase_loop_around_a_vectorized_copy_is_unrolled_first() -> None:
    """A strided phase split: each column phase ``px`` reads ``B[2*c + px - 1]``, so the
    vectorized loop's guard depends on the unrolled ``px``; unrolled here, every copy
    splits into constant pieces (a vectorized loop is split only so)."""
    A, B = decl_buffer((2, 9), "float32", "A"), decl_buffer((16,), "float32", "B")
    px, c = E.Var("px"), E.Var("c")
    w = c * 2 + px - 1
    value = E.select(likely(E.logical_and(w >= 0, w < 16)), B[E.max_(w, 0)], E.const(0.0))
    inner = loop(c, 9, S.BufferStore(A, value, (px, c)), K.VECTORIZED)
    before = func(loop(px, 2, inner, K.UNROLLED), A, B)
    after = simplify(loop_partition(before))
    expected = "\n".join(
        [
            'def f(A: Buffer((2, 9), "float32"), B: Buffer((16), "float32")):',
            "    A[0, 0] = 0.0",
            "    for c in vectorized(1, 1 + 8):",
            "        A[0, c] = B[c * 2 - 1]",
            "    for c in vectorized(8):",
            "        A[1, c] = B[c * 2]",
            "    A[1, 8] = 0.0",
        ]
    )
    assert _text(after) == expected
    _same_stores(before, after, buffers={B: np.arange(16, dtype=np.float64) + 1})


def test_long_or_unvectorized_unrolled_loops_wait_for_unroll_loops() -> None:
    A = decl_buffer((16, 4), "float32", "A")
    u, c = E.Var("u"), E.Var("c")
    store = S.BufferStore(A, E.const(1.0), (u, c))
    serial = func(loop(u, 16, loop(c, 4, store, K.VECTORIZED), K.UNROLLED), A)
    assert loop_partition(serial) is serial  # 16 copies: longer than UNROLL_FIRST_MAX
    plain = func(loop(u, 2, loop(c, 4, store), K.UNROLLED), A)
    assert loop_partition(plain) is plain  # no vectorized loop inside


def test_an_unrolled_loop_no_guard_depends_on_is_left_to_unroll_loops() -> None:
    """Winograd's input transform: short unrolled loops around a vectorized one that read
    their variables, with no guard on them. Copies would split nothing, so the loop stays
    whole here, and ``simplify`` meets its body once instead of once per copy. (With a
    guard on the variable it is unrolled here: the test above.)"""
    A, B = decl_buffer((6, 8), "float32", "A"), decl_buffer((6, 8), "float32", "B")
    e, c = E.Var("e"), E.Var("c")
    value = E.select(E.eq(e, 0), B[e, c] * 4.0, B[e, c] - 1.0)  # folds once e is a constant
    unguarded = func(loop(e, 6, loop(c, 8, S.BufferStore(A, value, (e, c)), K.VECTORIZED),
                          K.UNROLLED), A, B)  # fmt: skip
    assert loop_partition(unguarded) is unguarded


def test_nothing_to_partition_returns_the_same_function() -> None:
    A = decl_buffer((64,), "float32", "A")
    i, n = E.Var("i"), E.Var("n")
    body = S.IfThenElse(likely(i * i < 50), S.BufferStore(A, E.const(1.0), (i,)))  # not affine
    f = func(loop(i, 64, body), A)
    assert loop_partition(f) is f
    g = func(loop(i, 64, S.IfThenElse(n < 3, S.BufferStore(A, E.const(1.0), (i,)))), A)
    assert loop_partition(g) is g  # not a likely guard


def test_thread_loops_are_not_split() -> None:
    A = decl_buffer((100,), "float32", "A")
    bx, tx = E.Var("bx"), E.Var("tx")
    idx = bx * 32 + tx
    body = S.IfThenElse(likely(idx < 100), S.BufferStore(A, E.const(1.0), (idx,)))
    inner = S.For(tx, E.const(0), E.const(32), K.THREAD_BINDING, body, "threadIdx.x")
    outer = S.For(bx, E.const(0), E.const(4), K.THREAD_BINDING, inner, "blockIdx.x")
    f = func(outer, A)
    assert loop_partition(f) is f


def test_guard_on_let_variable_is_kept() -> None:
    A = decl_buffer((100,), "float32", "A")
    io, ii, t = E.Var("io"), E.Var("ii"), E.Var("t")
    body = S.LetStmt(
        t, io * 32 + ii, S.IfThenElse(likely(t < 100), S.BufferStore(A, E.const(1.0), (t,)))
    )
    before = func(loop(io, 4, loop(ii, 32, body)), A)
    after = simplify(loop_partition(before))
    _same_stores(before, after)


def test_symbolic_extent() -> None:
    n = E.Var("n")
    A = decl_buffer((n,), "float32", "A")
    io, ii = E.Var("io"), E.Var("ii")
    idx = io * 32 + ii
    body = S.IfThenElse(likely(idx < n), S.BufferStore(A, E.const(1.0), (idx,)))
    before = func(loop(io, (n + 31) // 32, loop(ii, 32, body)), A)
    after = simplify(loop_partition(before))
    for value in (1, 31, 32, 33, 64, 100):
        buffers = {A: np.zeros(value)}
        want = run(before, {n: value}, {A: np.zeros(value)})
        got = run(after, {n: value}, buffers)
        assert got == want, value


def test_reduction_tail() -> None:
    A, C = decl_buffer((50,), "float32", "A"), decl_buffer((1,), "float32", "C")
    ko, ki = E.Var("ko"), E.Var("ki")
    k = ko * 8 + ki
    update = S.BufferStore(C, C[0] + A[k], (E.const(0),))
    before = func(loop(ko, 7, loop(ki, 8, S.IfThenElse(likely(k < 50), update))), A, C)
    after = simplify(loop_partition(before))
    assert "likely" not in _text(after)
    buffers = {A: np.random.default_rng(0).uniform(1, 2, 50), C: np.zeros(1)}
    _same_stores(before, after, buffers=buffers)


# -- property test --------------------------------------------------------------------------
KINDS = st.sampled_from([K.SERIAL, K.PARALLEL, K.UNROLLED, K.VECTORIZED])


@settings(max_examples=examples(150), deadline=None)
@given(
    st.integers(1, 70),
    st.integers(1, 16),
    st.integers(1, 40),
    st.integers(1, 9),
    KINDS,
    KINDS,
    st.booleans(),
)
def test_partition_2d_tiles_keep_every_store(n, fn, m, fm, kind_o, kind_i, use_select) -> None:  # type: ignore[no-untyped-def]
    A = decl_buffer((n, m), "float32", "A")
    io, jo, ii, ji = (E.Var(s) for s in ("io", "jo", "ii", "ji"))
    i, j = io * fn + ii, jo * fm + ji
    cond = E.logical_and(i < n, j < m)
    value = E.cast("float32", i * 100 + j)
    if use_select:  # the store itself is guarded too (its index must stay in bounds)
        store = S.BufferStore(
            A, E.select(likely(cond), value, E.const(-1.0)), (E.min_(i, n - 1), E.min_(j, m - 1))
        )
    else:
        store = S.BufferStore(A, value, (i, j))
    body = store if use_select else S.IfThenElse(likely(cond), store)
    nest = loop(
        io, _ceil(n, fn), loop(jo, _ceil(m, fm), loop(ii, fn, loop(ji, fm, body, kind_i))), kind_o
    )
    before = func(nest, A)
    parted = loop_partition(before)
    _same_stores(before, parted)
    after = simplify(parted)
    _same_stores(before, after)
    if not use_select:
        assert "likely" not in _text(after)


@settings(max_examples=examples(150), deadline=None)
@given(st.integers(1, 200), st.integers(1, 12), st.integers(1, 6), KINDS)
def test_partition_two_level_split_keeps_every_store(n, f1, f2, kind) -> None:  # type: ignore[no-untyped-def]
    A = decl_buffer((n,), "float32", "A")
    a, b, c = E.Var("a"), E.Var("b"), E.Var("c")
    outer = _ceil(n, f1 * f2)
    idx = (a * f2 + b) * f1 + c
    guard = E.logical_and(a * f2 + b < _ceil(n, f1), idx < n)  # both splits guarded
    body = S.IfThenElse(likely(guard), S.BufferStore(A, E.cast("float32", idx), (idx,)))
    before = func(loop(a, outer, loop(b, f2, loop(c, f1, body)), kind), A)
    after = simplify(loop_partition(before))
    _same_stores(before, after)
    assert len(run(after)) == n


def test_symbolic_2d_tiles_leave_four_guard_free_variants() -> None:
    n, m = E.Var("n"), E.Var("m")
    A = decl_buffer((n, m), "float32", "A")
    io, jo, ii, ji = (E.Var(s) for s in ("io", "jo", "ii", "ji"))
    i, j = io * 32 + ii, jo * 8 + ji
    guard = likely(E.logical_and(i < n, j < m))
    body = S.IfThenElse(guard, S.BufferStore(A, E.cast("float32", i * 1000 + j), (i, j)))
    nest = loop(io, (n + 31) // 32, loop(jo, (m + 7) // 8, loop(ii, 32, loop(ji, 8, body))))
    before = func(nest, A)
    after = simplify(loop_partition(before))
    text = _text(after)
    assert "likely" not in text and "if " not in text
    assert text.count("A[io * 32 + ii, jo * 8 + ji] =") == 4
    for nv, mv in ((1, 1), (32, 8), (33, 9), (70, 20), (64, 3)):
        want = run(before, {n: nv, m: mv}, {A: np.zeros((nv, mv))})
        got = run(after, {n: nv, m: mv}, {A: np.zeros((nv, mv))})
        assert got == want
