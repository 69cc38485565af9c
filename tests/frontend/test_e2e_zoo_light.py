"""The ONNX model zoo's light models shipped in the onnx wheel (``frontend/testing/
zoo_light.py``): found, given seeded random weights, compiled for llvm and compared with
onnxruntime. They are real published graphs (opset 9, IR 3, 224x224 inputs whose Reshape
targets fix the size), so each compile takes 15-60 s: the nightly run (``EMBER_NIGHTLY=1``)
checks all nine end to end; CI checks that they are found and their weights replaced.
"""

from __future__ import annotations

import numpy as np
import pytest

import ember
from ember.errors import ArgumentError
from ember.frontend.testing import zoo_light
from tests.nightly import nightly_param

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")

NAMES = ["bvlc_alexnet", "densenet121", "inception_v1", "inception_v2", "resnet50",
         "shufflenet", "squeezenet", "vgg19", "zfnet512"]  # fmt: skip


def _session(model):
    return ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])


def _with_logits(model):
    """The model with the final Softmax's input as a second output: the softmax of
    large logits is one-hot and would hide an error."""
    out = onnx.ModelProto()
    out.CopyFrom(model)
    softmax = [n for n in out.graph.node if n.op_type == "Softmax"]
    if softmax:
        typed = onnx.shape_inference.infer_shapes(out).graph.value_info
        out.graph.output.append(next(vi for vi in typed if vi.name == softmax[-1].input[0]))
    return out


def test_the_wheel_ships_the_nine_light_models():
    assert set(NAMES) <= set(zoo_light.light_models())
    assert {f"light_{n}" for n in NAMES} <= set(zoo_light.light_builders())
    with pytest.raises(ArgumentError, match="no light model 'resnet18'"):
        zoo_light.light_model("resnet18", np.random.default_rng(0))


def test_random_weights_replace_the_placeholders():
    """Every ConstantOfShape placeholder becomes an initializer of the same shape; the
    graph stays valid for onnxruntime and its output is no longer the uniform softmax the
    placeholders give (which the wheel ships as the expected output)."""
    rng = np.random.default_rng(1)
    shipped, feeds = zoo_light.light_model("squeezenet", rng, randomize=False)
    model = zoo_light.randomize_weights(shipped, rng)
    assert not [n for n in model.graph.node if n.op_type == "ConstantOfShape"]
    inits = {t.name: tuple(t.dims) for t in model.graph.initializer}
    assert inits["conv10_w_0"] == (1000, 512, 1, 1)
    assert not [name for name in inits if name.endswith("__SHAPE")]
    onnx.checker.check_model(model)
    expected = zoo_light.expected_output("squeezenet")
    np.testing.assert_allclose(_session(shipped).run(None, feeds)[0], expected, rtol=1e-5)
    assert np.std(_session(model).run(None, feeds)[0]) > 1e-4


@pytest.mark.parametrize("name", [nightly_param(n) for n in NAMES])
def test_light_model_matches_onnxruntime(name):
    model, feeds = zoo_light.light_model(name, np.random.default_rng(2))
    model = _with_logits(model)
    want = _session(model).run(None, feeds)
    got = ember.compile(model, target="llvm").run(feeds)
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w, rtol=1e-3, atol=1e-4 * max(1.0, float(np.abs(w).max())))
