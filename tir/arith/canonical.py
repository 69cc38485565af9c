"""Rewrites that reason with the linear form and with bounds: the simplifier's heavy lifting.

Each function takes an already child-simplified expression and the
:class:`Analyzer`, and returns a replacement or None. They are listed by
name in :mod:`ember.tir.arith.rewrite_rules` next to the pattern rules and can
be tested one by one. ``canonical_sum`` puts integer sums in linear form;
``divide_by_const`` / ``mod_by_const`` move the terms a divisor divides out of
``//`` and ``%`` (``(x*8 + y) // 8`` is ``x + y // 8``) and decide the rest by
bounds; ``min_max_by_bounds`` and ``compare_by_bounds`` drop a ``min`` or decide a
comparison when the bounds of the difference of the operands settle it.
"""

from __future__ import annotations

from math import gcd, isfinite
from typing import TYPE_CHECKING

from ember.tir import dtype as dt
from ember.tir import expr as E
from ember.tir.arith.linear import LinearForm, is_index_type, merge_divmod, to_expr, to_linear
from ember.tir.expr import BinaryOp, CompareOp

if TYPE_CHECKING:
    from ember.tir.arith.analyzer import Analyzer


def _signed_index(dtype: str) -> bool:
    return is_index_type(dtype) and not dt.is_uint(dtype)


def canonical_sum(e: E.PrimExpr, ana: Analyzer) -> E.PrimExpr | None:
    """``(i*32 + j) - i*32`` -> ``j``; ``x*4 + x*4`` -> ``x*8``; ``(f//8)*8 + f%8`` -> ``f``."""
    if not (isinstance(e, E.BinOp) and _signed_index(e.dtype)):
        return None
    key = ana.keys.key(e)
    memo = ana.keys.results("canonical_sum")  # the linear form reads structure, not bounds
    if key in memo:
        return memo[key]
    form = to_linear(e, ana.keys)
    while merge_divmod(form, ana.keys):
        pass
    out = to_expr(form)
    memo[key] = None if ana.keys.key(out) == key else out  # None: already canonical
    return memo[key]


def _split_by_divisor(num: LinearForm, c: int) -> tuple[LinearForm, LinearForm]:
    """``num = c*q + r`` with the terms ``c`` divides in ``q`` and ``0 <= r.const < c``."""
    q, r = LinearForm(num.dtype), LinearForm(num.dtype)
    for key, (atom, coef) in num.terms.items():
        if coef % c == 0:
            q.add_term(key, atom, coef // c)
        else:
            r.add_term(key, atom, coef)
    q.const, r.const = num.const // c, num.const % c
    return q, r


def _plus(q: LinearForm, extra: E.PrimExpr | None, ana: Analyzer) -> E.PrimExpr:
    if extra is not None:
        q = q.copy()
        q.add(to_linear(extra, ana.keys))
    return to_expr(q)


def _const_quotient(r: LinearForm, c: int, ana: Analyzer) -> int | None:
    """``r // c`` when the bounds of ``r`` put it in one period, else None."""
    lo, hi = ana.bound(to_expr(r))
    if isfinite(lo) and isfinite(hi) and lo // c == hi // c:
        return int(lo // c)
    return None


def _split_divisors(r: LinearForm, c: int) -> list[int]:
    """The divisors ``g`` of ``c`` worth trying in :func:`_small_remainder`, largest first.

    Only the set of terms whose coefficient ``g`` divides matters, and for each such set the
    largest ``g`` that gives it is the gcd of ``c`` and those coefficients; so the gcds of
    ``c`` with every subset of coefficients cover every case (and the first that works is
    the largest ``g`` that works). A handful of numbers, where trying every divisor below
    ``c`` took one step per integer and hung on ``x % 2147483647``. ``r`` holds no term
    whose coefficient ``c`` divides (:func:`_split_by_divisor` moved those), so every gcd is
    below ``c``.
    """
    found: set[int] = set()
    for _, coef in r.terms.values():
        d = gcd(c, coef)
        found |= {d} | {gcd(d, f) for f in found}
    return sorted((g for g in found if 2 <= g < c), reverse=True)


def _small_remainder(
    r: LinearForm, c: int, ana: Analyzer
) -> tuple[LinearForm, LinearForm, int] | None:
    """Write ``r = g*big + small`` with ``g`` dividing ``c`` and ``0 <= small < g`` by bounds.

    Then ``r // c == big // (c/g)`` and ``r % c == (big % (c/g))*g + small``: the lane
    offset of a vector split (``(x*4 + f) // 8`` with ``0 <= f < 4``) drops out of the
    quotient.
    """
    for g in _split_divisors(r, c):
        big, small = LinearForm(r.dtype), LinearForm(r.dtype)
        for key, (atom, coef) in r.terms.items():
            (big if coef % g == 0 else small).add_term(
                key, atom, coef // g if coef % g == 0 else coef
            )
        small.const = r.const
        if big.is_const() or small.is_const():
            continue
        lo, hi = ana.bound(to_expr(small))
        if isfinite(lo) and isfinite(hi) and lo >= 0 and hi < g:
            return big, small, g
    return None


def divide_by_const(e: E.PrimExpr, ana: Analyzer) -> E.PrimExpr | None:
    """``(x*8 + y) // 8`` -> ``x + y // 8``; ``(io*32 + ii) // 32`` -> ``io`` when 0 <= ii < 32."""
    if not (isinstance(e, E.BinOp) and _signed_index(e.dtype) and isinstance(e.b, E.IntImm)):
        return None
    c = e.b.value
    if c <= 0:
        return None
    num = to_linear(e.a, ana.keys)
    q, r = _split_by_divisor(num, c)
    if r.is_const():
        return to_expr(q)
    m = _const_quotient(r, c, ana)
    if m is not None:
        q.const += m
        return to_expr(q)
    split = _small_remainder(r, c, ana)
    if split is not None:
        big, _, g = split
        rest = E.BinOp(e.dtype, BinaryOp.FLOORDIV, to_expr(big), E.IntImm(e.dtype, c // g))
        return _plus(q, rest, ana)
    g = gcd(r.coef_gcd(), r.const, c)
    if g > 1:
        rest = E.BinOp(
            e.dtype, BinaryOp.FLOORDIV, to_expr(_exact_div(r, g)), E.IntImm(e.dtype, c // g)
        )
    elif q.is_const() and q.const == 0:
        return None  # nothing moved out: keep the node as it is
    else:
        rest = E.BinOp(e.dtype, BinaryOp.FLOORDIV, to_expr(r), e.b)
    return _plus(q, rest, ana)


def _exact_div(form: LinearForm, g: int) -> LinearForm:
    out = LinearForm(form.dtype)
    for key, (atom, coef) in form.terms.items():
        out.add_term(key, atom, coef // g)
    out.const = form.const // g
    return out


def mod_by_const(e: E.PrimExpr, ana: Analyzer) -> E.PrimExpr | None:
    """``(x*8 + y) % 8`` -> ``y % 8`` -> ``y`` when 0 <= y < 8; ``(x*8) % 4`` -> ``0``."""
    if not (isinstance(e, E.BinOp) and _signed_index(e.dtype) and isinstance(e.b, E.IntImm)):
        return None
    c = e.b.value
    if c <= 0:
        return None
    num = to_linear(e.a, ana.keys)
    q, r = _split_by_divisor(num, c)
    if r.is_const():
        return E.IntImm(e.dtype, r.const)
    m = _const_quotient(r, c, ana)
    if m is not None:
        r.const -= m * c
        return to_expr(r)
    split = _small_remainder(r, c, ana)
    if split is not None:
        big, small, g = split
        inner = E.BinOp(e.dtype, BinaryOp.FLOORMOD, to_expr(big), E.IntImm(e.dtype, c // g))
        scaled = E.BinOp(e.dtype, BinaryOp.MUL, inner, E.IntImm(e.dtype, g))
        return E.BinOp(e.dtype, BinaryOp.ADD, scaled, to_expr(small))
    g = gcd(r.coef_gcd(), r.const, c)
    if g > 1:
        inner = E.BinOp(
            e.dtype, BinaryOp.FLOORMOD, to_expr(_exact_div(r, g)), E.IntImm(e.dtype, c // g)
        )
        return E.BinOp(e.dtype, BinaryOp.MUL, inner, E.IntImm(e.dtype, g))
    if q.is_const() and q.const == 0:
        return None
    return E.BinOp(e.dtype, BinaryOp.FLOORMOD, to_expr(r), e.b)


def divmod_by_bounds(e: E.PrimExpr, ana: Analyzer) -> E.PrimExpr | None:
    """``x // n`` -> ``0`` and ``x % n`` -> ``x`` when ``0 <= x < n`` (any divisor)."""
    if not (isinstance(e, E.BinOp) and is_index_type(e.dtype)):
        return None
    lo, _ = ana.bound(e.a)
    if lo < 0 or not ana.can_prove(e.a < e.b):
        return None
    if e.op in (BinaryOp.FLOORDIV, BinaryOp.TRUNCDIV):
        return E.IntImm(e.dtype, 0)
    return e.a


def _difference_bound(a: E.PrimExpr, b: E.PrimExpr, ana: Analyzer) -> tuple[float, float]:
    diff = to_linear(a, ana.keys)
    diff.add(to_linear(b, ana.keys), -1)
    while merge_divmod(diff, ana.keys):
        pass
    if diff.is_const():
        return (diff.const, diff.const)
    return ana.bound(to_expr(diff))


def provably_le(a: E.PrimExpr, b: E.PrimExpr, ana: Analyzer) -> bool:
    """``a <= b`` for every value: by bounds, by the difference, by structure, or by
    monotonicity (``x // c <= (x + k) // c`` for ``k >= 0``)."""
    if a is b or ana.keys.key(a) == ana.keys.key(b):
        return True
    if ana.bound(a)[1] <= ana.bound(b)[0]:
        return True
    if (
        isinstance(b, E.BinOp)
        and b.op is BinaryOp.MAX
        and (_same(a, b.a, ana) or _same(a, b.b, ana))
    ):
        return True
    if (
        isinstance(a, E.BinOp)
        and a.op is BinaryOp.MIN
        and (_same(b, a.a, ana) or _same(b, a.b, ana))
    ):
        return True
    if _signed_index(a.dtype) and _difference_bound(a, b, ana)[1] <= 0:
        return True
    if (
        isinstance(a, E.BinOp)
        and isinstance(b, E.BinOp)
        and a.op is b.op is BinaryOp.FLOORDIV
        and isinstance(a.b, E.IntImm)
        and isinstance(b.b, E.IntImm)
        and a.b.value == b.b.value > 0
    ):
        return provably_le(a.a, b.a, ana)
    return False


def _same(a: E.PrimExpr, b: E.PrimExpr, ana: Analyzer) -> bool:
    return a is b or ana.keys.key(a) == ana.keys.key(b)


def min_max_by_bounds(e: E.PrimExpr, ana: Analyzer) -> E.PrimExpr | None:
    """``min(x, y)`` -> ``x`` when ``x <= y`` always (e.g. ``min(i + 1, i + 3)``, or by ranges)."""
    if not (isinstance(e, E.BinOp) and is_index_type(e.dtype)):
        return None
    a_le_b, b_le_a = provably_le(e.a, e.b, ana), provably_le(e.b, e.a, ana)
    if e.op is BinaryOp.MIN:
        return e.a if a_le_b else e.b if b_le_a else None
    return e.b if a_le_b else e.a if b_le_a else None


def _chain(e: E.PrimExpr, op: BinaryOp, out: list[E.PrimExpr]) -> list[E.PrimExpr]:
    if isinstance(e, E.BinOp) and e.op is op:
        _chain(e.a, op, out)
        _chain(e.b, op, out)
    else:
        out.append(e)
    return out


def min_max_chain(e: E.PrimExpr, ana: Analyzer) -> E.PrimExpr | None:
    """``min(min(a, b), c)``: drop every operand another one bounds, e.g.
    ``min(min(32, max(0, x)), x)`` -> ``min(32, x)`` (``max(0, x) >= x``)."""
    if not (isinstance(e, E.BinOp) and is_index_type(e.dtype)):
        return None
    ops = _chain(e, e.op, [])
    if len(ops) < 3:
        return None
    keep: list[E.PrimExpr] = []
    for k, o in enumerate(ops):
        others = keep + ops[k + 1 :]
        if e.op is BinaryOp.MIN:
            dominated = any(provably_le(x, o, ana) for x in others)
        else:
            dominated = any(provably_le(o, x, ana) for x in others)
        if not dominated:
            keep.append(o)
    if len(keep) == len(ops):
        return None
    out = keep[0]
    for o in keep[1:]:
        out = E.BinOp(e.dtype, e.op, out, o)
    return out


def _decide(op: CompareOp, lo: float, hi: float) -> bool | None:
    """The truth of ``d op 0`` for every ``d`` in ``[lo, hi]``, or None if it varies."""
    table = {
        CompareOp.LT: (hi < 0, lo >= 0),
        CompareOp.LE: (hi <= 0, lo > 0),
        CompareOp.GT: (lo > 0, hi <= 0),
        CompareOp.GE: (lo >= 0, hi < 0),
        CompareOp.EQ: (lo == hi == 0, lo > 0 or hi < 0),
        CompareOp.NE: (lo > 0 or hi < 0, lo == hi == 0),
    }
    true, false = table[op]
    return True if true else False if false else None


def _decide_intervals(op: CompareOp, a: tuple[float, float], b: tuple[float, float]) -> bool | None:
    lo, hi = a[0] - b[1], a[1] - b[0]
    if lo != lo or hi != hi:  # inf - inf
        return None
    return _decide(op, lo, hi)


def _normalize_const(op: CompareOp, k: int, g: int) -> int | bool:
    """The constant of ``P/g + k' op 0`` equivalent to ``P + k op 0`` (or the decided truth)."""
    if op in (CompareOp.EQ, CompareOp.NE):
        if k % g:
            return op is CompareOp.NE
        return k // g
    if op in (CompareOp.LT, CompareOp.GE):
        return k // g  # P < -k  <=>  P/g < ceil(-k/g) = -floor(k/g)
    return -((-k) // g)  # P <= -k <=> P/g <= floor(-k/g): k' = ceil(k/g)


def compare_by_bounds(e: E.PrimExpr, ana: Analyzer) -> E.PrimExpr | None:
    """Decide ``a < b`` (etc.) by bounds, else write it as ``positive terms op rest``.

    ``io*32 + ii < 100`` is True when the bounds of the difference settle it; ``96 + ii < 100``
    becomes ``ii < 4``; ``x*4 < 10`` becomes ``x < 3``.
    """
    if not (isinstance(e, E.Compare) and is_index_type(e.a.dtype)):
        return None
    decided = _decide_intervals(e.op, ana.bound(e.a), ana.bound(e.b))
    if decided is None and ana.knows(e) is not None:
        decided = ana.knows(e)
    if decided is None and _signed_index(e.a.dtype):
        decided = _decide(e.op, *_difference_bound(e.a, e.b, ana))
    if decided is not None:
        return E.IntImm("bool", int(decided))
    if not _signed_index(e.a.dtype):
        return None
    return _normal_compare(e, ana)


def _normal_compare(e: E.Compare, ana: Analyzer) -> E.PrimExpr:
    diff = to_linear(e.a, ana.keys)
    diff.add(to_linear(e.b, ana.keys), -1)
    g = diff.coef_gcd()
    if g == 0:
        return E.IntImm("bool", int(_decide(e.op, diff.const, diff.const)))
    k = _normalize_const(e.op, diff.const, g)
    if isinstance(k, bool):
        return E.IntImm("bool", int(k))
    lhs, rhs = LinearForm(e.a.dtype), LinearForm(e.a.dtype)
    for key, (atom, coef) in diff.terms.items():
        if coef > 0:
            lhs.add_term(key, atom, coef // g)
        else:
            rhs.add_term(key, atom, -coef // g)
    if lhs.terms:
        rhs.const = -k
    else:
        lhs.const = k
    out = E.Compare(e.dtype, e.op, to_expr(lhs), to_expr(rhs))
    known = ana.knows(out)
    return E.IntImm("bool", int(known)) if known is not None else out


def and_or_by_implication(e: E.PrimExpr, ana: Analyzer) -> E.PrimExpr | None:
    """``i < 4 and i < 8`` -> ``i < 4``; ``i < 4 and 5 < i`` -> ``False`` (and the duals for or)."""
    if not (isinstance(e, E.BinOp) and dt.lanes_of(e.dtype) == 1):
        return None
    if not (_atomic(e.a) and _atomic(e.b)):
        return None
    if e.op is BinaryOp.AND:
        with ana.constraint(e.a):
            if ana.can_prove(e.b):
                return e.a
            if ana.can_prove(E.logical_not(e.b)):
                return E.IntImm("bool", 0)
        with ana.constraint(e.b):
            if ana.can_prove(e.a):
                return e.b
        return None
    with ana.constraint(E.logical_not(e.a)):
        if ana.can_prove(e.b):
            return E.IntImm("bool", 1)
        if ana.can_prove(E.logical_not(e.b)):
            return e.a
    with ana.constraint(E.logical_not(e.b)):
        if ana.can_prove(E.logical_not(e.a)):
            return e.b
    return None


def _atomic(c: E.PrimExpr) -> bool:
    if isinstance(c, E.Not):
        c = c.a
    return isinstance(c, E.Compare) and is_index_type(c.a.dtype)
