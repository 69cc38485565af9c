"""The simplify pass: Before/Expected on each thing it removes, and same stores on random nests."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from ember.tir import expr as E
from ember.tir import stmt as S
from ember.tir.buffer import decl_buffer
from ember.tir.transform.simplify import simplify, simplify_stmt
from tests.nightly import examples
from tests.tir.transform.tir_exec import run

K = S.ForKind
A = decl_buffer((64,), "float32", "A")
i, j, io, ii, n = (E.Var(s) for s in ("i", "j", "io", "ii", "n"))


def likely(c: E.PrimExpr) -> E.PrimExpr:
    return E.Call("bool", E.Intrinsic.LIKELY, (c,))


def loop(
    v: E.Var, extent: E.ExprLike, body: S.Stmt, kind: S.ForKind = K.SERIAL, lo: int = 0
) -> S.For:
    return S.For(v, E.const(lo), E.convert(extent), kind, body)


def store(index: E.PrimExpr, value: float = 1.0) -> S.Stmt:
    return S.BufferStore(A, E.const(value, "float32"), (index,))


def _s(stmt: S.Stmt) -> str:
    return repr(simplify_stmt(stmt))


def test_indices_simplified_with_loop_ranges() -> None:
    before = loop(io, 2, loop(ii, 32, store((io * 32 + ii) // 32 + (io * 32 + ii) % 32)))
    assert _s(before) == "for io in range(2):\n    for ii in range(32):\n        A[io + ii] = 1.0"


def test_provable_guards_removed() -> None:
    assert (
        _s(loop(i, 16, S.IfThenElse(likely(i < 16), store(i))))
        == "for i in range(16):\n    A[i] = 1.0"
    )
    assert _s(loop(i, 16, S.IfThenElse(i < 32, store(i)))) == "for i in range(16):\n    A[i] = 1.0"
    # false without else: the loop does nothing and disappears
    assert _s(loop(i, 16, S.IfThenElse(likely(i >= 16), store(i)))) == "pass"
    # false with else: the else branch runs
    assert (
        _s(loop(i, 16, S.IfThenElse(i > 20, store(i), store(i, 2.0))))
        == "for i in range(16):\n    A[i] = 2.0"
    )


def test_conditions_known_inside_branches() -> None:
    inner = S.IfThenElse(i < n, store(i), store(i, 3.0))
    before = loop(i, 64, S.IfThenElse(i < n, inner, S.IfThenElse(i >= n, store(i, 2.0))))
    expected = (
        "for i in range(64):\n    if i < n:\n        A[i] = 1.0\n    else:\n        A[i] = 2.0"
    )
    assert _s(before) == expected


def test_empty_then_branch_becomes_negated_condition() -> None:
    before = loop(i, 64, S.IfThenElse(i < n, S.no_op(), store(i)))
    assert _s(before) == "for i in range(64):\n    if i >= n:\n        A[i] = 1.0"


def test_unit_and_empty_loops() -> None:
    assert _s(loop(i, 1, store(i + 3), lo=5)) == "A[8] = 1.0"
    assert _s(loop(i, 0, store(i))) == "pass"
    assert _s(loop(i, n - n, store(i))) == "pass"
    assert _s(loop(i, 8, S.seq(S.no_op(), S.SeqStmt((S.no_op(),))))) == "pass"
    # a thread loop of extent 1 stays: it defines the launch shape
    bound = S.For(i, E.const(0), E.const(1), K.THREAD_BINDING, store(i), "threadIdx.x")
    assert simplify_stmt(bound) is bound


def test_sequences_let_assert_evaluate() -> None:
    before = S.SeqStmt(
        (S.SeqStmt(()), store(E.const(1)), S.Evaluate(E.const(0)), store(E.const(2)))
    )
    assert _s(before) == "A[1] = 1.0\nA[2] = 1.0"
    t = E.Var("t")
    assert _s(S.LetStmt(t, n + 1, store(E.const(1)))) == "A[1] = 1.0"  # unused let
    assert (
        _s(loop(i, 8, S.LetStmt(t, i * 2, store(t // 2))))
        == "for i in range(8):\n    t = i * 2\n    A[t // 2] = 1.0"
    )
    assert (
        _s(loop(i, 8, S.LetStmt(t, i * 2, S.IfThenElse(t < 16, store(t)))))
        == "for i in range(8):\n    t = i * 2\n    A[t] = 1.0"
    )
    assert (
        _s(loop(i, 8, S.AssertStmt(i < 8, "in range", store(i))))
        == "for i in range(8):\n    A[i] = 1.0"
    )


def test_unchanged_function_is_the_same_object_and_input_untouched() -> None:
    body = loop(io, 4, loop(ii, 32, S.IfThenElse(likely(io * 32 + ii < n), store(ii))))
    f = S.PrimFunc("f", (A,), body)
    assert simplify(f) is f
    g = S.PrimFunc("g", (A,), loop(i, 16, S.IfThenElse(likely(i < 16), store(i + 0))))
    text = repr(g)
    h = simplify(g)
    assert h is not g and repr(g) == text
    assert simplify(h) is h


# -- property: random nests of loops, guards and index arithmetic keep their stores ------------
@st.composite
def _nests(draw):  # type: ignore[no-untyped-def]
    vars_ = [E.Var(f"v{k}") for k in range(3)]
    extents = [draw(st.integers(1, 6)) for _ in vars_]
    coefs = [draw(st.integers(-3, 8)) for _ in vars_]
    lin = sum((v * c for v, c in zip(vars_, coefs)), E.const(draw(st.integers(-5, 5))))
    divisor = draw(st.sampled_from([1, 2, 3, 4, 8]))
    index = E.floormod(E.floordiv(lin, divisor) + lin, 64)
    bound = draw(st.integers(-10, 60))
    cond = lin < bound if draw(st.booleans()) else E.logical_not(lin >= bound)
    if draw(st.booleans()):
        cond = likely(cond)
    value = E.cast("float32", E.min_(lin, bound) + E.max_(index, 3))
    body: S.Stmt = S.IfThenElse(
        cond, S.BufferStore(A, value, (index,)), store(E.floormod(lin * 3, 64), 7.0)
    )
    for v, ext in reversed(list(zip(vars_, extents))):
        body = loop(v, ext, body, draw(st.sampled_from([K.SERIAL, K.PARALLEL, K.UNROLLED])))
    return S.PrimFunc("f", (A,), body)


@settings(max_examples=examples(200), deadline=None)
@given(_nests())
def test_simplify_keeps_every_store(f: S.PrimFunc) -> None:
    g = simplify(f)
    assert run(g) == run(f)
