"""The CPU strategy table: which template's compute a graph op takes for a workload.

``ember.graph.kernels`` asks :func:`compute_for` before it falls back to an op's generic
compute (``frontend/ops``): an entry returns the tensors of a tuned template's
compute on the given tensors, or None where the template does not apply to the
workload. The matching schedule is applied by ``ember.graph_schedule`` from the
tag the compute carries (``conv2d_nchw_flat``, ``depthwise_conv2d_nchw_flat``,
``conv2d_nchwc``, ``matmul_int8``), so the graph's elementwise tail is inlined into the
template's output stage: a fused epilogue.

:func:`task_for` names the tuning task behind a node (template name and arguments):
the conv strategy (direct or Winograd, :func:`choose_conv_task`) reads its knobs with
the config an enclosing ``apply_history_best``
block records for that task (the template's fallback without one), and
``ember.graph.model_tuning.extract_tasks`` lists the same tasks for tuning.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from ember.codegen_llvm.schedules import (
    conv2d,
    conv2d_nchwc,
    depthwise_conv2d,
    depthwise_conv2d_nchwc,
    winograd,
)

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

Strategy = Callable[[Sequence[Any], dict[str, Any]], list[Any] | None]


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
    N, C, H, W = (int(d) for d in x_shape)
    O, _, KH, KW = (int(d) for d in w_shape)
    geometry = (tuple(attrs["strides"]), tuple(attrs["pads"]), tuple(attrs["dilations"]))
    return (N, C, H, W, O, KH, KW, *geometry, "float32")


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
    N, C, H, W = (int(d) for d in x_shape)
    O, per_group, KH, KW = (int(d) for d in w_shape)
    if attrs["group"] == 1 or attrs["group"] != C or per_group != 1 or O % C:
        return None
    geometry = (tuple(attrs["strides"]), tuple(attrs["pads"]), tuple(attrs["dilations"]))
    return (N, C, H, W, O // C, KH, KW, *geometry, "float32")


def winograd_task_args(conv_args: tuple[Any, ...]) -> tuple[Any, ...] | None:
    """The ``conv2d_winograd.llvm`` arguments of a convolution given by its
    ``conv2d_nchw.llvm`` arguments, or None where Winograd does not apply (not 3x3,
    stride or dilation not 1)."""
    N, C, H, W, O, KH, KW, strides, pads, dilations, dtype = conv_args
    if (KH, KW) != (3, 3) or tuple(strides) != (1, 1) or tuple(dilations) != (1, 1):
        return None
    return (N, C, H, W, O, tuple(pads), dtype)


def choose_conv_task(conv_args: tuple[Any, ...]) -> tuple[str, tuple[Any, ...]]:
    """The template (and its arguments) a convolution runs on: a tuning record decides
    (a Winograd record first, then a direct one); without records, Winograd for 3x3
    stride-1 layers with at least ``WINOGRAD_MIN_CHANNELS`` input and output channels
    and outputs at least ``WINOGRAD_MIN_SIZE`` high and wide."""
    from ember.tuner.space import FallbackConfig
    from ember.tuner.template import config_for_direct_call

    wargs = winograd_task_args(conv_args)
    if wargs is None:
        return CONV_TEMPLATE, conv_args
    if not isinstance(config_for_direct_call(WINOGRAD_TEMPLATE, wargs), FallbackConfig):
        return WINOGRAD_TEMPLATE, wargs
    if not isinstance(config_for_direct_call(CONV_TEMPLATE, conv_args), FallbackConfig):
        return CONV_TEMPLATE, conv_args
    C, H, W, O, pads = conv_args[1], conv_args[2], conv_args[3], conv_args[4], conv_args[8]
    pads = pads * 2 if len(pads) == 2 else pads
    OH, OW = H + pads[0] + pads[2] - 2, W + pads[1] + pads[3] - 2
    if min(C, O) >= WINOGRAD_MIN_CHANNELS and min(OH, OW) >= WINOGRAD_MIN_SIZE:
        return WINOGRAD_TEMPLATE, wargs
    return CONV_TEMPLATE, conv_args


def _dims(t: Any) -> tuple[int, ...]:
    return tuple(int(getattr(d, "value", d)) for d in t.shape)


def _conv(inputs: Sequence[Any], attrs: dict[str, Any]) -> list[Any] | None:
    """2-D NCHW float32 convolutions without groups: the ``conv2d_nchw.llvm`` or (see
    :func:`choose_conv_task`) ``conv2d_winograd.llvm`` template, with the knobs of the
    task's best record where one applies; depthwise ones: the depthwise template."""
    from ember.tuner.template import config_for_direct_call

    x, w = inputs[0], inputs[1]
    bias = inputs[2] if len(inputs) > 2 else None
    if x.ndim != 4:
        return None
    args = conv_task_args(_dims(x), x.dtype, _dims(w), w.dtype, attrs)
    if args is None:
        return _depthwise(x, w, bias, attrs)
    name, targs = choose_conv_task(args)
    if name == WINOGRAD_TEMPLATE:
        return [winograd.winograd_for_call(x, w, bias, targs, config_for_direct_call(name, targs))]
    g = conv2d.conv2d_geometry(x, w, attrs["strides"], attrs["pads"], attrs["dilations"])
    knobs = conv2d.conv2d_knobs(g, x.dtype, config_for_direct_call(CONV_TEMPLATE, args))
    return [conv2d.conv2d_flat(x, w, bias, g, *knobs)]


def nchwc_task_args(
    x_shape: Sequence[int], x_dtype: str, w_shape: Sequence[int], attrs: dict[str, Any]
) -> tuple[Any, ...]:
    """The ``conv2d_NCHWc.llvm`` arguments (the NCHW workload) of a ``conv_nchwc`` node."""
    N, _, H, W, _ = (int(d) for d in x_shape)
    KH, KW = int(w_shape[2]), int(w_shape[3])
    geometry = (tuple(attrs["strides"]), tuple(attrs["pads"]), tuple(attrs["dilations"]))
    return (N, attrs["in_channels"], H, W, attrs["channels"], KH, KW, *geometry, x_dtype)


def _conv_nchwc(inputs: Sequence[Any], attrs: dict[str, Any]) -> list[Any] | None:
    """Blocked convolutions: the ``conv2d_NCHWc.llvm`` compute with the register tile of
    the task's best record (the fallback's without one); the blocks are the graph's."""
    from ember.tir.topi.conv_nchwc import conv2d_nchwc as compute
    from ember.tuner.template import config_for_direct_call

    x, w = inputs[0], inputs[1]
    if str(x.dtype) not in ("float32", "float64"):
        return None
    args = nchwc_task_args(_dims(x), str(x.dtype), _dims(w), attrs)
    g = conv2d._Geometry(*args[:-1])
    knobs = conv2d_nchwc.nchwc_knobs(g, args[-1], config_for_direct_call(NCHWC_TEMPLATE, args))
    bias = inputs[2] if len(inputs) > 2 else None
    a = attrs
    extra = conv2d_nchwc.knob_attrs(knobs)
    return [compute(x, w, bias, a["strides"], a["pads"], a["dilations"], extra)]


def dwconv_nchwc_task_args(
    x_shape: Sequence[int], x_dtype: str, w_shape: Sequence[int], attrs: dict[str, Any]
) -> tuple[Any, ...]:
    """The ``depthwise_conv2d_NCHWc.llvm`` arguments (the NCHW depthwise workload, channel
    multiplier 1) of a ``dwconv_nchwc`` node."""
    N, _, H, W, _ = (int(d) for d in x_shape)
    KH, KW = int(w_shape[1]), int(w_shape[2])
    geometry = (tuple(attrs["strides"]), tuple(attrs["pads"]), tuple(attrs["dilations"]))
    return (N, attrs["channels"], H, W, 1, KH, KW, *geometry, x_dtype)


def _dwconv_nchwc(inputs: Sequence[Any], attrs: dict[str, Any]) -> list[Any] | None:
    """Blocked depthwise convolutions: the ``depthwise_conv2d_NCHWc.llvm`` compute with the
    tile of the task's best record (the fallback's without one); the block is the graph's."""
    from ember.tir.topi.conv_nchwc import depthwise_conv2d_nchwc as compute
    from ember.tuner.template import config_for_direct_call

    x, w = inputs[0], inputs[1]
    if str(x.dtype) not in ("float32", "float64"):
        return None
    args = dwconv_nchwc_task_args(_dims(x), str(x.dtype), _dims(w), attrs)
    g = depthwise_conv2d.geometry_of(args)
    cfg = config_for_direct_call(DEPTHWISE_NCHWC_TEMPLATE, args)
    knobs = depthwise_conv2d_nchwc.depthwise_nchwc_knobs(g, args[-1], cfg)
    knobs = depthwise_conv2d_nchwc.fit_block(knobs, _dims(x)[4], args[-1])
    bias = inputs[2] if len(inputs) > 2 else None
    a = attrs
    extra = depthwise_conv2d_nchwc.knob_attrs(knobs)
    return [compute(x, w, bias, a["strides"], a["pads"], a["dilations"], extra)]


def _depthwise(x: Any, w: Any, bias: Any, attrs: dict[str, Any]) -> list[Any] | None:
    """Depthwise convolutions: the ``depthwise_conv2d_nchw.llvm`` template, with the
    knobs of the task's best record where one applies."""
    from ember.tuner.template import config_for_direct_call

    args = depthwise_task_args(_dims(x), x.dtype, _dims(w), w.dtype, attrs)
    if args is None:
        return None
    g = depthwise_conv2d.geometry_of(args)
    cfg = config_for_direct_call(DEPTHWISE_TEMPLATE, args)
    knobs = depthwise_conv2d.depthwise_knobs(g, args[4], x.dtype, cfg)
    return [depthwise_conv2d.depthwise_flat(x, w, bias, g, *knobs)]


def task_for(
    op: str, in_types: Sequence[Any], attrs: dict[str, Any]
) -> tuple[str, tuple[Any, ...]] | None:
    """``(template name, arguments)`` of the tuning task behind a node of ``op`` on
    ``in_types`` (objects with ``shape`` and ``dtype``), or None where no template
    applies: convolutions the conv strategy takes (``conv2d_nchw.llvm``, or
    ``depthwise_conv2d_nchw.llvm`` for depthwise ones), blocked ``conv_nchwc`` ones as
    ``conv2d_NCHWc.llvm`` of their NCHW workload (``dwconv_nchwc`` ones as
    ``depthwise_conv2d_NCHWc.llvm``), and ``dense_packed`` GEMMs as
    ``matmul.llvm`` of ``(M, N, K)`` with M the product of the leading dims."""
    if op == "conv":
        x, w = in_types[0], in_types[1]
        args = conv_task_args(x.shape, str(x.dtype), w.shape, str(w.dtype), attrs)
        if args is not None:
            return choose_conv_task(args)
        args = depthwise_task_args(x.shape, str(x.dtype), w.shape, str(w.dtype), attrs)
        return None if args is None else (DEPTHWISE_TEMPLATE, args)
    if op == "conv_nchwc" and str(in_types[0].dtype) == "float32":
        x, w = in_types[0], in_types[1]
        return NCHWC_TEMPLATE, nchwc_task_args(x.shape, "float32", w.shape, attrs)
    if op == "dwconv_nchwc" and str(in_types[0].dtype) == "float32":
        x, w = in_types[0], in_types[1]
        return DEPTHWISE_NCHWC_TEMPLATE, dwconv_nchwc_task_args(x.shape, "float32", w.shape, attrs)
    if op == "dense_packed" and str(in_types[0].dtype) == "float32":
        a = tuple(int(d) for d in in_types[0].shape)
        m = 1
        for d in a[:-1]:
            m *= d
        return MATMUL_TEMPLATE, (m, int(attrs["n"]), a[-1], "float32")
    return None


def _int8_packed(
    inputs: Sequence[Any], attrs: dict[str, Any], target: str | None = None
) -> list[Any] | None:
    """``matmul_int8_packed`` (u8 x packed s8 -> s32): the ``matmul_int8.llvm`` compute,
    tensorized to AVX-512 VNNI by its schedule, where the target CPU (None: the host)
    has VNNI."""
    from ember.codegen_llvm.schedules.matmul_int8 import int8_gemm
    from ember.codegen_llvm.tensor_intrinsics import has_vnni

    a, p = inputs
    if not has_vnni(target) or a.ndim != 2 or a.dtype != "uint8" or p.dtype != "int8":
        return None
    M, K = _dims(a)
    return [int8_gemm(a, p, M, int(attrs["n"]), K)[1]]


def _max_pool(inputs: Sequence[Any], attrs: dict[str, Any]) -> list[Any] | None:
    """2-D NCHW float32 max pooling without dilation or ceil mode: ``pool2d.llvm``'s compute
    (the graph schedule applies its schedule where the pool is the kernel's output)."""
    from ember.codegen_llvm.schedules.pool2d import max_pool2d_graph

    x = inputs[0]
    kernel, strides, pads = attrs["kernel"], attrs["strides"], attrs["pads"]
    if x.ndim != 4 or x.dtype != "float32" or len(kernel) != 2 or attrs["ceil_mode"]:
        return None
    if any(d != 1 for d in attrs["dilations"]):
        return None
    return [max_pool2d_graph(x, tuple(kernel), tuple(strides), tuple(pads))]


STRATEGIES: dict[str, Strategy] = {
    "conv": _conv,
    "conv_nchwc": _conv_nchwc,
    "dwconv_nchwc": _dwconv_nchwc,
    "matmul_int8_packed": _int8_packed,
    "max_pool": _max_pool,
}


def compute_for(
    op: str, inputs: Sequence[Any], attrs: dict[str, Any], target: str | None = None
) -> list[Any] | None:
    """The strategy's compute for ``op`` on the ``llvm`` ``target`` (None: the host)."""
    if op == "matmul_int8_packed":  # the one strategy that depends on the CPU's features
        return _int8_packed(inputs, attrs, target)
    strategy = STRATEGIES.get(op)
    return strategy(inputs, attrs) if strategy is not None else None
