"""Statements and whole PrimFuncs -> Python closures, for the reference interpreter.

A statement compiles to a function of the environment that runs it (the shared
handlers live in :mod:`.closures`). Every loop runs serially in order, whatever
its kind (a ``parallel`` or thread-bound loop has the same result as its serial
version when the code is race-free, which is what the SIMT emulator, not this
oracle, checks); a TVM-style ``thread_extent`` attribute is such a loop too.
Barriers do nothing. Stores and allocations go through :mod:`.memory`.
"""

from __future__ import annotations

from ember.errors import LoweringError
from ember.tir import expr as E
from ember.tir import stmt as S
from ember.tir.interp import memory
from ember.tir.interp.closures import Env, Fn, Scope, StmtCompilerBase
from ember.tir.interp.exprs import ExprCompiler


class StmtCompiler(StmtCompilerBase):
    """Compiles statements for the single-thread reference interpreter (loops run serially)."""

    def __init__(self, scope: Scope) -> None:
        super().__init__(scope, ExprCompiler(scope))

    def _for(self, s: S.For) -> Fn:
        return self._serial_loop(s.loop_var, s.min, s.extent, s.body)

    def _store(self, s: S.BufferStore) -> Fn:
        value = self.exprs.compile(s.value)
        slot = self.exprs.data_slot(s.buffer)
        return memory.compile_store(
            s.buffer, s.indices, value, s.value.dtype, slot, self.exprs.compile
        )

    def _allocate(self, s: S.Allocate) -> Fn:
        make = memory.compile_allocation(s.buffer, self.exprs.compile)
        slot, body = self._scoped(s.buffer.data, s.body)

        def run(env: Env) -> None:
            env[slot] = make(env)
            body(env)

        return run

    def _attr(self, s: S.AttrStmt) -> Fn:
        node = s.node
        if (
            s.key in ("thread_extent", "virtual_thread")
            and isinstance(node, E.Var)
            and not self.scope.is_defined(node)
        ):
            # TVM-style thread binding: the attribute defines the thread index
            return self._serial_loop(node, E.const(0, node.dtype), s.value, s.body)
        if s.key == "thread_allreduce":
            # threads run one after another here, so they cannot meet to combine values
            raise LoweringError(
                f"the interpreter cannot run a cross-thread reduction ({node!r}): its "
                "threads run one at a time; run it on the GPU or the CUDA emulator "
                "(build for 'cuda' and call .emulate)"
            )
        return self.compile(s.body)


__all__ = ["StmtCompiler"]
