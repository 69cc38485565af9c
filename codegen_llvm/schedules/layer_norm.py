"""CPU template for ``layer_norm`` over the last axis of a 2-D tensor.

``out[r, c] = (X[r, c] - mean_r) * rsqrt(var_r + eps) * gamma[c] + beta[c]``, with
the mean and the (biased) variance of row ``r``. Rows run in parallel; at the row
loop, while the row is in cache, the mean and then the variance around it are
lane-partial reductions (vectorized, see :mod:`ember.codegen_llvm.schedules.reduce`;
two passes, which keeps the variance accurate when the mean is large), the
reciprocal standard deviation is one scalar, and the normalised row is a vector
loop with a guarded tail that loop partitioning shortens.
"""

from __future__ import annotations

from typing import Any

from ember.codegen_llvm.schedules.reduce import (
    compute_row_reduction_at,
    define_lanes_knob,
    stages_by_name,
    vectorize_row,
)
from ember.tir.schedule.schedule import Schedule, create_schedule
from ember.tir.te import operation as te
from ember.tir.topi.nn import layer_norm
from ember.tir.topi.rows import lane_row_reduce
from ember.tuner.template import template


@template("layer_norm.llvm")
def layer_norm_llvm(
    R: int, C: int, eps: float = 1e-5, dtype: str = "float32"
) -> tuple[Schedule, list[Any]]:
    """Layer normalisation of each row of X (R, C), scaled by gamma (C,) and shifted by
    beta (C,): ``tir/topi``'s compute with lane-partial row reductions and the reciprocal
    standard deviation as a row stage."""
    lanes = define_lanes_knob(C, dtype)
    X = te.placeholder((R, C), dtype, name="X")
    gamma = te.placeholder((C,), dtype, name="gamma")
    beta = te.placeholder((C,), dtype, name="beta")
    parts: list[Any] = []
    out = layer_norm(X, gamma, beta, eps, row_reduce=lane_row_reduce(lanes, parts), row_factor=True)
    t = stages_by_name(out)
    mean, var, rstd = t["ln_mean"], t["ln_var"], t["ln_rstd"]
    mean_part, var_part = parts
    s = create_schedule(out.op)
    row, _ = vectorize_row(s, out, lanes)
    s[out].parallel(row)
    compute_row_reduction_at(s, mean_part, mean, s[out], row)
    s[rstd].compute_at(s[out], row)
    compute_row_reduction_at(s, var_part, var, s[rstd], s[rstd].op.axis[0])
    return s, [X, gamma, beta, out]
