"""CPU template for ``conv2d_nchw``: direct convolution vectorized over flattened image rows.

The vectorizer makes SIMD of a loop only when the store moves with it by unit
stride and every load index is affine in it. In NCHW the unit-stride axis is the
output width, which is short in the later layers of a network (14, 7), so this
template vectorizes over whole *rows of rows*: the padded input of each channel
is stored flat, ``Xf[n, c, l]`` with ``l = row * Wq + col``, and the output is
computed on the same grid, ``conv_flat[n, o, f]`` with ``f = y * Wq + x``. Then
the input element under kernel tap ``(ky, kx)`` is ``Xf[n, c, f + ky*dh*Wq +
kx*dw]``: affine in ``f`` with unit stride, across row boundaries. The grid
columns past the output width (``Wq - OW`` of them, the padding) are computed and
dropped when the rows are copied into the NCHW output. A stride ``s > 1`` would
make that read strided, so the input is also split into ``s x s`` phases
(space-to-depth): phase ``(py, px)`` holds ``Xpad[s*i + py, s*j + px]``, and tap
``(ky, kx)`` reads phase ``(ky*dh % s, kx*dw % s)`` at ``f + (ky*dh // s) * Wq +
(kx*dw // s)``, unit stride again.

The micro-kernel accumulates an ``oc_bn x vec`` tile (``oc_bn`` output channels
unrolled, ``vec`` grid positions vectorized; ``oc_bn * vec / 16`` AVX-512
registers) in a local buffer computed at the tile loop, reducing over ``(c, ky,
kx)`` with the kernel loops unrolled: one contiguous input vector per tap and
row of the tile, one broadcast weight per channel, no packed copy of the weights.
Tiles are computed for a block of ``rows`` output rows of ``oc_bn`` channels at a
time, and the loop over (batch, channel block, row block) runs in parallel;
each block is copied to the output while it is still in cache. Output channels
that ``oc_bn`` does not divide read clamped weights and are never copied out;
the last, partial vector tile of a block is a guarded tail that loop
partitioning turns into a shorter vector.
"""

from __future__ import annotations

from typing import Any

from ember.codegen_llvm.schedules.reduce import likely
from ember.errors import ArgumentError
from ember.tir import dtype as dt
from ember.tir import expr as E
from ember.tir.schedule.schedule import Schedule, create_schedule
from ember.tir.te import operation as te
from ember.tir.te.tensor import Tensor
from ember.tir.topi.workload import Conv2DWorkload
from ember.tuner.template import get_config, template

IntPair = int | tuple[int, int]
Padding = int | tuple[int, int] | tuple[int, int, int, int]

REGISTER_BYTES = 64  # one AVX-512 register
ACC_REGISTERS = 28  # of 32: room for the input vectors and a broadcast weight
MAX_ROW_VECTOR = 64  # output rows longer than this are copied in pieces


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


class _Geometry:
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


def _flat_input(X: Tensor, g: _Geometry, length: int) -> Tensor:
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


def _divisors(n: int, cap: int) -> list[int]:
    return [d for d in range(1, min(n, cap) + 1) if n % d == 0]


def _define_knobs(g: _Geometry, dtype: str) -> tuple[int, int, int, bool]:
    """Define the knobs, with defaults for a 2-core AVX-512 machine, and read them."""
    cfg = get_config()
    per_reg = REGISTER_BYTES // dt.bytes_of(dtype)
    vecs = [v * per_reg for v in (1, 2, 4)]
    ocs = [2, 4, 6, 8, 12, 16, 24]
    fits = [o for o in ocs if o * 2 <= ACC_REGISTERS and o <= max(g.O, 2)]
    dividing = [o for o in fits if g.O % o == 0 and o >= 4]
    oc_default = max(dividing) if dividing else min(fits, key=lambda o: (-(-g.O // o) * o, -o))
    vec_default = 2 * per_reg if oc_default * 2 <= ACC_REGISTERS else per_reg
    row_cands = sorted(set(_divisors(g.OH, 64)) | {g.OH})
    # a block long enough for several full vector tiles keeps the partial tail cheap
    long_enough = [r for r in row_cands if (r - 1) * g.Wq + g.OW >= 8 * vec_default]
    cfg.define_knob("oc_bn", ocs, default=oc_default)
    cfg.define_knob("vec", vecs, default=vec_default)
    # a block of whole vector tiles has no partial tail at all (measured 2x faster on 1x1
    # convs at 56x56: 8 rows of 56 in 32-lane tiles rather than 7)
    whole = [r for r in long_enough if ((r - 1) * g.Wq + g.OW) % vec_default == 0]
    rows_default = min(whole or long_enough) if long_enough else g.OH
    # A 1x1 layer read in place: blocks of at least ~24 tiles, and where no block size
    # lets it read in place, the whole image (a sweep of MobileNetV2's 1x1 layers: at 28x28
    # the whole image ran 1.5x faster than blocks of 4 rows; at 56x56 and 112x112 blocks
    # of 4 to 16 rows were within 5% of each other).
    direct = [r for r in row_cands if g.reads_input_directly(r, vec_default)]
    if direct:
        rows_default = min((r for r in direct if r * g.W >= 24 * vec_default), default=max(direct))
    cfg.define_knob("rows", row_cands, default=rows_default)
    # a 7x7 window unrolled over an oc_bn tile is a loop body of over a thousand
    # instructions, slower than the loop it replaces (ResNet's stem: 3 to 7 times)
    cfg.define_knob("unroll_kernel", [True, False], default=g.KH * g.KW <= 9)
    cfg.add_constraint(
        lambda c: c["oc_bn"].val * c["vec"].val <= ACC_REGISTERS * per_reg,
        "the accumulator tile fits the vector registers",
    )
    return cfg["oc_bn"].val, cfg["vec"].val, cfg["rows"].val, cfg["unroll_kernel"].val


@template("conv2d_nchw.llvm")
def conv2d_nchw_llvm(
    N: int,
    C: int,
    H: int,
    W: int,
    O: int,
    KH: int,
    KW: int,
    stride: IntPair = 1,
    padding: Padding = 0,
    dilation: IntPair = 1,
    dtype: str = "float32",
) -> tuple[Schedule, list[Any]]:
    """``out[n, o, y, x] = sum_{c, ky, kx} X[n, c, y*sh + ky*dh - pt, x*sw + kx*dw - pl] *
    Wt[o, c, ky, kx]`` with zero padding; X is (N, C, H, W), Wt is (O, C, KH, KW)."""
    g = geometry(Conv2DWorkload(N, C, H, W, O, KH, KW, stride, padding, dilation, dtype))
    knobs = _define_knobs(g, dtype)
    X = te.placeholder((N, C, H, W), dtype, name="X")
    Wt = te.placeholder((O, C, KH, KW), dtype, name="W")
    out = conv2d_flat(X, Wt, None, g, *knobs)
    conv = out.op.input_tensors[0]
    s = create_schedule(out.op)
    direct = g.reads_input_directly(knobs[2], knobs[1])
    _schedule(s, out, conv, conv.op.input_tensors[0], *knobs, g.OW, g.Wq, g.sw, direct)
    return s, [X, Wt, out]


def conv2d_flat(
    X: Tensor,
    Wt: Tensor,
    bias: Tensor | None,
    g: _Geometry,
    oc_bn: int,
    vec: int,
    rows: int,
    unroll_kernel: bool,
) -> Tensor:
    """The template's compute on given tensors: the flat, phase-split input ``X_flat``,
    the convolution on the flat grid ``conv_flat`` (tagged ``conv2d_nchw_flat``, its knobs
    in the op's attrs for :func:`schedule_conv2d_flat`), and the NCHW copy ``conv`` (plus
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
        tag="conv2d_nchw_flat",
        attrs=knobs,
    )

    def copy(n, o, y, x):  # noqa: ANN001, ANN202
        value = conv[n, o // oc_bn, o % oc_bn, y * g.Wq + x]
        return value + bias[o] if bias is not None else value

    return te.compute((g.N, O, g.OH, g.OW), copy, name="conv", tag="conv2d_nchw")


def schedule_conv2d_flat(s: Schedule, out: Tensor, conv: Tensor) -> None:
    """The template's schedule for ``conv`` (a ``conv_flat`` stage) whose NCHW result
    reaches ``out``, an output stage of shape (N, O, OH, OW) into which the copy (and any
    elementwise epilogue) is inlined."""
    knobs = dict(conv.op.attrs)
    Xf = conv.op.input_tensors[0]
    _schedule(
        s,
        out,
        conv,
        Xf,
        knobs["oc_bn"],
        knobs["vec"],
        knobs["rows"],
        knobs["unroll_kernel"],
        knobs["OW"],
        knobs["Wq"],
        knobs["sw"],
        knobs["direct"],
    )


def geometry(w: Conv2DWorkload) -> _Geometry:
    """The template's geometry of a convolution workload."""
    return _Geometry(w.N, w.C, w.H, w.W, w.O, w.KH, w.KW, w.strides, w.pads, w.dilations)


def conv2d_geometry(X: Tensor, Wt: Tensor, strides: Any, pads: Any, dilations: Any) -> _Geometry:
    N, C, H, W = (int(d.value) for d in X.shape)  # type: ignore[attr-defined]
    O, _, KH, KW = (int(d.value) for d in Wt.shape)  # type: ignore[attr-defined]
    return _Geometry(N, C, H, W, O, KH, KW, tuple(strides), tuple(pads), tuple(dilations))


def conv2d_default_knobs(g: _Geometry, dtype: str) -> tuple[int, int, int, bool]:
    """The template's fallback knobs for ``g`` (what a graph uses until it is tuned)."""
    from ember.tuner.space import FallbackConfig

    return conv2d_knobs(g, dtype, FallbackConfig())


def conv2d_knobs(g: _Geometry, dtype: str, cfg: Any) -> tuple[int, int, int, bool]:
    """The knobs ``cfg`` (a config of this template's task for ``g``, e.g. a recorded
    one, or a ``FallbackConfig``) chooses for ``g``."""
    from ember.tuner.template import using_config

    with using_config(cfg):
        return _define_knobs(g, dtype)


def _schedule(
    s: Schedule,
    out: Tensor,
    conv: Tensor,
    Xf: Tensor,
    oc_bn: int,
    vec: int,
    rows: int,
    unroll_kernel: bool,
    OW: int,
    Wq: int,
    sw: int,
    direct: bool = False,
) -> None:
    acc = s.cache_write(conv, "local")
    # the output: parallel over (batch, channel block, row block); rows copied as vectors
    n, o, y, x = s[out].op.axis
    oo, oi = s[out].split(o, factor=oc_bn)
    yo, yi = s[out].split(y, factor=rows)
    if direct:  # the channel blocks of a row block read its input rows while they are in cache
        s[out].reorder(n, yo, oo, oi, yi, x)
        block = s[out].fuse(n, yo, oo)
    else:
        s[out].reorder(n, oo, yo, oi, yi, x)
        block = s[out].fuse(n, oo, yo)
    s[out].parallel(block)
    if OW <= MAX_ROW_VECTOR:
        s[out].vectorize(x)
    else:
        piece = max(_divisors(OW, MAX_ROW_VECTOR))
        s[out].vectorize(s[out].split(x, factor=piece if piece >= 8 else 16)[1])
    # one block of the flat result, computed tile by tile where the copy needs it
    s[conv].compute_at(s[out], block)
    _, _, ci, cf = s[conv].op.axis
    tile, lanes = s[conv].split(cf, factor=vec)
    s[conv].reorder(tile, ci, lanes)
    s[conv].vectorize(lanes)
    # the register tile: channels unrolled, grid positions in vector lanes
    s[acc].compute_at(s[conv], tile)
    _, _, ai, af = s[acc].op.axis
    rc, ry, rx = s[acc].op.reduce_axis
    s[acc].reorder(rc, ry, rx, ai, af)
    if unroll_kernel:
        s[acc].unroll(ry)
        s[acc].unroll(rx)
    s[acc].unroll(ai)
    s[acc].vectorize(af)
    if direct:
        return
    # the flat, phase-split input: once, in parallel over (batch, channel)
    xn, xc, py, px, flat = s[Xf].op.axis
    s[Xf].parallel(s[Xf].fuse(xn, xc))
    row, col = s[Xf].split(flat, factor=Wq)
    # rows of the padded input: no div/mod per element; partitioning drops the padding
    # test (``likely``) from the interior, a vector copy
    if sw == 1:
        s[Xf].vectorize(col)
    else:
        strided_phase_copy(s, Xf, py, row, px, col)


def strided_phase_copy(s: Schedule, Xf: Tensor, py: Any, row: Any, px: Any, col: Any) -> None:
    """Schedule the phase split of a strided input (``X_flat``, its flat axis split into
    ``row`` and ``col``): the column phases unrolled, each phase's row one vector whose
    reads have the stride (a masked load and a shuffle in LLVM), the padding columns
    peeled off by loop partitioning (1.9x on MobileNetV2's strided depthwise layers,
    whose scalar phase copy took most of their time)."""
    s[Xf].reorder(py, row, px, col)
    s[Xf].unroll(px)
    s[Xf].vectorize(col)
