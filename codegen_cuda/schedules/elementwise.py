"""GPU template for elementwise and broadcast chains: one thread per output element.

Producers are inlined, the output's axes fused and split into blocks of
``threads`` threads; consecutive threads write consecutive elements, so every
warp's loads and stores coalesce.
"""

from __future__ import annotations

from typing import Any

from ember.tir.schedule.schedule import Schedule, create_schedule
from ember.tir.te import operation as te
from ember.tir.te.tensor import ComputeOp
from ember.tir.topi.elementwise import elementwise_chain
from ember.tuner.template import get_config, template


@template("elementwise_chain.cuda")
def elementwise_chain_cuda(
    rows: int, cols: int, dtype: str = "float32"
) -> tuple[Schedule, list[Any]]:
    """The fused bias-add/activation chain on CUDA, one thread per element: the baseline the tuner
    measures thread counts against."""
    cfg = get_config()
    cfg.define_knob("threads", [64, 128, 256, 512, 1024], default=256)
    X = te.placeholder((rows, cols), dtype, name="X")
    bias = te.placeholder((cols,), dtype, name="bias")
    Y = elementwise_chain(X, bias)
    s = create_schedule(Y.op)
    for st in s.stages:
        if isinstance(st.op, ComputeOp) and not st.is_output:
            st.compute_inline()
    fused = s[Y].fuse(*s[Y].op.axis)
    bx, tx = s[Y].split(fused, factor=cfg["threads"].val)
    s[Y].bind(bx, "blockIdx.x")
    s[Y].bind(tx, "threadIdx.x")
    return s, [X, bias, Y]
