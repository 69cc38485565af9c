"""A blocked depthwise conv, its clip (or ReLU) and the 1x1 conv reading it become one node.

MobileNets alternate a depthwise 3x3 conv (``dwconv_nchwc`` after ``alter_conv_layout``),
a ReLU6 and a 1x1 conv. Run apart, the depthwise conv writes its whole output (6x the
block's channels in MobileNetV2, up to 1.8 MB a layer) and the 1x1 conv reads it back:
its depthwise convs took 14% of the model's time for 2% of its multiply-adds. This pass
replaces each ``dwconv_nchwc -> clip | relu -> conv_nchwc`` chain whose 1x1 conv has
stride 1, no padding, one group and a bias, and whose two intermediates are read only by
the next node of the chain (and are no graph outputs), by one ``dwconv_pw_nchwc`` node
(``frontend/ops/layout.py``) named after the 1x1 conv. Its CPU schedule computes one
row of the depthwise output where the 1x1 conv reads it. A residual add after the 1x1
conv stays an epilogue (``fuse_ops``). Anything else is left as it was.

Only where the depthwise output is at least :data:`MIN_BYTES`: the fused kernel runs in
parallel over output rows alone and reads the 1x1 conv's weights once per row, which
costs more than the saved round trip once that output stays in the L2 anyway. Profiled
in MobileNetV2 at two threads (the pair apart -> fused, ms): 32 channels at 112x112
0.136 -> 0.115, 96 at 56x56 (stride 2) 0.185 -> 0.161, 144 at 56x56 0.233 -> 0.177;
at 28x28 (0.45-0.6 MB) within 0.003; 384-576 channels at 14x14 0.060 -> 0.065, 0.120 ->
0.131; 960 at 7x7 0.085 -> 0.111 and 0.193 -> 0.214.
"""

from __future__ import annotations

from ember.frontend.graph import Graph, Node, merged_labels
from ember.frontend.passes.chain_fusion import Readers, fuse_chains
from ember.frontend.passes.graph_pass import graph_pass

MIN_BYTES = 1 << 20  # the depthwise output's size from which fusing pays (module notes)


def clip_bounds(node: Node) -> tuple[float | None, float | None]:
    """The bounds clip or ReLU ``node`` applies."""
    if node.op == "relu":
        return 0.0, None
    return node.attrs.get("min"), node.attrs.get("max")


def is_pointwise_conv(node: Node, graph: Graph) -> bool:
    """A blocked 1x1 conv of stride 1, no padding, one group, with a bias."""
    if node.op != "conv_nchwc" or len(node.inputs) != 3 or node.attrs.get("groups", 1) != 1:
        return False
    a = node.attrs
    if tuple(a["strides"]) != (1, 1) or any(a["pads"]) or tuple(a["dilations"]) != (1, 1):
        return False
    w = graph.values[node.inputs[1]].type.shape
    return len(w) == 6 and tuple(w[2:4]) == (1, 1)


def _chain(readers: Readers, conv: Node) -> tuple[Node, Node, Node] | None:
    """The depthwise conv, the clip and 1x1 ``conv``, where they form the chain."""
    graph = readers.graph
    if not is_pointwise_conv(conv, graph):
        return None
    clip = readers.sole_producer(conv.inputs[0], ("clip", "relu"))
    if clip is None:
        return None
    dw = readers.sole_producer(clip.inputs[0], ("dwconv_nchwc",))
    if dw is None or len(dw.inputs) != 3:
        return None
    out = graph.values[dw.outputs[0]].type
    if not out.is_static or out.nbytes < MIN_BYTES:
        return None
    return dw, clip, conv


def _fuse(dw: Node, clip: Node, conv: Node) -> Node:
    lo, hi = clip_bounds(clip)
    a = dw.attrs
    attrs = {
        "strides": a["strides"], "pads": a["pads"], "dilations": a["dilations"],
        "channels": a["channels"], "min": lo, "max": hi, "out_channels": conv.attrs["channels"],
    }  # fmt: skip
    return Node(
        "dwconv_pw_nchwc", conv.name, (*dw.inputs, *conv.inputs[1:]), conv.outputs, attrs,
        conv.op_type, absorbed=(*merged_labels([dw, clip]), *conv.absorbed),
    )  # fmt: skip


@graph_pass
def fuse_dw_pointwise(graph: Graph) -> Graph:
    """Runs the pass on ``graph`` (see the module notes), one chain at a time."""
    return fuse_chains(graph, _chain, _fuse)


__all__ = ["clip_bounds", "fuse_dw_pointwise", "is_pointwise_conv"]
