"""The Analyzer: what other code asks about integer expressions, in one object.

Passes and bound inference hold one :class:`Analyzer` while they walk a
function: they ``bind`` each loop variable to its range as they enter the loop,
assume an ``if`` condition with ``with analyzer.constraint(cond):``, and ask
``simplify``, ``const_int_bound``, ``int_set``, ``can_prove``. The analyzer keeps
what it was told as constant bounds of variables, values of variables, and
*facts*: bounds on linear combinations (from ``io*32 + ii < 100`` it knows the
sum ``io*32 + ii`` is at most 99), which the simplifier uses to decide
comparisons. Answers are sound: ``can_prove`` says False when unsure.
"""

from __future__ import annotations

from collections.abc import Hashable, Iterable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from ember.errors import ArgumentError
from ember.tir import dtype as dt
from ember.tir import expr as E
from ember.tir.arith.const_int_bound import (
    NEG_INF,
    POS_INF,
    Bound,
    ConstIntBound,
    intersect,
)
from ember.tir.arith.int_set import (
    IntSet,
    infinity,
    int_set,
    is_neg_inf,
    is_pos_inf,
    register_analyzer,
)
from ember.tir.arith.linear import is_index_type, to_linear
from ember.tir.arith.simplifier import Simplifier
from ember.tir.arith.struct_key import KeyCache
from ember.tir.functor import free_vars


@dataclass
class _Fact:
    bound: Bound
    keep: Any  # the expression the fact came from: keeps its variables' ids alive
    vars: frozenset[E.Var] = field(default_factory=frozenset)


@dataclass
class _State:
    var_bounds: dict[E.Var, Bound] = field(default_factory=dict)
    var_values: dict[E.Var, E.PrimExpr] = field(default_factory=dict)
    facts: dict[Hashable, _Fact] = field(default_factory=dict)  # linear form -> its bound
    known: dict[Hashable, tuple[bool, Any]] = field(default_factory=dict)  # condition -> truth

    def copy(self) -> _State:
        return _State(
            dict(self.var_bounds), dict(self.var_values), dict(self.facts), dict(self.known)
        )


class Analyzer:
    """Simplification and bounds of integer expressions under bound variables and facts."""

    def __init__(self) -> None:
        self.keys = KeyCache()
        self._state = _State()
        self._bound_cache: dict[int, tuple[Any, Bound]] = {}
        self._simplifier: Simplifier | None = None  # its memo is valid until the state changes

    # -- telling the analyzer things -------------------------------------------------
    def bind(self, var: E.Var, value: E.Range | IntSet | E.ExprLike) -> None:
        """``var`` ranges over ``Range(min, extent)`` or an ``IntSet``, or equals an expression.

        Rebinding a variable replaces what was known about it.
        """
        if not isinstance(var, E.Var):
            raise ArgumentError(f"Analyzer.bind expects a Var, got {var!r}")
        self._forget(var)
        if isinstance(value, E.Range):
            lo, ext = self.simplify(value.min), self.simplify(value.extent)
            self._bind_interval(var, lo, self.simplify(lo + ext - 1))
        elif isinstance(value, IntSet):
            self._bind_interval(var, value.min, value.max)
        else:
            expr = self.simplify(E.convert(value, var.dtype))
            self._state.var_values[var] = expr
            if is_index_type(expr.dtype):
                self._state.var_bounds[var] = self.bound(expr)
        self._changed()

    def _bind_interval(self, var: E.Var, lo: E.PrimExpr, hi: E.PrimExpr) -> None:
        lo_b = NEG_INF if is_neg_inf(lo) else self.bound(lo)[0]
        hi_b = POS_INF if is_pos_inf(hi) else self.bound(hi)[1]
        self._state.var_bounds[var] = (lo_b, hi_b)
        self._changed()
        if not isinstance(lo, E.IntImm) and not is_neg_inf(lo):
            self._assume(var >= lo)
        if not isinstance(hi, E.IntImm) and not is_pos_inf(hi):
            self._assume(var <= hi)

    def _forget(self, var: E.Var) -> None:
        st = self._state
        st.var_bounds.pop(var, None)
        st.var_values.pop(var, None)
        st.facts = {k: f for k, f in st.facts.items() if var not in f.vars}
        st.known = {k: v for k, v in st.known.items() if var not in free_vars(v[1])}
        self._changed()

    def bind_bound(self, var: E.Var, bound: Bound) -> None:
        """Only constant bounds of ``var`` are known (e.g. a let-bound value's bounds)."""
        self._state.var_bounds[var] = bound
        self._changed()

    def bind_shapes(self, buffers: Iterable[Any]) -> None:
        """Sizes are never negative: a buffer dimension that is a bare variable is ``>= 0``."""
        for buf in buffers:
            for dim in buf.shape:
                if isinstance(dim, E.Var) and dim not in self._state.var_bounds:
                    self.bind_bound(dim, (0, POS_INF))

    def bind_positive(self, variables: Iterable[E.Var]) -> None:
        """Each of ``variables`` is ``>= 1`` (a symbolic split factor the runtime checks)."""
        for v in variables:
            self.bind_bound(v, (1, POS_INF))

    def value_of(self, var: E.Var) -> E.PrimExpr:
        """The expression ``var`` was bound to, or ``var`` itself."""
        return self._state.var_values.get(var, var)

    def _changed(self) -> None:
        self._bound_cache = {}
        self._simplifier = None

    @contextmanager
    def scope(self) -> Iterator[None]:
        """Everything bound or assumed inside the ``with`` block is forgotten at its end."""
        saved = self._state.copy()
        try:
            yield
        finally:
            self._state = saved
            self._changed()

    @contextmanager
    def constraint(self, cond: E.ExprLike) -> Iterator[None]:
        """Assume ``cond`` (e.g. an ``if`` condition) inside the ``with`` block."""
        with self.scope():
            self._assume(E.convert(cond))
            yield

    @contextmanager
    def assume_bounds(self, bounds: Mapping[E.Var, Bound]) -> Iterator[None]:
        """Temporarily give variables constant bounds (used to relax loops)."""
        saved = dict(self._state.var_bounds)
        self._state.var_bounds.update(bounds)
        self._changed()
        try:
            yield
        finally:
            self._state.var_bounds = saved
            self._changed()

    def _assume(self, cond: E.PrimExpr) -> None:
        cond = self.simplify(cond)
        if isinstance(cond, E.Call) and cond.op is E.Intrinsic.LIKELY:
            cond = cond.args[0]
        if isinstance(cond, E.BinOp) and cond.op is E.BinaryOp.AND:
            self._assume(cond.a)
            self._assume(cond.b)
            return
        if isinstance(cond, E.IntImm):
            return  # True adds nothing; False means the code is unreachable
        self._state.known[self.keys.key(cond)] = (True, cond)
        if isinstance(cond, E.Not):
            self._state.known[self.keys.key(cond.a)] = (False, cond.a)
        elif isinstance(cond, E.Compare) and is_index_type(cond.a.dtype):
            self._assume_compare(cond)
        self._changed()

    def _assume_compare(self, cond: E.Compare) -> None:
        if dt.is_uint(cond.a.dtype):
            return
        form = to_linear(cond.a, self.keys)
        form.add(to_linear(cond.b, self.keys), -1)
        g = form.coef_gcd()
        if g == 0:
            return
        k = form.const
        op = E.CompareOp
        # P + k op 0 with P = g * P'; the bound of P':
        bounds = {
            op.LT: (NEG_INF, (-k - 1) // g),
            op.LE: (NEG_INF, (-k) // g),
            op.GT: (-((k - 1) // g), POS_INF),
            op.GE: (-(k // g), POS_INF),
            op.EQ: ((-k) // g, (-k) // g) if k % g == 0 else None,
            op.NE: None,
        }
        b = bounds[cond.op]
        if b is None:
            return
        terms = {key: coef // g for key, (_, coef) in form.terms.items()}
        vars_ = frozenset(free_vars(cond))
        for sign, bnd in ((1, b), (-1, (-b[1], -b[0]))):
            key = frozenset((t, c * sign) for t, c in terms.items())
            old = self._state.facts.get(key)
            new = bnd if old is None else intersect(old.bound, bnd)
            self._state.facts[key] = _Fact(new, cond, vars_)

    # -- asking ----------------------------------------------------------------------
    def simplify(self, expr: E.ExprLike) -> E.PrimExpr:
        """An equal, simpler expression (the same object when nothing simplifies)."""
        if self._simplifier is None or len(self._simplifier.memo) > 50_000:
            self._simplifier = Simplifier(self)
        return self._simplifier.visit(E.convert(expr))

    def bound(self, expr: E.PrimExpr) -> Bound:
        """Constant bounds of ``expr`` as written (no simplification first)."""
        lookup = self._fact_bound if self._state.facts else None
        return ConstIntBound(self._state.var_bounds, lookup, self._bound_cache)(expr)

    def const_int_bound(self, expr: E.ExprLike) -> tuple[int | float, int | float]:
        """``(lo, hi)``: Python ints, or ``-inf`` / ``inf`` for an unknown side."""
        expr = E.convert(expr)
        b = self.bound(expr)
        if not isinstance(expr, (E.Var, E.IntImm)):
            b = intersect(b, self.bound(self.simplify(expr)))
        return b

    def int_set(self, expr: E.ExprLike, dom_map: Mapping[E.Var, IntSet]) -> IntSet:
        """The values of ``expr`` while each variable of ``dom_map`` ranges over its set."""
        return int_set(E.convert(expr), dom_map, self)

    def can_prove(self, cond: E.ExprLike) -> bool:
        """True only if ``cond`` holds for every value of the bound variables."""
        s = self.simplify(E.convert(cond))
        if isinstance(s, E.IntImm):
            return s.value != 0
        return self.knows(s) is True

    def can_prove_equal(self, a: E.ExprLike, b: E.ExprLike) -> bool:
        a, b = E.convert(a), E.convert(b)
        if is_index_type(a.dtype) and is_index_type(b.dtype):
            d = self.simplify(a - b)
            return isinstance(d, E.IntImm) and d.value == 0
        sa, sb = self.simplify(a), self.simplify(b)
        return self.keys.key(sa) == self.keys.key(sb)

    def knows(self, cond: E.PrimExpr) -> bool | None:
        """The truth of ``cond`` if it was assumed (or its negation was), else None."""
        hit = self._state.known.get(self.keys.key(cond))
        return None if hit is None else hit[0]

    def _fact_bound(self, e: E.PrimExpr) -> Bound | None:
        if not is_index_type(e.dtype):
            return None
        if isinstance(e, E.BinOp) and e.op not in (E.BinaryOp.ADD, E.BinaryOp.SUB, E.BinaryOp.MUL):
            return None
        form = to_linear(e, self.keys)
        g = form.coef_gcd()
        if g == 0:
            return None
        fact = self._state.facts.get(frozenset((t, c // g) for t, (_, c) in form.terms.items()))
        if fact is None:
            return None
        lo, hi = fact.bound
        return (lo * g + form.const, hi * g + form.const)


register_analyzer(Analyzer)

__all__ = ["Analyzer", "IntSet", "infinity"]
