"""``benchmarks/profile_layers.py`` matches every ResNet-18 conv (and its Gemm) in both
runtimes' profiles."""

from __future__ import annotations

import runpy
from pathlib import Path

import numpy as np
import pytest

from ember.frontend.graph import Node

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "profile_layers.py"


@pytest.fixture(scope="module")
def script() -> dict:
    return runpy.run_path(str(SCRIPT), run_name="profile_layers")


def test_onnxruntime_nodes_map_back_to_every_conv(script: dict) -> None:
    pytest.importorskip("onnxruntime")
    model, inputs = script["build"]("resnet18", 32)
    anchors = {n.name for n in model.graph.node if n.op_type in ("Conv", "Gemm", "MatMul")}
    assert any(n.startswith("gemm") for n in anchors)
    got = script["ort_layers"](model, inputs, 1, 2)
    assert set(got["seconds"]) == anchors  # fused Conv+BN+Relu(+Add) nodes named back to a conv
    assert got["total"] > 0
    assert all(t > 0 for t in got["seconds"].values())
    assert got["shapes"]["conv_2"] == "1x3x32x32 * 64x3x7x7"


def test_ember_steps_name_their_conv(script: dict) -> None:
    nodes = [
        Node("conv2d", "conv_19", ("x",), ("y",), op_type="Conv"),
        Node("relu", "relu_2", ("y",), ("z",)),
    ]
    where = f"fused group of {', '.join(n.where() for n in nodes)}"  # as compile.py names a step
    assert script["_ANCHOR"].search(where).group(1) == "conv_19"


def test_table_gives_medians_and_ratios(script: dict) -> None:
    ort = [
        {"seconds": {"c1": 2e-3, "c2": 1e-3}, "shapes": {"c1": "a", "c2": "b"}, "total": 4e-3}
    ] * 2
    emb = [
        {"seconds": {"c1": 1e-3, "c2": 2e-3}, "shapes": {}, "total": 5e-3},
        {"seconds": {"c1": 3e-3, "c2": 2e-3}, "shapes": {}, "total": 3e-3},
    ]
    text = script["table"](ort, emb)
    assert "c1" in text and " 1.00" in text  # median of 1 and 3 ms is 2 ms
    assert "0.50  <0.95" in text
    assert f"{np.sqrt(0.5):.2f}" in text  # geometric mean of 1.0 and 0.5
    assert "whole run, profiled" in text and "4.000     4.000   1.00" in text


def test_fused_matmul_add_nodes_map_back_to_their_matmul(script: dict) -> None:
    # onnxruntime names MatMul+Add fused into a Gemm "matmul_56/MatMulAddFusion"
    pytest.importorskip("onnxruntime")
    from ember.frontend.testing import zoo

    model, inputs = zoo.bert_encoder(np.random.default_rng(0), 1, 16, layers=1, hidden=32, heads=2)
    got = script["ort_layers"](model, inputs, 1, 1)
    dense = {n.name for n in model.graph.node if n.op_type == "MatMul"}
    assert len(set(got["seconds"]) & dense) >= 6  # the layer's six weight GEMMs


def test_a_kernel_of_two_convs_is_one_row_against_both_of_onnxruntimes(script: dict) -> None:
    # MobileNetV2's depthwise conv fused into the 1x1 conv after it: one Ember step
    dw = Node("dwconv_nchwc", "conv_12", ("x",), ("d",), op_type="Conv")
    clip = Node("clip", "clip_20", ("d",), ("c",), op_type="Clip")
    pw = Node("dwconv_pw_nchwc", "conv_22", ("x",), ("y",), op_type="Conv")
    pw.absorbed = (dw.where(), clip.where())
    where = f"fused group of {pw.where()}, {Node('add', 'add_9', (), (), op_type='Add').where()}"
    assert script["step_layers"](where) == "conv_22+conv_12"
    shapes = {"conv_12": "1x8x9x9 * 8x1x3x3", "conv_22": "1x8x9x9 * 4x8x1x1", "conv_30": "s"}
    ort = [{"seconds": {"conv_12": 1e-3, "conv_22": 2e-3, "conv_30": 1e-3}, "shapes": shapes,
            "total": 5e-3}]  # fmt: skip
    emb = [{"seconds": {"conv_22+conv_12": 2e-3, "conv_30": 1e-3}, "shapes": {}, "total": 4e-3}]
    text = script["table"](ort, emb)
    row = next(line for line in text.splitlines() if line.startswith("conv_12+conv_22"))
    assert "1x8x9x9 * 8x1x3x3 + 4x8x1x1" in row
    assert row.split()[-3:] == ["3.000", "2.000", "1.50"]  # both of onnxruntime's nodes
    assert "all layers" in text and "4.000     3.000   1.33" in text
