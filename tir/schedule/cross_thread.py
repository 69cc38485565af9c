"""Cross-thread reductions: lowering a stage whose reduction axis is bound to ``threadIdx``.

In TVM (and here) ``s[B].bind(k_inner, "threadIdx.x")`` on a reduction axis means
the iterations of that axis run in different threads of a block, which must then
combine their partial results: TVM's *cross-thread allreduce*. The plain loop
nest would have every thread update the output element (``B[i] = B[i] + ...``),
racing. Instead, inside the stage's data and thread loops (in leaf order; the
serial reduction loops move innermost, which a commutative reduction allows),
each thread reduces its serial part into registers, the threads combine them,
and one thread stores the result::

    acc = identity                                       # per thread, a local buffer
    for <serial reduction leaves>: acc = combine(acc, source)    # split/region guards
    with attr(thread_allreduce(...), "thread_allreduce", 0):
        red = acc                                        # placeholder, see below
    if <reduction threads> == 0 and <data guards>: B[index] = red

The ``thread_allreduce`` attribute marks where every thread of the block must
meet: its node, a :class:`ThreadAllreduce`, names the reducer and the thread
tags to combine over; its body assigns each value of the tuple (``red_k =
acc_k``) so that every pass between here and the GPU code generator sees and
rewrites the buffers as ordinary IR. The CUDA pass ``lower_thread_allreduce``
replaces the body with warp shuffles and shared memory once the launch
dimensions are known. The data guards stay off the allreduce (a guarded-out
thread contributes the identity) since all threads must take part. A stage in
``local`` scope is stored by every thread (each holds its own copy).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from ember.tir import expr as E
from ember.tir import stmt as S
from ember.tir.buffer import Buffer, decl_buffer
from ember.tir.functor import substitute
from ember.tir.schedule.relations import data_derived
from ember.tir.te.tensor import ComputeOp, IterKind, IterVar

if TYPE_CHECKING:
    from ember.tir.schedule.bound import StageBounds
    from ember.tir.schedule.lower import _Lowering
    from ember.tir.schedule.schedule import Stage

ATTR_KEY = "thread_allreduce"


@dataclass(frozen=True, eq=False)
class ThreadAllreduce:
    """A commutative reducer over a tuple of values, combined across the threads ``tags``.

    ``results[k]`` is the k-th combined value written in ``lhs`` (the running values)
    and ``rhs`` (the other thread's); ``identities[k]`` is its identity element.
    """

    name: str
    lhs: tuple[E.Var, ...]
    rhs: tuple[E.Var, ...]
    results: tuple[E.PrimExpr, ...]
    identities: tuple[E.PrimExpr, ...]
    tags: tuple[str, ...]  # e.g. ("threadIdx.x",)

    @staticmethod
    def of(combiner: E.CommReducer | E.TupleReducer, tags: Sequence[str]) -> ThreadAllreduce:
        if isinstance(combiner, E.TupleReducer):  # an argmax's (index, value) pairs
            c = combiner
            return ThreadAllreduce(c.name, c.lhs, c.rhs, c.results, c.identities, tuple(tags))
        return ThreadAllreduce(
            combiner.name,
            (combiner.lhs,),
            (combiner.rhs,),
            (combiner.result,),
            (combiner.identity,),
            tuple(tags),
        )

    def combine(self, a: Sequence[E.PrimExpr], b: Sequence[E.PrimExpr]) -> tuple[E.PrimExpr, ...]:
        vmap = dict(zip(self.lhs, a)) | dict(zip(self.rhs, b))
        return tuple(substitute(r, vmap) for r in self.results)

    def __repr__(self) -> str:
        return f"thread_allreduce({self.name} over {', '.join(self.tags)})"


def _bound(st: Stage, iv: IterVar) -> bool:
    attr = st.iter_attrs.get(iv)
    return attr is not None and attr.bind is not None


def thread_reduce_leaves(st: Stage) -> list[IterVar]:
    """The stage's reduction leaves bound to thread axes (empty: not a cross-thread one)."""
    if not isinstance(st.op, ComputeOp) or not st.op.reduce_axis:
        return []
    return [iv for iv in st.leaf_iter_vars if iv.kind is IterKind.REDUCE and _bound(st, iv)]


def cross_thread_nest(lw: _Lowering, st: Stage, sb: StageBounds) -> S.Stmt:
    """The loop nest of a cross-thread reduction stage (see the module docstring)."""
    op = st.op
    assert isinstance(op, ComputeOp)
    red = lw.inlined(st)
    threads = thread_reduce_leaves(st)
    if not isinstance(red, E.Reduce):
        raise st._error("cross-thread reduction: the stage's body is not a reduction", threads[0])
    mixed = [iv for iv in threads if iv in data_derived(st)]
    if mixed:  # each thread would reduce its share of several outputs into one
        raise st._error(
            f"cross-thread reduction: loop '{mixed[0].name}' is fused from a data axis and a "
            "reduction axis, so its threads hold different outputs; bind a loop of the "
            "reduction axis alone (split the reduction axis, or fuse only data axes)",
            mixed[0],
        )
    if red.init is not None:
        raise st._error(
            "cross-thread reduction: a reduction with an explicit init value cannot be bound "
            "to threads; drop init= or keep the reduction axis serial",
            threads[0],
        )
    for iv in st.leaf_iter_vars:
        attr = st.iter_attrs.get(iv)
        if attr is not None and attr.kind in (S.ForKind.VECTORIZED, S.ForKind.PARALLEL):
            raise st._error(
                f"cross-thread reduction: axis '{iv.name}' is {attr.kind.value}, but every "
                "thread of the block must meet at the reduction inside it",
                iv,
            )
    tags = tuple(_tag(st, iv) for iv in threads)
    for iv, tag in zip(threads, tags):
        if not tag.startswith("threadIdx."):
            # the threads of one block meet at a barrier; blocks and virtual threads do not
            raise st._error(
                f"cross-thread reduction: reduction axis '{iv.name}' is bound to {tag}, but "
                "only the threads of one block can combine partial results; bind it to "
                "threadIdx.x/y/z (rfactor, then bind the factored axis) or keep it serial",
                iv,
            )
    serial = [iv for iv in st.leaf_iter_vars if iv.kind is IterKind.REDUCE and not _bound(st, iv)]
    outer = [iv for iv in st.leaf_iter_vars if not any(iv is s for s in serial)]
    bufs = lw.stage_buffers(st)  # a tuple reducer (argmax) has one output per value
    index = tuple(lw.store_index(st, iv) for iv in op.axis)
    suffix = [f"_{k}" if len(bufs) > 1 else "" for k in range(len(bufs))]
    accs = [
        decl_buffer((1,), b.dtype, name=f"{st.name}_acc{x}", scope="local")
        for b, x in zip(bufs, suffix)
    ]
    ress = [
        decl_buffer((1,), b.dtype, name=f"{st.name}_red{x}", scope="local")
        for b, x in zip(bufs, suffix)
    ]
    zero = (E.const(0, "int32"),)
    guards_all, guards_data = lw.guards(st, sb)

    def read(b: Buffer) -> E.PrimExpr:
        return E.BufferLoad(b.dtype, b, zero)

    update = lw.reduce_updates(st, sb, red, accs, [zero] * len(accs))
    nest = lw.guarded(update, guards_all)
    for iv in reversed(serial):
        nest = lw.make_for(st, iv, sb, lw.with_attached(st, iv, nest))
    marker = ThreadAllreduce.of(red.combiner, tags)
    assign = S.seq(*[S.BufferStore(r, read(a), zero) for r, a in zip(ress, accs)])
    allreduce = S.AttrStmt(marker, ATTR_KEY, E.const(0), assign)
    write_guards = list(guards_data)
    pred, pred_threads = lw.store_predicate(st)
    if pred is not None:  # only the final store: every thread must take part in reducing
        write_guards.append(pred)
    if st.scope != "local":
        write_guards += [E.eq(iv.var, 0) for iv in threads]
    stores = [S.BufferStore(b, read(r), index) for b, r in zip(bufs, ress)]
    write = lw.in_threads(lw.guarded(S.seq(*stores), write_guards), pred_threads)
    inits = [S.BufferStore(a, i, zero) for a, i in zip(accs, red.identities)]
    body: S.Stmt = S.seq(*inits, nest, allreduce, write)
    for b in reversed(accs + ress):
        body = S.Allocate(b, body)
    for iv in reversed(outer):
        body = lw.make_for(st, iv, sb, lw.with_attached(st, iv, body))
    return body


def _tag(st: Stage, iv: IterVar) -> str:
    attr = st.iter_attrs[iv]
    assert attr.bind is not None
    return attr.bind.thread_tag


__all__ = ["ATTR_KEY", "ThreadAllreduce", "cross_thread_nest", "thread_reduce_leaves"]
