"""The ``tree_leaves`` op: where each tree of a decision forest sends each sample.

Inputs: the samples X (N, F), then the forest's tables, one row per entry (interior
nodes, then leaves): feature (int32), split (X's dtype), true and false successors
(int32), then the roots (int32, one per tree), then the optional tables the attribute
``tables`` names, in this order: ``mode`` (int32, where several modes are in use),
``missing_true`` (int8) and ``members`` (X's dtype, one row of set members per entry,
padded with NaN). Attributes: modes (the ONNX ``nodes_modes`` values in use), depth
(steps of the walk), tables. The output is (N, number of trees) int32 entry indices.
The compute is ``tir/topi/trees.py``; it reads X at data-dependent features, so it is
INJECTIVE like the gathers.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ember.errors import ArgumentError
from ember.frontend.graph import TensorType
from ember.frontend.op_kinds import INJECTIVE
from ember.frontend.ops.registry import register_op
from ember.tir.topi import trees as topi_trees

OPTIONAL_TABLES = ("mode", "missing_true", "members")
_FIXED = 6  # X, feature, split, true_next, false_next, roots


def _infer_tree_leaves(types: Sequence[TensorType], attrs: dict[str, Any]) -> list[TensorType]:
    x, feature, split, true_next, false_next, roots = types[:_FIXED]
    tables = attrs["tables"]
    if len(types) != _FIXED + len(tables) or any(t not in OPTIONAL_TABLES for t in tables):
        raise ArgumentError(f"tree_leaves: {len(types)} inputs for optional tables {list(tables)}")
    if x.ndim != 2 or not x.dtype.startswith("float") or split.dtype != x.dtype:
        raise ArgumentError(f"tree_leaves: samples {x} must be (N, F) floats like the splits")
    rows = {feature.shape, split.shape, true_next.shape, false_next.shape}
    if len(rows) != 1 or feature.ndim != 1 or roots.ndim != 1:
        raise ArgumentError("tree_leaves: the tables must have one row per entry")
    if len(attrs["modes"]) > 1 and "mode" not in tables:
        raise ArgumentError(f"tree_leaves: modes {list(attrs['modes'])} need a mode table")
    return [TensorType((x.shape[0], roots.shape[0]), "int32")]


@register_op("tree_leaves", INJECTIVE, infer=_infer_tree_leaves, num_inputs=(_FIXED, _FIXED + 3))
def tree_leaves(inputs: Sequence[Any], attrs: dict[str, Any]) -> list[Any]:
    """Walks every tree from its root for every sample."""
    x, feature, split, true_next, false_next, roots = inputs[:_FIXED]
    optional = dict(zip(attrs["tables"], inputs[_FIXED:]))
    leaves = topi_trees.tree_leaves(
        x, feature, split, true_next, false_next, roots, attrs["modes"], attrs["depth"],
        optional.get("mode"), optional.get("missing_true"), optional.get("members"),
    )  # fmt: skip
    return [leaves]
