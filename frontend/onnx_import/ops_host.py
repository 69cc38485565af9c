"""ONNX ops whose output shape is their inputs' values: NonMaxSuppression and Unique,
computed on the host when the model is compiled.

How many boxes survive suppression, or how many distinct values a tensor holds, is known
only from the data, and Ember compiles kernels of static shapes. So these converters read
their inputs with ``ctx.constant``: an initializer (or a value folded from constants) is
used as it is, and an input the model feeds at run time makes the model compile once per
distinct value of it (``ember/graph/dynamic_model.py``), which suits the small tensors
such ops see in the node tests and post-processing heads. The result is a constant of the
graph. An input over the per-value limit (4,096 elements: a detector's full box list) is
refused with that reason rather than compiled per image. The semantics are ONNX's
(``onnx/reference/ops/op_non_max_suppression.py``, ``op_unique.py``).
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
