"""Conv, pooling, MatMul, Gemm and Softmax through Ember vs onnxruntime."""

from __future__ import annotations

import numpy as np
import pytest

from tests.frontend.onnx_models import check_against_ort, single_node
from tests.nightly import sample_in_ci


def _f32(rng, *shape):
    return rng.standard_normal(shape).astype("float32")


CONV_CASES = [
    # (x shape, w shape, attrs, bias)
    ((1, 3, 9, 11), (4, 3, 3, 3), {}, True),
    ((2, 3, 10, 7), (5, 3, 3, 2), {"pads": [1, 0, 2, 1], "strides": [2, 1]}, False),
    ((1, 4, 13, 13), (6, 2, 3, 3), {"group": 2, "dilations": [2, 1], "pads": [2, 1, 2, 1]}, True),
    ((1, 6, 8, 9), (6, 1, 3, 3), {"group": 6, "strides": [2, 2], "pads": [1, 1, 1, 1]}, True),
    ((1, 3, 7, 10), (4, 3, 3, 3), {"auto_pad": "SAME_UPPER", "strides": [2, 2]}, False),
    ((1, 3, 8, 8), (2, 3, 4, 4), {"auto_pad": "SAME_LOWER"}, True),
    ((2, 3, 9, 9), (4, 3, 3, 3), {"auto_pad": "VALID", "strides": [3, 2]}, True),
    ((2, 3, 17), (4, 3, 5), {"pads": [2, 1], "strides": [2]}, True),
    ((1, 2, 5, 6, 7), (3, 2, 2, 3, 2), {"pads": [1, 0, 1, 0, 1, 1]}, True),
]


@pytest.mark.parametrize("xs,ws,attrs,bias", CONV_CASES)
def test_conv(rng, xs, ws, attrs, bias):
    sample_in_ci(xs, ws, attrs, bias)
    x = _f32(rng, *xs)
    consts = {"w": _f32(rng, *ws)}
    if bias:
        consts["b"] = _f32(rng, ws[0])
    check_against_ort(
        single_node("Conv", {"x": x}, consts, **attrs), {"x": x}, rtol=1e-4, atol=1e-4
    )


def test_conv_weights_as_input(rng):
    """Weights fed at run time, not constants: the kernel reads them like any input."""
    x, w = _f32(rng, 1, 3, 6, 5), _f32(rng, 2, 3, 2, 2)
    check_against_ort(single_node("Conv", {"x": x, "w": w}), {"x": x, "w": w}, rtol=1e-4, atol=1e-5)


POOL_CASES = [
    ({"kernel_shape": [2, 2], "strides": [2, 2]}, (1, 3, 9, 7)),
    ({"kernel_shape": [3, 3], "pads": [1, 1, 1, 1]}, (2, 2, 6, 5)),
    ({"kernel_shape": [3, 2], "strides": [2, 3], "pads": [1, 0, 0, 1]}, (1, 2, 11, 10)),
    ({"kernel_shape": [3, 3], "strides": [2, 2], "ceil_mode": 1}, (1, 2, 8, 9)),
    ({"kernel_shape": [3, 3], "strides": [2, 2], "auto_pad": "SAME_UPPER"}, (1, 1, 7, 8)),
    ({"kernel_shape": [3], "strides": [2], "pads": [1, 1]}, (2, 3, 13)),
]


@pytest.mark.parametrize("attrs,shape", POOL_CASES)
@pytest.mark.parametrize("op", ["MaxPool", "AveragePool"])
def test_pool(rng, op, attrs, shape):
    x = _f32(rng, *shape)
    check_against_ort(single_node(op, {"x": x}, **attrs), {"x": x}, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("shape", [(1, 2, 9, 7), (2, 3, 5, 6)])
def test_average_pool_count_include_pad(rng, shape):
    x = _f32(rng, *shape)
    model = single_node(
        "AveragePool", {"x": x}, kernel_shape=[3, 3], pads=[1, 1, 1, 1], count_include_pad=1
    )
    check_against_ort(model, {"x": x}, rtol=1e-5, atol=1e-6)


def test_max_pool_dilations(rng):
    x = _f32(rng, 1, 2, 10, 9)
    model = single_node(
        "MaxPool", {"x": x}, kernel_shape=[2, 3], dilations=[2, 2], pads=[1, 1, 1, 1]
    )
    check_against_ort(model, {"x": x})


@pytest.mark.parametrize("op", ["GlobalAveragePool", "GlobalMaxPool"])
@pytest.mark.parametrize("shape", [(2, 5, 7, 3), (1, 3, 11)])
def test_global_pool(rng, op, shape):
    x = _f32(rng, *shape)
    check_against_ort(single_node(op, {"x": x}), {"x": x}, rtol=1e-5, atol=1e-6)


MATMUL_SHAPES = [
    ((5, 7), (7, 3)),
    ((7,), (7, 4)),
    ((3, 7), (7,)),
    ((7,), (7,)),
    ((2, 5, 7), (7, 3)),
    ((2, 1, 5, 7), (3, 7, 4)),
    ((6,), (2, 6, 3)),
]


@pytest.mark.parametrize("sa,sb", MATMUL_SHAPES)
def test_matmul(rng, sa, sb):
    a, b = _f32(rng, *sa), _f32(rng, *sb)
    check_against_ort(
        single_node("MatMul", {"a": a, "b": b}), {"a": a, "b": b}, rtol=1e-4, atol=1e-5
    )


GEMM_CASES = [
    ({}, (5,)),
    ({"alpha": 0.5, "beta": 2.0}, (4, 5)),
    ({"transA": 1}, (4, 1)),
    ({"transB": 1, "alpha": -1.5}, ()),
    ({"transA": 1, "transB": 1, "beta": 0.25}, (1, 5)),
    ({"alpha": 3.0}, None),
]


@pytest.mark.parametrize("attrs,cshape", GEMM_CASES)
def test_gemm(rng, attrs, cshape):
    m, k, n = 4, 7, 5
    a = _f32(rng, *((k, m) if attrs.get("transA") else (m, k)))
    b = _f32(rng, *((n, k) if attrs.get("transB") else (k, n)))
    consts = {} if cshape is None else {"c": np.asarray(_f32(rng, *cshape))}
    model = single_node("Gemm", {"a": a, "b": b}, consts, **attrs)
    check_against_ort(model, {"a": a, "b": b}, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("op", ["Softmax", "LogSoftmax"])
@pytest.mark.parametrize(
    "opset,axis,shape",
    [
        (13, -1, (3, 7)),
        (13, 1, (2, 5, 3)),
        (13, 0, (4, 3)),
        (11, 1, (2, 3, 4)),
        (11, -1, (3, 5)),
        (11, 0, (2, 3)),
    ],
)
def test_softmax(rng, op, opset, axis, shape):
    x = _f32(rng, *shape) * 3
    model = single_node(op, {"x": x}, opset=opset, axis=axis)
    check_against_ort(model, {"x": x}, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize(
    "attrs,shape",
    [
        ({"kernel_shape": [2, 2], "strides": [2, 2]}, (2, 3, 7, 6)),
        ({"kernel_shape": [3, 3], "pads": [1, 1, 1, 1], "storage_order": 1}, (1, 2, 5, 7)),
        ({"kernel_shape": [3, 2], "strides": [2, 1], "ceil_mode": 1}, (1, 2, 8, 5)),
        ({"kernel_shape": [3], "strides": [2], "pads": [1, 1]}, (2, 2, 11)),
    ],
)
def test_max_pool_indices(rng, attrs, shape):
    """Values on a coarse grid, so windows hold ties: the first maximum's index wins."""
    x = rng.integers(-3, 4, size=shape).astype("float32")
    model = single_node("MaxPool", {"x": x}, n_outputs=2, **attrs)
    check_against_ort(model, {"x": x})
