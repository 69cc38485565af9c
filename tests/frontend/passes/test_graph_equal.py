"""graph_structural_equal: equal up to value names, and each kind of difference found."""

from __future__ import annotations

import numpy as np
import pytest

from ember.frontend.graph_equal import (
    assert_graph_equal,
    graph_difference,
    graph_structural_equal,
)
from tests.frontend.passes.graphs import GraphBuilder

W = np.arange(12, dtype="float32").reshape(3, 4)


def _mlp(
    names: tuple[str, ...] = ("x", "w", "m", "y"),
    w: np.ndarray = W,
    op: str = "relu",
    group: int | None = None,
    alpha: float = 0.5,
):  # type: ignore[no-untyped-def]
    b = GraphBuilder()
    x = b.input(names[0], (2, 3))
    p = b.param(names[1], w)
    m = b.node("matmul", [x, p], (2, 4), out=names[2], fused=group)
    y = b.node(op, [m], (2, 4), out=names[3], fused=group, alpha=alpha)
    return b.build(y)


def test_value_names_do_not_matter():
    assert graph_structural_equal(_mlp(), _mlp(("a", "b", "c", "d")))
    assert_graph_equal(_mlp(), _mlp(("a", "b", "c", "d")))


@pytest.mark.parametrize(
    "other, found",
    [
        (_mlp(op="sigmoid"), "node 1: op 'relu' vs 'sigmoid'"),
        (_mlp(alpha=0.25), "node 1 (relu) attribute 'alpha': 0.5 vs 0.25"),
        (_mlp(w=W + 1), "node 0 (matmul) input 1: constant 'w' vs 'w': values differ"),
        (_mlp(w=W.astype("float64")), "has type float32[3, 4], 'w' has type float64[3, 4]"),
        (_mlp(group=0), "node 0 (matmul): group None vs 0"),
    ],
)
def test_each_difference_is_named(other, found):  # type: ignore[no-untyped-def]
    assert not graph_structural_equal(_mlp(), other)
    assert found in (graph_difference(_mlp(), other) or "")


def test_the_failure_message_prints_both_graphs():
    with pytest.raises(AssertionError) as err:
        assert_graph_equal(_mlp(), _mlp(op="sigmoid"))
    text = str(err.value)
    assert text.startswith("graphs differ: node 1: op 'relu' vs 'sigmoid'")
    assert "--- actual\ngraph main(%x: float32[2, 3])" in text
    assert "= sigmoid(%m" in text.split("--- expected")[1]


def test_params_pair_where_read_not_by_their_order():
    c = np.ones((2, 3), "float32")

    def g(order):  # type: ignore[no-untyped-def]
        b = GraphBuilder()
        x = b.input("x", (2, 3))
        for name in order:
            b.param(name, W if name == "w" else c)
        a = b.node("add", [x, "c"], (2, 3))
        return b.build(b.node("matmul", [a, "w"], (2, 4)))

    assert_graph_equal(g(["w", "c"]), g(["c", "w"]))


def test_renaming_is_one_to_one():
    def g(second: str):  # type: ignore[no-untyped-def]
        b = GraphBuilder()
        x = b.input("x", (2, 3))
        z = b.input("z", (2, 3))
        return b.build(b.node("add", [x, {"x": x, "z": z}[second]], (2, 3)))

    assert "reads 'x' where the other reads 'z'" in (graph_difference(g("x"), g("z")) or "")


def test_numpy_attributes_compare_by_value_and_dtype():
    def g(table: np.ndarray):  # type: ignore[no-untyped-def]
        b = GraphBuilder()
        x = b.input("x", (4,), "int64")
        return b.build(b.node("gather_table", [x], (4,), table=table))

    t = np.arange(5, dtype="int32")
    assert graph_structural_equal(g(t), g(t.copy()))
    assert "values differ" in (graph_difference(g(t), g(t[::-1].copy())) or "")
    assert "int32[5] vs int64[5]" in (graph_difference(g(t), g(t.astype("int64"))) or "")


def test_float_constants_may_compare_within_a_tolerance():
    near = _mlp(w=W * (1 + 1e-7))
    assert not graph_structural_equal(_mlp(), near)
    assert graph_structural_equal(_mlp(), near, rtol=1e-6)


def test_node_and_output_counts():
    b = GraphBuilder()
    x = b.input("x", (2, 3))
    assert "2 nodes ['matmul', 'relu'] vs 0 nodes []" in (
        graph_difference(_mlp(), b.build(x)) or ""
    )
