"""Reduce*, ArgMax/ArgMin and Hardmax through Ember vs onnxruntime, in every opset form."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import ember
from tests.frontend.onnx_models import check_against_ort, single_node, tensor_info
from tests.nightly import examples, sample_in_ci

REDUCE_OPS = [
    "ReduceSum",
    "ReduceMean",
    "ReduceMax",
    "ReduceMin",
    "ReduceProd",
    "ReduceL1",
    "ReduceL2",
    "ReduceSumSquare",
    "ReduceLogSum",
    "ReduceLogSumExp",
]
INPUT_SINCE = {op: 18 for op in REDUCE_OPS} | {"ReduceSum": 13}


def _data(rng, op, shape):
    x = rng.standard_normal(shape).astype("float32")
    if op == "ReduceLogSum":
        return np.abs(x) + 0.1  # log of a positive sum
    if op == "ReduceProd":
        return (0.5 + rng.random(shape)).astype("float32")  # no overflow, no sign noise
    return x


def raw_model(op, inputs, out_shape, opset, **attrs):
    """A one-node model typed by hand (for nodes onnx's shape inference rejects)."""
    from onnx import helper

    node = helper.make_node(op, [i.name for i in inputs], ["y"], name=f"{op.lower()}_node", **attrs)
    graph = helper.make_graph([node], "g", inputs, [tensor_info("y", out_shape)])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


def _model(op, x, axes, opset, **attrs):
    """The op at ``opset``: axes as an attribute before the input form, else as an input."""
    if opset >= INPUT_SINCE[op]:
        consts = {} if axes is None else {"axes": np.array(axes, dtype=np.int64)}
        return single_node(op, {"x": x}, consts, opset=opset, **attrs)
    if axes is not None:
        attrs["axes"] = list(axes)
    return single_node(op, {"x": x}, opset=opset, **attrs)


@pytest.mark.parametrize("op", REDUCE_OPS)
@pytest.mark.parametrize(
    "shape,axes,keepdims",
    [((3, 5, 7), (1,), 1), ((3, 5, 7), (0, 2), 0), ((2, 3, 4, 5), (-1, 1), 1), ((5, 3), None, 0)],
)
@pytest.mark.parametrize("opset", [11, 18])
def test_reduce(rng, op, shape, axes, keepdims, opset):
    x = _data(rng, op, shape)
    model = _model(op, x, axes, opset, keepdims=keepdims)
    check_against_ort(model, {"x": x}, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("opset", [1, 13])
def test_reduce_sum_old_opsets(rng, opset):
    x = rng.standard_normal((4, 6, 5)).astype("float32")
    check_against_ort(_model("ReduceSum", x, (2, 0), opset, keepdims=0), {"x": x}, rtol=1e-5)


def test_reduce_log_sum_exp_large_values_do_not_overflow(rng):
    x = (rng.standard_normal((3, 9)) * 50 + 200).astype("float32")
    got = check_against_ort(_model("ReduceLogSumExp", x, (1,), 18), {"x": x}, rtol=1e-5)
    assert np.all(np.isfinite(got[0]))


def test_reduce_empty_axes_noop_returns_the_input(rng):
    x = rng.standard_normal((3, 4)).astype("float32")
    model = single_node(
        "ReduceSum", {"x": x}, {"axes": np.array([], dtype=np.int64)}, noop_with_empty_axes=1
    )
    got = check_against_ort(model, {"x": x})
    np.testing.assert_array_equal(got[0], x)


def test_reduce_empty_axes_means_all_axes(rng):
    x = rng.standard_normal((3, 4, 2)).astype("float32")
    model = single_node("ReduceMean", {"x": x}, {"axes": np.array([], dtype=np.int64)}, opset=18)
    check_against_ort(model, {"x": x}, rtol=1e-5)


@pytest.mark.parametrize("op", ["ReduceSum", "ReduceMax", "ReduceMin", "ReduceProd"])
def test_reduce_int32(rng, op):
    x = rng.integers(-4, 5, size=(4, 3, 5)).astype("int32")
    check_against_ort(_model(op, x, (1,), 18, keepdims=0), {"x": x})


@pytest.mark.parametrize("axis", [0, 1])
def test_reduce_axes_fed_at_run_time(rng, axis):
    x = rng.standard_normal((3, 4)).astype("float32")
    inputs = [tensor_info("x", x.shape), tensor_info("axes", [1], "int64")]
    model = raw_model("ReduceSum", inputs, ["n"], 13, keepdims=0)
    check_against_ort(model, {"x": x, "axes": np.array([axis], np.int64)})


def test_reduce_axis_out_of_range_names_the_node(rng):
    x = rng.standard_normal((3, 4)).astype("float32")
    model = raw_model("ReduceMax", [tensor_info("x", x.shape)], [3], 13, axes=[2], keepdims=0)
    with pytest.raises(ember.ArgumentError, match="reducemax_node"):
        ember.compile(model, target="llvm")


@settings(max_examples=examples(20), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    op=st.sampled_from(REDUCE_OPS),
    shape=st.lists(st.integers(1, 5), min_size=1, max_size=4),
    data=st.data(),
)
def test_reduce_property(op, shape, data):
    axes = data.draw(st.lists(st.integers(-len(shape), len(shape) - 1), max_size=3, unique=True))
    norm = {a % len(shape) for a in axes}
    if len(norm) != len(axes):
        axes = sorted(norm)
    keepdims = data.draw(st.integers(0, 1))
    rng = np.random.default_rng(data.draw(st.integers(0, 999)))
    x = _data(rng, op, tuple(shape))
    model = _model(op, x, axes or None, 18, keepdims=keepdims)
    check_against_ort(model, {"x": x}, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("op", ["ArgMax", "ArgMin"])
@pytest.mark.parametrize("axis,keepdims", [(0, 1), (1, 0), (-1, 1), (2, 0)])
@pytest.mark.parametrize("last", [0, 1])
def test_arg_reduce(rng, op, axis, keepdims, last):
    sample_in_ci(op, axis, keepdims, last)
    # few distinct values, so ties are common and select_last_index matters
    x = rng.integers(0, 3, size=(3, 5, 4)).astype("float32")
    model = single_node(
        op, {"x": x}, opset=13, axis=axis, keepdims=keepdims, select_last_index=last
    )
    check_against_ort(model, {"x": x})


def test_arg_max_int32_old_opset(rng):
    x = rng.integers(-100, 100, size=(6, 7)).astype("int32")
    check_against_ort(single_node("ArgMax", {"x": x}, opset=11, axis=1), {"x": x})


@pytest.mark.parametrize("opset,axis", [(11, 1), (11, 0), (11, 2), (13, 1), (13, -1)])
def test_hardmax(rng, opset, axis):
    x = rng.standard_normal((3, 4, 5)).astype("float32")
    check_against_ort(single_node("Hardmax", {"x": x}, opset=opset, axis=axis), {"x": x})


def test_hardmax_ties_pick_the_first(rng):
    x = np.ones((2, 5), dtype="float32")
    got = check_against_ort(single_node("Hardmax", {"x": x}, opset=13), {"x": x})
    assert got[0][:, 0].tolist() == [1.0, 1.0] and got[0][:, 1:].sum() == 0
