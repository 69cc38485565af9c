"""Pass ``inject_sync``: a ``__syncthreads()`` wherever shared memory is handed between threads.

Expects: a kernel from ``split_host_device`` (thread indices as thread-binding loops).
Guarantees: between a write to a shared buffer and a later read of it (RAW), and
between a read and a later overwrite (WAR), a barrier lies on every path,
including across iterations of a loop (the barrier then closes the loop body).
A barrier is placed only where all threads of the block reach it: never inside
code that depends on a thread index, so it goes after such code instead. An
access every thread makes to an element of its own (:mod:`.private_access`)
orders nothing between threads and needs no barrier.
"""

from __future__ import annotations

from collections.abc import Hashable
from dataclasses import dataclass, field

from ember.codegen_cuda.transform.inject_pipeline import Phase, phases_may_meet, split_stage
from ember.codegen_cuda.transform.private_access import private_key
from ember.errors import LoweringError
from ember.tir import expr as E
from ember.tir import stmt as S
from ember.tir.functor import post_order_visit, uses_var
from ember.tir.tensor_core import read_pointers, written_pointer

# A shared access: the buffer's pointer, the allocation it lives in (loop partitioning
# copies an allocation: each copy is its own __shared__ array), the key of its
# thread-private index (None when other threads may touch the same element), and the
# stage of a pipelined buffer it touches (None: any, or not pipelined).
Access = tuple[E.Var, int, Hashable | None, Phase | None]


@dataclass
class _Summary:
    """Shared accesses before the first and after the last barrier of a statement."""

    head_r: set[Access] = field(default_factory=set)
    head_w: set[Access] = field(default_factory=set)
    tail_r: set[Access] = field(default_factory=set)
    tail_w: set[Access] = field(default_factory=set)
    barrier: bool = False


def _overlap(a: set[Access], b: set[Access]) -> bool:
    """Could a thread's access in ``a`` touch an element another thread accessed in ``b``?"""
    for data, alloc, key, phase in a:
        for data2, alloc2, key2, phase2 in b:
            if (
                data is data2
                and alloc == alloc2
                and (key is None or key != key2)
                and phases_may_meet(phase, phase2)
            ):
                return True
    return False


def _rephase(accesses: set[Access], var: E.Var, shift: int | None) -> set[Access]:
    """Phases of ``var`` moved ``shift`` iterations on (None: forgotten, outside its loop)."""
    out: set[Access] = set()
    for data, alloc, key, phase in accesses:
        if isinstance(phase, Phase) and phase.var is var:
            phase = None if shift is None else phase.shifted(shift)
        out.add((data, alloc, key, phase))
    return out


def _conflict(later_r: set[Access], later_w: set[Access], r: set[Access], w: set[Access]) -> bool:
    """RAW or WAR. Two writes in a row need no barrier: the stages Ember generates give
    every element one writer, and the emulator's race check would catch one that did not."""
    return _overlap(later_r, w) or _overlap(later_w, r)


class _Sync:
    def __init__(self, block: tuple[int, int, int]) -> None:
        self.block = dict(zip("xyz", block))
        self.thread_vars: dict[E.Var, str] = {}
        self.allocation: dict[E.Var, int] = {}  # pointer -> id of the Allocate in scope
        self.shared: set[E.Var] = set()  # pointers of shared allocations

    def divergent_cond(self, cond: E.PrimExpr) -> bool:
        return uses_var(cond, lambda v: v in self.thread_vars)

    def access(self, buf: object, index: E.PrimExpr) -> Access:
        data = buf.data  # type: ignore[attr-defined]
        phase = None
        staged = split_stage(index)
        if staged is not None:
            phase, index = staged
        return (
            data,
            self.allocation.get(data, 0),
            private_key(index, self.thread_vars, self.block),
            phase,
        )

    def shared_reads(self, node: object) -> set[Access]:
        out: set[Access] = set()

        def visit(n: object) -> None:
            if isinstance(n, E.BufferLoad) and n.buffer.scope == "shared":
                out.add(self.access(n.buffer, n.indices[0]))

        post_order_visit(node, visit, once=True)
        return out

    def pointer_accesses(self, call: E.Call, pointers: tuple[E.Var, ...]) -> set[Access]:
        """Shared memory a tensor-core call reaches through pointers: any element, any
        thread's (ldmatrix and wmma hand rows between the lanes of a warp), of the
        pipeline stage its offset (the argument after the pointer) names, if it names one."""
        out: set[Access] = set()
        for p in pointers:
            if p not in self.shared:
                continue
            at = next(n for n, a in enumerate(call.args) if a is p)
            staged = split_stage(call.args[at + 1]) if at + 1 < len(call.args) else None
            out.add((p, self.allocation.get(p, 0), None, staged[0] if staged else None))
        return out

    def run(self, s: S.Stmt, divergent: bool) -> tuple[S.Stmt, _Summary]:
        if isinstance(s, S.BufferStore):
            r = self.shared_reads(s.value) | set().union(*(self.shared_reads(i) for i in s.indices))
            w = {self.access(s.buffer, s.indices[0])} if s.buffer.scope == "shared" else set()
            return s, _Summary(r, w, set(r), set(w))
        if isinstance(s, S.SeqStmt):
            return self.seq(s, divergent)
        if isinstance(s, S.For):
            return self.loop(s, divergent)
        if isinstance(s, S.IfThenElse):
            return self.branch(s, divergent)
        if isinstance(s, S.Barrier):
            return s, _Summary(barrier=True)
        if isinstance(s, S.AsyncCopy):
            # Counted as a write where it is issued, which orders it after earlier reads.
            # Its hand-off to readers is the barrier inject_pipeline puts after the wait.
            return s, self.run(s.store, divergent)[1]
        if isinstance(s, (S.AsyncCommit, S.AsyncWait)):
            return s, _Summary()
        if isinstance(s, (S.Allocate, S.LetStmt, S.AttrStmt, S.AssertStmt)):
            outer = None
            if isinstance(s, S.Allocate):
                outer = self.allocation.get(s.buffer.data)
                self.allocation[s.buffer.data] = id(s)
                if s.buffer.scope == "shared":
                    self.shared.add(s.buffer.data)
            body, summ = self.run(s.body, divergent)
            if isinstance(s, S.Allocate):
                if outer is None:
                    del self.allocation[s.buffer.data]
                else:
                    self.allocation[s.buffer.data] = outer
            value = getattr(s, "value", None)
            extra = self.shared_reads(value) if value is not None else set()
            summ.head_r |= extra
            if body is s.body:
                return s, summ
            fields = {f: getattr(s, f) for f in s.__dataclass_fields__}  # type: ignore[attr-defined]
            fields["body"] = body
            return type(s)(**fields), summ
        if isinstance(s, S.Evaluate):
            r, w = self.shared_reads(s.value), set()
            if isinstance(s.value, E.Call) and s.value.op in E.TENSOR_CORE_CALLS:
                r |= self.pointer_accesses(s.value, read_pointers(s.value))
                w = self.pointer_accesses(s.value, (written_pointer(s.value),))
            return s, _Summary(r, w, set(r), set(w))
        raise LoweringError(f"inject_sync: unexpected statement {type(s).__name__}")

    def seq(self, s: S.SeqStmt, divergent: bool) -> tuple[S.Stmt, _Summary]:
        out: list[S.Stmt] = []
        summ = _Summary()
        cur_r: set[Access] = set()
        cur_w: set[Access] = set()
        for child in s.stmts:
            new, cs = self.run(child, divergent)
            if _conflict(cs.head_r, cs.head_w, cur_r, cur_w):
                if divergent:
                    raise LoweringError(
                        "inject_sync: shared memory is passed between threads inside code "
                        "that only some threads run; a barrier there would deadlock. Move the "
                        "shared stage out of the thread-dependent condition"
                    )
                out.append(S.Barrier("shared"))
                summ.barrier = True
                cur_r, cur_w = set(), set()
            if not summ.barrier:
                summ.head_r |= cs.head_r
                summ.head_w |= cs.head_w
            if cs.barrier:
                summ.barrier = True
                cur_r, cur_w = set(cs.tail_r), set(cs.tail_w)
            else:
                cur_r |= cs.head_r
                cur_w |= cs.head_w
            out.append(new)
        summ.tail_r, summ.tail_w = cur_r, cur_w
        changed = len(out) != len(s.stmts) or any(a is not b for a, b in zip(out, s.stmts))
        return (S.SeqStmt(tuple(out)) if changed else s), summ

    def loop(self, s: S.For, divergent: bool) -> tuple[S.Stmt, _Summary]:
        inner_div = divergent
        if s.kind is S.ForKind.THREAD_BINDING:
            tag = s.thread_tag
            if tag.startswith("threadIdx"):
                self.thread_vars[s.loop_var] = tag
                full = isinstance(s.extent, E.IntImm) and s.extent.value == self.block[tag[-1]]
                inner_div = divergent or not full
        elif self.divergent_cond(s.extent) or self.divergent_cond(s.min):
            inner_div = True
        body, bs = self.run(s.body, inner_div)
        # the next iteration's head against this one's tail: one step on for the stage
        # phases if a barrier separates the iteration after that; else any distance
        step = 1 if bs.barrier else None
        next_r = _rephase(bs.head_r, s.loop_var, step)
        next_w = _rephase(bs.head_w, s.loop_var, step)
        if s.kind is not S.ForKind.THREAD_BINDING and _conflict(
            next_r, next_w, bs.tail_r, bs.tail_w
        ):
            # iteration i+1 reads what iteration i wrote (or overwrites what it read)
            if inner_div:
                raise LoweringError(
                    f"inject_sync: loop '{s.loop_var.name}' hands shared memory between "
                    "threads across iterations inside thread-dependent code"
                )
            body = S.seq(body, S.Barrier("shared"))
            bs = _Summary(bs.head_r, bs.head_w, set(), set(), True)
        new = (
            s
            if body is s.body
            else S.For(s.loop_var, s.min, s.extent, s.kind, body, s.thread_tag, s.annotations)
        )
        v = s.loop_var
        head_r, head_w, tail_r, tail_w = (
            _rephase(x, v, None) for x in (bs.head_r, bs.head_w, bs.tail_r, bs.tail_w)
        )
        outside = _Summary(head_r, head_w, tail_r, tail_w, bs.barrier)
        return new, outside

    def branch(self, s: S.IfThenElse, divergent: bool) -> tuple[S.Stmt, _Summary]:
        div = divergent or self.divergent_cond(s.condition)
        then, ts = self.run(s.then_case, div)
        if s.else_case is not None:
            other, es = self.run(s.else_case, div)
        else:
            other, es = None, _Summary()
        cond_r = self.shared_reads(s.condition)
        summ = _Summary(
            ts.head_r | es.head_r | cond_r,
            ts.head_w | es.head_w,
            ts.tail_r | es.tail_r | (set() if ts.barrier and es.barrier else cond_r),
            ts.tail_w | es.tail_w,
            ts.barrier and es.barrier,
        )
        if not summ.barrier:
            summ.tail_r |= summ.head_r
            summ.tail_w |= summ.head_w
        if then is s.then_case and other is s.else_case:
            return s, summ
        return S.IfThenElse(s.condition, then, other), summ


def inject_sync(func: S.PrimFunc) -> S.PrimFunc:
    """Runs the pass on a kernel; returns ``func`` itself when no barrier was needed."""
    _, block = func.attr("launch")
    body, _ = _Sync(block).run(func.body, divergent=False)
    return func if body is func.body else func.with_body(body)
