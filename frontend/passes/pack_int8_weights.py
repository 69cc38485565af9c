"""Int8 weight packing: ``MatMulInteger`` with constant s8 weights reads them VNNI-packed.

Expects a verified graph; gives one where each ``matmul_integer(A, W[, a_zp, w_zp])``
with A a 2-D uint8 tensor, W a constant 2-D int8 matrix, w_zp absent or a constant
zero and a_zp absent or one value (a constant, or computed, as DynamicQuantizeLinear
gives it) becomes ``matmul_int8_packed(A, P)``, less ``a_zp * colsum(W)`` when a_zp
is not a constant zero, with ``P`` = W rearranged once
at compile time into ``P[N/16, K/4, 16, 4]`` (zero padded; TVM's x86 int8 dense
layout). The generic compute of that op reads P on any target; the CPU strategy
(``codegen_llvm/strategy.py``) gives it to the ``matmul_int8.llvm``
kernel, tensorized to AVX-512 VNNI, where the host has it.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from ember.frontend.graph import Graph, Node, TensorType, Value
from ember.frontend.passes.graph_pass import fresh_name, graph_pass

LANES = 16  # int32 accumulators of one vpdpbusd
GROUP = 4  # products summed into each


def pack_int8(w: np.ndarray) -> np.ndarray:
    """W (K, N) -> ``P[x, g, z, q] = W[4g + q, 16x + z]``, zero past K and N."""
    k, n = w.shape
    panels, groups = -(-n // LANES), -(-k // GROUP)
    padded = np.zeros((groups * GROUP, panels * LANES), np.int8)
    padded[:k, :n] = w
    return np.ascontiguousarray(padded.reshape(groups, GROUP, panels, LANES).transpose(2, 0, 3, 1))


def _zero(name: str, graph: Graph) -> bool:
    value = graph.params.get(name)
    return value is not None and not np.any(value)


def _weights(node: Node, graph: Graph) -> np.ndarray | None:
    if node.op != "matmul_integer" or node.inputs[1] not in graph.params:
        return None
    a, w = graph.values[node.inputs[0]].type, graph.params[node.inputs[1]]
    if a.dtype != "uint8" or a.ndim != 2 or w.dtype != np.int8 or w.ndim != 2:
        return None
    if len(node.inputs) > 3 and not _zero(node.inputs[3], graph):
        return None
    if len(node.inputs) > 2 and graph.values[node.inputs[2]].type.shape not in ((), (1,)):
        return None  # a per-row zero point of A
    return w


class _Namer:
    def __init__(self, values: dict[str, Value]) -> None:
        self.values = values

    def new(self, base: str, ttype: TensorType) -> str:
        name = fresh_name(base, self.values)
        self.values[name] = Value(name, ttype)
        return name


def _zero_point_fix(node: Node, w: np.ndarray, prod: str, names: _Namer, params: dict) -> list:
    """``(A - a_zp) @ W = A @ W - a_zp * colsum(W)``: the nodes after the product."""
    out, zp = node.outputs[0], node.inputs[2]
    n = w.shape[1]
    colsum = names.new(f"{node.inputs[1]}_colsum", TensorType((n,), "int32"))
    params[colsum] = w.astype(np.int32).sum(axis=0, dtype=np.int32)
    zp32 = names.new(f"{zp}_i32", TensorType(names.values[zp].type.shape, "int32"))
    corr = names.new(f"{out}_zp", TensorType((n,), "int32"))
    where = (node.name, node.op_type)
    return [
        Node("cast", where[0], (zp,), (zp32,), {"dtype": "int32"}, where[1]),
        Node("multiply", where[0], (zp32, colsum), (corr,), {}, where[1]),
        Node("subtract", where[0], (prod, corr), (out,), {}, where[1]),
    ]


@graph_pass
def pack_int8_weights(graph: Graph) -> Graph:
    """Runs the pass on ``graph`` (see the module notes)."""
    params, values = dict(graph.params), dict(graph.values)
    names = _Namer(values)
    nodes: list[Node] = []
    for node in graph.nodes:
        w = _weights(node, graph)
        if w is None:
            nodes.append(node)
            continue
        packed = pack_int8(w)
        pname = names.new(f"{node.inputs[1]}_vnni", TensorType(tuple(packed.shape), "int8"))
        params[pname] = packed
        attrs = {"n": int(w.shape[1]), "k": int(w.shape[0])}
        out = node.outputs[0]
        fix = len(node.inputs) > 2 and not _zero(node.inputs[2], graph)
        prod = names.new(f"{out}_prod", values[out].type) if fix else out
        nodes.append(
            replace(
                node,
                op="matmul_int8_packed",
                inputs=(node.inputs[0], pname),
                outputs=(prod,),
                attrs=attrs,
            )
        )
        if fix:
            nodes += _zero_point_fix(node, w, prod, names, params)
    if len(params) == len(graph.params):
        return graph
    live = {i for nd in nodes for i in nd.inputs} | set(graph.output_names)
    params = {p: a for p, a in params.items() if p in live}
    return replace(graph, nodes=nodes, params=params, values=values)
