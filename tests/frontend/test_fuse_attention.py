"""Attention fusion end to end: a BERT-style block (projections, multi-head reshapes and
transposes, the exporters' padding mask) compiled for the CPU runs as one ``attention``
kernel, matches onnxruntime running the unfused graph (its own fusions off), and its
memory plan holds no score matrix."""

from __future__ import annotations

import numpy as np
import pytest

import ember
from ember.frontend.testing.attention_block import attention_block

ort = pytest.importorskip("onnxruntime")


def ort_unfused(model, inputs):  # noqa: ANN001, ANN201
    """onnxruntime on the graph as written: no graph optimizations, so no Attention fusion."""
    opts = ort.SessionOptions()
    opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    sess = ort.InferenceSession(model.SerializeToString(), opts, providers=["CPUExecutionProvider"])
    return sess.run(None, inputs)[0]


B, S, H = 2, 97, 3  # the block: batch 2 (the second sentence padded), 97 tokens, 3 heads


@pytest.fixture(scope="module")
def block():  # noqa: ANN201
    """The BERT-style block (Q/K/V and output projections, Div by sqrt(d), padding mask)
    and Ember's default CPU compile of it."""
    model, inputs = attention_block(np.random.default_rng(0), batch=B, seq=S, heads=H, head_dim=8)
    return model, inputs, ember.compile(model, target="llvm")


def test_fused_block_matches_onnxruntime(block):  # noqa: ANN001
    model, inputs, lib = block
    ops = [n.op for n in lib.graph.nodes]
    assert ops.count("attention") == 1 and not {"softmax", "transpose"} & set(ops)
    assert ops.count("reshape") == 1  # the mask's Unsqueeze; the heads' reshapes folded in
    (got,) = lib.run(inputs)
    np.testing.assert_allclose(got, ort_unfused(model, inputs), rtol=1e-4, atol=1e-5)


def test_the_fused_plan_holds_no_score_matrix(block):  # noqa: ANN001
    """The memory plan holds the projections' outputs ([B, S, H*D] each), never the [B, H,
    S, S] scores: less than half of one score matrix in all. (Without the pass it holds
    two of them: ``benchmarks/bench_attention.py`` prints both plans up to S = 4096.)"""
    _, _, fused = block
    assert 0 < fused.workspace_bytes < B * H * S * S * 4 // 2


def test_the_kernel_names_every_node_it_computes(block):  # noqa: ANN001
    """The attention step's name lists the MatMuls, the scale, the mask's add and the
    Softmax it absorbed, so a profile or an error maps it back to the model's nodes."""
    model, _, lib = block
    (step,) = [s for s in lib.steps if "(Attention)" in s.where]
    named = {n.name for n in model.graph.node if f"'{n.name}' ({n.op_type})" in step.where}
    kinds = {n.op_type for n in model.graph.node if n.name in named}
    assert {"MatMul", "Softmax", "Div", "Add"} <= kinds
    assert sum(n.op_type == "MatMul" and n.name in named for n in model.graph.node) == 2
