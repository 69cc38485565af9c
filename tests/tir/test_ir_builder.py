"""IRBuilder: the nesting it produces, compared with hand-written IR, and its misuse errors."""

from __future__ import annotations

import numpy as np
import pytest

from ember.errors import ArgumentError
from ember.tir import expr as E
from ember.tir import stmt as S
from ember.tir.buffer import decl_buffer
from ember.tir.interp import run
from ember.tir.ir_builder import IRBuilder
from ember.tir.structural import assert_structural_equal


def test_loops_stores_and_branches_build_the_expected_tree():
    ib = IRBuilder()
    A = ib.param((16, 16), "float32", name="A")
    with ib.for_range(0, 16, name="i") as i:
        with ib.for_range(0, 16, name="j", kind="vectorized") as j:
            ib.store(A, (i, j), A[i, j] * 2.0)
        with ib.if_then_else(i < 4):
            ib.store(A, (i, 0), 0.0)
        with ib.else_():
            ib.store(A, (i, 0), 1.0)
    got = ib.get_func("f")

    B = decl_buffer((16, 16), "float32", name="A")
    i, j = E.Var("i"), E.Var("j")
    inner = S.For(
        j, E.const(0), E.const(16), S.ForKind.VECTORIZED, S.BufferStore(B, B[i, j] * 2.0, (i, j))
    )
    branch = S.IfThenElse(
        i < 4,
        S.BufferStore(B, E.const(0.0), (i, E.const(0))),
        S.BufferStore(B, E.const(1.0), (i, E.const(0))),
    )
    outer = S.For(i, E.const(0), E.const(16), S.ForKind.SERIAL, S.SeqStmt((inner, branch)))
    assert_structural_equal(got, S.PrimFunc("f", (B,), outer))


def test_allocate_let_and_assert_enclose_the_rest_of_their_block():
    ib = IRBuilder()
    A = ib.param((4,), "int32", name="A")
    ib.store(A, 0, 1)
    tmp = ib.allocate((4,), "int32", name="tmp")
    x = ib.let("x", A[0] + 1)
    ib.assert_(x > 0, "x must be positive")
    ib.store(tmp, 0, x)
    ib.store(A, 1, tmp[0])
    body = ib.get()
    assert isinstance(body, S.SeqStmt) and len(body.stmts) == 2
    alloc = body.stmts[1]
    assert isinstance(alloc, S.Allocate) and alloc.buffer is tmp and tmp.scope == "local"
    let = alloc.body
    assert isinstance(let, S.LetStmt) and let.var is x
    check = let.body
    assert isinstance(check, S.AssertStmt) and check.message == "x must be positive"
    assert isinstance(check.body, S.SeqStmt) and len(check.body.stmts) == 2
    a = np.array([5, 0, 0, 0], dtype="int32")
    run(ib.get_func("f"), a)
    assert list(a) == [1, 2, 0, 0]


def test_loop_bounds_kinds_attrs_and_misc_statements():
    ib = IRBuilder()
    n = E.Var("n")
    A = ib.param((n,), "float32", name="A")
    tx = E.Var("tx")
    with ib.for_range(2, n, name="i", kind="parallel") as i:
        ib.store(A, i, 1.0)
    with ib.for_range(0, 32, name="t", kind=S.ForKind.THREAD_BINDING, thread_tag="threadIdx.x"):
        with ib.attr(tx, "pragma_unroll", 1):
            ib.barrier()
            ib.evaluate(E.const(0))
    loop, bound = ib.get().stmts
    assert loop.kind is S.ForKind.PARALLEL and E.is_const_int(loop.min, 2)
    assert isinstance(loop.extent, E.BinOp)  # n - 2
    assert bound.thread_tag == "threadIdx.x" and bound.extent.value == 32
    attr = bound.body
    assert isinstance(attr, S.AttrStmt) and attr.key == "pragma_unroll"
    assert [type(s) for s in attr.body.stmts] == [S.Barrier, S.Evaluate]
    a = np.zeros(5, dtype="float32")
    run(ib.get_func("f"), a)
    assert list(a) == [0, 0, 1, 1, 1]


def test_empty_builder_gives_a_no_op_and_explicit_params_win():
    ib = IRBuilder()
    A = ib.buffer((3,), "int8", name="A")
    func = ib.get_func("empty", params=[A])
    assert func.params == (A,)
    assert isinstance(func.body, S.SeqStmt) and func.body.stmts == ()


def test_builder_misuse_raises_argument_errors():
    ib = IRBuilder()
    with pytest.raises(ArgumentError, match="else_\\(\\) must directly follow an if_then_else"):
        with ib.else_():
            pass
    with pytest.raises(ArgumentError, match="unknown loop kind 'sideways'"):
        with ib.for_range(0, 4, kind="sideways"):
            pass
    with pytest.raises(ArgumentError, match="emit\\(\\) takes a statement"):
        ib.emit("A[0] = 1")  # type: ignore[arg-type]  # an expression is evaluated, as TVM
    with ib.for_range(0, 4):
        with pytest.raises(ArgumentError, match="inside an open with-block"):
            ib.get()
