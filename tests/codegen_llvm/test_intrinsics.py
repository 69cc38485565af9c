"""Every math intrinsic, scalar and vector, for every float dtype, against numpy."""

from __future__ import annotations

import math
import re

import numpy as np
import pytest

from ember.codegen_llvm.intrinsics import INT_INTRINSICS, INTRINSICS, PREDICATES
from ember.errors import CompileError
from ember.tir import expr as E
from ember.tir.expr import Intrinsic
from tests.codegen_llvm.llvm_helpers import (
    FLOATS,
    as_float,
    assert_close,
    build,
    map_func,
    rand,
    sentinel,
)
from tests.nightly import sample_in_ci

_erf = np.vectorize(math.erf)

# intrinsic -> (numpy reference, input range)
REFERENCE = {
    Intrinsic.EXP: (np.exp, (-4, 4)),
    Intrinsic.LOG: (np.log, (0.05, 8)),
    Intrinsic.SQRT: (np.sqrt, (0.05, 8)),
    Intrinsic.RSQRT: (lambda x: 1 / np.sqrt(x), (0.05, 8)),
    Intrinsic.TANH: (np.tanh, (-4, 4)),
    Intrinsic.ERF: (_erf, (-3, 3)),
    Intrinsic.SIGMOID: (lambda x: 1 / (1 + np.exp(-x)), (-8, 8)),
    Intrinsic.POW: (np.power, (0.1, 3)),
    Intrinsic.ABS: (np.abs, (-4, 4)),
    Intrinsic.FLOOR: (np.floor, (-4, 4)),
    Intrinsic.CEIL: (np.ceil, (-4, 4)),
    Intrinsic.ROUND: (lambda x: np.trunc(x + np.copysign(0.5, x)), (-4, 4)),  # ties away
    Intrinsic.NEARBYINT: (np.round, (-4, 4)),  # ties to even
    Intrinsic.TRUNC: (np.trunc, (-4, 4)),
    Intrinsic.EXP2: (np.exp2, (-4, 4)),
    Intrinsic.EXP10: (lambda x: 10.0**x, (-2, 2)),
    Intrinsic.LOG2: (np.log2, (0.05, 8)),
    Intrinsic.LOG10: (np.log10, (0.05, 8)),
    Intrinsic.LOG1P: (np.log1p, (-0.9, 8)),
    Intrinsic.TAN: (np.tan, (-1.4, 1.4)),
    Intrinsic.ASIN: (np.arcsin, (-0.99, 0.99)),
    Intrinsic.ACOS: (np.arccos, (-0.99, 0.99)),
    Intrinsic.ATAN: (np.arctan, (-6, 6)),
    Intrinsic.SINH: (np.sinh, (-4, 4)),
    Intrinsic.COSH: (np.cosh, (-4, 4)),
    Intrinsic.ASINH: (np.arcsinh, (-6, 6)),
    Intrinsic.ACOSH: (np.arccosh, (1.01, 8)),
    Intrinsic.ATANH: (np.arctanh, (-0.95, 0.95)),
    Intrinsic.FMOD: (np.fmod, (-6, 6)),
    Intrinsic.ATAN2: (np.arctan2, (-4, 4)),
    Intrinsic.HYPOT: (np.hypot, (-4, 4)),
    Intrinsic.COPYSIGN: (np.copysign, (-4, 4)),
    Intrinsic.FMA: (lambda a, b, c: a * b + c, (-4, 4)),
    Intrinsic.SIN: (np.sin, (-6, 6)),
    Intrinsic.COS: (np.cos, (-6, 6)),
    Intrinsic.LIKELY: (lambda x: x, (-4, 4)),
}
# float intrinsics of float results; the integer and predicate ones: tests/tir/test_intrinsics_all
CPU_INTRINSICS = [op for op in INTRINSICS] + [Intrinsic.LIKELY]


def test_table_covers_every_intrinsic():
    structural = E.WARP_SHUFFLES | E.STRUCTURAL_CALLS | {Intrinsic.LIKELY}
    structural |= E.TENSOR_CORE_CALLS  # CUDA only: a CompileError in the LLVM codegen
    assert set(INTRINSICS) | set(INT_INTRINSICS) | set(PREDICATES) | structural == set(Intrinsic)
    assert set(INT_INTRINSICS) == E.INT_INTRINSICS | {Intrinsic.ABS}
    assert set(PREDICATES) == E.FLOAT_PREDICATES
    assert set(REFERENCE) == set(CPU_INTRINSICS)
    for op, rule in INTRINSICS.items():
        assert sum(x is not None for x in (rule.llvm, rule.libm, rule.formula)) == 1, op


def _inputs(op, dtype, n, rng):
    ref, (lo, hi) = REFERENCE[op]
    arity = INTRINSICS[op].arity if op in INTRINSICS else 1
    xs = [rand(n, dtype, rng, lo, hi) for _ in range(arity)]
    if op in (Intrinsic.ROUND, Intrinsic.NEARBYINT):  # exact halves exercise the ties
        halves = (np.arange(n) % 9 - 4 + 0.5).astype(np.float32)
        xs[0] = rand(n, dtype, rng, 0, 0)  # placeholder of the right dtype
        xs[0][:] = (
            halves if dtype != "bfloat16" else np.asarray((halves.view(np.uint32) >> 16), np.uint16)
        )
    return ref, xs


@pytest.mark.parametrize("lanes", [1, 16])
@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("op", CPU_INTRINSICS, ids=lambda op: op.value)
def test_intrinsic(op, dtype, lanes, rng):
    sample_in_ci(op, dtype, lanes)
    n = 37
    ref, xs = _inputs(op, dtype, n, rng)
    f = map_func(
        f"k_{op.value}", [dtype] * len(xs), dtype, lambda *a: E.call(op, *a), n, lanes=lanes
    )
    mod = build(f)
    out = sentinel(n, dtype)
    mod(*xs, out)
    want = ref(*(as_float(x, dtype) for x in xs))
    if dtype in ("float16", "bfloat16"):
        # computed in float32 from the rounded inputs, then rounded once
        assert_close(out, want, dtype, scale=2)
    else:
        assert_close(out, want, dtype, scale=8)


@pytest.mark.parametrize("dtype", ["int8", "int32", "int64", "uint16"])
def test_abs_on_integers(dtype, rng):
    mod = build(map_func("iabs", [dtype], dtype, lambda a: E.call(Intrinsic.ABS, a), 37, lanes=8))
    x = rand(37, dtype, rng)
    out = sentinel(37, dtype)
    mod(x, out)
    np.testing.assert_array_equal(out, np.abs(x))


def test_float_intrinsic_on_integers_is_rejected():
    f = map_func("iexp", ["int32"], "int32", lambda a: E.call(Intrinsic.EXP, a), 8)
    with pytest.raises(CompileError, match=r"intrinsic 'exp' is defined for floating-point"):
        build(f)


def test_vector_exp_is_inline():
    f = map_func("vexp", ["float32"], "float32", lambda a: E.call(Intrinsic.EXP, a), 64, lanes=16)
    ll = build(f).get_source("ll")
    assert "llvm.exp" not in ll and "expf" not in ll


def test_vector_erf_is_inline_and_accurate(rng):
    """float32 vectors take the graphs' rational erf (tir/topi/activation.py), not erff lane
    by lane: within its 3.6e-7 relative of math.erf, NaN through, ±inf to ±1, -0 kept."""
    x = np.concatenate([
        rng.uniform(-7, 7, 4096), rng.uniform(2.5, 4.0, 4096) * rng.choice([-1, 1], 4096),
        np.array([0.0, -0.0, 1e-30, -1e-30, 4.0, -4.0, np.inf, -np.inf, np.nan]),
    ]).astype(np.float32)  # fmt: skip
    x = np.concatenate([x, np.zeros((-len(x)) % 16, np.float32)])
    mod = build(
        map_func(
            "verf", ["float32"], "float32", lambda a: E.call(Intrinsic.ERF, a), len(x), lanes=16
        )
    )
    assert "erff" not in mod.get_source("ll")
    out = sentinel(len(x), "float32")
    mod(x, out)
    real = np.isfinite(x)
    np.testing.assert_allclose(out[real], _erf(x[real].astype(np.float64)), rtol=3.6e-7, atol=1e-37)
    assert np.isnan(out[np.isnan(x)]).all()
    np.testing.assert_array_equal(out[np.isinf(x)], np.sign(x[np.isinf(x)]))
    assert np.signbit(out[np.flatnonzero(x == 0)[1]])  # erf(-0) = -0


def _ulp_error(got: np.ndarray, want: np.ndarray) -> np.ndarray:
    """Distance in float32 units in the last place between ``got`` and float64 ``want``."""
    w32 = want.astype(np.float32)
    spacing = np.spacing(np.abs(w32)).astype(np.float64)
    return np.abs(got.astype(np.float64) - want) / spacing


@pytest.mark.parametrize("op, ref", [(Intrinsic.EXP, np.exp), (Intrinsic.TANH, np.tanh)])
def test_vector_float32_polynomials_are_accurate(op, ref, rng):
    x = np.concatenate([
        rng.uniform(-110, 95, 4096), rng.uniform(-1, 1, 4096), rng.uniform(-1e-3, 1e-3, 1024),
        np.array([0.0, -0.0, 88.7, 88.8, -87.3, -103.0, -104.5, np.inf, -np.inf, 1e-30, -1e-30]),
    ]).astype(np.float32)  # fmt: skip
    x = np.concatenate([x, np.zeros((-len(x)) % 16, np.float32)])
    mod = build(map_func("poly", ["float32"], "float32", lambda a: E.call(op, a), len(x), lanes=16))
    out = sentinel(len(x), "float32")
    mod(x, out)
    want = ref(x.astype(np.float64))
    with np.errstate(over="ignore"):
        want32 = want.astype(np.float32)
    finite = np.isfinite(want32)
    np.testing.assert_array_equal(out[~finite], want32[~finite])
    assert _ulp_error(out[finite], want[finite]).max() <= 3
    nan_in = np.array([np.nan] * 16, np.float32)
    nan_out = sentinel(16, "float32")
    build(map_func("nan", ["float32"], "float32", lambda a: E.call(op, a), 16, lanes=16))(
        nan_in, nan_out
    )
    assert np.isnan(nan_out).all()


@pytest.mark.parametrize("target", ["llvm", "llvm -mcpu=x86-64-v3", "llvm -mcpu=x86-64-v4"])
def test_vector_exp_calls_nothing_per_lane(target):
    """2^n is applied without ``llvm.ldexp``, which LLVM lowers to an ``ldexpf`` call per
    lane where the CPU has no AVX-512 (exp took 9.9 ns an element on AVX2, 1.2 after)."""
    import platform

    import ember
    from ember import te

    if target != "llvm" and platform.machine() != "x86_64":
        pytest.skip("x86-64 levels")
    A = te.placeholder((64,), "float32", name="A")
    E = te.compute((64,), lambda i: te.exp(A[i]), name="E")
    s = te.create_schedule(E.op)
    s[E].vectorize(s[E].split(E.op.axis[0], factor=8)[1])
    asm = ember.build(s, [A, E], target=target).get_source("asm")
    assert not re.search(r"\bcall", asm), re.findall(r"call.*", asm)[:3]


@pytest.mark.parametrize("lanes", [16, 8])
@pytest.mark.parametrize("target", ["llvm", "llvm -mcpu=x86-64-v3", "llvm -mcpu=x86-64-v4"])
def test_vector_exp_over_the_whole_float32_range(target, lanes):
    """The range reduction, gradual underflow (subnormals), overflow and NaN of the inline
    exp, both ways of applying 2^n: AVX-512's ``vscalefps`` (x86-64-v4, and the host where
    it has AVX-512) and the integer exponent bits (x86-64-v3)."""
    import platform

    import ember
    from ember import te
    from ember.codegen_llvm.cpu_features import vector_unit

    if target != "llvm" and platform.machine() != "x86_64":
        pytest.skip("x86-64 levels")
    if target.endswith("v4") and vector_unit().register_bytes < 64:
        pytest.skip("the host cannot run AVX-512 code")
    n = 4096
    A = te.placeholder((n,), "float32", name="A")
    E = te.compute((n,), lambda i: te.exp(A[i]), name="E")
    s = te.create_schedule(E.op)
    _, inner = s[E].split(E.op.axis[0], factor=lanes)
    s[E].vectorize(inner)
    mod = ember.build(s, [A, E], target=target)
    if target != "llvm":
        assert ("vscalefps" in mod.get_source("asm")) == target.endswith("v4")
    edges = [np.nan, np.inf, -np.inf, 0.0, -0.0, 88.72, -87.33, -103.9]
    x = np.concatenate([np.linspace(-110, 95, n - len(edges)), edges]).astype("float32")
    y = np.empty_like(x)
    mod(x, y)
    with np.errstate(over="ignore"):
        ref = np.exp(x.astype("float64")).astype("float32")
    np.testing.assert_array_equal(np.isnan(y), np.isnan(ref))
    np.testing.assert_array_equal(np.isinf(y), np.isinf(ref))
    np.testing.assert_array_equal(y == 0, ref == 0)
    normal = np.isfinite(ref) & (ref > 1.2e-38)
    np.testing.assert_allclose(y[normal], ref[normal], rtol=3e-7)
    tiny = np.isfinite(ref) & ~normal
    np.testing.assert_allclose(y[tiny], ref[tiny], rtol=0, atol=2e-45)  # one subnormal step


_LOGS = [(Intrinsic.LOG, np.log), (Intrinsic.LOG2, np.log2), (Intrinsic.LOG10, np.log10)]


@pytest.mark.parametrize("op, ref", _LOGS, ids=["log", "log2", "log10"])
def test_vector_logs_are_inline_and_accurate_over_every_float32(op, ref, rng):
    """The inline logarithms of float32 vectors (no ``logf`` per lane): within 2 ulp of the
    float64 answer for random bit patterns over every positive float, subnormals included,
    near 1 (where the answer is small) and at the mantissa's sqrt(1/2) split; exact at
    powers of two for log2; ``-inf`` at ±0, NaN below zero, inf and NaN kept."""
    bits = rng.integers(1, 0x7F800000, 8192, dtype=np.uint32)  # every positive finite float
    near_one = 1 + rng.uniform(-0.3, 0.3, 2048)
    split = np.float32(np.sqrt(0.5)) * (1 + rng.uniform(-1e-6, 1e-6, 512))
    powers = np.ldexp(1.0, np.arange(-149, 128))
    x = np.concatenate([bits.view(np.float32), near_one, split, powers, [1.0]]).astype(np.float32)
    special = np.array([0.0, -0.0, -1.0, -1e-40, -np.inf, np.inf, np.nan], np.float32)
    x = np.concatenate([x, special])
    x = np.concatenate([x, np.ones((-len(x)) % 16, np.float32)])
    mod = build(map_func("vlog", ["float32"], "float32", lambda a: E.call(op, a), len(x), lanes=16))
    assert not re.search(r"call .*@log", mod.get_source("ll"))
    out = sentinel(len(x), "float32")
    mod(x, out)
    with np.errstate(divide="ignore", invalid="ignore"):
        want = ref(x.astype(np.float64))
    real = np.isfinite(want) & (want != 0)
    assert _ulp_error(out[real], want[real]).max() <= 2
    np.testing.assert_array_equal(out[want == 0], 0.0)  # log(1)
    rest = ~real & (want != 0)
    np.testing.assert_array_equal(out[rest], want[rest].astype(np.float32))  # ±inf, NaN
    if op is Intrinsic.LOG2:
        at_powers = np.isin(x, powers.astype(np.float32))
        np.testing.assert_array_equal(out[at_powers], np.log2(x[at_powers]))
