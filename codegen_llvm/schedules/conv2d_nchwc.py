"""CPU template ``conv2d_NCHWc.llvm``: direct convolution on channel-blocked tensors.

The input is ``[N, C/cb, H, W, cb]``, the weights ``[O/ob, C/cb, KH, KW, cb, ob]``
and the output ``[N, O/ob, OH, OW, ob]`` (``tir/topi/conv_nchwc.py``). With the
output-channel block innermost, the micro-kernel is an outer product: for each
input channel and kernel tap, one ``ob``-wide vector of weights (unit stride) is
multiplied by ``ow_bn`` broadcast input pixels into an ``ow_bn x ob`` tile of
accumulators held in registers (``ow_bn`` unrolled, ``ob`` vectorized). No row is
too short to vectorize, whatever the image width, and no padding columns are
computed: what limits the NCHW template (``conv2d.py``) in late layers. The loop
over (batch, channel block, output row) runs in parallel; any elementwise epilogue
(bias, ReLU, a residual add) is inlined into the output stage, written from
registers. This is TVM's x86 ``conv2d_NCHWc`` and AlterOpLayout pairing; the graph
pass ``alter_conv_layout`` chooses the blocks with :func:`nchwc_knobs`.

Knobs: ``ic_bn`` / ``oc_bn`` (the layout: channel blocks, zero-padded past C and
O), ``ow_bn`` (the register tile's width), ``unroll_kernel`` or ``unroll_ic`` (the
taps or a channel block's input channels unrolled in the micro-kernel) and ``outer``: whether
output rows or channel blocks are the outer half of the parallel loop, or
``"reduction"``, where each thread takes whole channel blocks and walks the input
channel blocks outermost, accumulating the block's whole output plane in a local
tile, so each weight is read from memory once rather than once per output row (the
default over a small plane for weights of 8 L2s or more where the L3 is near, of more
than 1 MiB elsewhere, see ``_define_knobs``).
``prefetch`` hints the next input channel block's weights at each block of the
micro-kernel, all at once (``next_ic_block``) or dealt out over the block's kernel rows
(``next_ic_block_spread``, a few lines per row, into L2), or the next parallel
iteration's weights (``next_oc_block``). All at once ran 1-13% slower on ResNet-18's 3x3
layers (the burst of hints stalls the loads behind it) and 1-3% slower on ResNet-50's
1x1 convs at 14x14. Spread is the default where the whole plane is the register tile
(``outer == "reduction"``), where each weight line is used once per block and the
hardware prefetchers lose the stream at every kernel row: on a 2-core Intel Xeon
(AVX-512) at 2 threads with weights cold, a 512->512 3x3 conv at 7x7 ran 1.17 -> 0.90 ms
and a 256->256 one at 14x14 0.87 -> 0.79 ms; warm, within 1%. On the rows and channels
schedules it ran ResNet-18 3% slower, so they stay without.
``flat`` (pointwise convs only:
1x1, stride 1, no padding) computes the plane as one axis of ``OH * OW`` pixels, so
``ow_bn`` tiles run across row ends like a GEMM's row tiles: a 14-pixel row held tiles of
7 pixels and 14 accumulators, where flat tiles of 12 hold 24 and reuse each weight
vector 12 times. Default where a row's tiles leave accumulators unused (and with the
block's input channels unrolled where there are several blocks). On a 2-core Intel
Xeon (AVX-512), ResNet-50's 1x1 convs at 14x14 with their weights cold from memory ran
0.49 -> 0.43 ms alone at 2 threads (0.90 -> 0.82 at 1), 0.41 -> 0.36 ms in the model;
``benchmarks/profile_layers.py --model resnet50 --threads 2`` put them at 0.72-0.78x
onnxruntime's node time before, 0.81-0.86x after, and the 28x28 ones reading 512
channels 1.02-1.10x -> 1.13-1.20x. Rows of 56 fill the tile already (8 pixels, 16
accumulators) and ran 2-7% slower flat; a single unrolled block of input channels
(32 channels in) 1.5x slower. The template is
called with the NCHW workload, like ``conv2d_nchw.llvm``, so a tuning record of
either applies to the same convolution.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from ember.codegen_llvm.cpu_features import (
    FMA_CHAINS,
    l2_bytes,
    near_last_level_cache,
    vector_unit,
)
from ember.codegen_llvm.schedules.conv2d import Padding, _Geometry, geometry
from ember.errors import InternalError
from ember.frontend.passes.conv_blocks import channel_block, input_block
from ember.tir import dtype as dt
from ember.tir.schedule.schedule import Schedule, create_schedule
from ember.tir.stmt import ForKind
from ember.tir.te import operation as te
from ember.tir.te.tensor import ComputeOp, Tensor
from ember.tir.topi.conv_nchwc import blocks, conv2d_nchwc, is_pointwise
from ember.tir.topi.workload import Conv2DWorkload
from ember.tuner.template import get_config, template, using_config

TEMPLATE = "conv2d_NCHWc.llvm"
SMALL_PLANE = 32 << 10  # bytes of a channel block's output plane: in L1
# over a small plane where the L3 is near, read each weight once from this many times the
# core's L2 (8 MB on Zen 4's 1 MB, 4 MB on Zen 3's 512 KB: see _outer_default)
REDUCTION_OUTER_L2S = 8
# the same for a conv with a kernel window (3x3 ...) on a core with a small L2 (at most
# SMALL_L2): from 2 L2s (1 MB on Zen 3; see _outer_default)
WINDOW_REDUCTION_OUTER_L2S = 2
SMALL_L2 = 512 << 10
# input channels from which a stride-2 3x3 conv unrolls the block's channels, not its taps
STRIDED_UNROLL_IC_CHANNELS = 64
ROWS_OUTER_MAX_WEIGHTS = 1 << 20  # bytes: half the Intel guests' 2 MB L2, where it was measured
OW_TILES = (1, 2, 3, 4, 5, 6, 7, 8, 12, 14, 16, 28)
# A body beyond the decoded-instruction cache (about 4K micro-ops) is fetched through
# the slower legacy decoders: 2048 multiply-adds and their loads stay within it.
MAX_UNROLLED_FMAS = 2048
FEWER_TILES_CHANNELS = 16  # input channels from which equal-cost rows take fewer tiles
# a flat plane of at most this many pixels, with weights past half the L2, keeps the
# block's input channels a loop (see unroll_ic in _define_knobs)
STREAMED_PLANE_PIXELS = 64
PREFETCH = ("none", "next_ic_block", "next_oc_block", "next_ic_block_spread")


@dataclass(frozen=True)
class NchwcKnobs:
    """The NCHWc conv template's knob values, read once from the config so the schedule code
    takes plain fields instead of config look-ups."""

    ic_bn: int
    oc_bn: int
    ow_bn: int
    unroll_kernel: bool
    outer: str = "channels"
    unroll_ic: bool = False
    prefetch: str = "none"
    flat: bool = False


def _define_knobs(g: _Geometry, dtype: str) -> NchwcKnobs:
    cfg = get_config()
    unit = vector_unit()
    lanes = unit.lanes(dtype)
    most, default_acc = unit.accumulators
    ic_default, oc_default = input_block(g.C, lanes), channel_block(g.O, lanes)
    ics = sorted(
        {
            ic_default,
            channel_block(g.C, lanes),
            *(b for b in (4, 8, 16, 32, 64) if b <= max(g.C, 4)),
        }
    )
    ocs = sorted({oc_default, *(b for b in (8, 16, 32, 64) if b <= max(g.O, 8))})
    weight_bytes = g.O * g.C * g.KH * g.KW * dt.bytes_of(dtype)
    plane_bytes = g.OH * g.OW * oc_default * dt.bytes_of(dtype)
    outer_default = _outer_default(weight_bytes, plane_bytes, g.KH * g.KW > 1)
    regs_per_px = blocks(oc_default, lanes)
    # measured on the ResNet-18 layers: about 16 accumulator registers is the sweet spot
    fits = [t for t in OW_TILES if t <= g.OW and t * regs_per_px <= default_acc]
    ow_default = row_tile(g.OW, fits, regs_per_px, g.C)
    # A pointwise conv whose rows leave accumulators unused (rows of 7, 14 or 28 pixels
    # in tiles of 7) runs flat: GEMM-like tiles of pixels across row ends, with all the
    # accumulators and the block's input channels unrolled (see flat below).
    pointwise = is_pointwise(g.KH, g.KW, (g.sh, g.sw), _pads_of(g))
    flat_default = (
        pointwise and outer_default != "reduction" and ow_default * regs_per_px < default_acc
    )
    if flat_default:
        pixels = g.OH * g.OW
        fits = [t for t in OW_TILES if t <= pixels and t * regs_per_px <= most]
        ow_default = min(fits, key=lambda t: (row_cost(pixels, t, regs_per_px), -t))
        input_bytes = g.C * g.H * g.W * dt.bytes_of(dtype)
        outer_default = flat_outer_default(outer_default, weight_bytes, input_bytes)
    cfg.define_knob("ic_bn", ics, default=ic_default)
    cfg.define_knob("oc_bn", ocs, default=oc_default)
    widest = g.OH * g.OW if pointwise else g.OW
    cfg.define_knob("ow_bn", [t for t in OW_TILES if t <= widest], default=ow_default)
    # The micro-kernel's straight-line body: the kernel taps unrolled around a loop over
    # the block's input channels, or (unroll_ic) those channels unrolled inside a loop
    # over the taps, as onnxruntime's NCHWc kernel is written. Timed by turns in one
    # process, the two ran ResNet-18 within 1% of each other; the taps stay the default,
    # which compiled ResNet-18 cold in 7.7 s against 12.7 s. Its 7x7 stem ran 2x faster
    # with its taps as loops (as in conv2d.py).
    # Flat, the channels unroll too, measured 3-17% faster on ResNet-50's 1x1 convs at 14x14
    # and 28x28 with weights cold; but a single block of input channels (a 32-channel
    # input) ran 1.5x slower unrolled whole.
    # A stride-2 3x3 conv over 64+ channels (ResNet's downsampling convs) unrolls the
    # channels, its taps as loops: in ResNet-18 on a Zen 3 guest at 2 threads (the
    # builds in one process by turns, 8 rounds, 7 processes) its three such convs ran
    # 2-7%, 1-5% and 2-10% faster than with the taps unrolled, and mostly faster at one
    # thread. Measured with 8-lane vectors (AVX2) only: AVX-512 keeps the taps unrolled.
    # Over a small plane (7x7) with weights past half the L2, each weight vector serves a
    # few tiles and streams in from L3 or memory; there the channels stay a loop: on a
    # Zen 4 guest at 2 threads, MobileNetV2's 160->960 conv at 7x7 (614 KB) alone with
    # its weights cold from memory ran 0.087 -> 0.080 ms (with L2 flushed, 0.066 either
    # way); by turns in the model (8 rounds, two builds each) its 160->960 convs 2-3%
    # faster, 320->1280 3%, 960->160 1% slower, the model 0.3% faster; ResNet-50's 1x1
    # convs at 7x7 1-4% faster, the model 0.4%.
    strided = (g.sh, g.sw) == (2, 2) and (g.KH, g.KW) == (3, 3)
    channels_unrolled = strided and g.C >= STRIDED_UNROLL_IC_CHANNELS and lanes <= 8
    streamed = g.OH * g.OW <= STREAMED_PLANE_PIXELS and weight_bytes > l2_bytes() // 2
    flat_unrolled = flat_default and g.C > ic_default and not streamed
    cfg.define_knob("unroll_ic", [False, True], default=flat_unrolled or channels_unrolled)
    cfg.define_knob(
        "unroll_kernel", [True, False], default=g.KH * g.KW <= 9 and not channels_unrolled
    )
    cfg.define_knob("outer", ["channels", "rows", "reduction"], default=outer_default)
    # prefetch (Stage.prefetch, llvm.prefetch): "next_ic_block" hints, at each input
    # channel block of the micro-kernel, the next block's weights ("_spread": a share of
    # them at each kernel row); "next_oc_block", at each iteration of the parallel loop,
    # the weights the next iteration's channel block reads.
    cfg.define_knob(
        "prefetch",
        list(PREFETCH),
        default="next_ic_block_spread" if outer_default == "reduction" else "none",
    )
    cfg.define_knob("flat", [False, True] if pointwise else [False], default=flat_default)
    cfg.add_constraint(
        lambda c: not (_val(c, "flat") and _val(c, "outer") == "reduction"),
        "a flat pixel axis has no whole-plane (reduction outer) schedule",
    )
    cfg.add_constraint(
        lambda c: bool(_val(c, "flat") or _val(c, "ow_bn") <= g.OW),
        "a register tile within one output row",
    )
    cfg.add_constraint(
        lambda c: c["ow_bn"].val * blocks(c["oc_bn"].val, lanes) <= most,
        "the accumulator tile fits the vector registers",
    )
    cfg.add_constraint(
        lambda c: unrolled_fmas(g, c, lanes) <= MAX_UNROLLED_FMAS,
        f"the unrolled micro-kernel has at most {MAX_UNROLLED_FMAS} multiply-adds",
    )
    return NchwcKnobs(
        cfg["ic_bn"].val,
        cfg["oc_bn"].val,
        cfg["ow_bn"].val,
        cfg["unroll_kernel"].val,
        cfg["outer"].val,
        cfg["unroll_ic"].val,
        cfg["prefetch"].val,
        cfg["flat"].val,
    )


def _val(c: Any, knob: str) -> Any:
    """Knob ``knob``'s value in config ``c`` (for the constraints)."""
    return c[knob].val


def _outer_default(weight_bytes: int, plane_bytes: int, window: bool = False) -> str:
    """The ``outer`` knob's default for weights of ``weight_bytes`` over a channel block's
    output plane of ``plane_bytes``; ``window``: the kernel is larger than 1x1."""
    # Which half of the parallel loop (batch, output row, channel block) is outer. Rows
    # outer keep each thread on the same rows from layer to layer (a layer's input is
    # then in the reading core's own L2, where a channel split leaves half of it in the
    # other core's) but re-read every channel block's weights per row: it paid on
    # ResNet-18's 64- and 128-channel layers (weights up to 590 KB) and cost up to 2.4x
    # on its 512-channel ones (9.4 MB), hence the default by the weights' size.
    # Reduction outer (input channel blocks outermost, the plane in a local tile) reads
    # each weight once. Over a small plane (a few rows, so rows outer reads the weights a
    # few times) it pays only for the largest weights: timed in the model by turns (each
    # build in a process of its own), rows outer ran MobileNetV2's 1x1 convs at 7x7
    # (1.2-1.6 MB) 10-18% faster at 1 and 2 threads, ResNet-50's 1x1 convs at 7x7 and
    # 14x14 (1-4 MB) 7-12%, ResNet-18's 3x3 256->512 conv at 7x7 (4.7 MB) 1-9%, its 3x3
    # 256-channel convs at 14x14 (2.4 MB, Winograd off) within 1%; its 512-channel ones
    # at 7x7 (9.4 MB, Winograd off) ran 3-6% faster with reduction outer. Those rows
    # re-read weights past L2 from Zen 4's near L3; where that cache is far
    # (near_last_level_cache), they come at memory speed and reduction outer takes
    # every weight past ROWS_OUTER_MAX_WEIGHTS over a small plane. On a 2-core Intel
    # Xeon (AVX-512), timed in the model by turns: ResNet-50 at 1 thread 63.1 -> 57.9
    # ms, its 1x1 convs at 7x7 (4 MB) 1.77 -> 0.88-0.95 ms each; MobileNetV2's 1x1
    # convs at 7x7 (1.2-1.6 MB) 16-23% faster at 2 threads. Its 3x3 convs at 14x14
    # (2.4 MB) ran 2-18% slower at 1 thread, level at 2. Where the L3 is near, the rows'
    # re-reads past L2 are what reduction outer saves, so its threshold scales with the
    # L2: Zen 4's measurements above had 1 MB; on a Zen 3 guest (512 KB), ResNet-18's
    # 256->512 stride-2 conv at 7x7 (4.7 MB) ran 1.32 -> 0.95 ms in the model with
    # reduction outer (median of 6 rounds by turns, 2 threads; faster in every round),
    # and ResNet-50's 4 MB 1x1 convs at 7x7 alone within noise either way. On that 512 KB
    # L2 a conv with a kernel window takes reduction outer from 2 L2s: ResNet-18's
    # 128->256 stride-2 3x3 conv at 14x14 (1.2 MB) ran 6-11% faster in the model (the
    # builds in one process by turns, 8 rounds, in each of 7 processes), and the 3x3 convs
    # the rule moves in ResNet-50, Inception v1/v2 and AlexNet (1-4 MB over planes up to
    # 14x14) 2-33%, each model faster. Zen 4's 1 MB L2 keeps 8 (its 4.7 MB 3x3 conv ran
    # faster with rows, its 2.4 MB ones level); so do 1x1 convs, which over a small plane
    # run flat (see flat below), a schedule reduction outer would rule out.
    near, l2 = near_last_level_cache(), l2_bytes()
    small_l2_window = window and l2 <= SMALL_L2
    l2s = WINDOW_REDUCTION_OUTER_L2S if small_l2_window else REDUCTION_OUTER_L2S
    reduction_from = l2s * l2 if near else ROWS_OUTER_MAX_WEIGHTS
    if weight_bytes <= ROWS_OUTER_MAX_WEIGHTS:
        return "rows"
    if plane_bytes > SMALL_PLANE:
        return "channels"
    return "rows" if weight_bytes < reduction_from else "reduction"


def flat_outer_default(outer: str, weight_bytes: int, input_bytes: int) -> str:
    """The ``outer`` default of a flat pointwise conv whose weights (``weight_bytes``) and
    input (``input_bytes``) are that large, ``outer`` the default by the weights alone.

    Rows outer reads every channel block's weights once per pixel tile (5-12 pixels), so
    weights past the core's L2 come from L3 at each tile, while channels outer reads
    them once and re-reads the input per channel block, cheap while the input stays in
    L2. The byte rule of :func:`_outer_default` was measured on 2 MB of L2; on a Zen 3
    guest (512 KB) MobileNetV2's 1x1 convs at 7x7 ran faster with channels outer, each
    kernel alone at 2 threads with L2 flushed, ms (rows -> channels, three rounds):
    320->1280 (1.6 MB) 0.30-0.41 -> 0.25-0.27, 960->320 0.21-0.30 -> 0.18-0.24, 960->160
    and 160->960 (614 KB) 0.12-0.19 -> 0.10-0.17; 576->96 at 14x14 (221 KB) was as fast
    or faster in rows, which it keeps."""
    half_l2 = l2_bytes() // 2
    if outer == "rows" and weight_bytes > half_l2 and input_bytes <= half_l2:
        return "channels"
    return outer


def row_tile(ow: int, fits: list[int], regs_per_px: int, channels: int) -> int:
    """The default ``ow_bn`` among the tiles that ``fits``: the least :func:`row_cost`.
    Where tiles cost the same multiply-add slots (rows of 28 in 4 x 7 or 6 x 4 + 4, on
    AVX2's 2-register pixels), the fewer tiles win when many input channels run
    through them, each tile loading every weight vector once per channel and tap: on a
    Zen 3 guest (AVX2) at 2 threads, alone with the L2 flushed, ResNet-18's stride-2 3x3
    convs to 28x28 ran 6-wide 4-7% faster than 4-wide (0.68 -> 0.64 ms, 0.82 -> 0.77
    with the weights cold from memory), a 128-channel 3x3 conv at 28x28 2% and the
    stride-2 1x1 one 3%. Over a 3-channel image (112-pixel rows: 4 x 28 or 6 x 18 + 4)
    the dividing tile ran 5% faster, so few channels keep it, and so do pixels of one
    register (AVX-512's 16-channel blocks, AVX2's 8), where this was not measured."""

    def key(t: int) -> tuple[int, ...]:
        cost, tiles = row_cost(ow, t, regs_per_px), -(-ow // t)
        if channels >= FEWER_TILES_CHANNELS and regs_per_px > 1:
            return (cost, tiles, ow % t, -t)
        return (cost, ow % t, -t)

    return min(fits, key=key)


def row_cost(ow: int, tile: int, regs_per_px: int, chains: int = FMA_CHAINS) -> int:
    """Cycles of multiply-adds, in units of one vector FMA, that tiling a row of ``ow``
    pixels by ``tile`` takes per input channel: a tile of ``a`` accumulators issues them in
    ``a`` slots but waits out the FMA latency below ``chains`` independent ones. The row's
    last tile is the remainder, so a row of 13 in tiles of 12 runs its last pixel alone,
    at an eighth of the speed; tiles of 8 and 5 (or 7 and 6) keep both busy. SqueezeNet's
    55-pixel rows ran in tiles of 5 (it divides 55), each waiting on its latency."""
    full, rest = divmod(ow, tile)
    cost = full * max(tile * regs_per_px, chains)
    return cost + (max(rest * regs_per_px, chains) if rest else 0)


def unrolled_fmas(g: _Geometry, c: Any, lanes: int) -> int:
    """Vector multiply-adds in the straight-line body of config ``c``'s micro-kernel."""
    taps = g.KH * g.KW if c["unroll_kernel"].val else 1
    channels = c["ic_bn"].val if c["unroll_ic"].val else 1
    return taps * channels * c["ow_bn"].val * blocks(c["oc_bn"].val, lanes)


def nchwc_knobs(g: _Geometry, dtype: str, cfg: Any) -> NchwcKnobs:
    """The knobs ``cfg`` (a recorded config of this template's task for ``g``, or a
    ``FallbackConfig``) chooses."""

    with using_config(cfg):
        return _define_knobs(g, dtype)


def nchwc_reference(X: np.ndarray, Wt: np.ndarray, workload: tuple[Any, ...]) -> np.ndarray:
    """The blocked output of the blocked ``X`` and ``Wt`` by numpy (the measurer's check,
    whatever channel blocks a config chose): unblocked to NCHW / OIHW with every lane,
    padded ones too, convolved tap by tap in float64, and blocked again."""
    g = geometry(Conv2DWorkload(*workload))
    N, CB, H, W, cb = X.shape
    OB, _, KH, KW, _, ob = Wt.shape
    x = X.transpose(0, 1, 4, 2, 3).reshape(N, CB * cb, H, W).astype(np.float64)
    w = Wt.transpose(0, 5, 1, 4, 2, 3).reshape(OB * ob, CB * cb, KH, KW).astype(np.float64)
    top, left, bottom, right = _pads_of(g)
    xp = np.pad(x, ((0, 0), (0, 0), (top, bottom), (left, right)))
    out = np.zeros((OB * ob, N, g.OH, g.OW))
    for ky in range(KH):
        for kx in range(KW):
            y0, x0 = ky * g.dh, kx * g.dw
            patch = xp[:, :, y0 : y0 + (g.OH - 1) * g.sh + 1 : g.sh,
                       x0 : x0 + (g.OW - 1) * g.sw + 1 : g.sw]  # fmt: skip
            out += np.tensordot(w[:, :, ky, kx], patch, axes=([1], [1]))
    return out.reshape(OB, ob, N, g.OH, g.OW).transpose(2, 0, 3, 4, 1).astype(X.dtype)


@template(TEMPLATE, version=4, reference=nchwc_reference)  # 2: unroll_ic, 3: prefetch, 4: flat
def conv2d_nchwc_llvm(
    N: int,
    C: int,
    H: int,
    W: int,
    O: int,
    KH: int,
    KW: int,
    stride: Any = 1,
    padding: Padding = 0,
    dilation: Any = 1,
    dtype: str = "float32",
) -> tuple[Schedule, list[Any]]:
    """The NCHW convolution ``(N, C, H, W) * (O, C, KH, KW)`` computed in NCHW[ic_bn]c
    with weights ``[O/oc_bn, C/ic_bn, KH, KW, ic_bn, oc_bn]``; the tensors are the blocked
    input, blocked weights and blocked output (lanes past C and O padded)."""
    g = geometry(Conv2DWorkload(N, C, H, W, O, KH, KW, stride, padding, dilation, dtype))
    k = _define_knobs(g, dtype)
    X = te.placeholder((N, blocks(C, k.ic_bn), H, W, k.ic_bn), dtype, name="X")
    Wt = te.placeholder(
        (blocks(O, k.oc_bn), blocks(C, k.ic_bn), KH, KW, k.ic_bn, k.oc_bn), dtype, name="W"
    )
    pads = _pads_of(g)
    out = conv2d_nchwc(X, Wt, None, (g.sh, g.sw), pads, (g.dh, g.dw), knob_attrs(k))
    s = create_schedule(out.op)
    reduction = out if _compute(out.op).tag == "conv2d_nchwc" else out.op.input_tensors[0]
    schedule_conv2d_nchwc(s, out, reduction)
    return s, [X, Wt, out]


def _pads_of(g: _Geometry) -> tuple[int, int, int, int]:
    """``(top, left, bottom, right)`` recovered from the geometry's output size."""
    pb = (g.OH - 1) * g.sh + g.dh * (g.KH - 1) + 1 - g.H - g.pt
    pr = (g.OW - 1) * g.sw + g.dw * (g.KW - 1) + 1 - g.W - g.pl
    return g.pt, g.pl, max(pb, 0), max(pr, 0)


def knob_attrs(k: NchwcKnobs) -> dict[str, Any]:
    """The schedule knobs as a compute's attrs (read back by :func:`schedule_conv2d_nchwc`)."""
    return {
        "ow_bn": k.ow_bn,
        "unroll_kernel": k.unroll_kernel,
        "outer": k.outer,
        "unroll_ic": k.unroll_ic,
        "prefetch": k.prefetch,
        "flat": k.flat,
    }


def blocked_output_tiles(s: Schedule, out: Tensor, conv: Tensor, ow_bn: int, outer: str) -> Tensor:
    """The output loops of a blocked convolution (this template's and the depthwise
    one's), the channel block's lanes vectorized, and ``conv``'s reduction moved to a
    local accumulator (returned); ``conv`` itself inlined into ``out`` when they differ.

    ``outer`` ``"rows"`` or ``"channels"``: the loop over (batch, row, channel block)
    parallel with that half outer, the accumulator computed at each ``ow_bn``-pixel tile
    of one row. ``"reduction"``: the loop over (batch, channel block) parallel, the
    accumulator holding the block's whole output plane (its tiles split by the caller).
    """
    acc = s.cache_write(conv, "local")
    if out.op is not conv.op:
        s[conv].compute_inline()
    n, o, y, x, lane = s[out].op.axis
    s[out].vectorize(lane)
    if outer == "reduction":
        block = s[out].fuse(n, o)
        s[out].parallel(block)
        s[acc].compute_at(s[out], block)
        return acc
    xo, xi = _row_tiles(s[out], x, ow_bn)
    if outer == "rows":
        s[out].reorder(n, y, o, xo, xi, lane)
        s[out].parallel(s[out].fuse(n, y, o))
    else:
        s[out].reorder(n, o, y, xo, xi, lane)
        s[out].parallel(s[out].fuse(n, o, y))
    s[acc].compute_at(s[out], xo)
    return acc


def _row_tiles(stage: Any, x: Any, ow_bn: int) -> tuple[Any, Any]:
    """``x`` split into ``ow_bn``-pixel register tiles (one tile when the row is shorter)."""
    return stage.split(x, factor=min(ow_bn, int(x.dom.extent.value)))


def _parallel_loop(stage: Any) -> Any:
    """The stage's parallel loop (``blocked_output_tiles`` made one)."""
    for iv in stage.leaf_iter_vars:
        attr = stage.iter_attrs.get(iv)
        if attr is not None and attr.kind is ForKind.PARALLEL:
            return iv
    raise InternalError(f"{stage}: no parallel loop to prefetch at")


def schedule_conv2d_nchwc(s: Schedule, out: Tensor, conv: Tensor) -> None:
    """Schedule the ``conv2d_nchwc`` reduction ``conv`` whose result reaches ``out``, a
    stage of the same 5-D shape into which the copy (and any elementwise epilogue) is
    inlined; ``out`` may be ``conv`` itself. Every other stage between them must have
    been inlined already."""
    attrs = dict(conv.op.attrs)
    if conv.ndim == 4:  # a pointwise conv over the plane as one pixel axis
        _schedule_pointwise_plane(s, out, conv, attrs)
        return
    unroll = bool(attrs.get("unroll_kernel", True))
    unroll_ic = bool(attrs.get("unroll_ic", False))
    pad = conv.op.input_tensors[0]
    outer = attrs.get("outer", "channels")
    ow_bn = int(attrs.get("ow_bn", 8))
    acc = blocked_output_tiles(s, out, conv, ow_bn, outer)
    _, _, ay, ax, ai = s[acc].op.axis
    rc, ry, rx, ri = s[acc].op.reduce_axis
    if outer == "reduction":  # input channel blocks outermost, then the plane's tiles
        xo, ax = _row_tiles(s[acc], ax, ow_bn)
        s[acc].reorder(rc, ay, xo, ry, rx, ri, ax, ai)
    else:
        s[acc].reorder(rc, ry, rx, ri, ax, ai)
    if unroll:
        s[acc].unroll(ry)
        s[acc].unroll(rx)
    if unroll_ic:
        s[acc].unroll(ri)
    _prefetch_weights(s, acc, out, conv, rc, _parallel_loop(s[out]), attrs, rx)
    s[acc].unroll(ax)
    s[acc].vectorize(ai)
    if getattr(pad.op, "tag", "") == "pad":
        pn, pc, ph, _, pi = s[pad].op.axis
        s[pad].vectorize(pi)
        if outer == "rows":  # each thread pads the rows it will read
            s[pad].reorder(pn, ph, pc)
            s[pad].parallel(s[pad].fuse(pn, ph, pc))
        else:
            s[pad].parallel(s[pad].fuse(pn, pc, ph))


def _schedule_pointwise_plane(s: Schedule, out: Tensor, conv: Tensor, attrs: dict) -> None:
    """``conv``, the ``[N, O/ob, H*W, ob]`` reduction of a pointwise convolution
    (``flat``), computed into ``out``'s rows and columns fused into one pixel axis: tiles
    of ``ow_bn`` pixels that run across row ends, like the row tiles of a GEMM, the loop
    over (batch, channel block, pixel tile) parallel with ``outer`` "rows" putting the
    pixel tiles outside the channel blocks."""
    tile = int(attrs.get("ow_bn", 8))
    acc = s.cache_write(conv, "local")
    s[conv].compute_inline()
    n, o, y, x, lane = _compute(s[out].op).axis
    s[out].vectorize(lane)
    po, pi = s[out].split(s[out].fuse(y, x), factor=tile)
    if attrs.get("outer", "channels") == "rows":
        s[out].reorder(n, po, o, pi, lane)
        block = s[out].fuse(n, po, o)
    else:
        s[out].reorder(n, o, po, pi, lane)
        block = s[out].fuse(n, o, po)
    s[out].parallel(block)
    s[acc].compute_at(s[out], block)
    _, _, ap, ai = _compute(s[acc].op).axis
    rc, ri = _compute(s[acc].op).reduce_axis
    s[acc].reorder(rc, ri, ap, ai)
    if attrs.get("unroll_ic", False):
        s[acc].unroll(ri)
    _prefetch_weights(s, acc, out, conv, rc, block, attrs, ri)
    s[acc].unroll(ap)
    s[acc].vectorize(ai)


def _prefetch_weights(
    s: Schedule,
    acc: Tensor,
    out: Tensor,
    conv: Tensor,
    rc: Any,
    block: Any,
    attrs: dict,
    inner: Any,
) -> None:
    """The ``prefetch`` knob: the next input channel block's weights at each block ``rc``
    of the micro-kernel (all at once, or dealt out over the iterations down to loop
    ``inner``), or the weights of the parallel loop's next iteration at ``block``."""
    weights = conv.op.input_tensors[1]
    prefetch = attrs.get("prefetch", "none")
    if prefetch == "next_ic_block":
        s[acc].prefetch(weights, rc, 1)
    elif prefetch == "next_oc_block":
        s[out].prefetch(weights, block, 1)
    elif prefetch == "next_ic_block_spread":
        s[acc].prefetch(weights, rc, 1, spread=inner, locality=2)


def _compute(op: Any) -> ComputeOp:
    """``op``, a stage's compute (a schedule's stages hold operations of any kind)."""
    if not isinstance(op, ComputeOp):
        raise InternalError(f"{op} is not a compute")
    return op
