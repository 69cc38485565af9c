"""Batch-norm folding: ``batch_norm(conv(x, W, B))`` becomes ``conv(x, W', B')``.

Expects a verified graph; gives one where every inference batch norm that is the
only reader of a convolution with constant weights, and whose statistics are
constants, is folded into that convolution's weights and bias (per output channel:
``W' = W * s``, ``B' = (B - mean) * s + beta`` with ``s = gamma / sqrt(var + eps)``,
computed in float64 and stored in the weights' dtype). The folded model computes the
same function with one op less per layer, as exported CNNs (ResNet, MobileNet) need.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from ember.frontend.graph import Graph, Node, merged_labels
from ember.frontend.passes.graph_pass import add_param, graph_pass


@graph_pass
def fold_batch_norm(graph: Graph) -> Graph:
    """Runs the pass on ``graph`` (see the module notes)."""
    producers = graph.producers()
    readers = graph.consumers()
    outputs = set(graph.output_names)
    params = dict(graph.params)
    values = dict(graph.values)
    replaced: dict[int, Node] = {}
    dropped: set[int] = set()
    for bn in graph.nodes:
        conv = _foldable_conv(bn, producers, readers, params, outputs)
        if conv is None:
            continue
        w_name, b_name = _folded_params(conv, bn, params, values)
        x = conv.inputs[0]
        replaced[id(conv)] = replace(
            conv, inputs=(x, w_name, b_name), outputs=bn.outputs,
            absorbed=(*conv.absorbed, *merged_labels([bn])),
        )  # fmt: skip
        dropped.add(id(bn))
    if not dropped:
        return graph
    nodes = [replaced.get(id(n), n) for n in graph.nodes if id(n) not in dropped]
    live = {i for n in nodes for i in n.inputs} | set(graph.output_names)
    params = {p: a for p, a in params.items() if p in live}
    return replace(graph, nodes=nodes, params=params, values=values)


def _foldable_conv(bn, producers, readers, params, outputs):  # noqa: ANN001, ANN202
    if bn.op != "batch_norm" or not all(i in params for i in bn.inputs[1:]):
        return None
    conv = producers.get(bn.inputs[0])
    if conv is None or conv.op != "conv" or not all(i in params for i in conv.inputs[1:]):
        return None
    if len(readers.get(bn.inputs[0], [])) != 1 or bn.inputs[0] in outputs:
        return None
    return conv


def _folded_params(conv: Node, bn: Node, params: dict, values: dict) -> tuple[str, str]:
    w = params[conv.inputs[1]]
    gamma, beta, mean, var = (params[i].astype(np.float64) for i in bn.inputs[1:])
    scale = gamma / np.sqrt(var + float(bn.attrs["eps"]))
    bias = params[conv.inputs[2]].astype(np.float64) if len(conv.inputs) > 2 else 0.0
    new_w = (w.astype(np.float64) * scale.reshape(-1, *([1] * (w.ndim - 1)))).astype(w.dtype)
    new_b = ((bias - mean) * scale + beta).astype(w.dtype)
    w_name = add_param(values, params, f"{conv.inputs[1]}_bn", np.ascontiguousarray(new_w))
    return w_name, add_param(values, params, f"{bn.outputs[0]}_bias", np.ascontiguousarray(new_b))
