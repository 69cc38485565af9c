"""CPU template ``depthwise_conv2d_NCHWc.llvm``: depthwise convolution on channel blocks.

The input is ``[N, C/cb, H, W, cb]``, the weights ``[C/cb, KH, KW, cb]`` and the
output ``[N, C/cb, OH, OW, cb]`` (``tir/topi/conv_nchwc.py``). Every vector lane is
its own channel, so a tap is one vector multiply-add per output pixel whatever the
stride or the image width: no flat grid, no phase split for strides, no padding
columns computed (what ``depthwise_conv2d.py`` needs in NCHW), and no padded copy:
a tap out of the image reads zero through a per-pixel test. A register tile is
``ow_bn`` pixels of one output row (unrolled, ``cb`` lanes each); the taps run
outside it and unrolled, so each weight vector is loaded once per tile. The loop
over (batch, output row, channel block) runs in parallel. Channel blocks are its outer
half by default where the output has at most ``CHANNELS_OUTER_MAX_ROWS`` (7) rows: a
thread then walks one block's plane row after row, and the three input rows a 3x3 tap
window reads stay in L1 from one output row to the next, where rows outer visits every
channel block between two rows of one. Taller outputs keep rows outer, where each thread
works on the rows the blocked convolutions around it worked on (``conv2d_nchwc.py``: their
pixel tiles are outer there, and the pool deals each core the same end of every loop,
``parallel.py``), so the depthwise conv reads its input from its own core's L2 and the
next conv its output. The bound was 28 rows (MobileNetV2's 28x28 and 14x14 convs channels
outer, measured on a Zen 3 guest, 20-40% faster); on a Zen 4 guest (1 MB L2) with the pool
taking parts from both ends, MobileNetV2 by turns in one process
(``benchmarks/model_variants.py``, 10 rounds, two builds of each) ran 1% faster at 2
threads with rows outer at 14x14 and 28x28 on a quiet host (3.105 -> 3.074 ms; the
384-channel convs at 14x14 0.0155 -> 0.0110 ms), 8% faster while the host was busy (4.22
-> 3.88 ms; the AVX2 build 4.46 -> 4.21), and 0.5% slower at 1 thread (5.94-5.98 -> 6.00).
At 7x7 (MobileNetV2's 960 channels) channels outer stayed faster (0.0111 against 0.0124
ms), as do the 1x1 convs around it there (channels outer: ``flat_outer_default``).
With this template the ``alter_conv_layout`` pass keeps a MobileNet blocked from its
first conv to its last, as TVM's x86 ``depthwise_conv2d_NCHWc`` and onnxruntime's NCHWc
kernels do.

Knobs: ``cb`` (the layout's channel block, zero-padded past C), ``ow_bn``,
``outer`` (``rows`` or ``channels``) and ``unroll_kernel``. The template is called
with the NCHW depthwise workload, like ``depthwise_conv2d_nchw.llvm`` (channel
multiplier 1).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from ember.codegen_llvm.cpu_features import VectorUnit, vector_unit
from ember.codegen_llvm.schedules.conv2d_nchwc import _pads_of, blocked_output_tiles
from ember.codegen_llvm.schedules.depthwise_conv2d import geometry
from ember.errors import ArgumentError
from ember.tir.schedule.schedule import Schedule, create_schedule
from ember.tir.te import operation as te
from ember.tir.te.tensor import Tensor
from ember.tir.topi.conv_nchwc import blocks, depthwise_conv2d_nchwc
from ember.tir.topi.workload import DepthwiseConv2DWorkload
from ember.tuner.template import get_config, template, using_config

TEMPLATE = "depthwise_conv2d_NCHWc.llvm"
TAG = "depthwise_conv2d_nchwc"
OW_TILES = (1, 2, 3, 4, 5, 6, 7, 8, 12, 14, 16, 24, 28)
CHANNELS_OUTER_MAX_ROWS = 7  # output rows up to which channel blocks are outer (module notes)


@dataclass(frozen=True)
class DepthwiseNchwcKnobs:
    """The depthwise NCHWc template's knob values, read once from the config for the schedule."""

    cb: int
    ow_bn: int
    outer: str
    unroll_kernel: bool


def channel_block(channels: int, lanes: int) -> int:
    """One register's lanes, or half of one, whichever divides ``channels``; else all
    of them below one register; else one register, zero-padded. (Two registers per
    pixel would halve the pixels a tile holds and gain nothing: a depthwise tap has no
    input to share between output channels.)"""
    for b in (lanes, lanes // 2):
        if b and channels % b == 0:
            return b
    return channels if channels < lanes else lanes


def default_row_tile(ow: int, regs: int, unit: VectorUnit) -> int:
    """Pixels of a row the default tile holds: the largest tile of at most half the
    accumulator registers that divides the row, if one of 4 or more does; else the whole
    row where it is a tile size and fits the default budget; else the largest of those
    tiles. MobileNetV2's 7-pixel rows on AVX2 (tiles of at most 6) ran 6 + a lone pixel:
    39 us for its 960 channels on one Zen 3 core, 15 in one tile of 7, the tile AVX-512
    already took."""
    fits = [t for t in OW_TILES if t <= ow and t * regs <= unit.accumulators[0] // 2]
    dividing = [t for t in fits if ow % t == 0]
    if dividing and max(dividing) >= 4:
        return max(dividing)
    if ow in OW_TILES and ow * regs <= unit.accumulators[1]:
        return ow
    return max(fits)


def _define_knobs(g: Any, dtype: str) -> DepthwiseNchwcKnobs:
    cfg = get_config()
    unit = vector_unit()
    lanes, most = unit.lanes(dtype), unit.accumulators[0]
    cb_default = channel_block(g.C, lanes)
    cbs = sorted({cb_default, *(b for b in (8, 16, 32) if b <= max(g.C, 8))})
    regs = blocks(cb_default, lanes)
    ow_default = default_row_tile(g.OW, regs, unit)
    cfg.define_knob("cb", cbs, default=cb_default)
    cfg.define_knob("ow_bn", [t for t in OW_TILES if t <= g.OW], default=ow_default)
    outer = "channels" if g.OH <= CHANNELS_OUTER_MAX_ROWS else "rows"
    cfg.define_knob("outer", ["rows", "channels"], default=outer)
    cfg.define_knob("unroll_kernel", [True, False], default=g.KH * g.KW <= 9)
    cfg.add_constraint(
        lambda c: c["ow_bn"].val * blocks(c["cb"].val, lanes) <= most,
        "the accumulator tile fits the vector registers",
    )
    return DepthwiseNchwcKnobs(
        cfg["cb"].val, cfg["ow_bn"].val, cfg["outer"].val, cfg["unroll_kernel"].val
    )


def depthwise_nchwc_knobs(g: Any, dtype: str, cfg: Any) -> DepthwiseNchwcKnobs:
    """The knobs ``cfg`` (a recorded config of this template's task for ``g``, or a
    ``FallbackConfig``) chooses."""

    with using_config(cfg):
        return _define_knobs(g, dtype)


def fit_block(k: DepthwiseNchwcKnobs, block: int, dtype: str) -> DepthwiseNchwcKnobs:
    """``k`` for a graph whose activations are blocked by ``block`` (the layout is the
    graph's, whatever block a record was tuned with): the tile narrowed until it fits
    the registers with ``block``'s lanes."""
    if block == k.cb:
        return k
    unit = vector_unit()
    regs = blocks(block, unit.lanes(dtype))
    return replace(k, cb=block, ow_bn=max(1, min(k.ow_bn, unit.accumulators[0] // regs)))


def knob_attrs(k: DepthwiseNchwcKnobs) -> dict[str, Any]:
    """The schedule knobs as a compute's attrs (read back by :func:`schedule_depthwise_nchwc`)."""
    return {"ow_bn": k.ow_bn, "outer": k.outer, "unroll_kernel": k.unroll_kernel}


@template(TEMPLATE)
def depthwise_conv2d_nchwc_llvm(
    N: int,
    C: int,
    H: int,
    W: int,
    multiplier: int,
    KH: int,
    KW: int,
    stride: Any = 1,
    padding: Any = 0,
    dilation: Any = 1,
    dtype: str = "float32",
) -> tuple[Schedule, list[Any]]:
    """The NCHW depthwise convolution ``(N, C, H, W) * (C, 1, KH, KW)`` computed in
    NCHW[cb]c with weights ``[C/cb, KH, KW, cb]``; the tensors are the blocked input,
    blocked weights and blocked output (lanes past C padded)."""
    if multiplier != 1:
        raise ArgumentError(f"{TEMPLATE}: only a channel multiplier of 1, got {multiplier!r}")
    g = geometry(DepthwiseConv2DWorkload(N, C, H, W, multiplier, KH, KW, stride, padding, dilation))
    k = _define_knobs(g, dtype)
    X = te.placeholder((N, blocks(C, k.cb), H, W, k.cb), dtype, name="X")
    Wt = te.placeholder((blocks(C, k.cb), KH, KW, k.cb), dtype, name="W")
    out = depthwise_conv2d_nchwc(
        X, Wt, None, (g.sh, g.sw), _pads_of(g), (g.dh, g.dw), knob_attrs(k)
    )
    s = create_schedule(out.op)
    schedule_depthwise_nchwc(s, out, out)
    return s, [X, Wt, out]


def schedule_depthwise_nchwc(s: Schedule, out: Tensor, conv: Tensor) -> None:
    """Schedule the ``depthwise_conv2d_nchwc`` reduction ``conv`` whose result reaches
    ``out``, a stage of the same 5-D shape into which the copy (and any elementwise
    epilogue) is inlined; ``out`` may be ``conv`` itself. Every other stage between
    them must have been inlined already."""
    attrs = dict(conv.op.attrs)
    unroll = bool(attrs.get("unroll_kernel", True))
    pad = conv.op.input_tensors[0]
    acc = blocked_output_tiles(s, out, conv, int(attrs.get("ow_bn", 7)), attrs.get("outer", "rows"))
    _, _, _, ax, ai = s[acc].op.axis
    ry, rx = s[acc].op.reduce_axis
    s[acc].reorder(ry, rx, ax, ai)
    if unroll:
        s[acc].unroll(ry)
        s[acc].unroll(rx)
    s[acc].unroll(ax)
    s[acc].vectorize(ai)
    if getattr(pad.op, "tag", "") == "pad":
        # The taps read the input through the padding test: a padded copy would be one
        # more pass over memory for an operation that is memory-bound (MobileNetV2's
        # 144-channel layer at 56x56, one thread: 0.26 ms with the copy, 0.13 inlined).
        # The test is one scalar compare per tap and pixel, shared by the lanes.
        s[pad].compute_inline()
