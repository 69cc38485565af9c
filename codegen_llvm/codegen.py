"""TIR to LLVM IR: one visitor that turns flattened PrimFuncs into an llvmlite module.

This is the middle of the CPU backend: :mod:`ember.codegen_llvm.build` hands it
PrimFuncs after ``flatten_buffers`` (one index per access) and ``vectorize_loops``,
and passes the IR it returns to :mod:`ember.codegen_llvm.jit`. Each PrimFunc
becomes one exported function ``i32 name(ptr noalias A, ptr noalias B, ...)``
over its buffers' data pointers, returning 0, or the 1-based number of the
failed ``AssertStmt`` (whose messages are kept in :class:`FunctionInfo`), or a
negative code for a runtime failure. Expressions map through tables
(:mod:`.arith`, :mod:`.casts`), calls through :mod:`.calls`, memory through
:mod:`.memory`, parallel loops through :mod:`.parallel`. A float ``a*b + c``
becomes ``llvm.fmuladd`` so LLVM may fuse it; fast-math flags are set only for
functions with the attribute ``fast_math``. Loops carry ``llvm.loop`` hints from
:mod:`.loop_hints` (full unroll; no loop vectorization around a float min/max
reduction, which LLVM 22 miscompiles or aborts on).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import numpy as np
from llvmlite import ir

from ember.codegen_llvm import arith, memory
from ember.codegen_llvm.builder_utils import (
    I32,
    I64,
    PTR,
    declare,
    declare_intrinsic,
    for_range,
    iota,
    reg_type,
    splat,
)
from ember.codegen_llvm.calls import emit_call
from ember.codegen_llvm.casts import emit_cast, round_constant_to_bfloat16, round_to_bfloat16
from ember.codegen_llvm.cpu_intrinsics import CpuFacts
from ember.codegen_llvm.emitter import NUM_THREADS_GLOBAL, FunctionState
from ember.codegen_llvm.loop_hints import loop_hints, minmax_reduction_loops
from ember.codegen_llvm.memory import NONTEMPORAL
from ember.codegen_llvm.parallel import emit_parallel_for, runs_serially
from ember.errors import InternalError, LoweringError
from ember.tir import dtype as dt
from ember.tir import expr as E
from ember.tir import stmt as S
from ember.tir.buffer import Buffer
from ember.tir.functor import Visitor

_ROUNDED_OPS = frozenset(
    {
        E.BinaryOp.ADD,
        E.BinaryOp.SUB,
        E.BinaryOp.MUL,
        E.BinaryOp.DIV,
        E.BinaryOp.FLOORDIV,
        E.BinaryOp.FLOORMOD,
        E.BinaryOp.TRUNCDIV,
        E.BinaryOp.TRUNCMOD,
    }
)


# Expressions whose value ``CodeGenLLVM.visit`` reuses within a statement: pure, and costly
# enough to emit that a lookup pays. Calls are never reused, and after one of these, which
# may write memory, no value is.
_REUSED = frozenset({E.BinOp, E.Compare, E.Select, E.Cast, E.Ramp, E.Broadcast, E.BufferLoad})
_EFFECTFUL_CALLS = E.EXTERN_CALLS | E.PACKED_CALLS | E.TENSOR_CORE_CALLS


@dataclass(frozen=True)
class FunctionInfo:
    """An emitted function's symbol and its assert messages (status code k -> errors[k-1])."""

    name: str
    errors: tuple[str, ...]


def function_symbol(func: S.PrimFunc) -> str:
    """The symbol a compiled function is exported under: its ``global_symbol``, else its name."""
    return str(func.attr("global_symbol") or func.name)


class CodeGenLLVM(Visitor):
    """Visits TIR and appends LLVM IR through the current :class:`FunctionState`'s builder."""

    def __init__(
        self,
        module: ir.Module,
        fast_math: bool = False,
        noalias: bool = True,
        cpu: CpuFacts | None = None,
    ) -> None:
        self.module = module
        self.cpu = cpu  # the target's CPU, for target-specific intrinsics (None: the host)
        self.default_fast = fast_math
        self.noalias = noalias  # buffer arguments do not overlap (PassContext "tir.noalias")
        self.fast: tuple[str, ...] = ()
        self._state: FunctionState | None = None
        self.errors: list[str] = []
        self.func_name = ""
        self.n_outlined = 0
        self.serial_reductions: set[S.For] = set()  # loops LLVM's loop vectorizer must skip
        self._values: dict[int, tuple[object, ir.Value, ir.Block]] = {}  # see ``visit``
        threads = ir.GlobalVariable(module, I32, NUM_THREADS_GLOBAL)
        threads.initializer = ir.Constant(I32, 0)  # 0: libgomp's default

    # -- dispatch ------------------------------------------------------------------------
    def visit(self, node: object) -> Any:
        """Emit ``node``; an expression object met again within one statement reuses its value.

        Simplified TIR shares subexpressions: an unrolled Winograd transform reads one node
        object at many places (ResNet-18's 256-channel kernel: 33,000 expression nodes as a
        tree, 12,000 distinct per statement). Walking the tree emitted each place anew, and
        LLVM's CSE merged the copies again after we had built and printed them. A value is
        reused only while nothing can have changed it: within one statement (a statement
        may store, so each one starts afresh), in the block that computed it (so it
        dominates the use), with no variable bound since (``bind``), and no call with side
        effects since.
        """
        if isinstance(node, S.Stmt):
            self._values.clear()
            return self._method(node)(self, node)
        if type(node) not in _REUSED and not (type(node) is E.Call and node.op in E.PURE_CALLS):
            value = self._method(node)(self, node)
            if type(node) is E.Call and node.op in _EFFECTFUL_CALLS:
                self._values.clear()
            return value
        hit = self._values.get(id(node))
        if hit is not None and hit[0] is node and hit[2] is self.builder.block:
            return hit[1]
        value = self._method(node)(self, node)
        self._values[id(node)] = (node, value, self.builder.block)
        return value

    # -- state ---------------------------------------------------------------------------
    @property
    def state(self) -> FunctionState:
        if self._state is None:
            raise InternalError("LLVM codegen used outside a function")
        return self._state

    @property
    def builder(self) -> ir.IRBuilder:
        return self.state.builder

    @contextmanager
    def function_state(self, state: FunctionState) -> Iterator[FunctionState]:
        saved, self._state = self._state, state
        try:
            yield state
        finally:
            self._state = saved

    @contextmanager
    def bind(self, var: E.Var, value: ir.Value, align: int | None = None) -> Iterator[None]:
        st = self.state
        old, old_align = st.vars.get(var), st.align.get(var)
        self._values.clear()  # values computed from the old binding
        st.vars[var] = value
        if align is not None:
            st.align[var] = align
        try:
            yield
        finally:
            self._values.clear()  # values computed from this binding
            for table, prev in ((st.vars, old), (st.align, old_align)):
                if prev is None:
                    table.pop(var, None)
                else:
                    table[var] = prev  # type: ignore[assignment]

    def emit_error_return(self, code: ir.Value) -> None:
        """Free live heap allocations and return ``code`` from the current function."""
        b = self.builder
        free = declare(self.module, "free", ir.VoidType(), [PTR])
        for ptr in reversed(self.state.heap):
            b.call(free, [ptr])
        b.ret(code)

    def single_index(self, buf: Buffer, indices: Sequence[E.PrimExpr]) -> tuple[E.PrimExpr]:
        if len(indices) != 1:
            raise InternalError(
                f"access to buffer '{buf.name}' in '{self.func_name}' has {len(indices)} indices; "
                "the LLVM backend expects the output of pass 'flatten_buffers'"
            )
        return (indices[0],)

    # -- functions -----------------------------------------------------------------------
    def add_function(self, func: S.PrimFunc, symbol: str | None = None) -> FunctionInfo:
        name = symbol or function_symbol(func)
        buffers, sizes = func.buffers, func.size_vars()
        fnty = ir.FunctionType(I32, [PTR] * len(buffers) + [I64] * len(sizes))
        fn = ir.Function(self.module, fnty, name=name)
        fn.attributes.add("nounwind")
        state = FunctionState(fn, ir.IRBuilder(fn.append_basic_block("entry")))
        for buf, arg in zip(buffers, fn.args):
            arg.name = buf.name
            if self.noalias:
                arg.add_attribute("noalias")
            arg.add_attribute("nonnull")
            state.vars[buf.data] = arg
            state.align[buf.data] = dt.bytes_of(dt.element_of(buf.dtype))
        for var, arg in zip(sizes, fn.args[len(buffers) :]):  # sizes come as int64
            arg.name = var.name
            state.vars[var] = emit_cast(state.builder, arg, "int64", var.dtype)
        self.errors, self.func_name, self.n_outlined = [], name, 0
        self.serial_reductions = minmax_reduction_loops(func.body)
        self.fast = ("fast",) if func.attr("fast_math", self.default_fast) else ()
        with self.function_state(state):
            self.visit(func.body)
            if not state.builder.block.is_terminated:
                state.builder.ret(ir.Constant(I32, 0))
        return FunctionInfo(name, tuple(self.errors))

    def generic_visit(self, node: object) -> None:
        raise InternalError(
            f"the LLVM backend cannot compile a {type(node).__name__} node (in '{self.func_name}')"
        )

    # -- leaves --------------------------------------------------------------------------
    def visit_Var(self, v: E.Var) -> ir.Value:
        value = self.state.vars.get(v)
        if value is None:
            raise InternalError(f"variable '{v.name}' is used in '{self.func_name}' but not bound")
        return value

    def visit_IntImm(self, e: E.IntImm) -> ir.Value:
        value = e.value
        if dt.is_sub_byte_int(e.dtype):  # an i4 constant is written as its signed value
            value = ((value & 15) ^ 8) - 8
        return ir.Constant(reg_type(e.dtype), value)

    def visit_FloatImm(self, e: E.FloatImm) -> ir.Value:
        base = dt.element_of(e.dtype)
        value = e.value
        with np.errstate(over="ignore"):  # out of range: infinity, as a cast would give
            if base == "float16":
                value = float(np.float16(value))
            elif base == "float32":
                value = float(np.float32(value))
            elif base == "bfloat16":
                value = round_constant_to_bfloat16(float(np.float32(value)))
        return ir.Constant(reg_type(e.dtype), value)

    # -- arithmetic ----------------------------------------------------------------------
    def operands(self, a: E.PrimExpr, b: E.PrimExpr) -> tuple[ir.Value, ir.Value]:
        """``a`` and ``b`` emitted, the one with fewer lanes splatted to the other's."""
        x, y = self.visit(a), self.visit(b)
        lanes = max(dt.lanes_of(a.dtype), dt.lanes_of(b.dtype))
        if dt.lanes_of(a.dtype) < lanes:
            x = splat(self.builder, x, lanes)
        if dt.lanes_of(b.dtype) < lanes:
            y = splat(self.builder, y, lanes)
        return x, y

    def _fmuladd(self, e: E.BinOp) -> ir.Value | None:
        """``a*b + c`` on float32/64/16 as ``llvm.fmuladd`` (contractable multiply-add)."""
        if e.op is not E.BinaryOp.ADD or not dt.is_float(e.dtype):
            return None
        if dt.element_of(e.dtype) == "bfloat16":
            return None
        for prod, addend in ((e.a, e.b), (e.b, e.a)):
            if isinstance(prod, E.BinOp) and prod.op is E.BinaryOp.MUL and prod.dtype == e.dtype:
                if addend.dtype != e.dtype:
                    continue
                x, y = self.operands(prod.a, prod.b)
                z = self.visit(addend)
                fn = declare_intrinsic(self.module, "llvm.fmuladd", x.type, 3)
                return self.builder.call(fn, [x, y, z], fastmath=self.fast)
        return None

    def visit_BinOp(self, e: E.BinOp) -> ir.Value:
        fused = self._fmuladd(e)
        if fused is not None:
            return fused
        x, y = self.operands(e.a, e.b)
        out = arith.emit_binary(self.builder, e.op, x, y, e.a.dtype, self.fast)
        if dt.element_of(e.dtype) == "bfloat16" and e.op in _ROUNDED_OPS:
            out = round_to_bfloat16(self.builder, out)
        return out

    def visit_Compare(self, e: E.Compare) -> ir.Value:
        x, y = self.operands(e.a, e.b)
        return arith.emit_compare(self.builder, e.op, x, y, e.a.dtype, self.fast)

    def visit_Not(self, e: E.Not) -> ir.Value:
        return self.builder.not_(self.visit(e.a))

    def visit_Select(self, e: E.Select) -> ir.Value:
        cond = self.visit(e.cond)
        t, f = self.operands(e.true_value, e.false_value)
        return self.builder.select(cond, t, f)

    def visit_Cast(self, e: E.Cast) -> ir.Value:
        return emit_cast(self.builder, self.visit(e.value), e.value.dtype, e.dtype)

    def visit_Call(self, e: E.Call) -> ir.Value:
        return emit_call(self, e)

    def visit_Ramp(self, e: E.Ramp) -> ir.Value:
        b = self.builder
        base = splat(b, self.visit(e.base), e.lanes)
        stride = splat(b, self.visit(e.stride), e.lanes)
        elem = reg_type(dt.element_of(e.dtype))
        return b.add(base, b.mul(stride, iota(elem, e.lanes)))

    def visit_Broadcast(self, e: E.Broadcast) -> ir.Value:
        return splat(self.builder, self.visit(e.value), e.lanes)

    def visit_Let(self, e: E.Let) -> ir.Value:
        with self.bind(e.var, self.visit(e.value)):
            return self.visit(e.body)

    def visit_BufferLoad(self, e: E.BufferLoad) -> ir.Value:
        return memory.emit_load(self, e)

    def visit_ProducerLoad(self, e: E.ProducerLoad) -> ir.Value:
        raise InternalError(
            f"a tensor-expression read survived lowering in '{self.func_name}'; "
            "schedule lowering should have replaced it by a buffer load"
        )

    def visit_Reduce(self, e: E.Reduce) -> ir.Value:
        raise InternalError(f"a Reduce node survived lowering in '{self.func_name}'")

    # -- statements ----------------------------------------------------------------------
    def visit_BufferStore(self, s: S.BufferStore) -> None:
        memory.emit_store(self, s)

    def visit_SeqStmt(self, s: S.SeqStmt) -> None:
        for stmt in s.stmts:
            self.visit(stmt)

    def visit_For(self, s: S.For) -> None:
        if s.kind is S.ForKind.THREAD_BINDING:
            raise LoweringError(
                f"loop '{s.loop_var.name}' in '{self.func_name}' is bound to GPU thread axis "
                f"'{s.thread_tag}', which the CPU target 'llvm' cannot run; build for 'cuda'"
            )
        if s.kind is S.ForKind.PARALLEL and not self.state.in_parallel and not runs_serially(s):
            emit_parallel_for(self, s)
            return
        b = self.builder
        start = emit_cast(b, self.visit(s.min), s.min.dtype, s.loop_var.dtype)
        extent = emit_cast(b, self.visit(s.extent), s.extent.dtype, s.loop_var.dtype)
        stop = b.add(start, extent, flags=["nsw"])
        hints = loop_hints(s, self.serial_reductions)
        with for_range(b, start, stop, name=s.loop_var.name, hints=hints) as index:
            with self.bind(s.loop_var, index):
                self.visit(s.body)

    def visit_IfThenElse(self, s: S.IfThenElse) -> None:
        cond = self.visit(s.condition)
        c = s.condition
        likely = True if isinstance(c, E.Call) and c.op is E.Intrinsic.LIKELY else None
        b = self.builder
        if s.else_case is None:
            with b.if_then(cond, likely=likely):
                self.visit(s.then_case)
            return
        with b.if_else(cond, likely=likely) as (then, otherwise):
            with then:
                self.visit(s.then_case)
            with otherwise:
                self.visit(s.else_case)

    def visit_LetStmt(self, s: S.LetStmt) -> None:
        with self.bind(s.var, self.visit(s.value)):
            self.visit(s.body)

    def visit_Allocate(self, s: S.Allocate) -> None:
        memory.emit_allocate(self, s)

    def visit_AttrStmt(self, s: S.AttrStmt) -> None:
        # ``nontemporal_stores``: the vector stores of the body to the buffer whose data var
        # is ``s.node`` bypass the caches (memory.py), and a fence after the body orders
        # them before whatever runs next (a thread pool's plain-store handoff would not);
        # other keys are facts for other passes.
        if s.key != NONTEMPORAL:
            self.visit(s.body)
            return
        marked = self.state.nontemporal
        fresh = s.node not in marked
        marked.add(s.node)
        try:
            self.visit(s.body)
        finally:
            if fresh:
                marked.discard(s.node)
        self.builder.fence("seq_cst")

    def visit_AssertStmt(self, s: S.AssertStmt) -> None:
        cond = self.visit(s.condition)
        self.errors.append(s.message)
        code = ir.Constant(I32, len(self.errors))
        with self.builder.if_then(self.builder.not_(cond), likely=False):
            self.emit_error_return(code)
        self.visit(s.body)

    def visit_Evaluate(self, s: S.Evaluate) -> None:
        if not isinstance(s.value, (E.IntImm, E.FloatImm)):
            self.visit(s.value)

    def visit_Barrier(self, s: S.Barrier) -> None:
        return None  # one CPU thread runs a whole block: nothing to wait for


def codegen_module(
    funcs: Sequence[S.PrimFunc],
    fast_math: bool = False,
    name: str = "ember",
    symbols: Sequence[str] | None = None,
    noalias: bool = True,
    cpu: CpuFacts | None = None,
) -> tuple[ir.Module, list[FunctionInfo]]:
    """Emit every PrimFunc into one LLVM module (under ``symbols`` if given); ``noalias``
    marks buffer arguments as not overlapping; ``cpu`` is the target's (None: the host's)."""
    module = ir.Module(name=name)
    cg = CodeGenLLVM(module, fast_math=fast_math, noalias=noalias, cpu=cpu)
    names = list(symbols) if symbols is not None else [function_symbol(f) for f in funcs]
    infos = [cg.add_function(f, s) for f, s in zip(funcs, names)]
    return module, infos


__all__ = [
    "NUM_THREADS_GLOBAL",
    "CodeGenLLVM",
    "FunctionInfo",
    "FunctionState",
    "codegen_module",
    "for_range",
    "function_symbol",
]
