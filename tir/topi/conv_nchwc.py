"""Blocked-channel (NCHWc) convolution and the layout transforms around it.

The CPU convolutions vectorize best over output channels when a block of them is
the innermost, unit-stride axis: ``NCHW[c]`` stores a 4-D ``[N, C, H, W]`` tensor
as ``[N, ceil(C/cb), H, W, cb]`` (channel ``c`` at block ``c // cb``, lane ``c %
cb``; lanes past C are zero). These are the pure computes: the graph ops
``conv_nchwc`` and ``dwconv_nchwc`` (``frontend/ops/layout.py``), the
``conv2d_NCHWc.llvm`` and ``depthwise_conv2d_NCHWc.llvm`` templates and the
``alter_conv_layout`` pass all build on them. Weights are blocked once, at compile
time, by :func:`pack_nchwc_weights` (numpy), into ``[ceil(O/ob), ceil(C/cb), KH, KW,
cb, ob]`` (depthwise ones by :func:`pack_nchwc_depthwise_weights` into ``[ceil(C/cb),
KH, KW, cb]``), zero past C and O, so padded lanes contribute nothing and produce
zeros.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from ember.errors import ArgumentError
from ember.tir import expr as E
from ember.tir.te import operation as te
from ember.tir.te.tensor import Tensor
from ember.tir.topi import activation, nan_order
from ember.tir.topi.conv import conv_out_size
from ember.tir.topi.pool import Window
from ember.tir.topi.transform import static_shape


def blocks(channels: int, block: int) -> int:
    """Number of ``block``-lane channel blocks covering ``channels``."""
    return -(-channels // block)


def layout_transform(X: Tensor, src: int, dst: int, channels: int) -> Tensor:
    """``X`` (4-D NCHW when ``src`` is 0, else NCHW[src]c) in NCHW (``dst`` 0) or
    NCHW[dst]c, holding ``channels`` logical channels; blocked lanes past them are zero."""
    shape = static_shape(X)
    want = 4 if src == 0 else 5
    if len(shape) != want or (src and shape[4] != src) or shape[1] * max(src, 1) < channels:
        raise ArgumentError(
            f"layout_transform: input {list(shape)} is not NCHW"
            f"{f'[{src}]c' if src else ''} with {channels} channels"
        )
    N, _, H, W = shape[:4]

    def read(n: E.PrimExpr, c: E.PrimExpr, h: E.PrimExpr, w: E.PrimExpr) -> E.PrimExpr:
        return X[n, c, h, w] if src == 0 else X[n, c // src, h, w, c % src]

    if dst == 0:
        return te.compute(
            (N, channels, H, W),
            lambda n, c, h, w: read(n, c, h, w),
            name="to_nchw",
            tag="injective",
        )

    def f(
        n: E.PrimExpr, cb: E.PrimExpr, h: E.PrimExpr, w: E.PrimExpr, ci: E.PrimExpr
    ) -> E.PrimExpr:
        c = cb * dst + ci
        if channels % dst == 0:
            return read(n, c, h, w)
        return E.select(c < channels, read(n, E.min_(c, channels - 1), h, w), E.const(0, X.dtype))

    return te.compute(
        (N, blocks(channels, dst), H, W, dst), f, name=f"to_nchw{dst}c", tag="injective"
    )


def pack_nchwc_weights(w: np.ndarray, ic_bn: int, oc_bn: int) -> np.ndarray:
    """OIHW weights as ``[O/ob, C/cb, KH, KW, cb, ob]``, zero past O and C."""
    O, C, KH, KW = w.shape
    ob, cb = blocks(O, oc_bn), blocks(C, ic_bn)
    padded = np.zeros((ob * oc_bn, cb * ic_bn, KH, KW), dtype=w.dtype)
    padded[:O, :C] = w
    blocked = padded.reshape(ob, oc_bn, cb, ic_bn, KH, KW).transpose(0, 2, 4, 5, 3, 1)
    return np.ascontiguousarray(blocked)


def pack_nchwc_bias(b: np.ndarray, oc_bn: int) -> np.ndarray:
    """A per-channel vector as ``[O/ob, ob]``, zero past O."""
    ob = blocks(b.shape[0], oc_bn)
    padded = np.zeros(ob * oc_bn, dtype=b.dtype)
    padded[: b.shape[0]] = b
    return padded.reshape(ob, oc_bn)


def _pad_blocked(X: Tensor, pads: Sequence[int]) -> Tensor:
    """NCHWc input zero-padded in H and W, a stage of its own (tag ``pad``) so the
    convolution reads it affinely."""
    if not any(pads):
        return X
    N, CB, H, W, cb = static_shape(X)
    pt, pl, pb, pr = pads

    def f(n: E.PrimExpr, c: E.PrimExpr, h: E.PrimExpr, w: E.PrimExpr, i: E.PrimExpr) -> E.PrimExpr:
        y, x = h - pt, w - pl
        inside = E.logical_and(E.logical_and(y >= 0, y < H), E.logical_and(x >= 0, x < W))
        yy, xx = _clamped(y, H), _clamped(x, W)
        # ``likely``: loop partitioning leaves the interior a plain copy
        return E.select(_likely(inside), X[n, c, yy, xx, i], E.const(0, X.dtype))

    return te.compute((N, CB, H + pt + pb, W + pl + pr, cb), f, name="nchwc_pad", tag="pad")


def _clamped(v: E.PrimExpr, size: int) -> E.PrimExpr:
    """``v`` clamped into ``[0, size)``: a border pixel's index read in place of one outside."""
    return E.max_(E.min_(v, size - 1), 0)


def _likely(cond: E.PrimExpr) -> E.PrimExpr:
    return E.Call("bool", E.Intrinsic.LIKELY, (cond,))


def _output_plane(
    name: str, H: int, W: int, KH: int, KW: int, strides: Sequence[int],
    pads: Sequence[int], dilations: Sequence[int],
) -> tuple[int, int]:  # fmt: skip
    """``(OH, OW)`` of a blocked convolution; an ``ArgumentError`` naming ``name`` if empty."""
    (sh, sw), (dh, dw) = tuple(strides), tuple(dilations)
    pt, pl, pb, pr = pads
    OH = conv_out_size(H, KH, sh, dh, pt, pb)
    OW = conv_out_size(W, KW, sw, dw, pl, pr)
    if OH <= 0 or OW <= 0:
        raise ArgumentError(f"{name}: output would be empty ({OH}x{OW})")
    return OH, OW


def _with_bias(name: str, conv: Tensor, bias: Tensor | None) -> Tensor:
    """``conv`` plus a blocked ``bias[block, lane]`` as a broadcast stage (``conv`` when
    there is none)."""
    if bias is None:
        return conv
    _, nblocks, _, _, lanes = static_shape(conv)
    want = (nblocks, lanes)
    if static_shape(bias) != want:
        raise ArgumentError(
            f"{name}: bias must have shape [{want[0]}, {want[1]}], got {list(static_shape(bias))}"
        )
    return te.compute(
        conv.shape,
        lambda n, b, y, x, i: conv[n, b, y, x, i] + bias[b, i],
        name=f"{conv.op.name}_bias",
        tag="broadcast",
    )


def conv2d_nchwc(
    X: Tensor,
    Wt: Tensor,
    bias: Tensor | None,
    strides: Sequence[int],
    pads: Sequence[int],
    dilations: Sequence[int],
    attrs: dict | None = None,
    groups: int = 1,
) -> Tensor:
    """``out[n, ob, y, x, oi] = sum_{cb, ky, kx, ci} Xpad[n, base(ob) + cb, y*sh + ky*dh,
    x*sw + kx*dw, ci] * Wt[ob, cb, ky, kx, ci, oi] (+ bias[ob, oi])``.

    X is ``[N, C/cb, H, W, cb]``, Wt ``[O/ob, C/groups/cb, KH, KW, cb, ob]``, bias
    ``[O/ob, ob]``; ``pads`` is ``(top, left, bottom, right)``. With ``groups`` (each group's
    channels whole blocks), output block ``ob`` reads the input blocks of its group from
    ``base(ob)``: a grouped convolution is the same loop nest with a shorter channel
    reduction. The reduction stage is tagged ``conv2d_nchwc`` and carries ``attrs`` (a
    template's knobs) for its schedule; with ``attrs["flat"]`` a pointwise convolution's
    reduction is 4-D, over the plane as one pixel axis (:func:`_pointwise_plane`).
    """
    xs, ws = static_shape(X), static_shape(Wt)
    if len(xs) != 5 or len(ws) != 6 or xs[1] != ws[1] * groups or xs[4] != ws[4] or ws[0] % groups:
        raise ArgumentError(
            f"conv2d_nchwc: input {list(xs)} and blocked weights {list(ws)} do not fit "
            f"{groups} group(s)"
        )
    N, _, H, W, cb = xs
    OB, CB, KH, KW, _, ob = ws
    per_group = OB // groups
    (sh, sw), (dh, dw) = tuple(strides), tuple(dilations)
    OH, OW = _output_plane("conv2d_nchwc", H, W, KH, KW, strides, pads, dilations)
    if (attrs or {}).get("flat") and is_pointwise(KH, KW, strides, pads):
        plane = _pointwise_plane(X, Wt, groups, attrs or {})
        return _with_bias("conv2d_nchwc", plane, bias)
    P = _pad_blocked(X, pads)
    rc = te.reduce_axis((0, CB), name="rc")
    ry = te.reduce_axis((0, KH), name="ry")
    rx = te.reduce_axis((0, KW), name="rx")
    ri = te.reduce_axis((0, cb), name="ri")

    def body(n: E.PrimExpr, o: E.PrimExpr, y: E.PrimExpr, x: E.PrimExpr, oi: E.PrimExpr):  # noqa: ANN202
        c = rc if groups == 1 else E.floordiv(o, per_group) * CB + rc
        pix = P[n, c, y * sh + ry * dh, x * sw + rx * dw, ri]
        return te.sum(pix * Wt[o, rc, ry, rx, ri, oi], axis=(rc, ry, rx, ri))

    conv = te.compute(
        (N, OB, OH, OW, ob), body, name="conv_nchwc", tag="conv2d_nchwc", attrs=attrs or {}
    )
    return _with_bias("conv2d_nchwc", conv, bias)


def is_pointwise(KH: int, KW: int, strides: Sequence[int], pads: Sequence[int]) -> bool:
    """Whether a convolution reads each output pixel's own input pixel (1x1, stride 1, no
    padding): its output plane is then one axis of ``H * W`` pixels."""
    return (KH, KW) == (1, 1) and tuple(strides) == (1, 1) and not any(pads)


def _pointwise_plane(X: Tensor, Wt: Tensor, groups: int, attrs: dict) -> Tensor:
    """A pointwise ``conv2d_nchwc`` computed over the output plane as one pixel axis,
    ``[N, O/ob, H*W, ob]`` (the reduction, tagged ``conv2d_nchwc``), and read back as
    ``[N, O/ob, H, W, ob]``. The GEMM it is then tiles pixels across row ends: where a
    14-pixel row held register tiles of 7 pixels, the plane takes tiles of 12, which
    reuse each weight vector 12 times. The schedule flattens the output's rows and
    columns the same way, and the simplifier folds ``(p // W) * W + p % W`` back to
    ``p``."""
    N, _, H, W, cb = static_shape(X)
    OB, CB, _, _, _, ob = static_shape(Wt)
    per_group = OB // groups
    rc = te.reduce_axis((0, CB), name="rc")
    ri = te.reduce_axis((0, cb), name="ri")

    def body(n: E.PrimExpr, o: E.PrimExpr, p: E.PrimExpr, oi: E.PrimExpr) -> E.PrimExpr:
        c = rc if groups == 1 else E.floordiv(o, per_group) * CB + rc
        pix = X[n, c, E.floordiv(p, W), E.floormod(p, W), ri]
        return te.sum(pix * Wt[o, rc, 0, 0, ri, oi], axis=(rc, ri))

    flat = te.compute((N, OB, H * W, ob), body, name="conv_nchwc", tag="conv2d_nchwc", attrs=attrs)
    return te.compute(
        (N, OB, H, W, ob),
        lambda n, o, y, x, oi: flat[n, o, y * W + x, oi],
        name="conv_nchwc_rows",
        tag="injective",
    )


def pack_nchwc_depthwise_weights(w: np.ndarray, block: int) -> np.ndarray:
    """Depthwise weights ``[C, 1, KH, KW]`` (one filter per channel) as ``[C/cb, KH, KW,
    cb]``, zero past C, so a tap's weights for a channel block are one vector."""
    C, one, KH, KW = w.shape
    if one != 1:
        raise ArgumentError(
            f"pack_nchwc_depthwise_weights: weights {list(w.shape)} are not [C, 1, KH, KW]"
        )
    padded = np.zeros((blocks(C, block) * block, KH, KW), dtype=w.dtype)
    padded[:C] = w[:, 0]
    return np.ascontiguousarray(padded.reshape(-1, block, KH, KW).transpose(0, 2, 3, 1))


def depthwise_conv2d_nchwc(
    X: Tensor,
    Wt: Tensor,
    bias: Tensor | None,
    strides: Sequence[int],
    pads: Sequence[int],
    dilations: Sequence[int],
    attrs: dict | None = None,
) -> Tensor:
    """``out[n, b, y, x, i] = sum_{ky, kx} Xpad[n, b, y*sh + ky*dh, x*sw + kx*dw, i] *
    Wt[b, ky, kx, i] (+ bias[b, i])``: one filter per channel (a depthwise convolution,
    channel multiplier 1), every lane its own channel.

    X is ``[N, C/cb, H, W, cb]``, Wt ``[C/cb, KH, KW, cb]``, bias ``[C/cb, cb]``; ``pads``
    is ``(top, left, bottom, right)``. The reduction stage is tagged
    ``depthwise_conv2d_nchwc`` and carries ``attrs`` (a template's knobs).
    """
    xs, ws = static_shape(X), static_shape(Wt)
    if len(xs) != 5 or len(ws) != 4 or xs[1] != ws[0] or xs[4] != ws[3]:
        raise ArgumentError(
            f"depthwise_conv2d_nchwc: input {list(xs)} and blocked weights {list(ws)} do not fit"
        )
    N, CB, H, W, cb = xs
    _, KH, KW, _ = ws
    (sh, sw), (dh, dw) = tuple(strides), tuple(dilations)
    OH, OW = _output_plane("depthwise_conv2d_nchwc", H, W, KH, KW, strides, pads, dilations)
    P = _pad_blocked(X, pads)
    ry = te.reduce_axis((0, KH), name="ry")
    rx = te.reduce_axis((0, KW), name="rx")

    def body(n: E.PrimExpr, b: E.PrimExpr, y: E.PrimExpr, x: E.PrimExpr, i: E.PrimExpr):  # noqa: ANN202
        pix = P[n, b, y * sh + ry * dh, x * sw + rx * dw, i]
        return te.sum(pix * Wt[b, ry, rx, i], axis=(ry, rx))

    conv = te.compute(
        (N, CB, OH, OW, cb),
        body,
        name="dwconv_nchwc",
        tag="depthwise_conv2d_nchwc",
        attrs=attrs or {},
    )
    return _with_bias("depthwise_conv2d_nchwc", conv, bias)


def depthwise_pointwise_nchwc(
    X: Tensor,
    dw_weights: Tensor,
    dw_bias: Tensor | None,
    pw_weights: Tensor,
    pw_bias: Tensor | None,
    strides: Sequence[int],
    pads: Sequence[int],
    dilations: Sequence[int],
    clip: tuple[float | None, float | None] = (None, None),
    dw_attrs: dict | None = None,
    pw_attrs: dict | None = None,
) -> Tensor:
    """A depthwise convolution, clipped to ``clip`` (either bound optional: a ReLU6), then a
    1x1 convolution of stride 1 on its result: ``conv2d_nchwc(clip(depthwise_conv2d_nchwc(X)),
    pw_weights)``, the MobileNet block's depthwise and projection convs as one compute.
    The clipped depthwise output is a stage of its own (:func:`activation.clip`), so a
    schedule can compute one row of it where the 1x1 conv reads it and it never reaches
    memory. Shapes as in :func:`depthwise_conv2d_nchwc`
    and :func:`conv2d_nchwc`; ``pw_weights`` is ``[O/ob, C/cb, 1, 1, cb, ob]``."""
    ws = static_shape(pw_weights)
    if len(ws) != 6 or ws[2:4] != (1, 1):
        raise ArgumentError(f"depthwise_pointwise_nchwc: weights {list(ws)} are not a 1x1 conv's")
    dw = depthwise_conv2d_nchwc(X, dw_weights, dw_bias, strides, pads, dilations, dw_attrs)
    mid = activation.clip(dw, *clip, name="dw_clip")
    return conv2d_nchwc(mid, pw_weights, pw_bias, (1, 1), (0, 0, 0, 0), (1, 1), pw_attrs)


EXPAND_TAG = "expand_nchwc"  # the expand conv's reduction in expand_depthwise_pointwise_nchwc
EXPAND_PAD_TAG = "expand_pad"  # its clipped, zero-bordered output


def expand_depthwise_pointwise_nchwc(
    X: Tensor,
    expand_weights: Tensor,
    expand_bias: Tensor,
    dw_weights: Tensor,
    dw_bias: Tensor | None,
    pw_weights: Tensor,
    pw_bias: Tensor | None,
    strides: Sequence[int],
    pads: Sequence[int],
    dilations: Sequence[int],
    expand_clip: tuple[float | None, float | None],
    clip: tuple[float | None, float | None],
    attrs: tuple[dict | None, dict | None, dict | None] = (None, None, None),
) -> Tensor:
    """A whole inverted residual block of a MobileNet: a 1x1 conv (stride 1, no padding)
    with a bias, clipped to ``expand_clip``, then :func:`depthwise_pointwise_nchwc` on
    its result. ``attrs`` are the three reductions' (expand, depthwise, 1x1).

    The expand conv is computed over the depthwise conv's padded grid, ``[N, C/cb, H +
    pt + pb, W + pl + pr, cb]``, reading the input at clamped coordinates, and a stage of
    its own (tag :data:`EXPAND_PAD_TAG`) clips it and zeroes the border: so the depthwise
    conv reads it affinely, without a padding stage, and a schedule that computes a
    band of its rows where the depthwise conv reads them gets a band-sized region (a
    clamped index would widen it to the image's end). The border's few pixels are
    computed and thrown away."""
    xs, es = static_shape(X), static_shape(expand_weights)
    if len(xs) != 5 or len(es) != 6 or es[2:4] != (1, 1) or xs[1] != es[1] or xs[4] != es[4]:
        raise ArgumentError(
            f"expand_depthwise_pointwise_nchwc: input {list(xs)} and expand weights "
            f"{list(es)} are not a 1x1 conv's"
        )
    N, CB, H, W, cb = xs
    OB, ob = es[0], es[5]
    if static_shape(expand_bias) != (OB, ob):
        raise ArgumentError(
            f"expand_depthwise_pointwise_nchwc: expand bias must have shape [{OB}, {ob}], "
            f"got {list(static_shape(expand_bias))}"
        )
    pt, pl, pb, pr = pads
    rc = te.reduce_axis((0, CB), name="rc")
    ri = te.reduce_axis((0, cb), name="ri")

    def expand(n: E.PrimExpr, o: E.PrimExpr, h: E.PrimExpr, w: E.PrimExpr, oi: E.PrimExpr):  # noqa: ANN202
        pix = X[n, rc, _clamped(h - pt, H), _clamped(w - pl, W), ri]
        return te.sum(pix * expand_weights[o, rc, 0, 0, ri, oi], axis=(rc, ri))

    grid = (N, OB, H + pt + pb, W + pl + pr, ob)
    conv = te.compute(grid, expand, name="expand_nchwc", tag=EXPAND_TAG, attrs=attrs[0] or {})

    def bordered(n: E.PrimExpr, o: E.PrimExpr, h: E.PrimExpr, w: E.PrimExpr, oi: E.PrimExpr):  # noqa: ANN202
        v = activation.clipped(conv[n, o, h, w, oi] + expand_bias[o, oi], *expand_clip)
        rows = E.logical_and(h >= pt, h < pt + H)
        inside = E.logical_and(rows, E.logical_and(w >= pl, w < pl + W))
        return E.select(inside, v, E.const(0, v.dtype))

    mid = te.compute(grid, bordered, name="expand_clip", tag=EXPAND_PAD_TAG)
    no_pads = (0, 0, 0, 0)
    return depthwise_pointwise_nchwc(
        mid, dw_weights, dw_bias, pw_weights, pw_bias, strides, no_pads, dilations, clip,
        attrs[1], attrs[2],
    )  # fmt: skip


POOL_NCHWC_TAG = "pool_nchwc"  # the window reduction of a blocked max or average pool


def _pool_window_nchwc(
    X: Tensor,
    kernel: Sequence[int],
    strides: Sequence[int],
    pads: Sequence[int],
    dilations: Sequence[int],
    ceil_mode: bool,
    kind: str,
) -> tuple[Tensor, Window]:
    """The window reduction of a 2-D pool of an NCHW[c] tensor, each lane its own channel
    (the windows of ``pool_nd``; ``pads`` is ``(top, left, bottom, right)``): a max that
    a NaN in the window makes NaN, or a sum; and the window, for an average's divisor."""
    op = f"{kind}_pool2d_nchwc"
    xs = static_shape(X)
    if len(xs) != 5 or len(kernel) != 2:
        raise ArgumentError(f"{op}: input {list(xs)} is not NCHWc, or not 2-D")
    w = Window(tuple(kernel), tuple(strides), tuple(dilations), tuple(pads[:2]), tuple(pads[2:]),
               xs[2:4])  # fmt: skip
    oh, ow = w.out_sizes(ceil_mode, op)
    ry = te.reduce_axis((0, kernel[0]), name="ry")
    rx = te.reduce_axis((0, kernel[1]), name="rx")
    fill = te.min_value(X.dtype) if kind == "max" else E.const(0, X.dtype)
    reducer = nan_order.max_nan if kind == "max" else te.sum

    def f(n: E.PrimExpr, c: E.PrimExpr, y: E.PrimExpr, x: E.PrimExpr, i: E.PrimExpr):  # noqa: ANN202
        h, v = w.taps((y, x), (ry, rx))
        inside = E.logical_and(E.logical_and(h >= 0, h < xs[2]), E.logical_and(v >= 0, v < xs[3]))
        hh, vv = E.max_(E.min_(h, xs[2] - 1), 0), E.max_(E.min_(v, xs[3] - 1), 0)
        return reducer(E.select(inside, X[n, c, hh, vv, i], fill), axis=(ry, rx))

    name = "max_pool_nchwc" if kind == "max" else "avg_pool_nchwc_sum"
    shape = (xs[0], xs[1], oh, ow, xs[4])
    return te.compute(shape, f, name=name, tag=POOL_NCHWC_TAG), w


def max_pool2d_nchwc(
    X: Tensor,
    kernel: Sequence[int],
    strides: Sequence[int],
    pads: Sequence[int],
    dilations: Sequence[int],
    ceil_mode: bool = False,
) -> Tensor:
    """2-D max pooling of an NCHW[c] tensor, each lane its own channel."""
    return _pool_window_nchwc(X, kernel, strides, pads, dilations, ceil_mode, "max")[0]


def avg_pool2d_nchwc(
    X: Tensor,
    kernel: Sequence[int],
    strides: Sequence[int],
    pads: Sequence[int],
    dilations: Sequence[int],
    ceil_mode: bool = False,
    count_include_pad: bool = False,
) -> Tensor:
    """2-D average pooling of a float NCHW[c] tensor, each lane its own channel: the
    windows and divisors of ``pool_nd`` (padding counted or not)."""
    total, w = _pool_window_nchwc(X, kernel, strides, pads, dilations, ceil_mode, "avg")

    def average(n: E.PrimExpr, c: E.PrimExpr, y: E.PrimExpr, x: E.PrimExpr, i: E.PrimExpr):  # noqa: ANN202
        return total[n, c, y, x, i] / E.cast(X.dtype, w.count((y, x), count_include_pad))

    return te.compute(total.shape, average, name="avg_pool_nchwc", tag="pool_avg")
