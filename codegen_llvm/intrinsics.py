"""How each math intrinsic (:class:`ember.tir.expr.Intrinsic`) becomes LLVM IR.

Used by :mod:`ember.codegen_llvm.codegen` for ``Call`` nodes. The table
``INTRINSICS`` has one rule per intrinsic: an overloaded LLVM intrinsic
(``llvm.sin.v16f32`` works on vectors and LLVM expands it), a C math library
function called lane by lane (``erf`` has no LLVM intrinsic), or a short
formula (``sigmoid``, ``rsqrt``; ``exp``, the logarithms, ``tanh`` and ``erf`` of float32
vectors are inline polynomials from :mod:`.vecmath`, scalars call the C library). float32
and float64 compute natively; float16 and bfloat16 compute in float32 and
round back. ``ROUND`` rounds halves away from zero (C's ``round``, TVM's), ``NEARBYINT``
to even. Integer intrinsics (bit counts, shifts, bitwise operators, ``abs``) are in
``INT_INTRINSICS``, the float tests (``isnan``...) in ``PREDICATES``. A test checks that
the tables cover every intrinsic but the GPU's warp shuffles, which are a
:class:`CompileError` here, and the calls ``codegen`` emits by their structure
(``if_then_else``, extern calls).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from llvmlite import ir

from ember.codegen_llvm.builder_utils import (
    F32,
    I1,
    I32,
    declare,
    declare_intrinsic,
    element_type,
    lanes_of_type,
    splat_const,
)
from ember.codegen_llvm.casts import round_to_bfloat16
from ember.codegen_llvm.vecmath import (
    Features,
    vector_erf,
    vector_exp,
    vector_log,
    vector_log2,
    vector_log10,
    vector_tanh,
)
from ember.errors import CompileError
from ember.tir import dtype as dt
from ember.tir.expr import WARP_SHUFFLES, Intrinsic

Flags = Sequence[str]
Formula = Callable[[ir.IRBuilder, Sequence[ir.Value], Flags, Features], ir.Value]


@dataclass(frozen=True)
class IntrinsicRule:
    """One intrinsic: exactly one of ``llvm`` / ``libm`` / ``formula`` says how to emit it."""

    arity: int
    llvm: str | None = None  # "exp" -> llvm.exp.<type>
    libm: str | None = None  # "erf" -> erff / erf, called per lane
    formula: Formula | None = None


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


VectorFormula = Callable[[ir.IRBuilder, ir.Value, Features], ir.Value]


def _vector_or_llvm(name: str, vector: VectorFormula) -> Formula:
    """The inline ``vector`` formula for float32 vectors, else LLVM's ``name`` intrinsic
    (which calls the C library: per lane for vectors of other types)."""

    def emit(b: ir.IRBuilder, args: Sequence[ir.Value], flags: Flags, cpu: Features) -> ir.Value:
        if _is_f32_vector(args[0]):
            return vector(b, args[0], cpu)
        return _call_llvm(b, name, args, flags)

    return emit


_exp = _vector_or_llvm("exp", vector_exp)


def _tanh(b: ir.IRBuilder, args: Sequence[ir.Value], flags: Flags, cpu: Features) -> ir.Value:
    if _is_f32_vector(args[0]):
        return vector_tanh(b, args[0], cpu)
    return _call_libm(b, "tanh", args, flags)


def _erf(b: ir.IRBuilder, args: Sequence[ir.Value], flags: Flags, cpu: Features) -> ir.Value:
    if _is_f32_vector(args[0]):
        return vector_erf(b, args[0], cpu)
    return _call_libm(b, "erf", args, flags)


def _rsqrt(b: ir.IRBuilder, args: Sequence[ir.Value], flags: Flags, cpu: Features) -> ir.Value:
    root = _call_llvm(b, "sqrt", args, flags)
    return b.fdiv(splat_const(root.type, 1.0), root, flags=flags)


def _sigmoid(b: ir.IRBuilder, args: Sequence[ir.Value], flags: Flags, cpu: Features) -> ir.Value:
    (x,) = args
    one = splat_const(x.type, 1.0)
    e = _exp(b, [b.fneg(x, flags=flags)], flags, cpu)
    return b.fdiv(one, b.fadd(one, e, flags=flags), flags=flags)


def _fmod(b: ir.IRBuilder, args: Sequence[ir.Value], flags: Flags, cpu: Features) -> ir.Value:
    return b.frem(args[0], args[1], flags=flags)  # LLVM's frem is C's fmod


INTRINSICS: dict[Intrinsic, IntrinsicRule] = {
    Intrinsic.EXP: IntrinsicRule(1, formula=_exp),
    Intrinsic.EXP2: IntrinsicRule(1, llvm="exp2"),
    Intrinsic.EXP10: IntrinsicRule(1, libm="exp10"),
    Intrinsic.LOG: IntrinsicRule(1, formula=_vector_or_llvm("log", vector_log)),
    Intrinsic.LOG2: IntrinsicRule(1, formula=_vector_or_llvm("log2", vector_log2)),
    Intrinsic.LOG10: IntrinsicRule(1, formula=_vector_or_llvm("log10", vector_log10)),
    Intrinsic.LOG1P: IntrinsicRule(1, libm="log1p"),
    Intrinsic.SQRT: IntrinsicRule(1, llvm="sqrt"),
    Intrinsic.RSQRT: IntrinsicRule(1, formula=_rsqrt),
    Intrinsic.ERF: IntrinsicRule(1, formula=_erf),
    Intrinsic.SIGMOID: IntrinsicRule(1, formula=_sigmoid),
    Intrinsic.ABS: IntrinsicRule(1, llvm="fabs"),
    Intrinsic.FLOOR: IntrinsicRule(1, llvm="floor"),
    Intrinsic.CEIL: IntrinsicRule(1, llvm="ceil"),
    Intrinsic.TRUNC: IntrinsicRule(1, llvm="trunc"),
    Intrinsic.ROUND: IntrinsicRule(1, llvm="round"),  # halves away from zero
    Intrinsic.NEARBYINT: IntrinsicRule(1, llvm="roundeven"),  # halves to even
    Intrinsic.SIN: IntrinsicRule(1, llvm="sin"),
    Intrinsic.COS: IntrinsicRule(1, llvm="cos"),
    Intrinsic.TAN: IntrinsicRule(1, libm="tan"),
    Intrinsic.ASIN: IntrinsicRule(1, libm="asin"),
    Intrinsic.ACOS: IntrinsicRule(1, libm="acos"),
    Intrinsic.ATAN: IntrinsicRule(1, libm="atan"),
    Intrinsic.SINH: IntrinsicRule(1, libm="sinh"),
    Intrinsic.COSH: IntrinsicRule(1, libm="cosh"),
    Intrinsic.TANH: IntrinsicRule(1, formula=_tanh),
    Intrinsic.ASINH: IntrinsicRule(1, libm="asinh"),
    Intrinsic.ACOSH: IntrinsicRule(1, libm="acosh"),
    Intrinsic.ATANH: IntrinsicRule(1, libm="atanh"),
    Intrinsic.POW: IntrinsicRule(2, llvm="pow"),
    Intrinsic.FMOD: IntrinsicRule(2, formula=_fmod),
    Intrinsic.ATAN2: IntrinsicRule(2, libm="atan2"),
    Intrinsic.HYPOT: IntrinsicRule(2, libm="hypot"),
    Intrinsic.COPYSIGN: IntrinsicRule(2, llvm="copysign"),
    Intrinsic.FMA: IntrinsicRule(3, llvm="fma"),
}


def _int_abs(b: ir.IRBuilder, args: Sequence[ir.Value], signed: bool) -> ir.Value:
    (x,) = args
    if not signed:
        return x
    return b.call(declare_intrinsic(b.module, "llvm.abs", x.type, 1, [I1]), [x, ir.Constant(I1, 0)])


def _clz(b: ir.IRBuilder, args: Sequence[ir.Value], signed: bool) -> ir.Value:
    (x,) = args
    n = b.call(declare_intrinsic(b.module, "llvm.ctlz", x.type, 1, [I1]), [x, ir.Constant(I1, 0)])
    width, lanes = element_type(x.type).width, lanes_of_type(x.type)
    i32 = ir.VectorType(I32, lanes) if lanes > 1 else I32
    return n if width == 32 else (b.trunc(n, i32) if width > 32 else b.zext(n, i32))


def _bitwise_not(b: ir.IRBuilder, args: Sequence[ir.Value], signed: bool) -> ir.Value:
    return b.xor(args[0], splat_const(args[0].type, -1))


IntFormula = Callable[[ir.IRBuilder, Sequence[ir.Value], bool], ir.Value]
# Intrinsics of integer (and bool) operands; ``signed`` is the operands' signedness.
INT_INTRINSICS: dict[Intrinsic, IntFormula] = {
    Intrinsic.ABS: _int_abs,
    Intrinsic.POPCOUNT: lambda b, a, s: b.call(
        declare_intrinsic(b.module, "llvm.ctpop", a[0].type, 1), [a[0]]
    ),
    Intrinsic.CLZ: _clz,
    Intrinsic.SHIFT_LEFT: lambda b, a, s: b.shl(a[0], a[1]),
    Intrinsic.SHIFT_RIGHT: lambda b, a, s: b.ashr(a[0], a[1]) if s else b.lshr(a[0], a[1]),
    Intrinsic.BITWISE_AND: lambda b, a, s: b.and_(a[0], a[1]),
    Intrinsic.BITWISE_OR: lambda b, a, s: b.or_(a[0], a[1]),
    Intrinsic.BITWISE_XOR: lambda b, a, s: b.xor(a[0], a[1]),
    Intrinsic.BITWISE_NOT: _bitwise_not,
}


def _fabs(b: ir.IRBuilder, x: ir.Value) -> ir.Value:
    return b.call(declare_intrinsic(b.module, "llvm.fabs", x.type, 1), [x])


_INF = float("inf")
Predicate = Callable[[ir.IRBuilder, ir.Value], ir.Value]
# Float tests giving bools (i1); they hold under fast-math too, so no flags.
PREDICATES: dict[Intrinsic, Predicate] = {
    Intrinsic.ISNAN: lambda b, x: b.fcmp_unordered("uno", x, x),
    Intrinsic.ISINF: lambda b, x: b.fcmp_ordered("==", _fabs(b, x), splat_const(x.type, _INF)),
    Intrinsic.ISFINITE: lambda b, x: b.fcmp_ordered("<", _fabs(b, x), splat_const(x.type, _INF)),
}


def _emit_rule(
    b: ir.IRBuilder, rule: IntrinsicRule, args: Sequence[ir.Value], flags: Flags, cpu: Features
) -> ir.Value:
    if rule.formula is not None:
        return rule.formula(b, args, flags, cpu)
    if rule.llvm is not None:
        return _call_llvm(b, rule.llvm, args, flags)
    assert rule.libm is not None
    return _call_libm(b, rule.libm, args, flags)


def emit_intrinsic(
    b: ir.IRBuilder,
    op: Intrinsic,
    args: Sequence[ir.Value],
    dtype: str,
    fast: bool = False,
    arg_dtype: str | None = None,
    cpu: Features = frozenset(),
) -> ir.Value:
    """Emit ``op(args)`` for result ``dtype``; the arguments are of ``arg_dtype`` (which is
    ``dtype`` except for the :data:`OWN_RESULT_TYPE` intrinsics: ``isnan``, ``clz``...).
    ``cpu`` holds the target CPU's features, for instructions portable IR cannot name
    (``vscalefps`` in ``exp``); empty, the code runs on any CPU of the architecture."""
    arg_dtype = arg_dtype or dtype
    if op in WARP_SHUFFLES:
        raise CompileError(
            f"intrinsic '{op.value}' is a GPU warp shuffle: it exchanges values between the "
            "lanes of a warp, which CPU code does not have; build for a 'cuda' target"
        )
    if op is Intrinsic.LIKELY:
        return args[0]
    if not dt.is_float(arg_dtype):
        if op not in INT_INTRINSICS:
            raise CompileError(
                f"intrinsic '{op.value}' is defined for floating-point types, not {arg_dtype}; "
                "cast the argument to float32 first"
            )
        signed = not (dt.is_uint(arg_dtype) or dt.is_bool(arg_dtype))
        return INT_INTRINSICS[op](b, args, signed)
    if op in PREDICATES:
        return PREDICATES[op](b, args[0])
    rule = INTRINSICS.get(op)
    if rule is None:
        raise CompileError(f"intrinsic '{op.value}' is not defined for floating-point {dtype}")
    if len(args) != rule.arity:
        raise CompileError(f"intrinsic '{op.value}' takes {rule.arity} arguments, got {len(args)}")
    flags: Flags = ("fast",) if fast else ()
    base = dt.element_of(dtype)
    if base == "float16":
        wide = ir.VectorType(F32, dt.lanes_of(dtype)) if dt.lanes_of(dtype) > 1 else F32
        out = _emit_rule(b, rule, [b.fpext(a, wide) for a in args], flags, cpu)
        return b.fptrunc(out, args[0].type)
    out = _emit_rule(b, rule, args, flags, cpu)
    return round_to_bfloat16(b, out) if base == "bfloat16" else out
