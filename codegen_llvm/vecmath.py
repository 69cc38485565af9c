"""Inline vector ``exp``, ``log``, ``tanh`` and ``erf`` for float32, so they run at SIMD speed.

Used by :mod:`ember.codegen_llvm.intrinsics` for float32 vectors (and for
float16/bfloat16 vectors, which compute in float32). LLVM has no vector math
library here: it would expand ``llvm.exp.v16f32`` into sixteen calls to
``expf``. These are the classic Cephes single-precision algorithms, written with
LLVM vector instructions and ``fmuladd``:

* ``exp``: ``x = n*ln2 + r`` with ``|r| <= ln2/2`` (ln2 split in two for an
  exact reduction), a degree-6 polynomial for ``e^r``, and ``2^n`` applied by
  AVX-512's ``vscalefps`` where the target has it (one instruction: 16 in all against
  26, softmax's row loop 1.15x faster on Zen 4), else by two multiplies by powers of two
  made from their bits (``llvm.ldexp`` would call ``ldexpf`` per lane without AVX-512);
  either way results underflow gradually to subnormals and overflow to infinity where
  ``expf`` does, and NaN passes through.
* ``log`` (and ``log2``, ``log10``): ``x = 2^e * m`` with ``m`` in ``[sqrt(1/2), sqrt(2))``
  read from the bits (subnormals scaled up by ``2^23`` first), a degree-9 polynomial for
  ``log(m)``, and ``e`` added back with ln2 split in two. Zero gives ``-inf``, negatives
  NaN, infinity itself; ``log2`` of a power of two is exact.
* ``tanh``: an odd polynomial for ``|x| < 0.625``, else
  ``sign(x) * (1 - 2 / (exp(2|x|) + 1))``.
* ``erf``: the rational ``x P(x²) / Q(x²)`` that graphs compute it with
  (:func:`ember.tir.topi.activation.erf`, its coefficients and error bound there), so
  ``te.erf`` and an ONNX Erf give the same numbers; libm's ``erff`` lane by lane was
  about 40 times slower.

Both are within a few units in the last place of the correctly rounded result
(the tests compare with numpy at float32 tolerance).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from llvmlite import ir

from ember.codegen_llvm.builder_utils import (
    F32,
    I32,
    declare,
    declare_intrinsic,
    lanes_of_type,
    splat_const,
)
from ember.tir.topi.activation import ERF_CLAMP, ERF_P, ERF_Q

Features = frozenset[str]  # the target CPU's LLVM features (empty: not known)

_LOG2E = 1.44269504088896341
_LN2_HI = 0.693359375
_LN2_LO = -2.12194440e-4
_EXP_POLY = (1.9875691500e-4, 1.3981999507e-3, 8.3334519073e-3, 4.1665795894e-2,
             1.6666665459e-1, 5.0000001201e-1)  # fmt: skip
_LOG_POLY = (7.0376836292e-2, -1.1514610310e-1, 1.1676998740e-1, -1.2420140846e-1,
             1.4249322787e-1, -1.6668057665e-1, 2.0000714765e-1, -2.4999993993e-1,
             3.3333331174e-1)  # fmt: skip
_SQRT_HALF = 0.707106781186547524
_FLT_MIN = 1.17549435e-38  # the smallest normal float32
_LOG10E = 0.434294481903251828
_LOG10_2_HI = 3.0078125e-1  # log10(2) in two parts, as ln2 above
_LOG10_2_LO = 2.48745663981195213739e-4
_TANH_POLY = (-5.70498872745e-3, 2.06390887954e-2, -5.37397155531e-2, 1.33314422036e-1,
              -3.33332819422e-1)  # fmt: skip


def _fma(b: ir.IRBuilder, x: ir.Value, y: ir.Value, z: ir.Value) -> ir.Value:
    return b.call(declare_intrinsic(b.module, "llvm.fmuladd", x.type, 3), [x, y, z])


def _horner(b: ir.IRBuilder, x: ir.Value, coeffs: Sequence[float]) -> ir.Value:
    acc: ir.Value = splat_const(x.type, coeffs[0])
    for c in coeffs[1:]:
        acc = _fma(b, acc, x, splat_const(x.type, c))
    return acc


def _call(b: ir.IRBuilder, name: str, *args: ir.Value) -> ir.Value:
    return b.call(declare_intrinsic(b.module, f"llvm.{name}", args[0].type, len(args)), list(args))


def vector_exp(b: ir.IRBuilder, x: ir.Value, features: Features = frozenset()) -> ir.Value:
    """``e^x`` for a float32 vector; ``features`` are the target CPU's (empty: unknown)."""
    ty = x.type
    clamped = _clamp(b, x, -104.0, 89.0)  # NaN stays NaN
    n = _call(b, "roundeven", b.fmul(clamped, splat_const(ty, _LOG2E)))
    r = _fma(b, n, splat_const(ty, -_LN2_HI), clamped)
    r = _fma(b, n, splat_const(ty, -_LN2_LO), r)
    r2 = b.fmul(r, r)
    p = _fma(b, _horner(b, r, _EXP_POLY), r2, b.fadd(r, splat_const(ty, 1.0)))
    scalef = _scalef(b, ty, features)
    if scalef is not None:  # NaN passes through every step
        return scalef(p, n)
    ni = b.fptosi(n, ir.VectorType(I32, lanes_of_type(ty)))  # poison for NaN: selected away
    scaled = _ldexp(b, p, ni)  # gradual underflow and overflow to infinity, as expf
    return b.select(b.fcmp_unordered("uno", x, x), x, scaled)


# AVX-512's vscalefps, x * 2^floor(n) with n a float, by vector width: the intrinsic and
# the features it needs. One instruction where the integer route below takes nine; it
# rounds once, so subnormal results and overflow are ldexp's.
_SCALEF = {
    16: ("llvm.x86.avx512.mask.scalef.ps.512", ("avx512f",)),
    8: ("llvm.x86.avx512.mask.scalef.ps.256", ("avx512f", "avx512vl")),
    4: ("llvm.x86.avx512.mask.scalef.ps.128", ("avx512f", "avx512vl")),
}


def _scalef(
    b: ir.IRBuilder, ty: ir.Type, features: Features
) -> Callable[[ir.Value, ir.Value], ir.Value] | None:
    """``(x, n) -> x * 2^n`` by ``vscalefps`` where the target has it for vectors of
    ``ty`` (a power-of-two multiple of 16 lanes in 16-lane parts), else None."""
    lanes = lanes_of_type(ty)
    width = 16 if lanes > 16 and (lanes & (lanes - 1)) == 0 else lanes
    if width not in _SCALEF or not set(_SCALEF[width][1]) <= features:
        return None
    part = ir.VectorType(F32, width)
    mask = ir.IntType(max(width, 8))
    args = [part, part, part, mask] + ([I32] if width == 16 else [])
    fn = declare(b.module, _SCALEF[width][0], part, args)
    tail = [ir.Constant(I32, 4)] if width == 16 else []  # 4: the current rounding mode

    def apply(x: ir.Value, n: ir.Value) -> ir.Value:
        parts = [
            b.call(fn, [xs, ns, xs, ir.Constant(mask, -1), *tail])
            for xs, ns in zip(_split(b, x, width), _split(b, n, width), strict=True)
        ]
        while len(parts) > 1:
            parts = [_concat(b, lo, hi) for lo, hi in zip(parts[::2], parts[1::2], strict=True)]
        return parts[0]

    return apply


def _split(b: ir.IRBuilder, v: ir.Value, width: int) -> list[ir.Value]:
    """``v`` in consecutive parts of ``width`` lanes."""
    lanes = lanes_of_type(v.type)
    if lanes == width:
        return [v]
    picks = (ir.Constant(ir.VectorType(I32, width), list(range(at, at + width))) for at in
             range(0, lanes, width))  # fmt: skip
    return [b.shuffle_vector(v, v, pick) for pick in picks]


def _concat(b: ir.IRBuilder, lo: ir.Value, hi: ir.Value) -> ir.Value:
    lanes = 2 * lanes_of_type(lo.type)
    return b.shuffle_vector(lo, hi, ir.Constant(ir.VectorType(I32, lanes), list(range(lanes))))


def _ldexp(b: ir.IRBuilder, x: ir.Value, n: ir.Value) -> ir.Value:
    """``x * 2^n`` for ``n`` in [-252, 254], as two multiplies by powers of two built from
    their bits, ``2^(n >> 1)`` then ``2^(n - (n >> 1))``: both factors are normal floats,
    the first product is exact and the second rounds once, so the result is ``ldexp``'s,
    subnormals and infinity included. ``llvm.ldexp`` is one ``vscalefps`` with AVX-512,
    but without it LLVM calls ``ldexpf`` lane by lane: ``exp`` took 9.9 ns an element on
    an AVX2 CPU (Zen 3)."""
    ity = n.type
    lanes = lanes_of_type(ity)
    half = b.ashr(n, ir.Constant(ity, [1] * lanes))
    rest = b.sub(n, half)

    def power(k: ir.Value) -> ir.Value:  # 2^k for k in [-126, 127]: exponent bits only
        biased = b.add(k, ir.Constant(ity, [127] * lanes))
        return b.bitcast(b.shl(biased, ir.Constant(ity, [23] * lanes)), x.type)

    return b.fmul(b.fmul(x, power(half)), power(rest))


def _log_parts(b: ir.IRBuilder, x: ir.Value) -> tuple[ir.Value, ir.Value]:
    """``(e, f)`` with ``x = 2^e * (1 + f)`` and ``log(1 + f)`` for ``f`` in
    ``[sqrt(1/2) - 1, sqrt(2) - 1)``, for positive finite ``x``: ``e`` as a float, and
    ``log(1 + f)`` as the exact ``f`` plus a small correction (returned added)."""
    ty = x.type
    lanes = lanes_of_type(ty)
    ity = ir.VectorType(I32, lanes)
    tiny = b.fcmp_ordered("<", x, splat_const(ty, _FLT_MIN))  # subnormals: make them normal
    scaled = b.select(tiny, b.fmul(x, splat_const(ty, 8388608.0)), x)  # 2^23
    bits = b.bitcast(scaled, ity)
    e = b.sub(b.lshr(bits, splat_const(ity, 23)), splat_const(ity, 126))
    e = b.sub(e, b.select(tiny, splat_const(ity, 23), splat_const(ity, 0)))
    # the mantissa as a float in [0.5, 1); below sqrt(1/2) it is doubled and e lowered
    m = b.bitcast(
        b.or_(b.and_(bits, splat_const(ity, 0x007FFFFF)), splat_const(ity, 0x3F000000)), ty
    )
    low = b.fcmp_ordered("<", m, splat_const(ty, _SQRT_HALF))
    e = b.sub(e, b.zext(low, ity))
    f = b.fsub(b.select(low, b.fadd(m, m), m), splat_const(ty, 1.0))  # exact
    f2 = b.fmul(f, f)
    y = b.fmul(b.fmul(f, f2), _horner(b, f, _LOG_POLY))
    y = _fma(b, f2, splat_const(ty, -0.5), y)
    return b.sitofp(e, ty), b.fadd(f, y)


def _log_specials(b: ir.IRBuilder, x: ir.Value, r: ir.Value) -> ir.Value:
    """``r`` with the answers for zero (``-inf``), negatives (NaN), ``+inf`` and NaN."""
    ty = x.type
    inf = float("inf")
    r = b.select(b.fcmp_ordered("<", x, splat_const(ty, 0.0)), splat_const(ty, float("nan")), r)
    r = b.select(b.fcmp_ordered("==", x, splat_const(ty, 0.0)), splat_const(ty, -inf), r)
    r = b.select(b.fcmp_ordered("==", x, splat_const(ty, inf)), x, r)
    return b.select(b.fcmp_unordered("uno", x, x), x, r)


def vector_log(b: ir.IRBuilder, x: ir.Value, features: Features = frozenset()) -> ir.Value:
    """``ln(x)`` for a float32 vector; LLVM would call ``logf`` lane by lane."""
    e, lg = _log_parts(b, x)
    r = _fma(b, e, splat_const(x.type, _LN2_HI), _fma(b, e, splat_const(x.type, _LN2_LO), lg))
    return _log_specials(b, x, r)


def vector_log2(b: ir.IRBuilder, x: ir.Value, features: Features = frozenset()) -> ir.Value:
    """``log2(x)`` for a float32 vector: exact at powers of two (``f`` is 0 there)."""
    e, lg = _log_parts(b, x)
    return _log_specials(b, x, _fma(b, lg, splat_const(x.type, _LOG2E), e))


def vector_log10(b: ir.IRBuilder, x: ir.Value, features: Features = frozenset()) -> ir.Value:
    """``log10(x)`` for a float32 vector."""
    ty = x.type
    e, lg = _log_parts(b, x)
    r = _fma(b, e, splat_const(ty, _LOG10_2_LO), b.fmul(lg, splat_const(ty, _LOG10E)))
    return _log_specials(b, x, _fma(b, e, splat_const(ty, _LOG10_2_HI), r))


def vector_tanh(b: ir.IRBuilder, x: ir.Value, features: Features = frozenset()) -> ir.Value:
    """``tanh(x)`` for a float32 vector."""
    ty = x.type
    ax = _call(b, "fabs", x)
    z = b.fmul(x, x)
    small = _fma(b, b.fmul(_horner(b, z, _TANH_POLY), z), x, x)
    e = vector_exp(b, b.fadd(ax, ax), features)
    one = splat_const(ty, 1.0)
    large = b.fsub(one, b.fdiv(splat_const(ty, 2.0), b.fadd(e, one)))
    large = _call(b, "copysign", large, x)
    return b.select(b.fcmp_ordered("<", ax, splat_const(ty, 0.625)), small, large)


def _clamp(b: ir.IRBuilder, x: ir.Value, lo: float, hi: float) -> ir.Value:
    """``x`` clamped to ``[lo, hi]`` by compare-and-select (one ``vmaxps``/``vminps``
    each on x86): NaN stays NaN."""
    low, high = splat_const(x.type, lo), splat_const(x.type, hi)
    x = b.select(b.fcmp_ordered("<", x, low), low, x)
    return b.select(b.fcmp_ordered(">", x, high), high, x)


def vector_erf(b: ir.IRBuilder, x: ir.Value, features: Features = frozenset()) -> ir.Value:
    """``erf(x)`` for a float32 vector."""
    c = _clamp(b, x, -ERF_CLAMP, ERF_CLAMP)
    z = b.fmul(c, c)
    p, q = _horner(b, z, ERF_P[::-1]), _horner(b, z, ERF_Q[::-1])
    return _clamp(b, b.fdiv(b.fmul(c, p), q), -1.0, 1.0)
