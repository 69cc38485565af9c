"""Each simplifier rule alone, by name, on one example; and every rule has an example."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from ember.tir import expr as E
from ember.tir.arith import Analyzer
from ember.tir.arith.pattern import root_of
from ember.tir.arith.rewrite_rules import RULES, rule_named

i, j, n = E.Var("i"), E.Var("j"), E.Var("n")
p, q = E.Var("p", "bool"), E.Var("q", "bool")
f = E.Var("f", "float32")
T, F = E.const(True), E.const(False)
likely = lambda c: E.call(E.Intrinsic.LIKELY, c, dtype="bool")  # noqa: E731


def _ramp(base: E.PrimExpr, stride: int, lanes: int = 4) -> E.PrimExpr:
    return E.Ramp(f"int32x{lanes}", base, E.const(stride), lanes)


def _bc(value: E.PrimExpr, lanes: int = 4) -> E.PrimExpr:
    return E.Broadcast(f"{value.dtype}x{lanes}", value, lanes)


def _fop(op: E.BinaryOp, a: E.PrimExpr, b: float) -> E.PrimExpr:
    return E.BinOp("float32", op, a, E.FloatImm("float32", b))


B = E.BinaryOp
# rule name -> (input, expected text after simplifying the rule's output)
EXAMPLES: dict[str, tuple[Callable[[], E.PrimExpr], str]] = {
    "min(x, x) = x": (lambda: E.min_(i + n, i + n), "i + n"),
    "max(x, x) = x": (lambda: E.max_(n, n), "n"),
    "min(min(x, c1), c2) = min(x, min(c1, c2))": (lambda: E.min_(E.min_(n, 7), 3), "min(n, 3)"),
    "max(max(x, c1), c2) = max(x, max(c1, c2))": (lambda: E.max_(E.max_(n, 7), 3), "max(n, 7)"),
    "min(min(x, y), x) = min(x, y)": (lambda: E.min_(E.min_(n, i), n), "min(n, i)"),
    "max(max(x, y), x) = max(x, y)": (lambda: E.max_(n, E.max_(i, n)), "max(n, i)"),
    "min(max(x, y), x) = x": (lambda: E.min_(E.max_(n, i), n), "n"),
    "max(min(x, y), x) = x": (lambda: E.max_(E.min_(n, i), n), "n"),
    "select(true, x, y) = x": (lambda: E.Select("int32", T, i, j), "i"),
    "select(false, x, y) = y": (lambda: E.Select("int32", F, i, j), "j"),
    "select(p, x, x) = x": (lambda: E.select(p, n, n), "n"),
    "select(not p, x, y) = select(p, y, x)": (
        lambda: E.select(E.logical_not(p), i, j),
        "select(p, j, i)",
    ),
    "p and true = p": (lambda: E.BinOp("bool", B.AND, p, T), "p"),
    "p and false = false": (lambda: E.BinOp("bool", B.AND, F, p), "False"),
    "p or true = true": (lambda: E.BinOp("bool", B.OR, p, T), "True"),
    "p or false = p": (lambda: E.BinOp("bool", B.OR, p, F), "p"),
    "p and p = p": (lambda: E.logical_and(p, p), "p"),
    "p or p = p": (lambda: E.logical_or(q, q), "q"),
    "p and not p = false": (lambda: E.logical_and(p, E.logical_not(p)), "False"),
    "p or not p = true": (lambda: E.logical_or(E.logical_not(p), p), "True"),
    "not not p = p": (lambda: E.logical_not(E.logical_not(p)), "p"),
    "not (x < y) = x >= y": (lambda: E.logical_not(n < i), "n >= i"),
    "not (x <= y) = x > y": (lambda: E.logical_not(n <= i), "n > i"),
    "not (x > y) = x <= y": (lambda: E.logical_not(n > i), "n <= i"),
    "not (x >= y) = x < y": (lambda: E.logical_not(n >= i), "n < i"),
    "not (x == y) = x != y": (lambda: E.logical_not(E.eq(n, i)), "n != i"),
    "not (x != y) = x == y": (lambda: E.logical_not(E.ne(n, i)), "n == i"),
    "likely(cb) = cb": (lambda: likely(T), "True"),
    "x // 1 = x": (lambda: n // 1, "n"),
    "x % 1 = 0": (lambda: n % 1, "0"),
    "(x // c1) // c2 = x // (c1 * c2)": (lambda: (n // 4) // 8, "n // 32"),
    "(x % c1) % c2 = x % c2 if c2 divides c1": (lambda: (n % 32) % 8, "n % 8"),
    "truncdiv(x, c1) = x // c1 if x >= 0": (lambda: E.truncdiv(i + n * 0 + 40, 8), "i // 8 + 5"),
    "truncmod(x, c1) = x % c1 if x >= 0": (lambda: E.truncmod(i * 3, 8), "i * 3 % 8"),
    "xf * 1.0 = xf": (lambda: _fop(B.MUL, f, 1.0), "f"),
    "xf / 1.0 = xf": (lambda: _fop(B.DIV, f, 1.0), "f"),
    "xf - 0.0 = xf": (lambda: _fop(B.SUB, f, 0.0), "f"),
    "xf + 0.0 = xf (up to the sign of zero)": (lambda: _fop(B.ADD, f, 0.0), "f"),
    "vector: broadcast op broadcast": (lambda: _bc(i) + _bc(n), "broadcast(i + n, 4)"),
    "vector: ramp +- broadcast": (lambda: _ramp(i * 4, 1) + _bc(n), "ramp(i * 4 + n, 1, 4)"),
    "vector: ramp * broadcast": (lambda: _ramp(i, 1) * _bc(E.const(8)), "ramp(i * 8, 8, 4)"),
    "vector: ramp with stride 0": (lambda: _ramp(n, 0), "broadcast(n, 4)"),
    "vector: ramp // c within one period": (
        lambda: E.BinOp("int32x4", B.FLOORDIV, _ramp(n * 8, 1), _bc(E.const(8))),
        "broadcast(n, 4)",
    ),
    "canonical linear sum": (lambda: (i * 32 + j) - i * 32 + (n * 4 + n * 4), "j + n * 8"),
    "x // c: move out divisible terms": (lambda: (n * 8 + i) // 8, "n + i // 8"),
    "x % c: drop divisible terms": (lambda: (n * 8 + j) % 8, "j"),
    "x // n = 0, x % n = x when 0 <= x < n": (lambda: j // (j + n * n + 1), "0"),
    "min/max decided by bounds": (lambda: E.min_(n + 1, n + 3), "n + 1"),
    "min/max chains drop bounded operands": (
        lambda: E.min_(E.min_(E.const(32), E.max_(0, n - i)), n - i),
        "min(32, n - i)",
    ),
    "comparison decided by bounds, else normalized": (lambda: 96 + i < 100, "i < 4"),
    "and/or by implication": (lambda: E.logical_and(n < 4, n < 8), "n < 4"),
}


def _analyzer() -> Analyzer:
    ana = Analyzer()
    ana.bind(i, E.Range(E.const(0), E.const(32)))
    ana.bind(j, E.Range(E.const(0), E.const(8)))
    ana.bind(n, E.Range(E.const(0), E.const(1000)))
    return ana


def test_every_rule_has_an_example() -> None:
    names = {r.name for r in RULES}
    assert sorted(names - set(EXAMPLES)) == []
    assert sorted(set(EXAMPLES) - names) == []


@pytest.mark.parametrize("name", list(EXAMPLES))
def test_rule_alone(name: str) -> None:
    build, expected = EXAMPLES[name]
    e = build()
    ana = _analyzer()
    rules = [r for r in rule_named(name) if r.root == root_of(e)]
    assert rules, f"rule {name!r} does not apply to {type(e).__name__}"
    out = rules[0].apply(e, ana)
    assert out is not None, f"rule {name!r} did not fire on {e!r}"
    assert out.dtype == e.dtype
    assert repr(ana.simplify(out)) == expected
    assert repr(ana.simplify(e)) == expected


def test_rule_named_unknown() -> None:
    with pytest.raises(KeyError, match="no simplifier rule"):
        rule_named("x * 0 = 1")


def test_rules_decline_when_conditions_fail() -> None:
    ana = _analyzer()
    m = E.Var("m")  # unbounded: may be negative
    (trunc,) = rule_named("truncdiv(x, c1) = x // c1 if x >= 0")
    assert trunc.apply(E.truncdiv(m, 8), ana) is None
    (mod,) = rule_named("(x % c1) % c2 = x % c2 if c2 divides c1")
    assert mod.apply((n % 12) % 8, ana) is None
    period = rule_named("vector: ramp // c within one period")[0]
    crossing = E.BinOp("int32x4", B.FLOORDIV, _ramp(n * 8 + 6, 1), _bc(E.const(8)))
    assert period.apply(crossing, ana) is None


@pytest.mark.parametrize("known", [True, False])
def test_vector_select_on_broadcast_constant_folds(known: bool) -> None:
    """A vectorized select keeps its scalar condition in a broadcast (an unrolled select
    chain after vectorization); it folds to the chosen branch like a scalar one."""
    x = E.Var("x", "float32x4")
    y = E.Var("y", "float32x4")
    cond = E.Broadcast("boolx4", E.const(known, "bool"), 4)
    got = Analyzer().simplify(E.Select("float32x4", cond, x, y))
    assert got is (x if known else y)
