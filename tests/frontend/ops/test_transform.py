"""Reshape, Flatten, Squeeze/Unsqueeze, Transpose, Shape, Gather, Concat vs onnxruntime."""

from __future__ import annotations

import numpy as np
import pytest

import ember
from tests.frontend.onnx_models import check_against_ort, helper, make_model, single_node


def _f32(rng, *shape):
    return rng.standard_normal(shape).astype("float32")


def _i64(values):
    return np.array(values, dtype=np.int64)


@pytest.mark.parametrize(
    "shape,target,allowzero",
    [
        ((2, 3, 5), [5, -1], 0),
        ((2, 3, 5), [0, 15], 0),
        ((4, 6), [2, 0, 2, -1], 0),
        ((3, 7), [21], 0),
        ((2, 3), [3, 2], 1),
    ],
)
def test_reshape(rng, shape, target, allowzero):
    x = _f32(rng, *shape)
    model = single_node("Reshape", {"x": x}, {"shape": _i64(target)}, opset=14, allowzero=allowzero)
    check_against_ort(model, {"x": x})


@pytest.mark.parametrize("axis", [0, 1, 2, 3, -1, -3])
def test_flatten(rng, axis):
    x = _f32(rng, 2, 3, 4, 5)
    check_against_ort(single_node("Flatten", {"x": x}, axis=axis), {"x": x})


@pytest.mark.parametrize("opset", [11, 13])
@pytest.mark.parametrize("axes", [[1], [-1, 1], None])
def test_squeeze(rng, opset, axes):
    x = _f32(rng, 3, 1, 5, 1)
    if axes is None:
        model = single_node("Squeeze", {"x": x}, opset=opset)
    elif opset >= 13:
        model = single_node("Squeeze", {"x": x}, {"axes": _i64(axes)}, opset=opset)
    else:
        model = single_node("Squeeze", {"x": x}, opset=opset, axes=axes)
    check_against_ort(model, {"x": x})


@pytest.mark.parametrize("opset", [11, 13])
@pytest.mark.parametrize("axes", [[0], [1, -1], [4, 0, 2]])
def test_unsqueeze(rng, opset, axes):
    x = _f32(rng, 3, 5)
    if opset >= 13:
        model = single_node("Unsqueeze", {"x": x}, {"axes": _i64(axes)}, opset=opset)
    else:
        model = single_node("Unsqueeze", {"x": x}, opset=opset, axes=axes)
    check_against_ort(model, {"x": x})


def test_squeeze_rule_follows_the_opset(rng):
    """At opset 13 axes is an input: an ``axes`` attribute is not how that opset says it."""
    x = _f32(rng, 3, 1, 5)
    old = single_node("Squeeze", {"x": x}, opset=11, axes=[1])
    assert ember.frontend.from_onnx(old).outputs[0].shape == (3, 5)
    new = single_node("Squeeze", {"x": x}, {"axes": _i64([1])}, opset=13)
    assert ember.frontend.from_onnx(new).outputs[0].shape == (3, 5)


@pytest.mark.parametrize("perm", [None, [0, 2, 1], [2, 0, 1], [1, 2, 0]])
def test_transpose(rng, perm):
    x = _f32(rng, 3, 5, 7)
    attrs = {} if perm is None else {"perm": perm}
    check_against_ort(single_node("Transpose", {"x": x}, **attrs), {"x": x})


@pytest.mark.parametrize("axis", [0, 1, -1])
def test_concat(rng, axis):
    shapes = {0: [(1, 3, 4), (2, 3, 4), (3, 3, 4)], 1: [(2, 1, 4), (2, 5, 4), (2, 2, 4)]}
    shapes[-1] = [(2, 3, 1), (2, 3, 6), (2, 3, 3)]
    inputs = {f"x{k}": _f32(rng, *s) for k, s in enumerate(shapes[axis])}
    check_against_ort(single_node("Concat", inputs, axis=axis), inputs)


@pytest.mark.parametrize(
    "shape,indices,axis",
    [
        ((5, 4), [0, 3, -1], 0),
        ((3, 6, 2), [[1, -2], [5, 0]], 1),
        ((4, 3), 2, 1),
        ((7,), [[6], [0]], 0),
    ],
)
def test_gather(rng, shape, indices, axis):
    x = _f32(rng, *shape)
    check_against_ort(single_node("Gather", {"x": x}, {"i": _i64(indices)}, axis=axis), {"x": x})


def test_gather_indices_at_run_time(rng):
    x = _f32(rng, 6, 3)
    idx = _i64([[5, 0], [-1, 2]])
    check_against_ort(single_node("Gather", {"x": x, "i": idx}), {"x": x, "i": idx})


@pytest.mark.parametrize(
    "opset,attrs", [(13, {}), (15, {"start": 1}), (15, {"start": -2, "end": -1})]
)
def test_shape_is_a_constant_output(rng, opset, attrs):
    x = _f32(rng, 2, 3, 5, 7)
    model = single_node("Shape", {"x": x}, opset=opset, **attrs)
    check_against_ort(model, {"x": x})


def test_identity_of_an_input_keeps_the_onnx_output_name(rng):
    x = _f32(rng, 4, 3)
    model = make_model([helper.make_node("Identity", ["x"], ["y"], name="id")], {"x": x}, ["y"])
    lib = ember.compile(model)
    assert lib.output_names == ["y"]
    out = lib.run({"x": x})[0]
    np.testing.assert_array_equal(out, x)
    assert out is not x


def test_zero_size_tensors(rng):
    x = rng.standard_normal((0, 3, 4)).astype("float32")
    model = single_node("Reshape", {"x": x}, {"shape": _i64([3, 4, 0])}, opset=14, allowzero=1)
    check_against_ort(model, {"x": x})
    inputs = {"a": _f32(rng, 2, 0), "b": _f32(rng, 2, 3), "c": _f32(rng, 2, 0)}
    check_against_ort(single_node("Concat", inputs, axis=1), inputs)
