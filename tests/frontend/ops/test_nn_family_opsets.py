"""Every opset form (7 to the newest in onnx) of the nn/norm/reduce family has a converter
rule, and larger shapes take the parallel, vectorized schedules correctly."""

from __future__ import annotations

import numpy as np
import pytest

from tests.frontend.onnx_models import check_against_ort, single_node

onnx = pytest.importorskip("onnx")

FAMILY = [
    "ArgMax", "ArgMin", "AveragePool", "BatchNormalization", "Conv", "ConvTranspose", "Det",
    "Einsum", "Gemm", "GlobalAveragePool", "GlobalLpPool", "GlobalMaxPool", "GroupNormalization",
    "Hardmax", "InstanceNormalization", "LayerNormalization", "LogSoftmax", "LpNormalization",
    "LpPool", "LRN", "MatMul", "MaxPool", "MaxUnpool", "MeanVarianceNormalization",
    "ReduceL1", "ReduceL2", "ReduceLogSum", "ReduceLogSumExp", "ReduceMax", "ReduceMean",
    "ReduceMin", "ReduceProd", "ReduceSum", "ReduceSumSquare", "RMSNormalization", "Softmax",
]  # fmt: skip


def _versions(op: str) -> list[int]:
    """The opsets from 7 to onnx's newest at which ``op`` exists."""
    newest = onnx.defs.onnx_opset_version()
    out = []
    for v in range(7, newest + 1):
        try:
            onnx.defs.get_schema(op, max_inclusive_version=v, domain="")
        except onnx.defs.SchemaError:
            continue
        out.append(v)
    return out


@pytest.mark.parametrize("op", FAMILY)
def test_every_opset_form_has_a_rule(op):
    from ember.frontend.onnx_import import find_converter

    versions = _versions(op)
    assert versions, f"onnx has no {op}"
    missing = [v for v in versions if find_converter(op, "", v) is None]
    assert not missing, f"{op}: no converter rule at opsets {missing}"


def test_axes_input_form_switches_at_the_right_opset():
    from ember.frontend.onnx_import import find_converter

    for op, since in [("ReduceSum", 13), ("ReduceMean", 18), ("ReduceMax", 18)]:
        assert find_converter(op, "", since - 1).fn is not find_converter(op, "", since).fn


def test_large_reduction_and_layer_norm(rng):
    """Sizes past the parallel threshold (32K iterations) take the multi-threaded schedule."""
    x = rng.standard_normal((64, 37, 41)).astype("float32")
    axes = np.array([1], dtype=np.int64)
    check_against_ort(single_node("ReduceSum", {"x": x}, {"axes": axes}), {"x": x}, rtol=1e-4)
    consts = {"s": rng.standard_normal(41).astype("float32"), "b": np.ones(41, "float32")}
    model = single_node("LayerNormalization", {"x": x}, consts, axis=-1)
    check_against_ort(model, {"x": x}, rtol=1e-4, atol=1e-4)


def test_large_conv_transpose(rng):
    x = rng.standard_normal((2, 16, 15, 13)).astype("float32")
    w = rng.standard_normal((16, 8, 3, 3)).astype("float32")
    model = single_node("ConvTranspose", {"x": x}, {"w": w}, strides=[2, 2], pads=[1, 1, 0, 1])
    check_against_ort(model, {"x": x}, rtol=1e-4, atol=1e-3)


def test_large_arg_max_and_einsum(rng):
    x = rng.standard_normal((48, 61, 23)).astype("float32")
    check_against_ort(single_node("ArgMax", {"x": x}, axis=1, keepdims=0), {"x": x})
    a = rng.standard_normal((8, 33, 40)).astype("float32")
    b = rng.standard_normal((8, 40, 29)).astype("float32")
    model = single_node("Einsum", {"a": a, "b": b}, opset=12, equation="bij,bjk->bik")
    check_against_ort(model, {"a": a, "b": b}, rtol=1e-4, atol=1e-4)
