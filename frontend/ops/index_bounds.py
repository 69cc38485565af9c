"""Which op inputs are indices, the range each index must lie in, and the check itself.

The gather and scatter computes (``tir/topi/transform.py::take``,
``tir/topi/indexing.py``, ``tir/topi/scatter.py``) clamp an index into its axis so
that a kernel never reads or writes outside its buffers; they cannot report an index
that was out of range. onnxruntime refuses such an index at run time, and a clamped
read is a silently wrong result, so Ember checks the index tensor *before* the
kernel: :func:`check_indices` on the host, with numpy (one min and one max over the
indices, which costs microseconds next to the kernel). Constant indices are checked
once, when the model is compiled (``ember/index_guard.py``) or folded
(``frontend/fold.py``); indices computed at run time are checked before the step
that reads them, which is why fusion never puts an index's producer in its
consumer's kernel (``frontend/passes/fuse_ops.py``).

An index into an axis of ``n`` elements is legal in ``[-n, n)`` (a negative one
counts from the end, as ONNX says). OneHot is not listed: ONNX defines an index
outside ``[-depth, depth)`` to give a row of ``off`` values, and onnxruntime and the
compute both do that.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from ember.errors import ArgumentError
from ember.frontend.graph import TensorType

# (types, attrs) -> (input position of the indices, the axis size each index column
# addresses: one bound for every element, or one per entry of the indices' last axis)
BoundsRule = Callable[[Sequence[TensorType], dict[str, Any]], tuple[int, tuple[Any, ...], bool]]


def _along_axis(types: Sequence[TensorType], attrs: dict[str, Any]) -> tuple[int, tuple, bool]:
    """Every index addresses ``attrs["axis"]`` of the data (input 0)."""
    return 1, (types[0].shape[attrs["axis"]],), False


def _gather_nd(types: Sequence[TensorType], attrs: dict[str, Any]) -> tuple[int, tuple, bool]:
    """Column ``j`` of the indices' last axis addresses data axis ``batch_dims + j``."""
    b, k = attrs["batch_dims"], types[1].shape[-1]
    return 1, tuple(types[0].shape[b : b + k]), True


def _scatter_nd(types: Sequence[TensorType], attrs: dict[str, Any]) -> tuple[int, tuple, bool]:
    """Column ``j`` of the indices' last axis addresses data axis ``j``."""
    return 1, tuple(types[0].shape[: types[1].shape[-1]]), True


RULES: dict[str, BoundsRule] = {
    "gather": _along_axis,
    "gather_elements": _along_axis,
    "scatter_elements": _along_axis,
    "gather_nd": _gather_nd,
    "scatter_nd": _scatter_nd,
}


def index_input(op: str, types: Sequence[TensorType], attrs: dict[str, Any]) -> int | None:
    """The position of ``op``'s index input, or None for an op that takes no indices."""
    rule = RULES.get(op)
    return None if rule is None else rule(types, attrs)[0]


def make_check(
    op: str, types: Sequence[TensorType], attrs: dict[str, Any], value: str, where: str
) -> Callable[[np.ndarray], None] | None:
    """A check of ``op``'s index array (the value named ``value``, read by the node
    ``where``), or None when ``op`` takes no indices. The bounds are fixed here, so the
    check does only the two reductions and the comparisons per call."""
    rule = RULES.get(op)
    if rule is None:
        return None
    _, bounds, per_column = rule(types, attrs)
    if not all(isinstance(n, int) for n in bounds):
        return None  # a symbolic axis: checked in the model compiled for its size
    limits = np.asarray(bounds, dtype=np.int64)

    def check(indices: np.ndarray) -> None:
        if indices.size == 0:
            return
        rows = indices.reshape(-1, len(bounds)) if per_column else indices.reshape(-1, 1)
        low, high = rows.min(axis=0), rows.max(axis=0)
        if np.all(low >= -limits) and np.all(high < limits):
            return
        _refuse(indices, bounds, per_column, op, value, where)

    return check


def check_indices(
    op: str,
    types: Sequence[TensorType],
    attrs: dict[str, Any],
    arrays: Sequence[np.ndarray | None],
    names: Sequence[str],
    where: str,
) -> None:
    """Check ``op``'s index input among ``arrays`` (None where unknown) right now."""
    pos = index_input(op, types, attrs)
    if pos is None or arrays[pos] is None:
        return
    check = make_check(op, types, attrs, names[pos], where)
    if check is not None:
        check(np.asarray(arrays[pos]))


def _refuse(
    indices: np.ndarray, bounds: tuple[int, ...], per_column: bool, op: str, value: str, where: str
) -> None:
    """Raise the ArgumentError that names the input, the first bad index and its range."""
    limits = np.asarray(bounds, dtype=np.int64)
    if per_column:
        shaped = indices.reshape(-1, len(bounds))
        bad = (shaped < -limits) | (shaped >= limits)
        row, col = (int(v) for v in np.argwhere(bad)[0])
        at = np.unravel_index(row * len(bounds) + col, indices.shape)
        n = bounds[col]
        what = f"column {col} of the indices' last axis"
    else:
        flat = indices.reshape(-1)
        first = int(np.flatnonzero((flat < -bounds[0]) | (flat >= bounds[0]))[0])
        at = np.unravel_index(first, indices.shape)
        n = bounds[0]
        what = "the indexed axis"
    position = [int(i) for i in at]
    raise ArgumentError(
        f"{where}: index input '{value}' holds {int(indices[tuple(position)])} at "
        f"{position}, outside [{-n}, {n}) ({what} has {n} entries; {op} refuses an index "
        "out of range, as onnxruntime does)"
    )
