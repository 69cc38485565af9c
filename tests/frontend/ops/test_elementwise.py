"""Elementwise ONNX ops through Ember vs onnxruntime: broadcasting, dtypes, activations."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.frontend.onnx_models import check_against_ort, single_node
from tests.nightly import examples

BINARY = ["Add", "Sub", "Mul", "Div"]
SHAPE_PAIRS = [
    ((3, 5), (3, 5)),
    ((2, 3, 7), (7,)),
    ((4, 1, 6), (5, 1)),
    ((1,), (3, 1, 2)),
    ((), (2, 3)),
    ((5, 9, 1), ()),
]


def _data(rng, shape, dtype):
    if dtype == "float32":
        sign = rng.choice(np.array([-1, 1], dtype=dtype), size=shape)
        return np.asarray(rng.uniform(0.5, 2.0, size=shape).astype(dtype) * sign, dtype=dtype)
    return np.asarray(rng.integers(-50, 50, size=shape), dtype=dtype)


@pytest.mark.parametrize("op", BINARY)
@pytest.mark.parametrize("sa,sb", SHAPE_PAIRS)
def test_binary_broadcasting_float(rng, op, sa, sb):
    a, b = _data(rng, sa, "float32"), _data(rng, sb, "float32")
    check_against_ort(single_node(op, {"a": np.asarray(a), "b": np.asarray(b)}), {"a": a, "b": b})


@pytest.mark.parametrize("op", BINARY)
@pytest.mark.parametrize("dtype", ["int64", "int32"])
def test_binary_integers(rng, op, dtype):
    a = _data(rng, (4, 7), dtype)
    b = _data(rng, (7,), dtype)
    b[b == 0] = 3  # no division by zero
    check_against_ort(single_node(op, {"a": a, "b": b}), {"a": a, "b": b})


@pytest.mark.parametrize("opset", [7, 13, 14])
def test_binary_opsets(rng, opset):
    a, b = _data(rng, (3, 4), "float32"), _data(rng, (4,), "float32")
    check_against_ort(single_node("Mul", {"a": a, "b": b}, opset=opset), {"a": a, "b": b})


@settings(max_examples=examples(15), deadline=None)
@given(
    shape=st.lists(st.integers(1, 5), min_size=1, max_size=4),
    mask=st.lists(st.booleans(), min_size=4, max_size=4),
    drop=st.integers(0, 3),
)
def test_add_broadcast_property(shape, mask, drop):
    """Any numpy-broadcastable pair (some dims set to 1, leading dims dropped)."""
    rng = np.random.default_rng(len(shape) * 7 + drop)
    other = [1 if m else d for d, m in zip(shape, mask)][min(drop, len(shape) - 1) :]
    a = rng.standard_normal(shape).astype("float32")
    b = rng.standard_normal(other).astype("float32")
    check_against_ort(single_node("Add", {"a": a, "b": b}), {"a": a, "b": b})


@pytest.mark.parametrize("op", ["Relu", "Sigmoid", "Tanh", "Exp", "Identity"])
@pytest.mark.parametrize("shape", [(7,), (3, 5, 9), (2, 1, 3, 17)])
def test_unary(rng, op, shape):
    x = rng.uniform(-4, 4, size=shape).astype("float32")
    check_against_ort(single_node(op, {"x": x}), {"x": x}, rtol=2e-6, atol=1e-6)


def test_constant_attribute_forms(rng):
    from tests.frontend.onnx_models import helper, make_model

    x = rng.standard_normal((2, 3)).astype("float32")
    tensor = helper.make_tensor("t", 1, (3,), rng.standard_normal(3).astype("float32"))
    nodes = [
        helper.make_node("Constant", [], ["c1"], name="c1", value=tensor),
        helper.make_node("Constant", [], ["c2"], name="c2", value_float=1.5),
        helper.make_node("Constant", [], ["c3"], name="c3", value_floats=[0.5, 2.0, -1.0]),
        helper.make_node("Add", ["x", "c1"], ["a"], name="a"),
        helper.make_node("Mul", ["a", "c2"], ["b"], name="b"),
        helper.make_node("Sub", ["b", "c3"], ["y"], name="y"),
    ]
    check_against_ort(make_model(nodes, {"x": x}, ["y"]), {"x": x})
