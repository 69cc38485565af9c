"""Winograd convolutions on weights transformed at compile time.

Expects a graph after ``alter_conv_layout``; gives one where each blocked 3x3 stride-1
``conv_nchwc`` (one group, no dilation) that a chooser gives Winograd knobs becomes
``conv_winograd_nchwc`` reading its weights already transformed, ``U = G w G^T`` per
channel pair, packed into the GEMM's panels (``tir/topi/winograd.py``), as a new param.
The chooser, ``(conv args, ic_bn, oc_bn) -> knobs | None``, is the backend's (the CPU's
reads the tuning records and the size rule, ``codegen_llvm/conv_strategies.py``): the
pass only rewrites.

A deliberate difference from a direct convolution (as in every Winograd implementation,
cuDNN's and TVM's too): a tile's outputs are computed from all its inputs together, so a
NaN or infinite input makes NaN every output of the tiles that read it, not only those
whose 3x3 window holds it, and rounding differs slightly (F(4x4) loses about a decimal
digit). ``PassContext(disabled_pass=["transform_winograd_weights"])`` keeps every
convolution direct.

Why at compile time: transforming in the kernel costs ``36 C O`` values a call, which on
large layers (512 channels: 9.4 M values) outweighs much of what Winograd saves, and
its unrolled ``G w G^T`` stage was the slowest stage of the kernel to compile (0.7 of
2.2 s for ResNet-18's 64-channel layer).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import Any

from ember.frontend.graph import Graph, Node
from ember.frontend.passes.graph_pass import add_param, graph_pass, rebuilt
from ember.tir.topi.winograd import winograd_weights_numpy
from ember.tir.topi.workload import Conv2DWorkload
from ember.tir.transform.runner import Pass

# (NCHW conv args of Conv2DWorkload, ic_bn, oc_bn) -> the Winograd knobs, or None
WinogradChooser = Callable[[tuple[Any, ...], int, int], "dict[str, int] | None"]


def _args(node: Node, graph: Graph) -> tuple[Any, ...] | None:
    """The NCHW workload of a blocked conv node this pass may rewrite."""
    if node.op != "conv_nchwc" or node.attrs.get("groups", 1) != 1:
        return None
    if any(i not in graph.params for i in node.inputs[1:]):
        return None
    x = graph.values[node.inputs[0]].type
    w = graph.params[node.inputs[1]]
    if x.dtype != "float32" or not x.is_static or w.shape[2:4] != (3, 3):
        return None
    a = node.attrs
    if tuple(a["strides"]) != (1, 1) or tuple(a["dilations"]) != (1, 1):
        return None
    N, _, H, W, _ = (int(d) for d in x.shape)  # static (checked above)
    geometry = (tuple(a["strides"]), tuple(a["pads"]), tuple(a["dilations"]))
    return Conv2DWorkload(N, a["in_channels"], H, W, a["channels"], 3, 3, *geometry, x.dtype).args


def transform_winograd_weights_with(choose: WinogradChooser) -> Pass:
    """The pass (named ``transform_winograd_weights``) with knobs from ``choose``."""

    @graph_pass
    def transform_winograd_weights(graph: Graph) -> Graph:
        """Rewrite the blocked 3x3 convolutions ``choose`` gives Winograd knobs."""
        values, params = dict(graph.values), dict(graph.params)
        nodes: list[Node] = []
        replaced: set[str] = set()
        for node in graph.nodes:
            args = _args(node, graph)
            w = graph.params[node.inputs[1]] if args is not None else None
            knobs = None if args is None or w is None else choose(args, w.shape[4], w.shape[5])
            if w is None or knobs is None:
                nodes.append(node)
                continue
            U = winograd_weights_numpy(w, knobs["m"], knobs["nr"])
            name = add_param(values, params, node.inputs[1] + "_winograd", U)
            replaced.add(node.inputs[1])
            a = node.attrs
            attrs = {
                "pads": tuple(a["pads"]),
                "in_channels": a["in_channels"],
                "channels": a["channels"],
                "out_block": int(w.shape[5]),
                **{k: int(v) for k, v in knobs.items()},
            }
            inputs = (node.inputs[0], name, *node.inputs[2:])
            nodes.append(replace(node, op="conv_winograd_nchwc", inputs=inputs, attrs=attrs))
        if not replaced:
            return graph
        return rebuilt(graph, nodes, values, params, replaced)  # less the blocked weights

    return transform_winograd_weights
