"""Cross-thread reductions of rows, written as tensor expressions over shared memory.

A row of length C is reduced by T threads of one block in two phases:
each thread first folds every T-th element into a partial (``partials[r, t]``),
then ``log2(T)`` halving steps combine the partials pairwise in shared memory
(``step[r, t] = t < half ? f(prev[r, t], prev[r, t + half]) : prev[r, t]``).
Every step is an ordinary stage in ``shared`` scope bound to the same
``threadIdx.x`` extent, so the usual lowering applies and ``inject_sync`` puts
exactly one barrier between consecutive steps. Warp shuffles would save the
shared-memory round trips of the last five steps; that is a later refinement.
"""

from __future__ import annotations

from collections.abc import Callable

from ember.errors import ArgumentError
from ember.tir import expr as E
from ember.tir.schedule.schedule import Schedule, Stage
from ember.tir.te import operation as te
from ember.tir.te.tensor import Tensor

REDUCERS: dict[str, tuple[Callable, Callable[[E.PrimExpr, E.PrimExpr], E.PrimExpr]]] = {
    "sum": (te.sum, lambda a, b: a + b),
    "max": (te.max, E.max_),
    "min": (te.min, E.min_),
}


def block_reduce(
    rows: int,
    cols: int,
    value: Callable[[E.PrimExpr, E.PrimExpr], E.PrimExpr],
    kind: str,
    threads: int,
    name: str,
) -> tuple[Tensor, list[Tensor]]:
    """``out[r] = reduce_c value(r, c)``; returns the output and the shared steps."""
    if kind not in REDUCERS:
        raise ArgumentError(f"block_reduce: kind must be one of {sorted(REDUCERS)}, got {kind!r}")
    if threads & (threads - 1):
        raise ArgumentError(f"block_reduce: threads must be a power of two, got {threads}")
    reducer, combine = REDUCERS[kind]
    per_thread = -(-cols // threads)
    ko = te.reduce_axis((0, per_thread), name=f"{name}_k")

    def partial(r: E.PrimExpr, t: E.PrimExpr) -> E.PrimExpr:
        c = ko.var * threads + t
        return reducer(value(r, E.min_(c, cols - 1)), axis=ko, where=c < cols)

    steps = [te.compute((rows, threads), partial, name=f"{name}_partial")]
    half = threads // 2
    while half >= 1:
        fold = _fold(steps[-1], half, threads, combine)
        steps.append(te.compute((rows, threads), fold, name=f"{name}_step{half}"))
        half //= 2
    last = steps[-1]
    out = te.compute((rows,), lambda r: last[r, 0], name=name)
    return out, steps


def _fold(
    prev: Tensor, half: int, threads: int, combine: Callable[[E.PrimExpr, E.PrimExpr], E.PrimExpr]
) -> Callable[[E.PrimExpr, E.PrimExpr], E.PrimExpr]:
    def fold(r: E.PrimExpr, t: E.PrimExpr) -> E.PrimExpr:
        other = prev[r, E.min_(t + half, threads - 1)]
        return E.select(t < half, combine(prev[r, t], other), prev[r, t])

    return fold


def schedule_block_reduce(s: Schedule, at: Stage, row_axis: object, steps: list[Tensor]) -> None:
    """Put every step in shared memory inside ``at``'s row loop, one thread per column."""
    threads = int(steps[0].shape[1].value)  # type: ignore[attr-defined]
    # a ranged thread axis: later steps need fewer columns but keep every thread
    tx = te.thread_axis("threadIdx.x", (0, threads))
    for step in steps:
        st = s[step]
        st.set_scope("shared")
        st.compute_at(at, row_axis)  # type: ignore[arg-type]
        _, t = st.op.axis
        st.bind(t, tx)
