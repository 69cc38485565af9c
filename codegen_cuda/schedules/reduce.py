"""GPU templates for row reductions and softmax: one block per row, threads cooperate.

Each block reduces one row with ``threads`` threads through shared memory down
to one warp, which finishes with shuffles (:mod:`.block_reduce`). Softmax runs
three such passes in one kernel (row max, then the sum of exponentials, then the
normalised output written by every thread for its columns), so a row is read
from global memory three times but never leaves the block.
"""

from __future__ import annotations

from typing import Any

from ember.codegen_cuda.schedules.block_reduce import block_reduce, schedule_block_reduce
from ember.tir.schedule.schedule import Schedule, create_schedule
from ember.tir.te import operation as te
from ember.tuner.template import get_config, template


@template("reduce.cuda")
def reduce_cuda(
    R: int, C: int, kind: str = "sum", dtype: str = "float32"
) -> tuple[Schedule, list[Any]]:
    cfg = get_config()
    cfg.define_knob("threads", [32, 64, 128, 256, 512], default=256 if C >= 256 else 64)
    threads = cfg["threads"].val
    X = te.placeholder((R, C), dtype, name="X")
    out, steps = block_reduce(R, C, lambda r, c: X[r, c], kind, threads, name="red")
    s = create_schedule(out.op)
    (r,) = s[out].op.axis
    s[out].bind(r, "blockIdx.x")
    schedule_block_reduce(s, s[out], r, steps)
    return s, [X, out]


def _row_kernel(Y: Any, threads: int, scalars: list[Any], steps: list[Any]) -> Schedule:
    """One block per row of ``Y``; its threads sweep the row's columns. The per-row
    scalars (block reductions) are computed at the row loop, one copy per thread."""
    s = create_schedule(Y.op)
    r, c = s[Y].op.axis
    s[Y].bind(r, "blockIdx.x")
    co, ci = s[Y].split(c, factor=threads)
    s[Y].reorder(r, co, ci)
    s[Y].bind(ci, te.thread_axis("threadIdx.x", (0, threads)))
    for scalar in scalars:
        s[scalar].set_scope("local")
        s[scalar].compute_at(s[Y], r)
    schedule_block_reduce(s, s[Y], r, steps)
    return s


@template("softmax.cuda")
def softmax_cuda(R: int, C: int, dtype: str = "float32") -> tuple[Schedule, list[Any]]:
    """Softmax over the last axis: the row max and the sum of exponentials are block
    reductions; each thread keeps its own copy of the two row scalars in registers."""
    cfg = get_config()
    cfg.define_knob("threads", [32, 64, 128, 256, 512], default=256 if C >= 256 else 64)
    threads = cfg["threads"].val
    X = te.placeholder((R, C), dtype, name="X")
    mx, max_steps = block_reduce(R, C, lambda r, c: X[r, c], "max", threads, name="row_max")
    sm, sum_steps = block_reduce(
        R, C, lambda r, c: te.exp(X[r, c] - mx[r]), "sum", threads, name="row_sum"
    )
    Y = te.compute((R, C), lambda r, c: te.exp(X[r, c] - mx[r]) / sm[r], name="softmax")
    return _row_kernel(Y, threads, [mx, sm], max_steps + sum_steps), [X, Y]


@template("layer_norm.cuda")
def layer_norm_cuda(
    R: int, C: int, eps: float = 1e-5, dtype: str = "float32"
) -> tuple[Schedule, list[Any]]:
    """Layer norm over the last axis: mean and variance as block reductions, then every
    thread normalises its columns; gamma and beta are read once per column."""
    cfg = get_config()
    cfg.define_knob("threads", [32, 64, 128, 256, 512], default=256 if C >= 256 else 64)
    threads = cfg["threads"].val
    X = te.placeholder((R, C), dtype, name="X")
    gamma = te.placeholder((C,), dtype, name="gamma")
    beta = te.placeholder((C,), dtype, name="beta")
    inv_c = 1.0 / C
    mean, mean_steps = block_reduce(R, C, lambda r, c: X[r, c] * inv_c, "sum", threads, "mean")

    def centred_square(r, c):  # noqa: ANN001, ANN202
        d = X[r, c] - mean[r]
        return d * d * inv_c

    var, var_steps = block_reduce(R, C, centred_square, "sum", threads, "var")
    Y = te.compute(
        (R, C),
        lambda r, c: (X[r, c] - mean[r]) * te.rsqrt(var[r] + eps) * gamma[c] + beta[c],
        name="layer_norm",
    )
    return _row_kernel(Y, threads, [mean, var], mean_steps + var_steps), [X, gamma, beta, Y]
