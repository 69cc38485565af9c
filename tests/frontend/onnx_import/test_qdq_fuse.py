"""fuse_qdq: which DQ -> Conv/MatMul -> Q triples become QLinear ops, and that they compute
what onnxruntime's integer kernels compute."""

from __future__ import annotations

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402

import ember  # noqa: E402
from ember.frontend.onnx_import.qdq_fuse import fuse_qdq  # noqa: E402
from tests.frontend.onnx_models import run_ort  # noqa: E402
from tests.frontend.ops.quant_models import random_q, random_zp  # noqa: E402


def _matmul_qdq(rng, per_column: bool, extra_consumer: bool = False):
    """x (float) -> Q -> DQ -> MatMul(DQ(w int8)) -> Q -> DQ -> y."""
    k, n = 13, 6
    init = {
        "sx": np.array(0.02, "float32"),
        "zx": np.array(128, "uint8"),
        "w": random_q(rng, (k, n), "int8"),
        "sw": rng.uniform(0.01, 0.02, size=(n,) if per_column else ()).astype("float32"),
        "zw": np.zeros((n,) if per_column else (), "int8"),
        "sy": np.array(0.05, "float32"),
        "zy": random_zp(rng, (), "uint8"),
    }
    m = helper.make_node
    nodes = [
        m("QuantizeLinear", ["x", "sx", "zx"], ["xq"], name="qx"),
        m("DequantizeLinear", ["xq", "sx", "zx"], ["xd"], name="dqx"),
        m("DequantizeLinear", ["w", "sw", "zw"], ["wd"], name="dqw", axis=1),
        m("MatMul", ["xd", "wd"], ["mm"], name="mm"),
        m("QuantizeLinear", ["mm", "sy", "zy"], ["yq"], name="qy"),
        m("DequantizeLinear", ["yq", "sy", "zy"], ["y"], name="dqy"),
    ]
    outs = [helper.make_tensor_value_info("y", TensorProto.FLOAT, [5, n])]
    if extra_consumer:
        outs.append(helper.make_tensor_value_info("mm", TensorProto.FLOAT, [5, n]))
    g = helper.make_graph(
        nodes,
        "qdq",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [5, k])],
        outs,
        [numpy_helper.from_array(v, name) for name, v in init.items()],
    )
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 9
    return model


@pytest.mark.parametrize("per_column", [False, True])
def test_matmul_triple_becomes_qlinear_matmul(rng, per_column):
    model = _matmul_qdq(rng, per_column)
    fused = fuse_qdq(model)
    ops = [n.op_type for n in fused.graph.node]
    assert ops == ["QuantizeLinear", "QLinearMatMul", "DequantizeLinear"]
    onnx.checker.check_model(fused)
    x = (rng.standard_normal((5, 13)) * 2).astype("float32")
    (got,) = ember.compile(fused).run({"x": x})
    (want,) = run_ort(fused, {"x": x})  # onnxruntime's QLinearMatMul kernel on the same graph
    np.testing.assert_array_equal(got, want)
    (plain,) = ember.compile(model).run({"x": x})  # float path: within one output step
    assert np.abs(plain - got).max() <= 0.05 * 1.0001


def test_a_product_read_elsewhere_is_not_fused(rng):
    model = _matmul_qdq(rng, per_column=False, extra_consumer=True)
    assert [n.op_type for n in fuse_qdq(model).graph.node] == [n.op_type for n in model.graph.node]


def test_conv_bias_with_another_scale_is_not_fused(rng):
    init = {
        "sx": np.array(0.02, "float32"),
        "zx": np.array(3, "uint8"),
        "w": random_q(rng, (2, 1, 3, 3), "int8"),
        "sw": np.array(0.01, "float32"),
        "zw": np.array(0, "int8"),
        "b": np.array([100, -7], "int32"),
        "sb": np.array(0.0003, "float32"),  # not 0.02 * 0.01
        "sy": np.array(0.05, "float32"),
        "zy": np.array(9, "uint8"),
    }
    m = helper.make_node
    nodes = [
        m("DequantizeLinear", ["xq", "sx", "zx"], ["xd"]),
        m("DequantizeLinear", ["w", "sw", "zw"], ["wd"]),
        m("DequantizeLinear", ["b", "sb"], ["bd"]),
        m("Conv", ["xd", "wd", "bd"], ["c"]),
        m("QuantizeLinear", ["c", "sy", "zy"], ["y"]),
    ]
    g = helper.make_graph(
        nodes,
        "qdq",
        [helper.make_tensor_value_info("xq", TensorProto.UINT8, [1, 1, 5, 6])],
        [helper.make_tensor_value_info("y", TensorProto.UINT8, [1, 2, 3, 4])],
        [numpy_helper.from_array(v, name) for name, v in init.items()],
    )
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    assert "Conv" in [n.op_type for n in fuse_qdq(model).graph.node]
    init["sb"] = np.array(np.float32(0.02) * np.float32(0.01), "float32")
    del model.graph.initializer[:]
    model.graph.initializer.extend(numpy_helper.from_array(v, name) for name, v in init.items())
    fused = fuse_qdq(model)
    assert [n.op_type for n in fused.graph.node] == ["QLinearConv"]
    xq = random_q(rng, (1, 1, 5, 6), "uint8")
    np.testing.assert_array_equal(
        ember.compile(fused).run({"xq": xq})[0], run_ort(fused, {"xq": xq})[0]
    )
