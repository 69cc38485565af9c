"""Canonical linear form of integer index expressions: ``sum(coef * atom) + const``.

Index arithmetic after splits and fuses is mostly sums of loop variables times
constants, written in whatever order lowering produced them. Reading such an
expression into a :class:`LinearForm` collects the coefficient of every
*atom* (a variable, or any sub-expression that is not a sum or a product by a
constant, such as ``x // 8`` or ``x * y``), so ``(i*32 + j) - i*32`` is ``j``
and ``x*4 + x*4`` is ``x*8``. ``to_expr`` writes a form back in a fixed,
readable order: atoms in order of first appearance, positive terms first,
the constant last. The form also merges ``(x // c) * c + x % c`` back into ``x``,
the pattern a split of a fused axis leaves behind.
"""

from __future__ import annotations

from collections.abc import Hashable
from dataclasses import dataclass, field
from math import gcd

from ember.tir import dtype as dt
from ember.tir import expr as E
from ember.tir.arith.fold import wrap_int
from ember.tir.arith.struct_key import KeyCache

BinaryOp = E.BinaryOp


@dataclass
class LinearForm:
    """``sum(coef * atom) + const`` over integers; ``terms`` keeps first-appearance order."""

    dtype: str
    terms: dict[Hashable, tuple[E.PrimExpr, int]] = field(default_factory=dict)
    const: int = 0

    def copy(self) -> LinearForm:
        return LinearForm(self.dtype, dict(self.terms), self.const)

    def add_term(self, key: Hashable, atom: E.PrimExpr, coef: int) -> None:
        if key in self.terms:
            atom0, c0 = self.terms[key]
            if c0 + coef == 0:
                del self.terms[key]
            else:
                self.terms[key] = (atom0, c0 + coef)
        elif coef != 0:
            self.terms[key] = (atom, coef)

    def add(self, other: LinearForm, scale: int = 1) -> None:
        for key, (atom, coef) in other.terms.items():
            self.add_term(key, atom, coef * scale)
        self.const += other.const * scale

    def is_const(self) -> bool:
        return not self.terms

    def coef_gcd(self) -> int:
        """The gcd of the coefficients (0 for a constant form)."""
        g = 0
        for _, coef in self.terms.values():
            g = gcd(g, coef)
        return g

    def coef_of(self, key: Hashable) -> int:
        hit = self.terms.get(key)
        return 0 if hit is None else hit[1]


def is_index_type(dtype: str) -> bool:
    """Scalar signed or unsigned integers: the types the linear form applies to."""
    return dt.is_int(dtype) and dt.lanes_of(dtype) == 1


def to_linear(e: E.PrimExpr, keys: KeyCache) -> LinearForm:
    """Read integer expression ``e`` as a linear form over its atoms."""
    out = LinearForm(e.dtype)
    _collect(e, 1, out, keys)
    return out


def _collect(e: E.PrimExpr, scale: int, out: LinearForm, keys: KeyCache) -> None:
    if isinstance(e, E.IntImm):
        out.const += e.value * scale
        return
    if isinstance(e, E.BinOp) and e.op in (BinaryOp.ADD, BinaryOp.SUB):
        _collect(e.a, scale, out, keys)
        _collect(e.b, scale if e.op is BinaryOp.ADD else -scale, out, keys)
        return
    if isinstance(e, E.BinOp) and e.op is BinaryOp.MUL:
        if isinstance(e.b, E.IntImm):
            _collect(e.a, scale * e.b.value, out, keys)
            return
        if isinstance(e.a, E.IntImm):
            _collect(e.b, scale * e.a.value, out, keys)
            return
        la, lb = to_linear(e.a, keys), to_linear(e.b, keys)
        if la.is_const() or lb.is_const():
            form, factor = (lb, la.const) if la.is_const() else (la, lb.const)
            out.add(form, scale * factor)
            return
    out.add_term(keys.key(e), e, scale)


def merge_divmod(form: LinearForm, keys: KeyCache) -> bool:
    """Rewrite ``k*c*(x // c) + k*(x % c)`` as ``k*x`` in place; True if anything merged."""
    pairs = {
        BinaryOp.FLOORMOD: BinaryOp.FLOORDIV,
        BinaryOp.TRUNCMOD: BinaryOp.TRUNCDIV,
    }
    for key, (atom, k) in list(form.terms.items()):
        if not (isinstance(atom, E.BinOp) and atom.op in pairs and isinstance(atom.b, E.IntImm)):
            continue
        c = atom.b.value
        div = E.BinOp(atom.dtype, pairs[atom.op], atom.a, atom.b)
        dkey = keys.key(div)
        if c == 0 or form.coef_of(dkey) != k * c:
            continue
        form.add_term(key, atom, -k)
        form.add_term(dkey, div, -k * c)
        form.add(to_linear(atom.a, keys), k)
        return True
    return False


def _term(atom: E.PrimExpr, coef: int, dtype: str) -> E.PrimExpr:
    if coef == 1:
        return atom
    return E.BinOp(dtype, BinaryOp.MUL, atom, E.IntImm(dtype, wrap_int(coef, dtype)))


def _binop(op: BinaryOp, a: E.PrimExpr, b: E.PrimExpr) -> E.PrimExpr:
    return E.BinOp(a.dtype, op, a, b)


def to_expr(form: LinearForm) -> E.PrimExpr:
    """``form`` as an expression: positive terms, then negative ones, then the constant."""
    dtype = form.dtype
    pos = [(a, c) for a, c in form.terms.values() if c > 0]
    neg = [(a, -c) for a, c in form.terms.values() if c < 0]
    const = form.const
    if pos:
        out = _term(*pos[0], dtype)
        for atom, coef in pos[1:]:
            out = _binop(BinaryOp.ADD, out, _term(atom, coef, dtype))
    elif neg:
        out, const = E.IntImm(dtype, wrap_int(const, dtype)), 0
    else:
        return E.IntImm(dtype, wrap_int(const, dtype))
    for atom, coef in neg:
        out = _binop(BinaryOp.SUB, out, _term(atom, coef, dtype))
    if const > 0:
        out = _binop(BinaryOp.ADD, out, E.IntImm(dtype, wrap_int(const, dtype)))
    elif const < 0:
        out = _binop(BinaryOp.SUB, out, E.IntImm(dtype, wrap_int(-const, dtype)))
    return out
