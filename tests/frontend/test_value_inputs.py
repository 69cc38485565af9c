"""Shape-carrying inputs fed at run time: the model compiles once per distinct value.

The references are numpy (and onnxruntime on the same file), never another Ember
compile; inputs are random, shapes odd.
"""

from __future__ import annotations

import threading
import warnings

import numpy as np
import pytest

import ember
from ember.graph import dynamic_model, model_source
from ember.graph.dynamic_model import DynamicModel

onnx = pytest.importorskip("onnx")
from onnx import TensorProto, helper  # noqa: E402

from ember.frontend.onnx_import.value_inputs import freeze_inputs, input_ancestors  # noqa: E402

RNG = np.random.default_rng(7)


def _model(nodes, inputs, outputs, inits=()):
    graph = helper.make_graph(nodes, "g", inputs, outputs, initializer=list(inits))
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def _info(name, elem, shape):
    return helper.make_tensor_value_info(name, elem, shape)


def _reshape_relu(x_shape=(3, 5, 7)):
    """y = relu(reshape(x, shape + 0)): the shape passes through an Add first, so the
    tensor Reshape needs at compile time is computed from the input, not the input."""
    zero = helper.make_tensor("zero", TensorProto.INT64, [1], [0])
    nodes = [
        helper.make_node("Add", ["shape", "zero"], ["shape2"]),
        helper.make_node("Reshape", ["x", "shape2"], ["r"]),
        helper.make_node("Relu", ["r"], ["y"]),
    ]
    return _model(
        nodes,
        [_info("x", TensorProto.FLOAT, list(x_shape)), _info("shape", TensorProto.INT64, [2])],
        [_info("y", TensorProto.FLOAT, ["a", "b"])],
        [zero],
    )


def test_reshape_to_a_shape_given_at_run_time_compiles_per_value():
    lib = ember.compile(_reshape_relu())
    assert isinstance(lib, DynamicModel)
    x = RNG.standard_normal((3, 5, 7)).astype(np.float32)
    for shape in ([15, 7], [7, -1], [105, 1], [15, 7]):
        (got,) = lib.run({"x": x, "shape": np.array(shape, np.int64)})
        np.testing.assert_array_equal(got, np.maximum(x.reshape(shape), 0))
    assert lib.value_inputs == ["shape"]
    assert len(lib.value_specializations) == 3  # [15, 7] twice compiled once


def test_agrees_with_onnxruntime():
    ort = pytest.importorskip("onnxruntime")
    model = _reshape_relu((4, 9))
    lib = ember.compile(model)
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    for shape in ([6, 6], [2, 18], [36, 1]):
        feeds = {
            "x": RNG.standard_normal((4, 9)).astype(np.float32),
            "shape": np.array(shape, np.int64),
        }
        np.testing.assert_allclose(lib.run(feeds)[0], sess.run(None, feeds)[0], rtol=1e-6)


def test_topk_with_k_at_run_time_and_a_symbolic_batch():
    nodes = [helper.make_node("TopK", ["x", "k"], ["values", "indices"], axis=1)]
    model = _model(
        nodes,
        [_info("x", TensorProto.FLOAT, ["N", 11]), _info("k", TensorProto.INT64, [1])],
        [
            _info("values", TensorProto.FLOAT, ["N", "K"]),
            _info("indices", TensorProto.INT64, ["N", "K"]),
        ],
    )
    lib = ember.compile(model)
    for n, k in ((2, 3), (5, 3), (5, 1), (2, 11)):
        x = RNG.standard_normal((n, 11)).astype(np.float32)
        values, indices = lib.run([x, np.array([k], np.int64)])
        order = np.argsort(-x, axis=1, kind="stable")[:, :k]
        np.testing.assert_array_equal(indices, order)
        np.testing.assert_array_equal(values, np.take_along_axis(x, order, 1))
    assert {dict(sizes)["N"] for sizes, _ in lib.value_specializations} == {2, 5}


def test_inputs_needed_by_two_ops_are_learned_one_after_the_other():
    """Tile's repeats and then Reshape's shape: the second is learned while compiling
    the first value, and both key the compiled models."""
    nodes = [
        helper.make_node("Tile", ["x", "repeats"], ["t"]),
        helper.make_node("Reshape", ["t", "shape"], ["y"]),
    ]
    model = _model(
        nodes,
        [
            _info("x", TensorProto.FLOAT, [2, 3]),
            _info("repeats", TensorProto.INT64, [2]),
            _info("shape", TensorProto.INT64, [1]),
        ],
        [_info("y", TensorProto.FLOAT, ["n"])],
    )
    lib = ember.compile(model)
    x = RNG.standard_normal((2, 3)).astype(np.float32)
    for reps in ([1, 2], [3, 1]):
        (got,) = lib.run([x, np.array(reps, np.int64), np.array([-1], np.int64)])
        np.testing.assert_array_equal(got, np.tile(x, reps).reshape(-1))
    assert sorted(lib.value_inputs) == ["repeats", "shape"]


def test_runs_from_several_threads_agree_with_numpy():
    lib = ember.compile(_reshape_relu())
    x = RNG.standard_normal((3, 5, 7)).astype(np.float32)
    shapes = [[15, 7], [7, 15], [3, 35], [35, 3]] * 3
    errors: list[BaseException] = []

    def work(shape):
        try:
            (got,) = lib.run([x, np.array(shape, np.int64)])
            np.testing.assert_array_equal(got, np.maximum(x.reshape(shape), 0))
        except BaseException as e:  # reported below, on the main thread
            errors.append(e)

    threads = [threading.Thread(target=work, args=(s,)) for s in shapes]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors[0]
    assert len(lib.value_specializations) == 4


def test_a_wrong_value_is_an_ember_error_naming_the_node():
    lib = ember.compile(_reshape_relu())
    x = RNG.standard_normal((3, 5, 7)).astype(np.float32)
    with pytest.raises(ember.EmberError, match="Reshape"):
        lib.run([x, np.array([4, 4], np.int64)])  # 16 elements for 105


def test_a_large_value_input_is_refused():
    nodes = [helper.make_node("Reshape", ["x", "shape"], ["y"])]
    model = _model(
        nodes,
        [_info("x", TensorProto.FLOAT, [4]), _info("shape", TensorProto.INT64, ["n"])],
        [_info("y", TensorProto.FLOAT, ["m"])],
    )
    lib = ember.compile(model)
    shape = np.ones(dynamic_model.MAX_VALUE_ELEMENTS + 1, np.int64)
    with pytest.raises(ember.ArgumentError, match="at most 4096 elements"):
        lib.run([np.ones(4, np.float32), shape])


def test_many_values_warn_once(monkeypatch):
    monkeypatch.setattr(dynamic_model, "MANY_VALUES", 2)
    lib = ember.compile(_reshape_relu())
    x = RNG.standard_normal((3, 5, 7)).astype(np.float32)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for shape in ([15, 7], [7, 15], [3, 35]):
            lib.run([x, np.array(shape, np.int64)])
    assert [str(w.message).startswith("2 distinct values") for w in caught] == [True]


def test_specialize_by_size_says_to_run_instead():
    lib = ember.compile(_reshape_relu())
    lib.run([RNG.standard_normal((3, 5, 7)).astype(np.float32), np.array([1, -1], np.int64)])
    with pytest.raises(ember.ArgumentError, match="needs the values of its inputs"):
        lib.specialize()


def test_export_and_load_learns_the_value_inputs_again(tmp_path):
    lib = ember.compile(_reshape_relu())
    x = RNG.standard_normal((3, 5, 7)).astype(np.float32)
    lib.run([x, np.array([15, 7], np.int64)])
    lib.export(tmp_path / "m.ember")
    loaded = ember.load(tmp_path / "m.ember")
    (got,) = loaded.run([x, np.array([5, 21], np.int64)])
    np.testing.assert_array_equal(got, np.maximum(x.reshape(5, 21), 0))


def test_a_tensor_no_graph_input_feeds_leaves_the_error_standing():
    """A name local to a subgraph (or already frozen) gives nothing to specialize on."""
    source = model_source.OnnxSource(_reshape_relu(), {})
    err = ember.NeedsConstantError("Reshape input 1 must be a constant", "body_local")
    assert not source.learn_value_inputs(err)
    err = ember.NeedsConstantError("Reshape input 1 must be a constant", "shape2")
    assert source.learn_value_inputs(err) and source.value_inputs == ["shape"]
    assert not source.learn_value_inputs(err)


def test_input_ancestors_follow_data_and_subgraph_reads():
    then = helper.make_graph(
        [helper.make_node("Identity", ["b"], ["o"])],
        "then",
        [],
        [_info("o", TensorProto.INT64, [1])],
    )
    nodes = [
        helper.make_node("Add", ["a", "one"], ["a1"]),
        helper.make_node("If", ["cond"], ["picked"], then_branch=then, else_branch=then),
        helper.make_node("Concat", ["a1", "picked"], ["shape"], axis=0),
    ]
    model = _model(
        nodes,
        [
            _info("a", TensorProto.INT64, [1]),
            _info("b", TensorProto.INT64, [1]),
            _info("cond", TensorProto.BOOL, []),
            _info("unused", TensorProto.INT64, [1]),
        ],
        [_info("shape", TensorProto.INT64, [2])],
        [helper.make_tensor("one", TensorProto.INT64, [1], [1])],
    )
    assert input_ancestors(model, "shape") == ["a", "b", "cond"]
    assert input_ancestors(model, "a1") == ["a"]
    assert input_ancestors(model, "unused") == ["unused"]
    assert input_ancestors(model, "o") == ["b"]  # made inside the If's branch


def test_freeze_inputs_makes_them_initializers_and_keeps_the_rest():
    model = _reshape_relu()
    frozen = freeze_inputs(model, {"shape": np.array([15, 7], np.int64)})
    assert [vi.name for vi in frozen.graph.input] == ["x"]
    assert sorted(t.name for t in frozen.graph.initializer) == ["shape", "zero"]
    assert [vi.name for vi in model.graph.input] == ["x", "shape"]  # the original is kept
    x = RNG.standard_normal((3, 5, 7)).astype(np.float32)
    (got,) = ember.compile(frozen).run([x])
    np.testing.assert_array_equal(got, np.maximum(x.reshape(15, 7), 0))
