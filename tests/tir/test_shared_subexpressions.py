"""Shared subexpressions (one node object at many places) cost their distinct nodes.

A compute that reuses a subexpression (Winograd's select chains, read by every sum of
a transform) is a DAG; a walk that treats it as a tree costs one visit per path. These
build an expression of ``n + 2`` nodes and ``2**n`` paths (``e = e * e``, ``n`` times),
check that the memoized walks give what a tree walk gives on a small one, and that
lowering and the pass list take well under a second on ``2**20`` paths.
"""

from __future__ import annotations

import signal
import time
from collections.abc import Iterator
from contextlib import contextmanager

import numpy as np
import pytest

import ember
from ember.tir import expr as E
from ember.tir import stmt as S
from ember.tir.buffer import decl_buffer
from ember.tir.functor import (
    Mutator,
    Visitor,
    contains,
    free_vars,
    post_order_stmts,
    post_order_visit,
    substitute,
    substitute_each,
    uses_var,
)
from ember.tir.interp import run as interp_run
from ember.tir.schedule.lower import schedule_to_primfunc
from ember.tir.schedule.schedule import create_schedule
from ember.tir.structural import assert_structural_equal
from ember.tir.te import operation as te
from ember.tir.transform.pipeline import default_passes, run_passes


def squared(e: E.PrimExpr, n: int) -> E.PrimExpr:
    """``e ** (2 ** n)`` as ``n`` nested products of one node with itself."""
    for _ in range(n):
        e = E.BinOp(e.dtype, E.BinaryOp.MUL, e, e)
    return e


class _TreeSubstitute(Mutator):
    """The reference: a plain walk, one visit per path, every copy rebuilt."""

    def __init__(self, vmap: dict[E.Var, E.PrimExpr]) -> None:
        self.vmap = vmap

    def visit_Var(self, v: E.Var) -> E.PrimExpr:
        return self.vmap.get(v, v)


def test_substitute_matches_a_tree_walk_and_keeps_sharing() -> None:
    x, y = E.Var("x", "int32"), E.Var("y", "int32")
    small = squared(x + 1, 4)
    got = substitute(small, {x: y * 3})
    assert_structural_equal(got, _TreeSubstitute({x: y * 3}).visit(small))
    big = substitute(squared(x + 1, 60), {x: y})  # 2**60 paths: only a DAG walk ends
    assert big.a is big.b
    assert uses_var(big, lambda v: v is y) and not uses_var(big, lambda v: v is x)
    assert free_vars(big) == {y}
    assert contains(big, lambda n: n is y) and not contains(big, lambda n: n is x)


def test_substitute_each_copies_only_what_mentions_the_variable() -> None:
    """The copies of an unrolled body: each equals a plain substitution, and a subtree
    without the variable (a transform's sums below its select conditions) is the very
    object of the original in every copy, not a rebuilt one."""
    x, k = E.Var("x", "int32"), E.Var("k", "int32")
    sums = squared(x + 1, 40)  # no k: 2**40 paths, so only an untouched subtree is cheap
    body = E.select(E.eq(k, 0), sums * 4, E.select(E.eq(k, 1), sums - 2, sums + k))
    values = [E.const(v, "int32") for v in range(3)]
    copies = substitute_each(body, k, values)
    for value, copy in zip(values, copies):
        small = E.select(E.eq(k, 0), x * 4, x + k)  # the reference walk needs a small one
        (want,) = substitute_each(small, k, [value])
        assert_structural_equal(want, _TreeSubstitute({k: value}).visit(small))
        assert copy.true_value.a is sums and copy.false_value.true_value.a is sums
        assert copy.false_value.false_value.b is value
        assert not uses_var(copy, lambda v: v is k)


def test_post_order_visit_once_visits_each_node_once() -> None:
    x = E.Var("x", "int32")
    e = squared(x, 3)
    every: list[E.PrimExpr] = []
    post_order_visit(e, every.append)
    assert len(every) == 2**4 - 1  # every place: 8 leaves and 7 products
    once: list[E.PrimExpr] = []
    post_order_visit(e, once.append, once=True)
    assert len(once) == 4 and once[-1] is e and once[0] is x


def _shared_compute(n: int) -> tuple[te.Tensor, te.Tensor, object]:
    """``out[i] = (2 A[i] + (A[i] + 1)) ** (2**n)`` over 10 elements, split by 4 (a likely
    guard on the tail), with an inlined producer and one computed at the root."""
    A = te.placeholder((10,), "float32", name="A")
    P = te.compute((10,), lambda i: A[i] * 2.0, name="P")
    Q = te.compute((10,), lambda i: A[i] + 1.0, name="Q")
    out = te.compute((10,), lambda i: squared(P[i] + Q[i], n), name="out")
    s = create_schedule(out.op)
    s[P].compute_inline()
    s[out].split(out.op.axis[0], factor=4)
    return A, out, s


def test_lowering_a_shared_tree_is_fast() -> None:
    """2**20 paths, 30 nodes: the compute, its schedule, lowering (bound inference,
    inlining, loads) and every target-independent pass (with the IR verified after each)
    in well under a second."""
    start = time.process_time()
    A, out, s = _shared_compute(20)
    func = run_passes(schedule_to_primfunc(s, [A, out], "f"), default_passes(), verify=True)
    assert time.process_time() - start < 1.0
    found: list[object] = []
    post_order_visit(func.body, found.append, once=True)
    # loop_partition removed the tail's guard: a main loop and a tail of 2 iterations
    assert not any(isinstance(n, S.IfThenElse) for n in found)
    assert [n.extent.value for n in found if isinstance(n, S.For)] == [10, 4, 2, 2]


def test_shared_compute_runs_correctly(rng) -> None:  # noqa: ANN001
    A, out, s = _shared_compute(3)
    mod = ember.build(s, [A, out], target="llvm")
    a = rng.uniform(-1, 1, 10).astype("float32")
    got = np.zeros(10, "float32")
    mod(a, got)
    np.testing.assert_allclose(got, (3 * a + 1) ** 8, rtol=1e-5)


class _Stores(Visitor):
    """Counts stores; adds no expression visit, so it never enters an expression."""

    def __init__(self) -> None:
        self.n = 0

    def visit_BufferStore(self, s: S.BufferStore) -> None:
        self.n += 1
        self.generic_visit(s)


class _Vars(_Stores):
    def __init__(self) -> None:
        super().__init__()
        self.vars = 0

    def visit_Var(self, v: E.Var) -> None:
        self.vars += 1


class _LoopsUnrolled(Mutator):
    def visit_For(self, s: S.For) -> S.Stmt:
        body = self.visit(s.body)
        return S.For(s.loop_var, s.min, s.extent, S.ForKind.UNROLLED, body)


def _store_of(value: E.PrimExpr) -> S.For:
    i = E.Var("i", "int32")
    buf = decl_buffer((4,), "int32", name="B")
    return S.For(i, E.const(0), E.const(4), S.ForKind.SERIAL, S.BufferStore(buf, value, (i,)))


def test_a_walk_of_statements_alone_does_not_enter_expressions(monkeypatch) -> None:  # noqa: ANN001
    from ember.tir import functor

    calls = [0]  # a count, not the nodes: a failure's report would print them as trees
    fields = functor.field_values

    def counted(node):  # noqa: ANN001, ANN202
        calls[0] += 1
        if calls[0] > 100:
            raise RuntimeError("a walk of statements entered an expression")
        return fields(node)

    monkeypatch.setattr(functor, "field_values", counted)
    x = E.Var("x", "int32")
    loop = _store_of(squared(x, 200))  # 2**200 paths: entering it as a tree never ends
    stores = _Stores()
    found: list[S.Stmt] = []
    try:
        stores.visit(loop)
        rewritten = _LoopsUnrolled().visit(loop)
        post_order_stmts(loop, found.append)
        entered = False
    except RuntimeError:
        entered = True  # failed outside the handler: its traceback's frames print trees
    assert not entered, "a walk of statements entered an expression"
    assert stores.n == 1
    assert rewritten.kind is S.ForKind.UNROLLED and rewritten.body is loop.body
    assert found == [loop.body, loop]
    monkeypatch.setattr(functor, "field_values", fields)
    small = _Vars()  # a walk that visits an expression class enters expressions, as before
    small.visit(_store_of(squared(x, 3)))
    assert small.n == 1 and small.vars == 2**3 + 2  # 8 reads of x, the loop var, the index


@contextmanager
def _deadline(seconds: int) -> Iterator[None]:
    """Fail, rather than hang, when the body runs past ``seconds`` (Python code: the
    alarm's handler runs between its bytecodes)."""

    def expire(signum: int, frame: object) -> None:
        raise TimeoutError(f"not done in {seconds} s")

    old = signal.signal(signal.SIGALRM, expire)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)


def _chain(x: E.PrimExpr, n: int) -> E.PrimExpr:
    """``n`` times ``max(e, -e) * 0.5 + e * 0.25``: each step reads the last one twice."""
    for _ in range(n):
        x = te.max(x, -x) * 0.5 + x * 0.25
    return x


def test_a_shared_chain_prints_each_value_once_and_means_what_it_computes() -> None:
    """``repr`` of 40 steps (2**40 paths) and of its lowered function print in moments,
    one line per step; run as Python, the printed lines give what numpy's own loop gives
    (the printer is no part of that reference)."""
    A = te.placeholder((37,), "float32", name="A")
    B = te.compute((37,), lambda i: _chain(A[i], 40), name="B")
    with _deadline(20):  # printed as a tree, this would not end
        body = repr(B.op.body)
        lowered = repr(ember.lower(create_schedule(B.op), [A, B]))
    assert len(body.splitlines()) == 41 and len(body) < 4000
    assert "B[i] = " in lowered and len(lowered.splitlines()) < 50
    *lines, last = body.splitlines()
    x = 0.7303
    scope = {"A": {"i": x}, "i": "i"}
    exec("\n".join(lines), scope)  # noqa: S102 - the printer's own text, as a check
    want = np.float64(x)
    for _ in range(40):
        want = np.maximum(want, -want) * 0.5 + want * 0.25
    assert eval(last, scope) == pytest.approx(float(want), rel=1e-12)  # noqa: S307


def test_small_dags_still_print_as_trees() -> None:
    """Below the size limit a value read twice prints twice, as TVM prints it."""
    A = te.placeholder((4,), "float32", name="A")
    i = E.Var("i", "int32")
    assert repr(_chain(A[i], 2)) == (
        "max(max(A[i], 0.0 - A[i]) * 0.5 + A[i] * 0.25, 0.0 - (max(A[i], 0.0 - A[i]) * 0.5"
        " + A[i] * 0.25)) * 0.5 + (max(A[i], 0.0 - A[i]) * 0.5 + A[i] * 0.25) * 0.25"
    )


def test_a_guarded_read_stays_under_its_guard() -> None:
    """A subexpression that only a lazy branch reads (``if_then_else``'s values: a
    guarded load past the end, read twice there) is not named above the statement, where
    it would read as evaluated unconditionally; the shared steps outside it are."""
    A = te.placeholder((37,), "float32", name="A")
    i = E.Var("i", "int32")
    past = A[i + 1] * 3.0  # read twice, but only where i < 36
    guarded = E.if_then_else(i < 36, past * past, 0.0)
    text = repr(_chain(A[i], 13) + guarded)
    assert "shared = A[i]\n" in text
    assert "A[i + 1]" in text.splitlines()[-1]
    assert not any("A[i + 1]" in line for line in text.splitlines()[:-1])


def test_the_reference_interpreter_evaluates_each_shared_value_once() -> None:
    """40 steps, each element's value is 2**40 paths: the interpreter computes each step
    once per element, anew for every element, and gives numpy's result. A guarded read
    past the end, read twice under its guard, is still read only where the guard holds
    (the interpreter's loads are bounds-checked: a read of A[37] would raise)."""
    A = te.placeholder((37,), "float32", name="A")

    def body(i: E.PrimExpr) -> E.PrimExpr:
        past = A[i + 1] * 3.0  # A[37] for the last element: guarded below
        return _chain(A[i], 40) + E.if_then_else(i < 36, past * past, 0.0)

    B = te.compute((37,), body, name="B")
    func = run_passes(schedule_to_primfunc(create_schedule(B.op), [A, B], "f"), default_passes())
    a = np.random.default_rng(0).standard_normal(37).astype("float32") * 1e5
    b = np.zeros_like(a)
    with _deadline(20):  # evaluated as a tree, this would not end
        interp_run(func, a, b)
    want = a.astype("float64")
    for _ in range(40):
        want = np.maximum(want, -want) * 0.5 + want * 0.25
    want[:36] += (a[1:].astype("float64") * 3.0) ** 2
    np.testing.assert_allclose(b, want, rtol=1e-5)
