"""Int8 weight packing: ``MatMulInteger`` with constant s8 weights reads them VNNI-packed.

Expects a verified graph; gives one where each ``matmul_integer(A, W[, a_zp, w_zp])``
with A a 2-D uint8 tensor, W a constant 2-D int8 matrix and both zero points absent
or constant zeros becomes ``matmul_int8_packed(A, P)`` with ``P`` = W rearranged once
at compile time into ``P[N/16, K/4, 16, 4]`` (zero padded; TVM's x86 int8 dense
layout). The generic compute of that op reads P on any target; the CPU strategy
(``codegen_llvm/schedules/strategy.py``) gives it to the ``matmul_int8.llvm``
kernel, tensorized to AVX-512 VNNI, where the host has it.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from ember.frontend.graph import Graph, Node, TensorType, Value

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
    if not all(_zero(z, graph) for z in node.inputs[2:]):
        return None
    return w


def pack_int8_weights(graph: Graph) -> Graph:
    params, values = dict(graph.params), dict(graph.values)
    nodes: list[Node] = []
    for node in graph.nodes:
        w = _weights(node, graph)
        if w is None:
            nodes.append(node)
            continue
        packed = pack_int8(w)
        pname = f"{node.inputs[1]}_vnni"
        while pname in values:
            pname += "_"
        params[pname] = packed
        values[pname] = Value(pname, TensorType(tuple(packed.shape), "int8"))
        attrs = {"n": int(w.shape[1]), "k": int(w.shape[0])}
        nodes.append(
            replace(node, op="matmul_int8_packed", inputs=(node.inputs[0], pname), attrs=attrs)
        )
    if len(params) == len(graph.params):
        return graph
    live = {i for nd in nodes for i in nd.inputs} | set(graph.output_names)
    params = {p: a for p, a in params.items() if p in live}
    return replace(graph, nodes=nodes, params=params, values=values)
