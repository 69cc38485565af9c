"""The CPU strategies of convolutions: which template takes a conv node, and its task.

Convolutions try Winograd first, then the direct template (see :func:`choose_conv_task`:
a tuning record decides, else a size rule), then the depthwise one and the grouped 1x1
GEMMs; blocked ``conv_nchwc`` / ``dwconv_nchwc`` nodes (made by the layout pass) run the
NCHWc templates with the blocks the graph gives them, which their tasks hold fixed.
``codegen_llvm/strategy.py`` puts these computes and tasks in the CPU strategy table.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from typing import Any

from ember.codegen_llvm.cpu_features import near_last_level_cache
from ember.codegen_llvm.schedules import (
    conv2d,
    conv2d_nchwc,
    depthwise_conv2d,
    depthwise_conv2d_nchwc,
    expand_dw_pointwise_nchwc,
    grouped_pointwise,
    winograd,
    winograd_nchwc,
)
from ember.frontend.ops.layout import conv_winograd_nchwc
from ember.tir.topi.conv_nchwc import conv2d_nchwc as nchwc_compute
from ember.tir.topi.conv_nchwc import depthwise_conv2d_nchwc as dw_nchwc_compute
from ember.tir.topi.conv_nchwc import depthwise_pointwise_nchwc as dw_pw_compute
from ember.tir.topi.conv_nchwc import expand_depthwise_pointwise_nchwc as expand_dw_pw_compute
from ember.tir.topi.workload import Conv2DWorkload, DepthwiseConv2DWorkload
from ember.tuner.space import FallbackConfig
from ember.tuner.template import config_for_direct_call, using_config

CONV_TEMPLATE = "conv2d_nchw.llvm"
NCHWC_TEMPLATE = conv2d_nchwc.TEMPLATE
DEPTHWISE_TEMPLATE = depthwise_conv2d.TEMPLATE
DEPTHWISE_NCHWC_TEMPLATE = depthwise_conv2d_nchwc.TEMPLATE
WINOGRAD_TEMPLATE = "conv2d_winograd.llvm"
WINOGRAD_NCHWC_TEMPLATE = winograd_nchwc.TEMPLATE  # the blocked kernel a graph runs
# Winograd by default where both channel counts and the output's height and width reach
# these (3x3, stride 1, no dilation). benchmarks/bench_conv.py on ResNet-18's layers
# (1 thread, fallback configs, vs the direct template's fallback): 64ch at 56x56 3.7x,
# 128ch at 28x28 5.5x, 256ch at 14x14 0.98x, 512ch at 7x7 0.24x. The weight transform
# runs in the kernel, so on small images it (C * O * 36 values) outweighs the saving.
WINOGRAD_MIN_CHANNELS = 32
WINOGRAD_MIN_SIZE = 16
# Blocked convolutions (a graph's, weights transformed at compile time) gain down to 7x7:
# ResNet-18 at 2 threads (benchmarks/profile_layers.py), onnxruntime's node time over
# Ember's: 256ch at 14x14 1.53-1.81 (direct 0.95-0.99), 512ch at 7x7 1.18-1.52 (direct
# 1.08-1.15).
WINOGRAD_MIN_SIZE_BLOCKED = 7
# ... except below WINOGRAD_MIN_SIZE for weights of this many bytes or more, where the direct
# template reads each weight once (reduction outer, the next block's weights prefetched)
# and Winograd's transformed weights are 1.8-4x as many bytes, read from memory. On a
# 2-core Intel Xeon (AVX-512), each build timed in the model by turns (2026-12-03):
# ResNet-18's 512-channel convs at 7x7 (9.4 MB) ran 0.96-1.17 ms on Winograd, 0.76-1.0
# direct at 2 threads (2.0-2.4 against 1.5-2.0 ms at 1), the model 10.2-11.5 -> 9.7-11.0
# ms at 2 threads and 20.6-22.0 -> 18.1-18.9 at 1; ResNet-50 at 2 threads 26.0-28.1 ->
# 26.0-27.1. Smaller weights at 7x7 stay on Winograd: with DenseNet-121's (147 KB) and
# Inception v1's (up to 2.7 MB) direct, those models ran 1-10% slower. Where the L3 is
# near (AMD's Zen, ``near_last_level_cache``), the transformed weights come from its 32 MB
# at near-L2 speed and the rule does not apply: on a Zen 3 guest, ResNet-18's 512-channel
# convs at 7x7 ran 1.40 ms direct, 1.13 on Winograd, each (2 threads, 5 rounds by turns,
# faster in every round; 2026-12-04).
WINOGRAD_SMALL_PLANE_MAX_WEIGHTS = 8 << 20


def conv_task_args(
    x_shape: Sequence[int],
    x_dtype: str,
    w_shape: Sequence[int],
    w_dtype: str,
    attrs: dict[str, Any],
) -> tuple[Any, ...] | None:
    """The ``conv2d_nchw.llvm`` arguments of a convolution, or None where the template
    does not take it (not 2-D NCHW, grouped, not float32)."""
    if len(x_shape) != 4 or attrs["group"] != 1 or x_dtype != "float32" or w_dtype != "float32":
        return None
    return Conv2DWorkload.from_node(x_shape, w_shape, attrs, "float32").args


def depthwise_task_args(
    x_shape: Sequence[int],
    x_dtype: str,
    w_shape: Sequence[int],
    w_dtype: str,
    attrs: dict[str, Any],
) -> tuple[Any, ...] | None:
    """The ``depthwise_conv2d_nchw.llvm`` arguments of a convolution, or None where the
    template does not take it: 2-D NCHW float32 with one input channel per group
    (``group == C``), each group making ``multiplier = O // C`` output channels."""
    if len(x_shape) != 4 or x_dtype != "float32" or w_dtype != "float32":
        return None
    conv = Conv2DWorkload.from_node(x_shape, w_shape, attrs, "float32")
    per_group = int(w_shape[1])
    if attrs["group"] == 1 or attrs["group"] != conv.C or per_group != 1 or conv.O % conv.C:
        return None
    g = (conv.strides, conv.pads, conv.dilations)
    N, C, H, W, KH, KW = conv.N, conv.C, conv.H, conv.W, conv.KH, conv.KW
    return DepthwiseConv2DWorkload(N, C, H, W, conv.O // C, KH, KW, *g, "float32").args


def winograd_task_args(conv_args: tuple[Any, ...]) -> tuple[Any, ...] | None:
    """The ``conv2d_winograd.llvm`` arguments of a convolution given by its
    ``conv2d_nchw.llvm`` arguments, or None where Winograd does not apply (not 3x3,
    stride or dilation not 1)."""
    w = Conv2DWorkload.from_args(conv_args)
    if (w.KH, w.KW) != (3, 3) or w.stride_pair != (1, 1) or w.dilation_pair != (1, 1):
        return None
    return (w.N, w.C, w.H, w.W, w.O, tuple(conv_args[8]), w.dtype)  # the pads as given


def choose_conv_task(conv_args: tuple[Any, ...]) -> tuple[str, tuple[Any, ...]]:
    """The template (and its arguments) a convolution runs on: a tuning record decides
    (a Winograd record first, then a direct one); without records, Winograd for 3x3
    stride-1 layers with at least ``WINOGRAD_MIN_CHANNELS`` input and output channels
    and outputs at least ``WINOGRAD_MIN_SIZE`` high and wide."""
    wargs = winograd_task_args(conv_args)
    if wargs is None:
        return CONV_TEMPLATE, conv_args
    if not isinstance(config_for_direct_call(WINOGRAD_TEMPLATE, wargs), FallbackConfig):
        return WINOGRAD_TEMPLATE, wargs
    if not isinstance(config_for_direct_call(CONV_TEMPLATE, conv_args), FallbackConfig):
        return CONV_TEMPLATE, conv_args
    return (WINOGRAD_TEMPLATE, wargs) if winograd_by_rule(conv_args) else (CONV_TEMPLATE, conv_args)


def winograd_by_rule(conv_args: tuple[Any, ...], min_size: int = WINOGRAD_MIN_SIZE) -> bool:
    """The size rule, without records: both channel counts reach ``WINOGRAD_MIN_CHANNELS``
    and the output's height and width ``min_size``."""
    w = Conv2DWorkload.from_args(conv_args)
    pads = w.pads4
    OH, OW = w.H + pads[0] + pads[2] - 2, w.W + pads[1] + pads[3] - 2
    return min(w.C, w.O) >= WINOGRAD_MIN_CHANNELS and min(OH, OW) >= min_size


def blocked_winograd_by_rule(conv_args: tuple[Any, ...]) -> bool:
    """The size rule of a blocked (graph) convolution: outputs down to
    ``WINOGRAD_MIN_SIZE_BLOCKED``, but below ``WINOGRAD_MIN_SIZE`` only for weights under
    ``WINOGRAD_SMALL_PLANE_MAX_WEIGHTS`` unless the target's L3 is near (the target in
    scope, as for the templates' defaults)."""
    if not winograd_by_rule(conv_args, WINOGRAD_MIN_SIZE_BLOCKED):
        return False
    if near_last_level_cache():
        return True
    w = Conv2DWorkload.from_args(conv_args)
    weight_bytes = w.O * w.C * w.KH * w.KW * 4  # float32 (the only Winograd dtype)
    return winograd_by_rule(conv_args) or weight_bytes < WINOGRAD_SMALL_PLANE_MAX_WEIGHTS


def dims(t: Any) -> tuple[int, ...]:
    """A tensor's (or a tensor type's) static shape as ints."""
    return tuple(int(getattr(d, "value", d)) for d in t.shape)


def bias_input(inputs: Sequence[Any]) -> Any:
    """A conv node's optional third input, its bias; None without one."""
    return inputs[2] if len(inputs) > 2 else None


def _conv_args(inputs: Sequence[Any], attrs: dict[str, Any]) -> tuple[Any, ...] | None:
    x, w = inputs[0], inputs[1]
    if len(x.shape) != 4:
        return None
    return conv_task_args(dims(x), str(x.dtype), dims(w), str(w.dtype), attrs)


def winograd_task(in_types: Sequence[Any], attrs: dict[str, Any]) -> Any:
    """The Winograd task where :func:`choose_conv_task` picks it for the convolution."""
    args = _conv_args(in_types, attrs)
    if args is None:
        return None
    name, targs = choose_conv_task(args)
    return (name, targs) if name == WINOGRAD_TEMPLATE else None


def winograd_compute(inputs: Sequence[Any], attrs: dict[str, Any]) -> list[Any] | None:
    """2-D NCHW float32 group-1 convolutions :func:`choose_conv_task` gives to Winograd,
    with the knobs of the task's best record where one applies."""
    task = winograd_task(inputs, attrs)
    if task is None:
        return None
    _, targs = task
    cfg = config_for_direct_call(WINOGRAD_TEMPLATE, targs)
    return [winograd.winograd_for_call(inputs[0], inputs[1], bias_input(inputs), targs, cfg)]


def direct_task(in_types: Sequence[Any], attrs: dict[str, Any]) -> Any:
    """The ``conv2d_nchw.llvm`` task of a conv node the direct template takes, or None."""
    args = _conv_args(in_types, attrs)
    return None if args is None else (CONV_TEMPLATE, args)


def direct_compute(inputs: Sequence[Any], attrs: dict[str, Any]) -> list[Any] | None:
    """2-D NCHW float32 group-1 convolutions on the ``conv2d_nchw.llvm`` template, with the
    knobs of the task's best record where one applies."""
    args = _conv_args(inputs, attrs)
    if args is None:
        return None
    x, w = inputs[0], inputs[1]
    g = conv2d.conv2d_geometry(x, w, attrs["strides"], attrs["pads"], attrs["dilations"])
    knobs = conv2d.conv2d_knobs(g, x.dtype, config_for_direct_call(CONV_TEMPLATE, args))
    return [conv2d.conv2d_flat(x, w, bias_input(inputs), g, *knobs)]


def grouped_pointwise_compute(inputs: Sequence[Any], attrs: dict[str, Any]) -> list[Any] | None:
    """Grouped 1x1 float32 convolutions (not depthwise) with unit strides and no padding:
    one register-tiled GEMM per group, untuned (``schedules/grouped_pointwise.py``)."""
    x, w = inputs[0], inputs[1]
    if x.dtype != "float32" or w.dtype != "float32":
        return None
    if not grouped_pointwise.applies(dims(x), dims(w), attrs):
        return None
    conv = grouped_pointwise.grouped_pointwise_conv(x, w, bias_input(inputs), int(attrs["group"]))
    return [conv]


def depthwise_task(in_types: Sequence[Any], attrs: dict[str, Any]) -> Any:
    """The ``depthwise_conv2d_nchw.llvm`` task of a depthwise conv node, or None."""
    x, w = in_types[0], in_types[1]
    if len(x.shape) != 4:
        return None
    args = depthwise_task_args(dims(x), str(x.dtype), dims(w), str(w.dtype), attrs)
    return None if args is None else (DEPTHWISE_TEMPLATE, args)


def depthwise_compute(inputs: Sequence[Any], attrs: dict[str, Any]) -> list[Any] | None:
    """Depthwise convolutions: the ``depthwise_conv2d_nchw.llvm`` template, with the
    knobs of the task's best record where one applies."""
    task = depthwise_task(inputs, attrs)
    if task is None:
        return None
    x, w = inputs[0], inputs[1]
    args = task[1]
    g = depthwise_conv2d.geometry(DepthwiseConv2DWorkload.from_args(args))
    cfg = config_for_direct_call(DEPTHWISE_TEMPLATE, args)
    knobs = depthwise_conv2d.depthwise_knobs(g, args[4], x.dtype, cfg)
    return [depthwise_conv2d.depthwise_flat(x, w, bias_input(inputs), g, *knobs)]


def nchwc_task_args(
    x_shape: Sequence[int], x_dtype: str, w_shape: Sequence[int], attrs: dict[str, Any]
) -> tuple[Any, ...]:
    """The ``conv2d_NCHWc.llvm`` arguments (the NCHW workload) of a ``conv_nchwc`` node."""
    N, _, H, W, _ = (int(d) for d in x_shape)
    KH, KW = int(w_shape[2]), int(w_shape[3])
    geometry = (tuple(attrs["strides"]), tuple(attrs["pads"]), tuple(attrs["dilations"]))
    C, O = attrs["in_channels"], attrs["channels"]
    return Conv2DWorkload(N, C, H, W, O, KH, KW, *geometry, x_dtype).args


def nchwc_task(in_types: Sequence[Any], attrs: dict[str, Any]) -> Any:
    """The node's task, its channel blocks fixed: the input's block is its producer's and
    the weights' output block the one the layout pass chose, and :func:`nchwc_compute_for` runs
    only records measured with both, so no trial goes to other blocks."""
    x, w = in_types[0], in_types[1]
    if str(x.dtype) != "float32" or attrs.get("groups", 1) != 1:
        return None  # float64 and grouped convolutions run the template untuned
    blocks = {"ic_bn": dims(x)[4], "oc_bn": dims(w)[5]}
    return NCHWC_TEMPLATE, nchwc_task_args(dims(x), "float32", dims(w), attrs), blocks


def _nchwc_tile(args: tuple[Any, ...], ic_bn: int, oc_bn: int) -> dict[str, Any]:
    """The ``conv2d_NCHWc.llvm`` schedule knobs (as compute attrs) for the workload ``args``
    on the graph's blocks: the best record measured with them, else the fallback's."""
    where = (("ic_bn", ic_bn), ("oc_bn", oc_bn))
    cfg = config_for_direct_call(NCHWC_TEMPLATE, args, where)
    g = conv2d.geometry(Conv2DWorkload.from_args(args))
    return conv2d_nchwc.knob_attrs(conv2d_nchwc.nchwc_knobs(g, args[-1], cfg))


def nchwc_compute_for(inputs: Sequence[Any], attrs: dict[str, Any]) -> list[Any] | None:
    """Blocked convolutions: the ``conv2d_NCHWc.llvm`` compute with the register tile of
    the task's best record among those measured with the graph's blocks (the fallback's
    without one): a tile is only run with the blocks it was measured with."""
    x, w = inputs[0], inputs[1]
    if str(x.dtype) not in ("float32", "float64"):
        return None
    groups = attrs.get("groups", 1)
    args = nchwc_task_args(dims(x), str(x.dtype), dims(w), attrs)
    if groups == 1:
        extra = _nchwc_tile(args, dims(x)[4], dims(w)[5])
    else:  # one group's workload, untuned: no record measured a grouped kernel
        wl = Conv2DWorkload.from_args(args)
        args = replace(wl, C=wl.C // groups, O=wl.O // groups).args
        g = conv2d.geometry(Conv2DWorkload.from_args(args))
        extra = conv2d_nchwc.knob_attrs(conv2d_nchwc.nchwc_knobs(g, args[-1], FallbackConfig()))
    a = attrs
    return [
        nchwc_compute(
            x, w, bias_input(inputs), a["strides"], a["pads"], a["dilations"], extra, groups=groups
        )
    ]


def winograd_nchwc_knobs(args: tuple[Any, ...], ic_bn: int, oc_bn: int) -> dict[str, int] | None:
    """The Winograd knobs of a blocked convolution (its NCHW workload ``args``, channel
    blocks ``ic_bn``/``oc_bn``) where it runs on Winograd, else None: with a
    ``conv2d_winograd_NCHWc.llvm`` record of these blocks, its config; else a direct
    record measured with these blocks keeps it direct; else the size rule of
    :func:`choose_conv_task` down to ``WINOGRAD_MIN_SIZE_BLOCKED`` (see
    :func:`blocked_winograd_by_rule`), with the fallback
    config. Records of the NCHW template ``conv2d_winograd.llvm`` are not read here: they
    time another kernel (NCHW, weights transformed per call). The chooser of
    ``transform_winograd_weights`` (``CPUBackend.graph_passes``)."""
    wargs = winograd_task_args(args)
    if wargs is None or args[-1] != "float32":
        return None
    cfg = config_for_direct_call(WINOGRAD_NCHWC_TEMPLATE, (*wargs, ic_bn, oc_bn))
    if isinstance(cfg, FallbackConfig):
        where = (("ic_bn", ic_bn), ("oc_bn", oc_bn))
        if not isinstance(config_for_direct_call(NCHWC_TEMPLATE, args, where), FallbackConfig):
            return None
        if not blocked_winograd_by_rule(args):
            return None
    N, C, H, W, O, _, _ = wargs
    with using_config(cfg):
        m, tiles = winograd.define_winograd_knobs(N, C, H, W, O)
    return winograd.knob_attrs(m, tiles)


def winograd_blocked_task(in_types: Sequence[Any], attrs: dict[str, Any]) -> Any:
    """The ``conv2d_winograd_NCHWc.llvm`` task of a ``conv_winograd_nchwc`` node: the
    graph's kernel, with its channel blocks and transformed weights."""
    x = in_types[0]
    N, _, H, W, ic_bn = dims(x)
    C, O = attrs["in_channels"], attrs["channels"]
    args = (N, C, H, W, O, tuple(attrs["pads"]), str(x.dtype), ic_bn, attrs["out_block"])
    return WINOGRAD_NCHWC_TEMPLATE, args


def winograd_blocked_compute(inputs: Sequence[Any], attrs: dict[str, Any]) -> list[Any] | None:
    """``conv_winograd_nchwc``: the op's own compute, which the blocked Winograd anchor
    (``anchors.winograd_nchwc``) schedules."""
    return conv_winograd_nchwc(inputs, attrs) if str(inputs[0].dtype) == "float32" else None


def dwconv_nchwc_task_args(
    x_shape: Sequence[int], x_dtype: str, w_shape: Sequence[int], attrs: dict[str, Any]
) -> tuple[Any, ...]:
    """The ``depthwise_conv2d_NCHWc.llvm`` arguments (the NCHW depthwise workload, channel
    multiplier 1) of a ``dwconv_nchwc`` node."""
    N, _, H, W, _ = (int(d) for d in x_shape)
    KH, KW = int(w_shape[1]), int(w_shape[2])
    geometry = (tuple(attrs["strides"]), tuple(attrs["pads"]), tuple(attrs["dilations"]))
    return DepthwiseConv2DWorkload(N, attrs["channels"], H, W, 1, KH, KW, *geometry, x_dtype).args


def dwconv_nchwc_task(in_types: Sequence[Any], attrs: dict[str, Any]) -> Any:
    """The node's task, its channel block fixed to the input's (:func:`dwconv_nchwc_compute` runs
    only records measured with it)."""
    x, w = in_types[0], in_types[1]
    if str(x.dtype) != "float32":
        return None
    args = dwconv_nchwc_task_args(dims(x), "float32", dims(w), attrs)
    return DEPTHWISE_NCHWC_TEMPLATE, args, {"cb": dims(x)[4]}


def _dwconv_nchwc_tile(
    x_shape: tuple[int, ...], dtype: str, w_shape: tuple[int, ...], attrs: dict[str, Any]
) -> tuple[dict[str, Any], Any]:
    """The ``depthwise_conv2d_NCHWc.llvm`` schedule knobs (as compute attrs) for a
    ``dwconv_nchwc`` of an input and weights of those shapes: the best record measured
    with the input's block, else the fallback's tile fitted to that block; with the conv's
    geometry."""
    args = dwconv_nchwc_task_args(x_shape, dtype, w_shape, attrs)
    g = depthwise_conv2d.geometry(DepthwiseConv2DWorkload.from_args(args))
    block = x_shape[4]
    cfg = config_for_direct_call(DEPTHWISE_NCHWC_TEMPLATE, args, (("cb", block),))
    knobs = depthwise_conv2d_nchwc.depthwise_nchwc_knobs(g, args[-1], cfg)
    knobs = depthwise_conv2d_nchwc.fit_block(knobs, block, args[-1])
    return depthwise_conv2d_nchwc.knob_attrs(knobs), g


def dwconv_nchwc_compute(inputs: Sequence[Any], attrs: dict[str, Any]) -> list[Any] | None:
    """Blocked depthwise convolutions: the ``depthwise_conv2d_NCHWc.llvm`` compute with the
    tile of the task's best record among those measured with the graph's block (the
    block is the input's); without one, the fallback's tile fitted to the block."""
    x, w = inputs[0], inputs[1]
    if str(x.dtype) not in ("float32", "float64"):
        return None
    extra = _dwconv_nchwc_tile(dims(x), str(x.dtype), dims(w), attrs)[0]
    a = attrs
    geometry = (a["strides"], a["pads"], a["dilations"])
    return [dw_nchwc_compute(x, w, bias_input(inputs), *geometry, extra)]


def _pointwise_row_tile(
    N: int, C: int, H: int, W: int, O: int, dtype: str, ic_bn: int, oc_bn: int
) -> dict[str, Any]:
    """:func:`_nchwc_tile` of a 1x1 stride-1 conv ``(N, C, H, W) -> O`` on those blocks,
    never flat: the fused schedules compute other stages inside its row tiles."""
    wl = Conv2DWorkload(N, C, H, W, O, 1, 1, (1, 1), (0, 0, 0, 0), (1, 1), dtype)
    return {**_nchwc_tile(wl.args, ic_bn, oc_bn), "flat": False}


def _dw_pw_tiles(
    x_shape: tuple[int, ...], dtype: str, dw_w: Any, pw_w: Any, attrs: dict[str, Any]
) -> tuple[dict[str, Any], dict[str, Any], Any]:
    """The depthwise and 1x1 convs' tiles of a ``dwconv_pw_nchwc`` reading an input of
    ``x_shape``, as the two convs apart would take them, and the depthwise geometry."""
    dw_tile, g = _dwconv_nchwc_tile(x_shape, dtype, dims(dw_w), attrs)
    N, block = x_shape[0], x_shape[4]
    C, O = attrs["channels"], attrs["out_channels"]
    return dw_tile, _pointwise_row_tile(N, C, g.OH, g.OW, O, dtype, block, dims(pw_w)[5]), g


def dwconv_pw_nchwc_compute(inputs: Sequence[Any], attrs: dict[str, Any]) -> list[Any] | None:
    """A depthwise conv, clipped, and the 1x1 conv on it (``dwconv_pw_nchwc``): each conv's
    register tile chosen as :func:`dwconv_nchwc_compute` and :func:`nchwc_compute_for`
    choose them for the two convs apart."""
    x, dw_w, dw_b, pw_w, pw_b = inputs
    dtype = str(x.dtype)
    if dtype not in ("float32", "float64"):
        return None
    dw_tile, pw_tile, _ = _dw_pw_tiles(dims(x), dtype, dw_w, pw_w, attrs)
    a = attrs
    geometry = (a["strides"], a["pads"], a["dilations"])
    clip = (a["min"], a["max"])
    return [dw_pw_compute(x, dw_w, dw_b, pw_w, pw_b, *geometry, clip, dw_tile, pw_tile)]


def expand_dwconv_pw_nchwc_compute(
    inputs: Sequence[Any], attrs: dict[str, Any]
) -> list[Any] | None:
    """A MobileNet block (``expand_dwconv_pw_nchwc``): the expand conv's register tile is
    the one :func:`nchwc_compute_for` chooses for it apart (never flat: its schedule tiles
    rows of the padded grid), the two others as :func:`dwconv_pw_nchwc_compute` chooses
    them, and the band of output rows each parallel iteration computes."""
    x, w1, b1, dw_w, dw_b, pw_w, pw_b = inputs
    dtype = str(x.dtype)
    if dtype not in ("float32", "float64"):
        return None
    N, _, H, W, ic_bn = dims(x)
    OB, _, _, _, _, ob = dims(w1)
    e_tile = _pointwise_row_tile(N, attrs["in_channels"], H, W, attrs["channels"], dtype,
                                 ic_bn, ob)  # fmt: skip
    dw_tile, pw_tile, g = _dw_pw_tiles((N, OB, H, W, ob), dtype, dw_w, pw_w, attrs)
    pw_tile["band"] = expand_dw_pointwise_nchwc.band_rows(g.OH)
    a = attrs
    return [
        expand_dw_pw_compute(
            x, w1, b1, dw_w, dw_b, pw_w, pw_b, a["strides"], a["pads"], a["dilations"],
            (a["expand_min"], a["expand_max"]), (a["min"], a["max"]), (e_tile, dw_tile, pw_tile),
        )
    ]  # fmt: skip
