"""structural_equal and its assert: definitions by position, buffers, free vars, diffs."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ember.tir import expr as E
from ember.tir import stmt as S
from ember.tir.buffer import Buffer, decl_buffer
from ember.tir.ir_builder import IRBuilder
from ember.tir.structural import assert_structural_equal, structural_equal
from tests.nightly import examples


def _scale_func(factor: float = 2.0, offset: int = 3, n: int = 16) -> S.PrimFunc:
    ib = IRBuilder()
    A = ib.param((n,), "float32", name="A")
    B = ib.param((n,), "float32", name="B")
    with ib.for_range(0, n, name="i") as i:
        ib.store(B, i, A[i] * factor)
        ib.store(B, i, B[i] + E.cast("float32", i + offset))
    return ib.get_func("scale")


def test_separately_built_functions_are_equal():
    assert structural_equal(_scale_func(), _scale_func())
    assert_structural_equal(_scale_func(), _scale_func())
    assert not structural_equal(_scale_func(), _scale_func(factor=3.0))
    assert not structural_equal(_scale_func(), _scale_func(n=17))


def test_assert_reports_the_path_of_the_first_difference_and_both_texts():
    with pytest.raises(AssertionError) as info:
        assert_structural_equal(_scale_func(offset=3), _scale_func(offset=4))
    text = str(info.value)
    assert "body.body.stmts[1].value.b.value.b: IntImm 3 != IntImm 4" in text
    assert "--- lhs ---" in text and "--- rhs ---" in text
    assert "def scale(" in text
    assert "-        B[i] = B[i] + float32(i + 3)" in text  # the diff
    assert "+        B[i] = B[i] + float32(i + 4)" in text


def test_path_into_a_sequence():
    ib1, ib2 = IRBuilder(), IRBuilder()
    outs = []
    for ib, last in ((ib1, 3), (ib2, 4)):
        X = ib.param((4,), "int32", name="X")
        ib.store(X, 0, 1)
        ib.store(X, 1, X[0] + last)
        outs.append(ib.get_func("f"))
    with pytest.raises(AssertionError, match=r"body\.stmts\[1\]\.value\.b: IntImm 3 != IntImm 4"):
        assert_structural_equal(*outs)


def test_loop_variables_match_by_definition_not_name():
    ib = IRBuilder()
    A = ib.param((4,), "int32", name="A")
    with ib.for_range(0, 4, name="i") as i:
        ib.store(A, i, i)
    ib2 = IRBuilder()
    A2 = ib2.param((4,), "int32", name="A")
    with ib2.for_range(0, 4, name="k") as k:
        ib2.store(A2, k, k)
    assert structural_equal(ib.get_func(), ib2.get_func())


def test_nested_loops_must_use_corresponding_variables():
    def nest(swap: bool) -> S.Stmt:
        A = decl_buffer((4, 4), "int32", name="A")
        i, j = E.Var("i"), E.Var("j")
        a, b = (j, i) if swap else (i, j)
        store = S.BufferStore(A, E.const(0), (a, b))
        inner = S.For(j, E.const(0), E.const(4), S.ForKind.SERIAL, store)
        return S.For(i, E.const(0), E.const(4), S.ForKind.SERIAL, inner)

    assert structural_equal(nest(False), nest(False))
    with pytest.raises(AssertionError, match="body.body.indices\\[0\\]: Var i .* matches Var i"):
        assert_structural_equal(nest(False), nest(True))


def test_free_variables_compare_by_identity_unless_mapped():
    x, y, z = E.Var("x"), E.Var("y"), E.Var("x")
    assert structural_equal(x + 1, x + 1)
    assert not structural_equal(x + 1, z + 1)
    assert structural_equal(x + 1, z + 1, map_free_vars=True)
    # mapping is consistent: x+x does not match y+z
    assert not structural_equal(x + x, y + z, map_free_vars=True)
    assert structural_equal(x + y, z + x, map_free_vars=True)
    with pytest.raises(AssertionError, match="free variables differ.*map_free_vars=True"):
        assert_structural_equal(x * 2, z * 2)


def test_let_and_let_stmt_define_variables():
    def build() -> tuple[E.PrimExpr, S.Stmt]:
        v, w = E.Var("v"), E.Var("w")
        A = decl_buffer((2,), "int32", name="A")
        expr = E.Let("int32", v, E.const(3), v * v)
        return expr, S.LetStmt(w, E.const(1), S.BufferStore(A, w, (w,)))

    (e1, s1), (e2, s2) = build(), build()
    assert structural_equal(e1, e2)
    assert structural_equal(s1, s2)
    v = E.Var("v")
    assert not structural_equal(e1, E.Let("int32", v, E.const(3), v * 2))


def test_buffers_match_structurally_and_consistently():
    def copy(swap: bool, dtype: str = "float32", scope: str = "global") -> S.PrimFunc:
        A = decl_buffer((8,), dtype, name="A", scope=scope)
        B = decl_buffer((8,), dtype, name="B", scope=scope)
        i = E.Var("i")
        src, dst = (B, A) if swap else (A, B)
        body = S.For(i, E.const(0), E.const(8), S.ForKind.SERIAL, S.BufferStore(dst, src[i], (i,)))
        return S.PrimFunc("copy", (A, B), body)

    assert structural_equal(copy(False), copy(False))
    assert not structural_equal(copy(False), copy(True))  # the copy goes the other way
    with pytest.raises(AssertionError, match=r"params\[0\]\.dtype: 'float32' != 'float16'"):
        assert_structural_equal(copy(False), copy(False, dtype="float16"))
    with pytest.raises(AssertionError, match=r"params\[0\]\.scope"):
        assert_structural_equal(copy(False), copy(False, scope="shared"))


def test_flattened_views_must_share_the_same_parameter():
    def func(view_of: int) -> S.PrimFunc:
        A = decl_buffer((2, 4), "float32", name="A")
        B = decl_buffer((2, 4), "float32", name="B")
        src = (A, B)[view_of]
        flat = Buffer(src.name, src.dtype, (E.const(8),), src.data)
        return S.PrimFunc("f", (A, B), S.BufferStore(flat, E.const(1.0), (E.const(0),)))

    assert structural_equal(func(0), func(0))
    assert not structural_equal(func(0), func(1))


def test_allocations_and_symbolic_parameter_shapes_are_definitions():
    def func() -> S.PrimFunc:
        n = E.Var("n")
        ib = IRBuilder()
        A = ib.param((n,), "float32", name="A")
        tmp = ib.allocate((4,), "float32", scope="local", name="tmp")
        with ib.for_range(0, n, name="i") as i:
            ib.store(tmp, E.floormod(i, 4), A[i])
            ib.store(A, i, tmp[E.floormod(i, 4)] * 2.0)
        return ib.get_func("f")

    assert structural_equal(func(), func())
    other = func()
    alloc = other.body
    assert isinstance(alloc, S.Allocate)
    wider = decl_buffer((5,), "float32", name="tmp", scope="local")
    changed = other.with_body(S.Allocate(wider, alloc.body))
    with pytest.raises(AssertionError, match=r"body\.buffer\.shape\[0\]: IntImm 4 != IntImm 5"):
        assert_structural_equal(func(), changed)


def test_node_kind_dtype_and_enum_mismatches():
    x = E.Var("x")
    assert not structural_equal(x + 1, x * 1)
    assert not structural_equal(E.const(1), E.const(1, "int64"))
    assert not structural_equal(E.const(1.0), E.const(1))
    with pytest.raises(AssertionError, match=r"<root>: IntImm 1 != IntImm 1 \(int64\)"):
        assert_structural_equal(E.const(1), E.const(1, "int64"))
    loop = lambda kind: S.For(x, E.const(0), E.const(4), kind, S.Evaluate(x))  # noqa: E731
    with pytest.raises(AssertionError, match=r"kind: .*SERIAL.* != .*PARALLEL"):
        assert_structural_equal(loop(S.ForKind.SERIAL), loop(S.ForKind.PARALLEL))
    nan = E.const(float("nan"))
    assert structural_equal(nan, E.const(float("nan")))


# -- property: any expression equals its independent rebuild, and a changed constant does not


def _expr_recipes():
    leaf = st.one_of(
        st.integers(-5, 5).map(lambda v: ("const", v)),
        st.sampled_from(["a", "b"]).map(lambda n: ("var", n)),
    )
    ops = st.sampled_from(["+", "-", "*", "//", "%", "min", "max", "let", "select"])
    return st.recursive(leaf, lambda kids: st.tuples(ops, kids, kids), max_leaves=12)


def _build(recipe, free: dict[str, E.Var], bump: int = 0) -> E.PrimExpr:
    kind = recipe[0]
    if kind == "const":
        return E.const(recipe[1] + bump)
    if kind == "var":
        return free[recipe[1]]
    op, left, right = recipe
    a, b = _build(left, free, bump), _build(right, free, bump)
    if op == "let":
        v = E.Var("t")
        return E.Let("int32", v, a, v + b)
    if op == "select":
        return E.select(a < b, a, b)
    return E.BinOp("int32", E.BinaryOp(op), a, b)  # "+", "//", "min", ... are enum values


@settings(max_examples=examples(150), deadline=None)
@given(_expr_recipes())
def test_rebuilt_expressions_are_equal_and_a_changed_constant_is_found(recipe):
    free = {"a": E.Var("a"), "b": E.Var("b")}
    first, second = _build(recipe, free), _build(recipe, free)
    assert structural_equal(first, second)
    renamed = {"a": E.Var("a"), "b": E.Var("b")}
    assert structural_equal(first, _build(recipe, renamed), map_free_vars=True)
    if "const" in repr(recipe):
        assert not structural_equal(first, _build(recipe, free, bump=1))


def test_tensor_reads_compare_their_producer_by_identity():
    t1, t2 = object(), object()
    i = E.Var("i")
    assert structural_equal(
        E.ProducerLoad("float32", t1, (i,)), E.ProducerLoad("float32", t1, (i,))
    )
    assert not structural_equal(
        E.ProducerLoad("float32", t1, (i,)), E.ProducerLoad("float32", t2, (i,))
    )
