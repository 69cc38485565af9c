"""``MatMulInteger`` with constant int8 weights: packed for VNNI at compile time
(``pack_int8_weights``) and run by the tensorized ``matmul_int8.llvm`` kernel on a VNNI
host (the generic compute elsewhere); exact against onnxruntime on odd shapes."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

import ember
from ember.codegen_llvm.tensor_intrinsics import has_vnni
from ember.frontend.passes import pack_int8_weights
from ember.frontend.passes.pack_int8_weights import pack_int8

ort = pytest.importorskip("onnxruntime")
from tests.frontend import ort_exact  # noqa: E402


def _model(a_shape, b: np.ndarray, zps: bool = False, epilogue: bool = False):  # noqa: ANN001, ANN202
    M, K = a_shape
    N = b.shape[1]
    inputs, inits = ["a", "b"], [numpy_helper.from_array(b, "b")]
    if zps:
        inputs += ["za", "zb"]
        inits += [
            numpy_helper.from_array(np.array(0, np.uint8), "za"),
            numpy_helper.from_array(np.array(0, np.int8), "zb"),
        ]
    out = "c0" if epilogue else "c"
    nodes = [helper.make_node("MatMulInteger", inputs, [out], name="mmi")]
    if epilogue:
        inits.append(numpy_helper.from_array(np.array(0.125, np.float32), "s"))
        nodes += [
            helper.make_node("Cast", [out], ["f"], to=TensorProto.FLOAT),
            helper.make_node("Mul", ["f", "s"], ["c"]),
        ]
    g = helper.make_graph(
        nodes,
        "mmi",
        [helper.make_tensor_value_info("a", TensorProto.UINT8, [M, K])],
        [
            helper.make_tensor_value_info(
                "c", TensorProto.FLOAT if epilogue else TensorProto.INT32, [M, N]
            )
        ],
        initializer=inits,
    )
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model


def _operands(M: int, N: int, K: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    return rng.integers(0, 256, (M, K), dtype=np.uint8), rng.integers(-128, 128, (K, N), np.int8)


def test_pack_int8_layout() -> None:
    w = np.arange(-60, 45, dtype=np.int8).reshape(5, 21)
    p = pack_int8(w)
    assert p.shape == (2, 2, 16, 4)
    assert p[1, 1, 4, 0] == w[4, 20] and p[0, 0, 3, 2] == w[2, 3]
    assert not p[1, 1, 5:].any() and not p[:, 1, :, 1:].any()


def test_the_rewrite_on_the_graph() -> None:
    a, b = _operands(7, 21, 13, 0)
    g = ember.frontend.from_onnx(_model(a.shape, b, zps=True))
    packed = pack_int8_weights(g).verify()
    (node,) = packed.nodes
    assert node.op == "matmul_int8_packed" and node.attrs == {"n": 21, "k": 13}
    assert packed.params[node.inputs[1]].shape == (2, 4, 16, 4)
    assert "b" not in packed.params


def test_nonzero_weight_zero_point_is_left_alone() -> None:
    a, b = _operands(3, 5, 4, 1)
    model = _model(a.shape, b, zps=True)
    model.graph.initializer[2].CopyFrom(numpy_helper.from_array(np.array(3, np.int8), "zb"))
    g = ember.frontend.from_onnx(model)
    assert [n.op for n in pack_int8_weights(g).nodes] == ["matmul_integer"]


@pytest.mark.parametrize("M, N, K", [(6, 21, 13), (33, 64, 96)])
def test_activation_zero_point(M: int, N: int, K: int) -> None:
    """A nonzero a_zp is subtracted as ``a_zp * colsum(W)`` after the packed product."""
    a, b = _operands(M, N, K, 2)
    model = _model(a.shape, b, zps=True)
    model.graph.initializer[1].CopyFrom(numpy_helper.from_array(np.array(131, np.uint8), "za"))
    g = pack_int8_weights(ember.frontend.from_onnx(model)).verify()
    assert [n.op for n in g.nodes] == ["matmul_int8_packed", "cast", "multiply", "subtract"]
    (got,) = ember.compile(model, target="llvm").run({"a": a})
    (want,) = ort_exact.run(model, {"a": a})
    np.testing.assert_array_equal(got, want)


def test_dynamic_activation_zero_point() -> None:
    """DynamicQuantizeLinear's zero point (computed at run time) feeding MatMulInteger."""
    M, K, N = 9, 30, 40
    rng = np.random.default_rng(7)
    x = rng.standard_normal((M, K)).astype(np.float32)
    b = rng.integers(-128, 128, (K, N), dtype=np.int8)
    nodes = [
        helper.make_node("DynamicQuantizeLinear", ["x"], ["q", "s", "z"]),
        helper.make_node("MatMulInteger", ["q", "b", "z"], ["c"]),
    ]
    g = helper.make_graph(
        nodes,
        "dq",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [M, K])],
        [helper.make_tensor_value_info("c", TensorProto.INT32, [M, N])],
        initializer=[numpy_helper.from_array(b, "b")],
    )
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    (got,) = ember.compile(model, target="llvm").run({"x": x})
    (want,) = ort_exact.run(model, {"x": x})
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize(
    "M, N, K, zps, epilogue",
    [
        (5, 33, 19, False, False),
        (64, 64, 64, True, True),
        (3, 16, 4, True, False),
        (1, 7, 130, False, True),
    ],
)
def test_against_onnxruntime(M: int, N: int, K: int, zps: bool, epilogue: bool) -> None:
    a, b = _operands(M, N, K, M + N + K)
    model = _model((M, K), b, zps, epilogue)
    cm = ember.compile(model, target="llvm")
    (got,) = cm.run({"a": a})
    (want,) = ort_exact.run(model, {"a": a})
    np.testing.assert_array_equal(got, want)
    if has_vnni():  # the kernel is the tensorized one
        text = str(cm.steps[0].kernel.module.get_source("ll"))
        assert "vpdpbusd" in text
