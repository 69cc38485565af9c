"""Element types narrower than the kernels' own: float8, float4, 4- and 2-bit integers.

ONNX has float8 (e4m3fn, e4m3fnuz, e5m2, e5m2fnuz, e8m0), float4 (e2m1) and int4/uint4,
int2/uint2 tensors; no LLVM or CUDA type holds them (TIR's ``int4`` computes, but a
kernel refuses an int4 argument whose bytes it has not seen written, as a model's
buffers are when they are bound). Kernels keep one value per byte (:data:`STORED_AS`): a
float's bits in a ``uint8`` (the low four bits for float4), an integer's value in an
``int8``/``uint8``. Only conversions look inside: :func:`decode` widens the bits to
float32 (exact), :func:`encode` rounds a float32 or float64 to them, all in integer
arithmetic on the value's bits, so every backend runs the same code without a float8
intrinsic (the interpreter, LLVM, CUDA and its emulator agree bit for bit).

The rules are ONNX's reference implementation (``onnx.reference.ops.op_cast``), which
made the conformance data: round to nearest, ties to even; ``saturate`` (Cast 19+, on
by default) clamps an overflow or an infinity to the largest finite value, else it is
the type's infinity (e5m2) or NaN; the ``fnuz`` types have one NaN (0x80) and no -0 (a
negative value that rounds to zero is +0); float4 has neither NaN nor infinity and
always saturates, a NaN becoming a zero of the opposite sign (ml_dtypes', the
reference's; ONNX's float4 notes say 6). e8m0 (a bare power of two, no sign) follows
``onnx.numpy_helper.to_float8e8m0`` with its ``round_mode`` (up, down, nearest) on the
float32 bits, NaN and infinity both giving its NaN (0xFF). 4- and 2-bit integers wrap,
as ONNX's reference (ml_dtypes) converts an integer: ``int2(3)`` is -1. A float is
truncated and wrapped too (``int4(9.7)`` is -7), as TVM's int4 does and ml_dtypes did up to
0.6 and the conformance data (onnx 1.22) expects; onnxruntime (1.32) wraps but rounds a
fraction to nearest first, and ml_dtypes 0.7 makes a float out of range 0.
"""

from __future__ import annotations

from dataclasses import dataclass

from ember.errors import ArgumentError
from ember.runtime.dtype import HELD_AS_BYTES
from ember.tir import dtype as dt
from ember.tir import expr as E
from ember.tir import op as _op
from ember.tir.te import operation as te
from ember.tir.te.tensor import Tensor


@dataclass(frozen=True)
class MiniFloat:
    """A float format of at most 8 bits: sign, exponent and mantissa widths and the bias,
    and ``style``, how it spells the special values: ``ieee`` (infinities and NaNs as
    IEEE does), ``fn`` (no infinity; NaN is all ones), ``fnuz`` (no infinity, no -0; NaN is
    the sign bit alone), ``finite`` (neither), ``e8m0`` (exponent only; NaN is 0xFF)."""

    exp_bits: int
    man_bits: int
    bias: int
    style: str

    @property
    def width(self) -> int:
        """Bits of a value: 8, or 4 for float4 (held in a byte's low bits)."""
        return self.exp_bits + self.man_bits + (0 if self.style == "e8m0" else 1)

    @property
    def sign_bit(self) -> int:
        return 1 << (self.exp_bits + self.man_bits)

    @property
    def max_bits(self) -> int:
        """The largest finite magnitude's bits (sign clear)."""
        top = self.sign_bit - 1
        return {"ieee": top - (1 << self.man_bits), "fn": top - 1}.get(self.style, top)


MINIFLOATS: dict[str, MiniFloat] = {
    "float8_e4m3fn": MiniFloat(4, 3, 7, "fn"),
    "float8_e4m3fnuz": MiniFloat(4, 3, 8, "fnuz"),
    "float8_e5m2": MiniFloat(5, 2, 15, "ieee"),
    "float8_e5m2fnuz": MiniFloat(5, 2, 16, "fnuz"),
    "float4_e2m1fn": MiniFloat(2, 1, 1, "finite"),
    "float8_e8m0fnu": MiniFloat(8, 0, 127, "e8m0"),
}

# 4- and 2-bit integers: (bits, signed), each held in the byte type named by STORED_AS
TINY_INTS: dict[str, tuple[int, bool]] = {
    "int4": (4, True),
    "uint4": (4, False),
    "int2": (2, True),
    "uint2": (2, False),
}

# The kernel dtype that holds each of these types (the runtime's table: artifacts and the
# graph's edge, frontend/narrow_dtypes.py, read it without loading this module)
STORED_AS: dict[str, str] = HELD_AS_BYTES

ROUND_MODES = ("up", "down", "nearest")

_F32_QNAN = 0x7FC00000
_I32_SIGN = -(1 << 31)  # the float32 sign bit as an int32


def _i32(v: int) -> E.PrimExpr:
    return E.const(v, "int32")


def decode(bits: E.PrimExpr, fmt: MiniFloat) -> E.PrimExpr:
    """The float32 value of a minifloat's bits (a ``uint8``); exact. Bits above a float4's
    low four are ignored, as ml_dtypes ignores them."""
    v = E.cast("int32", bits) & _i32((1 << fmt.width) - 1)
    if fmt.style == "e8m0":
        power = E.select(E.eq(v, _i32(0)), _i32(0x00400000), v << _i32(23))  # 0: 2**-127
        return _op.reinterpret("float32", E.select(E.eq(v, _i32(0xFF)), _i32(_F32_QNAN), power))
    m_bits = fmt.man_bits
    sign = E.select(E.ne(v & _i32(fmt.sign_bit), _i32(0)), _i32(_I32_SIGN), _i32(0))
    e = (v >> _i32(m_bits)) & _i32((1 << fmt.exp_bits) - 1)
    m = v & _i32((1 << m_bits) - 1)
    normal = ((e + _i32(127 - fmt.bias)) << _i32(23)) | (m << _i32(23 - m_bits))
    scale = E.const(2.0 ** (1 - fmt.bias - m_bits), "float32")  # exact: m times a power of 2
    subnormal = _op.reinterpret("int32", E.cast("float32", m) * scale)
    out = sign | E.select(E.eq(e, _i32(0)), subnormal, normal)
    if fmt.style == "fn":
        nan = E.eq(v & _i32(0x7F), _i32(0x7F))
        out = E.select(nan, sign | _i32(_F32_QNAN), out)
    elif fmt.style == "ieee":
        top = E.eq(e, _i32((1 << fmt.exp_bits) - 1))
        special = E.select(E.eq(m, _i32(0)), _i32(0x7F800000), _i32(_F32_QNAN))
        out = E.select(top, sign | special, out)
    elif fmt.style == "fnuz":
        out = E.select(E.eq(v, _i32(0x80)), _i32(_I32_SIGN | _F32_QNAN), out)
    return _op.reinterpret("float32", out)


def _round_magnitude(a: E.PrimExpr, fmt: MiniFloat, man: int, bias: int) -> E.PrimExpr:
    """The target's magnitude bits of a finite source magnitude ``a`` (the bits of
    ``|x|`` with ``man`` mantissa bits and exponent ``bias``), rounded to nearest even. A
    result past the largest finite value is left as it is, for the caller to spot."""
    idt = a.dtype

    def c(v: int) -> E.PrimExpr:
        return E.const(v, idt)

    mant = a & c((1 << man) - 1)
    e_t = (a >> c(man)) - c(bias - fmt.bias)  # the target's biased exponent
    sub = e_t < c(1)
    # normal: exponent and mantissa side by side, shifted down to the target's mantissa;
    # subnormal: the significand with its leading one, shifted by as much more as the
    # exponent is short (at most man + 2: everything then rounds to zero)
    val = E.select(sub, mant | c(1 << man), (E.max_(e_t, c(0)) << c(man)) | mant)
    short = E.min_(c(man - fmt.man_bits + 1) - e_t, c(man + 2))
    shift = E.select(sub, short, c(man - fmt.man_bits))
    r = val >> shift
    rem = val - (r << shift)
    half = c(1) << (shift - c(1))
    up = (rem > half) | (E.eq(rem, half) & E.eq(r & c(1), c(1)))
    return r + E.select(up, c(1), c(0))


def encode(x: E.PrimExpr, fmt: MiniFloat, saturate: bool = True) -> E.PrimExpr:
    """The bits (``uint8``) of ``x`` rounded to ``fmt``; a float64 is rounded from its own
    bits, any other type from float32 (exact for float16, bfloat16 and every integer the
    format can reach). See the module notes for the special values."""
    if fmt.style == "e8m0":
        return encode_e8m0(x, saturate, "up")
    wide = dt.element_of(x.dtype) == "float64"
    idt, man, bias, width = ("int64", 52, 1023, 64) if wide else ("int32", 23, 127, 32)
    bits = _op.reinterpret(idt, x if wide else E.cast("float32", x))

    def c(v: int) -> E.PrimExpr:
        return E.const(v, idt)

    negative = bits < c(0)
    a = bits & c((1 << (width - 1)) - 1)
    inf_bits = ((1 << (width - 1 - man)) - 1) << man
    r = _round_magnitude(a, fmt, man, bias)
    s = E.select(negative, _i32(fmt.sign_bit), _i32(0))
    nan, big = _specials(fmt, s, negative, saturate)
    r32 = E.cast("int32", E.min_(r, c(fmt.sign_bit - 1)))  # past it: an overflow anyway
    finite = s | r32
    if fmt.style == "fnuz":
        finite = E.select(E.eq(r32, _i32(0)), _i32(0), finite)  # no -0
    too_big = E.eq(a, c(inf_bits)) | (r > c(fmt.max_bits))
    out = E.select(a > c(inf_bits), nan, E.select(too_big, big, finite))
    return E.cast("uint8", out)


def _specials(
    fmt: MiniFloat, s: E.PrimExpr, negative: E.PrimExpr, saturate: bool
) -> tuple[E.PrimExpr, E.PrimExpr]:
    """The bits (int32) a NaN and an infinity or overflow encode to, ``s`` the sign bit."""
    most, sign = fmt.max_bits, fmt.sign_bit
    if fmt.style == "finite":  # always saturates; a NaN is a zero of the other sign
        return E.select(negative, _i32(0), _i32(sign)), s | _i32(most)
    if fmt.style == "fnuz":  # one NaN, unsigned
        return _i32(sign), (s | _i32(most)) if saturate else _i32(sign)
    if fmt.style == "fn":  # NaN: all ones, signed; no infinity
        return s | _i32(sign - 1), s | _i32(most if saturate else sign - 1)
    inf = most + 1  # ieee: the quiet NaN sets the mantissa's top bit
    return s | _i32(inf | (1 << (fmt.man_bits - 1))), s | _i32(most if saturate else inf)


def encode_e8m0(x: E.PrimExpr, saturate: bool, round_mode: str) -> E.PrimExpr:
    """The e8m0 bits (``uint8``) of ``x``, as ``onnx.numpy_helper.to_float8e8m0``: the
    float32 exponent, rounded by ``round_mode`` on the mantissa bits; the sign is
    dropped; with ``saturate``, 0xFE never rounds up into 0xFF (NaN)."""
    if round_mode not in ROUND_MODES:
        raise ArgumentError(f"round_mode must be one of {ROUND_MODES}, got {round_mode!r}")
    f = _op.reinterpret("int32", E.cast("float32", x))
    exponent = (f >> _i32(23)) & _i32(0xFF)

    def has(mask: int) -> E.PrimExpr:
        return E.ne(f & _i32(mask), _i32(0))

    if round_mode == "up":
        up = has(0x7FFFFF)
    elif round_mode == "nearest":
        up = has(0x400000) & (has(0x200000) | has(0x1FFFFF) | (exponent > _i32(0)))
    else:
        up = E.const(False, "bool")
    if saturate:
        up = up & E.ne(exponent, _i32(0xFE))
    rounded = exponent + E.select(up, _i32(1), _i32(0))
    return E.cast("uint8", E.select(E.eq(exponent, _i32(0xFF)), _i32(0xFF), rounded))


def wrap_int(x: E.PrimExpr, dtype: str) -> E.PrimExpr:
    """``x`` (any number) as 4- or 2-bit ``dtype``, wrapped: a float is truncated to an
    int32 first (see the module notes for a float out of range). Held in its byte type
    (``STORED_AS``)."""
    bits, signed = TINY_INTS[dtype]
    v = E.cast("int32", x) & _i32((1 << bits) - 1)
    if signed:  # sign-extend without shifting a negative value (undefined in C)
        half = _i32(1 << (bits - 1))
        v = (v ^ half) - half
    return E.cast(STORED_AS[dtype], v)


def convert(
    x: E.PrimExpr, src: str, dst: str, saturate: bool = True, round_mode: str = "up"
) -> E.PrimExpr:
    """One element ``x`` of type ``src`` as ``dst``; either may be a minifloat or a 4- or
    2-bit integer (``x`` then holds its bits or value in its ``STORED_AS`` type), the
    other any kernel dtype. A minifloat widens to float32 first (exact)."""
    v = decode(x, MINIFLOATS[src]) if src in MINIFLOATS else x
    if dst in MINIFLOATS:
        if dst == "float8_e8m0fnu":
            return encode_e8m0(v, saturate, round_mode)
        return encode(v, MINIFLOATS[dst], saturate)
    if dst in TINY_INTS:
        return wrap_int(v, dst)
    if dt.element_of(v.dtype) == "float64" and dst == "float16":
        v = E.cast("float32", v)  # as topi's cast: no __truncdfhf2 in JIT code
    return E.cast(dst, v)


def narrow_cast(
    X: Tensor, src: str, dst: str, saturate: bool = True, round_mode: str = "up"
) -> Tensor:
    """Each element of ``X`` (of type ``src``) converted to ``dst`` by :func:`convert`."""
    return te.compute(
        X.shape,
        lambda *i: convert(X[i], src, dst, saturate, round_mode),
        name="cast",
        tag="elementwise",
    )


__all__ = [
    "MINIFLOATS",
    "ROUND_MODES",
    "STORED_AS",
    "TINY_INTS",
    "MiniFloat",
    "convert",
    "decode",
    "encode",
    "encode_e8m0",
    "narrow_cast",
    "wrap_int",
]
