"""GridSample: read an N-D image at run-time coordinates, with nearest, linear or cubic taps.

Where resize knows its source positions at compile time (``resize.py`` tabulates them),
GridSample takes them from a tensor: ``grid[n, *o]`` holds one normalised coordinate per
spatial axis in [-1, 1], the last spatial axis first (x, y, z). So this compute does the
coordinate arithmetic per output element, as ONNX's reference does: map the coordinate
onto the axis (``align_corners`` puts -1 and 1 on the centres of the end pixels, else on
their outer edges), round it for nearest (half to even), bring a coordinate outside the
image back in for border (clamp) and reflection (mirror about the edges) padding, then
weight the taps around it (``1 - s, s`` linear, Keys' cubic with a = -0.75 as in
``resize.cubic_coeffs``) and read each tap with the same padding rule (zeros: a tap off
the image reads 0). Taps combine with the last axis innermost, the reference's order.
Cubic sampling with border padding follows ONNX's reference too, which clamps the
coordinate; onnxruntime and PyTorch clamp each tap instead, which differs within two
pixels outside the image.

Every read is in bounds whatever the grid holds: tap indices are clamped before they
index, and a coordinate that is NaN or far outside the image (where every tap is padding
anyway) becomes one just off the image before it turns into an integer, so NaN gives 0
with zeros padding, as PyTorch's CUDA kernel does. Coordinates are float32 (float64 for a
float64 grid); taps accumulate in float32 (float64 for a float64 image).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from ember.errors import ArgumentError
from ember.tir import dtype as dt
from ember.tir import expr as E
from ember.tir import op as _op
from ember.tir.te import operation as te
from ember.tir.te.tensor import Tensor
from ember.tir.topi.reduce import widen
from ember.tir.topi.resize import cubic_coeffs
from ember.tir.topi.transform import static_shape

MODES = ("nearest", "linear", "cubic")
PADDING_MODES = ("zeros", "border", "reflection")
CUBIC_A = -0.75
# Tap offsets from floor(x) per mode (nearest reads the rounded coordinate itself).
_OFFSETS = {"nearest": (0,), "linear": (0, 1), "cubic": (-1, 0, 1, 2)}
Tap = tuple[E.PrimExpr, E.PrimExpr | None]  # (in-bounds index, inside condition or None)


@dataclass(frozen=True)
class _Axis:
    """One spatial axis of the image: its size and how coordinates on it are treated."""

    size: int
    align_corners: bool
    padding: str
    cdt: str  # the coordinate dtype

    def c(self, v: float) -> E.PrimExpr:
        return E.const(v, self.cdt)

    @property
    def bounds(self) -> tuple[float, float]:
        """The extent of the image on this axis: pixel centres, or outer edges."""
        n = self.size
        return (0.0, n - 1.0) if self.align_corners else (-0.5, n - 0.5)

    def unnormalize(self, g: E.PrimExpr) -> E.PrimExpr:
        """A grid value in [-1, 1] as a position on the axis."""
        n = self.size
        if self.align_corners:
            return (g + self.c(1.0)) * self.c(0.5) * self.c(n - 1.0)
        return ((g + self.c(1.0)) * self.c(float(n)) - self.c(1.0)) * self.c(0.5)

    def bring_inside(self, x: E.PrimExpr) -> E.PrimExpr:
        """A position outside the image moved in: clamped (border) or mirrored (reflection);
        zeros padding leaves it."""
        lo, hi = self.bounds
        if self.padding == "zeros":
            return x
        if self.padding == "border" or hi == lo:  # onto the end pixels' centres
            last = self.c(self.size - 1.0)
            return E.select(x < self.c(lo), self.c(0.0), E.select(x > self.c(hi), last, x))
        return E.select(
            x < self.c(lo),
            self._mirror(self.c(lo) - x, lo, hi),
            E.select(x > self.c(hi), self._mirror(x - self.c(hi), hi, lo), x),
        )

    def _mirror(self, dx: E.PrimExpr, near: float, far: float) -> E.PrimExpr:
        """The position ``dx`` (>= 0) beyond the edge ``near``, folded back between ``near``
        and ``far``: an even number of whole spans lands it ``r`` in from ``near``, an odd
        one ``r`` in from ``far``."""
        span = abs(far - near)
        k = _op.floor(dx / self.c(span))
        r = dx - k * self.c(span)
        even = E.eq(k - _op.floor(k * self.c(0.5)) * self.c(2.0), self.c(0.0))
        sign = 1.0 if far > near else -1.0
        return E.select(even, self.c(near) + r * self.c(sign), self.c(far) - r * self.c(sign))

    def safe(self, x: E.PrimExpr) -> E.PrimExpr:
        """``x`` where a tap around it can touch the image, else (NaN, far away) a point
        whose taps all lie off it: safe to floor and convert to an integer."""
        lo, hi = -4.0, self.size + 3.0
        near = E.logical_and(x >= self.c(lo), x <= self.c(hi))
        return E.select(near, x, self.c(lo))

    def tap(self, i: E.PrimExpr) -> Tap:
        """(in-bounds index, inside-the-image condition or None) of integer tap ``i``."""
        n = self.size
        if self.padding == "reflection" and n > 1:
            # Integer taps mirror as the reference mirrors them about the float bounds: about
            # the edge pixels' centres (align_corners) or their outer edges.
            period = 2 * (n - 1) if self.align_corners else 2 * n
            m = E.floormod(i, period)
            back = period - m if self.align_corners else period - 1 - m
            i = E.select(m < n, m, back)
        clamped = E.max_(E.min_(i, n - 1), 0)
        if self.padding != "zeros":
            return clamped, None
        return clamped, E.logical_and(i >= 0, i < n)


def _weights(mode: str, s: E.PrimExpr) -> list[E.PrimExpr]:
    if mode == "linear":
        return [1 - s, s]
    return list(cubic_coeffs(s, CUBIC_A))


class Lets:
    """Names shared subterms once (``Let``): every one of the up to 4^r reads uses each
    axis's position, weights and tap indices, which would otherwise be written out again
    in each of them (a 3-D cubic sample would be hundreds of thousands of nodes)."""

    def __init__(self) -> None:
        self.bindings: list[tuple[E.Var, E.PrimExpr]] = []

    def __call__(self, name: str, value: E.PrimExpr) -> E.PrimExpr:
        if isinstance(value, (E.Var, E.IntImm, E.FloatImm)):
            return value
        var = E.Var(name, value.dtype)
        self.bindings.append((var, value))
        return var

    def wrap(self, body: E.PrimExpr) -> E.PrimExpr:
        for var, value in reversed(self.bindings):
            body = E.Let(body.dtype, var, value, body)
        return body


def _axis_terms(
    ax: _Axis, k: str, g: E.PrimExpr, mode: str, acc: str, let: Lets
) -> tuple[list[Tap], list[E.PrimExpr | None]]:
    """One axis's taps and their weights (None for nearest) for grid value ``g``."""
    x = let(f"x{k}", ax.unnormalize(widen(g, ax.cdt)))
    if mode == "nearest":
        x = let(f"x{k}_round", _op.nearbyint(x))  # half to even, as the reference rounds
    x = let(f"x{k}_in", ax.bring_inside(x))
    x = let(f"x{k}_safe", ax.safe(x))
    base = _op.floor(x)
    start = let(f"i{k}", E.cast("int32", base))
    weights: list[E.PrimExpr | None] = [None]
    if mode != "nearest":
        frac = let(f"s{k}", widen(x - base, acc))
        weights = [let(f"w{k}_{t}", w) for t, w in enumerate(_weights(mode, frac))]
    taps = []
    for t, off in enumerate(_OFFSETS[mode]):
        index, inside = ax.tap(start + off)
        taps.append((let(f"i{k}_{t}", index), inside))
    return taps, weights


def _check(xs: tuple[int, ...], gs: tuple[int, ...], X: Tensor, grid: Tensor, mode: str) -> None:
    r = len(xs) - 2
    if r < 1 or len(gs) != len(xs) or gs[0] != xs[0] or gs[-1] != r:
        raise ArgumentError(
            f"grid_sample: grid {list(gs)} does not fit image {list(xs)}: it must be "
            f"(N, *output spatial, {max(r, 1)}) for an (N, C, *spatial) image"
        )
    if not dt.is_float(grid.dtype):
        raise ArgumentError(f"grid_sample: the grid must be floating point, got {grid.dtype}")
    if mode != "nearest" and not dt.is_float(X.dtype):
        raise ArgumentError(f"grid_sample: {mode} mode of a {X.dtype} image is not supported")


def grid_sample(
    X: Tensor, grid: Tensor, mode: str, padding_mode: str, align_corners: bool
) -> Tensor:
    """``out[n, c, *o]`` = ``X[n, c]`` sampled at the coordinates ``grid[n, *o]`` (ONNX
    GridSample, any number of spatial axes)."""
    if mode not in MODES or padding_mode not in PADDING_MODES:
        raise ArgumentError(f"grid_sample: unknown mode {mode!r} or padding {padding_mode!r}")
    xs, gs = static_shape(X), static_shape(grid)
    _check(xs, gs, X, grid, mode)
    r = len(xs) - 2
    cdt = "float64" if grid.dtype == "float64" else "float32"
    acc = "float64" if X.dtype == "float64" else "float32"
    axes = [_Axis(xs[2 + k], align_corners, padding_mode, cdt) for k in range(r)]

    def f(*i: E.PrimExpr) -> E.PrimExpr:
        n, c, o = i[0], i[1], i[2:]
        let = Lets()
        # grid's last axis lists the spatial axes backwards: x (the last one) first.
        terms = [
            _axis_terms(ax, f"{k}", grid[(n, *o, r - 1 - k)], mode, acc, let)
            for k, ax in enumerate(axes)
        ]
        taps = [t[0] for t in terms]
        weights = [t[1] for t in terms]

        def read(taps: Sequence[Tap]) -> E.PrimExpr:
            value = X[(n, c, *[t[0] for t in taps])]
            inside = [t[1] for t in taps if t[1] is not None]
            if mode != "nearest":
                value = widen(value, acc)
            if not inside:
                return value
            ok = inside[0]
            for cond in inside[1:]:
                ok = E.logical_and(ok, cond)
            return E.select(ok, value, E.const(0, value.dtype))

        def interpolate(k: int, chosen: list[Tap]) -> E.PrimExpr:
            if k == r:
                return read(chosen)
            total: E.PrimExpr | None = None
            for tap, w in zip(taps[k], weights[k]):
                value = interpolate(k + 1, [*chosen, tap])
                term = value if w is None else w * value
                total = term if total is None else total + term
            assert total is not None
            return total

        out = interpolate(0, [])
        return let.wrap(out if out.dtype == X.dtype else E.cast(X.dtype, out))

    return te.compute((xs[0], xs[1], *gs[1:-1]), f, name="grid_sample", tag="injective")
