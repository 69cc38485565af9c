"""Layer-norm fusion end to end: a residual add and a LayerNorm spelled out in
ReduceMean/Sub/Pow/Sqrt/Div/Mul/Add, as exporters before opset 17 write BERT's, runs as
the add and one ``normalize`` kernel (not four) and matches onnxruntime. (Bias and GELU
before the residual are the GEMM's epilogue: ``fuse_ops``, after ``fuse_gelu``.)"""

from __future__ import annotations

import numpy as np
import pytest

import ember
from ember.frontend.testing.models import build_model

ort = pytest.importorskip("onnxruntime")
helper = pytest.importorskip("onnx.helper")


def skip_layer_norm(rng: np.random.Generator, e: int = 24) -> tuple[object, dict[str, np.ndarray]]:
    f32 = np.float32
    w = {
        "g": rng.uniform(0.5, 1.5, e).astype(f32),
        "b": rng.standard_normal(e).astype(f32),
        "two": np.array(2.0, f32),
        "eps": np.array(1e-5, f32),
        "axes": np.array([-1], np.int64),
    }
    nodes: list[object] = []

    def n(op: str, ins: list[str], **attrs: object) -> str:
        out = f"{op}_{len(nodes)}"
        nodes.append(helper.make_node(op, ins, [out], **attrs))
        return out

    s = n("Add", ["x", "residual"])  # SkipLayerNorm's skip
    d = n("Sub", [s, n("ReduceMean", [s, "axes"], keepdims=1)])
    var = n("ReduceMean", [n("Pow", [d, "two"]), "axes"], keepdims=1)
    y = n("Div", [d, n("Sqrt", [n("Add", [var, "eps"])])])
    out = n("Add", [n("Mul", [y, "g"]), "b"])
    inputs = {k: rng.standard_normal((2, 5, e)).astype(f32) for k in ("x", "residual")}
    return build_model(nodes, inputs, [out], w, opset=18), inputs


def test_decomposed_layer_norm_runs_as_one_kernel_and_matches_onnxruntime(rng):  # noqa: ANN001
    model, inputs = skip_layer_norm(rng)
    lib = ember.compile(model, target="llvm")
    groups = {n.group for n in lib.graph.nodes}
    assert len(groups) == 2 and [n.op for n in lib.graph.nodes] == ["add", "normalize"]
    want = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    (got,) = lib.run(inputs)
    np.testing.assert_allclose(got, want.run(None, inputs)[0], rtol=1e-4, atol=1e-5)


def test_the_kernel_names_every_node_it_computes(rng):  # noqa: ANN001
    """The ``normalize`` step's name lists the nine ONNX nodes of the decomposed norm
    (its ReduceMeans, Sub, Pow, Sqrt, Div, Mul and Adds), in graph order."""
    model, _ = skip_layer_norm(rng)
    lib = ember.compile(model, target="llvm")
    (step,) = [s for s in lib.steps if "(LayerNormalization)" in s.where]
    # the nodes are unnamed: the importer names them op_type + "_" + their index
    nodes = list(enumerate(model.graph.node))[1:]  # all but the skip's Add
    labels = [f"ONNX node '{n.op_type}_{i}' ({n.op_type})" for i, n in nodes]
    assert len(labels) == 9
    assert all(label in step.where for label in labels)
    positions = [step.where.index(label) for label in labels]
    assert positions == sorted(positions)
