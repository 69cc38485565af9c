"""``set_store_predicate`` in lowering: the condition around a stage's stores, and the
thread loops it needs when it names a thread axis the stage itself does not bind.

Called from :mod:`.lower` and :mod:`.cross_thread`. A predicate's thread axes
(``tx.var``) are read as the stage's loops bound to them. In TVM a statement outside a
thread loop runs in every thread of the kernel, so a predicate may also name a thread
axis that only an inner stage binds (``test_rfactor_elemwise_threads``: ``C`` stores
only where ``threadIdx.x == 0``, ``threadIdx.x`` being bound in ``B``'s nest). Ember has
no kernel-wide thread variable outside a bound loop, so each such axis becomes a loop of
its own bound to that thread, with the extent the other stage gives it, around the
guarded store: the same threads run the store, each knowing its index.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, overload

from ember.tir import expr as E
from ember.tir import stmt as S
from ember.tir.functor import free_vars, substitute
from ember.tir.te.tensor import IterKind, IterVar

if TYPE_CHECKING:
    from ember.tir.schedule.lower import _Lowering
    from ember.tir.schedule.schedule import Stage

ThreadLoops = list[tuple[E.Var, IterVar]]


def store_predicate(lw: _Lowering, st: Stage) -> tuple[E.PrimExpr | None, ThreadLoops]:
    """The stage's store predicate in the stage's loop variables, and the thread loops
    (a fresh variable and the thread IterVar with its extent) to put around the store."""
    if st.store_predicate is None:
        return None, []
    vmap: dict[E.Var, E.PrimExpr] = {
        a.bind.var: iv.var for iv, a in st.iter_attrs.items() if a.bind is not None
    }
    outer: ThreadLoops = []
    free = free_vars(st.store_predicate) - set(vmap)
    for v in sorted(free, key=lambda v: v.name):
        bound = _thread_bound_elsewhere(lw, v)
        if bound is None:
            continue  # not a thread axis: lowering reports it as undefined
        fresh = E.Var(f"{v.name}.store", v.dtype)
        vmap[v] = fresh
        outer.append((fresh, bound))
    return substitute(st.store_predicate, vmap), outer


def _thread_bound_elsewhere(lw: _Lowering, var: E.Var) -> IterVar | None:
    """The thread IterVar of ``var`` with its launch extent (as the stage that binds it
    runs it), or None when no stage binds ``var``."""
    for other in lw.sch.stages:
        sb = lw.bounds.get(id(other))
        for iv, a in other.iter_attrs.items():
            if a.bind is None or a.bind.var is not var or sb is None:
                continue
            ext = sb.thread_extents.get(iv, sb.extents.get(iv))
            if ext is not None:
                dom = E.Range(E.const(0, var.dtype), ext)
                return IterVar(var, dom, IterKind.THREAD, a.bind.thread_tag)
    return None


@overload
def in_threads(body: S.Stmt, threads: ThreadLoops) -> S.Stmt: ...
@overload
def in_threads(body: None, threads: ThreadLoops) -> None: ...
def in_threads(body: S.Stmt | None, threads: ThreadLoops) -> S.Stmt | None:
    """``body`` inside a loop bound to each thread axis of ``threads``."""
    if body is None:
        return None
    for var, iv in reversed(threads):
        assert iv.dom is not None
        body = S.For(
            var, E.const(0, var.dtype), iv.dom.extent, S.ForKind.THREAD_BINDING, body, iv.thread_tag
        )
    return body


__all__ = ["in_threads", "store_predicate"]
