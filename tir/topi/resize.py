"""Resize as a separable gather with per-axis tap tables, built ahead of time.

Every ONNX resize (nearest, linear, cubic; each coordinate transformation) is, per
resized axis, a fixed small set of source positions and weights for each output
position. With static shapes and constant scales those tables are known at compile
time, so :func:`resize_taps` computes them once in numpy (the coordinate arithmetic
is then exact in float64, not repeated per element) and :func:`resize` is the tensor
expression that reads the tables: ``out[o] = sum over taps prod_a w_a[o_a, t_a] *
X[idx_a[o_a, t_a]]``. A nearest axis has one tap and no weight; tf_crop_and_resize
adds a per-axis mask of positions that fall outside the input (they read the
extrapolation value). Antialiasing (linear and cubic, when an axis shrinks) stretches
the filter by ``1 / scale``: more taps per output position, each weighted by the
filter at ``scale`` times its distance, the weights normalised to sum to 1, as ONNX's
reference computes them.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from ember.errors import ArgumentError
from ember.tir import dtype as dt
from ember.tir import expr as E
from ember.tir import op as _op
from ember.tir.te import operation as te
from ember.tir.te.tensor import Tensor
from ember.tir.topi.transform import static_shape

COORD_MODES = (
    "half_pixel",
    "half_pixel_symmetric",
    "pytorch_half_pixel",
    "align_corners",
    "asymmetric",
    "tf_crop_and_resize",
)
NEAREST_MODES = ("round_prefer_floor", "round_prefer_ceil", "floor", "ceil")


@dataclass(frozen=True)
class AxisTaps:
    """One axis's tables: ``index[o, t]``, ``weight[o, t]`` (None for nearest), and
    ``inside[o]`` (None unless some output position extrapolates)."""

    index: np.ndarray
    weight: np.ndarray | None
    inside: np.ndarray | None


def source_coords(
    n_in: int, n_out: int, scale: float, mode: str, roi: tuple[float, float]
) -> np.ndarray:
    """The input coordinate of each output position (ONNX's coordinate_transformation_mode).
    As in ONNX's reference, the resized length in the formulas is ``scale * n_in``, which
    differs from the integer ``n_out`` when the scale does not divide evenly."""
    x = np.arange(n_out, dtype=np.float64)
    length = scale * n_in
    if mode == "half_pixel":
        return (x + 0.5) / scale - 0.5
    if mode == "half_pixel_symmetric":
        offset = n_in / 2 * (1 - n_out / length)
        return offset + (x + 0.5) / scale - 0.5
    if mode == "pytorch_half_pixel":
        return (x + 0.5) / scale - 0.5 if length != 1 else np.full(n_out, -0.5)
    if mode == "align_corners":
        return x * (n_in - 1) / (length - 1) if length != 1 else np.zeros(n_out)
    if mode == "asymmetric":
        return x / scale
    if mode == "tf_crop_and_resize":
        lo, hi = roi
        if length != 1:
            return lo * (n_in - 1) + x * (hi - lo) * (n_in - 1) / (length - 1)
        return np.full(n_out, 0.5 * (lo + hi) * (n_in - 1))
    raise ArgumentError(f"resize: unknown coordinate_transformation_mode {mode!r}")


def _nearest(x: np.ndarray, mode: str) -> np.ndarray:
    if mode == "round_prefer_floor":
        return np.ceil(x - 0.5)
    if mode == "round_prefer_ceil":
        return np.floor(x + 0.5)
    if mode == "floor":
        return np.floor(x)
    if mode == "ceil":
        return np.ceil(x)
    raise ArgumentError(f"resize: unknown nearest_mode {mode!r}")


def cubic_coeffs(s: Any, a: float) -> tuple[Any, Any, Any, Any]:
    """Keys' cubic kernel at distances 1+s, s, 1-s, 2-s (taps floor-1 .. floor+2), for a
    numpy array of fractions or a tensor-expression one (GridSample's runtime coordinates)."""

    def near(d: Any) -> Any:
        return ((a + 2) * d - (a + 3)) * d * d + 1

    def far(d: Any) -> Any:
        return ((a * d - 5 * a) * d + 8 * a) * d - 4 * a

    return far(1 + s), near(s), near(1 - s), far(2 - s)


def _cubic_weights(s: np.ndarray, a: float) -> np.ndarray:
    return np.stack(cubic_coeffs(s, a), axis=1)


def _keys(d: np.ndarray, a: float) -> np.ndarray:
    """Keys' cubic kernel at distances ``d``: zero from 2 on."""
    d = np.abs(d)
    near = ((a + 2) * d - (a + 3)) * d * d + 1
    far = ((a * d - 5 * a) * d + 8 * a) * d - 4 * a
    return np.where(d <= 1, near, np.where(d < 2, far, 0.0))


def _antialias_taps(
    x: np.ndarray, scale: float, mode: str, cubic_a: float
) -> tuple[np.ndarray, np.ndarray]:
    """(raw source positions, normalised weights) of a filter stretched by ``1 / scale``:
    the taps within the filter's support (1 linear, 2 cubic) times ``1 / scale`` of ``x``.
    As in ONNX's reference, a whole-number ``x`` is the right end of the interval to its
    left (fraction 1), which picks the same taps with the same weights."""
    base = np.floor(x)
    frac = x - base
    whole = frac == 0
    base, frac = np.where(whole, base - 1, base), np.where(whole, 1.0, frac)
    support = 1.0 if mode == "linear" else 2.0
    start = int(np.floor(-support / scale) + 1)
    offsets = np.arange(start, 2 - start)
    dist = (offsets[None, :] - frac[:, None]) * scale
    if mode == "linear":
        weight = np.clip(1 - np.abs(dist), 0, 1)
    else:
        weight = _keys(dist, cubic_a)
    return base[:, None] + offsets, weight / weight.sum(axis=1, keepdims=True)


def resize_taps(
    n_in: int,
    n_out: int,
    scale: float,
    mode: str,
    coord_mode: str,
    nearest_mode: str = "round_prefer_floor",
    cubic_a: float = -0.75,
    exclude_outside: bool = False,
    roi: tuple[float, float] = (0.0, 1.0),
    antialias: bool = False,
) -> AxisTaps:
    """The tap tables of one axis resized from ``n_in`` to ``n_out`` positions;
    ``antialias`` stretches a linear or cubic filter where the axis shrinks."""
    x = source_coords(n_in, n_out, scale, coord_mode, roi)
    inside = None
    if coord_mode == "tf_crop_and_resize":
        ok = (x >= 0) & (x <= n_in - 1)
        inside = None if ok.all() else ok.astype(np.int32)
    if mode == "nearest":
        idx = np.clip(_nearest(x, nearest_mode), 0, n_in - 1)[:, None]
        return AxisTaps(idx.astype(np.int32), None, inside)
    base = np.floor(x)
    s = x - base
    if antialias and scale < 1 and mode in ("linear", "cubic"):
        raw, weight = _antialias_taps(x, scale, mode, cubic_a)
        if exclude_outside:
            weight = _exclude_outside(raw, weight, n_in)
    elif mode == "linear":
        raw = base[:, None] + np.array([0, 1])
        weight = np.stack([1 - s, s], axis=1)
    elif mode == "cubic":
        raw = base[:, None] + np.array([-1, 0, 1, 2])
        weight = _cubic_weights(s, cubic_a)
        if exclude_outside:
            weight = _exclude_outside(raw, weight, n_in)
    else:
        raise ArgumentError(f"resize: unknown mode {mode!r}")
    idx = np.clip(raw, 0, n_in - 1).astype(np.int32)
    return AxisTaps(idx, weight, inside)


def _exclude_outside(raw: np.ndarray, weight: np.ndarray, n_in: int) -> np.ndarray:
    """Weights of taps off the input dropped and the rest renormalised (exclude_outside)."""
    weight = np.where((raw >= 0) & (raw <= n_in - 1), weight, 0.0)
    total = weight.sum(axis=1, keepdims=True)
    return weight / np.where(total == 0, 1.0, total)


def _round_saturate(v: E.PrimExpr, dtype: str) -> E.PrimExpr:
    """Integer outputs as ONNX's reference makes them: rounded half to even, then clamped
    to the type's range (onnxruntime truncates instead)."""
    away = _op.round(v)  # halves away from zero
    half = _op.abs(v - _op.floor(v) - 0.5) < 1e-11  # a half, up to the taps' rounding error
    even = _op.round(v * 0.5) * 2.0
    nearest = E.select(half, even, away)
    lo, hi = te.min_value(dtype), te.max_value(dtype)
    return E.max_(E.min_(nearest, E.cast(v.dtype, hi)), E.cast(v.dtype, lo))


def _interpolate(
    X: Tensor, axes: list[int], taps: list[list[tuple[Any, Any]]], idx: list[Any]
) -> E.PrimExpr:
    """Interpolate along the last listed axis, of interpolations along the ones before it:
    the first axis innermost, the order (and so the rounding) of ONNX's separable reference."""
    if not axes:
        return X[tuple(idx)]
    total: E.PrimExpr | None = None
    for pos, w in taps[-1]:
        sub = list(idx)
        sub[axes[-1]] = pos
        value = _interpolate(X, axes[:-1], taps[:-1], sub)
        if w is not None:
            value = (value if value.dtype == w.dtype else E.cast(w.dtype, value)) * w
        total = value if total is None else total + value
    assert total is not None
    return total


def resize(
    X: Tensor,
    axes: Sequence[int],
    tables: Sequence[Sequence[Tensor]],
    extrapolation: float = 0.0,
) -> Tensor:
    """Read ``X`` through each resized axis's tables ``(index, [weight], [inside])`` (in
    that order; the weight and mask tensors present as :class:`AxisTaps` said)."""
    src = static_shape(X)
    out_shape = list(src)
    for a, tabs in zip(axes, tables):
        out_shape[a] = static_shape(tabs[0])[0]
    if len(axes) != len(tables):
        raise ArgumentError("resize: one table set per resized axis")

    def f(*o: E.PrimExpr) -> E.PrimExpr:
        per_axis = []
        masks = []
        for a, tabs in zip(axes, tables):
            index, rest = tabs[0], list(tabs[1:])
            weight = rest.pop(0) if rest and rest[0].dtype != "int32" else None
            if rest:
                masks.append(E.eq(rest[0][(o[a],)], 1))
            taps = static_shape(index)[1]
            per_axis.append(
                [
                    (index[(o[a], t)], None if weight is None else weight[(o[a], t)])
                    for t in range(taps)
                ]
            )
        total = _interpolate(X, list(axes), per_axis, list(o))
        if total.dtype != X.dtype and not dt.is_float(X.dtype):
            total = _round_saturate(total, X.dtype)
        if total.dtype != X.dtype:
            total = E.cast(X.dtype, total)
        for m in masks:
            total = E.select(m, total, E.const(extrapolation, X.dtype))
        return total

    return te.compute(tuple(out_shape), f, name="resize", tag="injective")
