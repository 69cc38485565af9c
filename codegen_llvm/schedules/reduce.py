"""CPU template for row reductions (``sum``, ``max``, ``min`` over the last axis), and the
row schedule helpers that the softmax and layer-norm templates share; the lane-partial
row reduction they schedule is a ``tir/topi`` compute (:mod:`ember.tir.topi.rows`).

The vectorizer makes SIMD of a loop whose store moves with it, which a reduction's
store does not. So a row is reduced in two steps: ``lanes`` partial results, where
partial ``l`` reduces the row's elements ``l, l + lanes, l + 2*lanes, ...`` (the
store moves with ``l``, one vector operation per ``lanes`` elements, with
``lanes / 16`` independent AVX-512 accumulators), then the partials are combined
into one value. The partials are computed at the row loop, in a small local
buffer, and the row loop runs in parallel. The last, partial group of a row that
``lanes`` does not divide is guarded with ``likely``, so loop partitioning keeps
the guard out of the main loop and turns the tail into a shorter vector.
"""

from __future__ import annotations

from typing import Any

from ember.errors import ArgumentError
from ember.tir import dtype as dt
from ember.tir.schedule.schedule import Schedule, Stage, create_schedule
from ember.tir.te import operation as te
from ember.tir.te.tensor import IterVar, Tensor
from ember.tir.topi.nn import reduce_rows
from ember.tir.topi.rows import REDUCERS, combine_lanes, lane_partials, lane_row_reduce, likely
from ember.tuner.template import get_config, template

__all__ = [
    "combine_lanes",
    "compute_lanes_at",
    "compute_row_at",
    "compute_row_reduction_at",
    "define_lanes_knob",
    "lane_partials",
    "likely",
    "reduce_llvm",
    "stages_by_name",
    "vectorize_row",
]

VECTOR_BYTES = 64  # one AVX-512 register


def define_lanes_knob(C: int, dtype: str) -> int:
    """Define the ``lanes`` knob (partials per row) and read it: by default two registers'
    worth, or one when the row is shorter than that."""
    cfg = get_config()
    per_reg = VECTOR_BYTES // dt.bytes_of(dtype)
    cands = [per_reg // 2, per_reg, 2 * per_reg, 4 * per_reg]
    cfg.define_knob("lanes", cands, default=2 * per_reg if C >= 2 * per_reg else per_reg)
    return int(cfg["lanes"].val)


def compute_lanes_at(s: Schedule, part: Tensor, parent: Stage, axis: IterVar) -> None:
    """Compute the partials inside ``parent``'s loop ``axis``, lane loop innermost and
    vectorized."""
    s[part].compute_at(parent, axis)
    r, l = s[part].op.axis
    (ko,) = s[part].op.reduce_axis
    s[part].reorder(r, ko, l)
    s[part].vectorize(l)


def compute_row_reduction_at(
    s: Schedule, part: Tensor, total: Tensor, parent: Stage, axis: IterVar
) -> None:
    """Compute the row total inside ``parent``'s loop ``axis`` and its partials just before it."""
    s[total].compute_at(parent, axis)
    compute_lanes_at(s, part, s[total], s[total].op.axis[0])


def vectorize_row(s: Schedule, t: Tensor, lanes: int) -> tuple[IterVar, IterVar]:
    """Split the last axis of 2-D ``t`` by ``lanes`` and vectorize the inner loop;
    returns ``(row, column tile)``."""
    r, c = s[t].op.axis
    _, ci = s[t].split(c, factor=lanes)
    s[t].vectorize(ci)
    return r, ci


def compute_row_at(s: Schedule, t: Tensor, parent: Stage, axis: IterVar, lanes: int) -> IterVar:
    """Compute the row of 2-D ``t`` that ``parent`` needs inside its loop ``axis``, vectorized;
    returns ``t``'s row loop."""
    s[t].compute_at(parent, axis)
    return vectorize_row(s, t, lanes)[0]


def stages_by_name(t: Tensor) -> dict[str, Tensor]:
    """``t`` and every tensor it depends on, by op name (a template finds the stages of
    the ``tir/topi`` compute it was given)."""
    found: dict[str, Tensor] = {}
    stack = [t]
    while stack:
        cur = stack.pop()
        if cur.op.name not in found:
            found[cur.op.name] = cur
            stack.extend(getattr(cur.op, "input_tensors", ()))
    return found


def _check_kind(kind: str) -> None:
    if kind not in REDUCERS:
        raise ArgumentError(f"reduce.llvm: kind must be one of {sorted(REDUCERS)}, got {kind!r}")


@template("reduce.llvm")
def reduce_llvm(
    R: int, C: int, kind: str = "sum", dtype: str = "float32"
) -> tuple[Schedule, list[Any]]:
    """``out[r] = kind_c X[r, c]`` for X of shape (R, C); kind is sum, max or min."""
    _check_kind(kind)
    lanes = define_lanes_knob(C, dtype)
    X = te.placeholder((R, C), dtype, name="X")
    parts: list[Tensor] = []
    out = reduce_rows(X, kind, "red", row_reduce=lane_row_reduce(lanes, parts))
    (part,) = parts
    s = create_schedule(out.op)
    (r,) = s[out].op.axis
    s[out].parallel(r)
    compute_lanes_at(s, part, s[out], r)
    return s, [X, out]
