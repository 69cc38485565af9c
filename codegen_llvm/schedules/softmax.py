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
    combine_lanes,
    compute_row_at,
    compute_row_reduction_at,
    define_lanes_knob,
    lane_partials,
    vectorize_row,
)
from ember.tir import expr as E
from ember.tir.schedule.schedule import Schedule, create_schedule
from ember.tir.te import operation as te
from ember.tuner.template import template


@template("softmax.llvm")
def softmax_llvm(R: int, C: int, dtype: str = "float32") -> tuple[Schedule, list[Any]]:
    """Softmax of each row of X, of shape (R, C)."""
    lanes = define_lanes_knob(C, dtype)
    X = te.placeholder((R, C), dtype, name="X")
    mx_part = lane_partials(lambda r, k: X[r, k], R, C, "max", lanes, "softmax_max")
    mx = combine_lanes(mx_part, "max", "softmax_max")
    ex = te.compute((R, C), lambda r, c: te.exp(X[r, c] - mx[r]), name="softmax_exp")
    sm_part = lane_partials(lambda r, k: ex[r, k], R, C, "sum", lanes, "softmax_sum")
    sm = combine_lanes(sm_part, "sum", "softmax_sum")
    # one division per row; the row is scaled by multiplications (a vector divide is slow)
    inv = te.compute((R,), lambda r: E.const(1, dtype) / sm[r], name="softmax_inv")
    out = te.compute((R, C), lambda r, c: ex[r, c] * inv[r], name="softmax", tag="softmax")
    s = create_schedule(out.op)
    row, _ = vectorize_row(s, out, lanes)
    s[out].parallel(row)
    ex_row = compute_row_at(s, ex, s[out], row, lanes)
    compute_row_reduction_at(s, mx_part, mx, s[ex], ex_row)
    s[inv].compute_at(s[out], row)
    compute_row_reduction_at(s, sm_part, sm, s[inv], s[inv].op.axis[0])
    return s, [X, out]
