"""CPU schedule of ``expand_dwconv_pw_nchwc``: a MobileNet block whose expanded tensor
never reaches memory.

The compute (:func:`ember.tir.topi.conv_nchwc.expand_depthwise_pointwise_nchwc`) is a 1x1
expand conv over the depthwise conv's padded grid, its clipped and zero-bordered output,
the depthwise reduction, its clip and the 1x1 projection. The loop over (batch, band of
``band`` output rows) runs in parallel. In each iteration, channel block by channel
block, the expanded rows the band's depthwise taps read (``band * stride + 2`` rows of
the padded width for a 3x3 window, 30-110 KB in MobileNetV2) are computed in ``ow_bn x
cb`` register tiles as in ``conv2d_nchwc.py``, then that block's depthwise output for the
band, in register tiles as in ``depthwise_conv2d_nchwc.py``; then the projection's output
rows of the band, in accumulator tiles, read the band's depthwise output (all its
channel blocks: 100-150 KB) from L2. The projection's epilogue (bias, a residual add) is
inlined into the output stage.

Neighbouring bands read the same expanded rows at their edges, and each computes them:
with bands of 7 rows a 3x3 window at stride 1 computes 9 expanded rows for 7 (stride 2:
15 for 14). Bands are the parallel work, so fewer, taller bands trade that recomputation
for balance between the threads (:func:`band_rows`). Halide's sliding window would
compute each row once, in a serial loop over a thread's rows; Ember's TE lowering has
no storage folding, and a band's region is what ``compute_at`` gives.

The knobs are those of the three convs' templates read from the computes' attrs, and the
band (:func:`band_rows`) from the projection's; there is no task of its own to tune.
"""

from __future__ import annotations

from typing import Any

from ember.codegen_llvm.schedules.dw_pointwise_nchwc import tile_rows, unroll_depthwise_taps
from ember.tir.schedule.schedule import Schedule
from ember.tir.te.tensor import Tensor

MAX_BAND = 8  # output rows of a band, at most
MIN_BANDS = 8  # bands to aim for: work for 8 threads, 4 bands each on two


def band_rows(rows: int) -> int:
    """Output rows per band for an output of ``rows`` rows: the most, up to
    :data:`MAX_BAND`, that divide it into at least :data:`MIN_BANDS` bands (56 rows: 7);
    where none divides it, ``rows // MIN_BANDS`` (at least 1) with a shorter last band."""
    for band in range(MAX_BAND, 1, -1):
        if rows % band == 0 and rows // band >= MIN_BANDS:
            return band
    return max(1, min(MAX_BAND, rows // MIN_BANDS))


def _attrs(t: Tensor) -> dict[str, Any]:
    return dict(getattr(t.op, "attrs", {}))


def schedule_expand_dw_pointwise(
    s: Schedule, out: Tensor, conv: Tensor, mid: Tensor, dw: Tensor, padded: Tensor,
    expand: Tensor,
) -> None:  # fmt: skip
    """Schedule the block: the 1x1 reduction ``conv`` (reaching the 5-D ``out``
    elementwise, or ``out`` itself), the clipped depthwise output ``mid``, the depthwise
    reduction ``dw``, the expanded, clipped and bordered ``padded`` and the expand
    reduction ``expand``; every other stage between them must have been inlined already."""
    pw_attrs, e_attrs = _attrs(conv), _attrs(expand)
    acc = s.cache_write(conv, "local")
    if out.op is not conv.op:
        s[conv].compute_inline()
    dacc = s.cache_write(dw, "local")
    s[dw].compute_inline()
    eacc = s.cache_write(expand, "local")
    s[expand].compute_inline()

    out_op: Any = s[out].op
    n, o, y, _, _ = out_op.axis
    yo, yi = s[out].split(y, factor=int(pw_attrs.get("band", 1)))
    xo, _ = tile_rows(s, out, acc, int(pw_attrs.get("ow_bn", 8)))
    s[out].reorder(n, yo, yi, o, xo)
    band = s[out].fuse(n, yo)
    s[out].parallel(band)

    s[mid].compute_at(s[out], band)
    unroll_depthwise_taps(s, mid, dacc, _attrs(dw))
    # the expanded rows of one channel block, computed where that block's taps read them
    mid_op: Any = s[mid].op
    s[padded].compute_at(s[mid], mid_op.axis[1])
    _, (_, ri) = tile_rows(s, padded, eacc, int(e_attrs.get("ow_bn", 8)))
    if bool(e_attrs.get("unroll_ic", False)):
        s[eacc].unroll(ri)
