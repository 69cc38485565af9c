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


def _retype(model, names, dtype):
    """Set the element type of the named graph inputs/outputs/initializers to ``dtype``."""
    from onnx import helper, numpy_helper

    elem = helper.np_dtype_to_tensor_dtype(np.dtype(dtype))
    for vi in [*model.graph.input, *model.graph.output]:
        if vi.name in names:
            vi.type.tensor_type.elem_type = elem
    for k, init in enumerate(model.graph.initializer):
        arr = numpy_helper.to_array(init)
        if arr.dtype == np.float32:
            model.graph.initializer[k].CopyFrom(
                numpy_helper.from_array(arr.astype(dtype), init.name)
            )
    return model


TOL = {"float16": (1e-2, 1e-2), "float64": (1e-6, 1e-8)}


@pytest.mark.parametrize("dtype", ["float16", "float64"])
@pytest.mark.parametrize(
    "op,consts,attrs",
    [
        ("ReduceLogSumExp", {"axes": np.array([1])}, {}),
        ("ReduceMean", {"axes": np.array([0, 2])}, {"keepdims": 0}),
        ("ReduceL2", {"axes": np.array([2])}, {}),
        ("LayerNormalization", {"s": np.linspace(0.5, 1.5, 6, dtype="float32")}, {}),
        ("ArgMin", {}, {"axis": 1}),
        ("Hardmax", {}, {"axis": 2}),
        ("LpNormalization", {}, {"axis": 1}),
    ],
)
def test_half_and_double(rng, dtype, op, consts, attrs):
    """16-bit floats accumulate in float32; float64 stays float64."""
    if op == "Hardmax" and dtype == "float64":
        pytest.skip("onnxruntime has no float64 Hardmax kernel")
    x = rng.standard_normal((5, 7, 6)).astype(dtype)
    model = single_node(op, {"x": x.astype("float32")}, consts, opset=18, **attrs)
    model = _retype(model, {"x", "y0"} if not op.startswith("Arg") else {"x"}, dtype)
    rtol, atol = TOL[dtype]
    check_against_ort(model, {"x": x}, rtol=rtol, atol=atol)
