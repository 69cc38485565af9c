"""Grouped convolutions (neither one group nor depthwise, as ShuffleNet and ResNeXt have)
run channel-blocked (``conv_nchwc`` with ``groups``) where each group's channels are whole
blocks, and stay NCHW otherwise; a channel concat of blocked values in whole blocks stays
blocked (SqueezeNet's fire modules); against onnxruntime on random data."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import helper

import ember
from ember.frontend.passes import alter_conv_layout, run_graph_passes
from tests.frontend.onnx_models import make_model, run_ort


def _w(rng, *shape):  # noqa: ANN001, ANN202
    return (rng.standard_normal(shape) * 0.3).astype("float32")


def grouped_block(rng, c=48, g=3, mid=96, hw=9, k=3, stride=1):  # noqa: ANN001, ANN202
    """conv (plain input) -> relu -> grouped conv -> relu -> grouped 1x1 conv + residual."""
    pad = k // 2
    weights = {
        "W1": _w(rng, c, 8, 3, 3),
        "W2": _w(rng, mid, c // g, k, k),
        "B2": _w(rng, mid),
        "W3": _w(rng, c, mid // g, 1, 1),
    }
    n = helper.make_node
    nodes = [
        n("Conv", ["x", "W1"], ["c1"], pads=[1, 1, 1, 1]),
        n("Relu", ["c1"], ["r1"]),
        n("Conv", ["r1", "W2", "B2"], ["c2"], group=g, pads=[pad] * 4, strides=[stride] * 2),
        n("Relu", ["c2"], ["r2"]),
        n("Conv", ["r2", "W3"], ["c3"], group=g),
    ]
    if stride == 1:
        nodes.append(n("Add", ["c3", "r1"], ["y"]))
    else:
        nodes.append(n("Relu", ["c3"], ["y"]))
    x = np.random.default_rng(1).standard_normal((1, 8, hw, hw)).astype("float32")
    return make_model(nodes, {"x": x}, ["y"], weights), {"x": x}


@pytest.mark.parametrize(
    "c, g, mid, hw, k, stride, blocked, transforms",
    [
        (48, 3, 96, 9, 3, 1, 2, 2),
        (96, 3, 48, 7, 1, 2, 2, 2),
        # groups of 24: the 3x3's input re-blocked from 16 to 8 lanes; the 1x1 in blocks of
        # 8, half a register, runs NCHW's grouped 1x1 template (transforms on both sides)
        (48, 2, 64, 5, 3, 1, 1, 4),
    ],
    ids=["g3-3x3", "g3-1x1-s2", "g2-reblocked"],
)
def test_grouped_convs_run_blocked_and_match_onnxruntime(
    c, g, mid, hw, k, stride, blocked, transforms, rng
):  # noqa: ANN001, E501
    model, feeds = grouped_block(rng, c, g, mid, hw, k, stride)
    graph = run_graph_passes(ember.frontend.from_onnx(model), [alter_conv_layout])
    grouped = [nd for nd in graph.nodes if nd.op == "conv_nchwc" and nd.attrs.get("groups")]
    assert [nd.attrs["groups"] for nd in grouped] == [g] * blocked
    nchw = [nd.attrs["group"] for nd in graph.nodes if nd.op == "conv"]
    assert nchw == [g] * (2 - blocked)
    assert [nd.op for nd in graph.nodes].count("layout_transform") == transforms
    got = ember.compile(model, target="llvm").run(feeds)[0]
    np.testing.assert_allclose(got, run_ort(model, feeds)[0], rtol=1e-4, atol=1e-4)


def test_groups_of_partial_blocks_stay_nchw(rng):  # noqa: ANN001
    """12 channels in 3 groups of 4: no block divides a group, so the conv stays NCHW."""
    model, feeds = grouped_block(rng, c=12, g=3, mid=24, hw=6)
    graph = run_graph_passes(ember.frontend.from_onnx(model), [alter_conv_layout])
    assert [nd.attrs["group"] for nd in graph.nodes if nd.op == "conv"] == [1, 3, 3]
    got = ember.compile(model, target="llvm").run(feeds)[0]
    np.testing.assert_allclose(got, run_ort(model, feeds)[0], rtol=1e-4, atol=1e-4)


def fire_module(rng, c=16, s=16, e=32, hw=7):  # noqa: ANN001, ANN202
    """SqueezeNet's fire module: a squeeze conv, two expand convs concatenated by channel,
    then the next squeeze conv."""
    weights = {
        "S": _w(rng, s, c, 1, 1),
        "E1": _w(rng, e, s, 1, 1),
        "E3": _w(rng, e, s, 3, 3),
        "N": _w(rng, 16, 2 * e, 1, 1),
    }
    n = helper.make_node
    nodes = [
        n("Conv", ["x", "S"], ["s"]),
        n("Relu", ["s"], ["rs"]),
        n("Conv", ["rs", "E1"], ["e1"]),
        n("Relu", ["e1"], ["r1"]),
        n("Conv", ["rs", "E3"], ["e3"], pads=[1, 1, 1, 1]),
        n("Relu", ["e3"], ["r3"]),
        n("Concat", ["r1", "r3"], ["cat"], axis=1),
        n("Conv", ["cat", "N"], ["y"]),
    ]
    x = rng.standard_normal((1, c, hw, hw)).astype("float32")
    return make_model(nodes, {"x": x}, ["y"], weights), {"x": x}


@pytest.mark.parametrize(
    "e, blocked", [(32, True), (24, True), (20, False)], ids=["32-in-32s", "24-in-8s", "20-padded"]
)
def test_a_channel_concat_of_blocked_values_stays_blocked(e, blocked, rng):  # noqa: ANN001
    """Channels in whole blocks: the concat joins the blocks (no transform to NCHW and back);
    20 channels in a padded block of 16 go through NCHW."""
    model, feeds = fire_module(rng, e=e)
    graph = run_graph_passes(ember.frontend.from_onnx(model), [alter_conv_layout])
    ops = [nd.op for nd in graph.nodes]
    assert (ops.count("layout_transform") == 2) == blocked  # only the input's and output's
    concat = next(nd for nd in graph.nodes if nd.op == "concat")
    assert all(graph.values[i].type.ndim == (5 if blocked else 4) for i in concat.inputs)
    got = ember.compile(model, target="llvm").run(feeds)[0]
    np.testing.assert_allclose(got, run_ort(model, feeds)[0], rtol=1e-4, atol=1e-4)


# the blocks, tiles and panels these cases pin are AVX-512's, on any host (tests/conftest.py)
pytestmark = pytest.mark.usefixtures("avx512_tiles")
