"""Structural equality of graphs, up to the names of their values (Before/Expected tests).

A pass test writes the graph it expects and compares it with what the pass gives; the
names a pass invents (``w_panels``, ``c1_nchw16c``) are its own business, so two graphs
are equal when one renaming of values makes them the same: inputs, nodes and outputs
pairwise in order, each node with the same op, attributes (numpy values compared by
dtype, shape and value), fused group, subgraphs, and operands that are the same values
under the renaming; every value of the same type; constants (params, defaults) equal by
dtype, shape and value. Params pair up where they are first read, so their order in
``params`` does not matter; node names and ONNX op types (error labels) are not compared.

:func:`graph_difference` says where two graphs first differ, :func:`graph_structural_equal`
whether they do not, and :func:`assert_graph_equal` fails a test with the difference and
both graphs printed.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ember.frontend.graph import Graph, Node, format_graph


class _Mismatch(Exception):
    """The first difference found (internal: turned into the message)."""


class _Names:
    """The renaming built so far: a's value names to b's, one to one."""

    def __init__(self, a: Graph, b: Graph, rtol: float, atol: float) -> None:
        self.a, self.b = a, b
        self.rtol, self.atol = rtol, atol
        self.fwd: dict[str, str] = {}
        self.bwd: dict[str, str] = {}

    def bind(self, x: str, y: str, where: str) -> None:
        """Pair value ``x`` of a with ``y`` of b (their types must agree)."""
        if self.fwd.get(x, y) != y or self.bwd.get(y, x) != x:
            raise _Mismatch(f"{where}: '{x}' and '{y}' are already paired with other values")
        vx, vy = self.a.values.get(x), self.b.values.get(y)
        tx, ty = (vx.type if vx else None), (vy.type if vy else None)
        if tx != ty or tx is None:
            raise _Mismatch(f"{where}: '{x}' has type {tx}, '{y}' has type {ty}")
        self.fwd[x], self.bwd[y] = y, x

    def use(self, x: str, y: str, where: str) -> None:
        """``x`` read where b reads ``y``: the same value, or two equal constants met first."""
        if x in self.fwd or y in self.bwd:
            if self.fwd.get(x) != y:
                raise _Mismatch(f"{where}: reads '{x}' where the other reads '{y}'")
            return
        if x not in self.a.params or y not in self.b.params:
            raise _Mismatch(f"{where}: reads '{x}' where the other reads '{y}' (not the same)")
        self.bind(x, y, where)
        self.same_array(self.a.params[x], self.b.params[y], f"{where}: constant '{x}' vs '{y}'")

    def same_array(self, x: Any, y: Any, where: str) -> None:
        x, y = np.asarray(x), np.asarray(y)
        if x.dtype != y.dtype or x.shape != y.shape:
            raise _Mismatch(f"{where}: {x.dtype}{list(x.shape)} vs {y.dtype}{list(y.shape)}")
        if x.dtype.kind in "fc":
            ok = np.allclose(x, y, rtol=self.rtol, atol=self.atol, equal_nan=True)
        else:
            ok = np.array_equal(x, y)
        if not ok:
            raise _Mismatch(f"{where}: values differ\n  {x!r}\n  {y!r}")


def _same_attr(x: Any, y: Any, names: _Names, where: str) -> None:
    if isinstance(x, (np.ndarray, np.generic)) or isinstance(y, (np.ndarray, np.generic)):
        names.same_array(x, y, where)
    elif isinstance(x, (tuple, list)) and isinstance(y, (tuple, list)):
        if type(x) is not type(y) or len(x) != len(y):
            raise _Mismatch(f"{where}: {x!r} vs {y!r}")
        for k, (u, v) in enumerate(zip(x, y)):
            _same_attr(u, v, names, f"{where}[{k}]")
    elif isinstance(x, dict) and isinstance(y, dict):
        if set(x) != set(y):
            raise _Mismatch(f"{where}: keys {sorted(x)} vs {sorted(y)}")
        for k in x:
            _same_attr(x[k], y[k], names, f"{where}[{k!r}]")
    elif type(x) is not type(y) or (x != y and not (x != x and y != y)):  # NaN equals NaN
        raise _Mismatch(f"{where}: {x!r} vs {y!r}")


def _same_node(k: int, x: Node, y: Node, names: _Names, rtol: float, atol: float) -> None:
    where = f"node {k} ({x.op})"
    if x.op != y.op:
        raise _Mismatch(f"node {k}: op '{x.op}' vs '{y.op}'")
    if set(x.attrs) != set(y.attrs):
        raise _Mismatch(f"{where}: attributes {sorted(x.attrs)} vs {sorted(y.attrs)}")
    for key in sorted(x.attrs):
        _same_attr(x.attrs[key], y.attrs[key], names, f"{where} attribute '{key}'")
    if x.group != y.group:
        raise _Mismatch(f"{where}: group {x.group} vs {y.group}")
    if len(x.inputs) != len(y.inputs) or len(x.outputs) != len(y.outputs):
        raise _Mismatch(
            f"{where}: {len(x.inputs)} inputs, {len(x.outputs)} outputs vs "
            f"{len(y.inputs)} inputs, {len(y.outputs)} outputs"
        )
    for i, (u, v) in enumerate(zip(x.inputs, y.inputs)):
        names.use(u, v, f"{where} input {i}")
    if set(x.subgraphs) != set(y.subgraphs):
        raise _Mismatch(f"{where}: subgraphs {sorted(x.subgraphs)} vs {sorted(y.subgraphs)}")
    for key in sorted(x.subgraphs):
        diff = graph_difference(x.subgraphs[key], y.subgraphs[key], rtol, atol)
        if diff is not None:
            raise _Mismatch(f"{where} subgraph '{key}': {diff}")
    for i, (u, v) in enumerate(zip(x.outputs, y.outputs)):
        names.bind(u, v, f"{where} output {i}")


def _compare(a: Graph, b: Graph, rtol: float, atol: float) -> None:
    names = _Names(a, b, rtol, atol)
    if len(a.inputs) != len(b.inputs):
        raise _Mismatch(f"{len(a.inputs)} inputs vs {len(b.inputs)}")
    for k, (u, v) in enumerate(zip(a.inputs, b.inputs)):
        names.bind(u.name, v.name, f"input {k}")
        if (u.name in a.defaults) != (v.name in b.defaults):
            raise _Mismatch(f"input {k}: a default in one graph only")
        if u.name in a.defaults:
            names.same_array(a.defaults[u.name], b.defaults[v.name], f"input {k} default")
    if len(a.nodes) != len(b.nodes):
        ops_a, ops_b = [n.op for n in a.nodes], [n.op for n in b.nodes]
        raise _Mismatch(f"{len(a.nodes)} nodes {ops_a} vs {len(b.nodes)} nodes {ops_b}")
    for k, (na, nb) in enumerate(zip(a.nodes, b.nodes)):
        _same_node(k, na, nb, names, rtol, atol)
    if len(a.outputs) != len(b.outputs):
        raise _Mismatch(f"{len(a.outputs)} outputs vs {len(b.outputs)}")
    for k, (oa, ob) in enumerate(zip(a.outputs, b.outputs)):
        names.use(oa.name, ob.name, f"output {k}")
    rest_a = [p for p in a.params if p not in names.fwd]
    rest_b = [p for p in b.params if p not in names.bwd]
    if len(rest_a) != len(rest_b):
        raise _Mismatch(f"params read by nothing: {rest_a} vs {rest_b}")
    for pa, pb in zip(rest_a, rest_b):
        names.use(pa, pb, "unread param")


def graph_difference(a: Graph, b: Graph, rtol: float = 0.0, atol: float = 0.0) -> str | None:
    """Where ``a`` and ``b`` first differ, up to value names (None: they are equal).
    Float constants compare within ``rtol``/``atol`` (exactly by default)."""
    try:
        _compare(a, b, rtol, atol)
    except _Mismatch as e:
        return str(e)
    return None


def graph_structural_equal(a: Graph, b: Graph, rtol: float = 0.0, atol: float = 0.0) -> bool:
    """Whether ``a`` and ``b`` are the same graph up to value names (module doc)."""
    return graph_difference(a, b, rtol, atol) is None


def assert_graph_equal(
    actual: Graph, expected: Graph, rtol: float = 0.0, atol: float = 0.0
) -> None:
    """Fail (AssertionError) with the first difference and both graphs printed."""
    diff = graph_difference(actual, expected, rtol, atol)
    if diff is not None:
        raise AssertionError(
            f"graphs differ: {diff}\n--- actual\n{format_graph(actual)}\n"
            f"--- expected\n{format_graph(expected)}"
        )


__all__ = ["assert_graph_equal", "graph_difference", "graph_structural_equal"]
