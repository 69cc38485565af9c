"""A tiny statement executor for pass tests: runs loop nests and records every store.

``run(stmt, env, buffers)`` executes ``stmt`` sequentially (every loop kind
runs in order) with buffers as numpy arrays (missing ones are created on
first use) and returns the list of stores as ``(buffer name, index, value)``.
Comparing the traces of a function before and after a pass checks that the
pass kept the same stores, as a multiset and in order.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from ember.tir import expr as E
from ember.tir import stmt as S
from ember.tir.buffer import Buffer
from tests.tir.arith.arith_eval import evaluate

Store = tuple[str, tuple[int, ...], Any]


class _Exec:
    def __init__(self, buffers: dict[Buffer, np.ndarray], max_steps: int) -> None:
        self.buffers = buffers
        self.trace: list[Store] = []
        self.steps = max_steps

    def array(self, buf: Buffer) -> np.ndarray:
        if buf not in self.buffers:
            shape = tuple(int(evaluate(s, {})) for s in buf.shape)
            self.buffers[buf] = np.zeros(shape, dtype=np.float64)
        return self.buffers[buf]

    def load(self, buf: Buffer, idx: tuple[int, ...]) -> Any:
        arr = self.array(buf)
        assert all(0 <= i < d for i, d in zip(idx, arr.shape)), (
            f"read {buf.name}{list(idx)} out of bounds"
        )
        return arr[idx]

    def expr(self, e: E.PrimExpr, env: Mapping[E.Var, int]) -> Any:
        return evaluate(e, env, self.load)

    def run(self, s: S.Stmt, env: dict[E.Var, int]) -> None:
        self.steps -= 1
        assert self.steps > 0, "statement executor: step budget exhausted"
        if isinstance(s, S.SeqStmt):
            for x in s.stmts:
                self.run(x, env)
        elif isinstance(s, S.For):
            lo, ext = int(self.expr(s.min, env)), int(self.expr(s.extent, env))
            for v in range(lo, lo + ext):
                self.run(s.body, {**env, s.loop_var: v})
        elif isinstance(s, S.IfThenElse):
            if self.expr(s.condition, env):
                self.run(s.then_case, env)
            elif s.else_case is not None:
                self.run(s.else_case, env)
        elif isinstance(s, S.LetStmt):
            self.run(s.body, {**env, s.var: self.expr(s.value, env)})
        elif isinstance(s, S.BufferStore):
            idx = tuple(int(self.expr(i, env)) for i in s.indices)
            value = self.expr(s.value, env)
            arr = self.array(s.buffer)
            assert all(0 <= i < d for i, d in zip(idx, arr.shape)), (
                f"write {s.buffer.name}{list(idx)} out of bounds"
            )
            arr[idx] = value
            self.trace.append((s.buffer.name, idx, float(value)))
        elif isinstance(s, (S.Allocate, S.AttrStmt)):
            self.run(s.body, env)
        elif isinstance(s, S.AssertStmt):
            assert self.expr(s.condition, env), s.message
            self.run(s.body, env)
        elif isinstance(s, (S.Evaluate, S.Barrier)):
            pass
        else:
            raise TypeError(f"tir_exec cannot run {type(s).__name__}")


def run(
    stmt: S.Stmt | S.PrimFunc,
    env: Mapping[E.Var, int] | None = None,
    buffers: dict[Buffer, np.ndarray] | None = None,
    max_steps: int = 2_000_000,
) -> list[Store]:
    """Execute ``stmt`` and return its stores in order."""
    if isinstance(stmt, S.PrimFunc):
        stmt = stmt.body
    ex = _Exec(buffers if buffers is not None else {}, max_steps)
    ex.run(stmt, dict(env or {}))
    return ex.trace
