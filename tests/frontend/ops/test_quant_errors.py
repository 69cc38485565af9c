"""Bad quantized models raise EmberError subclasses that name the ONNX node."""

from __future__ import annotations

import numpy as np
import pytest

import ember
from tests.frontend.ops.quant_models import node_model, random_q


def _x(rng, *shape):
    return rng.standard_normal(shape).astype("float32")


def test_scale_that_fits_no_axis(rng):
    x = _x(rng, 3, 5)
    consts = {"s": np.ones(4, "float32"), "z": np.zeros(4, "uint8")}
    with pytest.raises(
        ember.ArgumentError, match="(?s)fits neither per-tensor nor per-axis.*quantizelinear_node"
    ):
        ember.compile(node_model("QuantizeLinear", {"x": x}, consts, opset=13, axis=1))


def test_scale_and_zero_point_shapes_differ(rng):
    x = _x(rng, 3, 5)
    consts = {"s": np.ones(5, "float32"), "z": np.zeros((), "uint8")}
    with pytest.raises(ember.ArgumentError, match="(?s)differ in shape.*quantizelinear_node"):
        ember.compile(node_model("QuantizeLinear", {"x": x}, consts, opset=13, axis=1))


def test_blocked_scale_of_the_wrong_shape(rng):
    x = random_q(rng, (4, 6), "int8")
    consts = {"s": np.ones((4, 3), "float32")}
    with pytest.raises(
        ember.ArgumentError, match="(?s)must have shape \\[4, 2\\].*dequantizelinear_node"
    ):
        ember.compile(node_model("DequantizeLinear", {"x": x}, consts, axis=1, block_size=4))


def test_negative_block_size(rng):
    x = _x(rng, 4, 6)
    with pytest.raises(ember.ArgumentError, match="quantizelinear_node.*block_size -2"):
        ember.compile(
            node_model("QuantizeLinear", {"x": x}, {"s": np.ones((4, 2), "float32")}, block_size=-2)
        )


def test_axis_out_of_range(rng):
    x = _x(rng, 4, 6)
    consts = {"s": np.ones(6, "float32")}
    with pytest.raises(ember.ArgumentError, match="quantizelinear_node.*axis 2 is out of range"):
        ember.compile(node_model("QuantizeLinear", {"x": x}, consts, opset=13, axis=2))


def test_per_axis_scale_before_opset_13(rng):
    x = _x(rng, 4, 6)
    consts = {"s": np.ones(6, "float32")}
    with pytest.raises(ember.ArgumentError, match="opset 10 quantizes per tensor only"):
        ember.compile(node_model("QuantizeLinear", {"x": x}, consts, opset=10))


def test_e8m0_output_is_unsupported(rng):
    """float8e8m0 is a scale type: ONNX's QuantizeLinear does not quantize to it."""
    from onnx import TensorProto

    x = _x(rng, 2, 3)
    model = node_model(
        "QuantizeLinear",
        {"x": x},
        {"s": np.ones((), "float32")},
        output_dtype=TensorProto.FLOAT8E8M0,
    )
    with pytest.raises(ember.UnsupportedOperatorError, match="quantizing to .*not supported"):
        ember.compile(model)


def test_qlinear_conv_bias_must_be_int32(rng):
    x = random_q(rng, (1, 2, 5, 5), "uint8")
    consts = {
        "sx": np.array(0.1, "float32"),
        "zx": np.array(3, "uint8"),
        "w": random_q(rng, (3, 2, 3, 3), "uint8"),
        "sw": np.array(0.1, "float32"),
        "zw": np.array(4, "uint8"),
        "sy": np.array(0.2, "float32"),
        "zy": np.array(5, "uint8"),
        "b": np.ones(3, "float32"),
    }
    model = node_model("QLinearConv", {"x": x}, consts, order=["x", *consts], opset=10)
    with pytest.raises(ember.EmberError, match="qlinearconv_node"):
        ember.compile(model)


def test_matmul_integer_zero_point_of_the_wrong_length(rng):
    a, b = random_q(rng, (3, 4), "uint8"), random_q(rng, (4, 5), "uint8")
    consts = {"za": np.zeros((), "uint8"), "zb": np.zeros(4, "uint8")}
    model = node_model("MatMulInteger", {"a": a, "b": b}, consts, opset=10)
    with pytest.raises(
        ember.ArgumentError, match="(?s)5 values, one per column.*matmulinteger_node"
    ):
        ember.compile(model)
