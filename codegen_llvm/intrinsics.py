"""How each math intrinsic (:class:`ember.tir.expr.Intrinsic`) becomes LLVM IR.

Used by :mod:`ember.codegen_llvm.codegen` for ``Call`` nodes. The table
``INTRINSICS`` has one rule per intrinsic: an overloaded LLVM intrinsic
(``llvm.sin.v16f32`` works on vectors and LLVM expands it), a C math library
function called lane by lane (``erf`` has no LLVM intrinsic), or a short
formula (``sigmoid``, ``rsqrt``; ``exp`` and ``tanh`` of float32 vectors are
inline polynomials from :mod:`.vecmath`, scalars call the C library). float32
and float64 compute natively; float16 and bfloat16 compute in float32 and
round back. ``ROUND`` rounds half
to even, like numpy. A test checks that the table covers every intrinsic but
the GPU's warp shuffles, which are a :class:`CompileError` here.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from llvmlite import ir

from ember.codegen_llvm.builder_utils import (
    F32,
    I1,
    declare,
    declare_intrinsic,
    element_type,
    lanes_of_type,
    splat_const,
)
from ember.codegen_llvm.casts import round_to_bfloat16
from ember.codegen_llvm.vecmath import vector_exp, vector_tanh
from ember.errors import CompileError
from ember.tir import dtype as dt
from ember.tir.expr import WARP_SHUFFLES, Intrinsic

Flags = Sequence[str]
Formula = Callable[[ir.IRBuilder, Sequence[ir.Value], Flags], ir.Value]


@dataclass(frozen=True)
class IntrinsicRule:
    """One intrinsic: exactly one of ``llvm`` / ``libm`` / ``formula`` says how to emit it."""

    arity: int
    llvm: str | None = None  # "exp" -> llvm.exp.<type>
    libm: str | None = None  # "erf" -> erff / erf, called per lane
    formula: Formula | None = None
    ints: bool = False  # also defined on integer dtypes


def _call_llvm(b: ir.IRBuilder, name: str, args: Sequence[ir.Value], flags: Flags) -> ir.Value:
    fn = declare_intrinsic(b.module, f"llvm.{name}", args[0].type, len(args))
    return b.call(fn, list(args), fastmath=tuple(flags))


def _call_libm(b: ir.IRBuilder, name: str, args: Sequence[ir.Value], flags: Flags) -> ir.Value:
    """Call the scalar C function on each lane (C has no vector math functions)."""
    scalar = element_type(args[0].type)
    cname = name + ("f" if scalar == F32 else "")
    fn = declare(b.module, cname, scalar, [scalar] * len(args))
    lanes = lanes_of_type(args[0].type)
    if lanes == 1:
        return b.call(fn, list(args), fastmath=tuple(flags))
    out: ir.Value = ir.Constant(args[0].type, ir.Undefined)
    for lane in range(lanes):
        idx = ir.Constant(ir.IntType(32), lane)
        scalars = [b.extract_element(a, idx) for a in args]
        out = b.insert_element(out, b.call(fn, scalars, fastmath=tuple(flags)), idx)
    return out


def _is_f32_vector(v: ir.Value) -> bool:
    return isinstance(v.type, ir.VectorType) and v.type.element == F32


def _exp(b: ir.IRBuilder, args: Sequence[ir.Value], flags: Flags) -> ir.Value:
    if _is_f32_vector(args[0]):
        return vector_exp(b, args[0], flags)
    return _call_llvm(b, "exp", args, flags)


def _tanh(b: ir.IRBuilder, args: Sequence[ir.Value], flags: Flags) -> ir.Value:
    if _is_f32_vector(args[0]):
        return vector_tanh(b, args[0], flags)
    return _call_libm(b, "tanh", args, flags)


def _rsqrt(b: ir.IRBuilder, args: Sequence[ir.Value], flags: Flags) -> ir.Value:
    root = _call_llvm(b, "sqrt", args, flags)
    return b.fdiv(splat_const(root.type, 1.0), root, flags=flags)


def _sigmoid(b: ir.IRBuilder, args: Sequence[ir.Value], flags: Flags) -> ir.Value:
    (x,) = args
    one = splat_const(x.type, 1.0)
    e = _exp(b, [b.fneg(x, flags=flags)], flags)
    return b.fdiv(one, b.fadd(one, e, flags=flags), flags=flags)


INTRINSICS: dict[Intrinsic, IntrinsicRule] = {
    Intrinsic.EXP: IntrinsicRule(1, formula=_exp),
    Intrinsic.LOG: IntrinsicRule(1, llvm="log"),
    Intrinsic.SQRT: IntrinsicRule(1, llvm="sqrt"),
    Intrinsic.RSQRT: IntrinsicRule(1, formula=_rsqrt),
    Intrinsic.TANH: IntrinsicRule(1, formula=_tanh),
    Intrinsic.ERF: IntrinsicRule(1, libm="erf"),
    Intrinsic.SIGMOID: IntrinsicRule(1, formula=_sigmoid),
    Intrinsic.POW: IntrinsicRule(2, llvm="pow"),
    Intrinsic.ABS: IntrinsicRule(1, llvm="fabs", ints=True),
    Intrinsic.FLOOR: IntrinsicRule(1, llvm="floor"),
    Intrinsic.CEIL: IntrinsicRule(1, llvm="ceil"),
    Intrinsic.ROUND: IntrinsicRule(1, llvm="roundeven"),
    Intrinsic.FMA: IntrinsicRule(3, llvm="fma"),
    Intrinsic.SIN: IntrinsicRule(1, llvm="sin"),
    Intrinsic.COS: IntrinsicRule(1, llvm="cos"),
    Intrinsic.LIKELY: IntrinsicRule(1, formula=lambda b, args, flags: args[0], ints=True),
}


def _emit_int(b: ir.IRBuilder, op: Intrinsic, args: Sequence[ir.Value], dtype: str) -> ir.Value:
    (x,) = args
    if op is Intrinsic.LIKELY or dt.is_uint(dtype) or dt.is_bool(dtype):
        return x
    fn = declare_intrinsic(b.module, "llvm.abs", x.type, 1, [I1])
    return b.call(fn, [x, ir.Constant(I1, 0)])


def _emit_rule(
    b: ir.IRBuilder, rule: IntrinsicRule, args: Sequence[ir.Value], flags: Flags
) -> ir.Value:
    if rule.formula is not None:
        return rule.formula(b, args, flags)
    if rule.llvm is not None:
        return _call_llvm(b, rule.llvm, args, flags)
    assert rule.libm is not None
    return _call_libm(b, rule.libm, args, flags)


def emit_intrinsic(
    b: ir.IRBuilder, op: Intrinsic, args: Sequence[ir.Value], dtype: str, fast: bool = False
) -> ir.Value:
    """Emit ``op(args)`` for result ``dtype`` (all arguments already of that dtype)."""
    rule = INTRINSICS.get(op)
    if op in WARP_SHUFFLES:
        raise CompileError(
            f"intrinsic '{op.value}' is a GPU warp shuffle: it exchanges values between the "
            "lanes of a warp, which CPU code does not have; build for a 'cuda' target"
        )
    if rule is None:
        raise CompileError(f"the LLVM backend has no rule for intrinsic '{op.value}'")
    if len(args) != rule.arity:
        raise CompileError(f"intrinsic '{op.value}' takes {rule.arity} arguments, got {len(args)}")
    if not dt.is_float(dtype):
        if not rule.ints:
            raise CompileError(
                f"intrinsic '{op.value}' is defined for floating-point types, not {dtype}; "
                "cast the argument to float32 first"
            )
        return _emit_int(b, op, args, dtype)
    if op is Intrinsic.LIKELY:
        return args[0]
    flags: Flags = ("fast",) if fast else ()
    base = dt.element_of(dtype)
    if base == "float16":
        wide = ir.VectorType(F32, dt.lanes_of(dtype)) if dt.lanes_of(dtype) > 1 else F32
        out = _emit_rule(b, rule, [b.fpext(a, wide) for a in args], flags)
        return b.fptrunc(out, args[0].type)
    out = _emit_rule(b, rule, args, flags)
    return round_to_bfloat16(b, out) if base == "bfloat16" else out
