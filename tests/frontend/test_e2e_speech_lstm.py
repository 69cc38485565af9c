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
from ember.frontend.testing.models import speech_lstm
from tests.frontend.onnx_models import run_ort

T = 9  # frames in speech_lstm's features


def speech_model() -> tuple[object, dict[str, np.ndarray]]:
    model, inputs = speech_lstm()
    assert inputs["features"].shape[0] == T
    return model, inputs


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
