"""Integer sets as symbolic intervals: the region an index covers while some loops run.

Bound inference asks "which elements of ``A`` does ``A[io*32 + ii]`` touch while
``ii`` runs over ``[0, 31]``?"; the answer is the interval
``[io*32, io*32 + 31]``, symbolic in the loops that stay fixed. :func:`int_set`
evaluates an expression in interval arithmetic over a ``dom_map`` that gives
the set of each relaxed variable; every other variable is a point. Results
are sound (they contain every value) but may be conservative, and their
bounds are simplified. A side with no bound is the sentinel ``neg_inf`` /
``pos_inf`` variable of the expression's dtype; check :meth:`IntSet.is_everything`
or :meth:`IntSet.has_upper_bound` before doing arithmetic with a bound.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

from ember.tir import expr as E
from ember.tir.arith.const_int_bound import NEG_INF, POS_INF, dtype_bound
from ember.tir.dtype import is_int
from ember.tir.functor import uses_var

if TYPE_CHECKING:
    from ember.tir.arith.analyzer import Analyzer

BinaryOp = E.BinaryOp
_SENTINELS: dict[tuple[str, str], E.Var] = {}


def infinity(dtype: str = "int32", negative: bool = False) -> E.Var:
    """The sentinel for an unbounded side (one object per dtype and sign)."""
    key = ("neg_inf" if negative else "pos_inf", dtype)
    v = _SENTINELS.get(key)
    if v is None:
        v = _SENTINELS[key] = E.Var(key[0], dtype)
    return v


def is_pos_inf(e: E.PrimExpr) -> bool:
    """Whether ``e`` is the sentinel standing for "no upper bound" in an interval."""
    return isinstance(e, E.Var) and _SENTINELS.get(("pos_inf", e.dtype)) is e


def is_neg_inf(e: E.PrimExpr) -> bool:
    """Whether ``e`` is the sentinel standing for "no lower bound" in an interval."""
    return isinstance(e, E.Var) and _SENTINELS.get(("neg_inf", e.dtype)) is e


def _is_inf(e: E.PrimExpr) -> bool:
    return is_pos_inf(e) or is_neg_inf(e)


# What makes a fresh Analyzer for a call given none. The analyzer sits above this module
# (``Analyzer.int_set`` evaluates through it), so it registers its class here when it is
# imported; ``ember.tir.arith`` imports it first, before this module's functions can run.
_new_analyzer: Callable[[], Analyzer] | None = None


def register_analyzer(factory: Callable[[], Analyzer]) -> None:
    """Make ``factory()`` the analyzer of calls that pass none (called by ``analyzer.py``)."""
    global _new_analyzer
    _new_analyzer = factory


def _ana(analyzer: Analyzer | None) -> Analyzer:
    if analyzer is not None:
        return analyzer
    assert _new_analyzer is not None, "ember.tir.arith.analyzer registers itself on import"
    return _new_analyzer()


@dataclass(frozen=True, slots=True, eq=False)
class IntSet:
    """The integers ``[min, max]`` (both inclusive, possibly symbolic)."""

    min: E.PrimExpr
    max: E.PrimExpr

    @staticmethod
    def point(e: E.ExprLike) -> IntSet:
        e = E.convert(e)
        return IntSet(e, e)

    @staticmethod
    def interval(lo: E.ExprLike, hi: E.ExprLike) -> IntSet:
        lo, hi = E.convert(lo), E.convert(hi)
        return IntSet(lo, hi)

    @staticmethod
    def from_range(r: E.Range) -> IntSet:
        """``Range(min, extent)`` -> ``[min, min + extent - 1]``."""
        if E.is_const_int(r.min) and E.is_const_int(r.extent):
            return IntSet.interval(r.min, E.const(r.min.value + r.extent.value - 1, r.min.dtype))  # type: ignore[attr-defined]
        return IntSet.interval(r.min, r.min + r.extent - 1)

    @staticmethod
    def everything(dtype: str = "int32") -> IntSet:
        return IntSet(infinity(dtype, negative=True), infinity(dtype))

    @property
    def dtype(self) -> str:
        return self.min.dtype

    def is_point(self) -> bool:
        return self.min is self.max

    def has_lower_bound(self) -> bool:
        return not is_neg_inf(self.min)

    def has_upper_bound(self) -> bool:
        return not is_pos_inf(self.max)

    def is_everything(self) -> bool:
        return not self.has_lower_bound() and not self.has_upper_bound()

    def extent(self, analyzer: Analyzer | None = None) -> E.PrimExpr:
        """``max - min + 1`` simplified; ``pos_inf`` when a side is unbounded."""
        if _is_inf(self.min) or _is_inf(self.max):
            return infinity(self.dtype)
        return _ana(analyzer).simplify(self.max - self.min + 1)

    def union(self, other: IntSet, analyzer: Analyzer | None = None) -> IntSet:
        """The smallest interval holding both (the hull)."""
        ana = _ana(analyzer)
        return IntSet(_min(self.min, other.min, ana), _max(self.max, other.max, ana))

    def intersect(self, other: IntSet, analyzer: Analyzer | None = None) -> IntSet:
        """Best effort: ``[max of mins, min of maxes]`` (may be empty if max < min)."""
        ana = _ana(analyzer)
        return IntSet(_max(self.min, other.min, ana), _min(self.max, other.max, ana))

    def __repr__(self) -> str:
        return f"IntSet[{self.min!r}, {self.max!r}]"


def _min(a: E.PrimExpr, b: E.PrimExpr, ana: Analyzer) -> E.PrimExpr:
    if is_neg_inf(a) or is_pos_inf(b):
        return a
    if is_neg_inf(b) or is_pos_inf(a):
        return b
    return ana.simplify(E.min_(a, b))


def _max(a: E.PrimExpr, b: E.PrimExpr, ana: Analyzer) -> E.PrimExpr:
    if is_pos_inf(a) or is_neg_inf(b):
        return a
    if is_pos_inf(b) or is_neg_inf(a):
        return b
    return ana.simplify(E.max_(a, b))


def _add(a: E.PrimExpr, b: E.PrimExpr, low: bool) -> E.PrimExpr:
    if _is_inf(a) or _is_inf(b):
        if (is_pos_inf(a) and is_neg_inf(b)) or (is_neg_inf(a) and is_pos_inf(b)):
            return infinity(a.dtype, negative=low)
        return a if _is_inf(a) else infinity(a.dtype, negative=is_neg_inf(b))
    return a + b


def _neg(e: E.PrimExpr) -> E.PrimExpr:
    if _is_inf(e):
        return infinity(e.dtype, negative=is_pos_inf(e))
    return E.const(0, e.dtype) - e


class _Eval:
    def __init__(self, dom_map: Mapping[E.Var, IntSet], ana: Analyzer) -> None:
        self.dom = dict(dom_map)
        self.ana = ana

    def relaxed_bound(self, e: E.PrimExpr) -> tuple[float, float]:
        """Constant bounds of ``e`` with the relaxed variables anywhere in their sets."""
        bounds = {}
        for v, s in self.dom.items():
            lo = self.ana.const_int_bound(s.min)[0] if s.has_lower_bound() else NEG_INF
            hi = self.ana.const_int_bound(s.max)[1] if s.has_upper_bound() else POS_INF
            bounds[v] = (lo, hi)
        with self.ana.assume_bounds(bounds):
            return self.ana.const_int_bound(e)

    def everything(self, e: E.PrimExpr) -> IntSet:
        """The fallback: the constant bounds of ``e`` (unbounded sides as sentinels)."""
        lo, hi = self.relaxed_bound(e)
        lo_e = E.const(lo, e.dtype) if isinstance(lo, int) else infinity(e.dtype, True)
        hi_e = E.const(hi, e.dtype) if isinstance(hi, int) else infinity(e.dtype)
        return IntSet(lo_e, hi_e)

    def eval(self, e: E.PrimExpr) -> IntSet:
        if not uses_var(e, lambda v: v in self.dom):
            return IntSet.point(e)
        if isinstance(e, E.Var):
            return self.dom[e]
        method = getattr(self, f"eval_{type(e).__name__}", None)
        return method(e) if method is not None else self.everything(e)

    def eval_BinOp(self, e: E.BinOp) -> IntSet:
        a, b = self.eval(e.a), self.eval(e.b)
        op = e.op
        if op is BinaryOp.ADD:
            return IntSet(_add(a.min, b.min, True), _add(a.max, b.max, False))
        if op is BinaryOp.SUB:
            return IntSet(_add(a.min, _neg(b.max), True), _add(a.max, _neg(b.min), False))
        if op is BinaryOp.MIN:
            return IntSet(_min(a.min, b.min, self.ana), _min(a.max, b.max, self.ana))
        if op is BinaryOp.MAX:
            return IntSet(_max(a.min, b.min, self.ana), _max(a.max, b.max, self.ana))
        if op is BinaryOp.MUL:
            if b.is_point():
                return self.scale(a, b.min, e)
            if a.is_point():
                return self.scale(b, a.min, e)
            return self.everything(e)
        if op in (BinaryOp.FLOORDIV, BinaryOp.TRUNCDIV) and b.is_point():
            return self.divide(e, a, b.min)
        if op in (BinaryOp.FLOORMOD, BinaryOp.TRUNCMOD) and b.is_point():
            return self.modulo(e, a, b.min)
        return self.everything(e)

    def sign(self, k: E.PrimExpr, strict: bool = False) -> int:
        """1 if ``k >= 0`` (``> 0`` when strict), -1 if ``k <= 0`` (``< 0``), else 0."""
        lo, hi = self.ana.const_int_bound(k)
        if lo > 0 or (lo == 0 and not strict):
            return 1
        if hi < 0 or (hi == 0 and not strict):
            return -1
        return 0

    def scale(self, s: IntSet, k: E.PrimExpr, e: E.PrimExpr) -> IntSet:
        """``s * k`` for a fixed (possibly symbolic) ``k`` of known sign."""
        sign = self.sign(k)
        if sign == 0:
            return self.everything(e)

        def mul(x: E.PrimExpr) -> E.PrimExpr:
            if _is_inf(x):
                return x if sign > 0 else _neg(x)
            return x * k

        lo, hi = mul(s.min), mul(s.max)
        return IntSet(lo, hi) if sign > 0 else IntSet(hi, lo)

    def divide(self, e: E.BinOp, a: IntSet, k: E.PrimExpr) -> IntSet:
        sign = self.sign(k, strict=True)
        if sign == 0:
            return self.everything(e)

        def div(x: E.PrimExpr) -> E.PrimExpr:
            if _is_inf(x):
                return x if sign > 0 else _neg(x)
            return E.BinOp(e.dtype, e.op, x, k)

        lo, hi = div(a.min), div(a.max)
        return IntSet(lo, hi) if sign > 0 else IntSet(hi, lo)

    def modulo(self, e: E.BinOp, a: IntSet, k: E.PrimExpr) -> IntSet:
        if self.sign(k, strict=True) != 1:
            return self.everything(e)
        zero, k1 = E.const(0, e.dtype), k - 1
        nonneg = self.ana.can_prove(a.min >= 0) if a.has_lower_bound() else False
        if e.op is BinaryOp.TRUNCMOD and not nonneg:
            return IntSet(_neg(k1), k1)
        if a.has_lower_bound() and a.has_upper_bound():
            div = BinaryOp.FLOORDIV
            same = self.ana.can_prove_equal(
                E.BinOp(e.dtype, div, a.min, k), E.BinOp(e.dtype, div, a.max, k)
            )
            if same:
                return IntSet(E.BinOp(e.dtype, e.op, a.min, k), E.BinOp(e.dtype, e.op, a.max, k))
        return IntSet(zero, k1)

    def eval_Select(self, e: E.Select) -> IntSet:
        return self.eval(e.true_value).union(self.eval(e.false_value), self.ana)

    def eval_Call(self, e: E.Call) -> IntSet:
        if e.op is E.Intrinsic.LIKELY:
            return self.eval(e.args[0])
        return self.everything(e)

    def eval_Cast(self, e: E.Cast) -> IntSet:
        if is_int(e.dtype) and is_int(e.value.dtype):
            inner = self.eval(e.value)
            lo, hi = self.relaxed_bound(e.value)
            tlo, thi = dtype_bound(e.dtype)
            finite = not (_is_inf(inner.min) or _is_inf(inner.max))
            if finite and lo >= tlo and hi <= thi:  # no value wraps: the cast is monotone
                return IntSet(E.cast(e.dtype, inner.min), E.cast(e.dtype, inner.max))
        return self.everything(e)

    eval_Compare = everything
    eval_Not = everything

    def eval_Ramp(self, e: E.Ramp) -> IntSet:
        base = self.eval(e.base)
        if not self.eval(e.stride).is_point():
            return self.everything(e)
        span = self.scale(
            IntSet.interval(E.const(0, e.base.dtype), E.const(e.lanes - 1, e.base.dtype)),
            e.stride,
            e.base,
        )
        return IntSet(_add(base.min, span.min, True), _add(base.max, span.max, False))

    def eval_Broadcast(self, e: E.Broadcast) -> IntSet:
        return self.eval(e.value)

    def eval_Let(self, e: E.Let) -> IntSet:
        self.dom[e.var] = self.eval(e.value)
        try:
            return self.eval(e.body)
        finally:
            del self.dom[e.var]


def int_set(
    expr: E.PrimExpr, dom_map: Mapping[E.Var, IntSet], analyzer: Analyzer | None = None
) -> IntSet:
    """The set of values ``expr`` takes while each variable in ``dom_map`` ranges over its set."""
    ana = _ana(analyzer)
    expr = ana.simplify(expr)
    s = _Eval(dom_map, ana).eval(expr)
    lo = s.min if _is_inf(s.min) else ana.simplify(s.min)
    hi = s.max if _is_inf(s.max) else ana.simplify(s.max)
    return IntSet(lo, hi)
