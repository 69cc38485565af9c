"""Weight packing: a product with constant weights reads them in the GEMM kernel's layout.

Expects a verified graph; gives one where each float32 ``matmul(A, W)`` (A of rank 2
or more) and each ``gemm(A, W, C)`` (no ``trans_a``, ``alpha`` 1) whose weights ``W``
are a constant becomes ``dense_packed(A, P)``, ``P`` being ``W`` rearranged once at
compile time into panels ``P[p, k, z] = W[k, p*nr + z]`` (zero past N), followed for
Gemm by an ``add`` of ``beta * C``. The CPU schedule then runs the register-blocked
micro-kernel of the ``matmul.llvm`` template on it, reading the panels with unit
stride and never packing at run time (TVM's alter-op-layout for dense).
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from ember.frontend.graph import Graph, Node, Value
from ember.frontend.passes.conv_blocks import target_backend
from ember.frontend.passes.graph_pass import add_param, fresh_name, graph_pass


def panel_widths() -> tuple[int, ...]:
    """Panel widths, in float32 lanes of the CPU target in scope: one register, doubled up
    to one row of the GEMM micro-kernel's tile (16, 32, 64 with AVX-512; 8, 16 with AVX2)."""
    backend = target_backend()
    n, row = backend.vector_lanes("float32"), backend.tile_row_lanes("float32")
    widths = [n]
    while widths[-1] * 2 <= row:
        widths.append(widths[-1] * 2)
    return tuple(widths)


def panel_width(n: int) -> int:
    """The micro-kernel's lane count for N columns: the widest panel, or the smallest
    width covering N."""
    widths = panel_widths()
    return next((w for w in widths if w >= n), widths[-1])


def pack_panels(w: np.ndarray, nr: int) -> np.ndarray:
    """``w`` (K, N) rearranged into ``nr``-wide column panels, zero-padded, as the GEMM kernel reads
    it."""
    k, n = w.shape
    panels = -(-n // nr)
    padded = np.zeros((k, panels * nr), dtype=w.dtype)
    padded[:, :n] = w
    return np.ascontiguousarray(padded.reshape(k, panels, nr).transpose(1, 0, 2))


def _weights(node: Node, graph: Graph) -> np.ndarray | None:
    """W as (K, N) if ``node`` is a product this pass rewrites, else None."""
    if len(node.inputs) < 2 or node.inputs[1] not in graph.params:
        return None
    a, w = graph.values[node.inputs[0]].type, graph.params[node.inputs[1]]
    if a.dtype != "float32" or w.dtype != np.float32 or w.ndim != 2 or a.ndim < 2:
        return None
    if node.op == "matmul":
        return w
    if node.op == "gemm" and not node.attrs["trans_a"] and node.attrs["alpha"] == 1.0:
        if len(node.inputs) > 2 and node.attrs["beta"] != 1.0:
            if node.inputs[2] not in graph.params:
                return None
        return np.ascontiguousarray(w.T) if node.attrs["trans_b"] else w
    return None


@graph_pass
def pack_dense_weights(graph: Graph) -> Graph:
    """Runs the pass on ``graph`` (see the module notes)."""
    params, values = dict(graph.params), dict(graph.values)
    nodes: list[Node] = []
    changed = False
    for node in graph.nodes:
        w = _weights(node, graph)
        if w is None:
            nodes.append(node)
            continue
        changed = True
        k, n = w.shape
        packed = pack_panels(w, panel_width(n))
        pname = add_param(values, params, f"{node.inputs[1]}_panels", packed)
        out = node.outputs[0]
        has_c = node.op == "gemm" and len(node.inputs) > 2
        prod = fresh_name(f"{out}_prod", values) if has_c else out
        values[prod] = values[out] if not has_c else Value(prod, values[out].type)
        nodes.append(
            replace(
                node,
                op="dense_packed",
                inputs=(node.inputs[0], pname),
                outputs=(prod,),
                attrs={"n": n},
            )
        )
        if has_c:
            c = node.inputs[2]
            if node.attrs["beta"] != 1.0:
                scaled = (params[c] * np.float32(node.attrs["beta"])).astype(np.float32)
                c = add_param(values, params, f"{c}_beta", scaled)
            nodes.append(Node("add", node.name, (prod, c), (out,), {}, node.op_type))
    if not changed:
        return graph
    live = {i for nd in nodes for i in nd.inputs} | set(graph.output_names)
    params = {p: a for p, a in params.items() if p in live}
    return replace(graph, nodes=nodes, params=params, values=values)
