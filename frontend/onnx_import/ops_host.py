"""ONNX ops whose output shape is their inputs' values, NonMaxSuppression and Unique,
TfIdfVectorizer's n-gram matching, and RoiAlign's sampling tables: computed on the host
when the model is compiled.

How many boxes survive suppression, or how many distinct values a tensor holds, is known
only from the data, and Ember compiles kernels of static shapes. So these converters read
their inputs with ``ctx.constant``: an initializer (or a value folded from constants) is
used as it is, and an input the model feeds at run time makes the model compile once per
distinct value of it (``ember/graph/dynamic_model.py``), which suits the small tensors
such ops see in the node tests and post-processing heads. The result is a constant of the
graph. An input over the per-value limit (4,096 elements: a detector's full box list) is
refused with that reason rather than compiled per image. TfIdfVectorizer's output shape is
static, but matching token ids against a pool of n-grams is a dictionary walk, not a
kernel; the token ids of its node tests are as small. RoiAlign reads the feature map at
run time, but where it reads (the regions, a handful of boxes) is fixed per value, so
the taps and weights become constant tables and the map one gather. The semantics are ONNX's
(``onnx/reference/ops/op_non_max_suppression.py``, ``op_unique.py``,
``op_tfidf_vectorizer.py``, ``op_roi_align.py``).
"""

from __future__ import annotations

import numpy as np

from ember.errors import ArgumentError
from ember.frontend.onnx_import.context import ConvertContext
from ember.frontend.onnx_import.registry import converter


def _optional_scalar(ctx: ConvertContext, i: int) -> float | None:
    """Input ``i`` as a number, or None where it is left out or empty."""
    if ctx.num_inputs <= i or not ctx.has_input(i):
        return None
    data = np.asarray(ctx.constant(i)).reshape(-1)
    return None if data.size == 0 else data[0].item()


def _corners(boxes: np.ndarray, center_point_box: int) -> np.ndarray:
    """(y_min, x_min, y_max, x_max) of each box, from either ONNX box format."""
    if center_point_box:
        xc, yc, w, h = (boxes[..., k].astype(np.float64) for k in range(4))
        return np.stack([yc - h / 2, xc - w / 2, yc + h / 2, xc + w / 2], axis=-1)
    b = boxes.astype(np.float64)
    y = np.sort(b[..., [0, 2]], axis=-1)  # corners may come in either order
    x = np.sort(b[..., [1, 3]], axis=-1)
    return np.stack([y[..., 0], x[..., 0], y[..., 1], x[..., 1]], axis=-1)


def _overlaps(a: np.ndarray, b: np.ndarray, threshold: float) -> bool:
    """Whether boxes ``a`` and ``b`` (corners) overlap by more than ``threshold`` IoU;
    boxes that do not intersect, or have no area, never do."""
    height = min(a[2], b[2]) - max(a[0], b[0])
    width = min(a[3], b[3]) - max(a[1], b[1])
    if height <= 0 or width <= 0:
        return False
    inter = height * width
    area_a = (a[2] - a[0]) * (a[3] - a[1])
    area_b = (b[2] - b[0]) * (b[3] - b[1])
    union = area_a + area_b - inter
    if area_a <= 0 or area_b <= 0 or union <= 0:
        return False
    return bool(inter / union > threshold)


@converter("NonMaxSuppression", since=10)
def non_max_suppression(ctx: ConvertContext) -> list[str]:
    """ONNX NonMaxSuppression: per batch and class, the boxes taken greedily by falling
    score (equal scores: the lower index first), each dropped when it overlaps one taken
    before by more than the IoU threshold; (batch, class, box) rows, int64."""
    boxes, scores = np.asarray(ctx.constant(0)), np.asarray(ctx.constant(1))
    if boxes.ndim != 3 or boxes.shape[-1] != 4 or scores.ndim != 3:
        raise ArgumentError(
            f"NonMaxSuppression: boxes {boxes.shape} must be (batches, boxes, 4) and scores "
            f"{scores.shape} (batches, classes, boxes)"
        )
    if scores.shape[0] != boxes.shape[0] or scores.shape[2] != boxes.shape[1]:
        raise ArgumentError(
            f"NonMaxSuppression: scores {scores.shape} do not fit boxes {boxes.shape}"
        )
    limit = _optional_scalar(ctx, 2)
    keep_at_most = max(int(limit), 0) if limit is not None else 0
    iou = _optional_scalar(ctx, 3)
    iou = 0.0 if iou is None else float(iou)
    floor = _optional_scalar(ctx, 4)
    corners = _corners(boxes, int(ctx.attr("center_point_box", 0)))
    rows = []
    for b in range(scores.shape[0]):
        for c in range(scores.shape[1]):
            s = scores[b, c]
            order = np.lexsort((np.arange(s.size), -s))  # score down, then index up
            if floor is not None:
                order = order[s[order] > floor]
            taken: list[int] = []
            for i in order:
                if len(taken) >= keep_at_most:
                    break
                if not any(_overlaps(corners[b, i], corners[b, j], iou) for j in taken):
                    taken.append(int(i))
            rows += [(b, c, i) for i in taken]
    return [ctx.const(np.array(rows, dtype=np.int64).reshape(len(rows), 3))]


@converter("Unique", since=11)
def unique(ctx: ConvertContext) -> list[str]:
    """ONNX Unique: the distinct values (or slices along ``axis``), sorted or in order of
    first appearance, with each one's first index, every element's index into them, and
    their counts (int64)."""
    x = np.asarray(ctx.constant(0))
    axis = ctx.attr("axis", None)
    if axis is not None:
        axis = int(axis)
        if not -x.ndim <= axis < x.ndim:
            raise ArgumentError(f"Unique: axis {axis} is out of range for rank {x.ndim}")
        axis %= x.ndim
    values, first, inverse, counts = np.unique(
        x, return_index=True, return_inverse=True, return_counts=True, axis=axis, equal_nan=False
    )
    inverse = inverse.reshape(-1)
    if not ctx.attr("sorted", 1):  # in order of first appearance instead
        order = np.argsort(first, kind="stable")
        rank = np.empty_like(order)
        rank[order] = np.arange(order.size)
        values = np.take(values, order, axis=0 if axis is None else axis)
        first, counts, inverse = first[order], counts[order], rank[inverse]
    outs = [values, first, inverse, counts]
    return [
        ctx.const(np.ascontiguousarray(o) if k == 0 else o.astype(np.int64))
        for k, o in enumerate(outs)
    ][: ctx.num_outputs]


def _pool_ngrams(ctx: ConvertContext, low: int, high: int) -> dict[tuple[int, ...], int]:
    """The pool's n-grams of ``low`` to ``high`` items, each to its output index: the pool
    holds the 1-grams from ``ngram_counts[0]``, the 2-grams from ``ngram_counts[1]``...,
    numbered in pool order (sizes outside the range still take their numbers)."""
    pool = [int(v) for v in ctx.attr("pool_int64s", ())]
    if not pool:
        raise ArgumentError("TfIdfVectorizer: a pool of strings is not supported (only int64)")
    starts = [int(c) for c in ctx.attr("ngram_counts")]
    indexes = [int(i) for i in ctx.attr("ngram_indexes")]
    grams: dict[tuple[int, ...], int] = {}
    number = 0
    for size, start in enumerate(starts, 1):
        end = starts[size] if size < len(starts) else len(pool)
        for k in range(start, end - size + 1, size):
            if low <= size <= high:
                grams[tuple(pool[k : k + size])] = indexes[number]
            number += 1
    return grams


@converter("TfIdfVectorizer", since=9)
def tfidf_vectorizer(ctx: ConvertContext) -> list[str]:
    """ONNX TfIdfVectorizer over int64 pools: per row, how often each pooled n-gram occurs
    with its items ``d`` apart for every ``d`` up to ``max_skip_count + 1`` (1-grams
    counted once), weighted as ``mode`` says."""
    x = np.asarray(ctx.constant(0))
    if x.ndim not in (1, 2) or x.dtype.kind not in "iu":
        raise ArgumentError(f"TfIdfVectorizer: input must be 1-D or 2-D integers, got {x.shape}")
    low, high = int(ctx.attr("min_gram_length")), int(ctx.attr("max_gram_length"))
    skips = int(ctx.attr("max_skip_count", 0))
    grams = _pool_ngrams(ctx, low, high)
    size = max(int(i) for i in ctx.attr("ngram_indexes")) + 1
    rows = x.reshape(1, -1) if x.ndim == 1 else x
    counts = np.zeros((rows.shape[0], size), dtype=np.float32)
    for r, row in enumerate(rows.tolist()):
        for distance in range(1, skips + 2):
            shortest = low if distance == 1 else max(low, 2)  # 1-grams only once
            for start in range(len(row)):
                for n in range(shortest, high + 1):
                    last = start + (n - 1) * distance
                    if last >= len(row):
                        break
                    index = grams.get(tuple(row[start : last + 1 : distance]))
                    if index is not None:
                        counts[r, index] += 1
    mode = ctx.attr("mode")
    weights = np.asarray(ctx.attr("weights", ()), dtype=np.float32)
    if mode == "IDF":
        counts = (counts > 0).astype(np.float32) * (weights if weights.size else 1)
    elif mode == "TFIDF" and weights.size:
        counts = counts * weights
    elif mode not in ("TF", "TFIDF"):
        raise ArgumentError(f"TfIdfVectorizer: mode '{mode}' is not TF, IDF or TFIDF")
    return [ctx.const(counts.reshape(size) if x.ndim == 1 else counts)]


def _roi_taps(
    roi: np.ndarray, size: tuple[int, int], out: tuple[int, int], ratio: int, half: bool
) -> tuple[np.ndarray, np.ndarray]:
    """One region's bilinear taps: (out_h * out_w, samples, 4) flat positions in the
    (H, W) map and their weights, ONNX RoiAlign's sampling grid (a sample more than one
    pixel outside the map weighs nothing)."""
    height, width = size
    offset = 0.5 if half else 0.0
    x0, y0, x1, y1 = (float(v) for v in roi)
    start_w, start_h = x0 - offset, y0 - offset
    roi_w, roi_h = x1 - x0, y1 - y0
    if not half:
        roi_w, roi_h = max(roi_w, 1.0), max(roi_h, 1.0)
    bin_h, bin_w = roi_h / out[0], roi_w / out[1]
    grid_h = ratio if ratio > 0 else int(np.ceil(roi_h / out[0]))
    grid_w = ratio if ratio > 0 else int(np.ceil(roi_w / out[1]))
    pos = np.zeros((out[0] * out[1], grid_h * grid_w, 4), dtype=np.int64)
    weight = np.zeros(pos.shape, dtype=np.float64)
    for ph in range(out[0]):
        for pw in range(out[1]):
            for iy in range(grid_h):
                y = start_h + ph * bin_h + (iy + 0.5) * bin_h / grid_h
                for ix in range(grid_w):
                    x = start_w + pw * bin_w + (ix + 0.5) * bin_w / grid_w
                    if y < -1.0 or y > height or x < -1.0 or x > width:
                        continue
                    y, x = max(y, 0.0), max(x, 0.0)
                    y_lo, x_lo = min(int(y), height - 1), min(int(x), width - 1)
                    y = float(y_lo) if y_lo == height - 1 else y
                    x = float(x_lo) if x_lo == width - 1 else x
                    y_hi, x_hi = min(y_lo + 1, height - 1), min(x_lo + 1, width - 1)
                    ly, lx = y - y_lo, x - x_lo
                    k, s = ph * out[1] + pw, iy * grid_w + ix
                    rows = (y_lo * width, y_lo * width, y_hi * width, y_hi * width)
                    pos[k, s] = np.add(rows, (x_lo, x_hi, x_lo, x_hi))
                    weight[k, s] = [(1 - ly) * (1 - lx), (1 - ly) * lx, ly * (1 - lx), ly * lx]
    return pos, weight


@converter("RoiAlign", since=10)
def roi_align(ctx: ConvertContext) -> list[str]:
    """ONNX RoiAlign: the regions (known at compile time, per value) become constant
    tables of bilinear taps, so the feature map is read by one gather: each bin the mean
    of its samples, or in ``max`` mode the largest weighted tap (as ONNX defines it)."""
    xt = ctx.type(0)
    if xt.ndim != 4 or not xt.is_static:
        raise ArgumentError(f"RoiAlign: input must be a static (N, C, H, W) tensor, got {xt}")
    n, c, height, width = xt.dims
    rois, batch = np.asarray(ctx.constant(1)), np.asarray(ctx.constant(2)).reshape(-1)
    if rois.ndim != 2 or rois.shape[1] != 4 or batch.size != rois.shape[0]:
        raise ArgumentError(f"RoiAlign: rois {rois.shape} and batch indices {batch.shape}")
    if batch.size and not (0 <= batch.min() and batch.max() < n):
        raise ArgumentError(f"RoiAlign: a batch index is outside [0, {n})")
    mode = ctx.attr("mode", "avg")
    transform = ctx.attr("coordinate_transformation_mode", "half_pixel")
    half = transform == "half_pixel"
    out = (int(ctx.attr("output_height", 1)), int(ctx.attr("output_width", 1)))
    scale, ratio = float(ctx.attr("spatial_scale", 1.0)), int(ctx.attr("sampling_ratio", 0))
    taps = [_roi_taps(r * scale, (height, width), out, ratio, half) for r in rois]
    samples = max(max(p.shape[1] for p, _ in taps), 1)
    bins = out[0] * out[1]
    pos = np.zeros((len(taps), bins, samples, 4), dtype=np.int64)
    weight = np.zeros(pos.shape, dtype=xt.dtype)
    missing = np.zeros((len(taps), 1, 1, samples), dtype=xt.dtype)  # padded samples: -inf
    for r, (p, w) in enumerate(taps):
        pos[r, :, : p.shape[1]], weight[r, :, : p.shape[1]] = p, w
        missing[r, ..., p.shape[1] :] = -np.inf
        if mode == "avg":
            weight[r] /= max(p.shape[1], 1)
    regions = ctx.emit1("gather", [ctx.input(0), ctx.const(batch.astype(np.int64))], {"axis": 0})
    flat = ctx.emit1("reshape", [regions], {"shape": (len(taps), c, height * width)})
    index = np.broadcast_to(pos.reshape(len(taps), 1, -1), (len(taps), c, pos[0].size))
    values = ctx.emit1(
        "gather_elements", [flat, ctx.const(np.ascontiguousarray(index))], {"axis": 2}
    )
    values = ctx.emit1("multiply", [values, ctx.const(weight.reshape(len(taps), 1, -1))])
    values = ctx.emit1("reshape", [values], {"shape": (len(taps), c, bins, samples, 4)})
    if mode == "avg":
        pooled = ctx.emit1("reduce", [values], {"kind": "sum", "axes": (3, 4), "keepdims": False})
    elif mode == "max":
        best = ctx.emit1("reduce", [values], {"kind": "max", "axes": (4,), "keepdims": False})
        best = ctx.emit1("add", [best, ctx.const(missing)])
        pooled = ctx.emit1("reduce", [best], {"kind": "max", "axes": (3,), "keepdims": False})
    else:
        raise ArgumentError(f"RoiAlign: mode '{mode}' is not avg or max")
    return ctx.emit("reshape", [pooled], {"shape": (len(taps), c, *out)})
