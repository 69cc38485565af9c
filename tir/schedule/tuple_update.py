"""One step of a tuple reduction (an argmax's index and value) in a lowered loop nest.

Lowering (:mod:`.lower` for serial loops, :mod:`.cross_thread` for each thread's
serial part) calls :func:`tuple_update` with the buffers that hold the running
values and a function that turns a TE expression into its buffer reads at the
current loop indices. Every value's new content depends on all the old ones
(``idx = select(val >= v, idx, i)`` reads ``val``), so the step first reads the
running values and the sources into ``let`` variables, then stores every value::

    let acc_0 = T.v0[i]; let acc_1 = T.v1[i]; let src_0 = idx[i, k]; let src_1 = val[i, k]
    T.v0[i] = combine_0(acc, src); T.v1[i] = combine_1(acc, src)
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from ember.tir import expr as E
from ember.tir import stmt as S
from ember.tir.buffer import Buffer


def tuple_update(
    red: E.Reduce,
    bufs: Sequence[Buffer],
    indices: Sequence[tuple[E.PrimExpr, ...]],
    read: Callable[[E.PrimExpr], E.PrimExpr],
) -> S.Stmt:
    """``bufs[k][indices[k]] = combine(acc, sources)[k]`` for every value, under the
    reduction's ``where`` condition (``read`` maps TE expressions to buffer reads)."""
    srcs = [read(x) for x in red.all_sources]
    dtypes = [x.dtype for x in red.all_sources]
    accs = [E.BufferLoad(t, b, idx) for t, b, idx in zip(dtypes, bufs, indices)]
    acc_vars = [E.Var(f"acc_{k}", a.dtype) for k, a in enumerate(accs)]
    src_vars = [E.Var(f"src_{k}", x.dtype) for k, x in enumerate(srcs)]
    new = red.combine(acc_vars, src_vars)
    update: S.Stmt = S.seq(*[S.BufferStore(b, v, idx) for b, v, idx in zip(bufs, new, indices)])
    for var, value in reversed(list(zip(acc_vars + src_vars, accs + srcs))):
        update = S.LetStmt(var, value, update)
    if red.condition is not None:
        update = S.IfThenElse(read(red.condition), update)
    return update
