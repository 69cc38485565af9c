"""Constant folding: the value of an operator applied to constants, one table per family.

The simplifier folds a node whose operands are all constants through these
tables. Integer semantics are the machine's: fixed-width two's complement
(results wrap to the dtype's width), floor division and modulo for
``FLOORDIV``/``FLOORMOD``, C truncation for ``TRUNCDIV``/``TRUNCMOD``; a
division by zero is not folded. Floats fold only where the result is exactly
what the target computes: the correctly rounded basic operations, computed in
the dtype's own precision with numpy (bfloat16 is never folded).
"""

from __future__ import annotations

import operator
from collections.abc import Callable
from typing import cast

import numpy as np

from ember.tir import dtype as dt
from ember.tir import expr as E
from ember.tir.expr import BinaryOp, CompareOp


def truncdiv(a: int, b: int) -> int:
    """Integer division rounding toward zero, as C and the targets divide (Python floors)."""
    q = abs(a) // abs(b)
    return q if (a >= 0) == (b > 0) else -q


def truncmod(a: int, b: int) -> int:
    """The remainder matching :func:`truncdiv` (C's ``%``), as the targets compute it."""
    return a - b * truncdiv(a, b)


def _nonzero(fn: Callable[[int, int], int]) -> Callable[[int, int], int | None]:
    return lambda a, b: None if b == 0 else fn(a, b)


# Integer (and bool) operators; None means "do not fold" (division by zero).
INT_BINARY: dict[BinaryOp, Callable[[int, int], int | None]] = {
    BinaryOp.ADD: operator.add,
    BinaryOp.SUB: operator.sub,
    BinaryOp.MUL: operator.mul,
    BinaryOp.DIV: _nonzero(truncdiv),
    BinaryOp.FLOORDIV: _nonzero(operator.floordiv),
    BinaryOp.FLOORMOD: _nonzero(operator.mod),
    BinaryOp.TRUNCDIV: _nonzero(truncdiv),
    BinaryOp.TRUNCMOD: _nonzero(truncmod),
    BinaryOp.MIN: min,
    BinaryOp.MAX: max,
    BinaryOp.AND: lambda a, b: int(bool(a) and bool(b)),
    BinaryOp.OR: lambda a, b: int(bool(a) or bool(b)),
}

# Float operators whose result is exactly the target's (IEEE, correctly rounded).
FLOAT_BINARY: dict[BinaryOp, Callable[[float, float], float | None]] = {
    BinaryOp.ADD: operator.add,
    BinaryOp.SUB: operator.sub,
    BinaryOp.MUL: operator.mul,
    BinaryOp.DIV: lambda a, b: None if b == 0 else a / b,
    BinaryOp.MIN: min,
    BinaryOp.MAX: max,
}

COMPARE: dict[CompareOp, Callable[[float, float], bool]] = {
    CompareOp.EQ: operator.eq,
    CompareOp.NE: operator.ne,
    CompareOp.LT: operator.lt,
    CompareOp.LE: operator.le,
    CompareOp.GT: operator.gt,
    CompareOp.GE: operator.ge,
}

_FOLDABLE_FLOATS = ("float16", "float32", "float64")


def wrap_int(value: int, dtype: str) -> int:
    """``value`` wrapped to the width of integer ``dtype`` (bool: 0 or 1)."""
    if dt.is_bool(dtype):
        return int(value != 0)
    bits = dt.bits_of(dtype)
    value &= (1 << bits) - 1
    if not dt.is_uint(dtype) and value >= 1 << (bits - 1):
        value -= 1 << bits
    return value


def make_int(value: int, dtype: str) -> E.IntImm:
    """An integer constant wrapped to ``dtype``'s width, as the target's arithmetic would wrap."""
    return E.IntImm(dtype, wrap_int(value, dtype))


def _round_float(value: float, dtype: str) -> float:
    return float(np.array(value, dtype=np.float64).astype(dtype))


def fold_binary(op: BinaryOp, a: E.PrimExpr, b: E.PrimExpr, dtype: str) -> E.PrimExpr | None:
    """The constant ``a op b``, or None when the operands are not constants or it must not fold."""
    if isinstance(a, E.IntImm) and isinstance(b, E.IntImm) and not dt.is_float(dtype):
        value = INT_BINARY[op](a.value, b.value)
        return None if value is None else make_int(value, dtype)
    if isinstance(a, E.FloatImm) and isinstance(b, E.FloatImm) and dtype in _FOLDABLE_FLOATS:
        ffn = FLOAT_BINARY.get(op)
        if ffn is None:
            return None
        # numpy scalars of ``dtype``, so the arithmetic rounds as the target's does
        ta = cast(float, np.array(a.value, dtype=dtype)[()])
        tb = cast(float, np.array(b.value, dtype=dtype)[()])
        with np.errstate(all="ignore"):
            fvalue = ffn(ta, tb)
        if fvalue is None:
            return None
        return E.FloatImm(dtype, float(np.array(fvalue, dtype=dtype)))
    return None


def fold_compare(op: CompareOp, a: E.PrimExpr, b: E.PrimExpr) -> E.PrimExpr | None:
    """The constant result of comparing two constants, or None when either is not one."""
    if isinstance(a, (E.IntImm, E.FloatImm)) and isinstance(b, (E.IntImm, E.FloatImm)):
        return E.IntImm("bool", int(COMPARE[op](a.value, b.value)))
    return None


def fold_cast(dtype: str, value: E.PrimExpr) -> E.PrimExpr | None:
    """A constant converted to scalar ``dtype`` with C semantics, or None."""
    if dt.lanes_of(dtype) != 1:
        return None
    if isinstance(value, E.IntImm):
        if dt.is_float(dtype):
            return (
                E.FloatImm(dtype, _round_float(value.value, dtype))
                if dtype in _FOLDABLE_FLOATS
                else None
            )
        return make_int(value.value, dtype)
    if isinstance(value, E.FloatImm):
        v = value.value
        if dt.is_float(dtype):
            return E.FloatImm(dtype, _round_float(v, dtype)) if dtype in _FOLDABLE_FLOATS else None
        if dt.is_bool(dtype):
            return E.IntImm("bool", int(v != 0))
        if v != v or v in (float("inf"), float("-inf")):
            return None
        iv = int(v)  # C truncation toward zero
        if wrap_int(iv, dtype) != iv:
            return None  # out of range: undefined in C, leave it to the target
        return E.IntImm(dtype, iv)
    return None
