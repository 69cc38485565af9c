"""The Analyzer's entry points on the cases bound inference and the passes rely on."""

from __future__ import annotations

import math

import numpy as np
import pytest

from ember.errors import ArgumentError
from ember.tir import expr as E
from ember.tir.arith import Analyzer, IntSet, const_int_bound, same

i, j, x, y, n = (E.Var(s) for s in "i j x y n".split())
io, ii = E.Var("io"), E.Var("ii")


def _ana(**ranges: tuple[int, int]) -> Analyzer:
    ana = Analyzer()
    for name, (lo, ext) in ranges.items():
        ana.bind(globals()[name], E.Range(E.const(lo), E.const(ext)))
    return ana


def _s(e: E.PrimExpr, ana: Analyzer | None = None) -> str:
    return repr((ana or Analyzer()).simplify(e))


# -- canonical form -----------------------------------------------------------------------
@pytest.mark.parametrize(
    "build, expected",
    [
        (lambda: (i * 32 + j) - i * 32, "j"),
        (lambda: x * 4 + x * 4, "x * 8"),
        (lambda: (x + 3) * 2 - x, "x + 6"),
        (lambda: 5 - (x - 5), "10 - x"),
        (lambda: x - x, "0"),
        (lambda: (x // 8) * 8 + x % 8, "x"),
        (lambda: (x // 8) * 16 + (x % 8) * 2 + y, "x * 2 + y"),
        (lambda: x * y + y * x, "x * y + y * x"),  # products of variables are atoms
    ],
)
def test_linear_canonical_form(build, expected) -> None:  # type: ignore[no-untyped-def]
    assert _s(build()) == expected


def test_split_index_recovered_with_bounds() -> None:
    ana = _ana(io=(0, 4), ii=(0, 32))
    assert _s((io * 32 + ii) // 32, ana) == "io"
    assert _s((io * 32 + ii) % 32, ana) == "ii"
    assert _s((x * 8) % 4) == "0"
    assert _s((x * 8 + y) // 8) == "x + y // 8"
    assert _s((x * 8 + y) % 8) == "y % 8"
    assert _s((x * 6 + 4) // 2) == "x * 3 + 2"
    assert _s((x * 4 + 2) // 8) == "(x * 2 + 1) // 4"
    assert _s((x * 4 + 2) % 8) == "(x * 2 + 1) % 4 * 2"


def test_division_semantics_fold_exactly() -> None:
    seven = E.const(-7)
    assert _s(seven // 2) == "-4"
    assert _s(seven % 2) == "1"
    assert _s(E.truncdiv(seven, 2)) == "-3"
    assert _s(E.truncmod(seven, 2)) == "-1"
    assert _s(E.floordiv(seven, 0)) == "-7 // 0"  # never folded
    assert _s(E.truncdiv(x, 4)) == "truncdiv(x, 4)"  # x may be negative
    assert _s(E.truncdiv(x, 4), _ana(x=(0, 100))) == "x // 4"


def test_min_max_and_comparisons_decided_by_bounds() -> None:
    ana = _ana(i=(0, 32), io=(0, 4), ii=(0, 32))
    assert _s(E.min_(i, 40), ana) == "i"
    assert _s(E.max_(i, 40), ana) == "40"
    assert _s(E.min_(x + 1, x + 3)) == "x + 1"
    assert _s(E.min_(i, n), ana) == "min(i, n)"
    assert _s(i < 32, ana) == "True"
    assert _s(i >= 32, ana) == "False"
    assert _s(io * 32 + ii < 128, ana) == "True"
    assert _s(io * 32 + ii < 100, ana) == "io * 32 + ii < 100"
    assert _s(96 + ii < 100, ana) == "ii < 4"
    assert _s(x * 4 < 10) == "x < 3"
    assert _s(E.eq(x * 4, 10)) == "False"
    assert _s(E.eq(i, i)) == "True"


def test_select_logic_and_likely() -> None:
    ana = _ana(i=(0, 32))
    assert _s(E.select(i < 40, x, y), ana) == "x"
    assert _s(E.select(i < n, x, x), ana) == "x"
    likely = E.call(E.Intrinsic.LIKELY, i + 0 < n, dtype="bool")
    assert _s(likely, ana) == "likely(i < n)"
    assert _s(E.call(E.Intrinsic.LIKELY, i < 100, dtype="bool"), ana) == "True"
    assert _s(E.logical_and(i < n, i < 100), ana) == "i < n"
    assert _s(E.logical_or(x < 3, x < 5)) == "x < 5"
    assert _s(E.logical_and(x < 3, x > 5)) == "False"
    assert _s(E.logical_not(x < 3)) == "x >= 3"


def test_float_folding_only_exact_ops() -> None:
    a, b = E.const(0.1, "float32"), E.const(0.2, "float32")
    folded = Analyzer().simplify(a + b)
    assert isinstance(folded, E.FloatImm)
    assert folded.value == float(np.float32(0.1) + np.float32(0.2))
    assert isinstance(Analyzer().simplify(E.const(1.0, "float32") / 3.0), E.FloatImm)
    exp = E.call(E.Intrinsic.EXP, E.const(1.0, "float32"))
    assert Analyzer().simplify(exp) is exp
    f = E.Var("f", "float32")
    assert _s(f * 1.0) == "f"
    assert _s(f * 0.0) == "f * 0.0"  # NaN and infinities: not zero
    assert _s((f + 1.0) - 1.0) == "f + 1.0 - 1.0"  # float sums are not reassociated


def test_int64_and_casts_keep_dtypes() -> None:
    a = E.Var("a", "int64")
    s = Analyzer().simplify(a * 4 + a * 4 - a)
    assert s.dtype == "int64" and repr(s) == "a * int64(7)"
    assert _s(E.cast("int64", E.const(3))) == "int64(3)"
    assert _s(E.cast("int8", E.const(300))) == "int8(44)"


def test_vector_index_simplification() -> None:
    ramp = E.Ramp("int32x8", E.const(0), E.const(1), 8)
    idx = ramp + E.Broadcast("int32x8", i * 8, 8)
    assert _s(idx) == "ramp(i * 8, 1, 8)"
    div = E.BinOp(
        "int32x8", E.BinaryOp.FLOORDIV, _simpl(idx), E.Broadcast("int32x8", E.const(8), 8)
    )
    assert _s(div) == "broadcast(i, 8)"


def _simpl(e: E.PrimExpr) -> E.PrimExpr:
    return Analyzer().simplify(e)


def test_unchanged_expression_is_the_same_object() -> None:
    e = io * 32 + ii < n
    assert Analyzer().simplify(e) is e
    e2 = E.min_(i, n) + 1
    assert Analyzer().simplify(e2) is e2


# -- binding, constraints and proofs --------------------------------------------------------
def test_bind_expression_substitutes() -> None:
    ana = Analyzer()
    ana.bind(x, y * 2 + 1)
    assert _s(x - y * 2, ana) == "1"
    ana.bind(y, 3)
    assert ana.const_int_bound(y) == (3, 3)


def test_bind_symbolic_range_adds_facts() -> None:
    ana = Analyzer()
    ana.bind(i, E.Range(n, E.const(8)))
    assert ana.can_prove(i >= n)
    assert ana.can_prove(i < n + 8)
    assert not ana.can_prove(i < n + 7)
    assert ana.const_int_bound(i - n) == (0, 7)


def test_rebinding_replaces_the_range() -> None:
    ana = Analyzer()
    ana.bind(i, E.Range(n, E.const(8)))
    ana.bind(i, E.Range(E.const(0), E.const(4)))
    assert ana.const_int_bound(i) == (0, 3)
    assert not ana.can_prove(i >= n)


def test_constraint_scopes_facts() -> None:
    ana = _ana(io=(0, 4), ii=(0, 32))
    cond = io * 32 + ii < 100
    assert not ana.can_prove(cond)
    with ana.constraint(E.call(E.Intrinsic.LIKELY, cond, dtype="bool")):
        assert ana.can_prove(cond)
        assert ana.can_prove(io * 32 + ii <= 120)
        assert not ana.can_prove(io * 32 + ii < 99)
        assert _s(E.select(cond, x, y), ana) == "x"
    assert not ana.can_prove(cond)
    with ana.constraint(E.logical_and(x < n, E.Var("p", "bool"))):
        assert ana.can_prove(x < n)
        assert ana.can_prove(x - n < 0)
    with ana.constraint(E.logical_not(x < 5)):
        assert ana.const_int_bound(x)[0] == 5


def test_scope_restores_bindings() -> None:
    ana = Analyzer()
    with ana.scope():
        ana.bind(x, E.Range(E.const(0), E.const(4)))
        assert ana.can_prove(x < 4)
    assert not ana.can_prove(x < 4)


def test_can_prove_is_sound_when_unsure() -> None:
    ana = Analyzer()
    assert not ana.can_prove(x < n)
    assert not ana.can_prove(x * x >= 0)  # true, but beyond interval reasoning: says False
    assert ana.can_prove(E.const(True))
    assert ana.can_prove_equal((x // 4) * 4 + x % 4, x)
    assert not ana.can_prove_equal(x // 4 * 4, x)
    f = E.Var("f", "float32")
    assert ana.can_prove_equal(f * 1.0, f)


def test_bind_rejects_non_variables() -> None:
    with pytest.raises(ArgumentError, match="expects a Var"):
        Analyzer().bind(x + 1, E.Range(E.const(0), E.const(4)))  # type: ignore[arg-type]


def test_same_is_structural() -> None:
    assert same(x * 4 + 1, x * 4 + 1)
    assert not same(x * 4 + 1, y * 4 + 1)
    assert not same(E.Var("x") + 1, x + 1)  # variables compare by identity


# -- const_int_bound ---------------------------------------------------------------------
def test_const_int_bound_cases() -> None:
    ana = _ana(i=(0, 32), j=(-4, 8))
    assert ana.const_int_bound(i * 4 + j) == (-4, 127)
    assert ana.const_int_bound(i // 8) == (0, 3)
    assert ana.const_int_bound(j % 3) == (0, 2)
    assert ana.const_int_bound(E.truncmod(j, 3)) == (-2, 2)
    assert ana.const_int_bound(E.min_(i, j)) == (-4, 3)
    assert ana.const_int_bound(i - i) == (0, 0)  # simplified first
    assert ana.const_int_bound(i < 40) == (1, 1)
    assert ana.const_int_bound(x) == (-math.inf, math.inf)
    assert ana.const_int_bound(x % 8) == (0, 7)
    assert ana.const_int_bound(x // n) == (-math.inf, math.inf)
    assert const_int_bound(E.Var("u", "uint8") + 0) == (0, 255)
    assert const_int_bound(E.Var("b", "int8") * 4) == (-128, 127)  # may wrap
    let = E.Let("int32", y, i + 1, y * 2)
    assert ana.const_int_bound(let) == (2, 64)


def test_const_int_bound_uses_symbolic_ranges() -> None:
    ana = Analyzer()
    ana.bind(n, E.Range(E.const(1), E.const(10)))
    ana.bind(i, E.Range(E.const(0), n))
    assert ana.const_int_bound(i) == (0, 9)
    assert ana.const_int_bound(i // n) == (0, 0)  # i < n is a fact of the range


# -- int_set -------------------------------------------------------------------------------
def test_int_set_split_index() -> None:
    ana = _ana(io=(0, 4))
    s = ana.int_set(io * 32 + ii, {ii: IntSet.interval(0, 31)})
    assert (repr(s.min), repr(s.max)) == ("io * 32", "io * 32 + 31")
    assert repr(s.extent(ana)) == "32"
    s = ana.int_set(E.min_(io * 32 + ii, 99), {ii: IntSet.interval(0, 31)})
    assert (repr(s.min), repr(s.max)) == ("io * 32", "min(io * 32 + 31, 99)")
    s = ana.int_set((io * 32 + ii) // 8, {ii: IntSet.interval(0, 31)})
    assert (repr(s.min), repr(s.max)) == ("io * 4", "io * 4 + 3")


def test_int_set_operations() -> None:
    ana = Analyzer()
    dom = {i: IntSet.from_range(E.Range(E.const(0), E.const(16)))}
    assert repr(ana.int_set(i % 4, dom)) == "IntSet[0, 3]"
    assert repr(ana.int_set((x * 16 + i) % 16, dom)) == "IntSet[0, 15]"
    assert repr(ana.int_set(x * 4 - i, dom)) == "IntSet[x * 4 - 15, x * 4]"
    assert repr(ana.int_set(y, dom)) == "IntSet[y, y]"  # not relaxed: a point
    assert repr(ana.int_set(E.select(x < 0, i, i + 100), dom)) == "IntSet[0, 115]"
    everything = ana.int_set(i * x, dom)
    assert everything.is_everything() and not everything.has_upper_bound()
    ana.bind(n, E.Range(E.const(1), E.const(64)))
    assert repr(ana.int_set(i // n, dom)) == "IntSet[0, 15 // n]"
    assert repr(ana.int_set(i * n, dom)) == "IntSet[0, n * 15]"


def test_int_set_union_intersect_extent() -> None:
    ana = Analyzer()
    a = IntSet.interval(x * 4, x * 4 + 3)
    b = IntSet.interval(x * 4 + 2, x * 4 + 9)
    u = a.union(b, ana)
    assert (repr(u.min), repr(u.max)) == ("x * 4", "x * 4 + 9")
    assert repr(u.extent(ana)) == "10"
    inter = a.intersect(b, ana)
    assert (repr(inter.min), repr(inter.max)) == ("x * 4 + 2", "x * 4 + 3")
    assert IntSet.point(x).is_point()
    assert not IntSet.everything().has_lower_bound()
    assert repr(IntSet.everything().extent()) == "pos_inf"
    assert repr(IntSet.everything().union(a).max) == "pos_inf"
    r = IntSet.from_range(E.Range(n, E.const(8)))
    assert repr(r.extent()) == "8"
