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
from ember.tir.te.tensor import Tensor
from ember.tir.topi.nn import layer_norm, reduce_rows, softmax
from ember.tir.topi.rows import RowReduce, Source
from ember.tuner.template import get_config, template


def block_row_reduce(threads: int, steps: list[Tensor]) -> RowReduce:
    """A ``tir/topi`` row reduction (:mod:`ember.tir.topi.rows`) as a block reduction of
    ``threads`` threads per row; its shared steps are appended to ``steps``."""

    def reduce(
        source: Source,
        R: int,
        C: int,
        kind: str,
        name: str,
        scale: float | None = None,
        tag: str = "",
    ) -> Tensor:
        value = source if scale is None else (lambda r, c: source(r, c) * scale)
        out, more = block_reduce(R, C, value, kind, threads, name=name)
        steps.extend(more)
        return out

    return reduce


@template("reduce.cuda")
def reduce_cuda(
    R: int, C: int, kind: str = "sum", dtype: str = "float32"
) -> tuple[Schedule, list[Any]]:
    """Row reduction on CUDA: one block per row, its threads combining the row in shared memory."""
    threads = _threads(C)
    X = te.placeholder((R, C), dtype, name="X")
    steps: list[Tensor] = []
    out = reduce_rows(X, kind, "red", block_row_reduce(threads, steps))
    s = create_schedule(out.op)
    (r,) = s[out].op.axis
    s[out].bind(r, "blockIdx.x")
    schedule_block_reduce(s, s[out], r, steps)
    return s, [X, out]


def _stages_by_name(t: Tensor) -> dict[str, Tensor]:
    """``t`` and every tensor it depends on, by op name."""
    found: dict[str, Tensor] = {}
    stack = [t]
    while stack:
        cur = stack.pop()
        if cur.op.name not in found:
            found[cur.op.name] = cur
            stack.extend(getattr(cur.op, "input_tensors", ()))
    return found


def _row_kernel(
    Y: Any, threads: int, scalars: list[Any], steps: list[Any], inline: tuple[Any, ...] = ()
) -> Schedule:
    """One block per row of ``Y``; its threads sweep the row's columns. The per-row
    scalars (block reductions) are computed at the row loop, one copy per thread; the
    ``inline`` stages are recomputed where they are read."""
    s = create_schedule(Y.op)
    for t in inline:
        s[t].compute_inline()
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


def _threads(C: int) -> int:
    cfg = get_config()
    cfg.define_knob("threads", [32, 64, 128, 256, 512], default=256 if C >= 256 else 64)
    return int(cfg["threads"].val)


@template("softmax.cuda")
def softmax_cuda(R: int, C: int, dtype: str = "float32") -> tuple[Schedule, list[Any]]:
    """Softmax over the last axis (``tir/topi``'s compute): the row max and the sum of
    exponentials are block reductions; each thread keeps its own copy of the two row
    scalars in registers, and recomputes the exponentials where it reads them."""
    threads = _threads(C)
    X = te.placeholder((R, C), dtype, name="X")
    steps: list[Tensor] = []
    Y = softmax(X, row_reduce=block_row_reduce(threads, steps))
    ex, sm = (
        Y.op.input_tensors
        if Y.op.input_tensors[0].op.name == "softmax_exp"
        else Y.op.input_tensors[::-1]
    )
    mx = next(t for t in ex.op.input_tensors if t.op.name == "softmax_max")
    return _row_kernel(Y, threads, [mx, sm], steps, inline=(ex,)), [X, Y]


@template("layer_norm.cuda")
def layer_norm_cuda(
    R: int, C: int, eps: float = 1e-5, dtype: str = "float32"
) -> tuple[Schedule, list[Any]]:
    """Layer norm over the last axis (``tir/topi``'s compute): mean and variance as block
    reductions, then every thread normalises its columns; gamma and beta are read once
    per column."""
    threads = _threads(C)
    X = te.placeholder((R, C), dtype, name="X")
    gamma = te.placeholder((C,), dtype, name="gamma")
    beta = te.placeholder((C,), dtype, name="beta")
    steps: list[Tensor] = []
    Y = layer_norm(X, gamma, beta, eps, "layer_norm", block_row_reduce(threads, steps))
    t = _stages_by_name(Y)
    mean, var = t["layer_norm_mean"], t["layer_norm_var"]
    return _row_kernel(Y, threads, [mean, var], steps), [X, gamma, beta, Y]
