"""End to end: a small LSTM speech model with a runtime If choosing the head, vs onnxruntime.

features [T, B, F] -> projection (MatMul + Add + Relu) -> bidirectional LSTM ->
(Transpose, Reshape) -> LSTM (Y_h) -> If(flag): then Gemm + Relu head, else Gemm + Tanh
head -> Softmax. Deterministic random weights as initializers, odd sizes, an odd
number of frames, runtime sequence lengths on the first layer.
"""

from __future__ import annotations

import numpy as np
import pytest

import ember
from tests.frontend.onnx_models import helper, make_model, run_ort

T, B, F, P, H1, H2, C = 9, 3, 13, 11, 7, 5, 6


def _weights(rng: np.random.Generator) -> dict[str, np.ndarray]:
    def w(*shape: int) -> np.ndarray:
        return (rng.standard_normal(shape) / np.sqrt(shape[-1])).astype(np.float32)

    return {
        "proj_w": w(F, P),
        "proj_b": w(P),
        "l1_w": w(2, 4 * H1, P),
        "l1_r": w(2, 4 * H1, H1),
        "l1_b": w(2, 8 * H1),
        "l2_w": w(1, 4 * H2, 2 * H1),
        "l2_r": w(1, 4 * H2, H2),
        "l2_b": w(1, 8 * H2),
        "shape_seq": np.array([T, B, 2 * H1], np.int64),
        "shape_last": np.array([B, H2], np.int64),
        "head_a": w(H2, C),
        "head_a_b": w(C),
        "head_b": w(H2, C),
        "head_b_b": w(C),
    }


def speech_model() -> tuple[object, dict[str, np.ndarray]]:
    rng = np.random.default_rng(2024)
    then_g = helper.make_graph(
        [
            helper.make_node("Gemm", ["last", "head_a", "head_a_b"], ["a_lin"]),
            helper.make_node("Relu", ["a_lin"], ["a_out"]),
        ],
        "head_a",
        [],
        [helper.make_tensor_value_info("a_out", 1, [B, C])],
    )
    else_g = helper.make_graph(
        [
            helper.make_node("Gemm", ["last", "head_b", "head_b_b"], ["b_lin"], alpha=0.5),
            helper.make_node("Tanh", ["b_lin"], ["b_out"]),
        ],
        "head_b",
        [],
        [helper.make_tensor_value_info("b_out", 1, [B, C])],
    )
    nodes = [
        helper.make_node("MatMul", ["features", "proj_w"], ["proj_mm"]),
        helper.make_node("Add", ["proj_mm", "proj_b"], ["proj_add"]),
        helper.make_node("Relu", ["proj_add"], ["proj"]),
        helper.make_node(
            "LSTM",
            ["proj", "l1_w", "l1_r", "l1_b", "lens"],
            ["l1_y"],
            hidden_size=H1,
            direction="bidirectional",
            name="lstm1",
        ),
        helper.make_node("Transpose", ["l1_y"], ["l1_t"], perm=[0, 2, 1, 3]),
        helper.make_node("Reshape", ["l1_t", "shape_seq"], ["l1_seq"]),
        helper.make_node(
            "LSTM", ["l1_seq", "l2_w", "l2_r", "l2_b"], ["", "l2_h"], hidden_size=H2, name="lstm2"
        ),
        helper.make_node("Reshape", ["l2_h", "shape_last"], ["last"]),
        helper.make_node(
            "If", ["use_a"], ["logits"], then_branch=then_g, else_branch=else_g, name="head"
        ),
        helper.make_node("Softmax", ["logits"], ["probs"], axis=-1),
    ]
    inputs = {
        "features": rng.standard_normal((T, B, F)).astype(np.float32),
        "lens": np.array([T, 4, 7], np.int32),
        "use_a": np.array(True),
    }
    return make_model(nodes, inputs, ["probs"], _weights(rng), opset=17), inputs


@pytest.fixture(scope="module")
def compiled():
    model, inputs = speech_model()
    return model, inputs, ember.compile(model, target="llvm")


@pytest.mark.parametrize("use_a", [True, False])
def test_speech_lstm_with_if_matches_onnxruntime(compiled, use_a: bool) -> None:
    model, inputs, lib = compiled
    inputs = {**inputs, "use_a": np.array(use_a)}
    (got,) = lib.run(inputs)
    (want,) = run_ort(model, inputs)
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(got.sum(axis=-1), 1.0, rtol=1e-5)


def test_speech_lstm_graph_shape(compiled) -> None:
    """Two unrolled layers (2 x T cells, then T), one host If; the weights fold."""
    _, _, lib = compiled
    ops = [n.op for n in lib.graph.nodes]
    assert ops.count("lstm_cell") == 3 * T and ops.count("if") == 1
    assert "transpose" not in ops[: ops.index("lstm_cell")]  # W^T folded at import
