"""Unary elementwise ONNX ops through Ember vs onnxruntime: math functions, rounding, sign,
NaN/Inf tests, logic and bit negation, activations with their attributes, Clip in both forms."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import ember
from tests.frontend.onnx_models import (
    check_against_ort,
    helper,
    make_model,
    run_ort,
    single_node,
)
from tests.nightly import examples, sample_in_ci

SHAPES = [(7,), (3, 5, 9), (2, 1, 3, 17)]
# op -> (low, high) of its random inputs: inside the domain, away from poles
FLOAT_MATH = {
    "Floor": (-9, 9),
    "Ceil": (-9, 9),
    "Sqrt": (0.01, 9),
    "Reciprocal": (0.2, 5),
    "Log": (0.01, 9),
    "Sin": (-6, 6),
    "Cos": (-6, 6),
    "Tan": (-1.4, 1.4),
    "Asin": (-0.99, 0.99),
    "Acos": (-0.99, 0.99),
    "Atan": (-9, 9),
    "Sinh": (-4, 4),
    "Cosh": (-4, 4),
    "Asinh": (-9, 9),
    "Acosh": (1.01, 9),
    "Atanh": (-0.95, 0.95),
    "Erf": (-3, 3),
    "Softplus": (-30, 30),
    "Softsign": (-9, 9),
    "HardSwish": (-5, 5),
    "Mish": (-6, 6),
    "Abs": (-9, 9),
    "Neg": (-9, 9),
    "Sign": (-3, 3),
}


def _signed(rng, shape, lo, hi, dtype="float32"):
    return rng.uniform(lo, hi, size=shape).astype(dtype)


@pytest.mark.parametrize("op", sorted(FLOAT_MATH))
@pytest.mark.parametrize("shape", SHAPES)
def test_float_math(rng, op, shape):
    sample_in_ci(op, shape)
    x = _signed(rng, shape, *FLOAT_MATH[op])
    if op == "Reciprocal":
        x *= rng.choice(np.array([-1, 1], "float32"), size=shape)
    model = single_node(op, {"x": x}, opset=18)  # Mish is new in 18
    check_against_ort(model, {"x": x}, rtol=2e-6, atol=2e-6)


# numpy references where onnxruntime has no float64 kernel (Erf, Atanh, Softplus)
NUMPY_MATH = {
    "Sqrt": np.sqrt,
    "Log": np.log,
    "Sin": np.sin,
    "Erf": np.vectorize(math.erf),
    "Atanh": np.arctanh,
    "Floor": np.floor,
    "Softplus": lambda x: np.logaddexp(0, x),
}


@pytest.mark.parametrize("op", sorted(NUMPY_MATH))
def test_float_math_float64(rng, op):
    x = _signed(rng, (5, 13), *FLOAT_MATH[op], "float64")
    (got,) = ember.compile(single_node(op, {"x": x}, opset=22), target="llvm").run({"x": x})
    assert got.dtype == np.float64
    np.testing.assert_allclose(got, NUMPY_MATH[op](x), rtol=1e-13, atol=1e-13)


@pytest.mark.parametrize("op", ["Sqrt", "Log", "Sin", "Floor", "Abs", "Neg", "Reciprocal"])
def test_float_math_float16(rng, op):
    x = _signed(rng, (5, 13), *FLOAT_MATH[op], "float16")
    check_against_ort(single_node(op, {"x": x}, opset=13), {"x": x}, rtol=1e-3, atol=1e-3)


@pytest.mark.parametrize("op", ["Sin", "Cos", "Tan", "Asin", "Sinh", "Acosh", "Softplus"])
@pytest.mark.parametrize("opset", [9, 13, 22])
def test_math_opsets(rng, op, opset):
    lo, hi = FLOAT_MATH[op]
    x = _signed(rng, (4, 6), lo, hi)
    check_against_ort(single_node(op, {"x": x}, opset=opset), {"x": x}, rtol=2e-6, atol=2e-6)


def test_erf_float32_accuracy():
    """Erf (and exact Gelu) use Ember's own float32 formula: within 3.6e-7 relative of
    math.erf (2.6e-7 below |x| = 1) on a dense grid, 200,000 random values where its
    error peaks (|x| in [2.5, 4]), tiny values and the saturated tails past the clamp
    at 4; NaN and infinities as erf has them."""
    rng = np.random.default_rng(0)
    peak = rng.uniform(2.5, 4.0, 200_000) * rng.choice([-1, 1], 200_000)
    grid = np.concatenate([np.linspace(-7, 7, 20001), peak, [4, -4, 4 + 1e-6, 1e-30, -3e-8]])
    x = np.concatenate([grid, [np.nan, np.inf, -np.inf]]).astype("float32")
    (got,) = ember.compile(single_node("Erf", {"x": x}), target="llvm").run({"x": x})
    want = np.array([math.erf(float(v)) for v in x[:-3]])
    np.testing.assert_allclose(got[:-3], want, rtol=3.6e-7, atol=1e-37)
    small = np.abs(x[:-3]) < 1
    np.testing.assert_allclose(got[:-3][small], want[small], rtol=2.6e-7, atol=1e-37)
    assert np.isnan(got[-3]) and got[-2] == 1 and got[-1] == -1
    assert np.all(np.abs(got[:-3]) <= 1)


SPECIALS = np.array([np.nan, -np.inf, np.inf, -0.0, 0.0, 2.5, -2.5, 0.5, -1e-30], "float32")


@pytest.mark.parametrize(
    "op", ["Sign", "Relu", "Neg", "Abs", "Round", "Floor", "Ceil", "Reciprocal", "Sqrt", "Log"]
)
def test_nan_inf_signed_zero(op):
    """NaN, infinities and the sign of zero come out as onnxruntime has them."""
    got = check_against_ort(single_node(op, {"x": SPECIALS}), {"x": SPECIALS})[0]
    want = run_ort(single_node(op, {"x": SPECIALS}), {"x": SPECIALS})[0]
    real = ~np.isnan(want)  # a NaN's sign bit means nothing
    np.testing.assert_array_equal(np.signbit(got[real]), np.signbit(want[real]))


def test_softplus_float32_accuracy():
    """Softplus (and Mish) use a vectorizable log1p for float32: within 5e-7 relative of
    float64 numpy across the range, finite at both ends, NaN kept."""
    x = np.concatenate([np.linspace(-90, 90, 20001), [np.nan, np.inf, -np.inf]]).astype("f4")
    (got,) = ember.compile(single_node("Softplus", {"x": x}), target="llvm").run({"x": x})
    want = np.logaddexp(0.0, x[:-3].astype("float64"))
    np.testing.assert_allclose(got[:-3], want, rtol=5e-7, atol=1e-37)
    assert np.isnan(got[-3]) and got[-2] == np.inf and got[-1] == 0


def test_round_halves_to_even(rng):
    """Round is banker's rounding: 0.5 -> 0, 1.5 -> 2, -2.5 -> -2."""
    halves = rng.integers(-20, 20, size=(6, 7)).astype("float32") + 0.5
    x = np.where(rng.random((6, 7)) < 0.5, halves, rng.uniform(-20, 20, (6, 7))).astype("float32")
    got = check_against_ort(single_node("Round", {"x": x}, opset=11), {"x": x})
    np.testing.assert_array_equal(got[0], np.round(x))  # numpy also rounds halves to even


@pytest.mark.parametrize("op", ["Abs", "Neg", "Sign"])
@pytest.mark.parametrize("dtype", ["int8", "int16", "int32", "int64"])
def test_signed_integers(rng, op, dtype):
    x = rng.integers(-100, 100, size=(3, 11)).astype(dtype)
    x[0, :3] = 0
    check_against_ort(single_node(op, {"x": x}, opset=14), {"x": x})


@pytest.mark.parametrize("dtype", ["int8", "int16", "int32", "int64"])
def test_relu_integers(rng, dtype):
    """Relu takes integers from opset 14 (onnxruntime only has int8/int32: numpy is the
    reference)."""
    x = rng.integers(-100, 100, size=(3, 11)).astype(dtype)
    (got,) = ember.compile(single_node("Relu", {"x": x}, opset=14), target="llvm").run({"x": x})
    np.testing.assert_array_equal(got, np.maximum(x, 0).astype(dtype))
    assert got.dtype == x.dtype


@pytest.mark.parametrize("dtype", ["uint8", "uint32", "uint64"])
def test_unsigned_abs_sign(rng, dtype):
    x = rng.integers(0, 200, size=(4, 9)).astype(dtype)
    x[1, :2] = 0
    check_against_ort(single_node("Abs", {"x": x}, opset=13), {"x": x})
    check_against_ort(single_node("Sign", {"x": x}, opset=13), {"x": x})


def test_sign_of_float_zero(rng):
    x = rng.uniform(-2, 2, size=(5, 5)).astype("float32")
    x[2] = 0.0
    check_against_ort(single_node("Sign", {"x": x}), {"x": x})


def _with_specials(rng, shape, dtype="float32"):
    x = rng.uniform(-5, 5, size=shape).astype(dtype)
    flat = x.reshape(-1)
    picks = rng.choice(flat.size, size=flat.size // 2, replace=False)
    specials = np.array([np.nan, np.inf, -np.inf], dtype=dtype)
    flat[picks] = specials[rng.integers(0, 3, size=picks.size)]
    return x


@pytest.mark.parametrize("dtype", ["float32", "float64", "float16"])
def test_isnan(rng, dtype):
    x = _with_specials(rng, (3, 7), dtype)
    check_against_ort(single_node("IsNaN", {"x": x}, opset=20), {"x": x})


@pytest.mark.parametrize("neg,pos", [(1, 1), (1, 0), (0, 1), (0, 0)])
@pytest.mark.parametrize("opset", [10, 20])
def test_isinf(rng, neg, pos, opset):
    x = _with_specials(rng, (4, 9))
    model = single_node("IsInf", {"x": x}, opset=opset, detect_negative=neg, detect_positive=pos)
    check_against_ort(model, {"x": x})


def test_not(rng):
    x = rng.random((5, 3, 4)) < 0.5
    check_against_ort(single_node("Not", {"x": x}), {"x": x})


@pytest.mark.parametrize("dtype", ["int8", "uint16", "int32", "uint64"])
def test_bitwise_not(rng, dtype):
    info = np.iinfo(dtype)
    x = rng.integers(info.min, info.max, size=(6, 5), dtype=dtype, endpoint=True)
    check_against_ort(single_node("BitwiseNot", {"x": x}, opset=18), {"x": x})


# op -> (opsets to try, attribute sets to try)
ACTIVATIONS = {
    "LeakyRelu": ([7, 16], [{}, {"alpha": 0.3}, {"alpha": -1.5}]),
    "Elu": ([7, 22], [{}, {"alpha": 0.4}]),
    "Selu": ([7, 22], [{}, {"alpha": 2.0, "gamma": 0.5}]),
    "Celu": ([12], [{}, {"alpha": 2.5}]),
    "HardSigmoid": ([7, 22], [{}, {"alpha": 0.3, "beta": 0.1}]),
    "ThresholdedRelu": ([10, 22], [{}, {"alpha": 0.7}, {"alpha": -0.5}]),
    "Shrink": ([9], [{}, {"lambd": 1.2, "bias": 0.4}]),
    "Gelu": ([20], [{}, {"approximate": "none"}, {"approximate": "tanh"}]),
}
ACTIVATION_CASES = [
    (op, opset, attrs) for op, (opsets, sets) in ACTIVATIONS.items() for opset in opsets
    for attrs in sets
]  # fmt: skip


@pytest.mark.parametrize("op,opset,attrs", ACTIVATION_CASES)
def test_activation(rng, op, opset, attrs):
    x = _signed(rng, (3, 5, 7), -4, 4)
    check_against_ort(single_node(op, {"x": x}, opset=opset, **attrs), {"x": x}, 2e-6, 2e-6)


@pytest.mark.parametrize("op", [*ACTIVATIONS, "Softplus", "Softsign", "HardSwish", "Mish"])
def test_activation_nan_inf(rng, op):
    """NaN stays NaN and infinities saturate as onnxruntime has them."""
    x = _with_specials(rng, (4, 7))
    check_against_ort(single_node(op, {"x": x}, opset=20), {"x": x}, 2e-6, 2e-6)


@pytest.mark.parametrize("dtype", ["int8", "int32", "int64", "float64"])
def test_shrink_other_types(rng, dtype):
    x = rng.integers(-10, 10, size=(4, 6)).astype(dtype)
    model = single_node("Shrink", {"x": x}, opset=9, lambd=2.0, bias=1.0)
    check_against_ort(model, {"x": x})


@settings(max_examples=examples(20), deadline=None)
@given(
    op=st.sampled_from(["LeakyRelu", "Elu", "Celu", "ThresholdedRelu", "HardSigmoid"]),
    alpha=st.floats(0.05, 3.0),
    shape=st.lists(st.integers(1, 6), min_size=1, max_size=3),
)
def test_activation_alpha_property(op, alpha, shape):
    rng = np.random.default_rng(len(shape) + int(alpha * 100))
    x = rng.uniform(-4, 4, size=shape).astype("float32")
    model = single_node(op, {"x": x}, opset=13 if op != "Celu" else 12, alpha=alpha)
    check_against_ort(model, {"x": x}, rtol=2e-6, atol=2e-6)


# ---- Clip ----------------------------------------------------------------------------


@pytest.mark.parametrize("attrs", [{}, {"min": -0.5}, {"max": 1.0}, {"min": -1.0, "max": 0.25}])
def test_clip_6_attributes(rng, attrs):
    x = _signed(rng, (3, 8), -3, 3)
    check_against_ort(single_node("Clip", {"x": x}, opset=6, **attrs), {"x": x})


def _clip_model(x, lo, hi, opset, as_inputs=()):
    """Clip with optional bounds: ``as_inputs`` names the bounds fed at run time."""
    names = ["x", "lo" if lo is not None else "", "hi" if hi is not None else ""]
    while names[-1] == "":
        names.pop()
    feeds = {"x": x}
    inits = {}
    for key, value in (("lo", lo), ("hi", hi)):
        if value is not None:
            (feeds if key in as_inputs else inits)[key] = np.asarray(value, dtype=x.dtype)
    node = helper.make_node("Clip", names, ["y"], name="clip_node")
    return make_model([node], feeds, ["y"], inits, opset), feeds


CLIP_BOUNDS = [(-0.5, 0.7), (None, 0.3), (-0.2, None), (None, None), (1.0, -1.0)]


@pytest.mark.parametrize("lo,hi", CLIP_BOUNDS)
@pytest.mark.parametrize("opset", [11, 13])
def test_clip_constant_bounds(rng, lo, hi, opset):
    x = _signed(rng, (5, 7), -2, 2)
    model, feeds = _clip_model(x, lo, hi, opset)
    check_against_ort(model, feeds)


@pytest.mark.parametrize("lo,hi", CLIP_BOUNDS)
@pytest.mark.parametrize("as_inputs", [("lo",), ("hi",), ("lo", "hi")])
def test_clip_runtime_bounds(rng, lo, hi, as_inputs):
    x = _signed(rng, (2, 3, 5), -2, 2)
    model, feeds = _clip_model(x, lo, hi, 13, as_inputs)
    check_against_ort(model, feeds)


@pytest.mark.parametrize("dtype", ["int8", "int32", "int64", "uint8", "float64"])
def test_clip_other_types(rng, dtype):
    x = rng.integers(0 if dtype == "uint8" else -50, 50, size=(4, 9)).astype(dtype)
    model, feeds = _clip_model(x, 3, 20, 13)
    check_against_ort(model, feeds)


@pytest.mark.parametrize("runtime", [False, True])
def test_clip_keeps_nan(rng, runtime):
    x = _with_specials(rng, (3, 8))
    model, feeds = _clip_model(x, -0.5, 2.0, 13, ("lo", "hi") if runtime else ())
    check_against_ort(model, feeds)


@settings(max_examples=examples(20), deadline=None)
@given(
    lo=st.one_of(st.none(), st.floats(-2, 2)),
    hi=st.one_of(st.none(), st.floats(-2, 2)),
    runtime=st.booleans(),
)
def test_clip_property(lo, hi, runtime):
    rng = np.random.default_rng(7)
    x = rng.uniform(-3, 3, size=(3, 4)).astype("float32")
    model, feeds = _clip_model(x, lo, hi, 13, ("lo", "hi") if runtime else ())
    check_against_ort(model, feeds)
