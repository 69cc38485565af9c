"""QuantizeLinear, DequantizeLinear and DynamicQuantizeLinear through Ember vs onnxruntime.

Every comparison is exact: the quantized integers and the dequantized floats match
onnxruntime bit for bit (same division, round-half-to-even, saturation order). Data
is random with a spread that saturates both ends of the range, and the tie cases
(``x / scale`` exactly halfway between integers) are tested on their own.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.frontend.ops.quant_models import check_exact, node_model, random_q, random_zp
from tests.nightly import examples

SETTINGS = settings(
    max_examples=examples(15), deadline=None, suppress_health_check=[HealthCheck.too_slow]
)


def _x(rng, shape, spread=300.0):
    return (rng.standard_normal(shape) * spread).astype("float32")


def _scale(rng, shape):
    return rng.uniform(0.5, 3.0, size=shape).astype("float32")


def _cases(dtypes):
    """(dtype, opset) pairs; the 16-bit types arrive in opset 21."""
    opsets = [10, 13, 19, 21, 23, 25]
    return [(d, o) for d in dtypes for o in opsets if o >= 21 or not d.endswith("16")]


@pytest.mark.parametrize("dtype,opset", _cases(["uint8", "int8", "uint16", "int16"]))
def test_quantize_per_tensor(rng, dtype, opset):
    spread = 300.0 if dtype.endswith("8") else 60000.0
    x = _x(rng, (3, 5, 7), spread)
    consts = {"s": _scale(rng, ()), "z": random_zp(rng, (), dtype)}
    check_exact(node_model("QuantizeLinear", {"x": x}, consts, opset=opset), {"x": x})


@pytest.mark.parametrize("opset", [10, 21])
def test_quantize_without_zero_point_is_uint8(rng, opset):
    x = _x(rng, (4, 9))
    check_exact(
        node_model("QuantizeLinear", {"x": x}, {"s": _scale(rng, ())}, opset=opset), {"x": x}
    )


def test_quantize_output_dtype_attribute(rng):
    x = _x(rng, (2, 11))
    model = node_model("QuantizeLinear", {"x": x}, {"s": _scale(rng, ())}, output_dtype=3)
    (y,) = check_exact(model, {"x": x})
    assert y.dtype == np.int8


def test_quantize_ties_round_to_even(rng):
    """``x / scale`` exactly k + 0.5: ties go to the even integer, before the zero point."""
    k = rng.integers(-60, 60, size=(5, 13))
    x = ((k + 0.5) * 0.25).astype("float32")  # exact in float32, / 0.25 is exact too
    consts = {"s": np.array(0.25, "float32"), "z": np.array(3, "int8")}
    (y,) = check_exact(node_model("QuantizeLinear", {"x": x}, consts, opset=13), {"x": x})
    want = np.clip(np.rint(x.astype(np.float64) / 0.25) + 3, -128, 127).astype("int8")
    np.testing.assert_array_equal(y, want)  # numpy's rint is half-to-even: an independent check


@pytest.mark.parametrize("axis", [0, 1, -1, 2])
@pytest.mark.parametrize("dtype", ["uint8", "int8"])
def test_quantize_per_axis(rng, axis, dtype):
    shape = (3, 5, 7)
    x = _x(rng, shape)
    n = shape[axis]
    consts = {"s": _scale(rng, (n,)), "z": random_zp(rng, (n,), dtype)}
    check_exact(node_model("QuantizeLinear", {"x": x}, consts, opset=13, axis=axis), {"x": x})


@pytest.mark.parametrize("axis,block", [(1, 2), (0, 3), (1, 5), (-1, 4)])
def test_quantize_blocked(rng, axis, block):
    shape = (6, 10, 3) if axis != -1 else (5, 9)
    x = _x(rng, shape)
    a = axis % len(shape)
    pshape = tuple(-(-n // block) if d == a else n for d, n in enumerate(shape))
    consts = {"s": _scale(rng, pshape), "z": random_zp(rng, pshape, "int8")}
    model = node_model("QuantizeLinear", {"x": x}, consts, axis=axis, block_size=block)
    check_exact(model, {"x": x})


def test_quantize_scale_and_zero_point_as_inputs(rng):
    """Scales fed at run time go through the same kernel as constants."""
    x = _x(rng, (2, 3, 5))
    feeds = {"x": x, "s": _scale(rng, (3,)), "z": random_zp(rng, (3,), "uint8")}
    check_exact(node_model("QuantizeLinear", feeds, opset=13), feeds)


def test_quantize_float16_input(rng):
    x = _x(rng, (4, 7)).astype("float16")
    consts = {"s": _scale(rng, ()).astype("float16"), "z": random_zp(rng, (), "int8")}
    check_exact(node_model("QuantizeLinear", {"x": x}, consts, opset=19), {"x": x})


@pytest.mark.parametrize("dtype,opset", _cases(["uint8", "int8", "uint16", "int16", "int32"]))
def test_dequantize_per_tensor(rng, dtype, opset):
    x = random_q(rng, (3, 4, 5), dtype)
    consts = {"s": _scale(rng, ())}
    if dtype != "int32":  # an int32 zero point must be 0: leave it out
        consts["z"] = random_zp(rng, (), dtype)
    check_exact(node_model("DequantizeLinear", {"x": x}, consts, opset=opset), {"x": x})


@pytest.mark.parametrize("axis", [0, 1, -1])
def test_dequantize_per_axis(rng, axis):
    shape = (4, 3, 6)
    x = random_q(rng, shape, "int8")
    n = shape[axis]
    consts = {"s": _scale(rng, (n,)), "z": random_zp(rng, (n,), "int8")}
    check_exact(node_model("DequantizeLinear", {"x": x}, consts, opset=13, axis=axis), {"x": x})


@pytest.mark.parametrize("axis,block", [(1, 3), (0, 2), (-1, 4)])
def test_dequantize_blocked(rng, axis, block):
    shape = (5, 7, 3) if axis != -1 else (3, 10)
    x = random_q(rng, shape, "uint8")
    a = axis % len(shape)
    pshape = tuple(-(-n // block) if d == a else n for d, n in enumerate(shape))
    consts = {"s": _scale(rng, pshape), "z": random_zp(rng, pshape, "uint8")}
    model = node_model("DequantizeLinear", {"x": x}, consts, axis=axis, block_size=block)
    check_exact(model, {"x": x})


def test_dequantize_float16_scale(rng):
    x = random_q(rng, (3, 8), "uint8")
    consts = {"s": _scale(rng, ()).astype("float16"), "z": random_zp(rng, (), "uint8")}
    check_exact(node_model("DequantizeLinear", {"x": x}, consts, opset=19), {"x": x})


def test_quantize_dequantize_round_trip_against_numpy(rng):
    """An independent reference: numpy's formula, with float64 arithmetic where exact."""
    x = _x(rng, (6, 5), 50.0)
    s, z = np.float32(0.37), np.uint8(131)
    q_want = np.clip(np.rint(x / s) + np.float32(z), 0, 255).astype("uint8")
    import ember

    model = node_model("QuantizeLinear", {"x": x}, {"s": np.array(s), "z": np.array(z)}, opset=13)
    (q,) = ember.compile(model).run({"x": x})
    np.testing.assert_array_equal(q, q_want)
    dq = node_model("DequantizeLinear", {"q": q}, {"s": np.array(s), "z": np.array(z)}, opset=13)
    (y,) = ember.compile(dq).run({"q": q})
    np.testing.assert_array_equal(y, (q.astype(np.int32) - 131).astype(np.float32) * s)


@pytest.mark.parametrize(
    "shape,offset", [((3, 7), 0.0), ((2, 5, 9), 4.0), ((11,), -4.0), ((4, 4), 0.5)]
)
def test_dynamic_quantize(rng, shape, offset):
    """Mixed signs, all positive (min adjusted to 0), all negative (max adjusted to 0)."""
    x = (rng.standard_normal(shape) + offset).astype("float32")
    check_exact(node_model("DynamicQuantizeLinear", {"x": x}, n_outputs=3, opset=11), {"x": x})


def test_dynamic_quantize_constant_input():
    """max == min (all zeros widened to the range [0, 0]): scale 1, zero point 0."""
    x = np.zeros((3, 4), "float32")
    y, s, z = check_exact(
        node_model("DynamicQuantizeLinear", {"x": x}, n_outputs=3, opset=11), {"x": x}
    )
    assert s == 1.0 and z == 0


@SETTINGS
@given(
    st.lists(st.integers(1, 6), min_size=1, max_size=4),
    st.integers(0, 3),
    st.sampled_from(["uint8", "int8"]),
    st.integers(0, 1000),
)
def test_quantize_dequantize_space(dims, axis_pick, dtype, seed):
    """Random ranks, axes and types: quantize then dequantize, each exact vs onnxruntime."""
    rng = np.random.default_rng(seed)
    shape = tuple(dims)
    axis = axis_pick % len(shape)
    x = _x(rng, shape, 200.0)
    consts = {"s": _scale(rng, (shape[axis],)), "z": random_zp(rng, (shape[axis],), dtype)}
    (q,) = check_exact(
        node_model("QuantizeLinear", {"x": x}, consts, opset=13, axis=axis), {"x": x}
    )
    model = node_model("DequantizeLinear", {"q": q}, consts, opset=13, axis=axis)
    check_exact(model, {"q": q})
