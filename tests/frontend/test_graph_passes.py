"""Graph passes: Before/Expected on small graphs, and fused models against onnxruntime.

Each pass test builds a graph by hand, runs one pass, and compares the result with the
graph the pass must leave (``assert_graph_equal``; every pass has such cases in
``tests/frontend/passes/test_passes_expected.py``); fusion is also checked on random
DAGs (every group convex, the fused model equal to the unfused one and to onnxruntime).
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import ember
from ember.frontend.graph import Graph, Node, TensorType, Value
from ember.frontend.graph_equal import assert_graph_equal
from ember.frontend.passes import (
    eliminate_common_subexpr,
    eliminate_dead_code,
    fold_batch_norm,
    fuse_ops,
)
from tests.nightly import examples

pytest.importorskip("onnx")
T = TensorType((4, 6), "float32")


def graph(nodes, outputs, params=None, inputs=("x",)):
    params = dict(params or {})
    values = {n: Value(n, T) for n in inputs}
    for p, a in params.items():
        values[p] = Value(p, TensorType(a.shape, str(a.dtype)))
    for n in nodes:
        for o in n.outputs:
            values[o] = Value(o, T)
    return Graph(
        [values[n] for n in inputs], [values[o] for o in outputs], nodes, params, values
    ).verify()


def node(op, ins, out, **attrs):
    return Node(op, out, tuple(ins), (out,), attrs, op.capitalize())


def test_dead_code_goes_with_its_params():
    w = np.ones((4, 6), "float32")
    before = graph(
        [node("relu", ["x"], "a"), node("add", ["x", "w"], "dead"), node("exp", ["dead"], "d2")],
        ["a"],
        {"w": w},
    )
    after = eliminate_dead_code(before)
    assert_graph_equal(after, graph([node("relu", ["x"], "a")], ["a"]))
    assert after.params == {} and "dead" not in after.values
    assert eliminate_dead_code(after) is after  # nothing left to do: the same graph


def test_common_subexpressions_merge_nodes_and_equal_params():
    c = np.arange(24, dtype="float32").reshape(4, 6)
    before = graph(
        [
            node("add", ["x", "c1"], "a"),
            node("add", ["x", "c2"], "b"),  # c2 has c1's bytes: the same node
            node("relu", ["a"], "ra"),
            node("relu", ["b"], "rb"),
            node("multiply", ["ra", "rb"], "y"),
        ],
        ["y"],
        {"c1": c, "c2": c.copy()},
    )
    after = eliminate_common_subexpr(before)
    expected = graph(
        [node("add", ["x", "c"], "a"), node("relu", ["a"], "r"), node("multiply", ["r", "r"], "y")],
        ["y"],
        {"c": c},
    )
    assert_graph_equal(after, expected)
    assert set(after.params) == {"c1"}  # the first copy's name stays


def test_a_constant_output_equal_to_another_constant_stays():
    c = np.ones((4, 6), "float32")
    before = graph([node("add", ["x", "c1"], "a")], ["a", "c2"], {"c1": c, "c2": c.copy()})
    after = eliminate_common_subexpr(before).verify()
    assert_graph_equal(after, before)
    assert set(after.params) == {"c1", "c2"}


def test_a_duplicate_that_is_an_output_stays():
    before = graph([node("relu", ["x"], "a"), node("relu", ["x"], "b")], ["a", "b"])
    assert_graph_equal(eliminate_common_subexpr(before), before)


def _conv_bn(rng, bias=True):
    from onnx import helper

    from ember.frontend.testing.models import build_model

    c = 5
    w = {
        "W": rng.standard_normal((c, 3, 3, 3)).astype("float32"),
        "g": rng.uniform(0.5, 2, c).astype("float32"),
        "b": rng.standard_normal(c).astype("float32"),
        "m": rng.standard_normal(c).astype("float32"),
        "v": rng.uniform(0.5, 2, c).astype("float32"),
    }
    conv_in = ["x", "W"]
    if bias:
        w["B"] = rng.standard_normal(c).astype("float32")
        conv_in.append("B")
    nodes = [
        helper.make_node("Conv", conv_in, ["c"], name="conv", pads=[1, 1, 1, 1]),
        helper.make_node("BatchNormalization", ["c", "g", "b", "m", "v"], ["n"], name="bn"),
        helper.make_node("Relu", ["n"], ["y"], name="relu"),
    ]
    x = rng.standard_normal((2, 3, 9, 7)).astype("float32")
    return build_model(nodes, {"x": x}, ["y"], w), {"x": x}


@pytest.mark.parametrize("bias", [True, False])
def test_batch_norm_folds_into_the_conv(bias):
    from tests.frontend.onnx_models import check_against_ort

    model, feeds = _conv_bn(np.random.default_rng(3), bias)
    g = ember.frontend.from_onnx(model)
    assert [n.op for n in g.nodes] == ["conv", "batch_norm", "relu"]
    folded = fold_batch_norm(g).verify()
    assert [n.op for n in folded.nodes] == ["conv", "relu"]
    bn = next(n for n in g.nodes if n.op == "batch_norm")
    assert folded.nodes[0].absorbed == (bn.where(),)  # the conv's errors name the BN too
    assert not any(p in folded.params for p in ("g", "m", "v"))
    check_against_ort(model, feeds, rtol=1e-4, atol=1e-4)


def _onnx_chain(nodes_spec, rng, shape=(3, 10)):
    from onnx import helper

    from ember.frontend.testing.models import build_model

    nodes = [helper.make_node(op, ins, [out], name=out) for op, ins, out in nodes_spec]
    x = rng.standard_normal(shape).astype("float32")
    return build_model(nodes, {"x": x}, [nodes_spec[-1][2]], {}), {"x": x}


def test_a_diamond_fuses_into_one_kernel():
    from tests.frontend.onnx_models import check_against_ort

    rng = np.random.default_rng(0)
    spec = [
        ("Sigmoid", ["x"], "s"),
        ("Tanh", ["s"], "t"),
        ("Exp", ["s"], "e"),
        ("Add", ["t", "e"], "y"),
    ]
    model, feeds = _onnx_chain(spec, rng)
    lib = ember.compile(model)
    assert len(lib.steps) == 1 and len({n.group for n in lib.graph.nodes}) == 1
    check_against_ort(model, feeds, rtol=1e-5, atol=1e-6)


def test_matmul_epilogue_fuses_and_softmax_stays_alone():
    from onnx import helper

    from ember.frontend.testing.models import build_model
    from tests.frontend.onnx_models import check_against_ort

    rng = np.random.default_rng(1)
    w = {
        "w": rng.standard_normal((10, 7)).astype("float32"),
        "b": rng.standard_normal(7).astype("float32"),
    }
    nodes = [
        helper.make_node("MatMul", ["x", "w"], ["m"], name="mm"),
        helper.make_node("Add", ["m", "b"], ["a"], name="bias"),
        helper.make_node("Relu", ["a"], ["r"], name="relu"),
        helper.make_node("Softmax", ["r"], ["y"], name="softmax", axis=1),
    ]
    x = rng.standard_normal((5, 10)).astype("float32")
    model = build_model(nodes, {"x": x}, ["y"], w)
    g = fuse_ops(ember.frontend.from_onnx(model))
    groups = [n.group for n in g.nodes]
    assert groups[0] == groups[1] == groups[2] != groups[3]
    assert len(ember.compile(model).steps) == 2
    check_against_ort(model, {"x": x}, rtol=1e-4, atol=1e-5)


def _convex(g: Graph) -> bool:
    producers = g.producers()
    group_of = {o: n.group for n in g.nodes for o in n.outputs}
    for n in g.nodes:  # a path n -> ... -> m with m in n's group must stay in the group
        stack = [i for i in n.inputs if i in producers and group_of[i] != n.group]
        seen = set()
        while stack:
            v = stack.pop()
            if v in seen:
                continue
            seen.add(v)
            p = producers[v]
            if p.group == n.group:
                return False
            stack += [i for i in p.inputs if i in producers]
    return True


OPS = [("Sigmoid", 1), ("Tanh", 1), ("Relu", 1), ("Add", 2), ("Mul", 2), ("Softmax", 1)]


@settings(
    max_examples=examples(25),
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
    derandomize=True,
)
@given(
    st.lists(
        st.tuples(st.integers(0, len(OPS) - 1), st.integers(0, 99), st.integers(0, 99)),
        min_size=2,
        max_size=10,
    ),
    st.integers(1, 3),
)
def test_random_dags_fuse_into_convex_groups_that_compute_the_same(ops, n_out):
    from onnx import helper

    from ember.frontend.testing.models import build_model
    from tests.frontend.onnx_models import check_against_ort

    values, nodes = ["x"], []
    for k, (op, a, b) in enumerate(ops):
        name, arity = OPS[op]
        ins = [values[a % len(values)], values[b % len(values)]][:arity]
        attrs = {"axis": 1} if name == "Softmax" else {}
        nodes.append(helper.make_node(name, ins, [f"v{k}"], name=f"n{k}", **attrs))
        values.append(f"v{k}")
    outs = [v for v in dict.fromkeys(values[-n_out:]) if v != "x"]
    x = np.random.default_rng(len(ops)).standard_normal((3, 9)).astype("float32")
    model = build_model(nodes, {"x": x}, outs, {})
    g = fuse_ops(ember.frontend.from_onnx(model))
    assert _convex(g)
    fused = ember.compile(model).run({"x": x})
    plain = ember.compile(model, graph_passes=()).run({"x": x})
    for a, b in zip(fused, plain):
        np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-6)
    check_against_ort(model, {"x": x}, rtol=1e-4, atol=1e-5)


def test_residual_add_and_relu_fuse_into_the_second_conv_epilogue():
    """Before: conv-relu-conv-add(x)-relu, a ResNet basic block. Expected: two groups,
    [conv, relu] and [conv, add, relu], the second on the conv template with the add
    and relu inlined into its output stage (no stage of their own)."""
    from onnx import helper

    from ember.frontend.testing.models import build_model
    from ember.graph.kernels import group_to_te
    from ember.tir.schedule.schedule import AttachKind, create_schedule
    from ember.tir.te.tensor import ComputeOp
    from ember.tuner.strategy import schedule_anchors
    from tests.frontend.onnx_models import check_against_ort

    rng = np.random.default_rng(7)
    c = 6
    w = {f"w{k}": (rng.standard_normal((c, c, 3, 3)) / 5).astype("float32") for k in range(2)}
    conv = {"kernel_shape": [3, 3], "pads": [1, 1, 1, 1]}
    nodes = [
        helper.make_node("Conv", ["x", "w0"], ["c0"], name="conv0", **conv),
        helper.make_node("Relu", ["c0"], ["r0"], name="relu0"),
        helper.make_node("Conv", ["r0", "w1"], ["c1"], name="conv1", **conv),
        helper.make_node("Add", ["c1", "x"], ["s"], name="residual"),
        helper.make_node("Relu", ["s"], ["y"], name="relu1"),
    ]
    x = rng.standard_normal((1, c, 9, 11)).astype("float32")
    model = build_model(nodes, {"x": x}, ["y"], w)
    g = fuse_ops(ember.frontend.from_onnx(model))
    assert [n.op for n in g.nodes] == ["conv", "relu", "conv", "add", "relu"]
    groups = [n.group for n in g.nodes]
    assert groups[0] == groups[1] != groups[2] == groups[3] == groups[4]
    block = g.nodes[2:]
    types = {v: g.values[v].type for v in ("r0", "w1", "x", "c1", "s", "y")}
    anchors: list = []
    _, outs = group_to_te(block, ["r0", "w1", "x"], ["y"], types, anchors=anchors)
    assert [a.name for a in anchors] == ["conv2d_nchw.llvm"]
    s = create_schedule([outs[0].op])
    done = schedule_anchors(s, outs, anchors)
    assert id(outs[0].op) in done  # the template's output stage is the add + relu
    kept = [st for st in s.stages if id(st.op) not in done and isinstance(st.op, ComputeOp)]
    assert all(st.attach == AttachKind.INLINE for st in kept), [st.op.name for st in kept]
    lib = ember.compile(model)
    assert [st.kernel.op for st in lib.steps] == ["conv+relu", "conv+add+relu"]
    check_against_ort(model, {"x": x}, rtol=1e-4, atol=1e-5)
