"""Blocked max and average pooling (``schedules/pool_nchwc.py``) after a blocked conv,
against onnxruntime over the pooling attributes: windows, strides, padding, ceil mode,
whether padding counts, channel counts whose last block is zero-padded, an epilogue,
and a global average pool."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from onnx import helper

import ember
from ember.codegen_llvm.schedules.pool_nchwc import schedule_pool_nchwc
from ember.frontend.passes import alter_conv_layout, run_graph_passes
from ember.tir.schedule.schedule import create_schedule
from ember.tir.te import operation as te
from ember.tir.topi import avg_pool2d_nchwc, max_pool2d_nchwc
from tests.frontend.onnx_models import make_model, run_ort
from tests.nightly import examples

pytest.importorskip("onnxruntime")
n = helper.make_node


def _model(rng, channels: int, pool: object, relu: bool):  # noqa: ANN202
    weights = {"W": (rng.standard_normal((channels, 3, 3, 3)) * 0.3).astype("float32")}
    nodes = [n("Conv", ["x", "W"], ["c"], pads=[1, 1, 1, 1]), pool]
    if relu:
        nodes.append(n("Relu", ["p"], ["y"]))
    x = rng.standard_normal((1, 3, 11, 9)).astype("float32")
    return make_model(nodes, {"x": x}, ["y" if relu else "p"], weights), {"x": x}


def _check(model, feed, blocked_op: str) -> None:  # noqa: ANN001
    graph = run_graph_passes(ember.frontend.from_onnx(model), [alter_conv_layout])
    assert blocked_op in [nd.op for nd in graph.nodes]
    got = ember.compile(model).run(feed)[0]
    np.testing.assert_allclose(got, run_ort(model, feed)[0], rtol=1e-5, atol=1e-5)


@settings(max_examples=examples(16), deadline=None)
@given(
    avg=st.booleans(),
    kernel=st.tuples(st.integers(1, 3), st.integers(1, 3)),
    strides=st.tuples(st.integers(1, 2), st.integers(1, 2)),
    pad=st.integers(0, 1),
    ceil=st.booleans(),
    count_pad=st.booleans(),
    channels=st.sampled_from([16, 20, 32]),
    relu=st.booleans(),
)
def test_blocked_pools_match_onnxruntime(
    avg, kernel, strides, pad, ceil, count_pad, channels, relu
):  # noqa: ANN001, E501
    pads = [min(pad, kernel[0] - 1), min(pad, kernel[1] - 1)] * 2
    attrs = {"kernel_shape": list(kernel), "strides": list(strides), "pads": pads}
    attrs["ceil_mode"] = int(ceil)
    if avg:
        attrs["count_include_pad"] = int(count_pad)
    pool = n("AveragePool" if avg else "MaxPool", ["c"], ["p"], **attrs)
    rng = np.random.default_rng(sum(kernel) * 7 + channels)
    model, feed = _model(rng, channels, pool, relu)
    _check(model, feed, "avg_pool_nchwc" if avg else "max_pool_nchwc")


def test_a_global_average_pool_runs_blocked(rng):  # noqa: ANN001
    model, feed = _model(rng, 20, n("GlobalAveragePool", ["c"], ["p"]), relu=False)
    _check(model, feed, "avg_pool_nchwc")


@pytest.mark.parametrize("make", [max_pool2d_nchwc, avg_pool2d_nchwc], ids=["max", "avg"])
def test_the_pools_take_their_schedule(make):  # noqa: ANN001
    x = te.placeholder((1, 2, 9, 7, 16), "float32", name="x")
    out = make(x, (3, 3), (2, 2), (1, 1, 1, 1), (1, 1))
    assert schedule_pool_nchwc(create_schedule([out.op]), [out])
