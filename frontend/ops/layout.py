"""Channel-blocked layout ops: ``layout_transform``, ``conv_nchwc``, ``dwconv_nchwc``, ...

The ONNX importer never makes these; the ``alter_conv_layout`` pass does, when it
moves CPU convolutions to the NCHW[c] layout (``tir/topi/conv_nchwc.py``).

Attributes (every one present):
- ``layout_transform``: ``src`` and ``dst`` channel blocks (0 means plain NCHW), and
  ``channels``, the logical channel count (blocked lanes past it are zero).
- ``max_pool_nchwc``: those of ``max_pool`` (2-D), on an NCHW[c] input.
- ``avg_pool_nchwc``: those of ``avg_pool`` (2-D), on an NCHW[c] input.
- ``conv_nchwc``: ``strides``, ``dilations`` (pairs), ``pads`` (top, left, bottom,
  right), ``in_channels`` and ``channels``, the logical input and output channel
  counts (what a tuning task of the NCHW workload needs). Inputs: the blocked input
  ``[N, C/cb, H, W, cb]``, the weights already blocked at compile time ``[O/ob,
  C/cb, KH, KW, cb, ob]`` and an optional bias ``[O/ob, ob]``.
- ``dwconv_nchwc`` (a depthwise convolution, one filter per channel): ``strides``,
  ``dilations``, ``pads`` as above and ``channels``, the logical channel count.
  Inputs: the blocked input, the weights blocked at compile time ``[C/cb, KH, KW,
  cb]`` and an optional bias ``[C/cb, cb]``.
- ``dwconv_pw_nchwc`` (a ``dwconv_nchwc``, a clip and a 1x1 stride-1 ``conv_nchwc`` on
  its result, made by ``fuse_dw_pointwise``): the depthwise conv's ``strides``,
  ``dilations``, ``pads`` and ``channels``, the clip's ``min`` and ``max`` (None: no
  bound) and the 1x1 conv's ``out_channels``. Inputs: the blocked input, the depthwise
  weights and bias, the 1x1 conv's blocked weights ``[O/ob, C/cb, 1, 1, cb, ob]`` and
  bias.
- ``expand_dwconv_pw_nchwc`` (a 1x1 stride-1 ``conv_nchwc`` with a bias, a clip, and a
  ``dwconv_pw_nchwc`` on its result: a MobileNet's inverted residual block, made by
  ``fuse_expand_dw_pointwise``): those of ``dwconv_pw_nchwc``, plus the expand conv's
  ``in_channels`` and its clip's ``expand_min`` and ``expand_max``; ``channels`` counts
  the expanded channels. Inputs: the blocked input, the expand conv's blocked weights
  and bias, then the ``dwconv_pw_nchwc`` inputs after its first.
- ``conv_winograd_nchwc`` (a 3x3 stride-1 ``conv_nchwc`` by Winograd F(m x m, 3 x 3),
  made by ``transform_winograd_weights``): ``pads``, ``in_channels``, ``channels``,
  ``out_block`` (the output's channel block) and the knobs ``m`` and the GEMM's ``mr``,
  ``nr``, ``ku``, ``nc_panels`` (:data:`WINOGRAD_KNOBS`; the weights were transformed
  for ``m`` and ``nr``).
  Inputs: the blocked input, the transformed weights ``[a, a, ceil(O/nr), C, nr]``
  (``a = m + 2``, ``O`` and ``C`` the blocked channel counts) and an optional bias.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ember.errors import ArgumentError
from ember.frontend.graph import TensorType
from ember.frontend.op_kinds import INJECTIVE, OUT_ELEMWISE_FUSABLE
from ember.frontend.ops.nn import infer_pool_window
from ember.frontend.ops.registry import register_op
from ember.tir import topi
from ember.tir.topi.conv import conv_out_size
from ember.tir.topi.conv_nchwc import blocks
from ember.tir.topi.winograd import WinogradShape, winograd_conv2d_nchwc

Types = Sequence[TensorType]


def _infer_layout_transform(types: Types, attrs: dict[str, Any]) -> list[TensorType]:
    x = types[0]
    src, dst, channels = attrs["src"], attrs["dst"], attrs["channels"]
    ok = x.ndim == (5 if src else 4) and (not src or x.shape[4] == src)
    if not ok or (isinstance(x.shape[1], int) and x.shape[1] * max(src, 1) < channels):
        raise ArgumentError(f"layout_transform: input {x} is not NCHW[{src}]c of {channels}")
    n, _, h, w = x.shape[:4]
    if dst == 0:
        return [TensorType((n, channels, h, w), x.dtype)]
    return [TensorType((n, blocks(channels, dst), h, w, dst), x.dtype)]


@register_op("layout_transform", INJECTIVE, infer=_infer_layout_transform)
def layout_transform(inputs: Sequence[Any], attrs: dict[str, Any]) -> list[Any]:
    """NCHW <-> NCHW[c] (or one block size to another), zero-padding the last block."""
    return [topi.layout_transform(inputs[0], attrs["src"], attrs["dst"], attrs["channels"])]


def output_plane(x: TensorType, kh: int, kw: int, attrs: dict[str, Any]) -> tuple[Any, Any]:
    """The output height and width of a blocked convolution of ``x`` (a symbolic input
    dimension stays symbolic)."""
    (sh, sw), (dh, dw), (pt, pl, pb, pr) = attrs["strides"], attrs["dilations"], attrs["pads"]
    h, w = x.shape[2], x.shape[3]
    oh = conv_out_size(h, kh, sh, dh, pt, pb) if isinstance(h, int) else h
    ow = conv_out_size(w, kw, sw, dw, pl, pr) if isinstance(w, int) else w
    return oh, ow


def _infer_conv_nchwc(types: Types, attrs: dict[str, Any]) -> list[TensorType]:
    x, w = types[0], types[1]
    g = attrs.get("groups", 1)
    if x.ndim != 5 or w.ndim != 6 or x.shape[1] != w.shape[1] * g or x.shape[4] != w.shape[4]:
        raise ArgumentError(f"conv_nchwc: input {x} and blocked weights {w} do not fit")
    if w.shape[0] % g:
        raise ArgumentError(f"conv_nchwc: {w.shape[0]} output blocks do not split in {g} groups")
    if len(types) > 2 and types[2].shape != (w.shape[0], w.shape[5]):
        raise ArgumentError(f"conv_nchwc: bias {types[2]} does not fit weights {w}")
    oh, ow = output_plane(x, int(w.shape[2]), int(w.shape[3]), attrs)  # weights: static
    return [TensorType((x.shape[0], w.shape[0], oh, ow, w.shape[5]), x.dtype)]


@register_op("conv_nchwc", OUT_ELEMWISE_FUSABLE, infer=_infer_conv_nchwc, num_inputs=(2, 3))
def conv_nchwc(inputs: Sequence[Any], attrs: dict[str, Any]) -> list[Any]:
    """A 2-D convolution (grouped with ``groups``, each group whole channel blocks) on
    channel-blocked tensors with pre-blocked weights."""
    bias = inputs[2] if len(inputs) > 2 else None
    a = attrs
    return [
        topi.conv2d_nchwc(
            inputs[0], inputs[1], bias, a["strides"], a["pads"], a["dilations"],
            groups=a.get("groups", 1),
        )
    ]  # fmt: skip


WINOGRAD_KNOBS = ("m", "mr", "nr", "ku", "nc_panels")


def _winograd_shape(x_shape: Sequence[int], attrs: dict[str, Any]) -> WinogradShape:
    N, _, H, W, _ = x_shape
    C, O = attrs["in_channels"], attrs["channels"]
    return WinogradShape(N, C, H, W, O, tuple(attrs["pads"]), attrs["m"])


def _infer_conv_winograd_nchwc(types: Types, attrs: dict[str, Any]) -> list[TensorType]:
    x, u = types[0], types[1]
    ob, a = attrs["out_block"], attrs["m"] + 2
    if x.ndim != 5 or not (x.is_static and u.is_static) or u.ndim != 5 or u.shape[:2] != (a, a):
        raise ArgumentError(f"conv_winograd_nchwc: input {x} or weights {u} do not fit")
    xs, us = [int(d) for d in x.shape], [int(d) for d in u.shape]  # static (checked above)
    if us[3] != xs[1] * xs[4] or us[4] != attrs["nr"]:
        raise ArgumentError(f"conv_winograd_nchwc: weights {u} do not fit input {x}")
    g = _winograd_shape(xs, attrs)
    if us[2] * us[4] < blocks(g.O, ob) * ob:
        raise ArgumentError(f"conv_winograd_nchwc: weights {u} hold fewer than {g.O} outputs")
    if len(types) > 2 and types[2].shape != (blocks(g.O, ob), ob):
        raise ArgumentError(f"conv_winograd_nchwc: bias {types[2]} does not fit {g.O} outputs")
    return [TensorType((g.N, blocks(g.O, ob), g.OH, g.OW, ob), x.dtype)]


@register_op(
    "conv_winograd_nchwc", OUT_ELEMWISE_FUSABLE, infer=_infer_conv_winograd_nchwc, num_inputs=(2, 3)
)
def conv_winograd_nchwc(inputs: Sequence[Any], attrs: dict[str, Any]) -> list[Any]:
    """A blocked 3x3 stride-1 convolution by Winograd, on weights transformed at compile time."""
    x = inputs[0]
    bias = inputs[2] if len(inputs) > 2 else None
    g = _winograd_shape([int(getattr(d, "value", d)) for d in x.shape], attrs)
    knobs = {k: attrs[k] for k in WINOGRAD_KNOBS}
    return [winograd_conv2d_nchwc(x, inputs[1], bias, g, attrs["out_block"], knobs)]


def _infer_dwconv_nchwc(types: Types, attrs: dict[str, Any]) -> list[TensorType]:
    x, w = types[0], types[1]
    if x.ndim != 5 or w.ndim != 4 or x.shape[1] != w.shape[0] or x.shape[4] != w.shape[3]:
        raise ArgumentError(f"dwconv_nchwc: input {x} and blocked weights {w} do not fit")
    if len(types) > 2 and types[2].shape != (w.shape[0], w.shape[3]):
        raise ArgumentError(f"dwconv_nchwc: bias {types[2]} does not fit weights {w}")
    oh, ow = output_plane(x, int(w.shape[1]), int(w.shape[2]), attrs)  # weights: static
    return [TensorType((x.shape[0], x.shape[1], oh, ow, x.shape[4]), x.dtype)]


@register_op("dwconv_nchwc", OUT_ELEMWISE_FUSABLE, infer=_infer_dwconv_nchwc, num_inputs=(2, 3))
def dwconv_nchwc(inputs: Sequence[Any], attrs: dict[str, Any]) -> list[Any]:
    """A 2-D depthwise convolution on channel-blocked tensors with pre-blocked weights."""
    bias = inputs[2] if len(inputs) > 2 else None
    a = attrs
    return [
        topi.depthwise_conv2d_nchwc(
            inputs[0], inputs[1], bias, a["strides"], a["pads"], a["dilations"]
        )
    ]


_POINTWISE = {"strides": (1, 1), "pads": (0,) * 4, "dilations": (1, 1)}  # a 1x1 conv's


def _infer_dwconv_pw_nchwc(types: Types, attrs: dict[str, Any]) -> list[TensorType]:
    (mid,) = _infer_dwconv_nchwc(types[:3], attrs)
    (out,) = _infer_conv_nchwc([mid, *types[3:]], _POINTWISE)
    if types[3].shape[2:4] != (1, 1):
        raise ArgumentError(f"dwconv_pw_nchwc: weights {types[3]} are not a 1x1 conv's")
    return [out]


@register_op("dwconv_pw_nchwc", OUT_ELEMWISE_FUSABLE, infer=_infer_dwconv_pw_nchwc, num_inputs=5)
def dwconv_pw_nchwc(inputs: Sequence[Any], attrs: dict[str, Any]) -> list[Any]:
    """A blocked depthwise conv, clipped, then a blocked 1x1 conv on its result."""
    x, dw_w, dw_b, pw_w, pw_b = inputs
    a = attrs
    geometry = (a["strides"], a["pads"], a["dilations"])
    clip = (a["min"], a["max"])
    return [topi.depthwise_pointwise_nchwc(x, dw_w, dw_b, pw_w, pw_b, *geometry, clip)]


def _infer_expand_dwconv_pw_nchwc(types: Types, attrs: dict[str, Any]) -> list[TensorType]:
    if types[1].ndim != 6 or types[1].shape[2:4] != (1, 1):
        raise ArgumentError(f"expand_dwconv_pw_nchwc: weights {types[1]} are not a 1x1 conv's")
    (expanded,) = _infer_conv_nchwc(types[:3], _POINTWISE)
    return _infer_dwconv_pw_nchwc([expanded, *types[3:]], attrs)


@register_op(
    "expand_dwconv_pw_nchwc",
    OUT_ELEMWISE_FUSABLE,
    infer=_infer_expand_dwconv_pw_nchwc,
    num_inputs=7,
)
def expand_dwconv_pw_nchwc(inputs: Sequence[Any], attrs: dict[str, Any]) -> list[Any]:
    """A blocked 1x1 conv, clipped, then a ``dwconv_pw_nchwc`` on its result."""
    a = attrs
    x, w1, b1, dw_w, dw_b, pw_w, pw_b = inputs
    return [
        topi.expand_depthwise_pointwise_nchwc(
            x, w1, b1, dw_w, dw_b, pw_w, pw_b, a["strides"], a["pads"], a["dilations"],
            (a["expand_min"], a["expand_max"]), (a["min"], a["max"]),
        )
    ]  # fmt: skip


def _infer_pool_nchwc(types: Types, attrs: dict[str, Any]) -> list[TensorType]:
    x = types[0]
    if x.ndim != 5 or len(attrs["kernel"]) != 2:
        raise ArgumentError(f"pooling on NCHWc: input {x} is not NCHWc, or the pool is not 2-D")
    (out,) = infer_pool_window([TensorType(x.shape[:4], x.dtype)], attrs)
    return [TensorType((*out.shape, x.shape[4]), x.dtype)]


@register_op("avg_pool_nchwc", OUT_ELEMWISE_FUSABLE, infer=_infer_pool_nchwc)
def avg_pool_nchwc(inputs: Sequence[Any], attrs: dict[str, Any]) -> list[Any]:
    """2-D average pooling on a channel-blocked tensor, lane by lane."""
    a = attrs
    return [
        topi.avg_pool2d_nchwc(
            inputs[0],
            a["kernel"],
            a["strides"],
            a["pads"],
            a["dilations"],
            a["ceil_mode"],
            a["count_include_pad"],
        )
    ]


@register_op("max_pool_nchwc", OUT_ELEMWISE_FUSABLE, infer=_infer_pool_nchwc)
def max_pool_nchwc(inputs: Sequence[Any], attrs: dict[str, Any]) -> list[Any]:
    """2-D max pooling on a channel-blocked tensor, lane by lane."""
    a = attrs
    return [
        topi.max_pool2d_nchwc(
            inputs[0], a["kernel"], a["strides"], a["pads"], a["dilations"], a["ceil_mode"]
        )
    ]
