"""A ResNet-style stem (7x7, stride 2, three input channels) on ``conv2d_nchw.llvm``'s
fallback knobs: the 7x7 window stays a loop (unrolled it ran 3 to 7 times slower),
a 3x3 window is unrolled; both match onnxruntime on random data with odd sizes."""

from __future__ import annotations

import numpy as np
import pytest

from ember.codegen_llvm.schedules.conv2d import conv2d_default_knobs, conv2d_geometry
from ember.tir.te import operation as te
from tests.frontend.onnx_models import check_against_ort, helper, make_model


@pytest.mark.parametrize("k,unrolled", [(7, False), (5, False), (3, True), (1, True)])
def test_fallback_unrolls_only_small_windows(k: int, unrolled: bool) -> None:
    x = te.placeholder((1, 3, 29, 31), "float32", name="x")
    w = te.placeholder((10, 3, k, k), "float32", name="w")
    g = conv2d_geometry(x, w, (2, 2), (k // 2,) * 4, (1, 1))
    assert conv2d_default_knobs(g, "float32")[3] is unrolled


def test_stem_conv_relu_maxpool_matches_onnxruntime() -> None:
    rng = np.random.default_rng(17)
    x = rng.standard_normal((1, 3, 37, 41)).astype("float32")
    w = (rng.standard_normal((10, 3, 7, 7)) / 10).astype("float32")
    b = rng.standard_normal(10).astype("float32")
    nodes = [
        helper.make_node(
            "Conv",
            ["x", "w", "b"],
            ["c"],
            name="stem",
            kernel_shape=[7, 7],
            strides=[2, 2],
            pads=[3, 3, 3, 3],
        ),
        helper.make_node("Relu", ["c"], ["r"], name="relu"),
        helper.make_node(
            "MaxPool",
            ["r"],
            ["y"],
            name="pool",
            kernel_shape=[3, 3],
            strides=[2, 2],
            pads=[1, 1, 1, 1],
        ),
    ]
    model = make_model(nodes, {"x": x}, ["y"], {"w": w, "b": b})
    check_against_ort(model, {"x": x}, rtol=1e-4, atol=1e-5)
