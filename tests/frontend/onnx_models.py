"""Helpers for frontend tests: one-node ONNX models, onnxruntime as the reference."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

onnx = __import__("pytest").importorskip("onnx")
ort = __import__("pytest").importorskip("onnxruntime")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402

DTYPES = {
    "float32": TensorProto.FLOAT,
    "int64": TensorProto.INT64,
    "int32": TensorProto.INT32,
    "bool": TensorProto.BOOL,
    "float64": TensorProto.DOUBLE,
    "float16": TensorProto.FLOAT16,
}


def tensor_info(name: str, shape: Sequence[Any] | None, dtype: str = "float32") -> Any:
    code = DTYPES.get(dtype) or helper.np_dtype_to_tensor_dtype(np.dtype(dtype))
    return helper.make_tensor_value_info(name, code, shape)


def make_model(
    nodes: Sequence[Any],
    inputs: dict[str, np.ndarray],
    outputs: Sequence[str],
    initializers: dict[str, np.ndarray] | None = None,
    opset: int = 17,
) -> Any:
    """A model over ``nodes``; graph inputs typed from example arrays, outputs left to
    onnxruntime's and Ember's shape inference (their types are filled by onnx's)."""
    g = helper.make_graph(
        list(nodes),
        "test",
        [tensor_info(k, v.shape, str(v.dtype)) for k, v in inputs.items()],
        [helper.make_tensor_value_info(o, TensorProto.UNDEFINED, None) for o in outputs],
        [numpy_helper.from_array(v, k) for k, v in (initializers or {}).items()],
    )
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = min(model.ir_version, 10)
    inferred = onnx.shape_inference.infer_shapes(model)
    del model.graph.output[:]
    model.graph.output.extend(inferred.graph.output)
    return model


def run_ort(model: Any, inputs: dict[str, np.ndarray]) -> list[np.ndarray]:
    """onnxruntime's outputs, its 8-bit products exact on every host (see ort_exact)."""
    from tests.frontend import ort_exact

    return ort_exact.run(model, inputs)


def check_against_ort(
    model: Any, inputs: dict[str, np.ndarray], rtol: float = 1e-5, atol: float = 1e-5
) -> list[np.ndarray]:
    """Compile ``model`` with Ember for llvm, run, and compare every output with onnxruntime."""
    import ember

    want = run_ort(model, inputs)
    got = ember.compile(model, target="llvm").run(inputs)
    assert len(got) == len(want)
    for g, w in zip(got, want):
        assert g.shape == w.shape and g.dtype == w.dtype, (g.shape, w.shape, g.dtype, w.dtype)
        if w.dtype.kind in "iub":
            np.testing.assert_array_equal(g, w)
        else:
            np.testing.assert_allclose(g, w, rtol=rtol, atol=atol)
    return got


def single_node(
    op_type: str,
    inputs: dict[str, np.ndarray],
    initializers: dict[str, np.ndarray] | None = None,
    n_outputs: int = 1,
    opset: int = 17,
    **attrs: Any,
) -> Any:
    names = [*inputs, *(initializers or {})]
    outs = [f"y{k}" for k in range(n_outputs)]
    node = helper.make_node(op_type, names, outs, name=f"{op_type.lower()}_node", **attrs)
    return make_model([node], inputs, outs, initializers, opset)
