"""vectorize_loops: Before/Expected for loops that start past zero (the main part of a
partitioned loop), and a property test that vectorizing keeps every store."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from ember.tir import expr as E
from ember.tir import stmt as S
from ember.tir.buffer import decl_buffer
from ember.tir.interp import run
from ember.tir.transform.vectorize_loops import vectorize_loops
from tests.tir.transform.tir_exec import run as trace

K = S.ForKind


def func(body: S.Stmt, *bufs) -> S.PrimFunc:  # type: ignore[no-untyped-def]
    return S.PrimFunc("f", tuple(bufs), body)


def test_loop_from_a_nonzero_start_becomes_ramps_from_it() -> None:
    A, B = decl_buffer((40,), "float32", "A"), decl_buffer((20,), "float32", "B")
    c = E.Var("c")
    body = S.BufferStore(B, A[c * 2 - 1], (c,))
    before = func(S.For(c, E.const(1), E.const(16), K.VECTORIZED, body), A, B)
    expected = "\n".join(
        [
            'def f(A: Buffer((40), "float32"), B: Buffer((20), "float32")):',
            "    B[ramp(1, 1, 16)] = A[ramp(1, 2, 16)]",
        ]
    )
    assert repr(vectorize_loops(before)) == expected


def test_a_loop_it_cannot_vectorize_keeps_its_start() -> None:
    A = decl_buffer((300,), "float32", "A")
    c = E.Var("c")
    body = S.BufferStore(A, E.const(1.0), (c * c,))  # not affine: no vector store
    for extent, kind in ((6, "unroll"), (12, "range")):
        before = func(S.For(c, E.const(3), E.const(extent), K.VECTORIZED, body), A)
        text = repr(vectorize_loops(before))
        assert f"for c in {kind}(3, 3 + {extent}):" in text, text
        assert trace(vectorize_loops(before)) == trace(before)


@settings(max_examples=30, deadline=None)
@given(
    start=st.integers(0, 7),
    extent=st.integers(2, 70),
    stride=st.integers(1, 3),
    offset=st.integers(-3, 3),
)
def test_vectorizing_keeps_every_store(start, extent, stride, offset) -> None:  # type: ignore[no-untyped-def]
    size = stride * (start + extent) + 8
    A, B = decl_buffer((size,), "float32", "A"), decl_buffer((start + extent,), "float32", "B")
    c = E.Var("c")
    lo = max(start, -(offset // stride))  # the first c with stride * c + offset >= 0
    if start + extent - lo < 2:
        return
    body = S.BufferStore(B, A[c * stride + offset] * E.const(2.0), (c,))
    before = func(S.For(c, E.const(lo), E.const(start + extent - lo), K.VECTORIZED, body), A, B)
    after = vectorize_loops(before)
    assert "ramp(" in repr(after)
    a = np.arange(size, dtype=np.float32) + 0.5
    want, got = np.full(start + extent, -1.0, np.float32), np.full(start + extent, -1.0, np.float32)
    run(before, a, want)
    run(after, a, got)
    np.testing.assert_array_equal(got, want)
