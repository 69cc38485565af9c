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
from ember.tir.transform.vectorize_loops import vectorize_loops, version_lane_guards
from tests.nightly import examples
from tests.tir.transform.tir_exec import run as trace

K = S.ForKind


def vectorize_for_cpu(func: S.PrimFunc) -> S.PrimFunc:
    """What a CPU build does: the pass, then the LLVM backend's versioning."""
    return version_lane_guards(vectorize_loops(func))


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


@settings(max_examples=examples(30), deadline=None)
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


def test_a_loop_wider_than_the_native_vector_is_cut_in_powers_of_two() -> None:
    """48 lanes: one 32-lane and one 16-lane store (LLVM moved a 48-lane vector's
    elements one by one); 14 lanes stay one vector."""
    A, B = decl_buffer((64,), "float32", "A"), decl_buffer((64,), "float32", "B")
    c = E.Var("c")
    body = S.BufferStore(B, A[c] + E.const(1.0), (c,))
    text = repr(vectorize_loops(func(S.For(c, E.const(0), E.const(48), K.VECTORIZED, body), A, B)))
    assert text.splitlines()[1:] == [
        "    B[ramp(0, 1, 32)] = A[ramp(0, 1, 32)] + broadcast(1.0, 32)",
        "    B[ramp(32, 1, 16)] = A[ramp(32, 1, 16)] + broadcast(1.0, 16)",
    ]
    text = repr(vectorize_loops(func(S.For(c, E.const(0), E.const(14), K.VECTORIZED, body), A, B)))
    assert "B[ramp(0, 1, 14)]" in text


def _edge_loop(guard_of):  # type: ignore[no-untyped-def]
    """``for j in parallel(4): for c in vectorized(16): if guard: B[j*16+c] = A[j*16+c] * 2``."""
    A, B = decl_buffer((64,), "float32", "A"), decl_buffer((64,), "float32", "B")
    j, c = E.Var("j"), E.Var("c")
    store = S.BufferStore(B, A[j * 16 + c] * E.const(2.0), (j * 16 + c,))
    guarded = S.IfThenElse(guard_of(j, c), store)
    inner = S.For(c, E.const(0), E.const(16), K.VECTORIZED, guarded)
    return func(S.For(j, E.const(0), E.const(4), K.PARALLEL, inner), A, B)


def test_a_guard_on_an_interval_of_lanes_versions_the_loop_at_the_top_of_its_loop() -> None:
    """The edge of a split that does not divide (50 of 64 columns): vector stores where
    the guard holds at the first and last lane, the serial loop elsewhere, the test
    hoisted to the top of the loop whose variable it reads."""
    likely = lambda e: E.Call("bool", E.Intrinsic.LIKELY, (e,))  # noqa: E731
    before = _edge_loop(lambda j, c: likely(j * 16 + c < 50))
    assert "ramp(" not in repr(vectorize_loops(before))  # the target-independent pass
    after = vectorize_for_cpu(before)
    expected = "\n".join(
        [
            'def f(A: Buffer((64), "float32"), B: Buffer((64), "float32")):',
            "    for j in parallel(4):",
            "        if likely(j * 16 + 0 < 50 and j * 16 + 15 < 50):",
            "            B[ramp(j * 16 + 0, 1, 16)] = "
            "A[ramp(j * 16 + 0, 1, 16)] * broadcast(2.0, 16)",
            "        else:",
            "            for c in range(16):",
            "                if likely(j * 16 + c < 50):",
            "                    B[j * 16 + c] = A[j * 16 + c] * 2.0",
        ]
    )
    assert repr(after) == expected
    a = np.arange(64, dtype=np.float32) + 0.5
    want, got = np.full(64, -1.0, np.float32), np.full(64, -1.0, np.float32)
    run(before, a, want)
    run(after, a, got)
    np.testing.assert_array_equal(got, want)


def test_a_guard_not_on_an_interval_of_lanes_stays_serial() -> None:
    for guard in (lambda j, c: c % 3 < 1, lambda j, c: j * 16 + c != 7):
        text = repr(vectorize_for_cpu(_edge_loop(guard)))
        assert "ramp(" not in text and "for c in range(16)" in text, text


@settings(max_examples=examples(25), deadline=None)
@given(
    bound=st.integers(0, 64),
    lo=st.integers(-5, 40),
    op=st.sampled_from(["<", "<=", ">", ">="]),
)
def test_versioned_loops_keep_every_store(bound, lo, op) -> None:  # type: ignore[no-untyped-def]
    """Any one-sided or two-sided affine guard: the versioned loop writes exactly the
    elements the serial one does."""
    cmp = {
        "<": lambda a, b: a < b,
        "<=": lambda a, b: a <= b,
        ">": lambda a, b: a > b,
        ">=": lambda a, b: a >= b,
    }[op]
    before = _edge_loop(
        lambda j, c: E.logical_and(cmp(j * 16 + c, E.const(bound)), j * 16 + c * 2 >= lo)
    )
    a = np.arange(64, dtype=np.float32) + 0.5
    want, got = np.full(64, -1.0, np.float32), np.full(64, -1.0, np.float32)
    run(before, a, want)
    run(vectorize_for_cpu(before), a, got)
    np.testing.assert_array_equal(got, want)


def test_versioning_tests_are_unswitched_out_of_inner_loops() -> None:
    """A GEMM edge: the accumulator's every update is guarded on the lanes; the test
    reads only the outer loop's variable, so it is hoisted above the accumulator's
    allocation and the k loop, and the vector copy holds no serial lane loop."""
    A, B = decl_buffer((512,), "float32", "A"), decl_buffer((64,), "float32", "B")
    acc = decl_buffer((16,), "float32", "acc", scope="local")
    j, k, c = E.Var("j"), E.Var("k"), E.Var("c")
    col = j * 16 + c
    likely = lambda e: E.Call("bool", E.Intrinsic.LIKELY, (e,))  # noqa: E731

    def lanes(store: S.Stmt) -> S.Stmt:
        guarded = S.IfThenElse(likely(col < 50), store)
        return S.For(c, E.const(0), E.const(16), K.VECTORIZED, guarded)

    update = S.BufferStore(acc, acc[c] + A[k * 64 + col], (c,))
    body = S.SeqStmt(
        (
            lanes(S.BufferStore(acc, E.const(0.0), (c,))),
            S.For(k, E.const(0), E.const(8), K.SERIAL, lanes(update)),
            lanes(S.BufferStore(B, acc[c], (col,))),
        )
    )
    before = func(S.For(j, E.const(0), E.const(4), K.PARALLEL, S.Allocate(acc, body)), A, B)
    after = vectorize_for_cpu(before)
    lines = repr(after).splitlines()
    assert lines[1] == "    for j in parallel(4):"
    assert lines[2].startswith("        if likely(")
    assert lines[3] == '            acc = alloc((16), "float32", scope="local")'
    vector_copy = lines[3 : lines.index("        else:")]
    assert not any("range(16)" in line for line in vector_copy)
    assert sum("ramp(" in line for line in vector_copy) == 3
    a = np.arange(8 * 64, dtype=np.float32) * 0.25
    want, got = np.full(64, -1.0, np.float32), np.full(64, -1.0, np.float32)
    run(before, a, want)
    run(after, a, got)
    np.testing.assert_array_equal(got, want)


def _matmul_row(inner_extent):  # type: ignore[no-untyped-def]
    """``for j in vectorized(8): C[j] = 0; for k in range(inner_extent): C[j] += A[k]*B[k*8+j]``."""
    A, B = decl_buffer((5,), "float32", "A"), decl_buffer((40,), "float32", "B")
    C = decl_buffer((8,), "float32", "C")
    j, k = E.Var("j"), E.Var("k")
    update = S.BufferStore(C, C[j] + A[k] * B[k * 8 + j], (j,))
    body = S.SeqStmt(
        (
            S.BufferStore(C, E.const(0.0, "float32"), (j,)),
            S.For(k, E.const(0), inner_extent(j), K.SERIAL, update),
        )
    )
    return func(S.For(j, E.const(0), E.const(8), K.VECTORIZED, body), A, B, C)


def test_item_32_a_serial_loop_inside_a_vectorized_loop_gets_a_vector_body() -> None:
    """As TVM's VectorizeLoop: the reduction loop stays a loop and its body becomes
    vector code (the vectorized loop moves inward), where it used to stay scalar."""
    before = _matmul_row(lambda j: E.const(5))
    after = vectorize_loops(before)
    expected = "\n".join(
        [
            'def f(A: Buffer((5), "float32"), B: Buffer((40), "float32"), '
            'C: Buffer((8), "float32")):',
            "    C[ramp(0, 1, 8)] = broadcast(0.0, 8)",
            "    for k in range(5):",
            "        C[ramp(0, 1, 8)] = C[ramp(0, 1, 8)] + broadcast(A[k], 8) * "
            "B[ramp(k * 8 + 0, 1, 8)]",  # simplify runs later
        ]
    )
    assert repr(after) == expected
    a = np.random.default_rng(0).standard_normal(5).astype(np.float32)
    b = np.random.default_rng(1).standard_normal(40).astype(np.float32)
    got, want = np.full(8, np.nan, np.float32), np.full(8, np.nan, np.float32)
    run(before, a, b, want)
    run(after, a, b, got)
    np.testing.assert_allclose(got, a @ b.reshape(5, 8), rtol=1e-5)
    np.testing.assert_allclose(got, want, rtol=1e-6)


def test_item_32_an_inner_loop_whose_trip_count_moves_with_the_lanes_stays_serial() -> None:
    before = _matmul_row(lambda j: j)
    after = vectorize_loops(before)
    assert "ramp(" not in repr(after)
    assert "for j in unroll(8):" in repr(after)  # 8 lanes or fewer: unrolled, as before


def _offset_loop(cast_to: str, lane_dtype: str = "int32"):  # type: ignore[no-untyped-def]
    """``for c in vectorized(7): B[c] = A[T[0] * 5 + cast(c * 2)]``: a lane offset cast
    to the type of a base read from memory (an LSTM step's row, a runtime slice start)."""
    A, B = decl_buffer((40,), "float32", "A"), decl_buffer((7,), "float32", "B")
    T = decl_buffer((1,), "int64", "T")
    c = E.Var("c", lane_dtype)
    offset = E.Cast(cast_to, c * E.const(2, lane_dtype))
    if cast_to != "int64":
        offset = E.Cast("int64", offset)
    body = S.BufferStore(B, A[T[0] * E.const(5, "int64") + offset], (c,))
    loop = S.For(c, E.const(0, lane_dtype), E.const(7, lane_dtype), K.VECTORIZED, body)
    return func(loop, A, T, B)


def test_a_widened_lane_offset_stays_an_affine_index() -> None:
    """int64(ramp) is a ramp of int64s: one vector load, not seven scalar ones (each LSTM
    cell's gates ran scalar so, 0.7 us a step instead of 0.12)."""
    before = _offset_loop("int64")
    expected = "\n".join(
        [
            'def f(A: Buffer((40), "float32"), T: Buffer((1), "int64"), '
            'B: Buffer((7), "float32")):',
            "    B[ramp(0, 1, 7)] = A[ramp(T[0] * int64(5) + int64(0), int64(2), 7)]",
        ]
    )
    after = vectorize_loops(before)
    assert repr(after) == expected
    a, t = np.arange(40, dtype=np.float32) + 0.5, np.array([3], np.int64)
    want, got = np.zeros(7, np.float32), np.zeros(7, np.float32)
    run(before, a, t, want)
    run(after, a, t, got)
    np.testing.assert_array_equal(got, want)


def test_a_cast_that_may_change_lanes_keeps_them_apart() -> None:
    """Through uint32 or int8 a lane's value may wrap: no ramp of the result, and the
    loop keeps its meaning."""
    for cast_to in ("uint32", "int8"):
        before = _offset_loop(cast_to)
        after = vectorize_loops(before)
        assert "A[ramp(" not in repr(after), repr(after)
        assert trace(after) == trace(before)
