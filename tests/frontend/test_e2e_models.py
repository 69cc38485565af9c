"""Small whole models through from_onnx + ember.compile, against onnxruntime."""

from __future__ import annotations

import numpy as np
import pytest

from ember.frontend.testing.models import mlp, small_cnn
from tests.frontend.onnx_models import check_against_ort, helper, make_model


@pytest.mark.parametrize("batch,h,w", [(1, 16, 16), (3, 13, 11)])
def test_small_cnn_matches_onnxruntime(rng, batch, h, w):
    model, inputs = small_cnn(rng, batch, h, w)
    (probs,) = check_against_ort(model, inputs, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(probs.sum(axis=1), 1.0, rtol=1e-5)


def test_mlp_with_shape_subgraph_matches_onnxruntime(rng):
    """Shape -> Gather -> Unsqueeze -> Concat -> Reshape folds to a constant at import."""
    n = helper.make_node
    w1 = rng.standard_normal((20, 33)).astype("float32")
    b1 = rng.standard_normal(33).astype("float32")
    w2 = rng.standard_normal((33, 7)).astype("float32")
    nodes = [
        n("Shape", ["x"], ["s"], name="shape"),
        n("Gather", ["s", "zero"], ["batch"], name="take_batch", axis=0),
        n("Unsqueeze", ["batch", "axes0"], ["batch1"], name="unsq"),
        n("Concat", ["batch1", "minus1"], ["target"], name="cat", axis=0),
        n("Reshape", ["x", "target"], ["flat"], name="flatten"),
        n("MatMul", ["flat", "w1"], ["h0"], name="mm1"),
        n("Add", ["h0", "b1"], ["h1"], name="bias1"),
        n("Tanh", ["h1"], ["h2"], name="act"),
        n("MatMul", ["h2", "w2"], ["y0"], name="mm2"),
        n("Sigmoid", ["y0"], ["y"], name="out"),
    ]
    consts = {
        "w1": w1,
        "b1": b1,
        "w2": w2,
        "zero": np.array(0, dtype=np.int64),
        "axes0": np.array([0], dtype=np.int64),
        "minus1": np.array([-1], dtype=np.int64),
    }
    x = rng.standard_normal((5, 4, 5)).astype("float32")
    model = make_model(nodes, {"x": x}, ["y"], consts)
    check_against_ort(model, {"x": x}, rtol=1e-4, atol=1e-5)

    import ember

    graph = ember.frontend.from_onnx(model)
    assert [nd.op for nd in graph.nodes] == [
        "reshape",
        "matmul",
        "add",
        "tanh",
        "matmul",
        "sigmoid",
    ]
    assert graph.values["target"].shape == (2,)
    np.testing.assert_array_equal(graph.params["target"], [5, -1])
    assert graph.values["flat"].shape == (5, 20)


def test_residual_blocks_with_intermediate_outputs(rng):
    """Branches and joins (a value read by two nodes, an output also read later) exercise
    the memory plan: a buffer is reused only after its last reader."""
    n = helper.make_node
    c = 6
    weights = {f"w{k}": rng.standard_normal((c, c, 3, 3)).astype("float32") * 0.2 for k in range(4)}
    nodes = [n("Relu", ["x"], ["a0"], name="in")]
    prev = "a0"
    for blk in range(2):
        nodes += [
            n("Conv", [prev, f"w{2 * blk}"], [f"c{blk}a"], name=f"conv{blk}a", pads=[1, 1, 1, 1]),
            n("Relu", [f"c{blk}a"], [f"r{blk}"], name=f"relu{blk}"),
            n(
                "Conv",
                [f"r{blk}", f"w{2 * blk + 1}"],
                [f"c{blk}b"],
                name=f"conv{blk}b",
                pads=[1, 1, 1, 1],
            ),
            n("Add", [f"c{blk}b", prev], [f"s{blk}"], name=f"skip{blk}"),
            n("Relu", [f"s{blk}"], [f"a{blk + 1}"], name=f"out{blk}"),
        ]
        prev = f"a{blk + 1}"
    nodes.append(n("GlobalAveragePool", [prev], ["pooled"], name="gap"))
    x = rng.standard_normal((2, c, 9, 7)).astype("float32")
    model = make_model(nodes, {"x": x}, ["pooled", "a1"], weights)
    outs = check_against_ort(model, {"x": x}, rtol=1e-4, atol=1e-5)
    assert [o.shape for o in outs] == [(2, c, 1, 1), (2, c, 9, 7)]


def test_mlp_builder_matches_onnxruntime(rng):
    model, inputs = mlp(rng, batch=5, sizes=(33, 17, 9, 4))
    check_against_ort(model, inputs, rtol=1e-4, atol=1e-5)
