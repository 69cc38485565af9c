"""Property tests: simplify keeps values, bounds and int sets contain every sampled value."""

from __future__ import annotations

import itertools
import math

from hypothesis import given, settings
from hypothesis import strategies as st

from ember.tir import expr as E
from ember.tir.arith import Analyzer, IntSet
from ember.tir.arith.canonical import canonical_sum
from ember.tir.arith.int_set import is_neg_inf, is_pos_inf
from ember.tir.arith.pattern import _operands_may_match, matches
from ember.tir.arith.rewrite_rules import RULES
from ember.tir.functor import post_order_visit
from tests.nightly import examples
from tests.tir.arith.arith_eval import evaluate

X, Y, Z = E.Var("x"), E.Var("y"), E.Var("z")
VARS = (X, Y, Z)
RANGES = {X: (0, 7), Y: (-3, 5), Z: (0, 31)}

_LEAF = st.one_of(
    st.sampled_from(VARS),
    st.integers(-9, 40).map(lambda v: E.const(v)),
)
_NONZERO = st.integers(-9, 33).filter(lambda v: v != 0).map(lambda v: E.const(v))
_POSITIVE = st.sampled_from([1, 2, 3, 4, 8, 16, 32]).map(lambda v: E.const(v))


def _extend(children: st.SearchStrategy[E.PrimExpr]) -> st.SearchStrategy[E.PrimExpr]:
    pair = st.tuples(children, children)
    return st.one_of(
        pair.map(lambda p: p[0] + p[1]),
        pair.map(lambda p: p[0] - p[1]),
        pair.map(lambda p: p[0] * p[1]),
        st.tuples(children, st.integers(-4, 9)).map(lambda p: p[0] * p[1]),
        st.tuples(children, _NONZERO).map(lambda p: p[0] // p[1]),
        st.tuples(children, _NONZERO).map(lambda p: p[0] % p[1]),
        st.tuples(children, _POSITIVE).map(lambda p: E.truncdiv(p[0], p[1])),
        st.tuples(children, _POSITIVE).map(lambda p: E.truncmod(p[0], p[1])),
        pair.map(lambda p: E.min_(p[0], p[1])),
        pair.map(lambda p: E.max_(p[0], p[1])),
        st.tuples(children, children, children, children).map(
            lambda p: E.select(p[0] < p[1], p[2], p[3])
        ),
    )


INT_EXPRS = st.recursive(_LEAF, _extend, max_leaves=12)

_CMP = st.sampled_from(
    [E.CompareOp.LT, E.CompareOp.LE, E.CompareOp.GT, E.CompareOp.GE, E.CompareOp.EQ, E.CompareOp.NE]
)
_ATOM_BOOL = st.tuples(_CMP, INT_EXPRS, INT_EXPRS).map(lambda p: E.Compare("bool", *p))


def _extend_bool(children: st.SearchStrategy[E.PrimExpr]) -> st.SearchStrategy[E.PrimExpr]:
    pair = st.tuples(children, children)
    return st.one_of(
        pair.map(lambda p: E.logical_and(*p)),
        pair.map(lambda p: E.logical_or(*p)),
        children.map(E.logical_not),
        children.map(lambda c: E.call(E.Intrinsic.LIKELY, c, dtype="bool")),
    )


BOOL_EXPRS = st.recursive(_ATOM_BOOL, _extend_bool, max_leaves=4)


def _analyzer() -> Analyzer:
    ana = Analyzer()
    for v, (lo, hi) in RANGES.items():
        ana.bind(v, E.Range(E.const(lo), E.const(hi - lo + 1)))
    return ana


def _samples(n_per_var: int = 4) -> list[dict[E.Var, int]]:
    picks = []
    for v in VARS:
        lo, hi = RANGES[v]
        mid = (lo + hi) // 2
        picks.append(sorted({lo, hi, mid, lo + 1, hi - 1})[: max(n_per_var, 3)])
    return [dict(zip(VARS, combo)) for combo in itertools.product(*picks)]


SAMPLES = _samples()


def _safe(e: E.PrimExpr, env: dict[E.Var, int]) -> int | None:
    try:
        return evaluate(e, env)
    except ZeroDivisionError:
        return None


@settings(max_examples=examples(500), deadline=None)
@given(INT_EXPRS)
def test_simplify_preserves_integer_values(e: E.PrimExpr) -> None:
    s = _analyzer().simplify(e)
    assert s.dtype == e.dtype
    for env in SAMPLES:
        want = _safe(e, env)
        if want is not None:
            assert evaluate(s, env) == want, (e, s, env)


@settings(max_examples=examples(300), deadline=None)
@given(BOOL_EXPRS)
def test_simplify_preserves_conditions(c: E.PrimExpr) -> None:
    ana = _analyzer()
    s = ana.simplify(c)
    proved = ana.can_prove(c)
    for env in SAMPLES:
        want = _safe(c, env)
        if want is not None:
            assert evaluate(s, env) == want, (c, s, env)
            assert not proved or want == 1, (c, env)


@settings(max_examples=examples(500), deadline=None)
@given(INT_EXPRS)
def test_const_int_bound_contains_every_value(e: E.PrimExpr) -> None:
    lo, hi = _analyzer().const_int_bound(e)
    for env in SAMPLES:
        v = _safe(e, env)
        if v is not None:
            assert lo <= v <= hi, (e, lo, hi, env)
    assert isinstance(lo, int) or lo == -math.inf
    assert isinstance(hi, int) or hi == math.inf


@settings(max_examples=examples(300), deadline=None)
@given(INT_EXPRS, st.sampled_from([(X,), (Z,), (X, Z), (Y, Z)]))
def test_int_set_contains_every_value(e: E.PrimExpr, relaxed: tuple[E.Var, ...]) -> None:
    ana = _analyzer()
    dom = {v: IntSet.interval(RANGES[v][0], RANGES[v][1]) for v in relaxed}
    s = ana.int_set(e, dom)
    for env in SAMPLES:
        v = _safe(e, env)
        if v is None:
            continue
        # the bounds are expressions in the variables that were not relaxed
        point_env = {k: x for k, x in env.items() if k not in relaxed}
        if not is_neg_inf(s.min):
            lo = _safe(s.min, {**env, **point_env})
            assert lo is None or lo <= v, (e, s, env)
        if not is_pos_inf(s.max):
            hi = _safe(s.max, {**env, **point_env})
            assert hi is None or v <= hi, (e, s, env)
        for r in relaxed:
            assert not _mentions(s.min, r) and not _mentions(s.max, r), s


def _mentions(e: E.PrimExpr, v: E.Var) -> bool:
    from ember.tir.functor import uses_var

    return uses_var(e, lambda x: x is v)


@settings(max_examples=examples(200), deadline=None)
@given(INT_EXPRS)
def test_simplify_is_idempotent_and_keeps_identity(e: E.PrimExpr) -> None:
    ana = _analyzer()
    s = ana.simplify(e)
    again = ana.simplify(s)
    for env in SAMPLES:
        if _safe(e, env) is not None:
            assert evaluate(again, env) == evaluate(s, env)
    assert ana.simplify(again) is again or repr(ana.simplify(again)) == repr(again)


_FLOAT_LEAF = st.one_of(
    st.sampled_from([E.Var("f", "float32"), E.Var("g", "float32")]),
    st.sampled_from([0.0, 1.0, -2.5]).map(lambda v: E.FloatImm("float32", v)),
)
FLOAT_EXPRS = st.recursive(
    _FLOAT_LEAF,
    lambda c: st.tuples(st.sampled_from(["+", "-", "*", "/"]), c, c).map(
        lambda p: {"+": p[1] + p[2], "-": p[1] - p[2], "*": p[1] * p[2], "/": p[1] / p[2]}[p[0]]
    ),
    max_leaves=5,
)


@settings(max_examples=examples(300), deadline=None)
@given(st.one_of(INT_EXPRS, BOOL_EXPRS, FLOAT_EXPRS))
def test_operand_precheck_never_refuses_a_match(e: E.PrimExpr) -> None:
    """``Rule.apply`` skips a pattern whose operand kinds ``e``'s operands do not meet; that
    must be a necessary condition of :func:`matches`, never a refusal of a real match."""
    ana = _analyzer()
    nodes: list[E.PrimExpr] = []  # every subexpression: the simplifier tries the rules at each
    post_order_visit(e, lambda n: nodes.append(n) if isinstance(n, E.PrimExpr) else None)
    for n in nodes:
        for r in RULES:
            if r.pattern is None or not r.needs:
                continue
            if next(matches(r.pattern, n, {}, ana), None) is not None:
                assert _operands_may_match(r.needs, r.pattern, n), (r.name, n)


def test_canonical_sum_is_remembered_by_structure_and_none_when_canonical() -> None:
    """Its result depends on the expression's structure alone, so a structurally equal sum
    (a new object) gets the remembered result; a sum already in linear form gives None."""
    ana = _analyzer()
    first = canonical_sum((X * 4 + Z) - X * 4, ana)
    assert first is not None and repr(first) == repr(Z)
    again = canonical_sum((X * 4 + Z) - X * 4, ana)
    assert again is first
    canonical = ana.simplify(X * 4 + Z)
    assert canonical_sum(canonical, ana) is None
