"""Import-time constant folding: Ember's own computes, on the interpreter or on LLVM."""

from __future__ import annotations

import numpy as np
import pytest

import ember
from ember.frontend import fold
from tests.frontend.onnx_models import check_against_ort, helper, make_model


@pytest.mark.parametrize("size", [(3, 4), (80, 90)])  # under and over INTERPRET_LIMIT
def test_constant_subgraph_folds(rng, size, monkeypatch):
    calls = []
    real = fold._interpret
    monkeypatch.setattr(fold, "_interpret", lambda *a: calls.append(a[0]) or real(*a))
    w = rng.standard_normal(size).astype("float32")
    x = rng.standard_normal((2, size[0])).astype("float32")
    nodes = [
        helper.make_node("Transpose", ["w"], ["wt"], name="t"),
        helper.make_node("Exp", ["wt"], ["we"], name="e"),
        helper.make_node("Transpose", ["we"], ["w2"], name="t2"),
        helper.make_node("MatMul", ["x", "w2"], ["y"], name="mm"),
    ]
    model = make_model(nodes, {"x": x}, ["y"], {"w": w})
    graph = ember.frontend.from_onnx(model)
    assert [n.op for n in graph.nodes] == ["matmul"]
    np.testing.assert_allclose(graph.params["w2"], np.exp(w), rtol=1e-6)
    interpreted = w.size * 2 <= fold.INTERPRET_LIMIT
    assert calls == (["transpose", "exp", "transpose"] if interpreted else [])
    check_against_ort(model, {"x": x}, rtol=1e-4, atol=1e-4)


def test_shape_of_an_input_folds_into_reshape(rng):
    x = rng.standard_normal((4, 6)).astype("float32")
    nodes = [
        helper.make_node("Shape", ["x"], ["s"], name="shape"),
        helper.make_node("Gather", ["s", "i"], ["d"], name="g", axis=0),
        helper.make_node("Div", ["d", "two"], ["h"], name="half"),
        helper.make_node("Concat", ["h", "minus1"], ["t"], name="cat", axis=0),
        helper.make_node("Reshape", ["x", "t"], ["y"], name="r"),
    ]
    consts = {
        "i": np.array([1], "int64"),
        "two": np.array([2], "int64"),
        "minus1": np.array([-1], "int64"),
    }
    model = make_model(nodes, {"x": x}, ["y"], consts)
    graph = ember.frontend.from_onnx(model)
    assert [n.op for n in graph.nodes] == ["reshape"]
    assert graph.outputs[0].shape == (3, 8)
    check_against_ort(model, {"x": x})
