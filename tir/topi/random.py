"""Random draws as pure functions of a key and an element's position (ONNX RandomUniform,
RandomNormal, their ``Like`` forms, Bernoulli and Multinomial).

A kernel cannot carry a generator's state from one element to the next when its loops
run in parallel, on CPU threads or GPU threads alike, so the draws are *counter-based*:
element ``i`` of stream ``s`` gets the bits ``hash(key, s, i)``, computed where it is
needed, in any order, with the same result on every backend (LLVM, CUDA, the emulator
and the interpreter agree bit for bit on the bits and the uniform draws; normal draws
go through log and cos, which each math library rounds in its own last place). The
hash is a 32-bit integer mixer (xor-shift and multiply, the "lowbias32" constants found
by Wellons' hash prospector) applied in three rounds that fold in the key's two halves
and the counter; its avalanche is what the draws' independence rests on, and the tests
check their distributions.

What differs from onnxruntime: the key is the node's ``seed`` (or, without one, drawn
once when the model is imported), and a compiled model gives the same draws on every
run, where onnxruntime's generator advances from run to run. The numbers themselves
never match another runtime's: no two generators agree, which is why ONNX's own
conformance data for these ops cannot be reproduced by any runtime but the one that
made it.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from ember.tir import dtype as dt
from ember.tir import expr as E
from ember.tir import op as _op
from ember.tir.te import operation as te
from ember.tir.te.tensor import Tensor

U32 = "uint32"
_M1, _M2 = 0x7FEB352D, 0x846CA68B  # lowbias32's multipliers
_GOLDEN = 0x9E3779B9  # 2^32 / the golden ratio: spreads stream numbers apart


def _xorshift(x: E.PrimExpr, shift: int) -> E.PrimExpr:
    """``x ^ (x >> shift)``, with ``x`` bound once (``Let``): written out, the three
    rounds' nested uses of each step would make a tree of hundreds of copies."""
    if isinstance(x, (E.Var, E.IntImm)):
        return _op.bitwise_xor(x, _op.shift_right(x, E.const(shift, U32)))
    var = E.Var("h", U32)
    return E.Let(U32, var, x, _op.bitwise_xor(var, _op.shift_right(var, E.const(shift, U32))))


def _mix(x: E.PrimExpr) -> E.PrimExpr:
    """One round of the 32-bit mixer: every input bit flips about half the output bits."""
    x = _xorshift(x, 16) * E.const(_M1, U32)
    x = _xorshift(x, 15) * E.const(_M2, U32)
    return _xorshift(x, 16)


def split_key(key: int) -> tuple[int, int]:
    """A 64-bit key's two 32-bit halves (the key is taken modulo 2^64)."""
    key &= (1 << 64) - 1
    return key & 0xFFFFFFFF, key >> 32


def random_bits(key: int, stream: int, index: E.PrimExpr) -> E.PrimExpr:
    """32 random bits (``uint32``) for element ``index`` of ``stream`` under ``key``."""
    lo, hi = split_key(key)
    start = (lo + stream * _GOLDEN) & 0xFFFFFFFF
    seeded = _mix(E.const(start, U32))
    x = _mix(_op.bitwise_xor(E.cast(U32, index), seeded))
    return _mix(_op.bitwise_xor(x, E.const(hi, U32)))


def unit_uniform(key: int, stream: int, index: E.PrimExpr, dtype: str) -> E.PrimExpr:
    """A draw in [0, 1) of ``dtype``: the top 24 bits scaled (float32 and narrower; every
    value a multiple of 2^-24, exactly representable), or 53 bits from two streams
    (float64)."""
    top = _op.shift_right(random_bits(key, stream, index), E.const(8, U32))
    if dt.element_of(dtype) != "float64":
        u = E.cast("float32", top) * E.const(2.0**-24, "float32")
        return E.cast(dtype, u)
    low = _op.shift_right(random_bits(key, stream + 1, index), E.const(3, U32))  # 29 bits
    hi = E.cast("float64", top) * E.const(2.0**-24, "float64")
    return hi + E.cast("float64", low) * E.const(2.0**-53, "float64")


def flat_index(shape: Sequence[E.PrimExpr], idx: Sequence[E.PrimExpr]) -> E.PrimExpr:
    """The row-major position of ``idx`` in ``shape``, as an int64."""
    flat: E.PrimExpr = E.const(0, "int64")
    for extent, i in zip(shape, idx):
        flat = flat * E.cast("int64", extent) + E.cast("int64", i)
    return flat


def uniform(
    shape: Sequence[E.PrimExpr], dtype: str, low: float, high: float, key: int,
    name: str = "random_uniform",
) -> Tensor:  # fmt: skip
    """Draws in [low, high) (ONNX RandomUniform)."""
    wide = "float64" if dt.element_of(dtype) == "float64" else "float32"

    def f(*i: E.PrimExpr) -> E.PrimExpr:
        u = unit_uniform(key, 0, flat_index(shape, i), wide)
        return E.cast(dtype, E.const(low, wide) + E.const(high - low, wide) * u)

    return te.compute(tuple(shape), f, name=name, tag="elementwise")


def normal(
    shape: Sequence[E.PrimExpr], dtype: str, mean: float, scale: float, key: int,
    name: str = "random_normal",
) -> Tensor:  # fmt: skip
    """Normal draws (ONNX RandomNormal) by the Box-Muller transform of two uniforms; the
    first is taken in (0, 1] so its logarithm is finite."""
    wide = "float64" if dt.element_of(dtype) == "float64" else "float32"

    def f(*i: E.PrimExpr) -> E.PrimExpr:
        n = flat_index(shape, i)
        u1 = E.const(1.0, wide) - unit_uniform(key, 0, n, wide)
        u2 = unit_uniform(key, 2, n, wide)
        radius = _op.sqrt(E.const(-2.0, wide) * _op.log(u1))
        z = radius * _op.cos(E.const(2 * math.pi, wide) * u2)
        return E.cast(dtype, E.const(mean, wide) + E.const(scale, wide) * z)

    return te.compute(tuple(shape), f, name=name, tag="elementwise")


def bernoulli(P: Tensor, dtype: str, key: int, name: str = "bernoulli") -> Tensor:
    """1 with probability ``P[i]``, else 0, in ``dtype`` (ONNX Bernoulli): a uniform draw
    below the probability. A probability of 0 never gives 1, one of 1 always does; NaN
    gives 0."""
    wide = "float64" if dt.element_of(P.dtype) == "float64" else "float32"

    def f(*i: E.PrimExpr) -> E.PrimExpr:
        u = unit_uniform(key, 0, flat_index(P.shape, i), wide)
        hit = u < E.cast(wide, P[i])
        return E.select(hit, E.const(1, dtype), E.const(0, dtype))

    return te.compute(P.shape, f, name=name, tag="elementwise")


def multinomial(X: Tensor, samples: int, dtype: str, key: int, name: str = "multinomial") -> Tensor:
    """``samples`` class indices per row of ``X`` (batch, classes), drawn with probability
    proportional to ``exp(X[b, c])`` (ONNX Multinomial takes unnormalised log
    probabilities). Each draw is an inverse-CDF search: the number of classes whose
    cumulative weight is at most ``u`` times the total. Weights are taken relative to the
    row's maximum, so large logits do not overflow. A row holding NaN (or +Inf twice) has
    NaN weights, which no comparison passes: all its draws are class 0, not an error."""
    batch, classes = X.shape
    wide = "float64" if dt.element_of(X.dtype) == "float64" else "float32"
    k = te.reduce_axis((0, classes), "k")
    row_max = te.compute(
        (batch,), lambda b: te.max(E.cast(wide, X[b, k]), axis=k), name=f"{name}_max"
    )
    weight = te.compute(
        (batch, classes),
        lambda b, c: _op.exp(E.cast(wide, X[b, c]) - row_max[b]),
        name=f"{name}_weight",
    )
    j = te.reduce_axis((0, classes), "j")
    cdf = te.compute(
        (batch, classes),
        lambda b, c: te.sum(E.select(j <= c, weight[b, j], E.const(0.0, wide)), axis=j),
        name=f"{name}_cdf",
    )

    def draw(b: E.PrimExpr, s: E.PrimExpr) -> E.PrimExpr:
        m = te.reduce_axis((0, classes - 1), "m")  # the last class takes what is left
        n = E.cast("int64", b) * samples + E.cast("int64", s)
        target = unit_uniform(key, 0, n, wide) * cdf[b, classes - 1]
        return te.sum(E.select(cdf[b, m] <= target, E.const(1, dtype), E.const(0, dtype)), axis=m)

    if E.const_value(E.convert(classes)) == 1:
        return te.compute(
            (batch, samples), lambda b, s: E.const(0, dtype), name=name, tag="injective"
        )
    return te.compute((batch, samples), draw, name=name)
