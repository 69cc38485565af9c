"""Normalizations through Ember vs onnxruntime: Layer/RMS/Instance/Group/Batch norm, MVN,
LpNormalization and LRN, over odd shapes, axes and opset forms."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import ember
from tests.frontend.onnx_models import check_against_ort, single_node
from tests.nightly import examples


def _f32(rng, *shape, loc=0.0):
    return (rng.standard_normal(shape) + loc).astype("float32")


@pytest.mark.parametrize(
    "shape,axis", [((3, 7), -1), ((2, 5, 6), 1), ((2, 3, 4, 5), 2), ((4, 9), 0)]
)
@pytest.mark.parametrize("bias", [True, False])
def test_layer_norm(rng, shape, axis, bias):
    x = _f32(rng, *shape, loc=3.0)  # an offset mean, so centring matters
    norm_shape = shape[axis % len(shape) :]
    consts = {"scale": _f32(rng, *norm_shape)}
    if bias:
        consts["b"] = _f32(rng, *norm_shape)
    model = single_node("LayerNormalization", {"x": x}, consts, axis=axis, epsilon=1e-3)
    check_against_ort(model, {"x": x}, rtol=1e-4, atol=1e-4)


def test_layer_norm_mean_and_inv_std_outputs(rng):
    x = _f32(rng, 3, 4, 5, loc=-2.0)
    consts = {"scale": _f32(rng, 4, 5), "b": _f32(rng, 4, 5)}
    model = single_node("LayerNormalization", {"x": x}, consts, n_outputs=3, axis=1)
    got = check_against_ort(model, {"x": x}, rtol=1e-4, atol=1e-4)
    assert got[1].shape == (3, 1, 1) and got[2].shape == (3, 1, 1)


def test_layer_norm_scale_broadcasts(rng):
    x = _f32(rng, 2, 3, 6)
    consts = {"scale": _f32(rng, 6), "b": _f32(rng, 1, 6)}
    model = single_node("LayerNormalization", {"x": x}, consts, axis=1)
    check_against_ort(model, {"x": x}, rtol=1e-4, atol=1e-4)


@settings(max_examples=examples(15), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(shape=st.lists(st.integers(1, 6), min_size=1, max_size=4), data=st.data())
def test_layer_norm_property(shape, data):
    axis = data.draw(st.integers(-len(shape), len(shape) - 1))
    rng = np.random.default_rng(data.draw(st.integers(0, 999)))
    x = _f32(rng, *shape, loc=1.0)
    ns = tuple(shape[axis % len(shape) :])
    consts = {"scale": _f32(rng, *ns), "b": _f32(rng, *ns)}
    model = single_node("LayerNormalization", {"x": x}, consts, axis=axis)
    check_against_ort(model, {"x": x}, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("shape", [(2, 3, 5), (1, 4, 3, 7), (2, 2, 3, 2, 3)])
def test_instance_norm(rng, shape):
    x = _f32(rng, *shape, loc=1.5)
    consts = {"s": _f32(rng, shape[1]), "b": _f32(rng, shape[1])}
    model = single_node("InstanceNormalization", {"x": x}, consts, epsilon=1e-4)
    check_against_ort(model, {"x": x}, rtol=1e-4, atol=1e-4)


def _typed(model, shape):
    """Give the output the input's shape (onnx's shape inference skips GroupNormalization)."""
    from onnx import TensorProto, helper

    out = model.graph.output[0].name
    del model.graph.output[:]
    model.graph.output.append(helper.make_tensor_value_info(out, TensorProto.FLOAT, shape))
    return model


def test_group_norm_21(rng):
    x = _f32(rng, 2, 6, 5, 3, loc=0.5)
    consts = {"s": _f32(rng, 6), "b": _f32(rng, 6)}
    model = single_node("GroupNormalization", {"x": x}, consts, opset=21, num_groups=3)
    model = _typed(model, x.shape)
    check_against_ort(model, {"x": x}, rtol=1e-4, atol=1e-4)


def _group_norm_reference(x, scale, bias, groups, eps):
    n, c = x.shape[:2]
    g = x.reshape(n, groups, -1).astype(np.float64)
    y = (g - g.mean(-1, keepdims=True)) / np.sqrt(g.var(-1, keepdims=True) + eps)
    y = y.reshape(n, groups, c // groups, -1) * scale.reshape(groups, -1, 1)
    return (y + bias.reshape(groups, -1, 1)).reshape(x.shape)


def test_group_norm_against_numpy(rng):
    """Opset 21 scales per channel. (The opset-18 form, per group, is deprecated: onnx's
    checker rejects such models before any converter runs.)"""
    x = _f32(rng, 3, 4, 7)
    s, b = _f32(rng, 4), _f32(rng, 4)
    model = single_node(
        "GroupNormalization", {"x": x}, {"s": s, "b": b}, opset=21, num_groups=2, epsilon=1e-3
    )
    got = ember.compile(_typed(model, x.shape), target="llvm").run({"x": x})[0]
    want = _group_norm_reference(x, s, b, 2, 1e-3)
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)


def test_group_norm_channels_must_divide(rng):
    x = _f32(rng, 1, 5, 4)
    model = single_node(
        "GroupNormalization",
        {"x": x},
        {"s": _f32(rng, 5), "b": _f32(rng, 5)},
        opset=21,
        num_groups=2,
    )
    with pytest.raises(ember.ArgumentError, match="num_groups"):
        ember.compile(_typed(model, x.shape), target="llvm")


@pytest.mark.parametrize("opset", [7, 9, 15])
@pytest.mark.parametrize("shape", [(2, 3, 5, 4), (3, 4), (1, 5, 7)])
def test_batch_norm(rng, opset, shape):
    c = shape[1]
    x = _f32(rng, *shape)
    consts = {
        "s": _f32(rng, c),
        "b": _f32(rng, c),
        "m": _f32(rng, c),
        "v": (rng.random(c) + 0.5).astype("float32"),
    }
    model = single_node("BatchNormalization", {"x": x}, consts, opset=opset, epsilon=1e-3)
    check_against_ort(model, {"x": x}, rtol=1e-4, atol=1e-4)


def test_batch_norm_training_mode_before_opset_14_is_rejected(rng):
    """Opsets 9-13 had five training outputs (saved statistics too): not supported."""
    from onnx import TensorProto, helper, numpy_helper

    outs = ["y", "mean", "var", "saved_mean", "saved_var"]
    node = helper.make_node("BatchNormalization", ["x", "s", "b", "m", "v"], outs)
    info = helper.make_tensor_value_info
    graph = helper.make_graph(
        [node],
        "g",
        [info("x", TensorProto.FLOAT, [2, 3, 4])],
        [info("y", TensorProto.FLOAT, [2, 3, 4])]
        + [info(o, TensorProto.FLOAT, [3]) for o in outs[1:]],
        [numpy_helper.from_array(_f32(rng, 3), k) for k in "sbmv"],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 9)])
    with pytest.raises(ember.ArgumentError, match="training mode before opset 14"):
        ember.compile(model, target="llvm")


@pytest.mark.parametrize("axes", [None, [0, 2, 3], [1], [2, 3]])
def test_mean_variance_norm(rng, axes):
    x = _f32(rng, 2, 3, 4, 5, loc=2.0)
    attrs = {} if axes is None else {"axes": axes}
    model = single_node("MeanVarianceNormalization", {"x": x}, opset=13, **attrs)
    check_against_ort(model, {"x": x}, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("p", [1, 2])
@pytest.mark.parametrize("axis", [0, 1, -1])
def test_lp_normalization(rng, p, axis):
    x = _f32(rng, 3, 5, 4)
    model = single_node("LpNormalization", {"x": x}, opset=1, p=p, axis=axis)
    check_against_ort(model, {"x": x}, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("size", [1, 3, 5])
def test_lrn(rng, size):
    x = _f32(rng, 2, 6, 5, 3)
    model = single_node("LRN", {"x": x}, opset=13, size=size, alpha=0.02, beta=0.6, bias=1.5)
    check_against_ort(model, {"x": x}, rtol=1e-5, atol=1e-6)


def test_rms_norm_against_numpy(rng):
    x = _f32(rng, 3, 4, 6)
    s = _f32(rng, 4, 6)
    model = single_node("RMSNormalization", {"x": x}, {"s": s}, opset=23, axis=1, epsilon=1e-4)
    got = ember.compile(model, target="llvm").run({"x": x})[0]
    x64 = x.astype(np.float64)
    want = x64 / np.sqrt((x64**2).mean(axis=(1, 2), keepdims=True) + 1e-4) * s
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)


def test_lrn_even_size_against_numpy(rng):
    """onnxruntime takes only odd sizes; ONNX's window is [c - 1, c + 2] for size 4."""
    x = _f32(rng, 1, 7, 3, 2)
    model = single_node("LRN", {"x": x}, opset=13, size=4, alpha=0.1, beta=0.75, bias=2.0)
    got = ember.compile(model, target="llvm").run({"x": x})[0]
    sq = np.zeros_like(x, dtype=np.float64)
    for c in range(7):
        lo, hi = max(c - 1, 0), min(c + 2, 6)
        sq[:, c] = (x[:, lo : hi + 1].astype(np.float64) ** 2).sum(axis=1)
    want = x / (2.0 + 0.1 / 4 * sq) ** 0.75
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("shape", [(3, 5, 7, 2), (4, 6)])
def test_batch_norm_training_mode_uses_the_batch_statistics(rng, shape):
    """Opset 15's training mode against numpy: population variance per channel, the
    running mean and variance moved toward the batch's by ``momentum``."""
    c = shape[1]
    x = _f32(rng, *shape, loc=1.5)
    scale, bias = _f32(rng, c), _f32(rng, c)
    mean, var = _f32(rng, c), rng.uniform(0.5, 2, c).astype("float32")
    inputs = {"x": x, "s": scale, "b": bias, "m": mean, "v": var}
    model = single_node(
        "BatchNormalization", inputs, n_outputs=3, opset=15, training_mode=1, momentum=0.7
    )
    y, running_mean, running_var = ember.compile(model).run(inputs)
    axes = (0, *range(2, len(shape)))
    view = (1, c) + (1,) * (len(shape) - 2)
    bm, bv = x.mean(axis=axes), x.var(axis=axes)
    want = (x - bm.reshape(view)) / np.sqrt(bv.reshape(view) + 1e-5)
    want = want * scale.reshape(view) + bias.reshape(view)
    np.testing.assert_allclose(y, want, rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(running_mean, mean * 0.7 + bm * 0.3, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(running_var, var * 0.7 + bv * 0.3, rtol=1e-4, atol=1e-5)
