"""fuse_attention over the space of chains exporters write: with and without the heads'
reshapes and transposes (K given transposed or transposed by a node), no scale, a divide
or a multiply (the constant on either side), masks of every broadcast rank, the output
transposed and merged back or not — and the near misses (softmax over another axis, a
per-key scale). The pass must fire exactly on the exact ones, and the graph after it must
compute what the graph before it did: both are evaluated node by node with each op's own
compute on the reference interpreter (``frontend/fold.py``), on random data."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from ember.frontend.fold import evaluate
from ember.frontend.graph import Graph
from ember.frontend.passes import fuse_attention, run_graph_passes
from tests.frontend.passes.graphs import GraphBuilder
from tests.nightly import examples

B, H = 1, 2


def run(graph: Graph, inputs: dict[str, np.ndarray]) -> list[np.ndarray]:
    """The graph's outputs, each node evaluated with its op's compute."""
    env = {**graph.params, **inputs}
    for node in graph.nodes:
        types = [graph.values[o].type for o in node.outputs]
        outs = evaluate(node.op, node.attrs, [env[i] for i in node.inputs], types)
        env.update(zip(node.outputs, outs))
    return [env[v.name] for v in graph.outputs]


def operand(b: GraphBuilder, name: str, seq: int, d: int, form: str, kt: bool) -> str:
    """Q or V ([B, H, seq, d]) or, with ``kt``, Kᵀ ([B, H, d, seq]) as ``form`` makes it."""
    final = (B, H, d, seq) if kt else (B, H, seq, d)
    if form == "direct":
        return b.input(name, final)
    perm = (0, 2, 3, 1) if kt else (0, 2, 1, 3)
    if form == "transpose":
        heads = b.input(name, (B, seq, H, d))
    else:  # the [B, S, H*D] tensor before the reshape into heads
        x = b.input(name, (B, seq, H * d))
        heads = b.node("reshape", [x], (B, seq, H, d), shape=(B, seq, H, d))
    return b.node("transpose", [heads], final, perm=perm)


@st.composite
def chains(draw: st.DrawFn) -> tuple[Graph, bool]:
    """A chain and whether it is exactly attention."""
    sq, sk, d = draw(st.integers(1, 5)), draw(st.integers(1, 5)), draw(st.integers(1, 4))
    forms = st.sampled_from(["direct", "transpose", "reshape"])
    scale = draw(st.sampled_from(["none", "divide", "multiply", "multiply_left", "per_key"]))
    mask = draw(st.sampled_from([None, (B, 1, 1, sk), (sq, sk), (B, H, sq, sk), (sk,)]))
    axis, after = draw(st.sampled_from([3, 3, 2])), draw(st.sampled_from(["none", "t", "tr"]))
    b = GraphBuilder()
    q = operand(b, "q", sq, d, draw(forms), kt=False)
    kt = operand(b, "k", sk, d, draw(forms), kt=True)
    v = operand(b, "v", sk, d, draw(forms), kt=False)
    scores = (B, H, sq, sk)
    s = b.node("matmul", [q, kt], scores)
    if scale != "none":
        c = np.float32(draw(st.floats(0.1, 4.0)))
        if scale == "per_key":
            per_key = b.param("c", np.linspace(0.5, 2.0, sk, dtype="float32"))
            s = b.node("multiply", [s, per_key], scores)
        else:
            const = b.param("c", np.array(c, "float32"))
            ins = [const, s] if scale == "multiply_left" else [s, const]
            s = b.node("divide" if scale == "divide" else "multiply", ins, scores)
    if mask is not None:
        s = b.node("add", [s, b.input("mask", mask)], scores)
    out = b.node("matmul", [b.node("softmax", [s], scores, axis=axis), v], (B, H, sq, d))
    if after != "none":
        out = b.node("transpose", [out], (B, sq, H, d), perm=(0, 2, 1, 3))
    if after == "tr":
        out = b.node("reshape", [out], (B, sq, H * d), shape=(B, sq, H * d))
    return b.build(out), axis == 3 and scale != "per_key"


@settings(max_examples=examples(12), deadline=None)
@given(case=chains(), seed=st.integers(0, 2**16))
def test_fires_exactly_on_attention_and_keeps_the_result(case: tuple[Graph, bool], seed: int):
    graph, exact = case
    fused = run_graph_passes(graph, [fuse_attention])
    ops = [n.op for n in fused.nodes]
    assert ops.count("attention") == int(exact), ops
    if exact:
        assert "softmax" not in ops and "matmul" not in ops
    rng = np.random.default_rng(seed)
    inputs = {}
    for v in graph.inputs:
        x = rng.standard_normal(v.type.shape).astype("float32")
        inputs[v.name] = np.where(x < -1.0, -np.inf, x) if v.name == "mask" else x
    (want,), (got,) = run(graph, inputs), run(fused, inputs)
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)
