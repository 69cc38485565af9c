"""``conv1d_as_2d``: a float32 1-D conv with constant weights becomes reshape, a 2-D conv of
height 1 and reshape (Before/Expected), and compiled models with 1-D convs (strides, pads,
dilations, groups, bias; odd lengths) match onnxruntime."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import helper

import ember
from ember.frontend.passes import conv1d_as_2d, run_graph_passes
from tests.frontend.onnx_models import make_model, run_ort


def _model(rng, c=6, o=10, length=37, k=5, group=1, bias=True, **attrs):  # noqa: ANN001, ANN003, ANN202
    weights = {"W": rng.standard_normal((o, c // group, k)).astype("float32")}
    inputs = ["x", "W"]
    if bias:
        weights["B"] = rng.standard_normal(o).astype("float32")
        inputs.append("B")
    node = helper.make_node("Conv", inputs, ["y"], group=group, **attrs)
    x = rng.standard_normal((2, c, length)).astype("float32")
    return make_model([node], {"x": x}, ["y"], weights), {"x": x}


def test_a_1d_conv_becomes_a_2d_conv_of_height_1(rng):  # noqa: ANN001
    model, _ = _model(rng, strides=[3], pads=[2, 1], dilations=[2])
    after = run_graph_passes(ember.frontend.from_onnx(model), [conv1d_as_2d])
    ops = [(n.op, n.inputs, n.outputs) for n in after.nodes]
    assert ops == [
        ("reshape", ("x",), ("x_h1",)),
        ("conv", ("x_h1", "W_h1", "B"), ("y_h1",)),
        ("reshape", ("y_h1",), ("y",)),
    ]
    conv = after.nodes[1]
    assert (conv.attrs["strides"], conv.attrs["pads"], conv.attrs["dilations"]) == (
        (1, 3), (0, 2, 0, 1), (1, 2),
    )  # fmt: skip
    assert after.params["W_h1"].shape == (10, 6, 1, 5)
    assert after.values["x_h1"].type.shape == (2, 6, 1, 37)
    assert after.values["y_h1"].type.shape == (2, 10, 1, after.values["y"].type.shape[2])


def test_other_convs_are_left_alone(rng):  # noqa: ANN001
    x = rng.standard_normal((1, 3, 8, 8)).astype("float32")
    w = rng.standard_normal((4, 3, 3, 3)).astype("float32")
    model = make_model([helper.make_node("Conv", ["x", "W"], ["y"])], {"x": x}, ["y"], {"W": w})
    before = ember.frontend.from_onnx(model)
    assert run_graph_passes(before, [conv1d_as_2d]).nodes == before.nodes


@pytest.mark.parametrize(
    "kw",
    [
        {"strides": [1], "pads": [2, 2]},
        {"strides": [3], "pads": [0, 4], "dilations": [2]},
        {"c": 32, "o": 48, "group": 2, "strides": [2], "pads": [1, 1]},
        {"c": 1, "o": 40, "k": 16, "strides": [8], "bias": False},  # an STFT-like front end
    ],
    ids=["same", "strided-dilated", "grouped", "stft"],
)
def test_compiled_1d_convs_match_onnxruntime(kw, rng):  # noqa: ANN001
    model, feeds = _model(rng, **kw)
    got = ember.compile(model, target="llvm").run(feeds)[0]
    np.testing.assert_allclose(got, run_ort(model, feeds)[0], rtol=1e-4, atol=1e-4)
