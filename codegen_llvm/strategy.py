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

Convolutions (their computes and tasks in ``codegen_llvm/conv_strategies.py``) try
Winograd first, then the direct template (see :func:`choose_conv_task`: a tuning record
decides, else a size rule), then the depthwise one and the grouped 1x1 GEMMs;
``ember.graph.model_tuning.extract_tasks`` lists the tasks :func:`task_for` names, in the
same order. Adding a template is one module under ``schedules/`` and one entry here.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ember.codegen_llvm.conv_strategies import (  # noqa: F401 - re-exported: the conv names
    CONV_TEMPLATE,
    DEPTHWISE_NCHWC_TEMPLATE,
    DEPTHWISE_TEMPLATE,
    NCHWC_TEMPLATE,
    WINOGRAD_NCHWC_TEMPLATE,
    WINOGRAD_TEMPLATE,
    bias_input,
    choose_conv_task,
    conv_task_args,
    depthwise_compute,
    depthwise_task,
    depthwise_task_args,
    dims,
    direct_compute,
    direct_task,
    dwconv_nchwc_compute,
    dwconv_nchwc_task,
    dwconv_nchwc_task_args,
    dwconv_pw_nchwc_compute,
    expand_dwconv_pw_nchwc_compute,
    grouped_pointwise_compute,
    nchwc_compute_for,
    nchwc_task,
    nchwc_task_args,
    winograd_blocked_compute,
    winograd_blocked_task,
    winograd_compute,
    winograd_nchwc_knobs,
    winograd_task,
    winograd_task_args,
)
from ember.codegen_llvm.schedules import (
    anchors,
    attention,
    dense_packed,
    matmul_int8,
    pool2d,
    pool_nchwc,
    rows,
)
from ember.codegen_llvm.schedules.generic import (
    schedule_generic,
    schedule_group,
    whole_panels_pay,
)
from ember.codegen_llvm.tensor_intrinsics import has_vnni
from ember.tir import topi
from ember.tir.topi.attention import AttentionLayout
from ember.tuner.strategy import Implementation, StrategyTable, no_schedule

__all__ = [
    "CPU_STRATEGY",
    "compute_for",
    "implementations",
    "schedule_generic",
    "schedule_group",
    "task_for",
]

INT8_TEMPLATE = "matmul_int8.llvm"
POOL_TEMPLATE = "pool2d.llvm"
ATTENTION = "attention.llvm"  # no tuning task: its block sizes are fixed


def _dense_packed_task(in_types: Sequence[Any], attrs: dict[str, Any]) -> Any:
    """``dense_packed.llvm`` of the node's A shape, N and panel width (float32): the
    kernel the graph runs, over weights packed at compile time."""
    if str(in_types[0].dtype) != "float32":
        return None
    return dense_packed.TEMPLATE, dense_packed.task_args(
        dims(in_types[0]), int(attrs["n"]), dims(in_types[1])[-1]
    )


def _dense_packed(inputs: Sequence[Any], attrs: dict[str, Any]) -> list[Any] | None:
    """GEMMs over pre-packed weight panels: the op's own compute, over whole panels where
    that pays (``whole_panels_pay``); the generic schedule runs ``matmul.llvm``'s
    micro-kernel on it (``schedules/generic.py``), with the tiles of the
    ``dense_packed.llvm`` task's best record."""
    a, panels = inputs
    n, nr = int(attrs["n"]), dims(panels)[-1]
    whole = whole_panels_pay((*dims(a)[:-1], n), nr, dims(a)[-1])
    tiles = dense_packed.tile_attrs(dense_packed.graph_tiles(dims(a), n, nr))
    return [topi.dense_packed(a, panels, n, whole_panels=whole, attrs=tiles)]


def _attention(inputs: Sequence[Any], attrs: dict[str, Any]) -> list[Any] | None:
    """float32 attention: the kernel with an online softmax that never stores the scores
    (``schedules/attention.py``); other dtypes take the op's generic compute."""
    if any(str(t.dtype) != "float32" for t in inputs):
        return None
    q, k, v = inputs[:3]
    mask = inputs[3] if len(inputs) > 3 else None
    layout = AttentionLayout.from_attrs(attrs)
    return [attention.flash_attention(q, k, v, mask, attrs["scale"], layout)]


def _cached_attention(inputs: Sequence[Any], attrs: dict[str, Any]) -> list[Any] | None:
    """float32 attention over a cache it appends to: one kernel that writes the present
    keys and values as it reads them (``schedules/attention.py``)."""
    if any(str(t.dtype) != "float32" for t in inputs):
        return None
    q, past_k, new_k, past_v, new_v = inputs[:5]
    mask = inputs[5] if len(inputs) > 5 else None
    layout = AttentionLayout.from_attrs(attrs)
    return attention.cached_flash_attention(
        q, past_k, new_k, past_v, new_v, mask, attrs["scale"], layout
    )


def _vnni(target: Any) -> bool:
    """Whether the ``llvm`` target (a ``Target``, its string, None: the host) has VNNI."""
    return has_vnni(None if target is None else str(target))


def _int8_packed(inputs: Sequence[Any], attrs: dict[str, Any]) -> list[Any] | None:
    """``matmul_int8_packed`` (u8 x packed s8 -> s32): the ``matmul_int8.llvm`` compute,
    tensorized to AVX-512 VNNI by its schedule (on targets with VNNI only)."""
    a, p = inputs
    if a.ndim != 2 or a.dtype != "uint8" or p.dtype != "int8":
        return None
    M, K = dims(a)
    return [matmul_int8.int8_gemm(a, p, M, int(attrs["n"]), K)[1]]


# the template unrolls the window: above this many taps (a global pool) the generic schedule
# is faster (GlobalAveragePool over 256x56x56: 196 us generic, 644 us on the template)
AVG_POOL_MAX_TAPS = 25


def _avg_pool(inputs: Sequence[Any], attrs: dict[str, Any]) -> list[Any] | None:
    """2-D NCHW float32 average pooling without dilation or ceil mode: ``pool2d.llvm``'s
    compute (padding counted or not), scheduled by the template where the pool is the
    kernel's output."""
    window = _template_window(inputs[0], attrs)
    if window is None or window[0][0] * window[0][1] > AVG_POOL_MAX_TAPS:
        return None  # a global pool's window: the generic schedule sums it in vector lanes
    return [pool2d.avg_pool2d_graph(inputs[0], *window, bool(attrs["count_include_pad"]))]


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
    window = _template_window(inputs[0], attrs)
    return None if window is None else [pool2d.max_pool2d_graph(inputs[0], *window)]


def _template_window(x: Any, attrs: dict[str, Any]) -> tuple[Any, Any, Any] | None:
    """``(kernel, strides, pads)`` of a pool ``pool2d.llvm`` takes: 2-D NCHW float32,
    without dilation or ceil mode; else None."""
    kernel = attrs["kernel"]
    if x.ndim != 4 or x.dtype != "float32" or len(kernel) != 2 or attrs["ceil_mode"]:
        return None
    if any(d != 1 for d in attrs["dilations"]):
        return None
    return tuple(kernel), tuple(attrs["strides"]), tuple(attrs["pads"])


CPU_STRATEGY = StrategyTable("llvm")
"""The CPU's strategies; one :meth:`~ember.tuner.strategy.StrategyTable.add` per template."""

_add = CPU_STRATEGY.add
_add(
    "conv",
    Implementation(
        WINOGRAD_TEMPLATE, winograd_compute, anchors.winograd_conv, winograd_task, priority=20
    ),
)
_add(
    "conv",
    Implementation(CONV_TEMPLATE, direct_compute, anchors.conv2d_flat, direct_task, priority=10),
)
_add(
    "conv",
    Implementation(
        DEPTHWISE_TEMPLATE, depthwise_compute, anchors.depthwise_flat, depthwise_task, priority=10
    ),
)
_add(
    "conv",
    Implementation(
        "conv2d_grouped_pointwise",
        grouped_pointwise_compute,
        anchors.grouped_1x1,
        None,
        priority=10,
    ),
)
_add(
    "conv_winograd_nchwc",
    Implementation(
        WINOGRAD_NCHWC_TEMPLATE,
        winograd_blocked_compute,
        anchors.winograd_nchwc,
        winograd_blocked_task,
        priority=10,
    ),
)
_add(
    "conv_nchwc",
    Implementation(
        NCHWC_TEMPLATE, nchwc_compute_for, anchors.conv2d_nchwc_blocked, nchwc_task, priority=10
    ),
)
_add(
    "dwconv_nchwc",
    Implementation(
        DEPTHWISE_NCHWC_TEMPLATE,
        dwconv_nchwc_compute,
        anchors.depthwise_nchwc_blocked,
        dwconv_nchwc_task,
        priority=10,
    ),
)
_add(
    "dwconv_pw_nchwc",
    Implementation(
        "dwconv_pw_nchwc", dwconv_pw_nchwc_compute, anchors.dw_pointwise, None, priority=10
    ),
)
_add(
    "expand_dwconv_pw_nchwc",
    Implementation(
        "expand_dwconv_pw_nchwc",
        expand_dwconv_pw_nchwc_compute,
        anchors.expand_dw_pointwise,
        None,
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
    "cached_attention",
    Implementation(ATTENTION, _cached_attention, no_schedule, None, priority=10),
)
_add(
    "dense_packed",
    Implementation(
        dense_packed.TEMPLATE, _dense_packed, no_schedule, _dense_packed_task, priority=10
    ),
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
    and ``dense_packed`` GEMMs as ``dense_packed.llvm`` (``schedules/dense_packed.py``)."""
    return CPU_STRATEGY.task(op, in_types, attrs, target)
