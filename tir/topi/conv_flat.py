"""The flat-grid convolution computes that the CPU's direct and depthwise templates schedule.

The padded input of each channel is stored flat (``Xf[n, c, py, px, l]``, split into
``sh x sw`` stride phases) and the convolution is computed on the same grid, so every
kernel tap reads the input at an offset affine in the grid position with unit stride,
across row boundaries: what lets a schedule vectorize over whole rows of rows
(``codegen_llvm/schedules/conv2d.py`` says why). The grid columns past the output width
are computed and dropped by the NCHW copy, which also adds the bias. The layout knobs
(``oc_bn``/``cb``, ``vec``, ``rows``) shape the grid and ride along in the op's attrs
for the schedule.
"""

from __future__ import annotations

from typing import Any

from ember.errors import ArgumentError
from ember.tir import expr as E
from ember.tir.te import operation as te
from ember.tir.te.tensor import Tensor
from ember.tir.topi.rows import likely
from ember.tir.topi.workload import IntPair, Padding

FLAT_CONV_TAG = "conv2d_nchw_flat"
DEPTHWISE_FLAT_TAG = "depthwise_conv2d_nchw_flat"


def _pair(value: IntPair, what: str) -> tuple[int, int]:
    pair = (value, value) if isinstance(value, int) else tuple(value)
    if len(pair) != 2 or any(not isinstance(v, int) or v < 1 for v in pair):
        raise ArgumentError(
            f"conv2d_nchw.llvm: {what} must be a positive int or a pair of them, got {value!r}"
        )
    return pair  # type: ignore[return-value]


def _pads(padding: Padding) -> tuple[int, int, int, int]:
    pads = (padding,) * 4 if isinstance(padding, int) else tuple(padding)
    if len(pads) == 2:
        pads = (pads[0], pads[1], pads[0], pads[1])
    if len(pads) != 4 or any(not isinstance(p, int) or p < 0 for p in pads):
        raise ArgumentError(
            "conv2d_nchw.llvm: padding must be an int, (top/bottom, left/right) or "
            f"(top, left, bottom, right) of non-negative ints, got {padding!r}"
        )
    return pads  # type: ignore[return-value]


class FlatGeometry:
    """Sizes of the convolution and of the flat, phase-split grid it is computed on."""

    def __init__(
        self,
        N: int,
        C: int,
        H: int,
        W: int,
        O: int,
        KH: int,
        KW: int,
        stride: IntPair,
        padding: Padding,
        dilation: IntPair,
    ) -> None:
        self.N, self.C, self.H, self.W, self.O, self.KH, self.KW = N, C, H, W, O, KH, KW
        self.sh, self.sw = _pair(stride, "stride")
        self.dh, self.dw = _pair(dilation, "dilation")
        self.pt, self.pl, pb, pr = _pads(padding)
        self.OH = (H + self.pt + pb - self.dh * (KH - 1) - 1) // self.sh + 1
        self.OW = (W + self.pl + pr - self.dw * (KW - 1) - 1) // self.sw + 1
        if self.OH <= 0 or self.OW <= 0:
            raise ArgumentError(
                f"conv2d_nchw.llvm: a {KH}x{KW} kernel (dilation {self.dh}x{self.dw}) does not "
                f"fit the padded {H}x{W} input; the output would be {self.OH}x{self.OW}"
            )
        # a phase holds every s-th padded column, so Wq grid columns cover the padded width
        self.Wq = -(-(W + self.pl + pr) // self.sw)
        self.max_offset = ((KH - 1) * self.dh // self.sh) * self.Wq + (KW - 1) * self.dw // self.sw

    def reads_input_directly(self, rows: int, vec: int) -> bool:
        """Whether the template reads X as it is, without the flat copy: a 1x1 convolution
        with stride 1 and no padding is a GEMM over X's rows, which already are the grid,
        so when every row block is whole vector tiles no tile reads past X's end.

        Besides the pass over X, the copy cost its consumers more than itself: it runs
        in parallel over channels while each row block reads every channel, so half of
        each block's input sat in the other core's L2 (MobileNetV2's 144->24 1x1 layer at
        56x56, 2 threads: 0.37 ms with the copy, 0.07 ms without)."""
        geometry = (self.KH, self.KW, self.sh, self.sw, self.pt, self.pl, self.OH, self.OW)
        pointwise = geometry == (1, 1, 1, 1, 0, 0, self.H, self.W)
        tail = rows * self.W % vec
        return pointwise and tail in (0, 4, 8, 16, 32)

    def tap(self, ky: Any, kx: Any) -> tuple[Any, Any, Any]:
        """``(phase row, phase column, flat offset)`` read by kernel tap ``(ky, kx)``."""
        y, x = ky * self.dh, kx * self.dw
        if self.sh == 1 and self.sw == 1:
            return 0, 0, y * self.Wq + x
        return y % self.sh, x % self.sw, (y // self.sh) * self.Wq + x // self.sw


def _flat_input(X: Tensor, g: FlatGeometry, length: int) -> Tensor:
    """``Xf[n, c, py, px, l] = Xpad[n, c, (l // Wq)*sh + py, (l % Wq)*sw + px]`` (zero outside)."""

    def f(n, c, py, px, l):  # noqa: ANN001, ANN202
        h = (l // g.Wq) * g.sh + py - g.pt
        w = (l % g.Wq) * g.sw + px - g.pl
        inside = E.logical_and(E.logical_and(h >= 0, h < g.H), E.logical_and(w >= 0, w < g.W))
        hh = E.max_(E.min_(h, g.H - 1), 0)
        ww = E.max_(E.min_(w, g.W - 1), 0)
        return E.select(likely(inside), X[n, c, hh, ww], E.const(0, X.dtype))

    # tagged as a padding stage: graph schedules keep it apart rather than inline it
    return te.compute((g.N, g.C, g.sh, g.sw, length), f, name="X_flat", tag="pad")


def conv2d_flat(
    X: Tensor,
    Wt: Tensor,
    bias: Tensor | None,
    g: FlatGeometry,
    oc_bn: int,
    vec: int,
    rows: int,
    unroll_kernel: bool,
) -> Tensor:
    """The template's compute on given tensors: the flat, phase-split input ``X_flat``,
    the convolution on the flat grid ``conv_flat`` (tagged ``conv2d_nchw_flat``, its knobs
    in the op's attrs for the CPU template's schedule), and the NCHW copy ``conv`` (plus
    ``bias[o]`` when given)."""
    span = (rows - 1) * g.Wq + g.OW
    direct = g.reads_input_directly(rows, vec)
    if direct:
        # the input is read as it is: its rows are already the grid's
        grid = g.H * g.W
        Xf = X
    else:
        # A row block covers ``span`` grid positions; the grid is long enough for the last
        # block's last vector tile to be a whole one, so tiles never need a shorter vector.
        grid = (-(-g.OH // rows) - 1) * rows * g.Wq + -(-span // vec) * vec
        Xf = _flat_input(X, g, grid + g.max_offset)
    rc = te.reduce_axis((0, g.C), name="rc")
    ry = te.reduce_axis((0, g.KH), name="ry")
    rx = te.reduce_axis((0, g.KW), name="rx")
    O = g.O

    def body(n, ob, oi, f):  # noqa: ANN001, ANN202
        py, px, off = g.tap(ry.var, rx.var)
        o = ob * oc_bn + oi
        if O % oc_bn:
            o = E.min_(o, O - 1)  # channels past O compute on clamped weights, never read
        if direct:
            x = Xf[n, rc.var, f // g.W, f % g.W]
        else:
            x = Xf[n, rc.var, py, px, f + off]
        return te.sum(x * Wt[o, rc.var, ry.var, rx.var], axis=(rc, ry, rx))

    knobs = {"oc_bn": oc_bn, "vec": vec, "rows": rows, "unroll_kernel": unroll_kernel, "OW": g.OW}
    knobs.update(Wq=g.Wq, sw=g.sw, direct=direct)
    conv = te.compute(
        (g.N, -(-O // oc_bn), oc_bn, grid),
        body,
        name="conv_flat",
        tag=FLAT_CONV_TAG,
        attrs=knobs,
    )

    def copy(n, o, y, x):  # noqa: ANN001, ANN202
        value = conv[n, o // oc_bn, o % oc_bn, y * g.Wq + x]
        return value + bias[o] if bias is not None else value

    return te.compute((g.N, O, g.OH, g.OW), copy, name="conv", tag="conv2d_nchw")


def depthwise_flat(
    X: Tensor,
    Wt: Tensor,
    bias: Tensor | None,
    g: FlatGeometry,
    cb: int,
    vec: int,
    rows: int,
    unroll_kernel: bool,
) -> Tensor:
    """The template's compute on given tensors: the flat, phase-split input ``X_flat``,
    the convolution ``dwconv_flat`` (tagged ``depthwise_conv2d_nchw_flat``, its knobs in
    the op's attrs for the CPU template's schedule), and the NCHW copy ``conv`` (plus
    ``bias[o]`` when given). With ``rows == 0`` the convolution is computed on the flat
    grid ``(N, O, grid)``; else on ``(N, O, OH, Wv)``, output rows of ``Wv`` (whole
    vectors) positions ``Wq`` apart on the flat input, so a tile of ``rows`` rows reads
    each input vector once for all the kernel rows that use it."""
    m = g.O // g.C
    if rows:
        wv = -(-g.OW // vec) * vec
        shape, used = (g.N, g.O, g.OH, wv), (g.OH - 1) * g.Wq + wv
    else:
        used = -(-((g.OH - 1) * g.Wq + g.OW) // vec) * vec  # whole vector tiles
        shape = (g.N, g.O, used)
    # whole padded rows, so the schedule can split the flat axis into (row, column)
    Xf = _flat_input(X, g, -(-(used + g.max_offset) // g.Wq) * g.Wq)
    ry = te.reduce_axis((0, g.KH), name="ry")
    rx = te.reduce_axis((0, g.KW), name="rx")

    def at(n, o, f):  # noqa: ANN001, ANN202
        py, px, off = g.tap(ry.var, rx.var)
        c = o // m if m > 1 else o
        return te.sum(Xf[n, c, py, px, f + off] * Wt[o, 0, ry.var, rx.var], axis=(ry, rx))

    def body(n, o, y, x):  # noqa: ANN001, ANN202
        return at(n, o, y * g.Wq + x)

    knobs = {"cb": cb, "vec": vec, "rows": rows, "unroll_kernel": unroll_kernel}
    knobs.update(OW=g.OW, Wq=g.Wq, sw=g.sw)
    conv = te.compute(
        shape, body if rows else at, name="dwconv_flat", tag=DEPTHWISE_FLAT_TAG, attrs=knobs
    )

    def copy(n, o, y, x):  # noqa: ANN001, ANN202
        value = conv[n, o, y, x] if rows else conv[n, o, y * g.Wq + x]
        return value + bias[o] if bias is not None else value

    return te.compute((g.N, g.O, g.OH, g.OW), copy, name="conv", tag="depthwise_conv2d_nchw")
