"""What the LLVM code generator's helper modules see of it: its per-function state and
the :class:`Emitter` protocol.

:mod:`ember.codegen_llvm.codegen` dispatches calls, memory accesses, packed calls and
parallel loops to :mod:`.calls`, :mod:`.memory`, :mod:`.packed` and :mod:`.parallel`,
which call back into the visitor. They are typed against the protocol here rather than
the visitor class, so the helpers sit below the visitor and the visitor imports them,
never the reverse.
"""

from __future__ import annotations

from collections.abc import Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from typing import Any, Protocol

from llvmlite import ir

from ember.codegen_llvm.cpu_intrinsics import CpuFacts
from ember.runtime.cpu import NUM_THREADS_SYMBOL
from ember.tir import expr as E
from ember.tir import stmt as S
from ember.tir.buffer import Buffer

NUM_THREADS_GLOBAL = NUM_THREADS_SYMBOL  # int32 the runtime sets; read by parallel launches


@dataclass
class FunctionState:
    """What the visitor knows about the LLVM function it is filling."""

    fn: ir.Function
    builder: ir.IRBuilder
    vars: dict[E.Var, ir.Value] = field(default_factory=dict)
    align: dict[E.Var, int] = field(default_factory=dict)  # data var -> base alignment
    heap: list[ir.Value] = field(default_factory=list)  # live aligned_alloc pointers
    in_parallel: bool = False
    # data vars of buffers whose vector stores bypass the caches (``nontemporal_stores``)
    nontemporal: set[E.Var] = field(default_factory=set)


class Emitter(Protocol):
    """The code generator as its helpers use it (:class:`.codegen.CodeGenLLVM`)."""

    module: ir.Module
    cpu: CpuFacts | None
    fast: tuple[str, ...]
    noalias: bool
    func_name: str
    n_outlined: int
    serial_reductions: set[S.For]

    @property
    def state(self) -> FunctionState: ...

    @property
    def builder(self) -> ir.IRBuilder: ...

    def visit(self, node: Any) -> Any: ...

    def operands(self, a: E.PrimExpr, b: E.PrimExpr) -> tuple[ir.Value, ir.Value]: ...

    def function_state(self, state: FunctionState) -> AbstractContextManager[FunctionState]: ...

    def bind(
        self, var: E.Var, value: ir.Value, align: int | None = None
    ) -> AbstractContextManager[None]: ...

    def emit_error_return(self, code: ir.Value) -> None: ...

    def single_index(self, buf: Buffer, indices: Sequence[E.PrimExpr]) -> tuple[E.PrimExpr]: ...
