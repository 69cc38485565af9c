"""CPU templates for elementwise and broadcast chains.

Every intermediate stage is inlined, so the chain is one loop nest that reads
each input once and writes the output once. The output's axes are fused into
one, split into a vector-width inner loop and a parallel outer loop.
"""

from __future__ import annotations

from typing import Any

from ember.tir.schedule.schedule import Schedule, create_schedule
from ember.tir.te import operation as te
from ember.tir.te.tensor import ComputeOp, Tensor
from ember.tir.topi.elementwise import elementwise_chain
from ember.tuner.template import get_config, template


def schedule_elementwise(out: Tensor, inputs: list[Tensor]) -> Schedule:
    """Inline every producer of ``out``; rows in parallel, the last axis vectorized.

    The last axis is kept apart from the others so that indices broadcast along it
    (a bias ``b[j]``) stay affine in the vector lane and load as one vector.
    """
    cfg = get_config()
    cfg.define_knob("vec", [8, 16, 32, 64], default=32)
    s = create_schedule(out.op)
    for st in s.stages:
        if isinstance(st.op, ComputeOp) and not st.is_output:
            st.compute_inline()
    *outer_axes, last = s[out].op.axis
    lo, li = s[out].split(last, factor=cfg["vec"].val)
    s[out].vectorize(li)
    if outer_axes:
        rows = s[out].fuse(*outer_axes)
        s[out].parallel(rows)
    else:
        s[out].parallel(lo)
    return s


@template("elementwise_chain.llvm")
def elementwise_chain_llvm(
    rows: int, cols: int, dtype: str = "float32"
) -> tuple[Schedule, list[Any]]:
    """``gelu(x * 2 + bias)`` over a (rows, cols) tensor, fused into one pass."""
    X = te.placeholder((rows, cols), dtype, name="X")
    bias = te.placeholder((cols,), dtype, name="bias")
    Y = elementwise_chain(X, bias)
    return schedule_elementwise(Y, [X, bias]), [X, bias, Y]
