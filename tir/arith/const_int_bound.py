"""Constant integer bounds: the smallest interval ``[lo, hi]`` of Python ints holding an expression.

This is the cheapest question the simplifier asks ("can ``ii`` reach 32?") and
the one bound inference uses to size buffers. Given bounds of the free
variables (loop variables bound to their ranges by :class:`Analyzer`), it
evaluates the expression in interval arithmetic. An unknown side is
``NEG_INF`` / ``POS_INF`` (float infinities, so ``isinstance(hi, int)`` tells a
finite bound). The result is sound: every value the expression can take lies in
it; int32/int64 arithmetic is assumed not to overflow, as index arithmetic
never should. Boolean expressions are 0/1 integers.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from typing import Any

from ember.tir import dtype as dt
from ember.tir import expr as E
from ember.tir.arith.fold import truncdiv

NEG_INF: float = -math.inf
POS_INF: float = math.inf
Num = int | float
Bound = tuple[Num, Num]
EVERYTHING: Bound = (NEG_INF, POS_INF)

BinaryOp = E.BinaryOp


def dtype_bound(dtype: str) -> Bound:
    """Values a variable of ``dtype`` can hold (int32 and int64 are treated as unbounded)."""
    if dt.is_bool(dtype):
        return (0, 1)
    if not dt.is_int(dtype):
        return EVERYTHING
    bits = dt.bits_of(dtype)
    if dt.is_uint(dtype):
        return (0, (1 << bits) - 1 if bits < 32 else POS_INF)
    if bits < 32:
        return (-(1 << (bits - 1)), (1 << (bits - 1)) - 1)
    return EVERYTHING


def intersect(a: Bound, b: Bound) -> Bound:
    """The bound both ``a`` and ``b`` allow: two facts about one value combine this way."""
    return (max(a[0], b[0]), min(a[1], b[1]))


def union(a: Bound, b: Bound) -> Bound:
    """The smallest bound holding ``a`` and ``b``: what a value is when it may be either."""
    return (min(a[0], b[0]), max(a[1], b[1]))


def is_const(b: Bound) -> bool:
    """Whether the bound pins the value to one integer, so it can be folded."""
    return b[0] == b[1] and isinstance(b[0], int)


def _add(x: Num, y: Num, side: float) -> Num:
    if math.isinf(x) and math.isinf(y) and x != y:
        return side  # inf - inf: unknown, widen on this side
    return x + y


def b_add(a: Bound, b: Bound) -> Bound:
    """Bound of ``x + y``; infinite ends stay infinite instead of overflowing."""
    return (_add(a[0], b[0], NEG_INF), _add(a[1], b[1], POS_INF))


def b_neg(a: Bound) -> Bound:
    """Bound of ``-x``: the ends swap."""
    return (-a[1], -a[0])


def b_sub(a: Bound, b: Bound) -> Bound:
    """Bound of ``x - y``, as ``x + (-y)``."""
    return b_add(a, b_neg(b))


def _mul(x: Num, y: Num) -> Num:
    return 0 if x == 0 or y == 0 else x * y


def _corners(a: Bound, b: Bound, fn: Callable[[Num, Num], Num]) -> Bound:
    vals = [fn(x, y) for x in a for y in b]
    return (min(vals), max(vals))


def b_mul(a: Bound, b: Bound) -> Bound:
    """Bound of ``x * y``: the extremes lie at the corners of the two intervals."""
    return _corners(a, b, _mul)


def _fdiv(x: Num, y: Num) -> Num:
    """Floor division extended to infinities (``y`` has a known sign, never 0)."""
    if math.isinf(x):
        return x if y > 0 else -x
    if math.isinf(y):
        return 0 if (x >= 0) == (y > 0) or x == 0 else -1
    return x // y


def _tdiv(x: Num, y: Num) -> Num:
    if math.isinf(x):
        return x if y > 0 else -x
    if math.isinf(y):
        return 0
    return truncdiv(int(x), int(y))


def b_floordiv(a: Bound, b: Bound) -> Bound:
    """Bound of ``x // y``; unbounded when the divisor may be zero or change sign."""
    if b[0] > 0 or b[1] < 0:  # the divisor keeps one sign: the extremes are at corners
        return _corners(a, b, _fdiv)
    return EVERYTHING


def b_truncdiv(a: Bound, b: Bound) -> Bound:
    """Bound of C-style ``x / y``; unbounded when the divisor may be zero or change sign."""
    if b[0] > 0 or b[1] < 0:
        return _corners(a, b, _tdiv)
    return EVERYTHING


def b_floormod(a: Bound, b: Bound) -> Bound:
    """Bound of ``x % y`` (floor); exact when the dividend stays within one period."""
    if is_const(b) and b[0] > 0 and math.isfinite(a[0]) and math.isfinite(a[1]):
        c = b[0]
        if a[0] // c == a[1] // c:  # one period: the remainder moves with the dividend
            return (a[0] % c, a[1] % c)
    if b[0] > 0:
        hi = b[1] - 1
        if a[0] >= 0 and a[1] <= hi:
            return a
        return (0, hi)
    if b[1] < 0:
        return (b[0] + 1, 0)
    return EVERYTHING


def b_truncmod(a: Bound, b: Bound) -> Bound:
    """Bound of C-style ``x % y``; the dividend itself when it is already below the divisor."""
    if b[0] > 0 or b[1] < 0:
        m = max(abs(b[0]), abs(b[1])) - 1
        if a[0] >= 0 and a[1] <= m and b[0] > 0 and a[1] < b[0]:
            return a
        return (0 if a[0] >= 0 else -m, 0 if a[1] <= 0 else m)
    return EVERYTHING


_BINARY: dict[BinaryOp, Callable[[Bound, Bound], Bound]] = {
    BinaryOp.ADD: b_add,
    BinaryOp.SUB: b_sub,
    BinaryOp.MUL: b_mul,
    BinaryOp.FLOORDIV: b_floordiv,
    BinaryOp.FLOORMOD: b_floormod,
    BinaryOp.TRUNCDIV: b_truncdiv,
    BinaryOp.TRUNCMOD: b_truncmod,
    BinaryOp.MIN: lambda a, b: (min(a[0], b[0]), min(a[1], b[1])),
    BinaryOp.MAX: lambda a, b: (max(a[0], b[0]), max(a[1], b[1])),
    BinaryOp.AND: lambda a, b: (int(a[0] >= 1 and b[0] >= 1), int(a[1] >= 1 and b[1] >= 1)),
    BinaryOp.OR: lambda a, b: (int(a[0] >= 1 or b[0] >= 1), int(a[1] >= 1 or b[1] >= 1)),
}

_COMPARE: dict[E.CompareOp, Callable[[Bound, Bound], Bound]] = {
    E.CompareOp.LT: lambda a, b: (int(a[1] < b[0]), int(a[0] < b[1])),
    E.CompareOp.LE: lambda a, b: (int(a[1] <= b[0]), int(a[0] <= b[1])),
    E.CompareOp.GT: lambda a, b: (int(a[0] > b[1]), int(a[1] > b[0])),
    E.CompareOp.GE: lambda a, b: (int(a[0] >= b[1]), int(a[1] >= b[0])),
    E.CompareOp.EQ: lambda a, b: (
        int(a[0] == a[1] == b[0] == b[1]),
        int(a[0] <= b[1] and b[0] <= a[1]),
    ),
    E.CompareOp.NE: lambda a, b: (
        int(a[1] < b[0] or b[1] < a[0]),
        int(not (a[0] == a[1] == b[0] == b[1])),
    ),
}


def fit(b: Bound, dtype: str) -> Bound:
    """``b`` if every value fits ``dtype``; else the whole dtype range (the value wraps)."""
    target = dtype_bound(dtype)
    return b if b[0] >= target[0] and b[1] <= target[1] else target


Lookup = Callable[[E.PrimExpr], Bound | None]


class ConstIntBound:
    """Interval evaluator over ``var_bounds``; ``lookup`` may add facts for a subexpression."""

    def __init__(
        self,
        var_bounds: Mapping[E.Var, Bound] | None = None,
        lookup: Lookup | None = None,
        cache: dict[int, tuple[Any, Bound]] | None = None,
    ) -> None:
        self.var_bounds: dict[E.Var, Bound] = dict(var_bounds or {})
        self.lookup = lookup
        self.cache = cache if cache is not None else {}

    def __call__(self, e: E.PrimExpr) -> Bound:
        hit = self.cache.get(id(e))
        if hit is not None and hit[0] is e:
            return hit[1]
        b = self._eval(e)
        if self.lookup is not None and isinstance(e, (E.Var, E.BinOp)):
            extra = self.lookup(e)
            if extra is not None:
                b = intersect(b, extra)
        self.cache[id(e)] = (e, b)
        return b

    def _eval(self, e: E.PrimExpr) -> Bound:
        if isinstance(e, E.IntImm):
            return (e.value, e.value)
        if isinstance(e, E.Var):
            known = self.var_bounds.get(e, EVERYTHING)
            if isinstance(e, E.SizeVar):
                known = intersect(known, (0, POS_INF))
            return intersect(known, dtype_bound(e.dtype))
        if isinstance(e, E.BinOp):
            if dt.is_float(e.dtype) or e.op is BinaryOp.DIV:
                return EVERYTHING
            return fit(_BINARY[e.op](self(e.a), self(e.b)), e.dtype)
        if isinstance(e, E.Compare):
            if dt.is_float(e.a.dtype):
                return (0, 1)
            return _COMPARE[e.op](self(e.a), self(e.b))
        if isinstance(e, E.Not):
            lo, hi = self(e.a)
            return (1 - min(hi, 1), 1 - max(lo, 0))
        if isinstance(e, E.Select):
            return union(self(e.true_value), self(e.false_value))
        if isinstance(e, E.Cast):
            return self._cast(e)
        if isinstance(e, E.Call) and e.op is E.Intrinsic.LIKELY:
            return self(e.args[0])
        if isinstance(e, E.Broadcast):
            return self(e.value)
        if isinstance(e, E.Ramp):
            return b_add(self(e.base), b_mul(self(e.stride), (0, e.lanes - 1)))
        if isinstance(e, E.Let):
            saved = self.var_bounds.get(e.var)
            self.var_bounds[e.var] = self(e.value)
            try:
                return self._eval_uncached(e.body)
            finally:
                if saved is None:
                    self.var_bounds.pop(e.var, None)
                else:
                    self.var_bounds[e.var] = saved
        return dtype_bound(e.dtype)

    def _eval_uncached(self, e: E.PrimExpr) -> Bound:
        # The let-bound variable's bound only holds inside the let: do not cache there.
        inner = ConstIntBound(self.var_bounds, self.lookup, {})
        return inner(e)

    def _cast(self, e: E.Cast) -> Bound:
        if dt.is_bool(e.dtype):
            return (0, 1)
        if not dt.is_int(e.dtype):
            return EVERYTHING
        src = e.value.dtype
        if dt.is_int(src) or dt.is_bool(src):
            return fit(self(e.value), e.dtype)
        return dtype_bound(e.dtype)


def const_int_bound(e: E.PrimExpr, var_bounds: Mapping[E.Var, Bound] | None = None) -> Bound:
    """Bounds of ``e`` given bounds of its variables (unbound variables are unbounded)."""
    return ConstIntBound(var_bounds)(e)
