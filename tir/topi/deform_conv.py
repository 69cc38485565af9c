"""Deformable convolution's sampling half: the image read at learned, run-time offsets.

ONNX DeformConv is a grouped convolution whose kernel taps move: tap ``k`` of output
``o`` reads the image at ``o * stride - pad_begin + k * dilation + offset[k, o]``, a
fractional position read by (multi)linear interpolation, taps outside the image reading
0, and is scaled by ``mask[k, o]``. Everything after that read is an ordinary matmul,
so this compute gives only the *columns*, ``cols[n, c, *k, *o]`` = the masked sample
that weight ``W[:, c % (C / group), *k]`` multiplies, and the converter
(``frontend/onnx_import/ops_sampling.py``) contracts them with the weights through the
``matmul`` op, which has tuned schedules; the sampling is done once per input channel,
not once per output channel as a direct compute would.

The offsets are laid out as ONNX says: channel ``(g * K + kk) * r + d`` of ``offset``
(``K`` kernel taps, ``r`` spatial axes, ``kk`` the tap's row-major index) moves axis
``d`` of tap ``kk`` for the input channels of offset group ``g``; ``mask`` channel
``g * K + kk`` scales it. A position that is NaN or far outside the image (where both
taps read padding) becomes one just off the image before it turns into an integer, so
every read is in bounds whatever the offsets hold. Positions and weights are float32
(float64 for a float64 image).
"""

from __future__ import annotations

from collections.abc import Sequence

from ember.errors import ArgumentError
from ember.tir import dtype as dt
from ember.tir import expr as E
from ember.tir import op as _op
from ember.tir.te import operation as te
from ember.tir.te.tensor import Tensor
from ember.tir.topi.conv import conv_out_size
from ember.tir.topi.grid_sample import Lets
from ember.tir.topi.reduce import widen
from ember.tir.topi.transform import static_shape


def deform_output_shape(
    spatial: Sequence[int],
    kernel: Sequence[int],
    strides: Sequence[int],
    pads: Sequence[int],
    dilations: Sequence[int],
) -> tuple[int, ...]:
    """The output's spatial size: a convolution's, ``pads`` as (begins..., ends...)."""
    r = len(spatial)
    return tuple(
        conv_out_size(spatial[d], kernel[d], strides[d], dilations[d], pads[d], pads[r + d])
        for d in range(r)
    )


def _check(
    xs: tuple[int, ...], offs: tuple[int, ...], ms: tuple[int, ...] | None, kernel: Sequence[int],
    offset_group: int, out: tuple[int, ...],
) -> None:  # fmt: skip
    r = len(xs) - 2
    taps = 1
    for k in kernel:
        taps *= k
    want = (xs[0], offset_group * taps * r, *out)
    if r < 1 or len(kernel) != r or min(out, default=1) < 1:
        raise ArgumentError(
            f"deform_columns: kernel {list(kernel)} does not fit image {list(xs)} "
            f"(output {list(out)})"
        )
    if offset_group < 1 or xs[1] % offset_group:
        raise ArgumentError(
            f"deform_columns: {xs[1]} input channels do not split into {offset_group} offset groups"
        )
    if offs != want:
        raise ArgumentError(f"deform_columns: offset {list(offs)} is not {list(want)}")
    if ms is not None and ms != (xs[0], offset_group * taps, *out):
        raise ArgumentError(
            f"deform_columns: mask {list(ms)} is not {[xs[0], offset_group * taps, *out]}"
        )


def deform_columns(
    X: Tensor,
    offset: Tensor,
    mask: Tensor | None,
    kernel: Sequence[int],
    strides: Sequence[int],
    pads: Sequence[int],
    dilations: Sequence[int],
    offset_group: int,
) -> Tensor:
    """``cols[n, c, *k, *o]``: ``X[n, c]`` read by linear interpolation at tap ``k`` of
    output ``o`` moved by its offset, times its mask (1 without one); 0 outside."""
    xs, offs = static_shape(X), static_shape(offset)
    ms = static_shape(mask) if mask is not None else None
    r = len(xs) - 2
    out = deform_output_shape(xs[2:], kernel, strides, pads, dilations)
    _check(xs, offs, ms, kernel, offset_group, out)
    if not dt.is_float(X.dtype):
        raise ArgumentError(f"deform_columns: a {X.dtype} image is not supported (floats only)")
    acc = "float64" if X.dtype == "float64" else "float32"
    per_group = xs[1] // offset_group
    taps = 1
    for k in kernel:
        taps *= k

    def f(*i: E.PrimExpr) -> E.PrimExpr:
        n, c, k, o = i[0], i[1], i[2 : 2 + r], i[2 + r :]
        let = Lets()
        flat: E.PrimExpr = k[0]
        for d in range(1, r):
            flat = flat * kernel[d] + k[d]
        channel = let("ch", E.floordiv(c, per_group) * taps + flat)
        corners: list[list[tuple[E.PrimExpr, E.PrimExpr, E.PrimExpr]]] = []
        for d in range(r):
            start = o[d] * strides[d] - pads[d] + k[d] * dilations[d]
            moved = widen(offset[(n, channel * r + d, *o)], acc)
            pos = let(f"p{d}", E.cast(acc, start) + moved)
            near = E.logical_and(pos >= E.const(-2.0, acc), pos <= E.const(xs[2 + d] + 1.0, acc))
            pos = let(f"q{d}", E.select(near, pos, E.const(-2.0, acc)))
            base = _op.floor(pos)
            low = let(f"i{d}", E.cast("int32", base))
            frac = let(f"s{d}", pos - base)
            axis = []
            for t, w in ((0, 1 - frac), (1, frac)):
                tap = low + t
                inside = E.logical_and(tap >= 0, tap < xs[2 + d])
                axis.append((E.max_(E.min_(tap, xs[2 + d] - 1), 0), inside, w))
            corners.append(axis)

        def interpolate(d: int, index: list[E.PrimExpr], ok: E.PrimExpr | None) -> E.PrimExpr:
            if d == r:
                assert ok is not None
                value = widen(X[(n, c, *index)], acc)
                return E.select(ok, value, E.const(0, acc))
            total: E.PrimExpr | None = None
            for tap, inside, w in corners[d]:
                both = inside if ok is None else E.logical_and(ok, inside)
                term = w * interpolate(d + 1, [*index, tap], both)
                total = term if total is None else total + term
            assert total is not None
            return total

        value = interpolate(0, [], None)
        if mask is not None:
            value = value * widen(mask[(n, channel, *o)], acc)
        return let.wrap(value if value.dtype == X.dtype else E.cast(X.dtype, value))

    shape = (xs[0], xs[1], *kernel, *out)
    return te.compute(shape, f, name="deform_columns", tag="injective")
