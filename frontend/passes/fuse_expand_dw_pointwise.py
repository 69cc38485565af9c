"""A MobileNet's inverted residual block becomes one node: the 1x1 expand conv, its clip
and the ``dwconv_pw_nchwc`` after them.

After ``fuse_dw_pointwise`` the large blocks of MobileNetV2 still write their expanded
tensor (6x the block's channels at the block's input resolution: 4.8 MB for 96 channels
at 112x112, 1.8 MB for 144 at 56x56) and read it back in the depthwise conv. This pass
replaces each ``conv_nchwc -> clip | relu -> dwconv_pw_nchwc`` chain whose conv is 1x1,
stride 1, unpadded, ungrouped, with a bias, and whose two intermediates are read only by
the next node of the chain (and are no graph outputs), by one ``expand_dwconv_pw_nchwc``
node (``frontend/ops/layout.py``) named after the 1x1 projection. Its CPU schedule
(``codegen_llvm/schedules/expand_dw_pointwise_nchwc.py``) computes the expanded rows a
band of output rows reads, a channel block at a time, where the depthwise conv reads them.

Only where the expanded tensor is at least :data:`MIN_BYTES`: a band recomputes the
expanded rows its neighbours read too (two of every nine at stride 1), which costs more
than the saved round trip once the tensor stays in the L2. Timed alone at two threads on
a Zen 3 guest, the graph's kernels apart against the fused one (ms, L2 flushed, medians
of 7 rounds by turns): 16 -> 96 -> 24 channels at 112x112, stride 2: 0.26 + 0.24 -> 0.40;
24 -> 144 -> 24 at 56x56: 0.13 + 0.32 -> 0.40; but 24 -> 144 -> 32 at 56x56, stride 2
(whose small depthwise output ``fuse_dw_pointwise`` leaves apart) 0.22 -> 0.24, and 32 ->
192 -> 32 at 28x28 0.21 -> 0.23.
"""

from __future__ import annotations

from ember.frontend.graph import Graph, Node, merged_labels
from ember.frontend.passes.chain_fusion import Readers, fuse_chains
from ember.frontend.passes.fuse_dw_pointwise import clip_bounds, is_pointwise_conv
from ember.frontend.passes.graph_pass import graph_pass

MIN_BYTES = 3 << 19  # 1.5 MB: the expanded tensor's size from which fusing pays (notes)


def _chain(readers: Readers, block: Node) -> tuple[Node, Node, Node] | None:
    """The expand conv, its clip and ``block`` (a ``dwconv_pw_nchwc``), where they form
    the chain."""
    if block.op != "dwconv_pw_nchwc":
        return None
    clip = readers.sole_producer(block.inputs[0], ("clip", "relu"))
    if clip is None:
        return None
    conv = readers.sole_producer(clip.inputs[0], ("conv_nchwc",))
    if conv is None or not is_pointwise_conv(conv, readers.graph):
        return None
    expanded = readers.graph.values[conv.outputs[0]].type
    if not expanded.is_static or expanded.nbytes < MIN_BYTES:
        return None
    return conv, clip, block


def _fuse(conv: Node, clip: Node, block: Node) -> Node:
    lo, hi = clip_bounds(clip)
    attrs = {**block.attrs, "in_channels": conv.attrs["in_channels"], "expand_min": lo,
             "expand_max": hi}  # fmt: skip
    return Node(
        "expand_dwconv_pw_nchwc", block.name, (*conv.inputs, *block.inputs[1:]),
        block.outputs, attrs, block.op_type,
        absorbed=(*merged_labels([conv, clip]), *block.absorbed),
    )  # fmt: skip


@graph_pass
def fuse_expand_dw_pointwise(graph: Graph) -> Graph:
    """Runs the pass on ``graph`` (see the module notes), one chain at a time."""
    return fuse_chains(graph, _chain, _fuse)


__all__ = ["fuse_expand_dw_pointwise"]
