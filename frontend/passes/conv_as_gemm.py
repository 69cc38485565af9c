"""Convolutions of one or two input channels over long windows, as a GEMM of their windows.

Expects a verified graph; gives one where each float32 ``conv`` of one group with constant
weights ``[O, C, KH, KW]`` (or ``[O, C, K]`` for a 1-D conv) over a static input, with
at most :data:`MAX_CHANNELS` input channels, a window of at least
:data:`MIN_TAPS` values (``C * KH * KW``) and a window matrix of at most
:data:`MAX_WINDOWS_BYTES`, becomes

    im2col [N*OH*OW, C*KH*KW]  ->  matmul by the weights as [C*KH*KW, O]  (+ bias)
    ->  reshape [N, OH*OW, O]  ->  transpose [N, O, OH*OW]  ->  reshape to the output.

The values are the same. The channel-blocked conv templates (``alter_conv_layout``)
reduce over input-channel blocks, one lane wide when there is one input channel, and
their register tile runs along a row of outputs that a long stride spreads apart: an
STFT written as a conv (402 DFT filters of 400 taps, hop 160, as a mel-spectrogram front
end has it) ran there at 0.75x onnxruntime's speed. Its window matrix is 160 KB, copied
once; the product then runs on the GEMM micro-kernel with packed weights
(``pack_dense_weights`` runs after this pass), and the transpose back fuses into whatever
reads the output. An image stem (3 channels, 7x7) is left alone: the blocked template
handles three channels well enough, and its window matrix (7 MB at 224x224) would cost
more memory traffic than a GEMM saves.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ember.frontend.graph import Graph, Node, TensorType, Value
from ember.frontend.passes.conv1d_as_2d import height_one, height_one_window
from ember.frontend.passes.graph_pass import add_param, add_value, graph_pass, rewrite_nodes

MAX_CHANNELS = 2  # input channels: an image stem's 3 stay blocked (see the module notes)
MIN_TAPS = 64  # a GEMM depth the micro-kernel amortizes its tile over
MAX_WINDOWS_BYTES = 1 << 20  # the window matrix stays in the L2 cache of one core


def _dims(t: TensorType) -> tuple[int, ...]:
    return tuple(int(d) for d in t.shape)  # static: _takes checks it


def _window_bytes(node: Node, graph: Graph) -> int:
    x = graph.values[node.inputs[0]].type
    out = _dims(graph.values[node.outputs[0]].type)
    w = graph.params[node.inputs[1]]
    rows = int(np.prod(out[2:])) * out[0]
    return rows * int(np.prod(w.shape[1:])) * np.dtype(x.dtype).itemsize


def _takes(node: Node, graph: Graph) -> bool:
    if node.op != "conv" or node.inputs[1] not in graph.params or node.attrs["group"] != 1:
        return False
    if len(node.inputs) > 2 and node.inputs[2] not in graph.params:
        return False
    x, w = graph.values[node.inputs[0]].type, graph.params[node.inputs[1]]
    if x.ndim not in (3, 4) or not x.is_static or x.dtype != "float32" or w.ndim != x.ndim:
        return False
    if not graph.values[node.outputs[0]].type.is_static:
        return False
    taps = int(np.prod(w.shape[1:]))
    return (
        w.shape[1] <= MAX_CHANNELS
        and taps >= MIN_TAPS
        and _window_bytes(node, graph) <= MAX_WINDOWS_BYTES
    )


def _as_gemm(node: Node, values: dict[str, Value], params: dict[str, np.ndarray]) -> list[Node]:
    """The nodes that compute ``node``'s output as a GEMM (new values and weights are added
    to ``values`` and ``params``)."""

    def value(base: str, shape: tuple[int, ...]) -> str:
        return add_value(values, base, shape, xt.dtype)

    def make(op: str, inputs: tuple[str, ...], output: str, attrs: dict[str, Any]) -> Node:
        return Node(op, node.name, inputs, (output,), attrs, node.op_type)

    x, w_name, out = node.inputs[0], node.inputs[1], node.outputs[0]
    xt, w = values[x].type, params[w_name]
    xs, ys = _dims(xt), _dims(values[out].type)
    nodes = []
    n = xs[0]
    if xt.ndim == 3:  # a 1-D conv: an image of height 1
        x, reshape = height_one(node, values)
        nodes.append(reshape)
        kernel, attrs = (1, w.shape[2]), height_one_window(node.attrs)
    else:
        kernel, attrs = tuple(w.shape[2:]), node.attrs
    window = {"kernel": kernel, **{k: tuple(attrs[k]) for k in ("strides", "pads", "dilations")}}
    o, taps = w.shape[0], int(np.prod(w.shape[1:]))
    positions = int(np.prod(ys[2:]))
    rows = n * positions
    cols = value(f"{out}_windows", (rows, taps))
    nodes.append(make("im2col", (x,), cols, window))
    wt = add_param(values, params, f"{w_name}_kxo", np.ascontiguousarray(w.reshape(o, taps).T))
    prod = value(f"{out}_gemm", (rows, o))
    nodes.append(make("matmul", (cols, wt), prod, {}))
    if len(node.inputs) > 2:
        biased = value(f"{out}_bias", (rows, o))
        nodes.append(make("add", (prod, node.inputs[2]), biased, {}))
        prod = biased
    per_image = value(f"{out}_npo", (n, positions, o))
    nodes.append(make("reshape", (prod,), per_image, {"shape": (n, positions, o)}))
    channels_first = value(f"{out}_nop", (n, o, positions))
    nodes.append(make("transpose", (per_image,), channels_first, {"perm": (0, 2, 1)}))
    nodes.append(make("reshape", (channels_first,), out, {"shape": ys}))
    return nodes


@graph_pass
def conv_as_gemm(graph: Graph) -> Graph:
    """Rewrite each conv the module notes describe as im2col and a product."""
    return rewrite_nodes(graph, _takes, _as_gemm)
