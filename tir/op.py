"""The scalar functions TVM users call as ``tir.<name>`` / ``te.<name>``: math, bits, logic.

Each builds an expression node (mostly a :class:`~ember.tir.expr.Call` of an
:class:`~ember.tir.expr.Intrinsic`) after checking its operands' types, so a
misuse is an :class:`ArgumentError` where the user wrote it, not a compile error
later. Semantics follow TVM <= 0.19: ``round`` rounds halves away from zero and
``nearbyint`` to even; rounding functions return an integer argument unchanged;
``isnan``/``isinf`` of an integer are ``False`` and ``isfinite`` ``True``;
``clz`` gives an int32; ``if_then_else`` evaluates only the branch taken while
``select`` may evaluate both. ``call_pure_extern`` / ``call_extern`` call a C
(CPU) or CUDA device function by name.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import reduce
from typing import Any

from ember.errors import ArgumentError
from ember.tir import dtype as dt
from ember.tir import expr as E
from ember.tir.buffer import Buffer
from ember.tir.expr import (
    ExprLike,
    Intrinsic,
    PrimExpr,
    cast,
    const,
    floordiv,
    floormod,
    if_then_else,
    logical_and,
    logical_not,
    logical_or,
    select,
    truncdiv,
    truncmod,
)

I = Intrinsic  # noqa: E741 - short alias for the tables below


def _float_fn(op: Intrinsic, ints_pass_through: bool = False) -> Callable[..., PrimExpr]:
    def fn(*args: ExprLike) -> PrimExpr:
        e = E.call(op, *args)
        assert isinstance(e, E.Call)
        if not dt.is_float(e.dtype):
            if ints_pass_through and len(args) == 1:
                return e.args[0]  # floor / round ... of an integer is the integer (TVM)
            raise ArgumentError(
                f"{op.value} needs floating-point arguments, got {e.dtype}; "
                f"cast first, e.g. {op.value}(x.astype('float32'))"
            )
        return e

    fn.__name__ = op.value
    fn.__doc__ = f"``{op.value}`` of floating-point arguments (element-wise on vectors)."
    return fn


exp = _float_fn(I.EXP)
exp2 = _float_fn(I.EXP2)
exp10 = _float_fn(I.EXP10)
log = _float_fn(I.LOG)
log2 = _float_fn(I.LOG2)
log10 = _float_fn(I.LOG10)
log1p = _float_fn(I.LOG1P)
sqrt = _float_fn(I.SQRT)
rsqrt = _float_fn(I.RSQRT)
erf = _float_fn(I.ERF)
sigmoid = _float_fn(I.SIGMOID)
sin = _float_fn(I.SIN)
cos = _float_fn(I.COS)
tan = _float_fn(I.TAN)
asin = _float_fn(I.ASIN)
acos = _float_fn(I.ACOS)
atan = _float_fn(I.ATAN)
sinh = _float_fn(I.SINH)
cosh = _float_fn(I.COSH)
tanh = _float_fn(I.TANH)
asinh = _float_fn(I.ASINH)
acosh = _float_fn(I.ACOSH)
atanh = _float_fn(I.ATANH)
floor = _float_fn(I.FLOOR, ints_pass_through=True)
ceil = _float_fn(I.CEIL, ints_pass_through=True)
trunc = _float_fn(I.TRUNC, ints_pass_through=True)
round = _float_fn(I.ROUND, ints_pass_through=True)  # noqa: A001
nearbyint = _float_fn(I.NEARBYINT, ints_pass_through=True)
pow = _float_fn(I.POW)  # noqa: A001
power = pow
fmod = _float_fn(I.FMOD)
atan2 = _float_fn(I.ATAN2)
hypot = _float_fn(I.HYPOT)
copysign = _float_fn(I.COPYSIGN)
fma = _float_fn(I.FMA)


def abs(x: ExprLike) -> PrimExpr:  # noqa: A001
    """``|x|``; an unsigned integer or a bool is returned unchanged."""
    x = E.convert(x)
    if dt.is_uint(x.dtype) or dt.is_bool(x.dtype):
        return x
    return E.call(I.ABS, x)


def _predicate(op: Intrinsic, on_ints: bool) -> Callable[[ExprLike], PrimExpr]:
    def fn(x: ExprLike) -> PrimExpr:
        x = E.convert(x)
        result = dt.with_lanes("bool", dt.lanes_of(x.dtype))
        if not dt.is_float(x.dtype):
            return const(on_ints, result)  # an integer is never NaN nor infinite (TVM)
        return E.Call(result, op, (x,))

    fn.__name__ = op.value
    fn.__doc__ = f"``{op.value}(x)`` as a bool."
    return fn


isnan = _predicate(I.ISNAN, False)
isinf = _predicate(I.ISINF, False)
isfinite = _predicate(I.ISFINITE, True)


def popcount(x: ExprLike) -> PrimExpr:
    """The number of set bits of an integer, in its type."""
    return E.int_call(I.POPCOUNT, x)


def clz(x: ExprLike) -> PrimExpr:
    """Leading zero bits of an integer (as an int32); ``clz(0)`` is the bit width."""
    return E.int_call(I.CLZ, x)


def shift_left(x: ExprLike, y: ExprLike) -> PrimExpr:
    """``x << y`` on integers, as an intrinsic call every backend lowers."""
    return E.int_call(I.SHIFT_LEFT, x, y)


def shift_right(x: ExprLike, y: ExprLike) -> PrimExpr:
    """Arithmetic shift for signed types, logical for unsigned ones (as C and TVM)."""
    return E.int_call(I.SHIFT_RIGHT, x, y)


def bitwise_and(x: ExprLike, y: ExprLike) -> PrimExpr:
    """``x & y`` on integers, as an intrinsic call every backend lowers."""
    return E.int_call(I.BITWISE_AND, x, y)


def bitwise_or(x: ExprLike, y: ExprLike) -> PrimExpr:
    """``x | y`` on integers, as an intrinsic call every backend lowers."""
    return E.int_call(I.BITWISE_OR, x, y)


def bitwise_xor(x: ExprLike, y: ExprLike) -> PrimExpr:
    """``x ^ y`` on integers, as an intrinsic call every backend lowers."""
    return E.int_call(I.BITWISE_XOR, x, y)


def bitwise_not(x: ExprLike) -> PrimExpr:
    """``~x`` on integers, as an intrinsic call every backend lowers."""
    return E.int_call(I.BITWISE_NOT, x)


def all(*conds: ExprLike) -> PrimExpr:  # noqa: A001
    """The conjunction of one or more bool conditions (``te.all(i >= 1, i < n)``)."""
    if not conds:
        raise ArgumentError("all: expected at least one condition")
    return reduce(logical_and, conds[1:], E.convert(conds[0]))


def any(*conds: ExprLike) -> PrimExpr:  # noqa: A001
    """The disjunction of one or more bool conditions."""
    if not conds:
        raise ArgumentError("any: expected at least one condition")
    return reduce(logical_or, conds[1:], E.convert(conds[0]))


def _extern(op: Intrinsic, dtype: str, func_name: str, args: tuple[ExprLike, ...]) -> PrimExpr:
    if not isinstance(func_name, str) or not func_name.isidentifier():
        raise ArgumentError(
            f"{op.value}: the function name must be a C identifier, got {func_name!r}"
        )
    # vector operands pass as the target's vector type (TVM's ``__dp4a`` on int8x4: CUDA's
    # char4; on the CPU an LLVM vector argument)
    operands = tuple(E.convert(a) for a in args)
    return E.Call(dt.check_dtype(dtype), op, (E.StringImm(func_name), *operands))


def div(a: ExprLike, b: ExprLike) -> PrimExpr:
    """TVM's ``te.div``: ``a / b`` as C computes it, truncating toward zero for two integers
    (``-7 / 2 == -3``) and dividing exactly otherwise."""
    x, y = E.convert(a), E.convert(b)
    if dt.is_int(x.dtype) and dt.is_int(y.dtype):
        return truncdiv(x, y)
    return x / y


def vscale() -> PrimExpr:
    """TVM's ``tir.vscale()``: how many 128-bit granules a scalable vector register holds
    (Arm SVE). Ember's targets (x86 and other LLVM CPUs without scalable vectors, CUDA) have
    fixed-width vectors, where the granule count is 1, so this is the constant 1 and
    ``split(x, factor=4 * tir.vscale())`` splits by 4. Ember deliberately differs from TVM,
    which keeps the symbol for SVE targets; it has no scalable-vector code generation."""
    return const(1, "int32")


def indexdiv(a: ExprLike, b: ExprLike) -> PrimExpr:
    """TVM's division of non-negative indices: Ember lowers it as floor division, which
    agrees with truncation where both sides are non-negative and simplifies best."""
    return floordiv(a, b)


def indexmod(a: ExprLike, b: ExprLike) -> PrimExpr:
    """The remainder that goes with :func:`indexdiv` (floor modulo)."""
    return floormod(a, b)


def call_pure_extern(dtype: str, func_name: str, *args: ExprLike) -> PrimExpr:
    """A call of the side-effect-free C / CUDA function ``func_name`` returning ``dtype``.

    On the CPU the symbol must be in the process (libm is); CUDA prints the call by name.
    """
    return _extern(I.CALL_PURE_EXTERN, dtype, func_name, args)


def call_extern(dtype: str, func_name: str, *args: ExprLike) -> PrimExpr:
    """Like :func:`call_pure_extern`, for a function that may have side effects."""
    return _extern(I.CALL_EXTERN, dtype, func_name, args)


# The name under which :func:`reinterpret` travels as a pure extern call (CPU code only).
REINTERPRET_NAME = "llvm.ember.reinterpret"


def call_llvm_pure_intrin(dtype: str, name: str, *args: ExprLike) -> PrimExpr:
    """A side-effect-free LLVM intrinsic by name (TVM's ``call_llvm_pure_intrin``), e.g.
    ``llvm.x86.avx512.vpdpbusd.512``; vector operands are allowed. CPU code only: the
    tensor intrinsics of :mod:`ember.codegen_llvm.tensor_intrinsics` are made of these."""
    if not isinstance(name, str) or not name.startswith("llvm.") or name == REINTERPRET_NAME:
        raise ArgumentError(f"call_llvm_pure_intrin: expected an 'llvm.*' name, got {name!r}")
    operands = tuple(E.convert(a) for a in args)
    return E.Call(dt.check_dtype(dtype), I.CALL_PURE_EXTERN, (E.StringImm(name), *operands))


def reinterpret(dtype: str, value: ExprLike) -> PrimExpr:
    """The bits of ``value`` read as ``dtype`` of the same total width (TVM's
    ``tir.reinterpret``): ``uint8x4`` -> ``int32``, ``int32x16`` -> ``int8x64``. CPU code only."""
    v = E.convert(value)
    dtype = dt.check_dtype(dtype)

    def bits(d: str) -> int:
        return dt.bytes_of(dt.element_of(d)) * 8 * dt.lanes_of(d)

    if bits(dtype) != bits(v.dtype) or "bool" in (dt.element_of(dtype), dt.element_of(v.dtype)):
        raise ArgumentError(f"reinterpret: {v.dtype} and {dtype} differ in width")
    return E.Call(dtype, I.CALL_PURE_EXTERN, (E.StringImm(REINTERPRET_NAME), v))


def call_packed(func_name: str, *args: Any) -> PrimExpr:
    """A call of the function registered as ``func_name`` (``ember.register_func``), as TVM's
    ``tvm.tir.call_packed``: buffers (an extern stage's ``ins``/``outs``) arrive as arrays,
    other arguments as scalars. It runs on the host (CPU code, the interpreter); its value
    is an int32 status. A failing function raises ``PackedFuncError`` at the call site."""
    if not isinstance(func_name, str) or not func_name:
        raise ArgumentError(f"call_packed: the function name must be a str, got {func_name!r}")
    operands: list[PrimExpr] = [E.StringImm(func_name)]
    for a in args:
        if isinstance(a, Buffer):
            shape = tuple(E.convert(d) for d in a.shape)
            operands.append(E.Call("handle", I.PACK_ARRAY, (a.data, E.StringImm(a.dtype), *shape)))
            continue
        value = E.convert(a)
        if dt.lanes_of(value.dtype) != 1:
            raise ArgumentError(f"call_packed: '{func_name}' takes scalars, got {value.dtype}")
        operands.append(value)
    return E.Call("int32", I.CALL_PACKED, tuple(operands))


__all__ = [
    "abs", "acos", "acosh", "all", "any", "asin", "asinh", "atan", "atan2", "atanh",
    "bitwise_and", "bitwise_not", "bitwise_or", "bitwise_xor", "call_extern",
    "call_llvm_pure_intrin", "call_packed",
    "call_pure_extern", "cast", "ceil", "clz", "const", "copysign", "cos", "cosh", "div", "erf",
    "exp", "exp2", "exp10", "floor", "floordiv", "floormod", "fma", "fmod", "hypot",
    "if_then_else", "indexdiv", "indexmod", "isfinite", "isinf", "isnan", "log", "log1p",
    "log2", "log10", "reinterpret",
    "logical_and", "logical_not", "logical_or", "nearbyint", "popcount", "pow", "power",
    "round", "rsqrt", "select", "shift_left", "shift_right", "sigmoid", "sin", "sinh",
    "sqrt", "tan", "tanh", "trunc", "truncdiv", "truncmod", "vscale",
]  # fmt: skip
