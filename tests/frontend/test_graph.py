"""The graph IR: verify, topological order, the printer, the op and converter registries."""

from __future__ import annotations

import numpy as np
import pytest

import ember
from ember.errors import ArgumentError, InternalError
from ember.frontend.graph import Graph, Node, TensorType, Value, topological_order
from ember.frontend.ops.registry import broadcast_shapes, get_op, list_ops
from tests.frontend.onnx_models import helper, make_model


def _graph() -> Graph:
    x = Value("x", TensorType((2, "n"), "float32"))
    w = Value("w", TensorType((3,), "float32"))
    h = Value("h", TensorType((2, "n"), "float32"))
    y = Value("y", TensorType((2, "n"), "float32"))
    nodes = [
        Node("relu", "r", ("x",), ("h",), op_type="Relu"),
        Node("add", "a", ("h", "x"), ("y",), op_type="Add"),
    ]
    values = {v.name: v for v in (x, w, h, y)}
    return Graph([x], [y], nodes, {"w": np.ones(3, "float32")}, values)


def test_verify_accepts_a_good_graph_and_names_problems():
    g = _graph().verify()
    g.nodes.reverse()
    with pytest.raises(InternalError, match="node 'a' \\(add\\) reads 'h' before it is defined"):
        g.verify()
    g.nodes = topological_order(g.nodes, {"x", "w"})
    assert [n.name for n in g.verify().nodes] == ["r", "a"]


def test_topological_order_finds_cycles():
    a = Node("relu", "a", ("b_out",), ("a_out",))
    b = Node("relu", "b", ("a_out",), ("b_out",))
    with pytest.raises(InternalError, match="cycle"):
        topological_order([a, b], set())


def test_printer_shows_types_attrs_and_groups():
    g = _graph()
    text = str(g)
    assert "graph main(%x: float32[2, n])" in text
    assert "param %w: float32[3] = [1.0, 1.0, 1.0]" in text
    assert "%y: float32[2, n] = add(%h, %x)  # Add 'a'" in text
    g.nodes[0].group = g.nodes[1].group = 0
    assert "  group 0:\n    %h" in str(g)


def test_imported_graph_prints_onnx_names(rng):
    x = rng.standard_normal((1, 2, 5, 5)).astype("float32")
    w = rng.standard_normal((3, 2, 3, 3)).astype("float32")
    node = helper.make_node("Conv", ["x", "w"], ["y"], name="conv1", pads=[1, 1, 1, 1])
    text = str(ember.frontend.from_onnx(make_model([node], {"x": x}, ["y"], {"w": w})))
    assert "%y: float32[1, 3, 5, 5] = conv(%x, %w, dilations=[1, 1], group=1" in text
    assert "# Conv 'conv1'" in text


def test_op_registry():
    assert {"add", "conv", "reshape", "softmax"} <= set(list_ops())
    conv = get_op("conv")
    assert conv.kind == ember.frontend.op_kinds.OUT_ELEMWISE_FUSABLE
    with pytest.raises(ArgumentError, match="takes 2 to 3 inputs"):
        conv.infer_types([TensorType((1, 1, 3, 3), "float32")], {})
    with pytest.raises(InternalError, match="no Ember op named"):
        get_op("nope")


@pytest.mark.parametrize(
    "a,b,want",
    [
        ((3, 1), (4,), (3, 4)),
        ((), (2,), (2,)),
        (("n", 1), (1, 5), ("n", 5)),
        ((2, "n"), ("n",), (2, "n")),
    ],
)
def test_broadcast_shapes(a, b, want):
    assert broadcast_shapes(a, b) == want


def test_broadcast_shapes_rejects():
    with pytest.raises(ArgumentError, match="do not broadcast"):
        broadcast_shapes((3, 2), (4, 2))


def test_converter_rules_are_per_opset():
    from ember.frontend.onnx_import.registry import find_converter

    old, new = find_converter("Squeeze", "", 11), find_converter("Squeeze", "", 13)
    assert old is not None and new is not None and old.fn is not new.fn
    assert find_converter("Add", "", 6) is None  # the legacy broadcast attribute form
    assert find_converter("Relu", "com.microsoft", 1) is None


def test_attributes_must_be_plain_values():
    reshape = get_op("reshape")
    reshape.check_attrs({"shape": (2, 3)})
    with pytest.raises(InternalError, match="attribute 'shape'"):
        reshape.check_attrs({"shape": [2, 3]})
    with pytest.raises(InternalError, match="normalize it in the converter"):
        reshape.check_attrs({"shape": np.array([2, 3])})
