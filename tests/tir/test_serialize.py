"""TIR JSON: lowered functions and random expressions survive a trip through JSON text.

The round trip must give a structurally equal function that computes the same values
(checked with the interpreter against numpy on random data), with shared nodes shared
again; a malformed or foreign table is refused with ``InvalidModelError`` and an
object that is not TIR with ``CompileError``.
"""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import ember
from ember.errors import CompileError, InvalidModelError
from ember.tir import expr as E
from ember.tir import serialize
from ember.tir import stmt as S
from ember.tir.functor import post_order_visit
from ember.tir.interp import run
from ember.tir.structural import assert_structural_equal, structural_equal
from tests.nightly import examples


def _trip(obj, extra=()):
    text = json.dumps(serialize.to_json(obj, extra))
    return serialize.from_json(json.loads(text), extra)


def _lowered_matmul(m: int, n: int, k: int) -> S.PrimFunc:
    te = ember.te
    A = te.placeholder((m, k), name="A")
    B = te.placeholder((k, n), name="B")
    r = te.reduce_axis((0, k), name="r")
    C = te.compute((m, n), lambda i, j: te.sum(A[i, r] * B[r, j], axis=r), name="C")
    D = te.compute((m, n), lambda i, j: te.max(C[i, j], 0.5) * 2.0, name="D")
    s = te.create_schedule(D.op)
    io, ii = s[C].split(C.op.axis[1], factor=4)  # a tail: n is not a multiple of 4
    s[C].reorder(io, C.op.reduce_axis[0], ii)
    return ember.lower(s, [A, B, D], name="mm")


def test_a_lowered_function_round_trips_and_computes_the_same(rng):
    func = _lowered_matmul(7, 11, 5)
    back = _trip(func)
    assert back is not func
    assert_structural_equal(back, func)
    assert repr(back) == repr(func)
    a = rng.standard_normal((7, 5)).astype("float32")
    b = rng.standard_normal((5, 11)).astype("float32")
    got = np.full((7, 11), np.nan, dtype="float32")
    run(back, a, b, got)
    np.testing.assert_allclose(got, np.maximum(a @ b, 0.5) * 2.0, rtol=1e-5, atol=1e-5)


def test_shared_nodes_are_shared_again():
    func = _lowered_matmul(3, 4, 2)
    back = _trip(func)
    out = back.buffers[-1]
    stores: list[S.BufferStore] = []
    post_order_visit(
        back.body, lambda n: stores.append(n) if isinstance(n, S.BufferStore) else None
    )
    to_out = [s for s in stores if s.buffer.name == "D"]
    assert to_out and all(s.buffer.data is out.data for s in to_out)  # the parameter's pointer
    assert len({id(s.buffer.data) for s in stores}) == 2  # C's and D's: nothing duplicated
    tables = serialize.to_json(func)["nodes"]
    assert sum(n["c"] == "Var" and n["f"]["name"] == "D" for n in tables) == 1


def _exprs() -> st.SearchStrategy[E.PrimExpr]:
    x, y = E.Var("x", "int32"), E.Var("y", "int32")
    leaves = st.one_of(
        st.sampled_from([x, y]),
        st.integers(-(2**31), 2**31 - 1).map(lambda v: E.const(v, "int32")),
    )

    def grow(inner: st.SearchStrategy) -> st.SearchStrategy:
        pair = st.tuples(inner, inner)
        return st.one_of(
            pair.map(lambda p: p[0] + p[1]),
            pair.map(lambda p: p[0] * p[1]),
            pair.map(lambda p: p[0] // p[1]),
            pair.map(lambda p: E.max_(p[0], p[1])),
            pair.map(lambda p: E.select(p[0] < p[1], p[0], p[1])),
            inner.map(
                lambda a: E.cast("int32", E.call(E.Intrinsic.SQRT, E.cast("float32", a)) * 0.25)
            ),
        )

    return st.recursive(leaves, grow, max_leaves=12)


@settings(max_examples=examples(60), deadline=None)
@given(_exprs())
def test_random_expressions_round_trip(expr):
    back = _trip(expr)
    assert structural_equal(back, expr, map_free_vars=True)
    assert repr(back) == repr(expr)


@pytest.mark.parametrize("value", [math.nan, math.inf, -math.inf, -0.0, 1e-45, 0.1])
def test_float_constants_are_exact(value):
    back = _trip(E.FloatImm("float32", value))
    assert isinstance(back, E.FloatImm)
    if math.isnan(value):
        assert math.isnan(back.value)
    else:
        assert back.value == value and math.copysign(1, back.value) == math.copysign(1, value)


def test_objects_that_are_not_tir_are_refused():
    with pytest.raises(CompileError, match="cannot store a builtins.dict"):
        serialize.to_json((E.const(1), {"a": 1}))

    class Opaque:
        pass

    with pytest.raises(CompileError, match="Opaque"):
        serialize.to_json(S.AttrStmt(Opaque(), "pragma", E.const(1), S.no_op()))


def _table():
    return serialize.to_json(E.Var("x") + 1)


@pytest.mark.parametrize(
    "change, phrase",
    [
        (lambda d: d.update(format="other"), "not TIR JSON"),
        (lambda d: d.update(version=99), "version 99"),
        (lambda d: d["nodes"][0].update(c="Popen"), "'Popen' is not a TIR node class"),
        (lambda d: d["nodes"][0]["f"].update(extra=1), "has fields"),
        (lambda d: d.update(root={"n": 99}), "unreadable value"),
        (lambda d: d["nodes"][0]["f"].update(name={"n": 5}), "unreadable value"),
        (lambda d: d.update(nodes="x"), "no node table"),
    ],
)
def test_malformed_tables_are_refused(change, phrase):
    data = _table()
    change(data)
    with pytest.raises(InvalidModelError, match=phrase):
        serialize.from_json(data)
