"""A small pattern language for rewrite rules: patterns and results written as expressions.

A rule reads like the identity it applies: ``min_(min_(x, c1), c2)`` rewrites to
``min_(x, min_(c1, c2))``. Wildcards are ordinary variables made by
:func:`wild` (matching any expression, the same one at each occurrence) and
:func:`wild_const` (matching a constant). Matching ignores the dtypes of
wildcards, so one rule serves int32 and int64 alike; a result template is
rebuilt around the matched parts, its literal constants taking the dtype of
their operands. Commutative operators match both operand orders. A rule may
instead be a Python function of the expression and the analyzer, for the
rewrites that need bounds or the linear form.
"""

from __future__ import annotations

import builtins
from collections.abc import Callable, Hashable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ember.tir import dtype as dt
from ember.tir import expr as E
from ember.tir.expr import BinaryOp, CompareOp

if TYPE_CHECKING:
    from ember.tir.arith.analyzer import Analyzer

_WILD: dict[int, str] = {}  # id(var) -> "any" | "const"
_KEEP: list[E.Var] = []  # wildcards live as long as the module

COMMUTATIVE = frozenset(
    {BinaryOp.ADD, BinaryOp.MUL, BinaryOp.MIN, BinaryOp.MAX, BinaryOp.AND, BinaryOp.OR}
)


def _make(names: str, dtype: str, kind: str) -> tuple[E.Var, ...]:
    out = []
    for name in names.split():
        v = E.Var(name, dtype)
        _WILD[id(v)] = kind
        _KEEP.append(v)
        out.append(v)
    return tuple(out)


def wild(names: str, dtype: str = "int32") -> tuple[E.Var, ...]:
    """Wildcards matching any expression; ``dtype`` only matters for building patterns."""
    return _make(names, dtype, "any")


def wild_const(names: str, dtype: str = "int32") -> tuple[E.Var, ...]:
    """Wildcards matching an integer or float constant."""
    return _make(names, dtype, "const")


def root_of(e: object) -> Hashable:
    """What a rule is indexed by: the operator of a BinOp/Compare/Call, else the node class."""
    if isinstance(e, (E.BinOp, E.Compare, E.Call)):
        return e.op
    return type(e)


class Match:
    """The bindings of a successful match, plus the analyzer for conditions."""

    def __init__(self, expr: E.PrimExpr, binds: dict[int, E.PrimExpr], ana: Analyzer) -> None:
        self.expr, self.binds, self.ana = expr, binds, ana

    def __getitem__(self, w: E.Var) -> E.PrimExpr:
        return self.binds[id(w)]

    def int(self, w: E.Var) -> int:
        v = self.binds[id(w)]
        assert isinstance(v, E.IntImm)
        return v.value

    def value(self, w: E.Var) -> builtins.int | float:  # ``int`` here is the method
        v = self.binds[id(w)]
        assert isinstance(v, (E.IntImm, E.FloatImm))
        return v.value


def match(pat: E.PrimExpr, e: E.PrimExpr, binds: dict[int, E.PrimExpr], ana: Analyzer) -> bool:
    """Match ``e`` against ``pat``, filling ``binds`` with the first consistent bindings."""
    for found in matches(pat, e, binds, ana):
        binds.clear()
        binds.update(found)
        return True
    return False


def matches(
    pat: E.PrimExpr, e: E.PrimExpr, binds: dict[int, E.PrimExpr], ana: Analyzer
) -> Iterator[dict[int, E.PrimExpr]]:
    """Every way ``e`` matches ``pat`` extending ``binds`` (commutative operands both ways)."""
    kind = _WILD.get(id(pat))
    if kind is not None:
        if kind == "const" and not isinstance(e, (E.IntImm, E.FloatImm)):
            return
        prev = binds.get(id(pat))
        if prev is None:
            yield {**binds, id(pat): e}
        elif prev is e or ana.keys.key(prev) == ana.keys.key(e):
            yield binds
        return
    if type(pat) is not type(e):
        return
    if isinstance(pat, (E.IntImm, E.FloatImm)):
        if pat.value == e.value:  # type: ignore[attr-defined]
            yield binds
        return
    if isinstance(pat, (E.BinOp, E.Compare, E.Call)) and pat.op is not e.op:  # type: ignore[attr-defined]
        return
    pats, subs = _operands(pat), _operands(e)
    if len(pats) != len(subs):
        return
    yield from _all(pats, subs, binds, ana)
    if _swaps(pat):
        yield from _all(pats, subs[::-1], binds, ana)


def _operands(e: E.PrimExpr) -> tuple[E.PrimExpr, ...]:
    if isinstance(e, (E.BinOp, E.Compare)):
        return (e.a, e.b)
    if isinstance(e, E.Not):
        return (e.a,)
    if isinstance(e, E.Select):
        return (e.cond, e.true_value, e.false_value)
    if isinstance(e, E.Call):
        return e.args
    return ()


def _all(
    pats: tuple[E.PrimExpr, ...],
    subs: tuple[E.PrimExpr, ...],
    binds: dict[int, E.PrimExpr],
    ana: Analyzer,
) -> Iterator[dict[int, E.PrimExpr]]:
    if not pats:
        yield binds
        return
    for b in matches(pats[0], subs[0], binds, ana):
        yield from _all(pats[1:], subs[1:], b, ana)


def _is_literal(t: E.PrimExpr) -> bool:
    return isinstance(t, (E.IntImm, E.FloatImm)) and id(t) not in _WILD


def build(t: E.PrimExpr, binds: dict[int, E.PrimExpr], dtype: str | None) -> E.PrimExpr:
    """Instantiate template ``t``: wildcards become their matches, literals take ``dtype``."""
    if id(t) in _WILD:
        return binds[id(t)]
    if isinstance(t, E.IntImm):
        if t.dtype == "bool" or dtype is None:
            return t
        return (
            E.IntImm(dtype, t.value)
            if not dt.is_float(dtype)
            else E.FloatImm(dtype, float(t.value))
        )
    if isinstance(t, E.FloatImm):
        return t if dtype is None else E.FloatImm(dtype, t.value)
    if isinstance(t, (E.BinOp, E.Compare)):
        hint = "bool" if t.op in (BinaryOp.AND, BinaryOp.OR) else None
        hint = hint or (dtype if isinstance(t, E.BinOp) else None)
        if _is_literal(t.a):
            b = build(t.b, binds, hint)
            a = build(t.a, binds, b.dtype)
        else:
            a = build(t.a, binds, hint)
            b = build(t.b, binds, a.dtype)
        if isinstance(t, E.Compare):
            return E.Compare(dt.with_lanes("bool", dt.lanes_of(a.dtype)), t.op, a, b)
        return E.BinOp(a.dtype, t.op, a, b)
    if isinstance(t, E.Not):
        a = build(t.a, binds, "bool")
        return E.Not(a.dtype, a)
    if isinstance(t, E.Select):
        cond = build(t.cond, binds, "bool")
        tv = build(t.true_value, binds, dtype)
        fv = build(t.false_value, binds, tv.dtype)
        return E.Select(tv.dtype, cond, tv, fv)
    if isinstance(t, E.Call):
        args = tuple(build(a, binds, None) for a in t.args)
        return E.Call(t.dtype if t.op is E.Intrinsic.LIKELY else args[0].dtype, t.op, args)
    raise TypeError(f"cannot build a rule result from {type(t).__name__}")


RuleFn = Callable[[E.PrimExpr, "Analyzer"], "E.PrimExpr | None"]
Where = Callable[[Match], bool]


@dataclass(frozen=True)
class Rule:
    """One rewrite: ``pattern -> result`` (if ``where``), or a function of (expr, analyzer).

    ``result`` is a template expression, or a function of the :class:`Match`
    returning the replacement (None to decline).
    """

    name: str
    root: Hashable
    pattern: E.PrimExpr | None = None
    result: E.PrimExpr | Callable[[Match], E.PrimExpr | None] | None = None
    where: Where | None = None
    fn: RuleFn | None = None
    needs: tuple[Need, ...] = ()  # what each operand must be (:func:`operand_needs`)

    def apply(self, e: E.PrimExpr, ana: Analyzer) -> E.PrimExpr | None:
        if self.fn is not None:
            return self.fn(e, ana)
        assert self.pattern is not None and self.result is not None
        if self.needs and not _operands_may_match(self.needs, self.pattern, e):
            return None
        for binds in matches(self.pattern, e, {}, ana):
            m = Match(e, binds, ana)
            if self.where is not None and not self.where(m):
                continue
            if isinstance(self.result, E.PrimExpr):
                return build(self.result, binds, e.dtype)
            return self.result(m)
        return None


def rule(name: str, pattern: E.PrimExpr, result: Any, where: Where | None = None) -> Rule:
    """A rewrite rule, indexed by its pattern's root so the simplifier tries only rules that can
    match."""
    needs = operand_needs(pattern)
    if all(n is None for n in needs):
        needs = ()  # only wildcards: nothing to check before matching
    return Rule(name, root_of(pattern), pattern, result, where, needs=needs)


# What one operand of a pattern asks of the expression's operand at its place: nothing (a
# wildcard), one of some node classes, or a node class with that operator or value.
Need = tuple[tuple[type, ...], Any] | None


def operand_needs(pattern: E.PrimExpr) -> tuple[Need, ...]:
    """Each operand's :data:`Need`: checked before :func:`matches` runs, because most rules
    tried on a node fail at its operands' kinds (``xf + 0.0`` on every integer sum) and a
    failing match still costs a generator's start."""
    needs: list[Need] = []
    for p in _operands(pattern):
        kind = _WILD.get(id(p))
        if kind == "any":
            needs.append(None)
        elif kind == "const":
            needs.append(((E.IntImm, E.FloatImm), None))
        elif isinstance(p, (E.IntImm, E.FloatImm)):
            needs.append(((type(p),), p.value))
        elif isinstance(p, (E.BinOp, E.Compare, E.Call)):
            needs.append(((type(p),), p.op))
        else:
            needs.append(((type(p),), None))
    return tuple(needs)


def _meets(need: Need, e: E.PrimExpr) -> bool:
    if need is None:
        return True
    classes, detail = need
    if type(e) not in classes:
        return False
    if detail is None:
        return True
    if isinstance(e, (E.IntImm, E.FloatImm)):
        return bool(e.value == detail)
    return getattr(e, "op", None) is detail


def _operands_may_match(needs: tuple[Need, ...], pattern: E.PrimExpr, e: E.PrimExpr) -> bool:
    """Whether ``e``'s operands meet ``needs`` in order (or swapped, for a commutative
    pattern, as :func:`matches` tries them): a necessary condition of a match."""
    subs = _operands(e)
    if len(subs) != len(needs):
        return False
    if len(needs) == 2:  # a BinOp or Compare, nearly every rule: no generators
        (n0, n1), (a, b) = needs, subs
        if _meets(n0, a) and _meets(n1, b):
            return True
        return _swaps(pattern) and _meets(n0, b) and _meets(n1, a)
    return all(_meets(n, x) for n, x in zip(needs, subs))


def _swaps(pattern: E.PrimExpr) -> bool:
    """Whether :func:`matches` also tries ``pattern``'s operands the other way round."""
    return isinstance(pattern, (E.BinOp, E.Compare)) and (
        pattern.op in COMMUTATIVE or pattern.op in (CompareOp.EQ, CompareOp.NE)
    )


def fn_rule(name: str, roots: tuple[Hashable, ...], fn: RuleFn) -> list[Rule]:
    """A function rule registered for each node kind in ``roots``."""
    return [Rule(name, r, fn=fn) for r in roots]
