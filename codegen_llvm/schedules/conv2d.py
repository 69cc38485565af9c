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

from ember.codegen_llvm.cpu_features import vector_unit
from ember.tir.schedule.schedule import Schedule, create_schedule
from ember.tir.te import operation as te
from ember.tir.te.tensor import Tensor
from ember.tir.topi.conv_flat import FLAT_CONV_TAG, IntPair, Padding, conv2d_flat
from ember.tir.topi.conv_flat import FlatGeometry as _Geometry
from ember.tir.topi.workload import Conv2DWorkload

__all__ = [
    "FLAT_CONV_TAG",
    "IntPair",
    "Padding",
    "conv2d_flat",
    "conv2d_nchw_llvm",
    "geometry",
    "schedule_conv2d_flat",
]
from ember.tuner.space import FallbackConfig
from ember.tuner.template import get_config, template, using_config

MAX_ROW_VECTOR = 64  # output rows longer than this are copied in pieces


def _divisors(n: int, cap: int) -> list[int]:
    return [d for d in range(1, min(n, cap) + 1) if n % d == 0]


def _define_knobs(g: _Geometry, dtype: str) -> tuple[int, int, int, bool]:
    """Define the knobs, with defaults measured on a 2-core AVX-512 machine and tiles
    sized by the target's registers, and read them."""
    cfg = get_config()
    unit = vector_unit()
    per_reg = unit.lanes(dtype)
    # all but 4 registers (28 of AVX-512's 32): room for the input vectors and a broadcast
    acc_registers = unit.registers - 4
    vecs = [v * per_reg for v in (1, 2, 4)]
    ocs = [2, 4, 6, 8, 12, 16, 24]
    fits = [o for o in ocs if o * 2 <= acc_registers and o <= max(g.O, 2)]
    dividing = [o for o in fits if g.O % o == 0 and o >= 4]
    oc_default = max(dividing) if dividing else min(fits, key=lambda o: (-(-g.O // o) * o, -o))
    vec_default = 2 * per_reg if oc_default * 2 <= acc_registers else per_reg
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
        lambda c: c["oc_bn"].val * c["vec"].val <= acc_registers * per_reg,
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
    """The template's geometry of a graph convolution's input and weight tensors (the strategy
    reads its knobs from it before any schedule exists)."""
    N, C, H, W = (int(d.value) for d in X.shape)  # type: ignore[attr-defined]
    O, _, KH, KW = (int(d.value) for d in Wt.shape)  # type: ignore[attr-defined]
    return _Geometry(N, C, H, W, O, KH, KW, tuple(strides), tuple(pads), tuple(dilations))


def conv2d_default_knobs(g: _Geometry, dtype: str) -> tuple[int, int, int, bool]:
    """The template's fallback knobs for ``g`` (what a graph uses until it is tuned)."""

    return conv2d_knobs(g, dtype, FallbackConfig())


def conv2d_knobs(g: _Geometry, dtype: str, cfg: Any) -> tuple[int, int, int, bool]:
    """The knobs ``cfg`` (a config of this template's task for ``g``, e.g. a recorded
    one, or a ``FallbackConfig``) chooses for ``g``."""

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
