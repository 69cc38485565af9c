"""Statements and whole PrimFuncs -> Python closures, for the reference interpreter.

A statement compiles to a function of the environment that runs it. Every loop
runs serially in order, whatever its kind (a ``parallel`` or thread-bound loop
has the same result as its serial version when the code is race-free, which is
what the SIMT emulator, not this oracle, checks). Loop variables take numpy
values of their dtype; a loop with constant bounds precomputes them.
``compile_func`` also binds symbolic shape variables of the parameters, so a
function with shapes like ``(n, 16)`` runs on any array of matching rank.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from ember.errors import ArgumentError, InternalError, LoweringError
from ember.tir import expr as E
from ember.tir import stmt as S
from ember.tir.interp import memory
from ember.tir.interp.exprs import ExprCompiler, Scope
from ember.tir.interp.ops import value_dtype

Env = list
Fn = Callable[[Env], Any]

_PRECOMPUTED_LOOP_LIMIT = 1 << 16  # loops up to this extent keep their values in a tuple


class StmtCompiler:
    def __init__(self, scope: Scope) -> None:
        self.scope = scope
        self.exprs = ExprCompiler(scope)
        self._table: dict[type, Callable[[Any], Fn]] = {
            S.For: self._for,
            S.BufferStore: self._store,
            S.SeqStmt: self._seq,
            S.IfThenElse: self._if,
            S.LetStmt: self._let,
            S.Allocate: self._allocate,
            S.AttrStmt: self._attr,
            S.AssertStmt: self._assert,
            S.Evaluate: self._evaluate,
            S.Barrier: lambda s: _nothing,
        }

    def compile(self, s: S.Stmt) -> Fn:
        handler = self._table.get(type(s))
        if handler is None:
            raise InternalError(f"the reference interpreter cannot run {type(s).__name__}")
        return handler(s)

    def _loop(self, var: E.Var, lo: E.PrimExpr, extent: E.PrimExpr, body_stmt: S.Stmt) -> Fn:
        f_lo, f_ext = self.exprs.compile(lo), self.exprs.compile(extent)
        slot = self.scope.define(var)
        body = self.compile(body_stmt)
        self.scope.undefine(var)
        npdt = value_dtype(var.dtype)
        if (
            isinstance(lo, E.IntImm)
            and isinstance(extent, E.IntImm)
            and extent.value <= _PRECOMPUTED_LOOP_LIMIT
        ):
            values = tuple(np.arange(lo.value, lo.value + extent.value, dtype=npdt))

            def run_const(env: Env) -> None:
                for v in values:
                    env[slot] = v
                    body(env)

            return run_const

        def run(env: Env) -> None:
            start = f_lo(env)
            for v in np.arange(start, start + f_ext(env), dtype=npdt):
                env[slot] = v
                body(env)

        return run

    def _for(self, s: S.For) -> Fn:
        return self._loop(s.loop_var, s.min, s.extent, s.body)

    def _store(self, s: S.BufferStore) -> Fn:
        value = self.exprs.compile(s.value)
        slot = self.exprs.data_slot(s.buffer)
        return memory.compile_store(
            s.buffer, s.indices, value, s.value.dtype, slot, self.exprs.compile
        )

    def _seq(self, s: S.SeqStmt) -> Fn:
        fns = tuple(self.compile(x) for x in s.stmts)
        if not fns:
            return _nothing
        if len(fns) == 1:
            return fns[0]
        if len(fns) == 2:
            f0, f1 = fns

            def run2(env: Env) -> None:
                f0(env)
                f1(env)

            return run2

        def run(env: Env) -> None:
            for f in fns:
                f(env)

        return run

    def _if(self, s: S.IfThenElse) -> Fn:
        cond = self.exprs.compile(s.condition)
        then = self.compile(s.then_case)
        if s.else_case is None:

            def run_if(env: Env) -> None:
                if cond(env):
                    then(env)

            return run_if
        other = self.compile(s.else_case)

        def run_if_else(env: Env) -> None:
            if cond(env):
                then(env)
            else:
                other(env)

        return run_if_else

    def _let(self, s: S.LetStmt) -> Fn:
        value = self.exprs.compile(s.value)
        slot = self.scope.define(s.var)
        body = self.compile(s.body)
        self.scope.undefine(s.var)

        def run(env: Env) -> None:
            env[slot] = value(env)
            body(env)

        return run

    def _allocate(self, s: S.Allocate) -> Fn:
        make = memory.compile_allocation(s.buffer, self.exprs.compile)
        slot = self.scope.define(s.buffer.data)
        body = self.compile(s.body)
        self.scope.undefine(s.buffer.data)

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
            return self._loop(node, E.const(0, node.dtype), s.value, s.body)
        if s.key == "thread_allreduce":
            # threads run one after another here, so they cannot meet to combine values
            raise LoweringError(
                f"the interpreter cannot run a cross-thread reduction ({node!r}): its "
                "threads run one at a time; run it on the GPU or the CUDA emulator "
                "(build for 'cuda' and call .emulate)"
            )
        return self.compile(s.body)

    def _assert(self, s: S.AssertStmt) -> Fn:
        cond = self.exprs.compile(s.condition)
        body = self.compile(s.body)
        message = s.message

        def run(env: Env) -> None:
            if not cond(env):
                raise ArgumentError(message)
            body(env)

        return run

    def _evaluate(self, s: S.Evaluate) -> Fn:
        value = self.exprs.compile(s.value)

        def run(env: Env) -> None:
            value(env)

        return run


def _nothing(env: Env) -> None:
    return None


__all__ = ["StmtCompiler"]
