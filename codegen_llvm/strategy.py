"""The CPU operator strategies: for each graph op, the template implementations that apply.

Each entry of :data:`CPU_STRATEGY` is an :class:`~ember.tuner.strategy.Implementation`:
a template's compute on the node's tensors (None where the template does not take the
workload), paired with the anchor schedule of the stages it makes
(``codegen_llvm/schedules/anchors.py``) and the tuning task whose records set its knobs.
``ember.graph.kernels`` takes, for each node, the first implementation (by priority) whose
compute applies, else the op's generic compute (``frontend/ops``); the kernel's schedule
is then :func:`~ember.codegen_llvm.schedules.generic.schedule_group` over the group's
outputs with the implementations taken as anchors, so the group's elementwise tail is
inlined into the template's output stage: a fused epilogue.

Convolutions try Winograd first, then the direct template (see :func:`choose_conv_task`:
a tuning record decides, else a size rule), then the depthwise one;
``ember.graph.model_tuning.extract_tasks`` lists the tasks :func:`task_for` names, in the
same order. Adding a template is one module under ``schedules/`` and one entry here.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from typing import Any

from ember.codegen_llvm.schedules import (
    anchors,
    attention,
    conv2d,
    conv2d_nchwc,
    depthwise_conv2d,
    depthwise_conv2d_nchwc,
    grouped_pointwise,
    matmul_int8,
    pool2d,
    pool_nchwc,
    rows,
    winograd,
)
from ember.codegen_llvm.schedules.generic import (
    schedule_generic,
    schedule_group,
    whole_panels_pay,
)
from ember.codegen_llvm.tensor_intrinsics import has_vnni
from ember.tir import topi
from ember.tir.topi.attention import AttentionLayout
from ember.tir.topi.conv_nchwc import conv2d_nchwc as nchwc_compute
from ember.tir.topi.conv_nchwc import depthwise_conv2d_nchwc as dw_nchwc_compute
from ember.tir.topi.workload import Conv2DWorkload, DepthwiseConv2DWorkload
from ember.tuner.space import FallbackConfig
from ember.tuner.strategy import Implementation, StrategyTable, no_schedule
from ember.tuner.template import config_for_direct_call

__all__ = [
    "CPU_STRATEGY",
    "compute_for",
    "implementations",
    "schedule_generic",
    "schedule_group",
    "task_for",
]

CONV_TEMPLATE = "conv2d_nchw.llvm"
NCHWC_TEMPLATE = conv2d_nchwc.TEMPLATE
DEPTHWISE_TEMPLATE = depthwise_conv2d.TEMPLATE
DEPTHWISE_NCHWC_TEMPLATE = depthwise_conv2d_nchwc.TEMPLATE
WINOGRAD_TEMPLATE = "conv2d_winograd.llvm"
# Winograd by default where both channel counts and the output's height and width reach
# these (3x3, stride 1, no dilation). benchmarks/bench_conv.py on ResNet-18's layers
# (1 thread, fallback configs, vs the direct template's fallback): 64ch at 56x56 3.7x,
# 128ch at 28x28 5.5x, 256ch at 14x14 0.98x, 512ch at 7x7 0.24x. The weight transform
# runs in the kernel, so on small images it (C * O * 36 values) outweighs the saving.
WINOGRAD_MIN_CHANNELS = 32
WINOGRAD_MIN_SIZE = 16
MATMUL_TEMPLATE = "matmul.llvm"
INT8_TEMPLATE = "matmul_int8.llvm"
POOL_TEMPLATE = "pool2d.llvm"
ATTENTION = "attention.llvm"  # no tuning task: its block sizes are fixed


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
    w = Conv2DWorkload.from_args(conv_args)
    pads = w.pads4
    OH, OW = w.H + pads[0] + pads[2] - 2, w.W + pads[1] + pads[3] - 2
    if min(w.C, w.O) >= WINOGRAD_MIN_CHANNELS and min(OH, OW) >= WINOGRAD_MIN_SIZE:
        return WINOGRAD_TEMPLATE, wargs
    return CONV_TEMPLATE, conv_args


def _dims(t: Any) -> tuple[int, ...]:
    return tuple(int(getattr(d, "value", d)) for d in t.shape)


def _bias(inputs: Sequence[Any]) -> Any:
    return inputs[2] if len(inputs) > 2 else None


def _conv_args(inputs: Sequence[Any], attrs: dict[str, Any]) -> tuple[Any, ...] | None:
    x, w = inputs[0], inputs[1]
    if len(x.shape) != 4:
        return None
    return conv_task_args(_dims(x), str(x.dtype), _dims(w), str(w.dtype), attrs)


def _winograd_task(in_types: Sequence[Any], attrs: dict[str, Any]) -> Any:
    """The Winograd task where :func:`choose_conv_task` picks it for the convolution."""
    args = _conv_args(in_types, attrs)
    if args is None:
        return None
    name, targs = choose_conv_task(args)
    return (name, targs) if name == WINOGRAD_TEMPLATE else None


def _winograd(inputs: Sequence[Any], attrs: dict[str, Any]) -> list[Any] | None:
    """2-D NCHW float32 group-1 convolutions :func:`choose_conv_task` gives to Winograd,
    with the knobs of the task's best record where one applies."""
    task = _winograd_task(inputs, attrs)
    if task is None:
        return None
    _, targs = task
    cfg = config_for_direct_call(WINOGRAD_TEMPLATE, targs)
    return [winograd.winograd_for_call(inputs[0], inputs[1], _bias(inputs), targs, cfg)]


def _direct_task(in_types: Sequence[Any], attrs: dict[str, Any]) -> Any:
    args = _conv_args(in_types, attrs)
    return None if args is None else (CONV_TEMPLATE, args)


def _direct(inputs: Sequence[Any], attrs: dict[str, Any]) -> list[Any] | None:
    """2-D NCHW float32 group-1 convolutions on the ``conv2d_nchw.llvm`` template, with the
    knobs of the task's best record where one applies."""
    args = _conv_args(inputs, attrs)
    if args is None:
        return None
    x, w = inputs[0], inputs[1]
    g = conv2d.conv2d_geometry(x, w, attrs["strides"], attrs["pads"], attrs["dilations"])
    knobs = conv2d.conv2d_knobs(g, x.dtype, config_for_direct_call(CONV_TEMPLATE, args))
    return [conv2d.conv2d_flat(x, w, _bias(inputs), g, *knobs)]


def _grouped_pointwise(inputs: Sequence[Any], attrs: dict[str, Any]) -> list[Any] | None:
    """Grouped 1x1 float32 convolutions (not depthwise) with unit strides and no padding:
    one register-tiled GEMM per group, untuned (``schedules/grouped_pointwise.py``)."""
    x, w = inputs[0], inputs[1]
    if x.dtype != "float32" or w.dtype != "float32":
        return None
    if not grouped_pointwise.applies(_dims(x), _dims(w), attrs):
        return None
    conv = grouped_pointwise.grouped_pointwise_conv(x, w, _bias(inputs), int(attrs["group"]))
    return [conv]


def _depthwise_task(in_types: Sequence[Any], attrs: dict[str, Any]) -> Any:
    x, w = in_types[0], in_types[1]
    if len(x.shape) != 4:
        return None
    args = depthwise_task_args(_dims(x), str(x.dtype), _dims(w), str(w.dtype), attrs)
    return None if args is None else (DEPTHWISE_TEMPLATE, args)


def _depthwise(inputs: Sequence[Any], attrs: dict[str, Any]) -> list[Any] | None:
    """Depthwise convolutions: the ``depthwise_conv2d_nchw.llvm`` template, with the
    knobs of the task's best record where one applies."""
    task = _depthwise_task(inputs, attrs)
    if task is None:
        return None
    x, w = inputs[0], inputs[1]
    args = task[1]
    g = depthwise_conv2d.geometry(DepthwiseConv2DWorkload.from_args(args))
    cfg = config_for_direct_call(DEPTHWISE_TEMPLATE, args)
    knobs = depthwise_conv2d.depthwise_knobs(g, args[4], x.dtype, cfg)
    return [depthwise_conv2d.depthwise_flat(x, w, _bias(inputs), g, *knobs)]


def nchwc_task_args(
    x_shape: Sequence[int], x_dtype: str, w_shape: Sequence[int], attrs: dict[str, Any]
) -> tuple[Any, ...]:
    """The ``conv2d_NCHWc.llvm`` arguments (the NCHW workload) of a ``conv_nchwc`` node."""
    N, _, H, W, _ = (int(d) for d in x_shape)
    KH, KW = int(w_shape[2]), int(w_shape[3])
    geometry = (tuple(attrs["strides"]), tuple(attrs["pads"]), tuple(attrs["dilations"]))
    C, O = attrs["in_channels"], attrs["channels"]
    return Conv2DWorkload(N, C, H, W, O, KH, KW, *geometry, x_dtype).args


def _nchwc_task(in_types: Sequence[Any], attrs: dict[str, Any]) -> Any:
    """The node's task, its channel blocks fixed: the input's block is its producer's and
    the weights' output block the one the layout pass chose, and :func:`_conv_nchwc` runs
    only records measured with both, so no trial goes to other blocks."""
    x, w = in_types[0], in_types[1]
    if str(x.dtype) != "float32" or attrs.get("groups", 1) != 1:
        return None  # float64 and grouped convolutions run the template untuned
    blocks = {"ic_bn": _dims(x)[4], "oc_bn": _dims(w)[5]}
    return NCHWC_TEMPLATE, nchwc_task_args(_dims(x), "float32", _dims(w), attrs), blocks


def _conv_nchwc(inputs: Sequence[Any], attrs: dict[str, Any]) -> list[Any] | None:
    """Blocked convolutions: the ``conv2d_NCHWc.llvm`` compute with the register tile of
    the task's best record among those measured with the graph's blocks (the fallback's
    without one): a tile is only run with the blocks it was measured with."""
    x, w = inputs[0], inputs[1]
    if str(x.dtype) not in ("float32", "float64"):
        return None
    groups = attrs.get("groups", 1)
    args = nchwc_task_args(_dims(x), str(x.dtype), _dims(w), attrs)
    if groups == 1:
        where = (("ic_bn", _dims(x)[4]), ("oc_bn", _dims(w)[5]))
        cfg = config_for_direct_call(NCHWC_TEMPLATE, args, where)
    else:  # one group's workload, untuned: no record measured a grouped kernel
        wl = Conv2DWorkload.from_args(args)
        args = replace(wl, C=wl.C // groups, O=wl.O // groups).args
        cfg = FallbackConfig()
    g = conv2d.geometry(Conv2DWorkload.from_args(args))
    knobs = conv2d_nchwc.nchwc_knobs(g, args[-1], cfg)
    extra = conv2d_nchwc.knob_attrs(knobs)
    a = attrs
    return [
        nchwc_compute(
            x, w, _bias(inputs), a["strides"], a["pads"], a["dilations"], extra, groups=groups
        )
    ]


def dwconv_nchwc_task_args(
    x_shape: Sequence[int], x_dtype: str, w_shape: Sequence[int], attrs: dict[str, Any]
) -> tuple[Any, ...]:
    """The ``depthwise_conv2d_NCHWc.llvm`` arguments (the NCHW depthwise workload, channel
    multiplier 1) of a ``dwconv_nchwc`` node."""
    N, _, H, W, _ = (int(d) for d in x_shape)
    KH, KW = int(w_shape[1]), int(w_shape[2])
    geometry = (tuple(attrs["strides"]), tuple(attrs["pads"]), tuple(attrs["dilations"]))
    return DepthwiseConv2DWorkload(N, attrs["channels"], H, W, 1, KH, KW, *geometry, x_dtype).args


def _dwconv_nchwc_task(in_types: Sequence[Any], attrs: dict[str, Any]) -> Any:
    """The node's task, its channel block fixed to the input's (:func:`_dwconv_nchwc` runs
    only records measured with it)."""
    x, w = in_types[0], in_types[1]
    if str(x.dtype) != "float32":
        return None
    args = dwconv_nchwc_task_args(_dims(x), "float32", _dims(w), attrs)
    return DEPTHWISE_NCHWC_TEMPLATE, args, {"cb": _dims(x)[4]}


def _dwconv_nchwc(inputs: Sequence[Any], attrs: dict[str, Any]) -> list[Any] | None:
    """Blocked depthwise convolutions: the ``depthwise_conv2d_NCHWc.llvm`` compute with the
    tile of the task's best record among those measured with the graph's block (the
    block is the input's); without one, the fallback's tile fitted to the block."""
    x, w = inputs[0], inputs[1]
    if str(x.dtype) not in ("float32", "float64"):
        return None
    args = dwconv_nchwc_task_args(_dims(x), str(x.dtype), _dims(w), attrs)
    g = depthwise_conv2d.geometry(DepthwiseConv2DWorkload.from_args(args))
    block = _dims(x)[4]
    cfg = config_for_direct_call(DEPTHWISE_NCHWC_TEMPLATE, args, (("cb", block),))
    knobs = depthwise_conv2d_nchwc.depthwise_nchwc_knobs(g, args[-1], cfg)
    knobs = depthwise_conv2d_nchwc.fit_block(knobs, block, args[-1])
    extra = depthwise_conv2d_nchwc.knob_attrs(knobs)
    a = attrs
    return [dw_nchwc_compute(x, w, _bias(inputs), a["strides"], a["pads"], a["dilations"], extra)]


def _dense_packed_task(in_types: Sequence[Any], attrs: dict[str, Any]) -> Any:
    """``matmul.llvm`` of ``(M, N, K)``, M the product of the leading dims (float32)."""
    if str(in_types[0].dtype) != "float32":
        return None
    a = _dims(in_types[0])
    m = 1
    for d in a[:-1]:
        m *= d
    return MATMUL_TEMPLATE, (m, int(attrs["n"]), a[-1], "float32")


def _dense_packed(inputs: Sequence[Any], attrs: dict[str, Any]) -> list[Any] | None:
    """GEMMs over pre-packed weight panels: the op's own compute, over whole panels where
    that pays (``whole_panels_pay``); the generic schedule runs ``matmul.llvm``'s
    micro-kernel on it (``schedules/generic.py``), with the tiles of the task's best
    record."""
    a, panels = inputs
    n = int(attrs["n"])
    whole = whole_panels_pay((*_dims(a)[:-1], n), _dims(panels)[-1])
    return [topi.dense_packed(a, panels, n, whole_panels=whole)]


def _attention(inputs: Sequence[Any], attrs: dict[str, Any]) -> list[Any] | None:
    """float32 attention: the kernel with an online softmax that never stores the scores
    (``schedules/attention.py``); other dtypes take the op's generic compute."""
    if any(str(t.dtype) != "float32" for t in inputs):
        return None
    q, k, v = inputs[:3]
    mask = inputs[3] if len(inputs) > 3 else None
    layout = AttentionLayout.from_attrs(attrs)
    return [attention.flash_attention(q, k, v, mask, attrs["scale"], layout)]


def _vnni(target: Any) -> bool:
    """Whether the ``llvm`` target (a ``Target``, its string, None: the host) has VNNI."""
    return has_vnni(None if target is None else str(target))


def _int8_packed(inputs: Sequence[Any], attrs: dict[str, Any]) -> list[Any] | None:
    """``matmul_int8_packed`` (u8 x packed s8 -> s32): the ``matmul_int8.llvm`` compute,
    tensorized to AVX-512 VNNI by its schedule (on targets with VNNI only)."""
    a, p = inputs
    if a.ndim != 2 or a.dtype != "uint8" or p.dtype != "int8":
        return None
    M, K = _dims(a)
    return [matmul_int8.int8_gemm(a, p, M, int(attrs["n"]), K)[1]]


# the template unrolls the window: above this many taps (a global pool) the generic schedule
# is faster (GlobalAveragePool over 256x56x56: 196 us generic, 644 us on the template)
AVG_POOL_MAX_TAPS = 25


def _avg_pool(inputs: Sequence[Any], attrs: dict[str, Any]) -> list[Any] | None:
    """2-D NCHW float32 average pooling without dilation or ceil mode: ``pool2d.llvm``'s
    compute (padding counted or not), scheduled by the template where the pool is the
    kernel's output."""
    x = inputs[0]
    kernel, strides, pads = attrs["kernel"], attrs["strides"], attrs["pads"]
    if x.ndim != 4 or x.dtype != "float32" or len(kernel) != 2 or attrs["ceil_mode"]:
        return None
    if any(d != 1 for d in attrs["dilations"]) or kernel[0] * kernel[1] > AVG_POOL_MAX_TAPS:
        return None  # a global pool's window: the generic schedule sums it in vector lanes
    window = (tuple(kernel), tuple(strides), tuple(pads))
    return [pool2d.avg_pool2d_graph(x, *window, bool(attrs["count_include_pad"]))]


def _pool_nchwc(kind: str) -> Any:
    """The blocked pool's own compute, which :func:`pool_nchwc.schedule_pool_nchwc` takes."""

    def compute(inputs: Sequence[Any], attrs: dict[str, Any]) -> list[Any] | None:
        a = attrs
        window = (a["kernel"], a["strides"], a["pads"], a["dilations"], a["ceil_mode"])
        if kind == "max":
            return [topi.max_pool2d_nchwc(inputs[0], *window)]
        return [topi.avg_pool2d_nchwc(inputs[0], *window, a["count_include_pad"])]

    return compute


def _max_pool(inputs: Sequence[Any], attrs: dict[str, Any]) -> list[Any] | None:
    """2-D NCHW float32 max pooling without dilation or ceil mode: ``pool2d.llvm``'s
    compute, scheduled by the template where the pool is the kernel's output."""
    x = inputs[0]
    kernel, strides, pads = attrs["kernel"], attrs["strides"], attrs["pads"]
    if x.ndim != 4 or x.dtype != "float32" or len(kernel) != 2 or attrs["ceil_mode"]:
        return None
    if any(d != 1 for d in attrs["dilations"]):
        return None
    return [pool2d.max_pool2d_graph(x, tuple(kernel), tuple(strides), tuple(pads))]


CPU_STRATEGY = StrategyTable("llvm")
"""The CPU's strategies; one :meth:`~ember.tuner.strategy.StrategyTable.add` per template."""

_add = CPU_STRATEGY.add
_add(
    "conv",
    Implementation(
        WINOGRAD_TEMPLATE, _winograd, anchors.winograd_conv, _winograd_task, priority=20
    ),
)
_add("conv", Implementation(CONV_TEMPLATE, _direct, anchors.conv2d_flat, _direct_task, priority=10))
_add(
    "conv",
    Implementation(
        DEPTHWISE_TEMPLATE, _depthwise, anchors.depthwise_flat, _depthwise_task, priority=10
    ),
)
_add(
    "conv",
    Implementation(
        "conv2d_grouped_pointwise",
        _grouped_pointwise,
        anchors.grouped_1x1,
        None,
        priority=10,
    ),
)
_add(
    "conv_nchwc",
    Implementation(
        NCHWC_TEMPLATE, _conv_nchwc, anchors.conv2d_nchwc_blocked, _nchwc_task, priority=10
    ),
)
_add(
    "dwconv_nchwc",
    Implementation(
        DEPTHWISE_NCHWC_TEMPLATE,
        _dwconv_nchwc,
        anchors.depthwise_nchwc_blocked,
        _dwconv_nchwc_task,
        priority=10,
    ),
)
_add(
    "matmul_int8_packed",
    Implementation(
        INT8_TEMPLATE, _int8_packed, anchors.int8_gemm, None, priority=10, supports=_vnni
    ),
)
_add("max_pool", Implementation(POOL_TEMPLATE, _max_pool, anchors.max_pool, None, priority=10))
_add("avg_pool", Implementation(POOL_TEMPLATE, _avg_pool, anchors.avg_pool, None, priority=10))
for _kind in ("max", "avg"):
    _add(
        f"{_kind}_pool_nchwc",
        Implementation(
            "pool_nchwc", _pool_nchwc(_kind), pool_nchwc.schedule_pool_nchwc, None, priority=10
        ),
    )
_add(
    "softmax",
    Implementation(
        rows.SOFTMAX_TEMPLATE,
        rows.softmax_compute,
        rows.schedule_rows,
        rows.softmax_task,
        priority=10,
    ),
)
_add(
    "log_softmax",
    Implementation(
        rows.SOFTMAX_TEMPLATE, rows.log_softmax_compute, rows.schedule_rows, None, priority=10
    ),
)
_add(
    "normalize",
    Implementation(
        rows.LAYER_NORM_TEMPLATE,
        rows.normalize_graph,
        rows.schedule_rows,
        rows.normalize_task_args,
        priority=10,
    ),
)
_add("attention", Implementation(ATTENTION, _attention, no_schedule, None, priority=10))
_add(
    "dense_packed",
    Implementation(MATMUL_TEMPLATE, _dense_packed, no_schedule, _dense_packed_task, priority=10),
)


def implementations(op: str, target: Any = None) -> list[Implementation]:
    """The implementations of ``op`` that may run on the ``llvm`` ``target`` (a parsed
    ``Target``, its string, or None: the host), best first."""
    return CPU_STRATEGY.implementations(op, target)


def compute_for(
    op: str, inputs: Sequence[Any], attrs: dict[str, Any], target: Any = None
) -> list[Any] | None:
    """The outputs of the first implementation of ``op`` on ``inputs`` that applies on the
    ``llvm`` ``target`` (None: the host), or None where none does."""
    hit = CPU_STRATEGY.compute(op, inputs, attrs, target)
    return None if hit is None else hit[0]


def task_for(
    op: str, in_types: Sequence[Any], attrs: dict[str, Any], target: Any = None
) -> tuple[Any, ...] | None:
    """``(template name, arguments)`` of the tuning task behind a node of ``op`` on
    ``in_types`` (objects with ``shape`` and ``dtype``), or None where no template
    applies: convolutions the conv strategy takes (``conv2d_winograd.llvm`` or
    ``conv2d_nchw.llvm``, ``depthwise_conv2d_nchw.llvm`` for depthwise ones), blocked
    ``conv_nchwc`` ones as ``conv2d_NCHWc.llvm`` of their NCHW workload with their channel
    blocks as fixed knobs third (``dwconv_nchwc`` ones as ``depthwise_conv2d_NCHWc.llvm``),
    and ``dense_packed`` GEMMs as ``matmul.llvm`` of ``(M, N, K)``."""
    return CPU_STRATEGY.task(op, in_types, attrs, target)
