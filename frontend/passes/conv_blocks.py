"""Which convolutions the layout pass blocks, on which channel blocks, and which ops
read blocked tensors lane for lane (:mod:`.alter_conv_layout` rewrites the graph by these
rules; the CPU backend's record-reading chooser, ``codegen_llvm/conv_layout.py``, starts
from :func:`default_blocks`)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from ember.frontend.graph import Graph, Node, TensorType
from ember.tir.topi.workload import Conv2DWorkload

IMAGE_CHANNELS = 4  # at most this many input channels (gray, RGB, RGBA): blocks of one
# unary ops that keep the zero lanes past the channel count finite (they are never read)
FINITE_AT_ZERO = frozenset({"relu", "leaky_relu", "sigmoid", "tanh", "exp", "copy", "clip"})
LANEWISE_BINARY = frozenset({"add", "subtract", "multiply"})
# variadic ops, lane-wise too (ONNX Sum is the residual add of Caffe2-exported ResNets)
LANEWISE_VARIADIC = frozenset({"sum", "max", "min", "mean"})


ConvWorkload = Conv2DWorkload  # the conv templates' workload (``tir/topi/workload.py``)


def target_backend() -> Any:
    """The backend of the CPU target in scope (the host's outside any ``with target:``),
    which the layout and packing passes ask for register sizes: blocks, panels and the
    templates' register tiles are sized by the same registers."""
    from ember.backend import get_backend
    from ember.target import Target

    t = Target.current()
    return get_backend(t if t is not None and t.info.is_host else "llvm")


def target_lanes() -> int:
    """float32 lanes of one vector register of the CPU target in scope (16 with AVX-512, 8
    with AVX2)."""
    return int(target_backend().vector_lanes("float32"))


BlockChooser = Callable[[ConvWorkload, "int | None", "int | None"], "tuple[int, int] | None"]


def channel_block(channels: int, lanes: int | None = None) -> int:
    """The default block of ``channels`` (the ``conv2d_NCHWc.llvm`` template's too): two
    registers' ``lanes``, one, or half of one, whichever divides them first (two registers
    of output channels halve the input broadcasts per multiply-add); else all of them
    below one register; else one register, the last block zero-padded. Half a register
    is taken only below eight registers of channels: above, padding costs under 1/16
    of the work where half-width vectors cost up to half (SqueezeNet's 1,000-channel
    classifier conv ran 1.43x slower than onnxruntime's on blocks of 8)."""
    n = lanes or target_lanes()
    for b in (2 * n, n, n // 2):
        if b and channels % b == 0 and (b >= n or channels < 8 * n):
            return b
    return channels if channels < n else n


def input_block(channels: int, lanes: int | None = None) -> int:
    """The default block of a conv's NCHW input: one channel for an image's few channels
    (:data:`IMAGE_CHANNELS`), whose blocked layout ``[N, C, H, W, 1]`` is NCHW itself, so
    the input is blocked by a reshape rather than a transpose and the micro-kernel reads
    each channel's plane; else :func:`channel_block`. MobileNetV2's RGB stem at two
    threads: the input's transform 0.073 ms against the reshape's 0.030, the conv 0.153
    against 0.129 ms (the whole model 1-2% faster, by turns)."""
    return 1 if channels <= IMAGE_CHANNELS else channel_block(channels, lanes)


def default_blocks(
    w: ConvWorkload, in_block: int | None = None, want: int | None = None
) -> tuple[int, int] | None:
    """The measured rule: block every conv with at least one register of output
    channels (below that the vector lanes would run mostly empty); the input's block
    where it has one. ``want`` is not used: the defaults depend on the channel counts
    alone, so one value's blocks agree wherever it is added to another."""
    if w.O < target_lanes():
        return None
    return in_block or input_block(w.C), channel_block(w.O)


def conv_workload(node: Node, graph: Graph) -> ConvWorkload | None:
    """The node's workload if it is a conv this pass may rewrite."""
    if node.op != "conv" or node.attrs.get("group") != 1 or node.inputs[1] not in graph.params:
        return None
    x = graph.values[node.inputs[0]].type
    w = graph.params[node.inputs[1]]
    if x.dtype != "float32" or x.ndim != 4 or not x.is_static or w.ndim != 4:
        return None
    if len(node.inputs) > 2 and node.inputs[2] not in graph.params:
        return None
    a = node.attrs
    N, C, H, W = x.shape
    return ConvWorkload(N, C, H, W, w.shape[0], w.shape[2], w.shape[3],  # type: ignore[arg-type]
                        tuple(a["strides"]), tuple(a["pads"]), tuple(a["dilations"]))  # fmt: skip


def constant_conv(node: Node, graph: Graph) -> tuple[TensorType, np.ndarray] | None:
    """``(input type, weights)`` of a float32 2-D conv with constant weights (and bias) on a
    static input; None for any other node."""
    if node.op != "conv" or node.inputs[1] not in graph.params:
        return None
    if len(node.inputs) > 2 and node.inputs[2] not in graph.params:
        return None
    x, w = graph.values[node.inputs[0]].type, graph.params[node.inputs[1]]
    if x.dtype != "float32" or x.ndim != 4 or not x.is_static or w.ndim != 4:
        return None
    return x, w


def grouped_count(node: Node, graph: Graph) -> int | None:
    """The group count of a float32 2-D grouped conv with constant weights that is neither
    one group nor depthwise; None for any other node."""
    conv = constant_conv(node, graph)
    g = node.attrs.get("group", 1) if conv is not None else 1
    if conv is None or g == 1 or is_depthwise(node, graph):
        return None
    x, w = conv
    return g if w.shape[0] % g == 0 and x.shape[1] == w.shape[1] * g else None


def dividing(channels: int, first: int | None) -> int | None:
    """A block dividing a group's ``channels``: ``first`` where it does, else two registers'
    lanes, one, or half of one; None where none does."""
    n = target_lanes()
    for b in (first, 2 * n, n, n // 2):
        if b is not None and channels % b == 0:
            return b
    return None


def is_pointwise(w_shape: Any, attrs: dict[str, Any]) -> bool:
    """A 1x1 conv (weights ``[O, C/g, 1, 1]``) with unit strides and dilations and no
    padding: a product of channels at each pixel."""
    ones = all(int(v) == 1 for v in (*w_shape[2:], *attrs["strides"], *attrs["dilations"]))
    return ones and not any(int(p) for p in attrs["pads"])


def lanewise_nary(node: Node) -> bool:
    """A binary or variadic op of several operands that reads them lane for lane."""
    if node.op in LANEWISE_BINARY:
        return len(node.inputs) == 2
    return node.op in LANEWISE_VARIADIC and len(node.inputs) >= 2


def is_depthwise(node: Node, graph: Graph) -> bool:
    """A float32 2-D depthwise conv with constant weights: one input channel per group and
    one filter per channel (channel multiplier 1)."""
    conv = constant_conv(node, graph)
    if conv is None:
        return False
    x, w = conv
    c = x.shape[1]
    return node.attrs.get("group") == c and w.shape[:2] == (c, 1)
