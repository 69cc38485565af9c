"""User-facing errors of the frontend and ember.compile: type, key phrases, where."""

from __future__ import annotations

import numpy as np
import pytest

import ember
from tests.frontend.onnx_models import helper, make_model, single_node


def _relu_model(rng):
    x = rng.standard_normal((2, 3)).astype("float32")
    return single_node("Relu", {"x": x}), x


def test_unsupported_ops_are_listed_at_once_with_node_names(rng):
    x = rng.standard_normal((2, 3)).astype("float32")
    n = helper.make_node
    nodes = [
        n("Relu", ["x"], ["a"], name="ok"),
        # ops Ember does not convert: every one listed, with every node that uses it
        n("Sparkle", ["a"], ["b"], name="sp_1", domain="example.ops"),
        n("Fizz", ["b"], ["c"], name="fz_1", domain="example.ops"),
        n("Sparkle", ["c"], ["y"], name="sp_2", domain="example.ops"),
    ]
    graph = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info("x", 1, list(x.shape))],
        [helper.make_tensor_value_info("y", 1, [2, 3])],
    )
    opsets = [helper.make_opsetid("", 17), helper.make_opsetid("example.ops", 1)]
    model = helper.make_model(graph, opset_imports=opsets)
    with pytest.raises(ember.UnsupportedOperatorError) as info:
        ember.frontend.from_onnx(model)
    msg = str(info.value)
    assert "2 operator type(s)" in msg
    assert "'sp_1', 'sp_2'" in msg and "Sparkle" in msg
    assert "'fz_1'" in msg and "Fizz" in msg
    assert "'ok'" not in msg


def test_truncated_file_is_an_invalid_model(tmp_path, rng):
    model, _ = _relu_model(rng)
    data = model.SerializeToString()
    path = tmp_path / "cut.onnx"
    path.write_bytes(data[: len(data) // 2])
    with pytest.raises(ember.InvalidModelError, match="truncated or"):
        ember.compile(str(path))


def test_garbage_bytes_and_missing_file_are_invalid_models(tmp_path):
    path = tmp_path / "junk.onnx"
    path.write_bytes(b"\xff\xfe not a protobuf \x00" * 3)
    with pytest.raises(ember.InvalidModelError):
        ember.frontend.from_onnx(str(path))
    with pytest.raises(ember.InvalidModelError, match="cannot read"):
        ember.frontend.from_onnx(str(tmp_path / "missing.onnx"))


def test_a_model_failing_the_checker_is_invalid(rng):
    model, _ = _relu_model(rng)
    model.graph.node[0].input[0] = "nowhere"
    with pytest.raises(ember.InvalidModelError, match="not valid"):
        ember.frontend.from_onnx(model)


@pytest.mark.parametrize(
    "feed,phrase",
    [
        ({"z": None}, "unknown input name"),
        ({}, "missing input"),
        ({"x": np.zeros((3, 2), "float32")}, "must have shape [2, 3]"),
        ({"x": np.zeros((2, 3), "float64")}, "must be float32"),
    ],
)
def test_wrong_inputs_raise_argument_error(rng, feed, phrase):
    model, x = _relu_model(rng)
    lib = ember.compile(model)
    with pytest.raises(ember.ArgumentError) as info:
        lib.run(feed)
    assert phrase in str(info.value)
    with pytest.raises(ember.ArgumentError, match="takes 1 inputs"):
        lib.run([x, x])


def test_converter_errors_name_the_onnx_node(rng):
    x = rng.standard_normal((2, 3)).astype("float32")
    model = single_node("Reshape", {"x": x, "shape": np.array([4, -1], "int64")})
    with pytest.raises(ember.ArgumentError) as info:
        ember.frontend.from_onnx(model)
    msg = str(info.value)
    assert "must be a constant" in msg
    assert "while converting ONNX node 'reshape_node' (Reshape)" in msg


def test_bad_reshape_target_names_the_node(rng):
    x = rng.standard_normal((2, 3)).astype("float32")
    model = single_node("Reshape", {"x": x}, {"shape": np.array([4, 2], "int64")})
    with pytest.raises(ember.ArgumentError, match="cannot reshape") as info:
        ember.frontend.from_onnx(model)
    assert "'reshape_node' (Reshape)" in str(info.value)


def test_symbolic_input_runs_per_size_or_takes_shapes(rng):
    n = helper.make_node("Relu", ["x"], ["y"], name="r")
    from onnx import TensorProto

    g = helper.make_graph(
        [n],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 4])],
    )
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    dynamic = ember.compile(model)  # a symbolic batch: compiled per size on first use
    assert dynamic.input_shapes == [("batch", 4)]
    x5 = rng.standard_normal((5, 4)).astype("float32")
    np.testing.assert_array_equal(dynamic.run({"x": x5})[0], np.maximum(x5, 0))
    with pytest.raises(ember.ArgumentError, match=r"must have shape \[batch, 4\]"):
        dynamic.run({"x": x5[:, :3].copy()})
    lib = ember.compile(model, shapes={"x": (3, 4)})
    x = rng.standard_normal((3, 4)).astype("float32")
    np.testing.assert_array_equal(lib.run({"x": x})[0], np.maximum(x, 0))
    with pytest.raises(ember.ArgumentError, match="does not fit"):
        ember.frontend.from_onnx(model, shapes={"x": (3, 5)})
    with pytest.raises(ember.ArgumentError, match="unknown inputs"):
        ember.frontend.from_onnx(model, shapes={"y": (3, 4)})


def test_unsupported_input_dtype():
    from onnx import TensorProto

    g = helper.make_graph(
        [helper.make_node("Identity", ["x"], ["y"], name="i")],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.COMPLEX64, [2])],
        [helper.make_tensor_value_info("y", TensorProto.COMPLEX64, [2])],
    )
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    with pytest.raises(ember.UnsupportedOperatorError, match="input 'x' has dtype complex64"):
        ember.frontend.from_onnx(model)


def test_external_data_is_loaded_and_missing_data_is_invalid(tmp_path, rng):
    import onnx

    x = rng.standard_normal((3, 40)).astype("float32")
    w = rng.standard_normal((40, 50)).astype("float32")
    model = make_model(
        [helper.make_node("MatMul", ["x", "w"], ["y"], name="mm")], {"x": x}, ["y"], {"w": w}
    )
    path = tmp_path / "big.onnx"
    onnx.save_model(
        model, str(path), save_as_external_data=True, location="w.bin", size_threshold=0
    )
    lib = ember.compile(str(path))
    np.testing.assert_allclose(lib.run({"x": x})[0], x @ w, rtol=1e-4, atol=1e-4)
    (tmp_path / "w.bin").write_bytes(b"\\0" * 10)
    with pytest.raises(ember.InvalidModelError, match="external data"):
        ember.frontend.from_onnx(str(path))


def test_unnamed_nodes_are_named_by_type_and_position(rng):
    x = rng.standard_normal((2, 3)).astype("float32")
    nodes = [
        helper.make_node("Relu", ["x"], ["a"]),
        helper.make_node("Reshape", ["a", "s"], ["y"]),
    ]
    model = make_model(nodes, {"x": x}, ["y"], {"s": np.array([4, 2], "int64")})
    with pytest.raises(ember.ArgumentError, match="ONNX node 'Reshape_1' \\(Reshape\\)"):
        ember.frontend.from_onnx(model)
    assert model.graph.node[1].name == ""  # the user's model is not modified
