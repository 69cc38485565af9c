"""GPU templates for row reductions and softmax: one block per row, threads cooperate.

Each block reduces one row with ``threads`` threads through shared memory
(:mod:`.block_reduce`). Softmax runs three such passes in one kernel (row max,
then the sum of exponentials, then the normalised output written by every
thread for its columns), so a row is read from global memory three times but
never leaves the block.
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
