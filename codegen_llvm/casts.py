"""Conversions between Ember dtypes in LLVM registers and memory.

Used by :mod:`ember.codegen_llvm.codegen` for ``Cast`` nodes and by the load and
store code for the two dtypes whose register form differs from their memory
form: ``bool`` is ``i1`` in registers and a byte in memory; ``bfloat16`` is a
``float`` in registers (always holding a value exactly representable in
bfloat16) and the upper 16 bits of that float in memory. Rounding to bfloat16
is round-to-nearest-even, and NaN stays a quiet NaN. ``int4``/``uint4`` are ``i4`` in
registers (so every operation wraps to 4 bits) and one sign- or zero-extended byte in
memory; a float converts to them through ``i32`` and wraps, where a direct ``fptosi`` to
``i4`` would give poison for anything outside -8..7.
"""

from __future__ import annotations

import math

import numpy as np
from llvmlite import ir

from ember.codegen_llvm.builder_utils import (
    F32,
    I8,
    I16,
    I32,
    lanes_of_type,
    reg_type,
    splat,
    splat_const,
)
from ember.tir import dtype as dt


def _vec(ty: ir.Type, lanes: int) -> ir.Type:
    return ty if lanes == 1 else ir.VectorType(ty, lanes)


def round_to_bfloat16(b: ir.IRBuilder, value: ir.Value) -> ir.Value:
    """Round a float (scalar or vector) to the nearest bfloat16, ties to even; stays a float."""
    lanes = lanes_of_type(value.type)
    i32 = _vec(I32, lanes)
    bits = b.bitcast(value, i32)
    lsb = b.and_(b.lshr(bits, splat_const(i32, 16)), splat_const(i32, 1))
    biased = b.add(b.add(bits, splat_const(i32, 0x7FFF)), lsb)
    rounded = b.and_(biased, splat_const(i32, 0xFFFF0000))
    is_nan = b.fcmp_unordered("uno", value, value)
    quiet_nan = splat_const(i32, 0x7FC00000)
    return b.bitcast(b.select(is_nan, quiet_nan, rounded), value.type)


def round_constant_to_bfloat16(value: float) -> float:
    """The float32 holding ``value`` rounded to bfloat16 (as :func:`round_to_bfloat16` does)."""
    if math.isnan(value):
        return value
    bits = int(np.array(value, dtype=np.float32).view(np.uint32))
    rounded = ((bits + 0x7FFF + ((bits >> 16) & 1)) & 0xFFFF0000) & 0xFFFFFFFF
    return float(np.array(rounded, dtype=np.uint32).view(np.float32))


def bfloat16_from_bits(b: ir.IRBuilder, bits: ir.Value) -> ir.Value:
    """``i16`` bfloat16 bits (scalar or vector) to the float they stand for."""
    lanes = lanes_of_type(bits.type)
    wide = b.zext(bits, _vec(I32, lanes))
    return b.bitcast(b.shl(wide, splat_const(wide.type, 16)), _vec(F32, lanes))


def bfloat16_to_bits(b: ir.IRBuilder, value: ir.Value) -> ir.Value:
    """A float to its rounded bfloat16 bits as ``i16``."""
    lanes = lanes_of_type(value.type)
    bits = b.bitcast(round_to_bfloat16(b, value), _vec(I32, lanes))
    return b.trunc(b.lshr(bits, splat_const(bits.type, 16)), _vec(I16, lanes))


def to_memory(b: ir.IRBuilder, value: ir.Value, dtype: str) -> ir.Value:
    """A register value of ``dtype`` in its memory form."""
    base = dt.element_of(dtype)
    if base == "bool":
        return b.zext(value, _vec(I8, lanes_of_type(value.type)))
    if base == "bfloat16":
        return bfloat16_to_bits(b, value)
    if base == "int4":
        return b.sext(value, _vec(I8, lanes_of_type(value.type)))
    if base == "uint4":
        return b.zext(value, _vec(I8, lanes_of_type(value.type)))
    return value


def from_memory(b: ir.IRBuilder, value: ir.Value, dtype: str) -> ir.Value:
    """A loaded memory value of ``dtype`` in its register form."""
    base = dt.element_of(dtype)
    if base == "bool":
        return b.icmp_unsigned("!=", value, splat_const(value.type, 0))
    if base == "bfloat16":
        return bfloat16_from_bits(b, value)
    if dt.is_sub_byte_int(base):  # the low 4 bits: a byte out of range wraps, as elsewhere
        return b.trunc(value, reg_type(dt.with_lanes(base, lanes_of_type(value.type))))
    return value


def _register_base(dtype: str) -> str:
    """The dtype whose arithmetic the register form follows (bfloat16 computes as float32)."""
    base = dt.element_of(dtype)
    return "float32" if base == "bfloat16" else base


def _convert(b: ir.IRBuilder, v: ir.Value, src: str, dst: str, lanes: int) -> ir.Value:
    """Convert between register forms of two scalar base dtypes (``src != dst``)."""
    to = reg_type(dt.with_lanes(dst, lanes))
    if dst == "bool":
        if dt.is_float(src):
            return b.fcmp_unordered("!=", v, splat_const(v.type, 0.0))
        return b.icmp_unsigned("!=", v, splat_const(v.type, 0))
    if src == "bool":
        return b.uitofp(v, to) if dt.is_float(dst) else b.zext(v, to)
    if dt.is_int(src) and dt.is_int(dst):
        sb, db = dt.bits_of(src), dt.bits_of(dst)
        if sb == db:
            return v
        if sb > db:
            return b.trunc(v, to)
        return b.zext(v, to) if dt.is_uint(src) else b.sext(v, to)
    if dt.is_int(src):
        return b.uitofp(v, to) if dt.is_uint(src) else b.sitofp(v, to)
    if dt.is_sub_byte_int(dst):
        return b.trunc(b.fptosi(v, _vec(I32, lanes)), to)  # wraps, where fptosi to i4 is poison
    if dt.is_int(dst):
        return b.fptoui(v, to) if dt.is_uint(dst) else b.fptosi(v, to)
    if dt.bits_of(src) < dt.bits_of(dst):
        return b.fpext(v, to)
    return b.fptrunc(v, to)


def emit_cast(b: ir.IRBuilder, value: ir.Value, src: str, dst: str) -> ir.Value:
    """Convert ``value`` of dtype ``src`` to ``dst`` (a scalar source is splat to dst's lanes)."""
    lanes = dt.lanes_of(dst)
    if dt.lanes_of(src) == 1 and lanes > 1:
        value = splat(b, value, lanes)
    s, d = _register_base(src), _register_base(dst)
    out = value if s == d else _convert(b, value, s, d, lanes)
    if dt.element_of(dst) == "bfloat16" and dt.element_of(src) != "bfloat16":
        out = round_to_bfloat16(b, out)
    return out
