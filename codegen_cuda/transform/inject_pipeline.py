"""Pass ``inject_pipeline``: software pipelining of shared-memory stages over their fill loop.

Expects: a kernel from ``split_host_device``, before ``inject_sync``. A stage the
schedule marked with ``pipeline(stages)`` or ``double_buffer()`` arrives as an
``Allocate`` whose body starts with ``AttrStmt(data, "pipeline_stages", S)``,
at the top of the loop it was computed at (``ko``, the reduction's outer loop):

    for ko in range(n):
        alloc AS; alloc BS
        <fill AS, BS from global memory for tile ko>      (the producers)
        <compute with AS, BS>                            (the consumers)

Guarantees: each marked buffer holds ``S`` tiles (its stages), and the loop is
rewritten so that the fill of tile ``ko + S - 1`` is issued before the compute
on tile ``ko``, letting the loads of the next tiles overlap the arithmetic:

    fill tile 0 .. S-2 into stages 0 .. S-2; commit each      (prologue)
    for ko in range(n):
        wait until tile ko has landed; barrier
        if ko + S - 1 < n: fill tile ko+S-1 into stage (ko+S-1) % S
        commit
        compute on stage ko % S

Stages computed at the same loop but not marked (TVM lets a schedule double-buffer
only B's tile of a GEMM) are copied as before, tile ``ko`` in iteration ``ko``: after
the marked fills are issued and before the compute, with the barrier ``inject_sync``
gives any copy between it and its readers.

On sm_80 and newer a fill is ``cp.async`` (``AsyncCopy``) with commit/wait
groups, so the copy does not even pass through registers. On older GPUs the
fill of the next tile is split at registers: its global loads are issued before
the compute and its shared stores after it (falling back to a plain copy before
the compute when a fill is too big for registers).

The one barrier per iteration does two jobs: after it every thread's copies of tile
``ko`` are visible (read after write), and no thread is still computing on the stage
the next fill overwrites, which is the one computed on in the previous iteration
(write after read). The epilogue needs no code: the last ``S - 1`` iterations
issue no fill and commit empty groups, so ``wait`` keeps counting the same way.

A stage index is written ``floormod(e, S) * X + index`` with ``e`` the loop
variable plus a constant (or a constant, in the prologue); how it is written and read
back (for ``inject_sync``) is :mod:`.stage_index`.
"""

from __future__ import annotations

from ember.codegen_cuda.resources import arch_number
from ember.codegen_cuda.transform.pipeline_registers import through_registers
from ember.codegen_cuda.transform.stage_index import (  # noqa: F401 - re-exported for inject_sync
    Phase,
    Restage,
    phases_may_meet,
    split_stage,
)
from ember.errors import LoweringError
from ember.tir import dtype as dt
from ember.tir import expr as E
from ember.tir import stmt as S
from ember.tir.arith import Analyzer
from ember.tir.buffer import Buffer
from ember.tir.functor import Mutator, post_order_visit, substitute
from ember.tir.tensor_core import TENSOR_CORE_OPS, tensor_core_pointers
from ember.tir.transform.simplify import simplify_stmt

PIPELINE_KEY = "pipeline_stages"
_ASYNC_BYTES = (4, 8, 16)  # the sizes one cp.async moves
_STAGE_ALIGN_BYTES = 16  # each stage starts 16-byte aligned, for vector copies
_FRAGMENT_ALIGN_BYTES = 32  # a stage tensor-core calls read: wmma loads want 256-bit pointers


class _Asyncify(Mutator):
    """Turn the producers' plain global-to-shared copies into ``AsyncCopy``."""

    def __init__(self, staged: dict[E.Var, tuple[Buffer, int]]) -> None:
        self.staged = staged

    def visit_BufferStore(self, s: S.BufferStore) -> S.Stmt:
        load = async_source(s.value)
        if (
            s.buffer.data in self.staged
            and load is not None
            and dt.element_of(load.dtype) == dt.element_of(s.buffer.dtype)
            and dt.bytes_of(load.dtype) in _ASYNC_BYTES
        ):
            return S.AsyncCopy(s)
        return s


def async_source(value: E.PrimExpr) -> E.BufferLoad | None:
    """The global load an asynchronous copy of ``value`` reads: ``value`` itself, or the
    load of ``select(cond, load, 0)`` (copied where ``cond`` holds, zero-filled elsewhere,
    as padding is)."""
    if isinstance(value, E.Select):
        cond = value.cond.value if isinstance(value.cond, E.Broadcast) else value.cond
        if not _is_zero(value.false_value) or dt.lanes_of(cond.dtype) > 1:
            return None  # a copy is zero-filled whole or not at all
        value = value.true_value
    if isinstance(value, E.BufferLoad) and value.buffer.scope == "global":
        return value
    return None


def _is_zero(e: E.PrimExpr) -> bool:
    if isinstance(e, E.Broadcast):
        e = e.value
    return isinstance(e, (E.IntImm, E.FloatImm)) and e.value == 0


def _peel(body: S.Stmt) -> tuple[list[S.Allocate], dict[E.Var, int], S.Stmt]:
    """The allocations at the top of a loop body, the stage counts of the marked ones,
    and what they wrap."""
    allocs: list[S.Allocate] = []
    marked: dict[E.Var, int] = {}
    while True:
        if isinstance(body, S.Allocate):
            allocs.append(body)
            body = body.body
        elif isinstance(body, S.AttrStmt) and body.key == PIPELINE_KEY:
            if allocs and body.node is allocs[-1].buffer.data:
                marked[body.node] = int(body.value.value)  # type: ignore[attr-defined]
            body = body.body
        else:
            return allocs, marked, body


def _tensor_core_pointers(s: S.Stmt) -> set[E.Var]:
    out: set[E.Var] = set()

    def visit(n: object) -> None:
        if isinstance(n, E.Call) and n.op in TENSOR_CORE_OPS:
            out.update(tensor_core_pointers(n))

    post_order_visit(s, visit, once=True)
    return out


def _writes(s: S.Stmt) -> set[E.Var]:
    out: set[E.Var] = set()
    post_order_visit(
        s, lambda n: out.add(n.buffer.data) if isinstance(n, S.BufferStore) else None, once=True
    )
    return out


def _reads_on_chip(s: S.Stmt) -> set[str]:
    out: set[str] = set()

    def visit(n: object) -> None:
        if isinstance(n, E.BufferLoad) and n.buffer.scope != "global":
            out.add(n.buffer.name)

    post_order_visit(s, visit, once=True)
    return out


def _reads(s: S.Stmt) -> set[E.Var]:
    out: set[E.Var] = set()
    post_order_visit(
        s, lambda n: out.add(n.buffer.data) if isinstance(n, E.BufferLoad) else None, once=True
    )
    return out


def _split_producers(
    body: list[S.Stmt], marked: dict[E.Var, int], where: str
) -> tuple[list[S.Stmt], list[S.Stmt]]:
    """The fills of the pipelined stages, and the rest of the iteration in its order.

    Other stages computed at the same loop need not be pipelined (TVM lets a schedule
    double-buffer B's tile and not A's): their copies stay in the iteration, after the
    pipelined fills are issued and before the compute, and keep the barriers
    ``inject_sync`` gives any copy. A pipelined fill must be a copy from global memory,
    and no statement may read a pipelined stage before its fill in the loop body.
    """
    writers = [i for i, x in enumerate(body) if _writes(x) & marked.keys()]
    for i in writers:
        on_chip = _reads_on_chip(body[i])
        if on_chip or _writes(body[i]) - marked.keys():
            raise LoweringError(
                f"{where}: filling the stage also reads or writes other on-chip buffers "
                f"({', '.join(sorted(on_chip)) or 'writes'}); only a copy from global "
                "memory can be issued ahead of the iteration that uses it"
            )
    readers = [i for i, x in enumerate(body) if _reads(x) & marked.keys()]
    if not writers or (readers and min(readers) < max(writers)):
        raise LoweringError(
            f"{where}: the stage is not filled in the loop before it is read; compute_at "
            "it at the loop it should be pipelined over"
        )
    producers = [body[i] for i in writers]
    return producers, [x for i, x in enumerate(body) if i not in writers]


def _rebuild(
    allocs: list[S.Allocate], staged: dict[E.Var, tuple[Buffer, int]], body: S.Stmt
) -> S.Stmt:
    for a in reversed(allocs):
        buf = staged[a.buffer.data][0] if a.buffer.data in staged else a.buffer
        body = S.Allocate(buf, body)
    return body


class _Pipeline(Mutator):
    def __init__(self, use_async: bool) -> None:
        self.use_async = use_async
        self.ana = Analyzer()  # the ranges of the loops around the one being rewritten

    def visit_AttrStmt(self, s: S.AttrStmt) -> S.Stmt:
        if s.key == PIPELINE_KEY:  # a mark where no loop repeats the stage: nothing to do
            return self.visit(s.body)
        return self.generic_visit(s)

    def visit_For(self, s: S.For) -> S.Stmt:
        allocs, marked, inner = _peel(s.body)
        if not marked or s.kind is not S.ForKind.SERIAL:
            with self.ana.scope():
                self.ana.bind(s.loop_var, E.Range(s.min, s.extent))
                return self.generic_visit(s)
        inner = self.visit(inner)
        extent = s.extent
        if isinstance(extent, E.IntImm) and extent.value < 2:
            return S.For(
                s.loop_var,
                s.min,
                extent,
                s.kind,
                _rebuild(allocs, {}, inner),
                s.thread_tag,
                s.annotations,
            )
        return self.pipeline(s, allocs, marked, inner)

    def pipeline(
        self, s: S.For, allocs: list[S.Allocate], marked: dict[E.Var, int], inner: S.Stmt
    ) -> S.Stmt:
        stages = max(marked.values())
        names = ", ".join(a.buffer.name for a in allocs if a.buffer.data in marked)
        where = f"pipeline of {names} over loop '{s.loop_var.name}'"
        stmts = list(inner.stmts) if isinstance(inner, S.SeqStmt) else [inner]
        producers, consumers = _split_producers(stmts, marked, where)

        staged: dict[E.Var, tuple[Buffer, int]] = {}
        fragment_sources = _tensor_core_pointers(inner)
        for a in allocs:
            if a.buffer.data not in marked:
                continue
            if a.buffer.scope != "shared":
                raise LoweringError(
                    f"{where}: '{a.buffer.name}' is in {a.buffer.scope!r} memory; only shared "
                    "stages are pipelined"
                )
            (size,) = a.buffer.shape
            if not isinstance(size, E.IntImm):
                raise LoweringError(f"{where}: '{a.buffer.name}' has the non-constant size {size}")
            nbytes = (
                _FRAGMENT_ALIGN_BYTES if a.buffer.data in fragment_sources else _STAGE_ALIGN_BYTES
            )
            align = max(1, nbytes // dt.bytes_of(a.buffer.dtype))
            padded = -(-size.value // align) * align
            b = a.buffer
            new = Buffer(
                b.name, b.dtype, (E.const(stages * padded),), b.data, b.scope, (), None, b.align
            )
            staged[b.data] = (new, padded)

        ko, n = s.loop_var, s.extent
        lo = s.min
        ahead = stages - 1

        def at(rel: E.PrimExpr | int) -> E.PrimExpr:
            return E.convert(rel) if E.is_const_int(lo, 0) else lo + rel

        def fill(e: E.PrimExpr, tile: E.PrimExpr) -> S.Stmt:
            stmt = simplify_stmt(substitute(S.seq(*producers), {ko: tile}))
            stmt = Restage(staged, stages, e).visit(stmt)
            return _Asyncify(staged).visit(stmt) if self.use_async else stmt

        commit = [S.AsyncCommit()] if self.use_async else []
        prologue: list[S.Stmt] = []
        for p in range(ahead):
            f = fill(E.IntImm(ko.dtype, p), at(E.IntImm(ko.dtype, p)))
            if not (isinstance(n, E.IntImm) and p < n.value):
                f = S.IfThenElse(E.const(p, ko.dtype) < n, f)
            prologue += [f, *commit]
        i = E.Var(ko.name, ko.dtype)
        rel = i  # the iteration number, from 0
        ahead_ok = rel + ahead < n
        compute = Restage(staged, stages, rel).visit(substitute(S.seq(*consumers), {ko: at(rel)}))
        with self.ana.scope():
            self.ana.bind(i, E.Range(E.const(0, ko.dtype), n))
            nxt = fill(rel + ahead, at(rel + ahead))
            staged_regs = None if self.use_async else self.registers(nxt)
        if staged_regs is not None:
            # older GPUs: the loads of the next tile go to registers before the compute
            # and reach shared memory after it, so their latency hides behind it
            regs, load, store = staged_regs
            body = S.seq(
                S.Barrier("shared"),
                S.IfThenElse(ahead_ok, load),
                compute,
                S.IfThenElse(ahead_ok, store),
            )
            for reg in reversed(regs):
                body = S.Allocate(reg, body)
        else:
            wait = [S.AsyncWait(stages - 2)] if self.use_async else []
            body = S.seq(*wait, S.Barrier("shared"), S.IfThenElse(ahead_ok, nxt), *commit, compute)
        loop = S.For(i, E.const(0, ko.dtype), n, S.ForKind.SERIAL, body, "", s.annotations)
        return _rebuild(allocs, staged, S.seq(*prologue, loop))

    def registers(self, fill: S.Stmt) -> tuple[list[Buffer], S.Stmt, S.Stmt] | None:
        """The next tile's fill split at registers, or None if some part cannot be."""
        parts = [
            through_registers(f, self.ana)
            for f in (fill.stmts if isinstance(fill, S.SeqStmt) else (fill,))
        ]
        if any(p is None for p in parts):
            return None
        regs = [p[0] for p in parts]  # type: ignore[index]
        loads = S.seq(*[p[1] for p in parts])  # type: ignore[index]
        stores = S.seq(*[p[2] for p in parts])  # type: ignore[index]
        return regs, loads, stores


def uses_async_copy(arch: str) -> bool:
    """``cp.async`` exists from Ampere (sm_80) on (``sm_90a``, ``sm_100f`` included)."""
    return arch_number(arch) >= 80


def inject_pipeline(func: S.PrimFunc, arch: str = "sm_80") -> S.PrimFunc:
    """Runs the pass; ``arch`` decides whether asynchronous copies are available."""
    return _Pipeline(uses_async_copy(arch)).visit_func(func)
