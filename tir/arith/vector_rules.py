"""Rewrites of vector index arithmetic: ramps and broadcasts, as vectorized loops leave them.

After ``vectorize_loops`` an index such as ``ramp(i*8, 1, 8) + broadcast(j, 8)``
should read as one ramp, ``ramp(i*8 + j, 1, 8)``, so a backend sees a
contiguous access. These function rules keep ramps and broadcasts outermost;
:mod:`ember.tir.arith.rewrite_rules` lists them with the others.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ember.tir import dtype as dt
from ember.tir import expr as E

if TYPE_CHECKING:
    from ember.tir.arith.analyzer import Analyzer

BinaryOp = E.BinaryOp


def _scalar(op: BinaryOp, a: E.PrimExpr, b: E.PrimExpr) -> E.PrimExpr:
    return E.BinOp(a.dtype, op, a, b)


def broadcast_op_broadcast(e: E.PrimExpr, ana: Analyzer) -> E.PrimExpr | None:
    """``broadcast(x, n) op broadcast(y, n)`` -> ``broadcast(x op y, n)`` (also comparisons)."""
    if not isinstance(e, (E.BinOp, E.Compare)):
        return None
    a, b = e.a, e.b
    if not (isinstance(a, E.Broadcast) and isinstance(b, E.Broadcast) and a.lanes == b.lanes):
        return None
    if isinstance(e, E.Compare):
        inner: E.PrimExpr = E.Compare("bool", e.op, a.value, b.value)
    else:
        inner = _scalar(e.op, a.value, b.value)
    return E.Broadcast(e.dtype, inner, a.lanes)


def ramp_add_sub(e: E.PrimExpr, ana: Analyzer) -> E.PrimExpr | None:
    """``ramp(b, s, n) + broadcast(x, n)`` -> ``ramp(b + x, s, n)``; ramp +- ramp adds strides."""
    if not (isinstance(e, E.BinOp) and e.op in (BinaryOp.ADD, BinaryOp.SUB)):
        return None
    a, b, op = e.a, e.b, e.op
    if isinstance(a, E.Ramp) and isinstance(b, E.Ramp) and a.lanes == b.lanes:
        return E.Ramp(
            e.dtype, _scalar(op, a.base, b.base), _scalar(op, a.stride, b.stride), a.lanes
        )
    if isinstance(a, E.Ramp) and isinstance(b, E.Broadcast) and a.lanes == b.lanes:
        return E.Ramp(e.dtype, _scalar(op, a.base, b.value), a.stride, a.lanes)
    if isinstance(a, E.Broadcast) and isinstance(b, E.Ramp) and a.lanes == b.lanes:
        if op is BinaryOp.ADD:
            return E.Ramp(e.dtype, _scalar(op, a.value, b.base), b.stride, b.lanes)
        zero = E.IntImm(b.stride.dtype, 0)
        stride = _scalar(BinaryOp.SUB, zero, b.stride)
        return E.Ramp(e.dtype, _scalar(op, a.value, b.base), stride, b.lanes)
    return None


def ramp_mul(e: E.PrimExpr, ana: Analyzer) -> E.PrimExpr | None:
    """``ramp(b, s, n) * broadcast(x, n)`` -> ``ramp(b*x, s*x, n)`` (integers)."""
    if not (isinstance(e, E.BinOp) and dt.is_int(e.dtype)):
        return None
    a, b = e.a, e.b
    if isinstance(b, E.Ramp):
        a, b = b, a
    if isinstance(a, E.Ramp) and isinstance(b, E.Broadcast) and a.lanes == b.lanes:
        mul = BinaryOp.MUL
        return E.Ramp(
            e.dtype, _scalar(mul, a.base, b.value), _scalar(mul, a.stride, b.value), a.lanes
        )
    return None


def ramp_zero_stride(e: E.PrimExpr, ana: Analyzer) -> E.PrimExpr | None:
    """``ramp(b, 0, n)`` -> ``broadcast(b, n)``."""
    if isinstance(e, E.Ramp) and isinstance(e.stride, E.IntImm) and e.stride.value == 0:
        return E.Broadcast(e.dtype, e.base, e.lanes)
    return None


def ramp_divmod(e: E.PrimExpr, ana: Analyzer) -> E.PrimExpr | None:
    """``ramp(b, s, n) // broadcast(c, n)`` -> ``broadcast(b // c, n)`` when the ramp stays in
    one period of ``c`` (and ``%`` -> ``ramp(b % c, s, n)``)."""
    if not (isinstance(e, E.BinOp) and isinstance(e.a, E.Ramp) and isinstance(e.b, E.Broadcast)):
        return None
    ramp, c = e.a, e.b.value
    if not (isinstance(c, E.IntImm) and c.value > 0 and isinstance(ramp.stride, E.IntImm)):
        return None
    s = ramp.stride.value
    if s < 0:
        return None
    mod = E.BinOp(ramp.base.dtype, BinaryOp.FLOORMOD, ramp.base, c)
    _, hi = ana.const_int_bound(mod)
    if hi + s * (ramp.lanes - 1) >= c.value:
        return None
    if e.op is BinaryOp.FLOORDIV:
        div = E.BinOp(ramp.base.dtype, BinaryOp.FLOORDIV, ramp.base, c)
        return E.Broadcast(e.dtype, div, ramp.lanes)
    return E.Ramp(e.dtype, mod, ramp.stride, ramp.lanes)
