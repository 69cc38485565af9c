"""The simplifier's rule table: every rewrite it knows, by name, in the order it tries them.

A rule is either a pattern written as an expression over wildcards (see
:mod:`ember.tir.arith.pattern`) or a named function that reasons with the
linear form and bounds (:mod:`ember.tir.arith.canonical`,
:mod:`ember.tir.arith.vector_rules`). The simplifier folds constants first,
then tries the rules indexed by the node's operator in table order and
re-simplifies whatever a rule returns. Every rule must preserve the value
(for integers, assuming index arithmetic does not overflow) and the dtype;
each is tested alone by name with :func:`rule_named`.
"""

from __future__ import annotations

from collections.abc import Hashable

from ember.tir import dtype as dt
from ember.tir import expr as E
from ember.tir.arith import canonical as C
from ember.tir.arith import vector_rules as V
from ember.tir.arith.pattern import Match, Rule, fn_rule, rule, wild, wild_const

B, CMP, I = E.BinaryOp, E.CompareOp, E.Intrinsic
x, y = wild("x y")
c1, c2 = wild_const("c1 c2")
p, q = wild("p q", "bool")
(cb,) = wild_const("cb", "bool")
(xf,) = wild("xf", "float32")
min_, max_, select, not_ = E.min_, E.max_, E.select, E.logical_not
TRUE, FALSE = E.const(True), E.const(False)


def _int(m: Match) -> bool:
    return dt.is_int(m.expr.dtype) or dt.is_int(getattr(m.expr, "a", m.expr).dtype)


def _float(m: Match) -> bool:
    return dt.is_float(m.expr.dtype)


def _pos(*ws: E.Var):  # type: ignore[no-untyped-def]
    return lambda m: _int(m) and all(isinstance(m[w], E.IntImm) and m.int(w) > 0 for w in ws)


def _int_operands(m: Match) -> bool:
    a = m.expr.a if isinstance(m.expr, E.Not) else m.expr  # type: ignore[attr-defined]
    return isinstance(a, E.Compare) and dt.is_int(a.a.dtype)


def _fbin(op: E.BinaryOp, a: E.PrimExpr, b: E.PrimExpr) -> E.PrimExpr:
    return E.BinOp(a.dtype, op, a, b)


def _f(v: float) -> E.PrimExpr:
    return E.FloatImm("float32", v)


PATTERN_RULES: list[Rule] = [
    # -- min / max ---------------------------------------------------------------------
    rule("min(x, x) = x", min_(x, x), x),
    rule("max(x, x) = x", max_(x, x), x),
    rule("min(min(x, c1), c2) = min(x, min(c1, c2))", min_(min_(x, c1), c2), min_(x, min_(c1, c2))),
    rule("max(max(x, c1), c2) = max(x, max(c1, c2))", max_(max_(x, c1), c2), max_(x, max_(c1, c2))),
    rule("min(min(x, y), x) = min(x, y)", min_(min_(x, y), x), min_(x, y)),
    rule("max(max(x, y), x) = max(x, y)", max_(max_(x, y), x), max_(x, y)),
    rule("min(max(x, y), x) = x", min_(max_(x, y), x), x),
    rule("max(min(x, y), x) = x", max_(min_(x, y), x), x),
    # -- select ------------------------------------------------------------------------
    rule("select(true, x, y) = x", select(TRUE, x, y), x),
    rule("select(false, x, y) = y", select(FALSE, x, y), y),
    rule("select(p, x, x) = x", select(p, x, x), x),
    rule("select(not p, x, y) = select(p, y, x)", select(not_(p), x, y), select(p, y, x)),
    # -- logic -------------------------------------------------------------------------
    rule("p and true = p", p & TRUE, p),
    rule("p and false = false", p & FALSE, FALSE),
    rule("p or true = true", p | TRUE, TRUE),
    rule("p or false = p", p | FALSE, p),
    rule("p and p = p", p & p, p),
    rule("p or p = p", p | p, p),
    rule("p and not p = false", p & not_(p), FALSE),
    rule("p or not p = true", p | not_(p), TRUE),
    rule("not not p = p", not_(not_(p)), p),
    rule("not (x < y) = x >= y", not_(x < y), x >= y, _int_operands),
    rule("not (x <= y) = x > y", not_(x <= y), x > y, _int_operands),
    rule("not (x > y) = x <= y", not_(x > y), x <= y, _int_operands),
    rule("not (x >= y) = x < y", not_(x >= y), x < y, _int_operands),
    rule("not (x == y) = x != y", not_(E.eq(x, y)), E.ne(x, y), _int_operands),
    rule("not (x != y) = x == y", not_(E.ne(x, y)), E.eq(x, y), _int_operands),
    rule("likely(cb) = cb", E.call(I.LIKELY, cb, dtype="bool"), cb),
    # -- division and modulo -------------------------------------------------------------
    rule("x // 1 = x", x // 1, x, _int),
    rule("x % 1 = 0", x % 1, E.const(0), _int),
    rule("(x // c1) // c2 = x // (c1 * c2)", (x // c1) // c2, x // (c1 * c2), _pos(c1, c2)),
    rule(
        "(x % c1) % c2 = x % c2 if c2 divides c1",
        (x % c1) % c2,
        x % c2,
        lambda m: _pos(c1, c2)(m) and m.int(c1) % m.int(c2) == 0,
    ),
    rule(
        "truncdiv(x, c1) = x // c1 if x >= 0",
        E.truncdiv(x, c1),
        x // c1,
        lambda m: _pos(c1)(m) and m.ana.bound(m[x])[0] >= 0,
    ),
    rule(
        "truncmod(x, c1) = x % c1 if x >= 0",
        E.truncmod(x, c1),
        x % c1,
        lambda m: _pos(c1)(m) and m.ana.bound(m[x])[0] >= 0,
    ),
    # -- floats: only identities that are exact ------------------------------------------
    rule("xf * 1.0 = xf", _fbin(B.MUL, xf, _f(1.0)), xf, _float),
    rule("xf / 1.0 = xf", _fbin(B.DIV, xf, _f(1.0)), xf, _float),
    rule("xf - 0.0 = xf", _fbin(B.SUB, xf, _f(0.0)), xf, _float),
    rule("xf + 0.0 = xf (up to the sign of zero)", _fbin(B.ADD, xf, _f(0.0)), xf, _float),
]

_ARITH = (B.ADD, B.SUB, B.MUL)
_DIVMOD = (B.FLOORDIV, B.FLOORMOD, B.TRUNCDIV, B.TRUNCMOD)
_ALL_BIN = tuple(B)

FUNCTION_RULES: list[Rule] = [
    *fn_rule("vector: broadcast op broadcast", _ALL_BIN + tuple(CMP), V.broadcast_op_broadcast),
    *fn_rule("vector: ramp +- broadcast", (B.ADD, B.SUB), V.ramp_add_sub),
    *fn_rule("vector: ramp * broadcast", (B.MUL,), V.ramp_mul),
    *fn_rule("vector: ramp with stride 0", (E.Ramp,), V.ramp_zero_stride),
    *fn_rule("vector: ramp // c within one period", (B.FLOORDIV, B.FLOORMOD), V.ramp_divmod),
    *fn_rule("canonical linear sum", _ARITH, C.canonical_sum),
    *fn_rule("x // c: move out divisible terms", (B.FLOORDIV,), C.divide_by_const),
    *fn_rule("x % c: drop divisible terms", (B.FLOORMOD,), C.mod_by_const),
    *fn_rule("x // n = 0, x % n = x when 0 <= x < n", _DIVMOD, C.divmod_by_bounds),
    *fn_rule("min/max decided by bounds", (B.MIN, B.MAX), C.min_max_by_bounds),
    *fn_rule("min/max chains drop bounded operands", (B.MIN, B.MAX), C.min_max_chain),
    *fn_rule("comparison decided by bounds, else normalized", tuple(CMP), C.compare_by_bounds),
    *fn_rule("and/or by implication", (B.AND, B.OR), C.and_or_by_implication),
]

RULES: list[Rule] = PATTERN_RULES + FUNCTION_RULES

RULES_BY_ROOT: dict[Hashable, list[Rule]] = {}
for _r in RULES:
    RULES_BY_ROOT.setdefault(_r.root, []).append(_r)


def rule_named(name: str) -> list[Rule]:
    """The rule (one entry per node kind it applies to) with this name."""
    found = [r for r in RULES if r.name == name]
    if not found:
        raise KeyError(f"no simplifier rule named {name!r}")
    return found
