"""Statements -> closures that run every thread of a chunk in lock-step, under an active mask.

Environment slot 0 holds the mask of active threads (``None``: all), slot 1 the
running :class:`~.grid.Chunk`. Control flow that depends on the thread narrows
the mask instead of branching: an ``if`` with a per-thread condition runs its
then-branch for the threads where it holds and its else-branch for the others;
a serial loop whose bounds differ between threads iterates up to the largest
extent, each thread taking part while its own extent lasts. A loop bound to a
``blockIdx``/``threadIdx`` tag is not a loop: its variable is the per-thread
index of the tag, and when its extent is below the launch extent the threads
beyond it are masked off (a guard). A body whose mask has no thread left is
skipped. A barrier checks that, in each block, either every thread or none
reaches it, then clears the race history of the shared allocations in scope.
Asynchronous copies (``cp.async``) are issued into a queue and land, group by
group, at the wait that releases them (:mod:`.races` flags any touch before).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from ember.codegen_cuda.emulator.exprs import ExprCompiler, narrow
from ember.codegen_cuda.emulator.grid import CHUNK, MASK, TAGS, Chunk, Dim3
from ember.codegen_cuda.emulator.memory import BlockStorage, allocation_size
from ember.codegen_cuda.emulator.wmma import FragmentStorage
from ember.errors import InternalError, RaceError
from ember.tir import dtype as dt
from ember.tir import expr as E
from ember.tir import stmt as S
from ember.tir.interp.closures import Env, Fn, Scope, StmtCompilerBase
from ember.tir.interp.ops import value_dtype
from ember.tir.printer import expr_to_str, stmt_to_str
from ember.tir.structural import structural_equal
from ember.tir.tensor_core import WMMA_SCOPES


class StmtCompiler(StmtCompilerBase):
    """Compiles statements for the SIMT emulator, which runs every thread of a block in lockstep."""

    engine = "SIMT emulator"

    def __init__(self, scope: Scope, grid: Dim3, block: Dim3) -> None:
        super().__init__(scope, ExprCompiler(scope))
        self.exprs: ExprCompiler
        self.launch = dict(zip(TAGS, (*grid, *block)))
        self._table[S.Barrier] = self._barrier
        self._table[S.AsyncCopy] = self._async_copy
        self._table[S.AsyncCommit] = self._async_commit
        self._table[S.AsyncWait] = self._async_wait

    def enter_site(self, text: Callable[[], str]) -> None:
        self.exprs.enter_site(text())

    # -- loops ------------------------------------------------------------------------
    def _for(self, s: S.For) -> Fn:
        if s.kind is S.ForKind.THREAD_BINDING:
            return self._thread_loop(s)
        self.exprs.enter_site(_for_head(s))
        return self._serial_loop(s.loop_var, s.min, s.extent, s.body)

    def _dynamic_loop(self, slot: int, body: Fn, f_lo: Fn, f_ext: Fn, npdt: np.dtype) -> Fn:
        def run(env: Env) -> None:
            lo, ext = f_lo(env), f_ext(env)
            if np.ndim(lo) == 0 and np.ndim(ext) == 0:
                for v in np.arange(lo, lo + ext, dtype=npdt):
                    env[slot] = v
                    body(env)
                return
            _divergent_loop(env, slot, body, lo, ext, npdt)

        return run

    def _thread_loop(self, s: S.For) -> Fn:
        tag, head = s.thread_tag, _for_head(s)
        if tag not in self.launch:
            raise InternalError(f"unknown thread tag {tag!r} in `{head}`; expected one of {TAGS}")
        if not E.is_const_int(s.min, 0):
            raise InternalError(f"a loop bound to {tag} must start at 0: `{head}`")
        launch = self.launch[tag]
        if isinstance(s.extent, E.IntImm) and isinstance(launch, int) and s.extent.value > launch:
            raise InternalError(
                f"`{head}` needs {s.extent.value} values of {tag} but the kernel is launched "
                f"with {launch}; split_host_device sets the launch from these loops"
            )
        self.exprs.enter_site(head)
        f_ext = self.exprs.compile(s.extent)
        if isinstance(launch, int):
            full = isinstance(s.extent, E.IntImm) and s.extent.value == launch
        else:  # a symbolic grid extent: the loop covers it when it is the same expression
            full = structural_equal(s.extent, launch, map_free_vars=False)
        slot, body = self._scoped(s.loop_var, s.body)
        npdt = value_dtype(s.loop_var.dtype)

        def run(env: Env) -> None:
            idx = env[CHUNK].index(tag, npdt)
            env[slot] = idx
            if full:
                body(env)
                return
            mask = env[MASK]
            guarded = narrow(mask, idx < f_ext(env))
            if guarded.any():
                env[MASK] = guarded
                body(env)
                env[MASK] = mask

        return run

    # -- memory -----------------------------------------------------------------------
    def _store(self, s: S.BufferStore) -> Fn:
        if len(s.indices) != 1:
            raise InternalError(
                f"store to '{s.buffer.name}' with {len(s.indices)} indices reached the emulator; "
                "device kernels access flattened buffers with one index"
            )
        site, slot, value, index = self._store_parts(s, stmt_to_str(s))

        def store(env: Env) -> None:
            env[slot].store(index(env), value(env), env, site)

        return store

    def _store_parts(self, s: S.BufferStore, text: str) -> tuple[int, int, Fn, Fn]:
        """The site, the buffer's slot, and the value and index of a store (a vector
        store's index as a ``(1, lanes)`` row)."""
        site = self.exprs.enter_site(text)
        value, index = self.exprs.compile(s.value), self.exprs.compile(s.indices[0])
        slot = self.exprs.data_slot(s.buffer)
        if dt.lanes_of(s.value.dtype) == 1:
            return site, slot, value, index

        def row(env: Env) -> Any:
            i = index(env)
            return i.reshape(1, -1) if np.ndim(i) == 1 else i

        return site, slot, value, row

    def _allocate(self, s: S.Allocate) -> Fn:
        buf = s.buffer
        if buf.scope not in ("shared", "local", *WMMA_SCOPES):
            raise InternalError(
                f"allocation of '{buf.name}' in scope {buf.scope!r} inside a kernel; the "
                "emulator runs 'shared', 'local' and wmma fragment allocations"
            )
        size = allocation_size(buf)
        sites = self.exprs.sites
        slot, body = self._scoped(buf.data, s.body)
        if buf.scope in WMMA_SCOPES:

            def run_fragment(env: Env) -> None:
                env[slot] = FragmentStorage(buf.name, buf.dtype, size, buf.scope, env[CHUNK])
                body(env)

            return run_fragment
        if buf.scope == "local":

            def run_local(env: Env) -> None:
                env[slot] = BlockStorage(buf.name, buf.dtype, size, "local", env[CHUNK], sites)
                body(env)

            return run_local
        key = object()  # this allocation's identity within a chunk

        def run_shared(env: Env) -> None:
            # A __shared__ array is one piece of memory for the whole kernel: an allocation
            # reached again (in a loop) is the same memory with the same race history.
            chunk: Chunk = env[CHUNK]
            storage = chunk.shared.get(key)
            if storage is None:
                storage = BlockStorage(buf.name, buf.dtype, size, "shared", chunk, sites)
                chunk.shared[key] = storage
            env[slot] = storage
            body(env)

        return run_shared

    def _barrier(self, s: S.Barrier) -> Fn:
        site = self.exprs.enter_site(f"barrier({s.scope!r})")
        sites = self.exprs.sites

        def barrier(env: Env) -> None:
            chunk: Chunk = env[CHUNK]
            blocks = _blocks_at_barrier(chunk, env[MASK], sites[site])
            if blocks is None:
                chunk.epoch += 1
            else:
                chunk.epoch[blocks] += 1
            for storage in chunk.shared.values():
                if storage.tracker is not None:
                    storage.tracker.reset(blocks)

        return barrier

    # -- asynchronous copies ------------------------------------------------------------
    # cp.async semantics: a copy is issued (its source read, its destination claimed) and
    # lands only when a wait lets its group go; commit closes the group being issued.
    def _async_copy(self, s: S.AsyncCopy) -> Fn:
        site, slot, value, index = self._store_parts(s.store, stmt_to_str(s))

        def issue(env: Env) -> None:
            copy = env[slot].issue_async(index(env), value(env), env, site)
            env[CHUNK].async_open.append(copy)

        return issue

    def _async_commit(self, s: S.AsyncCommit) -> Fn:
        site = self.exprs.enter_site("async_commit()")
        sites = self.exprs.sites

        def commit(env: Env) -> None:
            chunk: Chunk = env[CHUNK]
            _uniform(env, sites[site])
            chunk.async_groups.append(chunk.async_open)
            chunk.async_open = []

        return commit

    def _async_wait(self, s: S.AsyncWait) -> Fn:
        site = self.exprs.enter_site(f"async_wait({s.pending})")
        sites, pending = self.exprs.sites, s.pending

        def wait(env: Env) -> None:
            chunk: Chunk = env[CHUNK]
            _uniform(env, sites[site])
            while len(chunk.async_groups) > pending:
                for copy in chunk.async_groups.pop(0):
                    copy.land()

        return wait

    # -- control flow ---------------------------------------------------------------
    def _if(self, s: S.IfThenElse) -> Fn:
        self.exprs.enter_site(f"if {expr_to_str(s.condition)}:")
        cond = self.exprs.compile(s.condition)
        then = self.compile(s.then_case)
        other = self.compile(s.else_case) if s.else_case is not None else None

        def run(env: Env) -> None:
            c = cond(env)
            if np.ndim(c) == 0:
                if c:
                    then(env)
                elif other is not None:
                    other(env)
                return
            mask = env[MASK]
            for branch, m in ((then, narrow(mask, c)), (other, narrow(mask, ~c))):
                if branch is not None and m.any():
                    env[MASK] = m
                    branch(env)
            env[MASK] = mask

        return run

    def _holds(self, c: Any, env: Env) -> bool:
        """An assertion holds when it holds in every active thread."""
        if np.ndim(c) == 0:
            return bool(c)
        mask = env[MASK]
        return bool(np.all(c if mask is None else c | ~mask))


def _for_head(s: S.For) -> str:
    """The first line of a loop as the printer shows it (without printing its whole body)."""
    var, ext = expr_to_str(s.loop_var), expr_to_str(s.extent)
    if s.kind is S.ForKind.THREAD_BINDING:
        return f'for {var} in thread_binding({ext}, "{s.thread_tag}"):'
    lo = expr_to_str(s.min)
    return f"for {var} in range({lo}, {lo} + {ext}):"


def _divergent_loop(env: Env, slot: int, body: Fn, lo: Any, ext: Any, npdt: np.dtype) -> None:
    """A serial loop whose bounds differ between threads: each runs its own trip count."""
    mask = env[MASK]
    ext_b = np.broadcast_to(ext, (env[CHUNK].lanes,))
    active = ext_b if mask is None else ext_b[mask]
    trips = int(active.max(initial=0))
    for k in range(trips):
        m = narrow(mask, ext_b > k)
        if not m.any():
            continue
        env[MASK] = m
        env[slot] = (lo + k).astype(npdt) if np.ndim(lo) else npdt.type(lo + k)
        body(env)
    env[MASK] = mask


def _uniform(env: Env, site: str) -> None:
    """Copy groups are per thread on the GPU; the emulator keeps one queue for the chunk,
    which is exact when every thread commits and waits together, as generated code does."""
    mask = env[MASK]
    if mask is not None and not mask.all():
        raise InternalError(
            f"`{site}` is reached by only some threads; the emulator models asynchronous-copy "
            "groups committed and waited for by every thread of the kernel"
        )


def _blocks_at_barrier(chunk: Chunk, mask: np.ndarray | None, site: str) -> np.ndarray | None:
    """The blocks whose threads reach a barrier; raises if only some threads of a block do."""
    if mask is None:
        return None
    per_block = mask.reshape(chunk.nblocks, chunk.threads)
    some, every = per_block.any(axis=1), per_block.all(axis=1)
    divergent = some & ~every
    if divergent.any():
        b = int(np.argmax(divergent))
        row = per_block[b]
        here = b * chunk.threads + int(np.argmax(row))
        away = b * chunk.threads + int(np.argmax(~row))
        raise RaceError(
            f"barrier in divergent code: `{site}` is reached by {chunk.describe(here)} but "
            f"not by {chunk.describe(away)}; every thread of a block must reach each barrier "
            "(move it out of thread-dependent conditions and loops)"
        )
    return some


__all__ = ["StmtCompiler"]
