"""Converters for ONNX Resize (opsets 10 to 19) and Upsample (7 to 9).

The output size and the per-axis tap tables (``tir/topi/resize.py``) are worked out
here from the constant scales or sizes, roi and attributes, and passed to Ember's
``resize`` op as constant inputs; axes that keep their size under an identity map
get no tables. Upsample and opset-10 Resize are asymmetric with floor for nearest.
Antialiasing (opset 18) widens a shrinking axis's linear or cubic filter to ``1 / scale``
times its support; one node reads every tap combination of the resized axes, so where
that product grows past ``MAX_TAP_PRODUCT`` a float resize becomes one node per axis,
each reading only its own taps (ONNX's reference is separable in the same way; the
intermediate is rounded to the input's dtype between the passes).
"""

from __future__ import annotations

import numpy as np

from ember.errors import ArgumentError, UnsupportedOperatorError
from ember.frontend.onnx_import.context import ConvertContext
from ember.frontend.onnx_import.ops_transform import _static
from ember.frontend.onnx_import.registry import converter
from ember.frontend.ops.registry import normalize_axis
from ember.tir.topi.resize import COORD_MODES, NEAREST_MODES, resize_taps

# Tap combinations one resize node may read per output element before an antialiased
# resize is split into one node per axis (a 2-D cubic shrink by 4 reads 16 x 16).
MAX_TAP_PRODUCT = 64


def _floats(ctx: ConvertContext, i: int) -> tuple[float, ...] | None:
    if not ctx.has_input(i):
        return None
    data = np.asarray(ctx.constant(i)).reshape(-1)
    return tuple(float(v) for v in data) if data.size else None


def _mode(ctx: ConvertContext) -> str:
    mode = ctx.attr("mode", "nearest")
    mode = "linear" if mode in ("bilinear", "trilinear") else mode
    if mode not in ("nearest", "linear", "cubic"):
        raise ArgumentError(f"{ctx.op_type} '{ctx.name}': unknown mode {mode!r}")
    return mode


def _sizes_from_scales(src: tuple[int, ...], scales: tuple[float, ...]) -> tuple[int, ...]:
    return tuple(int(np.floor(n * s + 1e-9)) for n, s in zip(src, scales))


def _keep_aspect(
    ctx: ConvertContext, src: tuple[int, ...], sizes: list[int], axes: list[int]
) -> tuple[list[int], list[float]]:
    policy = ctx.attr("keep_aspect_ratio_policy", "stretch") if ctx.opset >= 18 else "stretch"
    scales = [sizes[a] / src[a] for a in range(len(src))]
    if policy == "stretch":
        return sizes, scales
    if policy not in ("not_larger", "not_smaller"):
        raise ArgumentError(f"Resize '{ctx.name}': unknown keep_aspect_ratio_policy {policy!r}")
    pick = min if policy == "not_larger" else max
    scale = pick(scales[a] for a in axes)
    for a in axes:
        scales[a] = scale
        sizes[a] = int(np.floor(src[a] * scale + 0.5))
    return sizes, scales


def _plan(ctx: ConvertContext, src: tuple[int, ...]) -> tuple[list[int], list[float], list[int]]:
    """Output sizes, scales and the axes they name (all axes unless ``axes`` is given)."""
    n = len(src)
    axes = list(range(n))
    if ctx.opset >= 18 and ctx.has_attr("axes"):
        axes = [normalize_axis(a, n, "Resize axis") for a in ctx.attr("axes")]
    scales = _floats(ctx, 1 if ctx.opset < 11 else 2)
    sizes = None
    if ctx.opset >= 11 and ctx.has_input(3) and np.asarray(ctx.constant(3)).size:
        sizes = [int(v) for v in np.asarray(ctx.constant(3)).reshape(-1)]
    if (scales is None) == (sizes is None):
        raise ArgumentError(f"Resize '{ctx.name}': give exactly one of scales and sizes")
    given = scales if scales is not None else sizes
    if len(given) != len(axes):  # type: ignore[arg-type]
        raise ArgumentError(f"Resize '{ctx.name}': {len(given)} values for {len(axes)} axes")
    if scales is not None:
        full = [1.0] * n
        for a, s in zip(axes, scales):
            full[a] = s
        if any(s <= 0 for s in full):
            raise ArgumentError(f"Resize '{ctx.name}': scales {list(scales)} must be positive")
        return list(_sizes_from_scales(src, tuple(full))), full, axes
    out = list(src)
    for a, s in zip(axes, sizes):  # type: ignore[arg-type]
        out[a] = s
    out, full = _keep_aspect(ctx, src, out, axes)
    return out, full, axes


def _roi(ctx: ConvertContext, n: int, axes: list[int]) -> list[tuple[float, float]]:
    crop = ctx.attr("coordinate_transformation_mode", "") == "tf_crop_and_resize"
    roi = _floats(ctx, 1) if ctx.opset >= 11 and crop else None  # read only where it is used
    out = [(0.0, 1.0)] * n
    if roi is not None and len(roi) == 2 * len(axes):
        for k, a in enumerate(axes):
            out[a] = (roi[k], roi[len(axes) + k])
    return out


def _emit(
    ctx: ConvertContext, src: tuple[int, ...], sizes: list[int], scales: list[float], opts: dict
) -> list[str]:
    if any(d < 1 for d in sizes):
        raise UnsupportedOperatorError(
            f"{ctx.op_type} '{ctx.name}': output {sizes} is a zero-size tensor"
        )
    dtype = ctx.type(0).dtype
    wdtype = "float32" if dtype in ("float32", "float16") else "float64"
    axes: list[int] = []
    layout: list[str] = []
    tables: list[list[str]] = []
    product = 1
    for a, (n_in, n_out) in enumerate(zip(src, sizes)):
        if n_in == n_out and scales[a] == 1.0 and opts["coord"] != "tf_crop_and_resize":
            continue  # an identity map on this axis under every coordinate mode
        taps = resize_taps(
            n_in, n_out, scales[a], opts["mode"], opts["coord"], opts["nearest"],
            opts["cubic_a"], opts["exclude"], opts["roi"][a], opts["antialias"],
        )  # fmt: skip
        spec = "i"
        tables.append([ctx.const(taps.index)])
        product *= taps.index.shape[1]
        if taps.weight is not None:
            spec += "w"
            tables[-1].append(ctx.const(taps.weight.astype(wdtype)))
        if taps.inside is not None:
            spec += "m"
            tables[-1].append(ctx.const(taps.inside))
        axes.append(a)
        layout.append(spec)
    if not axes:
        return [ctx.input(0)]
    extrap = int(opts["extrap"]) if "int" in dtype else opts["extrap"]
    if product > MAX_TAP_PRODUCT and dtype in ("float32", "float64"):
        out = ctx.input(0)
        for a, spec, tabs in zip(axes, layout, tables):
            attrs = {"axes": (a,), "layout": (spec,), "extrapolation": extrap}
            out = ctx.emit1("resize", [out, *tabs], attrs)
        return [out]
    attrs = {"axes": tuple(axes), "layout": tuple(layout), "extrapolation": extrap}
    return ctx.emit("resize", [ctx.input(0), *[t for tabs in tables for t in tabs]], attrs)


def _options(ctx: ConvertContext, legacy: bool, roi: list) -> dict:
    coord = "asymmetric" if legacy else ctx.attr("coordinate_transformation_mode", "half_pixel")
    nearest = "floor" if legacy else ctx.attr("nearest_mode", "round_prefer_floor")
    if coord not in COORD_MODES or (coord == "half_pixel_symmetric" and ctx.opset < 19):
        raise ArgumentError(f"Resize '{ctx.name}': unknown coordinate mode {coord!r}")
    if nearest not in NEAREST_MODES:
        raise ArgumentError(f"Resize '{ctx.name}': unknown nearest_mode {nearest!r}")
    return {
        "mode": _mode(ctx),
        "coord": coord,
        "nearest": nearest,
        "cubic_a": float(ctx.attr("cubic_coeff_a", -0.75)),
        "exclude": bool(ctx.attr("exclude_outside", 0)),
        "extrap": float(ctx.attr("extrapolation_value", 0.0)),
        "roi": roi,
        # antialias filters linear and cubic shrinking only (nearest ignores it)
        "antialias": ctx.opset >= 18 and bool(ctx.attr("antialias", 0)),
    }


@converter("Resize", since=10)
def resize(ctx: ConvertContext) -> list[str]:
    """ONNX Resize: sizes or scales, ROI and coordinate mode resolved into per-axis tables."""
    src = _static(ctx, 0)
    sizes, scales, axes = _plan(ctx, src)
    opts = _options(ctx, ctx.opset < 11, _roi(ctx, len(src), axes))
    if opts["mode"] == "cubic" and ctx.opset < 11:
        raise ArgumentError(f"Resize '{ctx.name}': cubic needs opset 11")
    return _emit(ctx, src, sizes, scales, opts)


def _upsample(ctx: ConvertContext, scales: tuple[float, ...]) -> list[str]:
    src = _static(ctx, 0)
    if len(scales) != len(src) or any(s < 1 for s in scales):
        raise ArgumentError(f"Upsample '{ctx.name}': scales {list(scales)} do not fit {src}")
    opts = _options(ctx, True, [(0.0, 1.0)] * len(src))
    if opts["mode"] == "cubic":
        raise ArgumentError(f"Upsample '{ctx.name}': unknown mode 'cubic'")
    return _emit(ctx, src, list(_sizes_from_scales(src, scales)), list(scales), opts)


@converter("Upsample", since=7, until=8)
def upsample_7(ctx: ConvertContext) -> list[str]:
    """ONNX Upsample opsets 7-8: scales are an attribute."""
    return _upsample(ctx, tuple(float(s) for s in ctx.attr("scales")))


@converter("Upsample", since=9, until=9)
def upsample_9(ctx: ConvertContext) -> list[str]:
    """ONNX Upsample opset 9: scales are a constant input."""
    scales = _floats(ctx, 1)
    if scales is None:
        raise ArgumentError(f"Upsample '{ctx.name}': scales are missing")
    return _upsample(ctx, scales)
