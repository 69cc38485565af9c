"""Cross-thread reductions of rows: a shared-memory tree down to one warp, then warp shuffles.

A row of length C is reduced by T threads of one block (T a power of two, at
least a warp) in three phases:

1. each thread folds every T-th element into a partial (``partials[r, t]``);
2. ``log2(T / 32)`` halving steps combine the partials pairwise in shared memory
   (``step[r, t] = t < half ? f(prev[r, t], prev[r, t + half]) : prev[r, t]``)
   until 32 are left;
3. the first warp finishes with a butterfly of five ``__shfl_xor_sync`` exchanges
   (``v = f(v, shfl_xor(v, 16))``, then 8, 4, 2, 1), after which each of its lanes
   holds the row's result and stores it in ``warp[r, lane]``; readers take
   ``warp[r, 0]``.

Every phase is an ordinary stage in ``shared`` scope bound to the same
``threadIdx.x`` extent, so the usual lowering applies and ``inject_sync`` puts a
barrier before each halving step (its reads cross threads) and one before the
readers of ``warp``; the warp stage reads its own lane's partial, so it needs
none, and the shuffles synchronise the warp themselves. That is
``log2(T / 32) + 1`` barriers where the shared tree alone needed ``log2(T) + 1``.
Bound inference computes a stage that shuffles over its whole thread axis (here
the 32 lanes of the first warp), never just the lane its readers need, since a
full-mask shuffle needs every lane of the warp.
"""

from __future__ import annotations

from collections.abc import Callable

from ember.errors import ArgumentError
from ember.tir import expr as E
from ember.tir.schedule.schedule import Schedule, Stage
from ember.tir.te import operation as te
from ember.tir.te.tensor import Tensor

Combine = Callable[[E.PrimExpr, E.PrimExpr], E.PrimExpr]

REDUCERS: dict[str, tuple[Callable, Combine]] = {
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
    if threads & (threads - 1) or threads < E.WARP_SIZE:
        raise ArgumentError(
            f"block_reduce: threads must be a power of two of at least a warp "
            f"({E.WARP_SIZE}), got {threads}"
        )
    reducer, combine = REDUCERS[kind]
    per_thread = -(-cols // threads)
    ko = te.reduce_axis((0, per_thread), name=f"{name}_k")

    def partial(r: E.PrimExpr, t: E.PrimExpr) -> E.PrimExpr:
        c = ko.var * threads + t
        return reducer(value(r, E.min_(c, cols - 1)), axis=ko, where=c < cols)

    steps = [te.compute((rows, threads), partial, name=f"{name}_partial")]
    half = threads // 2
    while half >= E.WARP_SIZE:
        fold = _fold(steps[-1], half, threads, combine)
        steps.append(te.compute((rows, threads), fold, name=f"{name}_step{half}"))
        half //= 2
    warp = _warp_allreduce(steps[-1], combine, name)
    steps.append(te.compute((rows, E.WARP_SIZE), warp, name=f"{name}_warp"))
    last = steps[-1]
    out = te.compute((rows,), lambda r: last[r, 0], name=name)
    return out, steps


def _fold(
    prev: Tensor, half: int, threads: int, combine: Combine
) -> Callable[[E.PrimExpr, E.PrimExpr], E.PrimExpr]:
    def fold(r: E.PrimExpr, t: E.PrimExpr) -> E.PrimExpr:
        other = prev[r, E.min_(t + half, threads - 1)]
        return E.select(t < half, combine(prev[r, t], other), prev[r, t])

    return fold


def _warp_allreduce(
    prev: Tensor, combine: Combine, name: str
) -> Callable[[E.PrimExpr, E.PrimExpr], E.PrimExpr]:
    """Lane ``t`` of the warp starts from ``prev[r, t]``; after the xor butterfly every lane
    holds the combination of all 32. Each step's value is let-bound, as the next one uses
    it twice (its own lane's and, through the shuffle, its partner's)."""

    def butterfly(x: E.PrimExpr, offset: int) -> E.PrimExpr:
        if offset == 0:
            return x
        v = E.Var(f"{name}_lane{offset}", x.dtype)
        shuffled = E.warp_shuffle(E.Intrinsic.WARP_SHUFFLE_XOR, v, offset)
        return E.Let(x.dtype, v, x, butterfly(combine(v, shuffled), offset // 2))

    return lambda r, t: butterfly(prev[r, t], E.WARP_SIZE // 2)


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
