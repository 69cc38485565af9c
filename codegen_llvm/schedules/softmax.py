"""CPU template for ``softmax`` over the last axis of a 2-D tensor.

``out[r, c] = exp(X[r, c] - max_c X[r, c]) / sum_c exp(X[r, c] - max_c X[r, c])``.
Rows run in parallel, and everything one row needs is computed at the row
loop, while the row is in cache: the row maximum and the sum of exponentials as
lane-partial reductions (vectorized, see :mod:`ember.codegen_llvm.schedules.reduce`),
the exponentials into a row buffer, the reciprocal of the sum, and the row scaled
by it, each a vector loop over the row with a guarded tail that loop partitioning
shortens.
"""

from __future__ import annotations

from typing import Any

from ember.codegen_llvm.schedules.reduce import (
    compute_row_at,
    compute_row_reduction_at,
    define_lanes_knob,
    stages_by_name,
    vectorize_row,
)
from ember.tir.schedule.schedule import Schedule, create_schedule
from ember.tir.te import operation as te
from ember.tir.topi.nn import softmax
from ember.tir.topi.rows import lane_row_reduce
from ember.tuner.template import template


@template("softmax.llvm")
def softmax_llvm(R: int, C: int, dtype: str = "float32") -> tuple[Schedule, list[Any]]:
    """Softmax of each row of X, of shape (R, C): ``tir/topi``'s compute with lane-partial
    row reductions and the reciprocal sum as a row stage."""
    lanes = define_lanes_knob(C, dtype)
    X = te.placeholder((R, C), dtype, name="X")
    parts: list[Any] = []
    out = softmax(X, row_reduce=lane_row_reduce(lanes, parts), row_factor=True)
    t = stages_by_name(out)
    ex, inv, sm, mx = t["softmax_exp"], t["softmax_inv"], t["softmax_sum"], t["softmax_max"]
    mx_part, sm_part = parts
    s = create_schedule(out.op)
    row, _ = vectorize_row(s, out, lanes)
    s[out].parallel(row)
    ex_row = compute_row_at(s, ex, s[out], row, lanes)
    compute_row_reduction_at(s, mx_part, mx, s[ex], ex_row)
    s[inv].compute_at(s[out], row)
    compute_row_reduction_at(s, sm_part, sm, s[inv], s[inv].op.axis[0])
    return s, [X, out]
