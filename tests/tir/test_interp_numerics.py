"""The interpreter's arithmetic: intrinsics, division, casts, wrap-around, fp16, bf16, vectors."""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ember.tir import expr as E
from ember.tir import stmt as S
from ember.tir.bf16 import bf16_to_float32, float32_to_bf16, round_to_bf16
from ember.tir.interp import run
from ember.tir.interp.ops import COMPARE, INTRINSICS, binary_fn, cast_fn
from ember.tir.ir_builder import IRBuilder
from tests.nightly import examples

I = E.Intrinsic

# -- tables ---------------------------------------------------------------------------------


def test_operator_tables_are_complete():
    # shuffles and tensor-core calls need lock-step warps; if_then_else and extern calls
    # are compiled by structure
    warp = E.WARP_SHUFFLES | E.TENSOR_CORE_CALLS
    assert set(INTRINSICS) == set(I) - warp - E.STRUCTURAL_CALLS
    assert set(COMPARE) == set(E.CompareOp)
    for op in E.BinaryOp:
        for dtype in ("float32", "float16", "float64", "int32", "int8", "uint8", "int64"):
            if op in (E.BinaryOp.AND, E.BinaryOp.OR):
                dtype = "bool"
            for lanes in (1, 4):
                assert callable(binary_fn(op, dtype if lanes == 1 else f"{dtype}x{lanes}"))
    for dtype in ("bool", "int8", "int32", "uint16", "float16", "bfloat16", "float32", "float64"):
        assert callable(cast_fn(dtype))


# -- intrinsics -------------------------------------------------------------------------------

_REFERENCE = {
    I.EXP: np.exp,
    I.LOG: np.log,
    I.SQRT: np.sqrt,
    I.RSQRT: lambda x: 1 / np.sqrt(x),
    I.TANH: np.tanh,
    I.ERF: np.vectorize(math.erf),
    I.SIGMOID: lambda x: 1 / (1 + np.exp(-x)),
    I.ABS: np.abs,
    I.FLOOR: np.floor,
    I.CEIL: np.ceil,
    I.ROUND: lambda x: np.trunc(x + np.copysign(0.5, x)),  # exact in float64 here
    I.NEARBYINT: np.rint,
    I.SIN: np.sin,
    I.COS: np.cos,
    I.LIKELY: lambda x: x,
}
_POSITIVE = {I.LOG, I.SQRT, I.RSQRT}
_TOL = {"float16": 2e-3, "float32": 2e-6, "float64": 1e-13}


def _elementwise(n: int, dtype: str, arity: int, body) -> S.PrimFunc:
    ib = IRBuilder()
    ins = [ib.param((n,), dtype, name=f"X{k}") for k in range(arity)]
    out = ib.param((n,), dtype, name="Y")
    with ib.for_range(0, n, name="i") as i:
        ib.store(out, i, body(*[x[i] for x in ins]))
    return ib.get_func("elementwise")


@pytest.mark.parametrize("dtype", ["float16", "float32", "float64"])
@pytest.mark.parametrize("op", sorted(_REFERENCE, key=lambda o: o.value))
def test_unary_intrinsics_match_numpy(rng, op, dtype):
    x = rng.uniform(0.1 if op in _POSITIVE else -3, 3, size=37).astype(dtype)
    # ties: away from zero for round, to even for nearbyint
    x[:4] = [0.5, 1.5, 2.5, -2.5] if op in (I.ROUND, I.NEARBYINT) else x[:4]
    y = np.empty_like(x)
    run(_elementwise(37, dtype, 1, lambda a: E.call(op, a)), x, y)
    want = _REFERENCE[op](x.astype("float64"))
    np.testing.assert_allclose(y.astype("float64"), want, rtol=_TOL[dtype], atol=_TOL[dtype])


@pytest.mark.parametrize("dtype", ["float16", "float32", "float64"])
def test_pow_and_fma_match_numpy(rng, dtype):
    a, b, c = (rng.uniform(0.5, 2, size=19).astype(dtype) for _ in range(3))
    y = np.empty_like(a)
    run(_elementwise(19, dtype, 2, lambda p, q: E.call(I.POW, p, q)), a, b, y)
    np.testing.assert_allclose(y.astype("float64"), a.astype("float64") ** b, rtol=_TOL[dtype])
    run(_elementwise(19, dtype, 3, lambda p, q, r: E.call(I.FMA, p, q, r)), a, b, c, y)
    want = a.astype("float64") * b + c
    np.testing.assert_allclose(y.astype("float64"), want, rtol=_TOL[dtype])


def test_fma_rounds_once():
    a = np.full(1, 1 + 2.0**-12, dtype="float32")
    c = np.full(1, -1.0, dtype="float32")
    y = np.empty(1, dtype="float32")
    run(_elementwise(1, "float32", 3, lambda p, q, r: E.call(I.FMA, p, q, r)), a, a, c, y)
    assert y[0] == np.float32(2.0**-11 + 2.0**-24)  # a*b rounded first would give 2**-11


def _nearest_float32(exact: Fraction) -> np.float32:
    guess = np.float32(float(exact))
    candidates = [
        np.nextafter(guess, np.float32(-np.inf)),
        guess,
        np.nextafter(guess, np.float32(np.inf)),
    ]

    def key(c: np.float32) -> tuple[Fraction, int]:
        return abs(Fraction(float(c)) - exact), int(np.array(c).view(np.uint32)) & 1

    return min(candidates, key=key)


_f32 = st.floats(-1e6, 1e6, width=32, allow_nan=False)


@settings(max_examples=examples(200), deadline=None)
@given(_f32, _f32, _f32)
def test_fma_float32_is_correctly_rounded(a, b, c):
    func = _FMA32
    arrays = [np.array([v], dtype="float32") for v in (a, b, c)]
    y = np.empty(1, dtype="float32")
    run(func, *arrays, y)
    exact = Fraction(float(arrays[0][0])) * Fraction(float(arrays[1][0])) + Fraction(
        float(arrays[2][0])
    )
    assert y[0] == _nearest_float32(exact)


_FMA32 = _elementwise(1, "float32", 3, lambda p, q, r: E.call(I.FMA, p, q, r))


def test_min_max_drop_nan_as_c_fmin_fmax():
    """TIR's float min/max are C's fmin/fmax on every path (llvm.minnum/maxnum, CUDA's
    fminf/fmaxf): a NaN operand is dropped, NaN only when both are (issue 22, item 28)."""
    x = np.array([1.0, np.nan, 3.0, np.nan], dtype="float32")
    z = np.array([2.0, 1.0, np.nan, np.nan], dtype="float32")
    y = np.empty(4, dtype="float32")
    run(_elementwise(4, "float32", 2, E.min_), x, z, y)
    np.testing.assert_array_equal(y, np.float32([1.0, 1.0, 3.0, np.nan]))
    run(_elementwise(4, "float32", 2, E.max_), x, z, y)
    np.testing.assert_array_equal(y, np.float32([2.0, 1.0, 3.0, np.nan]))


# -- integer division and wrap-around -------------------------------------------------------


def _wrap32(v: int) -> int:
    return (v + 2**31) % 2**32 - 2**31


def _c_div(a: int, b: int) -> tuple[int, int]:
    q = abs(a) // abs(b) * (1 if (a < 0) == (b < 0) else -1)
    return _wrap32(q), _wrap32(a - b * q)


def _division_func(lanes: int) -> S.PrimFunc:
    ib = IRBuilder()
    X = ib.param((lanes,), "int32", name="X")
    Y = ib.param((lanes,), "int32", name="Y")
    Q = ib.param((4, lanes), "int32", name="Q")
    ops = (E.floordiv, E.floormod, E.truncdiv, E.truncmod)
    if lanes == 1:
        for k, op in enumerate(ops):
            ib.store(Q, (k, 0), op(X[0], Y[0]))
    else:
        idx = E.Ramp(f"int32x{lanes}", E.const(0), E.const(1), lanes)
        x, y = X[idx], Y[idx]
        for k, op in enumerate(ops):
            ib.store(Q, (E.const(k), idx), op(x, y))
    return ib.get_func("division")


_DIV_FUNCS = {lanes: _division_func(lanes) for lanes in (1, 4)}
_i32 = st.integers(-(2**31), 2**31 - 1)


@settings(max_examples=examples(300), deadline=None)
@given(
    st.lists(st.tuples(_i32, _i32.filter(lambda v: v != 0)), min_size=4, max_size=4),
    st.sampled_from([1, 4]),
)
def test_floor_and_trunc_division_semantics(pairs, lanes):
    pairs = pairs[:lanes]
    x = np.array([p[0] for p in pairs], dtype="int32")
    y = np.array([p[1] for p in pairs], dtype="int32")
    q = np.zeros((4, lanes), dtype="int32")
    run(_DIV_FUNCS[lanes], x, y, q)
    for k, (a, b) in enumerate(pairs):
        tq, tr = _c_div(a, b)
        assert list(q[:, k]) == [_wrap32(a // b), _wrap32(a % b), tq, tr], (a, b)


def test_small_negative_division_table():
    x = np.array([-7, 7, -7, 7], dtype="int32")
    y = np.array([2, -2, -2, 2], dtype="int32")
    q = np.zeros((4, 4), dtype="int32")
    run(_DIV_FUNCS[4], x, y, q)
    np.testing.assert_array_equal(
        q, [[-4, -4, 3, 3], [1, -1, -1, 1], [-3, -3, 3, 3], [-1, 1, -1, 1]]
    )


@pytest.mark.parametrize(
    "dtype,a,b,op,want",
    [
        ("int8", 100, 100, E.BinaryOp.ADD, -56),
        ("int32", 2**31 - 1, 1, E.BinaryOp.ADD, -(2**31)),
        ("uint8", 0, 1, E.BinaryOp.SUB, 255),
        ("int64", 2**62, 4, E.BinaryOp.MUL, 0),
        ("int16", -(2**15), -1, E.BinaryOp.MUL, -(2**15)),
    ],
)
def test_integers_wrap_around(dtype, a, b, op, want):
    func = _elementwise(1, dtype, 2, lambda p, q: E.BinOp(dtype, op, p, q))
    y = np.zeros(1, dtype=dtype)
    run(func, np.array([a], dtype=dtype), np.array([b], dtype=dtype), y)
    assert int(y[0]) == want


# -- casts --------------------------------------------------------------------------------------


def _cast_func(src: str, dst: str, n: int) -> S.PrimFunc:
    ib = IRBuilder()
    X = ib.param((n,), src, name="X")
    Y = ib.param((n,), dst, name="Y")
    with ib.for_range(0, n, name="i") as i:
        ib.store(Y, i, E.Cast(dst, X[i]))
    return ib.get_func("cast")


@pytest.mark.parametrize(
    "src,dst,values,want",
    [
        ("float32", "int32", [-2.7, -0.5, 0.5, 2.7, 1e3], [-2, 0, 0, 2, 1000]),
        ("int32", "int8", [300, -129, 127, -128, 5], [44, 127, 127, -128, 5]),
        ("float32", "bool", [0.0, -0.0, np.nan, 2.0, -1e-30], [False, False, True, True, True]),
        ("int32", "bool", [0, 1, -3, 0, 7], [False, True, True, False, True]),
        ("bool", "int32", [True, False, True, True, False], [1, 0, 1, 1, 0]),
        ("int32", "float32", [16777217, -3, 0, 1, 2**31 - 1], [16777216.0, -3, 0, 1, 2.0**31]),
        ("float64", "float16", [1 / 3, 65504.0, 7e4, 1e-8, -2.5], None),
    ],
)
def test_casts_follow_c(src, dst, values, want):
    x = np.array(values, dtype=src)
    y = np.zeros(len(values), dtype=dst)
    run(_cast_func(src, dst, len(values)), x, y)
    with np.errstate(over="ignore"):
        expected = x.astype(dst) if want is None else np.array(want, dtype=dst)
    np.testing.assert_array_equal(y, expected)


def test_float16_rounds_every_operation(rng):
    a, b, c = (rng.uniform(-4, 4, size=64).astype("float16") for _ in range(3))
    y = np.empty(64, dtype="float16")
    run(_elementwise(64, "float16", 3, lambda p, q, r: (p + q) * r - p / r), a, b, c, y)
    np.testing.assert_array_equal(y, (a + b) * c - a / c)  # numpy rounds each op to float16


# -- bfloat16 -----------------------------------------------------------------------------------


def test_bf16_helpers_round_to_nearest_even():
    x = np.array(
        [
            1.0,
            1 + 2**-8,
            1 + 3 * 2**-8,
            -(1 + 2**-8 + 2**-20),
            np.inf,
            -np.inf,
            np.float32(3.4e38),
            0.0,
            -0.0,
        ],
        dtype="float32",
    )
    bits = float32_to_bf16(x)
    assert bits.dtype == np.uint16
    assert [hex(v) for v in bits] == [
        "0x3f80",
        "0x3f80",
        "0x3f82",
        "0xbf81",
        "0x7f80",
        "0xff80",
        "0x7f80",
        "0x0",
        "0x8000",
    ]
    assert np.isnan(bf16_to_float32(float32_to_bf16(np.float32(np.nan))))
    exact = bf16_to_float32(np.arange(0, 1 << 16, 97, dtype=np.uint16))
    finite = np.isfinite(exact)
    np.testing.assert_array_equal(round_to_bf16(exact[finite]), exact[finite])


@settings(max_examples=examples(300), deadline=None)
@given(st.floats(width=32, allow_nan=False, allow_infinity=False))
def test_bf16_rounding_is_to_the_nearest_value(x):
    r = round_to_bf16(np.float32(x))
    bits = int(float32_to_bf16(np.float32(x)))
    up, down = (bf16_to_float32(np.uint16(b)) for b in ((bits + 1) & 0xFFFF, (bits - 1) & 0xFFFF))
    err = abs(Fraction(float(r)) - Fraction(x)) if np.isfinite(r) else None
    if err is not None:
        for other in (up, down):
            if np.isfinite(other):
                assert err <= abs(Fraction(float(other)) - Fraction(x))


def test_bf16_buffers_load_compute_in_float32_and_store_rounded(rng):
    a = float32_to_bf16(rng.standard_normal(33).astype("float32"))
    ib = IRBuilder()
    A = ib.param((33,), "bfloat16", name="A")
    B = ib.param((33,), "bfloat16", name="B")
    F = ib.param((33,), "float32", name="F")
    with ib.for_range(0, 33, name="i") as i:
        ib.store(B, i, A[i] * 3.0 + 1.0)
        ib.store(F, i, E.cast("float32", E.cast("bfloat16", E.cast("float32", A[i]) / 3.0)))
    b = np.zeros(33, dtype="uint16")
    f = np.zeros(33, dtype="float32")
    run(ib.get_func("bf16"), a, b, f)
    wide = bf16_to_float32(a)
    np.testing.assert_array_equal(b, float32_to_bf16(wide * np.float32(3) + np.float32(1)))
    np.testing.assert_array_equal(f, round_to_bf16(wide / np.float32(3)))


# -- vectors --------------------------------------------------------------------------------------


def _ramp(base, stride: int, lanes: int) -> E.PrimExpr:
    return E.Ramp(f"int32x{lanes}", E.convert(base), E.const(stride), lanes)


def _bcast(value, dtype: str, lanes: int) -> E.PrimExpr:
    return E.Broadcast(f"{dtype}x{lanes}", E.convert(value, dtype), lanes)


def test_ramp_and_broadcast_loads_and_stores(rng):
    n, lanes = 6, 4
    ib = IRBuilder()
    A = ib.param((n * lanes * 2,), "float32", name="A")
    B = ib.param((n * lanes,), "float32", name="B")
    C = ib.param((n * lanes,), "float32", name="C")
    with ib.for_range(0, n, name="i") as i:
        contiguous = _ramp(i * lanes, 1, lanes)
        strided = A[_ramp(i * lanes * 2 + 1, 2, lanes)]  # the odd elements
        iota = E.Cast(f"float32x{lanes}", contiguous)
        ib.store(B, contiguous, strided * _bcast(2.0, "float32", lanes) + iota)
        ib.store(C, _ramp(n * lanes - 1 - i * lanes, -1, lanes), A[contiguous])  # reversed
    a = rng.standard_normal(n * lanes * 2).astype("float32")
    b, c = np.empty(n * lanes, "float32"), np.empty(n * lanes, "float32")
    run(ib.get_func("vectors"), a, b, c)
    np.testing.assert_allclose(b, a[1::2] * 2 + np.arange(n * lanes), rtol=1e-6)
    np.testing.assert_array_equal(c, a[: n * lanes][::-1])


def test_vector_arithmetic_select_compare_and_intrinsics(rng):
    lanes = 8
    ib = IRBuilder()
    X = ib.param((lanes,), "float32", name="X")
    Y = ib.param((lanes,), "float32", name="Y")
    K = ib.param((lanes,), "int32", name="K")
    O = ib.param((4, lanes), "float32", name="O")
    Q = ib.param((lanes,), "int32", name="Q")
    idx = _ramp(0, 1, lanes)
    x, y, k = X[idx], Y[idx], K[idx]
    ib.store(O, (E.const(0), idx), E.select(x < y, E.call(I.EXP, x), E.call(I.TANH, y)))
    ib.store(O, (E.const(1), idx), E.max_(x, y) - E.min_(x, y))
    ib.store(O, (E.const(2), idx), E.call(I.FMA, x, y, _bcast(1.0, "float32", lanes)))
    ib.store(O, (E.const(3), idx), E.Cast(f"float32x{lanes}", k // _bcast(3, "int32", lanes)))
    ib.store(
        Q,
        idx,
        E.truncmod(k, _bcast(3, "int32", lanes))
        + E.Cast(
            f"int32x{lanes}", (x > y) | E.Not(f"boolx{lanes}", x > _bcast(0.0, "float32", lanes))
        ),
    )
    x_, y_ = (rng.standard_normal(lanes).astype("float32") for _ in range(2))
    k_ = rng.integers(-20, 20, size=lanes).astype("int32")
    o, q = np.empty((4, lanes), "float32"), np.empty(lanes, "int32")
    run(ib.get_func("vector_ops"), x_, y_, k_, o, q)
    np.testing.assert_allclose(o[0], np.where(x_ < y_, np.exp(x_), np.tanh(y_)), rtol=1e-6)
    np.testing.assert_allclose(o[1], np.abs(x_ - y_), rtol=1e-6)
    np.testing.assert_allclose(o[2], x_ * y_ + 1, rtol=1e-6)
    np.testing.assert_array_equal(o[3], k_ // 3)
    np.testing.assert_array_equal(q, np.fmod(k_, 3) + ((x_ > y_) | ~(x_ > 0)))


def test_gather_with_a_computed_vector_index(rng):
    ib = IRBuilder()
    A = ib.param((10,), "float32", name="A")
    P = ib.param((4,), "int32", name="P")
    B = ib.param((4,), "float32", name="B")
    idx = _ramp(0, 1, 4)
    ib.store(B, idx, A[P[idx] * _bcast(2, "int32", 4) + _bcast(1, "int32", 4)])
    a = rng.standard_normal(10).astype("float32")
    p = np.array([3, 0, 4, 3], dtype="int32")
    b = np.empty(4, "float32")
    run(ib.get_func("gather"), a, p, b)
    np.testing.assert_array_equal(b, a[p * 2 + 1])


def test_vector_bf16_loads_and_stores(rng):
    a = float32_to_bf16(rng.standard_normal(8).astype("float32"))
    ib = IRBuilder()
    A = ib.param((8,), "bfloat16", name="A")
    B = ib.param((8,), "bfloat16", name="B")
    idx = _ramp(0, 1, 8)
    ib.store(B, idx, A[idx] * _bcast(0.1, "bfloat16", 8))
    b = np.zeros(8, dtype="uint16")
    run(ib.get_func("bf16_vec"), a, b)
    tenth = round_to_bf16(np.float32(0.1))
    np.testing.assert_array_equal(b, float32_to_bf16(bf16_to_float32(a) * tenth))


def test_multi_dimensional_vector_access_before_flattening(rng):
    ib = IRBuilder()
    A = ib.param((3, 8), "float32", name="A")
    B = ib.param((3, 8), "float32", name="B")
    with ib.for_range(0, 3, name="i") as i:
        with ib.for_range(0, 2, name="jo") as jo:
            idx = _ramp(jo * 4, 1, 4)
            ib.store(B, (i, idx), A[i, idx] + _bcast(1.0, "float32", 4))
    a = rng.standard_normal((3, 8)).astype("float32")
    b = np.empty_like(a)
    run(ib.get_func("vec2d"), a, b)
    np.testing.assert_allclose(b, a + 1)
