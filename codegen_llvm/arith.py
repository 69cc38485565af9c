"""Binary operators and comparisons in LLVM IR, one table entry per operator.

Used by :mod:`ember.codegen_llvm.codegen` for ``BinOp`` and ``Compare`` nodes.
Integer operators choose the signed or unsigned instruction from the dtype.
Floor division and modulo of signed integers round toward minus infinity
(Python's ``//`` and ``%``), built from ``sdiv``/``srem`` plus a correction;
the truncating forms are plain ``sdiv``/``srem`` (C's ``/`` and ``%``). Float
``min``/``max`` are ``llvm.minnum``/``llvm.maxnum``. Signed 32- and 64-bit
``+ - *`` carry ``nsw`` (overflow is undefined, as in C), which lets LLVM widen
index arithmetic; narrower integers wrap.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from llvmlite import ir

from ember.codegen_llvm.builder_utils import declare_intrinsic, element_type, splat_const
from ember.errors import CompileError
from ember.tir import dtype as dt
from ember.tir.expr import BinaryOp, CompareOp

Flags = Sequence[str]
IntOp = Callable[[ir.IRBuilder, ir.Value, ir.Value, bool, Flags], ir.Value]
FloatOp = Callable[[ir.IRBuilder, ir.Value, ir.Value, Flags], ir.Value]


def _zero(v: ir.Value) -> ir.Constant:
    return splat_const(v.type, 0)


def _floordiv_int(b: ir.IRBuilder, x: ir.Value, y: ir.Value, signed: bool, f: Flags) -> ir.Value:
    if not signed:
        return b.udiv(x, y)
    q, r = b.sdiv(x, y), b.srem(x, y)
    # the remainder's sign differs from the divisor's: truncation rounded up, step down
    adjust = b.and_(
        b.icmp_signed("!=", r, _zero(r)),
        b.icmp_signed("!=", b.icmp_signed("<", r, _zero(r)), b.icmp_signed("<", y, _zero(y))),
    )
    return b.sub(q, b.zext(adjust, q.type))


def _floormod_int(b: ir.IRBuilder, x: ir.Value, y: ir.Value, signed: bool, f: Flags) -> ir.Value:
    if not signed:
        return b.urem(x, y)
    r = b.srem(x, y)
    adjust = b.and_(
        b.icmp_signed("!=", r, _zero(r)),
        b.icmp_signed("!=", b.icmp_signed("<", r, _zero(r)), b.icmp_signed("<", y, _zero(y))),
    )
    return b.select(adjust, b.add(r, y), r)


def _minmax_int(name: str) -> IntOp:
    def emit(b: ir.IRBuilder, x: ir.Value, y: ir.Value, signed: bool, f: Flags) -> ir.Value:
        fn = declare_intrinsic(b.module, f"llvm.{'s' if signed else 'u'}{name}", x.type, 2)
        return b.call(fn, [x, y])

    return emit


def _minmax_float(name: str) -> FloatOp:
    def emit(b: ir.IRBuilder, x: ir.Value, y: ir.Value, f: Flags) -> ir.Value:
        fn = declare_intrinsic(b.module, f"llvm.{name}", x.type, 2)
        return b.call(fn, [x, y], fastmath=tuple(f))

    return emit


def _floordiv_float(b: ir.IRBuilder, x: ir.Value, y: ir.Value, f: Flags) -> ir.Value:
    fn = declare_intrinsic(b.module, "llvm.floor", x.type, 1)
    return b.call(fn, [b.fdiv(x, y, flags=f)], fastmath=tuple(f))


def _floormod_float(b: ir.IRBuilder, x: ir.Value, y: ir.Value, f: Flags) -> ir.Value:
    return b.fsub(x, b.fmul(_floordiv_float(b, x, y, f), y, flags=f), flags=f)


def _wrapping(name: str) -> IntOp:
    def emit(b: ir.IRBuilder, x: ir.Value, y: ir.Value, signed: bool, f: Flags) -> ir.Value:
        flags = ["nsw"] if signed and element_type(x.type).width >= 32 else []
        return getattr(b, name)(x, y, flags=flags)

    return emit


def _div_int(b: ir.IRBuilder, x: ir.Value, y: ir.Value, signed: bool, f: Flags) -> ir.Value:
    return b.sdiv(x, y) if signed else b.udiv(x, y)


def _mod_int(b: ir.IRBuilder, x: ir.Value, y: ir.Value, signed: bool, f: Flags) -> ir.Value:
    return b.srem(x, y) if signed else b.urem(x, y)


INT_OPS: dict[BinaryOp, IntOp] = {
    BinaryOp.ADD: _wrapping("add"),
    BinaryOp.SUB: _wrapping("sub"),
    BinaryOp.MUL: _wrapping("mul"),
    BinaryOp.DIV: _div_int,
    BinaryOp.FLOORDIV: _floordiv_int,
    BinaryOp.FLOORMOD: _floormod_int,
    BinaryOp.TRUNCDIV: _div_int,
    BinaryOp.TRUNCMOD: _mod_int,
    BinaryOp.MIN: _minmax_int("min"),
    BinaryOp.MAX: _minmax_int("max"),
    BinaryOp.AND: lambda b, x, y, s, f: b.and_(x, y),
    BinaryOp.OR: lambda b, x, y, s, f: b.or_(x, y),
}

FLOAT_OPS: dict[BinaryOp, FloatOp] = {
    BinaryOp.ADD: lambda b, x, y, f: b.fadd(x, y, flags=f),
    BinaryOp.SUB: lambda b, x, y, f: b.fsub(x, y, flags=f),
    BinaryOp.MUL: lambda b, x, y, f: b.fmul(x, y, flags=f),
    BinaryOp.DIV: lambda b, x, y, f: b.fdiv(x, y, flags=f),
    BinaryOp.FLOORDIV: _floordiv_float,
    BinaryOp.FLOORMOD: _floormod_float,
    BinaryOp.TRUNCDIV: lambda b, x, y, f: _trunc(b, b.fdiv(x, y, flags=f), f),
    BinaryOp.TRUNCMOD: lambda b, x, y, f: b.frem(x, y, flags=f),
    BinaryOp.MIN: _minmax_float("minnum"),
    BinaryOp.MAX: _minmax_float("maxnum"),
}


def _trunc(b: ir.IRBuilder, x: ir.Value, f: Flags) -> ir.Value:
    return b.call(declare_intrinsic(b.module, "llvm.trunc", x.type, 1), [x], fastmath=tuple(f))


def emit_binary(
    b: ir.IRBuilder, op: BinaryOp, x: ir.Value, y: ir.Value, dtype: str, flags: Flags = ()
) -> ir.Value:
    """``x op y`` for operands of ``dtype`` (bfloat16 operands are floats here)."""
    if dt.is_float(dtype):
        fop = FLOAT_OPS.get(op)
        if fop is None:
            raise CompileError(f"operator '{op.value}' is not defined on floating-point {dtype}")
        return fop(b, x, y, flags)
    iop = INT_OPS[op]
    signed = not (dt.is_uint(dtype) or dt.is_bool(dtype))
    if dt.is_sub_byte_int(dtype) and op in _DIVISIONS:
        return _divide_4bit(b, iop, x, y, signed, flags)
    return iop(b, x, y, signed, flags)


_DIVISIONS = (
    BinaryOp.DIV,
    BinaryOp.FLOORDIV,
    BinaryOp.FLOORMOD,
    BinaryOp.TRUNCDIV,
    BinaryOp.TRUNCMOD,
)


def _divide_4bit(
    b: ir.IRBuilder, iop: IntOp, x: ir.Value, y: ir.Value, signed: bool, flags: Flags
) -> ir.Value:
    """An int4/uint4 division in i32, wrapped back to i4: ``-8 / -1`` is 8, which wraps to
    -8 (as in the interpreter and the printed CUDA), where ``sdiv i4`` would be undefined."""
    wide = ir.IntType(32)
    if isinstance(x.type, ir.VectorType):
        wide = ir.VectorType(wide, x.type.count)
    extend = b.sext if signed else b.zext
    out = iop(b, extend(x, wide), extend(y, wide), signed, flags)
    return b.trunc(out, x.type)


_FLOAT_CMP = {
    CompareOp.EQ: "==",
    CompareOp.NE: "!=",
    CompareOp.LT: "<",
    CompareOp.LE: "<=",
    CompareOp.GT: ">",
    CompareOp.GE: ">=",
}


def emit_compare(
    b: ir.IRBuilder, op: CompareOp, x: ir.Value, y: ir.Value, dtype: str, flags: Flags = ()
) -> ir.Value:
    """``x op y`` as ``i1`` (or a vector of ``i1``); ``!=`` is true when either side is NaN."""
    cmp = _FLOAT_CMP[op]
    if dt.is_float(dtype):
        if op is CompareOp.NE:
            return b.fcmp_unordered(cmp, x, y, flags=flags)
        return b.fcmp_ordered(cmp, x, y, flags=flags)
    if dt.is_uint(dtype) or dt.is_bool(dtype):
        return b.icmp_unsigned(cmp, x, y)
    return b.icmp_signed(cmp, x, y)
