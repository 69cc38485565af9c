"""What each TIR operator means to the reference interpreter, as tables of numpy functions.

Values in the interpreter are numpy scalars of the expression's storage type
(``np.float32``, ``np.int8``, ``np.bool_``, ...) or, for vector types, 1-D
numpy arrays of ``lanes`` elements; bfloat16 values are float32. numpy's own
scalar and array arithmetic then gives the semantics C has: float32 stays
float32, float16 rounds every operation to float16, integers wrap around (the
interpreter runs under ``np.errstate(all="ignore")``). The tables below add what
numpy spells differently from C: truncating division, division by zero of
integers (an error here, undefined behaviour in C), casts to bool and
bfloat16, an exactly rounded ``fma`` and ``erf`` (numpy has none), C's ``round``
(halves away from zero), ``clz``, and the C math library functions that
``call_pure_extern`` may name.

Every operator of :class:`BinaryOp`, :class:`CompareOp` and :class:`Intrinsic`
has an entry; ``tests/tir/test_interp.py`` checks that the tables are complete.
"""

from __future__ import annotations

import math
import operator
from collections.abc import Callable
from fractions import Fraction
from typing import Any

import numpy as np

from ember.errors import ArgumentError, InternalError
from ember.tir import dtype as dt
from ember.tir.bf16 import round_to_bf16
from ember.tir.expr import BinaryOp, CompareOp, Intrinsic

Value = Any  # a numpy scalar or a 1-D numpy array
BinaryFn = Callable[[Value, Value], Value]


def value_dtype(dtype: str) -> np.dtype:
    """The numpy type a value of ``dtype`` is computed in (bfloat16 computes in float32)."""
    base = dt.element_of(dtype)
    return np.dtype("float32") if base == "bfloat16" else dt.numpy_dtype(base)


# -- 4-bit integers: computed in int8/uint8, wrapped to 4 bits after every operation ----


def _wrap_int4(v: Value) -> Value:
    # keep the low nibble and sign-extend it: (x & 15) ^ 8 - 8 maps 8..15 to -8..-1
    return ((v & np.int8(15)) ^ np.int8(8)) - np.int8(8)


def _wrap_uint4(v: Value) -> Value:
    return v & np.uint8(15)


def wrap_fn(dtype: str) -> Callable[[Value], Value] | None:
    """The function wrapping a computed value to ``dtype``'s 4 bits, or None for other types.

    int4/uint4 values live in int8/uint8 (see :func:`ember.tir.dtype.numpy_dtype`); an
    operation's int8 result is wrapped to 4 bits, as LLVM's ``i4`` and the printed CUDA do.
    """
    base = dt.element_of(dtype)
    if base == "int4":
        return _wrap_int4
    if base == "uint4":
        return _wrap_uint4
    return None


def _wrapped(fn: BinaryFn, dtype: str) -> BinaryFn:
    wrap = wrap_fn(dtype)
    if wrap is None:
        return fn
    return lambda a, b: wrap(fn(a, b))


# -- integer division: floor (Python, numpy) and truncating (C) ------------------------


def _check_divisor(b: Value, where: Callable[[], str]) -> None:
    if isinstance(b, np.ndarray):
        if not b.all():
            raise InternalError(f"integer division by zero in {where()}")
    elif b == 0:
        raise InternalError(f"integer division by zero in {where()}")


def _truncdiv(a: Value, b: Value) -> Value:
    q = a // b
    # floor and truncation differ when the division is inexact and the signs differ
    return q + ((a % b != 0) & ((a < 0) != (b < 0))).astype(q.dtype)


def _int_division(op: BinaryOp, where: Callable[[], str]) -> BinaryFn:
    if op is BinaryOp.FLOORDIV:

        def fn(a: Value, b: Value) -> Value:
            _check_divisor(b, where)
            return a // b

    elif op is BinaryOp.FLOORMOD:

        def fn(a: Value, b: Value) -> Value:
            _check_divisor(b, where)
            return a % b

    elif op in (BinaryOp.TRUNCDIV, BinaryOp.DIV):  # C's '/' on integers truncates

        def fn(a: Value, b: Value) -> Value:
            _check_divisor(b, where)
            return _truncdiv(a, b)

    else:  # TRUNCMOD

        def fn(a: Value, b: Value) -> Value:
            _check_divisor(b, where)
            return a - _truncdiv(a, b) * b

    return fn


# -- integer min / max ------------------------------------------------------------------


def _scalar_min(a: Value, b: Value) -> Value:
    return a if a < b else (b if b <= a else a + b)


def _scalar_max(a: Value, b: Value) -> Value:
    return a if a > b else (b if b >= a else a + b)


def _logical_and(a: Value, b: Value) -> Value:
    return np.logical_and(a, b)


def _logical_or(a: Value, b: Value) -> Value:
    return np.logical_or(a, b)


_COMMON: dict[BinaryOp, BinaryFn] = {
    BinaryOp.ADD: operator.add,
    BinaryOp.SUB: operator.sub,
    BinaryOp.MUL: operator.mul,
    BinaryOp.AND: _logical_and,
    BinaryOp.OR: _logical_or,
}


def _float_floordiv(a: Value, b: Value) -> Value:
    return np.floor(a / b)


def _float_floormod(a: Value, b: Value) -> Value:
    return a - np.floor(a / b) * b


def _in_float32(fn: BinaryFn) -> BinaryFn:
    def run(a: Value, b: Value) -> Value:
        return fn(
            np.float32(a) if np.ndim(a) == 0 else a.astype(np.float32),
            np.float32(b) if np.ndim(b) == 0 else b.astype(np.float32),
        ).astype(np.float16)

    return run


# Float floor division and modulo as both code generators print them (``floorf(a / b)``,
# ``a - floorf(a / b) * b``), not numpy's ``//``/``%``, which differ on infinities and zeros
_FLOAT: dict[BinaryOp, BinaryFn] = {
    BinaryOp.DIV: operator.truediv,
    BinaryOp.FLOORDIV: _float_floordiv,
    BinaryOp.FLOORMOD: _float_floormod,
    BinaryOp.TRUNCDIV: lambda a, b: np.trunc(a / b),
    BinaryOp.TRUNCMOD: np.fmod,
}

_INT_DIVISION = (
    BinaryOp.DIV,
    BinaryOp.FLOORDIV,
    BinaryOp.FLOORMOD,
    BinaryOp.TRUNCDIV,
    BinaryOp.TRUNCMOD,
)


def binary_fn(op: BinaryOp, dtype: str, where: Callable[[], str] = lambda: "?") -> BinaryFn:
    """The function computing ``a <op> b`` for operands of ``dtype`` (scalar or vector).

    ``where`` describes the expression for error messages; it is called only on error.
    """
    return _wrapped(_binary_fn(op, dtype, where), dtype)


def _binary_fn(op: BinaryOp, dtype: str, where: Callable[[], str]) -> BinaryFn:
    vector = dt.lanes_of(dtype) > 1
    if op in _COMMON:
        return _COMMON[op]
    # float min/max are C's fmin/fmax (a NaN operand is dropped), as llvm.minnum/maxnum and
    # CUDA's fminf/fmaxf compute them; NaN-propagating ONNX ops build a select instead
    if op is BinaryOp.MIN:
        return np.fmin if vector or dt.is_float(dtype) else _scalar_min
    if op is BinaryOp.MAX:
        return np.fmax if vector or dt.is_float(dtype) else _scalar_max
    if dt.is_float(dtype):
        if op in (BinaryOp.FLOORDIV, BinaryOp.FLOORMOD) and dt.element_of(dtype) == "float16":
            return _in_float32(_FLOAT[op])  # the printed C runs them in float
        return _FLOAT[op]
    if op in _INT_DIVISION:
        return _int_division(op, where)
    raise InternalError(f"the interpreter has no rule for {op.name} on {dtype}")


COMPARE: dict[CompareOp, BinaryFn] = {
    CompareOp.EQ: operator.eq,
    CompareOp.NE: operator.ne,
    CompareOp.LT: operator.lt,
    CompareOp.LE: operator.le,
    CompareOp.GT: operator.gt,
    CompareOp.GE: operator.ge,
}

# -- intrinsics --------------------------------------------------------------------------


def _as_array(x: Value) -> np.ndarray:
    return np.asarray(x)


def _like(result: np.ndarray, x: Value) -> Value:
    """``result`` in the type of ``x``: a scalar for a scalar, an array for an array."""
    out = result.astype(np.asarray(x).dtype)
    return out if isinstance(x, np.ndarray) else out[()]


def _erf(x: Value) -> Value:
    values = _as_array(x).astype(np.float64).reshape(-1)
    result = np.array([math.erf(v) for v in values.tolist()], dtype=np.float64)
    return _like(result.reshape(np.shape(x)), x)


def _fma64(a: float, b: float, c: float) -> float:
    if hasattr(math, "fma"):  # Python 3.13+
        return math.fma(a, b, c)
    if not all(math.isfinite(v) for v in (a, b, c)):
        return a * b + c
    exact = Fraction(a) * Fraction(b) + Fraction(c)
    if exact == 0:  # then a * b is exact, and IEEE addition gives the zero its sign
        return a * b + c
    try:
        return float(exact)
    except OverflowError:  # beyond the largest double: C's fma rounds to an infinity
        return math.inf if exact > 0 else -math.inf


def _fma(a: Value, b: Value, c: Value) -> Value:
    """``a * b + c`` rounded once, like C's ``fma``."""
    kind = np.asarray(a).dtype
    a64, b64, c64 = (_as_array(v).astype(np.float64) for v in (a, b, c))
    if kind == np.float64:
        flat = [_fma64(*t) for t in zip(*(v.reshape(-1).tolist() for v in (a64, b64, c64)))]
        return _like(np.array(flat, dtype=np.float64).reshape(a64.shape), a)
    # float32 and narrower: the product is exact in float64; the sum, rounded to odd
    # (Boldo-Melquiond), then rounds correctly to the narrower type.
    p = a64 * b64
    s = p + c64
    bv = s - p
    err = (p - (s - bv)) + (c64 - bv)
    even = (s.view(np.int64) & 1) == 0
    fix = (err != 0) & even & np.isfinite(s)
    toward = np.where(err > 0, np.inf, -np.inf)
    s = np.where(fix, np.nextafter(s, toward), s)
    return _like(s, a)


def _rsqrt(x: Value) -> Value:
    one = np.asarray(x).dtype.type(1)
    return one / np.sqrt(x)


def _sigmoid(x: Value) -> Value:
    one = np.asarray(x).dtype.type(1)
    return one / (one + np.exp(-x))


def _likely(x: Value) -> Value:
    return x


def _round_half_away(x: Value) -> Value:
    """C's ``round``: halves away from zero (numpy's ``round`` goes to even)."""
    r = np.trunc(x)
    frac = np.asarray(x - r)  # exact
    with np.errstate(invalid="ignore"):  # inf - inf
        away = np.abs(frac) >= 0.5
    return _like(np.where(away, r + np.sign(x), r), x)


def _exp10(x: Value) -> Value:
    return np.power(np.asarray(x).dtype.type(10), x)


def _unsigned(x: Value) -> np.ndarray:
    a = np.asarray(x)
    return a.view(np.dtype(f"uint{a.dtype.itemsize * 8}")) if a.dtype != np.bool_ else a


def _popcount(x: Value) -> Value:
    return _like(np.bitwise_count(_unsigned(x)), x)


def _clz(x: Value) -> Value:
    """Leading zero bits as int32 (the bit width for 0, as llvm.ctlz and CUDA's __clz)."""
    u = _unsigned(x)
    bits = u.dtype.itemsize * 8
    length = np.zeros(u.shape, np.int32)
    for k in range(bits):
        length = np.where((u >> u.dtype.type(k)) != 0, np.int32(k + 1), length)
    out = (bits - length).astype(np.int32)
    return out if isinstance(x, np.ndarray) else out[()]


def _bitwise_not(x: Value) -> Value:
    return np.logical_not(x) if np.asarray(x).dtype == np.bool_ else np.invert(x)


INTRINSICS: dict[Intrinsic, Callable[..., Value]] = {
    Intrinsic.EXP: np.exp,
    Intrinsic.EXP2: np.exp2,
    Intrinsic.EXP10: _exp10,
    Intrinsic.LOG: np.log,
    Intrinsic.LOG2: np.log2,
    Intrinsic.LOG10: np.log10,
    Intrinsic.LOG1P: np.log1p,
    Intrinsic.SQRT: np.sqrt,
    Intrinsic.RSQRT: _rsqrt,
    Intrinsic.ERF: _erf,
    Intrinsic.SIGMOID: _sigmoid,
    Intrinsic.ABS: np.abs,
    Intrinsic.FLOOR: np.floor,
    Intrinsic.CEIL: np.ceil,
    Intrinsic.TRUNC: np.trunc,
    Intrinsic.ROUND: _round_half_away,
    Intrinsic.NEARBYINT: np.rint,  # half to even, as ONNX Round, llvm.nearbyint, CUDA rintf
    Intrinsic.SIN: np.sin,
    Intrinsic.COS: np.cos,
    Intrinsic.TAN: np.tan,
    Intrinsic.ASIN: np.arcsin,
    Intrinsic.ACOS: np.arccos,
    Intrinsic.ATAN: np.arctan,
    Intrinsic.SINH: np.sinh,
    Intrinsic.COSH: np.cosh,
    Intrinsic.TANH: np.tanh,
    Intrinsic.ASINH: np.arcsinh,
    Intrinsic.ACOSH: np.arccosh,
    Intrinsic.ATANH: np.arctanh,
    Intrinsic.POW: np.power,
    Intrinsic.FMOD: np.fmod,
    Intrinsic.ATAN2: np.arctan2,
    Intrinsic.HYPOT: np.hypot,
    Intrinsic.COPYSIGN: np.copysign,
    Intrinsic.FMA: _fma,
    Intrinsic.ISNAN: np.isnan,
    Intrinsic.ISINF: np.isinf,
    Intrinsic.ISFINITE: np.isfinite,
    Intrinsic.POPCOUNT: _popcount,
    Intrinsic.CLZ: _clz,
    Intrinsic.SHIFT_LEFT: np.left_shift,
    Intrinsic.SHIFT_RIGHT: np.right_shift,  # arithmetic for signed numpy integers, as C
    Intrinsic.BITWISE_AND: np.bitwise_and,
    Intrinsic.BITWISE_OR: np.bitwise_or,
    Intrinsic.BITWISE_XOR: np.bitwise_xor,
    Intrinsic.BITWISE_NOT: _bitwise_not,
    Intrinsic.LIKELY: _likely,
}

# C math library functions that call_pure_extern / call_extern may name, as numpy
# functions; the float32 ones carry an "f" suffix (expf) and compute in the argument type.
_LIBM: dict[str, Callable[..., Value]] = {
    "exp": np.exp, "exp2": np.exp2, "exp10": _exp10, "expm1": np.expm1, "log": np.log,
    "log2": np.log2, "log10": np.log10, "log1p": np.log1p, "sqrt": np.sqrt, "cbrt": np.cbrt,
    "sin": np.sin, "cos": np.cos, "tan": np.tan, "asin": np.arcsin, "acos": np.arccos,
    "atan": np.arctan, "sinh": np.sinh, "cosh": np.cosh, "tanh": np.tanh,
    "asinh": np.arcsinh, "acosh": np.arccosh, "atanh": np.arctanh, "erf": _erf,
    "fabs": np.abs, "floor": np.floor, "ceil": np.ceil, "trunc": np.trunc,
    "round": _round_half_away, "rint": np.rint, "nearbyint": np.rint, "pow": np.power,
    "fmod": np.fmod, "atan2": np.arctan2, "hypot": np.hypot, "copysign": np.copysign,
    "fmin": np.fmin, "fmax": np.fmax, "fma": _fma,
}  # fmt: skip


def _dp4a_bytes(x: Value, signed: bool) -> np.ndarray:
    """The four 8-bit lanes of a ``char4`` value (last axis 4) or of a packed 32-bit int
    (lane 0 in the low byte, as CUDA packs them), as int32."""
    arr = np.asarray(x)
    if arr.dtype.itemsize == 1 and arr.shape[-1:] == (4,):
        return arr.astype(np.int32)
    packed = arr.astype(np.uint32)[..., None] >> (np.arange(4, dtype=np.uint32) * 8)
    lanes = (packed & 0xFF).astype(np.uint8)
    return (lanes.view(np.int8) if signed else lanes).astype(np.int32)


def _dp4a(a: Value, b: Value, c: Value) -> Value:
    """CUDA's ``__dp4a(a, b, c)``: c + the dot product of the four byte lanes of a and b
    (signed lanes for ``char4``/``int`` operands; wraps modulo 2^32 as the hardware does)."""
    signed_a = np.asarray(a).dtype.kind == "i"
    signed_b = np.asarray(b).dtype.kind == "i"
    dot = (_dp4a_bytes(a, signed_a).astype(np.int64) * _dp4a_bytes(b, signed_b)).sum(axis=-1)
    total = dot + np.asarray(c).astype(np.int64)
    return total.astype(np.int64).astype(np.uint64).astype(np.uint32).view(np.int32)


EXTERN_FUNCTIONS: dict[str, Callable[..., Value]] = {
    **_LIBM,
    **{name + "f": fn for name, fn in _LIBM.items()},
    "__dp4a": _dp4a,  # the CUDA intrinsic TVM programs call on int8x4 (a vector extern call)
}


def extern_fn(name: str) -> Callable[..., Value]:
    """The numpy meaning of the C function ``name`` (an :class:`ArgumentError` if unknown)."""
    fn = EXTERN_FUNCTIONS.get(name)
    if fn is None:
        raise ArgumentError(
            f"call_pure_extern: the reference interpreter does not know the C function "
            f"'{name}'; it knows the C math library: {', '.join(sorted(_LIBM))} "
            "(and their float 'f' versions)"
        )
    return fn


# -- casts ----------------------------------------------------------------------------------


def cast_fn(dtype: str) -> Callable[[Value], Value]:
    """The function converting a value to ``dtype``: C semantics (float -> int truncates)."""
    base = dt.element_of(dtype)
    if base == "bool":
        return lambda v: v != 0
    target = value_dtype(base)
    wrap = wrap_fn(base)
    if wrap is not None:
        # through int64 first: a float or a wide integer converts to 4 bits by truncation
        # toward zero and then wrapping, as LLVM's fptosi/trunc to i4 and the printed CUDA
        return lambda v: wrap(v.astype(np.int64).astype(target))
    if base == "bfloat16":

        def to_bf16(v: Value) -> Value:
            rounded = round_to_bf16(np.asarray(v).astype(np.float32))
            return rounded if isinstance(v, np.ndarray) else rounded[()]

        return to_bf16
    # numpy's float -> int conversion truncates toward zero, as C does
    return lambda v: v.astype(target)


__all__ = [
    "COMPARE",
    "EXTERN_FUNCTIONS",
    "INTRINSICS",
    "extern_fn",
    "Value",
    "binary_fn",
    "cast_fn",
    "value_dtype",
    "wrap_fn",
]
