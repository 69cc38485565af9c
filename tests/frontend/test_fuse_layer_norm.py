"""Layer-norm fusion end to end: a BERT feed-forward tail as older exporters write it (GEMM,
bias, erf GELU, residual add, LayerNorm spelled out in ReduceMean/Sub/Pow/Sqrt/Div) runs
as two kernels — the GEMM with bias, GELU and residual as its epilogue, then one
``normalize`` — and matches onnxruntime."""

from __future__ import annotations

import numpy as np
import pytest

import ember
from ember.frontend.testing.models import build_model

ort = pytest.importorskip("onnxruntime")
helper = pytest.importorskip("onnx.helper")


def ffn_tail(rng: np.random.Generator, e: int = 24) -> tuple[object, dict[str, np.ndarray]]:
    f32 = np.float32
    w = {
        "W": (rng.standard_normal((e, e)) / np.sqrt(e)).astype(f32),
        "bias": rng.standard_normal(e).astype(f32),
        "g": rng.uniform(0.5, 1.5, e).astype(f32),
        "b": rng.standard_normal(e).astype(f32),
        "two": np.array(2.0, f32),
        "eps": np.array(1e-5, f32),
        "half": np.array(0.5, f32),
        "one": np.array(1.0, f32),
        "r2": np.array(np.sqrt(2), f32),
        "axes": np.array([-1], np.int64),
    }
    nodes: list[object] = []

    def n(op: str, ins: list[str], **attrs: object) -> str:
        out = f"{op}_{len(nodes)}"
        nodes.append(helper.make_node(op, ins, [out], **attrs))
        return out

    y = n("Add", [n("MatMul", ["x", "W"]), "bias"])
    gelu = n("Mul", [n("Mul", [y, n("Add", [n("Erf", [n("Div", [y, "r2"])]), "one"])]), "half"])
    s = n("Add", [gelu, "x"])  # the residual: SkipLayerNorm's skip
    d = n("Sub", [s, n("ReduceMean", [s, "axes"], keepdims=1)])
    var = n("ReduceMean", [n("Pow", [d, "two"]), "axes"], keepdims=1)
    y = n("Div", [d, n("Sqrt", [n("Add", [var, "eps"])])])
    out = n("Add", [n("Mul", [y, "g"]), "b"])
    x = rng.standard_normal((2, 5, e)).astype(f32)
    return build_model(nodes, {"x": x}, [out], w, opset=18), {"x": x}


def test_decomposed_layer_norm_runs_as_one_kernel_and_matches_onnxruntime(rng):  # noqa: ANN001
    model, inputs = ffn_tail(rng)
    lib = ember.compile(model, target="llvm")
    groups = {n.group for n in lib.graph.nodes}
    assert len(groups) == 2 and [n.op for n in lib.graph.nodes][-1] == "normalize"
    want = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    (got,) = lib.run(inputs)
    np.testing.assert_allclose(got, want.run(None, inputs)[0], rtol=1e-4, atol=1e-5)
