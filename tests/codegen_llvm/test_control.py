"""Statements: conditions, lets, allocations (stack and heap), asserts, unrolling, a matmul."""

from __future__ import annotations

import numpy as np
import pytest

from ember.errors import ArgumentError
from ember.tir import dtype as dt
from ember.tir import expr as E
from ember.tir import stmt as S
from ember.tir.buffer import decl_buffer
from tests.codegen_llvm.llvm_helpers import build, load, loop, param, ramp, rand, sentinel, store


def test_if_then_else_and_let(rng):
    n = 37
    A, out = param("A", (n,)), param("out", (n,))
    x = E.Var("x", "float32")

    def body(i):
        v = load(A, i)
        return S.LetStmt(
            x,
            v * 3.0,
            S.IfThenElse(
                v > 0.5,
                store(out, i, E.Let("float32", x, x + 1.0, x * x)),
                S.IfThenElse(v < -0.5, store(out, i, x), store(out, i, E.const(9.0, "float32"))),
            ),
        )

    mod = build(S.PrimFunc("branchy", (A, out), loop(n, body)))
    a = rand(n, "float32", rng)
    o = sentinel(n, "float32")
    mod(a, o)
    want = np.where(a > 0.5, (a * 3 + 1) ** 2, np.where(a < -0.5, a * 3, 9.0))
    np.testing.assert_allclose(o, want, rtol=1e-6)


@pytest.mark.parametrize("size", [16, 20000])  # stack, heap (over 64 KiB)
def test_allocate_scratch(size, rng):
    A, out = param("A", (size,)), param("out", (size,))
    tmp = decl_buffer((size,), "float32", "tmp", scope="local")
    body = S.Allocate(
        tmp,
        S.seq(
            loop(size, lambda i: store(tmp, i, load(A, i) * 2.0)),
            loop(size, lambda i: store(out, i, load(tmp, E.const(size - 1) - i)), name="j"),
        ),
    )
    mod = build(S.PrimFunc("scratch", (A, out), body))
    ll = mod.get_source("ll-unopt")
    assert ("aligned_alloc" in ll) == (size > 16)
    a = rand(size, "float32", rng)
    o = sentinel(size, "float32")
    mod(a, o)
    np.testing.assert_array_equal(o, (a * 2)[::-1])


def test_allocate_symbolic_size(rng):
    A, sizes, out = param("A", (50,)), param("sizes", (1,), "int32"), param("out", (50,))
    m = E.Var("m")
    tmp = decl_buffer((m,), "float32", "tmp")
    body = S.LetStmt(
        m,
        load(sizes, E.const(0)),
        S.Allocate(
            tmp,
            S.seq(
                loop(m, lambda i: store(tmp, i, load(A, i) + 1.0)),
                loop(m, lambda i: store(out, i, load(tmp, i)), name="j"),
            ),
        ),
    )
    mod = build(S.PrimFunc("symalloc", (A, sizes, out), body))
    a = rand(50, "float32", rng)
    o = sentinel(50, "float32")
    mod(a, np.array([30], np.int32), o)
    np.testing.assert_array_equal(o[:30], a[:30] + 1)
    assert np.isnan(o[30:]).all()


def _guarded(size: int) -> S.PrimFunc:
    A, out = param("A", (size,)), param("out", (size,))
    tmp = decl_buffer((size,), "float32", "tmp")
    body = S.Allocate(
        tmp,
        loop(
            size,
            lambda i: S.AssertStmt(
                load(A, i) > -100.0,
                "every A[i] must exceed -100",
                S.seq(store(tmp, i, load(A, i)), store(out, i, load(tmp, i))),
            ),
        ),
    )
    return S.PrimFunc("guarded", (A, out), body)


@pytest.mark.parametrize("size", [8, 20000])
def test_assert_failure_raises_argument_error(size, rng):
    mod = build(_guarded(size))
    a = rand(size, "float32", rng)
    o = sentinel(size, "float32")
    mod(a, o)
    np.testing.assert_array_equal(o, a)
    a[size // 2] = -500.0
    with pytest.raises(ArgumentError, match=r"guarded: every A\[i\] must exceed -100"):
        mod(a, o)


def test_unrolled_loop_carries_unroll_hint(rng):
    A, out = param("A", (8,)), param("out", (8,))
    body = loop(8, lambda i: store(out, i, load(A, i) + 1.0), kind=S.ForKind.UNROLLED)
    mod = build(S.PrimFunc("unrolled", (A, out), body))
    assert "llvm.loop.unroll.full" in mod.get_source("ll-unopt")
    assert "phi" not in mod.get_source("ll")  # fully unrolled: no loop left
    a = rand(8, "float32", rng)
    o = sentinel(8, "float32")
    mod(a, o)
    np.testing.assert_array_equal(o, a + 1)


def test_vectorized_kind_left_over_runs_serially(rng):
    A, out = param("A", (13,)), param("out", (13,))
    body = loop(13, lambda i: store(out, i, load(A, i) * 2.0), kind=S.ForKind.VECTORIZED)
    mod = build(S.PrimFunc("vk", (A, out), body))
    a = rand(13, "float32", rng)
    o = sentinel(13, "float32")
    mod(a, o)
    np.testing.assert_array_equal(o, a * 2)


def test_attr_evaluate_barrier_are_transparent(rng):
    A, out = param("A", (5,)), param("out", (5,))
    inner = S.seq(
        S.Barrier(),
        S.Evaluate(E.const(0)),
        S.Evaluate(E.call(E.Intrinsic.LIKELY, load(A, E.const(0)) > 0.0)),
        loop(5, lambda i: store(out, i, load(A, i))),
    )
    body = S.AttrStmt(None, "pragma_anything", E.const(1), inner)
    mod = build(S.PrimFunc("attrs", (A, out), body))
    a = rand(5, "float32", rng)
    o = sentinel(5, "float32")
    mod(a, o)
    np.testing.assert_array_equal(o, a)


def _matmul(m: int, n: int, k: int, lanes: int) -> S.PrimFunc:
    """C = A @ B with 2-D parameters, flat indices, and a local accumulator per row block."""
    A, B, C = param("A", (m, k)), param("B", (k, n)), param("C", (m, n))
    acc = decl_buffer((lanes,), "float32", "acc", scope="local")
    vec = dt.with_lanes("float32", lanes)
    nv = n // lanes * lanes

    def tile(i, jo):
        j0 = jo * lanes
        zero = E.Broadcast(vec, E.const(0.0, "float32"), lanes)
        update = loop(
            k,
            lambda r: store(
                acc,
                ramp(0, lanes),
                load(acc, ramp(0, lanes), lanes)
                + E.Broadcast(vec, load(A, i * k + r), lanes)
                * load(B, ramp(r * n + j0, lanes), lanes),
            ),
            name="r",
        )
        return S.Allocate(
            acc,
            S.seq(
                store(acc, ramp(0, lanes), zero),
                update,
                store(C, ramp(i * n + j0, lanes), load(acc, ramp(0, lanes), lanes)),
            ),
        )

    def tail(i, j):
        s = decl_buffer((1,), "float32", "s", scope="local")
        return S.Allocate(
            s,
            S.seq(
                store(s, E.const(0), E.const(0.0, "float32")),
                loop(
                    k,
                    lambda r: store(
                        s, E.const(0), load(s, E.const(0)) + load(A, i * k + r) * load(B, r * n + j)
                    ),
                    name="r2",
                ),
                store(C, i * n + j, load(s, E.const(0))),
            ),
        )

    body = loop(
        m,
        lambda i: S.seq(
            loop(n // lanes, lambda jo: tile(i, jo), name="jo"),
            loop(n - nv, lambda j: tail(i, j), name="j", start=nv),
        ),
    )
    return S.PrimFunc("matmul", (A, B, C), body)


@pytest.mark.parametrize("shape", [(37, 29, 53), (64, 64, 64), (5, 129, 17)])
def test_matmul_local_accumulator(shape, rng):
    m, n, k = shape
    mod = build(_matmul(m, n, k, lanes=16))
    a, b = rand((m, k), "float32", rng), rand((k, n), "float32", rng)
    c = sentinel((m, n), "float32")
    mod(a, b, c)
    np.testing.assert_allclose(c, a.astype(np.float64) @ b, rtol=1e-4, atol=1e-4)


def test_likely_condition_sets_branch_weights(rng):
    A, out = param("A", (9,)), param("out", (9,))
    body = loop(
        9,
        lambda i: S.IfThenElse(
            E.call(E.Intrinsic.LIKELY, i < 8),
            store(out, i, load(A, i)),
            store(out, i, E.const(5.0, "float32")),
        ),
    )
    mod = build(S.PrimFunc("likely", (A, out), body))
    assert "branch_weights" in mod.get_source("ll-unopt")
    a = rand(9, "float32", rng)
    o = sentinel(9, "float32")
    mod(a, o)
    np.testing.assert_array_equal(o, np.append(a[:8], 5.0))
