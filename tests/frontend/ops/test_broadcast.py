"""Broadcasting ONNX ops through Ember vs onnxruntime: comparisons, logic, bits, Pow, Mod,
integer Div, variadic Max/Min/Sum/Mean, PRelu and Where."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.frontend.onnx_models import check_against_ort, helper, make_model, single_node
from tests.nightly import examples

SHAPE_PAIRS = [
    ((3, 5), (3, 5)),
    ((2, 3, 7), (7,)),
    ((4, 1, 6), (5, 1)),
    ((1,), (3, 1, 2)),
    ((), (2, 3)),
    ((5, 9, 1), ()),
]


def _ints(rng, shape, dtype, lo=-6, hi=6):
    """Small integers, so equal pairs are common (the boundary of every comparison)."""
    return np.asarray(rng.integers(lo, hi, size=shape), dtype=dtype)


def _pair(rng, sa, sb, dtype):
    if dtype == "bool":
        return np.asarray(rng.random(sa) < 0.5), np.asarray(rng.random(sb) < 0.5)
    if dtype.startswith("uint"):
        return _ints(rng, sa, dtype, 0, 8), _ints(rng, sb, dtype, 0, 8)
    a, b = _ints(rng, sa, dtype), _ints(rng, sb, dtype)
    if dtype.startswith("float"):
        a, b = a + np.asarray(0.5, dtype) * (rng.random(sa) < 0.3), b * np.asarray(1.0, dtype)
    return np.asarray(a, dtype), np.asarray(b, dtype)


COMPARE = ["Equal", "Greater", "Less", "GreaterOrEqual", "LessOrEqual"]


@pytest.mark.parametrize("op", COMPARE)
@pytest.mark.parametrize("sa,sb", SHAPE_PAIRS)
def test_compare_broadcast(rng, op, sa, sb):
    a, b = _pair(rng, sa, sb, "float32")
    check_against_ort(single_node(op, {"a": a, "b": b}), {"a": a, "b": b})


@pytest.mark.parametrize("op", COMPARE)
@pytest.mark.parametrize("dtype", ["int8", "int32", "int64", "uint16", "float64"])
def test_compare_dtypes(rng, op, dtype):
    a, b = _pair(rng, (4, 6), (6,), dtype)
    check_against_ort(single_node(op, {"a": a, "b": b}, opset=16), {"a": a, "b": b})


@pytest.mark.parametrize("opset", [7, 11, 13, 19])
def test_equal_opsets_and_bool(rng, opset):
    a, b = _pair(rng, (3, 4), (4,), "int32")
    check_against_ort(single_node("Equal", {"a": a, "b": b}, opset=opset), {"a": a, "b": b})
    if opset >= 11:
        a, b = _pair(rng, (3, 4), (3, 1), "bool")
        model = single_node("Equal", {"a": a, "b": b}, opset=opset)
        check_against_ort(model, {"a": a, "b": b})


@pytest.mark.parametrize("op", ["And", "Or", "Xor"])
@pytest.mark.parametrize("sa,sb", SHAPE_PAIRS)
def test_logic(rng, op, sa, sb):
    a, b = _pair(rng, sa, sb, "bool")
    check_against_ort(single_node(op, {"a": a, "b": b}), {"a": a, "b": b})


@pytest.mark.parametrize("op", ["BitwiseAnd", "BitwiseOr", "BitwiseXor"])
@pytest.mark.parametrize("dtype", ["int8", "uint8", "int16", "int32", "uint32", "int64", "uint64"])
def test_bitwise(rng, op, dtype):
    info = np.iinfo(dtype)
    a = rng.integers(info.min, info.max, size=(3, 1, 5), dtype=dtype, endpoint=True)
    b = rng.integers(info.min, info.max, size=(4, 5), dtype=dtype, endpoint=True)
    check_against_ort(single_node(op, {"a": a, "b": b}, opset=18), {"a": a, "b": b})


@pytest.mark.parametrize("direction", ["LEFT", "RIGHT"])
@pytest.mark.parametrize("dtype", ["uint8", "uint16", "uint32", "uint64"])
def test_bit_shift(rng, direction, dtype):
    bits = np.iinfo(dtype).bits
    a = rng.integers(0, np.iinfo(dtype).max, size=(2, 7), dtype=dtype, endpoint=True)
    b = rng.integers(0, bits, size=(7,)).astype(dtype)
    if bits < 32:  # C promotes narrow types: a shift by the width or more gives 0
        b[:2] = [bits, bits + 3]
    model = single_node("BitShift", {"a": a, "b": b}, opset=11, direction=direction)
    check_against_ort(model, {"a": a, "b": b})


# ---- Pow, Mod, Div -------------------------------------------------------------------

POW_TYPES = [
    ("float32", "float32"),
    ("float32", "int32"),
    ("float32", "int64"),
    ("float64", "float64"),
    ("int32", "int32"),
    ("int64", "int64"),
    ("int32", "float32"),
    ("int64", "float32"),
]


@pytest.mark.parametrize("tx,ty", POW_TYPES)
def test_pow_mixed_types(rng, tx, ty):
    x = rng.uniform(0.5, 3, size=(3, 4)).astype(tx) if tx.startswith("float") else None
    if x is None:
        x = rng.integers(-5, 6, size=(3, 4)).astype(tx)
    y = rng.integers(0, 4, size=(4,)).astype(ty)
    if ty.startswith("float") and tx.startswith("float"):
        y = (y + rng.uniform(-0.5, 0.5, size=y.shape)).astype(ty)
    check_against_ort(single_node("Pow", {"x": x, "y": y}, opset=15), {"x": x, "y": y}, 1e-5)


@pytest.mark.parametrize("sa,sb", SHAPE_PAIRS)
@pytest.mark.parametrize("opset", [7, 13])
def test_pow_float_broadcast(rng, sa, sb, opset):
    x = rng.uniform(0.2, 3, size=sa).astype("float32")
    y = rng.uniform(-2, 2, size=sb).astype("float32")
    check_against_ort(single_node("Pow", {"x": x, "y": y}, opset=opset), {"x": x, "y": y})


def _nonzero(rng, shape, dtype, lo=-20, hi=20):
    v = rng.integers(lo, hi, size=shape)
    v[v == 0] = 7
    return v.astype(dtype)


@pytest.mark.parametrize("fmod", [0, 1])
@pytest.mark.parametrize("dtype", ["int8", "int16", "int32", "int64", "uint8", "uint64"])
def test_mod_integers(rng, fmod, dtype):
    """Mixed signs: fmod=0 takes the divisor's sign (Python %), fmod=1 the dividend's."""
    lo = 1 if dtype.startswith("uint") else -20
    a, b = _nonzero(rng, (4, 5), dtype, lo, 100), _nonzero(rng, (5,), dtype, lo, 20)
    model = single_node("Mod", {"a": a, "b": b}, opset=13, fmod=fmod)
    got = check_against_ort(model, {"a": a, "b": b})
    want = np.fmod(a, b) if fmod else np.mod(a, b)  # numpy: an independent second opinion
    np.testing.assert_array_equal(got[0], want)


@settings(max_examples=examples(25), deadline=None)
@given(
    a=st.lists(st.integers(-1000, 1000), min_size=1, max_size=12),
    b=st.integers(-40, 40).filter(lambda v: v != 0),
    fmod=st.integers(0, 1),
)
def test_mod_property(a, b, fmod):
    """Any signs: the remainder follows the divisor (fmod=0) or the dividend (fmod=1)."""
    x, y = np.array(a, "int32"), np.array([b], "int32")
    model = single_node("Mod", {"a": x, "b": y}, opset=13, fmod=fmod)
    got = check_against_ort(model, {"a": x, "b": y})[0]
    np.testing.assert_array_equal(got, np.fmod(x, y) if fmod else np.mod(x, y))


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("opset", [10, 13])
def test_mod_float_fmod(rng, dtype, opset):
    a = rng.uniform(-10, 10, size=(3, 1, 6)).astype(dtype)
    b = (rng.uniform(0.5, 3, size=(2, 6)) * rng.choice([-1, 1], size=(2, 6))).astype(dtype)
    model = single_node("Mod", {"a": a, "b": b}, opset=opset, fmod=1)
    check_against_ort(model, {"a": a, "b": b})


@pytest.mark.parametrize("dtype", ["int8", "int32", "int64", "uint16"])
def test_div_integers_truncate(rng, dtype):
    """ONNX integer Div is C's: the quotient is truncated toward zero (-7 / 2 == -3)."""
    lo = 0 if dtype.startswith("uint") else -50
    a, b = _nonzero(rng, (6, 7), dtype, lo, 50), _nonzero(rng, (7,), dtype, lo or 1, 9)
    got = check_against_ort(single_node("Div", {"a": a, "b": b}), {"a": a, "b": b})
    np.testing.assert_array_equal(got[0], np.trunc(a / b.astype("float64")).astype(dtype))


# ---- variadic, PRelu, Where --------------------------------------------------------------


def _variadic(op, arrays, opset=13):
    names = [f"x{k}" for k in range(len(arrays))]
    node = helper.make_node(op, names, ["y"], name=f"{op.lower()}_node")
    feeds = dict(zip(names, arrays))
    return make_model([node], feeds, ["y"], opset=opset), feeds


VARIADIC_SHAPES = [[(3, 4)], [(3, 4), (4,)], [(2, 1, 5), (3, 1), (1, 5)], [(), (2, 3), (2, 1)]]


@pytest.mark.parametrize("op", ["Max", "Min", "Sum", "Mean"])
@pytest.mark.parametrize("shapes", VARIADIC_SHAPES)
@pytest.mark.parametrize("opset", [8, 13])
def test_variadic(rng, op, shapes, opset):
    arrays = [rng.standard_normal(s).astype("float32") for s in shapes]
    model, feeds = _variadic(op, arrays, opset)
    check_against_ort(model, feeds, rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("op", ["Max", "Min"])
@pytest.mark.parametrize("dtype", ["int8", "int32", "int64", "uint32", "float64"])
def test_max_min_dtypes(rng, op, dtype):
    arrays = [_ints(rng, s, dtype, 0, 50) for s in [(3, 5), (5,), (3, 1)]]
    model, feeds = _variadic(op, arrays)
    check_against_ort(model, feeds)


@pytest.mark.parametrize("op", ["Max", "Min"])
def test_max_min_propagate_nan(rng, op):
    a = rng.standard_normal((4, 6)).astype("float32")
    b = rng.standard_normal((6,)).astype("float32")
    a[rng.random(a.shape) < 0.3] = np.nan
    b[::3] = np.nan
    model, feeds = _variadic(op, [a, b, np.float32(0.1) * b])
    check_against_ort(model, feeds)


def test_variadic_opset6_same_shapes(rng):
    arrays = [rng.standard_normal((2, 5)).astype("float32") for _ in range(3)]
    for op in ["Max", "Min", "Sum", "Mean"]:
        model, feeds = _variadic(op, arrays, opset=6)
        check_against_ort(model, feeds, rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("slope_shape", [(1,), (3, 1, 1), (5,), (), (2, 3, 4, 5)])
@pytest.mark.parametrize("opset", [7, 9, 16])
def test_prelu(rng, slope_shape, opset):
    x = rng.standard_normal((2, 3, 4, 5)).astype("float32")
    slope = rng.uniform(-1, 1, size=slope_shape).astype("float32")
    model = single_node("PRelu", {"x": x}, {"slope": slope}, opset=opset)
    check_against_ort(model, {"x": x})


def test_prelu_runtime_slope(rng):
    x = rng.standard_normal((4, 3, 5)).astype("float32")
    slope = rng.uniform(-1, 1, size=(3, 1)).astype("float32")
    check_against_ort(single_node("PRelu", {"x": x, "s": slope}), {"x": x, "s": slope})


@pytest.mark.parametrize("dtype", ["float32", "int64", "int8", "uint8", "float16"])
@pytest.mark.parametrize("shapes", [[(3, 4), (3, 4), (3, 4)], [(4,), (2, 1, 4), (3, 1)]])
def test_where(rng, dtype, shapes):
    c = rng.random(shapes[0]) < 0.5
    x, y = _pair(rng, shapes[1], shapes[2], dtype)
    feeds = {"c": c, "x": x, "y": y}
    check_against_ort(single_node("Where", feeds, opset=16), feeds)


@settings(max_examples=examples(15), deadline=None)
@given(
    shape=st.lists(st.integers(1, 5), min_size=1, max_size=4),
    masks=st.lists(st.lists(st.booleans(), min_size=4, max_size=4), min_size=3, max_size=3),
    op=st.sampled_from(["Where", "Greater", "Max", "Pow"]),
)
def test_broadcast_property(shape, masks, op):
    """Three (or two) numpy-broadcastable shapes (dims set to 1 by a mask) through one op."""
    rng = np.random.default_rng(len(shape) + sum(map(sum, masks)))
    shapes = [[1 if m else d for d, m in zip(shape, mask)] for mask in masks]
    a = rng.uniform(0.5, 2, size=shapes[1]).astype("float32")
    b = rng.uniform(-2, 2, size=shapes[2]).astype("float32")
    feeds = {"a": a, "b": b}
    if op == "Where":
        feeds = {"c": rng.random(shapes[0]) < 0.5, **feeds}
    check_against_ort(single_node(op, feeds), feeds, rtol=1e-5, atol=1e-5)
