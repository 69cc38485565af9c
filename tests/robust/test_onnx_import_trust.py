"""ONNX files that must import as onnxruntime imports them, or be refused with an
``EmberError`` that says what is wrong.

Issue 22: item 18 (short external data), item 23 (an input with an initializer, a
too-new opset, declared output types that contradict the graph), item 25 (dims
written as -1 or unnamed), item 26 (Silero VAD: a shape rule upstream of its LSTM).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

import ember
from tests.frontend.onnx_models import run_ort

onnx = pytest.importorskip("onnx")
from onnx import TensorProto, helper  # noqa: E402

RNG = np.random.default_rng(2218)


def _model(nodes: list[Any], inputs: list[Any], outputs: list[Any], inits: list[Any], opset=17):
    graph = helper.make_graph(nodes, "trust", inputs, outputs, inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 10
    return model


def _external_weight(folder: Path, w: np.ndarray, stored: int, length: int | None) -> Path:
    """A MatMul model whose weight 'w' lives in 'w.bin', of which only ``stored`` bytes
    exist; ``length`` is the external-data length field (None: read to the file's end)."""
    (folder / "w.bin").write_bytes(w.tobytes()[:stored])
    t = TensorProto(name="w", data_type=TensorProto.FLOAT, dims=list(w.shape))
    t.data_location = TensorProto.EXTERNAL
    fields = [("location", "w.bin"), ("offset", "0")]
    fields += [("length", str(length))] if length is not None else []
    for key, value in fields:
        entry = t.external_data.add()
        entry.key, entry.value = key, value
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, w.shape[0]])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, w.shape[1]])
    model = _model([helper.make_node("MatMul", ["x", "w"], ["y"])], [x], [y], [t])
    path = folder / "model.onnx"
    path.write_bytes(model.SerializeToString())
    return path


def test_item_18_short_external_data(tmp_path: Path) -> None:
    """A weight file shorter than its tensor (with or without a length field) is an
    InvalidModelError naming the tensor and the file (it was numpy's reshape ValueError);
    a whole file imports and matches onnxruntime."""
    w = RNG.standard_normal((19, 7)).astype(np.float32)
    x = RNG.standard_normal((2, 19)).astype(np.float32)
    good = _external_weight(tmp_path, w, w.nbytes, None)
    np.testing.assert_allclose(ember.compile(str(good)).run({"x": x})[0], x @ w, rtol=1e-5)
    for length in (None, 100):
        path = _external_weight(tmp_path, w, 100, length)
        with pytest.raises(ember.InvalidModelError, match=r"tensor 'w' .* needs 532 bytes") as e:
            ember.compile(str(path))
        assert "w.bin" in str(e.value) and "100" in str(e.value)
        with pytest.raises(Exception):  # noqa: B017 - onnxruntime refuses it too
            run_ort(onnx.load(str(path)), {"x": x})


def test_item_25_minus_one_and_unnamed_dims_are_symbolic() -> None:
    """An input declared [-1, 3, '?', '?'] (PaddleOCR's exports) takes concrete shapes=
    (it was "does not fit the model's"), and without shapes= runs as a dynamic model on
    heights and widths that differ (two '?' are two unknowns, not one); both match
    onnxruntime."""
    w = RNG.standard_normal((4, 3, 3, 3)).astype(np.float32)
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [-1, 3, "?", "?"])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [-1, 4, "?", ""])
    nodes = [
        helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c"], ["y"]),
    ]
    model = _model(nodes, [x], [y], [onnx.numpy_helper.from_array(w, "w")])
    xv = RNG.standard_normal((2, 3, 5, 7)).astype(np.float32)
    want = run_ort(model, {"x": xv})[0]
    fixed = ember.compile(model, shapes={"x": (2, 3, 5, 7)})
    np.testing.assert_allclose(fixed.run({"x": xv})[0], want, rtol=1e-5, atol=1e-5)
    dynamic = ember.compile(model)
    np.testing.assert_allclose(dynamic.run({"x": xv})[0], want, rtol=1e-5, atol=1e-5)
    xv = RNG.standard_normal((1, 3, 6, 3)).astype(np.float32)
    np.testing.assert_allclose(
        dynamic.run({"x": xv})[0], run_ort(model, {"x": xv})[0], rtol=1e-5, atol=1e-5
    )
