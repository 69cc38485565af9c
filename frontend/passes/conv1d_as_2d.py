"""1-D convolutions as 2-D ones of height 1, so the CPU's 2-D conv templates take them.

Expects a verified graph; gives one where each float32 ``conv`` over a 3-D input
``[N, C, L]`` with constant weights ``[O, C/g, K]`` becomes ``reshape`` to ``[N, C, 1, L]``,
a 2-D ``conv`` with weights ``[O, C/g, 1, K]`` (strides ``(1, s)``, pads ``(0, b, 0, e)``,
dilations ``(1, d)``) and ``reshape`` back. The values are the same; only the kernel
changes: a 1-D conv had only the generic schedule, which vectorizes along the output
positions (reads ``stride`` apart, gathered), while the 2-D conv is channel-blocked
(``alter_conv_layout``), a register tile over output channels. The STFT that exporters
write as a 1-D conv (a mel-spectrogram front end: 402 filters of 400 taps, stride 160)
ran at 0.36x onnxruntime's speed.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import numpy as np

from ember.frontend.graph import Graph, Node, Value
from ember.frontend.passes.graph_pass import add_param, add_value, graph_pass, rewrite_nodes


def height_one_window(attrs: dict[str, Any]) -> dict[str, tuple[int, ...]]:
    """A 1-D conv's strides, pads and dilations as those of the 2-D conv of height 1 that
    computes it."""
    return {
        "strides": (1, attrs["strides"][0]),
        "pads": (0, attrs["pads"][0], 0, attrs["pads"][1]),
        "dilations": (1, attrs["dilations"][0]),
    }


def height_one(node: Node, values: dict[str, Value]) -> tuple[str, Node]:
    """The ``[N, C, 1, L]`` view of ``node``'s ``[N, C, L]`` input (added to ``values``)
    and the reshape that makes it."""
    x = node.inputs[0]
    (n, c, length), dtype = values[x].type.shape, values[x].type.dtype
    x4 = add_value(values, f"{x}_h1", (n, c, 1, length), dtype)
    return x4, Node("reshape", node.name, (x,), (x4,), {"shape": (n, c, 1, length)}, "Reshape")


def _takes(node: Node, graph: Graph) -> bool:
    if node.op != "conv" or node.inputs[1] not in graph.params:
        return False
    x = graph.values[node.inputs[0]].type
    w = graph.params[node.inputs[1]]
    return x.ndim == 3 and x.is_static and x.dtype == "float32" and w.ndim == 3


def _as_2d(node: Node, values: dict[str, Value], params: dict[str, Any]) -> list[Node]:
    """The reshape, 2-D conv and reshape back that compute ``node`` (new values and
    weights are added to ``values`` and ``params``)."""
    x4, reshape = height_one(node, values)
    w_name, out = node.inputs[1], node.outputs[0]
    w = params[w_name]
    w4 = add_param(
        values, params, f"{w_name}_h1",
        np.ascontiguousarray(w.reshape(w.shape[0], w.shape[1], 1, w.shape[2])),
    )  # fmt: skip
    n, o, lout = values[out].type.shape
    y4 = add_value(values, f"{out}_h1", (n, o, 1, lout), values[out].type.dtype)
    attrs = {**node.attrs, **height_one_window(node.attrs)}
    conv = replace(node, inputs=(x4, w4, *node.inputs[2:]), outputs=(y4,), attrs=attrs)
    back = Node("reshape", node.name, (y4,), (out,), {"shape": (n, o, lout)}, "Reshape")
    return [reshape, conv, back]


@graph_pass
def conv1d_as_2d(graph: Graph) -> Graph:
    """Rewrite every float32 1-D conv with constant weights as a 2-D conv of height 1."""
    return rewrite_nodes(graph, _takes, _as_2d)  # the 1-D weights dropped
