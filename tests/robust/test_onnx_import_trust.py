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


def test_external_data_of_a_subgraph_alone_is_read(tmp_path: Path) -> None:
    """A weight kept outside the file by a branch's own initializer is read although the
    main graph keeps none outside (the importer looked only at the main graph's, and the
    branch ran on a tensor with no data)."""
    w = RNG.standard_normal((19, 7)).astype(np.float32)
    x = RNG.standard_normal((2, 19)).astype(np.float32)
    inner = onnx.load_from_string(_external_weight(tmp_path, w, w.nbytes, None).read_bytes())
    branch = helper.make_graph(
        [helper.make_node("MatMul", ["x", "w"], ["t"])],
        "then",
        [],
        [helper.make_tensor_value_info("t", TensorProto.FLOAT, [2, 7])],
        list(inner.graph.initializer),
    )
    other = helper.make_graph(
        [helper.make_node("MatMul", ["x", "v"], ["e"])],
        "else",
        [],
        [helper.make_tensor_value_info("e", TensorProto.FLOAT, [2, 7])],
        [helper.make_tensor("v", TensorProto.FLOAT, [19, 7], np.zeros(133, np.float32))],
    )
    c = helper.make_tensor_value_info("c", TensorProto.BOOL, [])
    xv = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 19])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 7])
    node = helper.make_node("If", ["c"], ["y"], then_branch=branch, else_branch=other)
    path = tmp_path / "branch.onnx"
    path.write_bytes(_model([node], [c, xv], [y], []).SerializeToString())
    got = ember.compile(str(path)).run({"c": np.array(True), "x": x})[0]
    np.testing.assert_allclose(got, x @ w, rtol=1e-5)


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


def _if_lstm_model() -> Any:
    """Silero VAD's shape in small: a run-time If on the sample rate whose then branch
    runs an LSTM on x [seq 2, batch 3, F=4], and whose else branch (written for other
    input sizes) makes x 4-D first, so its LSTM cannot take it at these shapes. F is
    symbolic, as Silero's dims are, so onnxruntime cannot fold the inner If ahead of time."""
    hidden = 5
    w = RNG.standard_normal((1, 4 * hidden, 4)).astype(np.float32) * 0.5
    r = RNG.standard_normal((1, 4 * hidden, hidden)).astype(np.float32) * 0.5
    inits = [onnx.numpy_helper.from_array(a, n) for a, n in ((w, "W"), (r, "R"))]
    inits.append(onnx.numpy_helper.from_array(np.array(16000, np.int64), "sr16k"))
    inits.append(onnx.numpy_helper.from_array(np.array([0], np.int64), "axis0"))
    inits.append(onnx.numpy_helper.from_array(np.array(2, np.int64), "two"))
    out = helper.make_tensor_value_info("h", TensorProto.FLOAT, None)

    def branch(name: str, x: str, pre: list[Any]) -> Any:
        lstm = helper.make_node("LSTM", [x, "W", "R"], ["", "h"], hidden_size=hidden)
        return helper.make_graph([*pre, lstm], name, [], [out])

    # as PyTorch's LSTM export writes it: unsqueeze unless the input is 2-D, an If that
    # onnxruntime types only when it runs (Ember folds its condition: x is 3-D)
    x4 = helper.make_tensor_value_info("x4", TensorProto.FLOAT, None)
    not_2d = [
        helper.make_node("Shape", ["x"], ["shape"]),
        helper.make_node("Size", ["shape"], ["rank"]),
        helper.make_node("Equal", ["rank", "two"], ["is2d"]),
        helper.make_node("Not", ["is2d"], ["not2d"]),
    ]
    up = helper.make_node("Unsqueeze", ["x", "axis0"], ["x4"])
    keep = helper.make_node("Identity", ["x"], ["x4"])
    unsqueeze = helper.make_node(
        "If",
        ["not2d"],
        ["x4"],
        then_branch=helper.make_graph([up], "up", [], [x4]),
        else_branch=helper.make_graph([keep], "keep", [], [x4]),
    )
    nodes = [
        helper.make_node("Equal", ["sr", "sr16k"], ["is16k"]),
        helper.make_node(
            "If",
            ["is16k"],
            ["y"],
            then_branch=branch("at16k", "x", []),
            else_branch=branch("at8k", "x4", [*not_2d, unsqueeze]),
        ),
    ]
    inputs = [
        helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3, "F"]),
        helper.make_tensor_value_info("sr", TensorProto.INT64, []),
    ]
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 3, hidden])
    return _model(nodes, inputs, [y], inits)


def test_item_26_if_branch_for_other_shapes_imports() -> None:
    """The reported "LSTM: X must be a static 3-D float tensor, got float32[1, 1, 1, 128,
    2]" is onnxruntime's shape as well (Silero's 8 kHz branch on a 16 kHz-sized input):
    no shape rule was wrong; the import refused the whole model for a branch the run may
    never take. Now the branch is refused when taken, as onnxruntime does."""
    model = _if_lstm_model()
    feeds = {"x": RNG.standard_normal((2, 3, 4)).astype(np.float32), "sr": np.array(16000)}
    compiled = ember.compile(model, shapes={"x": (2, 3, 4)})
    np.testing.assert_allclose(compiled.run(feeds)[0], run_ort(model, feeds)[0], atol=1e-5)
    feeds["sr"] = np.array(8000)
    with pytest.raises(Exception):  # noqa: B017 - onnxruntime fails on this branch too
        run_ort(model, feeds)
    with pytest.raises(ember.ArgumentError, match="else branch.*LSTM: X must be a static 3-D"):
        compiled.run(feeds)


SILERO = "silero_vad/data/silero_vad.onnx"


def test_item_26_silero_vad_v6_matches_onnxruntime() -> None:
    """The Silero VAD v6 export in the `silero-vad` wheel (skipped without it) imports,
    compiles and matches onnxruntime over three chunks of 16 kHz audio (64 samples of
    context + 512, its state carried from chunk to chunk)."""
    import importlib.util

    spec = importlib.util.find_spec("silero_vad")
    if spec is None or spec.origin is None:
        pytest.skip("the silero-vad wheel is not installed")
    path = Path(spec.origin).parent / "data" / "silero_vad.onnx"
    model = onnx.load(str(path))
    compiled = ember.compile(model, shapes={"input": (1, 576), "state": (2, 1, 128)})
    state = want_state = np.zeros((2, 1, 128), np.float32)
    for _ in range(3):
        chunk = (RNG.standard_normal((1, 576)) * 0.2).astype(np.float32)
        sr = np.array(16000, np.int64)
        prob, state = compiled.run({"input": chunk, "state": state, "sr": sr})
        want, want_state = run_ort(model, {"input": chunk, "state": want_state, "sr": sr})
        np.testing.assert_allclose(prob, want, atol=1e-5)
        np.testing.assert_allclose(state, want_state, atol=1e-5)


def _add_model(out_type: int = TensorProto.FLOAT, opset: int = 17, ir: int = 10) -> Any:
    """y = x + b, with the initializer b also listed as a graph input (overridable)."""
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])
    b = helper.make_tensor_value_info("b", TensorProto.FLOAT, [2, 3])
    y = helper.make_tensor_value_info("y", out_type, [2, 3])
    default = onnx.numpy_helper.from_array(RNG.standard_normal((2, 3)).astype(np.float32), "b")
    model = _model([helper.make_node("Add", ["x", "b"], ["y"])], [x, b], [y], [default], opset)
    model.ir_version = ir
    return model


def test_item_23_initializer_inputs_opsets_and_declared_outputs() -> None:
    """An initializer listed as a graph input is overridable at run time (IR 4 on, as in
    onnxruntime), its data the default; at IR 3 it is a constant (onnxruntime refuses the
    name too). One Ember needs as a constant (a Reshape's shape) stays one, with a warning.
    A too-new opset warns and converts; a declared output dtype that the graph does not
    make is an InvalidModelError (onnxruntime refuses it too)."""
    import warnings

    x = RNG.standard_normal((2, 3)).astype(np.float32)
    b = RNG.standard_normal((2, 3)).astype(np.float32)
    model = _add_model()
    compiled = ember.compile(model)
    for feeds in ({"x": x}, {"x": x, "b": b}):
        np.testing.assert_allclose(compiled.run(feeds)[0], run_ort(model, feeds)[0], rtol=1e-6)
    old = _add_model(opset=8, ir=3)
    with pytest.raises(ember.ArgumentError, match=r"unknown input name\(s\) \['b'\]"):
        ember.compile(old).run({"x": x, "b": b})

    shape = onnx.numpy_helper.from_array(np.array([3, 2], np.int64), "shape")
    reshape = _model(
        [helper.make_node("Reshape", ["x", "shape"], ["y"])],
        [helper.make_tensor_value_info(n, t, s) for n, t, s in
         (("x", TensorProto.FLOAT, [2, 3]), ("shape", TensorProto.INT64, [2]))],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [3, 2])],
        [shape],
    )  # fmt: skip
    with pytest.warns(UserWarning, match=r"\['shape'\] are listed as graph inputs"):
        got = ember.compile(reshape).run({"x": x})[0]
    np.testing.assert_array_equal(got, run_ort(reshape, {"x": x})[0])

    with pytest.warns(UserWarning, match="opset 30, newer than the 27 Ember knows"):
        newer = ember.compile(_add_model(opset=30))
    np.testing.assert_allclose(newer.run({"x": x, "b": b})[0], x + b, rtol=1e-6)
    wrong = _add_model(out_type=TensorProto.INT64)
    with pytest.raises(Exception):  # noqa: B017 - onnxruntime refuses it too
        run_ort(wrong, {"x": x})
    with pytest.raises(ember.InvalidModelError, match="output 'y' is declared int64.*float32"):
        ember.compile(wrong)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a model that is right draws no warning
        ember.compile(_add_model())


def test_item_23_dynamic_model_takes_defaults_too() -> None:
    """With a symbolic batch, the overridable initializer is still optional per run."""
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 3])
    b = helper.make_tensor_value_info("b", TensorProto.FLOAT, [3])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 3])
    default = onnx.numpy_helper.from_array(RNG.standard_normal(3).astype(np.float32), "b")
    model = _model([helper.make_node("Mul", ["x", "b"], ["y"])], [x, b], [y], [default])
    dynamic = ember.compile(model)
    for n, feeds in ((2, {}), (1, {"b": RNG.standard_normal(3).astype(np.float32)})):
        feeds = {"x": RNG.standard_normal((n, 3)).astype(np.float32), **feeds}
        np.testing.assert_allclose(dynamic.run(feeds)[0], run_ort(model, feeds)[0], rtol=1e-6)
