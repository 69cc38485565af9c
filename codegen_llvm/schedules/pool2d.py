"""CPU template for 2-D max and average pooling over NCHW.

The compute is :func:`ember.tir.topi.pool2d_window.pool2d_window` (that of
:func:`ember.tir.topi.nn.pool2d`: average pooling divides by the whole window, padding
included), with the padding written as a ``likely`` select: loop partitioning then
splits the border rows and column tiles off, and in the interior the select and the
index clamps vanish. Each output row is a loop over its columns, ``vec`` at a time, with
the window loops outside the lanes and unrolled, so the reduction's store moves with the
lanes. With unit stride the lanes are vectorized (one vector load per window tap); with
a larger stride they would be gathered one by one, so by default they stay a plain loop
that LLVM's loop vectorizer turns into interleaved loads. The loop over (batch, channel)
runs in parallel; the output rows inside it stay a plain loop that partitioning can
split. The padding is read inline (only the border tiles test it), or the padded rows
one output row needs are computed at that row, or the whole padded input is computed up
front; for average pooling the window sum is computed at the column tile and scaled as
it is stored.
"""

from __future__ import annotations

from typing import Any

from ember.errors import ArgumentError
from ember.tir import dtype as dt
from ember.tir.schedule.schedule import Schedule, Stage, create_schedule
from ember.tir.te import operation as te
from ember.tir.te.tensor import ComputeOp, IterVar, Tensor
from ember.tir.topi.pool2d_window import Pads, pool2d_window
from ember.tir.topi.transform import static_shape
from ember.tuner.template import get_config, template

VECTOR_BYTES = 64  # one AVX-512 register

IntPair = int | tuple[int, int]


def _pair(value: IntPair, what: str) -> tuple[int, int]:
    pair = (value, value) if isinstance(value, int) else tuple(value)
    if len(pair) != 2 or any(not isinstance(v, int) or v < 1 for v in pair):
        raise ArgumentError(f"pool2d.llvm: {what} must be a positive int or a pair, got {value!r}")
    return pair  # type: ignore[return-value]


def _pads(padding: int | tuple[int, ...]) -> Pads:
    pads = (padding,) * 4 if isinstance(padding, int) else tuple(padding)
    if len(pads) == 2:
        pads = (pads[0], pads[1], pads[0], pads[1])
    if len(pads) != 4 or any(not isinstance(p, int) or p < 0 for p in pads):
        raise ArgumentError(
            "pool2d.llvm: padding must be an int, (top/bottom, left/right) or "
            f"(top, left, bottom, right) of non-negative ints, got {padding!r}"
        )
    return pads  # type: ignore[return-value]


GRAPH_MAX_TAG = "pool2d_max_nchw"  # the graph's max pooling on this template (see below)


def _schedule_window(s: Schedule, red: Tensor, vec: int, simd: bool) -> IterVar:
    """Window loops outside the lanes of the output row; returns the row loop."""
    n, c, y, x = s[red].op.axis
    ry, rx = s[red].op.reduce_axis
    xo, xi = s[red].split(x, factor=vec)
    s[red].reorder(n, c, y, xo, ry, rx, xi)
    s[red].unroll(ry)
    s[red].unroll(rx)
    if simd:
        s[red].vectorize(xi)
    return y


def _define_knobs(sw: int, dtype: str) -> tuple[int, str, bool]:
    """Defaults measured on AVX-512: with unit stride, vector lanes over a padded copy; with a
    larger stride, whose lanes would be gathered one by one, a plain lane loop reading X
    directly, which LLVM's own vectorizer turns into interleaved loads."""
    cfg = get_config()
    per_reg = VECTOR_BYTES // dt.bytes_of(dtype)
    unit = sw == 1
    cfg.define_knob(
        "vec", [per_reg // 2, per_reg, 2 * per_reg], default=per_reg if unit else per_reg // 2
    )
    cfg.define_knob("pad", ["inline", "row", "root"], default="root" if unit else "inline")
    cfg.define_knob("simd", [True, False], default=unit)
    return cfg["vec"].val, cfg["pad"].val, cfg["simd"].val


def _graph_knobs(ow: int, sw: int, dtype: str) -> tuple[int, str, bool]:
    """The knobs of a graph's max pooling: the template's defaults (see
    :func:`_define_knobs`) but, with a larger stride, lane loops a row long."""
    if sw == 1:
        return VECTOR_BYTES // dt.bytes_of(dtype), "root", True
    return (ow if ow <= 64 else 32), "inline", False


@template("pool2d.llvm")
def pool2d_llvm(
    N: int,
    C: int,
    H: int,
    W: int,
    kernel: IntPair,
    stride: IntPair,
    padding: int | tuple[int, ...] = 0,
    kind: str = "max",
    dtype: str = "float32",
) -> tuple[Schedule, list[Any]]:
    """Max or average pooling of X (N, C, H, W) with a ``kernel`` window every ``stride``."""
    (kh, kw), (sh, sw), pads = _pair(kernel, "kernel"), _pair(stride, "stride"), _pads(padding)
    if kind not in ("max", "avg"):
        raise ArgumentError(f"pool2d.llvm: kind must be 'max' or 'avg', got {kind!r}")
    if H + pads[0] + pads[2] < kh or W + pads[1] + pads[3] < kw:
        raise ArgumentError(
            f"pool2d.llvm: a {kh}x{kw} window does not fit the padded {H}x{W} input"
        )
    vec, pad_at, simd = _define_knobs(sw, dtype)
    X = te.placeholder((N, C, H, W), dtype, name="X")
    P, red, out = pool2d_window(X, (kh, kw), (sh, sw), pads, kind)
    s = create_schedule(out.op)
    _schedule_pool(s, X, P, red, out, kind, vec, pad_at, simd)
    return s, [X, out]


def _schedule_pool(
    s: Schedule,
    X: Tensor,
    P: Tensor,
    red: Tensor,
    out: Tensor,
    kind: str,
    vec: int,
    pad_at: str,
    simd: bool,
) -> None:
    if kind == "max":
        row = _schedule_window(s, red, vec, simd)
        pad_parent = (s[out], row)
    else:
        n, c, row, x = s[out].op.axis
        xo, xi = s[out].split(x, factor=vec)
        s[out].vectorize(xi)  # the scaling store has unit stride
        s[red].compute_at(s[out], xo)
        # the window sum reads the padding, per column tile
        pad_parent = (s[red], _schedule_window(s, red, vec, simd))
    n, c = s[out].op.axis[:2]
    s[out].parallel(s[out].fuse(n, c))
    if P is not X:
        _schedule_pad(s, P, pad_at, *pad_parent)


def _schedule_pad(s: Schedule, padded: Tensor, where: str, parent: Stage, axis: IterVar) -> None:
    if where == "inline":
        s[padded].compute_inline()
    elif where == "row":
        s[padded].compute_at(parent, axis)
    else:
        pn, pc, _, _ = s[padded].op.axis
        s[padded].parallel(s[padded].fuse(pn, pc))


def max_pool2d_graph(
    X: Tensor, kernel: tuple[int, int], stride: tuple[int, int], pads: Pads
) -> Tensor:
    """The template's max pooling of a graph tensor X (NCHW); its stage carries the tag
    ``GRAPH_MAX_TAG`` that :func:`schedule_max_pool2d_graph` schedules."""
    return pool2d_window(X, kernel, stride, pads, "max", GRAPH_MAX_TAG)[2]


GRAPH_AVG_TAG = "pool2d_avg_nchw"  # the graph's average pooling on this template


def avg_pool2d_graph(
    X: Tensor,
    kernel: tuple[int, int],
    stride: tuple[int, int],
    pads: Pads,
    count_include_pad: bool,
) -> Tensor:
    """The template's average pooling of a graph tensor X (NCHW); its window sum carries
    the tag ``GRAPH_AVG_TAG`` that :func:`schedule_avg_pool2d_graph` schedules."""
    return pool2d_window(X, kernel, stride, pads, "avg", GRAPH_AVG_TAG, count_include_pad)[2]


def schedule_avg_pool2d_graph(s: Schedule, red: Tensor, out: Tensor) -> set[int]:
    """Schedule a graph's average pooling ``out`` (made by :func:`avg_pool2d_graph`, the
    kernel's output) over its window sum ``red``, with the knobs of
    :func:`schedule_max_pool2d_graph`; returns the ids of the ops it scheduled."""
    P = red.op.input_tensors[0]
    X = P.op.input_tensors[0] if getattr(P.op, "tag", "") == "pad" else P
    assert isinstance(red.op, ComputeOp)
    sw = dict(red.op.attrs)["stride_w"]
    vec, pad_at, simd = _graph_knobs(static_shape(out)[3], sw, out.dtype)
    _schedule_pool(s, X, P, red, out, "avg", vec, pad_at, simd)
    return {id(out.op), id(red.op)} | ({id(P.op)} if P is not X else set())


def schedule_max_pool2d_graph(s: Schedule, out: Tensor) -> set[int]:
    """Schedule a graph's max pooling ``out`` (made by :func:`max_pool2d_graph`, the
    kernel's output); returns the ids of the ops it scheduled.

    The knobs are the template's defaults, except that with a stride above one a lane
    loop spans a whole output row (up to 64 columns): measured on a 112x112 input,
    that halves the time of the default's 8-column tiles, since the row needs no tail."""
    P = out.op.input_tensors[0]
    X = P.op.input_tensors[0] if getattr(P.op, "tag", "") == "pad" else P
    sw = dict(out.op.attrs)["stride_w"]
    vec, pad_at, simd = _graph_knobs(static_shape(out)[3], sw, out.dtype)
    _schedule_pool(s, X, P, out, out, "max", vec, pad_at, simd)
    return {id(out.op)} | ({id(P.op)} if P is not X else set())
