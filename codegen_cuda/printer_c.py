"""A C-family printer for device TIR: expressions with precedence, statements, stable names.

It sits at the end of the CUDA path: ``split_host_device`` hands it kernels, and
:mod:`ember.codegen_cuda.printer_cuda` subclasses it with CUDA's facts (type names,
intrinsics, thread indices, barriers, storage scopes). This base class knows C:
operator precedence, the shape of ``for``/``if`` blocks, hoisting of ``Let``
expressions into declarations, and how a vector value is printed lane by lane.
Names are deterministic and keep the TIR names (``i_outer``); a clash gets a
numeric suffix (:mod:`.c_syntax` holds the names and the precedence tables).
Everything target-specific is a hook method.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from ember.codegen_cuda.c_syntax import (  # noqa: F401 - re-exported: the printer's names
    ADD,
    BINARY_SYNTAX,
    C_KEYWORDS,
    COMPARE_SYNTAX,
    COND,
    EQ,
    LAND,
    LOR,
    MUL,
    PRIMARY,
    REL,
    UNARY,
    NameTable,
    Text,
)
from ember.errors import InternalError
from ember.tir import dtype as dt
from ember.tir import expr as E
from ember.tir import stmt as S
from ember.tir.arith import Analyzer
from ember.tir.buffer import Buffer
from ember.tir.functor import contains
from ember.tir.shared_subexprs import shared_subexpressions


class CPrinter:
    """Prints one function; subclasses supply the target hooks marked below."""

    indent_unit = "  "
    reserved: frozenset[str] = C_KEYWORDS

    def __init__(self) -> None:
        self.lines: list[str] = []
        self.depth = 0
        self.names = NameTable(self.reserved)
        self.ana = Analyzer()
        self._pending: list[str] = []  # declarations hoisted out of the current statement
        self._hoisted: dict[int, str] = {}  # vector loads already hoisted in this statement
        self._vector_vars: set[E.Var] = set()
        self._declared_dtype: dict[E.Var, str] = {}  # element type each pointer was declared
        self._printing = 0  # depth of expressions being printed: 0 at a statement's roots
        self._shared: dict[int, E.PrimExpr] = {}  # nodes this statement binds once (by id)
        self._bound: dict[tuple[int, int | None], str] = {}  # (node, lane) -> its variable

    # -- hooks (override per target) --------------------------------------------------
    def type_name(self, dtype: str) -> str:
        raise NotImplementedError

    def print_literal(self, e: E.IntImm | E.FloatImm) -> Text:
        raise NotImplementedError

    def print_cast(self, to: str, value: E.PrimExpr, lane: int | None) -> Text:
        return f"({self.type_name(to)}){self.wrap(self.print(value, lane), UNARY)}", UNARY

    def print_call(self, e: E.Call, lane: int | None) -> Text:
        raise NotImplementedError

    def print_special_binop(self, e: E.BinOp, lane: int | None) -> Text:
        """MIN, MAX and the division family; the base class knows no target helpers."""
        raise NotImplementedError

    def print_thread_loop(self, s: S.For) -> None:
        raise NotImplementedError

    def print_allocate(self, s: S.Allocate) -> None:
        raise NotImplementedError

    def print_barrier(self, s: S.Barrier) -> None:
        raise NotImplementedError

    def print_vector_load(self, e: E.BufferLoad, lane: int) -> Text | None:
        """A lane of a whole-vector load, or None to load lane by lane."""
        return None

    def print_vector_store(self, s: S.BufferStore) -> bool:
        """Emit a whole-vector store and return True, or False to store lane by lane."""
        return False

    # -- output -----------------------------------------------------------------------
    def line(self, text: str) -> None:
        """Emit one line, after the declarations its expressions hoisted."""
        pending, self._pending = self._pending, []
        self._hoisted = {}
        self._shared, self._bound = {}, {}
        for p in pending:
            self.lines.append(self.indent_unit * self.depth + p)
        self.lines.append(self.indent_unit * self.depth + text if text else "")

    def hoist(self, decl: str) -> None:
        self._pending.append(decl)

    @contextmanager
    def block(self, head: str, tail: str = "}") -> Iterator[None]:
        self.line(f"{head} {{" if head else "{")
        self.depth += 1
        with self.ana.scope():
            yield
        self.depth -= 1
        self.line(tail)

    def source(self) -> str:
        return "\n".join(self.lines) + "\n"

    # -- expressions ------------------------------------------------------------------
    @staticmethod
    def wrap(text: Text, prec: int) -> str:
        """``text`` parenthesised unless it binds at least as tightly as ``prec``."""
        s, p = text
        return s if p >= prec else f"({s})"

    def expr(self, e: E.PrimExpr, lane: int | None = None) -> str:
        return self.print(e, lane)[0]

    def print(self, e: E.PrimExpr, lane: int | None = None) -> Text:
        if lane is None and dt.lanes_of(e.dtype) > 1:
            raise InternalError(
                f"vector value {e!r} ({e.dtype}) reached the CUDA printer outside a vector "
                "store; the 'vectorize_loops' pass should have kept it in one"
            )
        method: Callable[[Any, int | None], Text] | None = getattr(
            self, "expr_" + type(e).__name__, None
        )
        if method is None:
            raise InternalError(
                f"{type(e).__name__} cannot be printed as C; lowering should have removed it"
            )
        if self._printing == 0:
            self._shared.update(shared_subexpressions(e))
        bound = self._bound.get((id(e), lane))
        if bound is not None:
            return bound, PRIMARY
        self._printing += 1
        try:
            text = method(e, lane)
        finally:
            self._printing -= 1
        if id(e) not in self._shared:
            return text
        name = self.names.fresh("shared")
        self.hoist(f"{self.type_name(dt.element_of(e.dtype))} {name} = {text[0]};")
        self._bound[(id(e), lane)] = name
        return name, PRIMARY

    def expr_Var(self, e: E.Var, lane: int | None) -> Text:
        name = self.names.get(e)
        if name is None:
            raise InternalError(
                f"variable '{e.name}' is used in a kernel but bound nowhere in it; "
                "'split_host_device' should pass it as a parameter"
            )
        return (f"{name}[{lane}]" if e in self._vector_vars else name), PRIMARY

    def expr_SizeVar(self, e: E.Var, lane: int | None) -> Text:
        return self.expr_Var(e, lane)

    def expr_IntImm(self, e: E.IntImm, lane: int | None) -> Text:
        return self.print_literal(e)

    def expr_FloatImm(self, e: E.FloatImm, lane: int | None) -> Text:
        return self.print_literal(e)

    def binary(self, op: str, prec: int, a: E.PrimExpr, b: E.PrimExpr, lane: int | None) -> Text:
        # left-associative: the right operand needs parentheses at equal precedence
        left = self.wrap(self.print(a, lane), prec)
        right = self.wrap(self.print(b, lane), prec + 1)
        return f"{left} {op} {right}", prec

    def expr_BinOp(self, e: E.BinOp, lane: int | None) -> Text:
        syntax = BINARY_SYNTAX.get(e.op)
        if syntax is None:
            return self.print_special_binop(e, lane)
        op, prec = syntax
        if e.op is E.BinaryOp.AND and isinstance(e.a, E.BinOp) and e.a.op is E.BinaryOp.OR:
            prec = LOR + 1  # keep a || b inside && visibly parenthesised
        return self.binary(op, prec, e.a, e.b, lane)

    def expr_Compare(self, e: E.Compare, lane: int | None) -> Text:
        op, prec = COMPARE_SYNTAX[e.op]
        return self.binary(op, prec, e.a, e.b, lane)

    def expr_Not(self, e: E.Not, lane: int | None) -> Text:
        return "!" + self.wrap(self.print(e.a, lane), UNARY), UNARY

    def expr_Select(self, e: E.Select, lane: int | None) -> Text:
        cond = self.wrap(self.print(e.cond, lane), UNARY)  # (a < b) ? ..., for the reader
        a = self.wrap(self.print(e.true_value, lane), COND + 1)
        b = self.wrap(self.print(e.false_value, lane), COND)
        return f"{cond} ? {a} : {b}", COND

    def expr_Cast(self, e: E.Cast, lane: int | None) -> Text:
        return self.print_cast(dt.element_of(e.dtype), e.value, lane)

    def expr_Call(self, e: E.Call, lane: int | None) -> Text:
        return self.print_call(e, lane)

    def expr_Ramp(self, e: E.Ramp, lane: int | None) -> Text:
        assert lane is not None
        if lane == 0:
            return self.print(e.base)
        if isinstance(e.stride, E.IntImm):
            offset = e.stride.value * lane
            base = self.wrap(self.print(e.base), ADD)
            return (f"{base} + {offset}" if offset >= 0 else f"{base} - {-offset}"), ADD
        return self.binary("+", ADD, e.base, e.stride * lane, None)

    def expr_Broadcast(self, e: E.Broadcast, lane: int | None) -> Text:
        return self.print(e.value)

    def expr_Let(self, e: E.Let, lane: int | None) -> Text:
        if id(e) not in self._hoisted:  # printed once per lane, declared once
            self.declare(e.var, e.value, hoisted=True)
            self._hoisted[id(e)] = self.names.get(e.var) or ""
        return self.print(e.body, lane)

    def declare(self, var: E.Var, value: E.PrimExpr, hoisted: bool = False) -> None:
        """``T name = value;`` (a vector becomes a small array, one element per lane)."""
        lanes = dt.lanes_of(var.dtype)
        ctype = self.type_name(dt.element_of(var.dtype))
        values = [self.expr(value, k if lanes > 1 else None) for k in range(lanes)]
        name = self.names.bind(var, var.name)
        emit = self.hoist if hoisted else self.line
        if lanes > 1:
            self._vector_vars.add(var)
            emit(f"{ctype} {name}[{lanes}] = {{{', '.join(values)}}};")
        else:
            emit(f"{ctype} {name} = {values[0]};")
            if dt.is_int(var.dtype):
                self.learn_value(var, value)

    def learn_value(self, var: E.Var, value: E.PrimExpr) -> None:
        """Tell the analyzer what an integer variable holds: its value where that is
        index arithmetic, only its bounds where it reads memory. A loaded value simplifies
        nothing, and the analyzer substitutes known values into later ones, so a chain
        of lookups each indexed by the last (a decision-tree walk) would grow without end."""
        if not contains(value, lambda n: isinstance(n, E.BufferLoad)):
            self.learn(var, value)
            return
        try:
            lo, hi = self.ana.const_int_bound(value)
        except Exception:  # noqa: BLE001 - an analysis gap only costs a simpler text
            return
        if math.isfinite(lo) and math.isfinite(hi):
            extent = E.const(int(hi - lo + 1), var.dtype)
            self.learn(var, E.Range(E.const(int(lo), var.dtype), extent))

    def buffer_ref(self, buf: Buffer) -> str:
        """The pointer or array name of ``buf`` (buffers sharing ``data`` share storage)."""
        name = self.names.get(buf.data)
        if name is None:
            raise InternalError(
                f"buffer '{buf.name}' is accessed in a kernel but is neither a parameter nor "
                "allocated in it; 'split_host_device' should have made it a parameter"
            )
        declared = self._declared_dtype.get(buf.data, buf.dtype)
        if dt.element_of(declared) != dt.element_of(buf.dtype):
            return f"(({self.type_name(dt.element_of(buf.dtype))}*){name})"
        return name

    def flat_index(self, buf: Buffer, indices: tuple[E.PrimExpr, ...]) -> E.PrimExpr:
        if len(indices) != 1:
            raise InternalError(
                f"access to '{buf.name}' has {len(indices)} indices; 'flatten_buffers' "
                "should have left one"
            )
        (index,) = indices
        if buf.elem_offset is not None and not E.is_const_int(buf.elem_offset, 0):
            index = index + buf.elem_offset
        return index

    def expr_BufferLoad(self, e: E.BufferLoad, lane: int | None) -> Text:
        index = self.flat_index(e.buffer, e.indices)
        if lane is not None and dt.lanes_of(index.dtype) > 1:
            whole = self.print_vector_load(e, lane)
            if whole is not None:
                return whole
        return f"{self.buffer_ref(e.buffer)}[{self.expr(index, lane)}]", PRIMARY

    # -- statements -------------------------------------------------------------------
    def stmt(self, s: S.Stmt) -> None:
        method = getattr(self, "stmt_" + type(s).__name__, None)
        if method is None:
            raise InternalError(f"{type(s).__name__} cannot be printed as C")
        method(s)

    def stmt_SeqStmt(self, s: S.SeqStmt) -> None:
        for child in s.stmts:
            self.stmt(child)

    def stmt_BufferStore(self, s: S.BufferStore) -> None:
        index = self.flat_index(s.buffer, s.indices)
        lanes = max(dt.lanes_of(s.value.dtype), dt.lanes_of(index.dtype))
        if lanes == 1:
            value = self.expr(s.value)
            self.line(f"{self.buffer_ref(s.buffer)}[{self.expr(index)}] = {value};")
            return
        if self.print_vector_store(s):
            return
        # lane by lane: all lanes are read before any is written, as a vector store would
        ctype = self.type_name(dt.element_of(s.value.dtype))
        with self.block(""):
            tmp = self.names.fresh("lanes")
            values = [self.expr(s.value, k) for k in range(lanes)]
            self.line(f"{ctype} {tmp}[{lanes}] = {{{', '.join(values)}}};")
            ref = self.buffer_ref(s.buffer)
            for k in range(lanes):
                self.line(f"{ref}[{self.expr(index, k)}] = {tmp}[{k}];")

    def stmt_Evaluate(self, s: S.Evaluate) -> None:
        if isinstance(s.value, (E.IntImm, E.FloatImm)):
            return
        self.line(f"{self.expr(s.value)};")

    def stmt_IfThenElse(self, s: S.IfThenElse) -> None:
        cond = self.expr(s.condition)
        self.line(f"if ({cond}) {{")
        self.depth += 1
        with self.ana.constraint(s.condition):
            self.stmt(s.then_case)
        self.depth -= 1
        if s.else_case is None:
            self.line("}")
            return
        self.line("} else {")
        self.depth += 1
        with self.ana.scope():
            self.stmt(s.else_case)
        self.depth -= 1
        self.line("}")

    def stmt_LetStmt(self, s: S.LetStmt) -> None:
        self.declare(s.var, s.value)
        self.stmt(s.body)

    def stmt_AttrStmt(self, s: S.AttrStmt) -> None:
        self.stmt(s.body)

    def stmt_AssertStmt(self, s: S.AssertStmt) -> None:
        cond = self.expr(s.condition)
        message = s.message.replace("*/", "* /")
        self.line(f"if (!({cond})) {{ __trap(); }}  /* {message} */")
        self.stmt(s.body)

    def stmt_Barrier(self, s: S.Barrier) -> None:
        self.print_barrier(s)

    def stmt_Allocate(self, s: S.Allocate) -> None:
        self.print_allocate(s)

    def stmt_For(self, s: S.For) -> None:
        if s.kind is S.ForKind.THREAD_BINDING:
            self.print_thread_loop(s)
            return
        if s.kind is S.ForKind.PARALLEL:
            raise InternalError(
                f"parallel loop '{s.loop_var.name}' in a GPU kernel; bind it to a thread axis "
                "('split_host_device' expects only thread-bound parallelism)"
            )
        lo, ext = self.expr(s.min), s.extent
        end = ext if E.is_const_int(s.min, 0) else s.min + ext
        end_text = self.wrap(self.print(end), REL + 1)
        ctype = self.type_name(s.loop_var.dtype)
        if s.kind in (S.ForKind.UNROLLED, S.ForKind.VECTORIZED):
            self.line("#pragma unroll")
        name = self.names.bind(s.loop_var, s.loop_var.name)
        with self.block(f"for ({ctype} {name} = {lo}; {name} < {end_text}; ++{name})"):
            self.learn(s.loop_var, E.Range(s.min, s.extent))
            self.stmt(s.body)

    # -- analysis helpers -------------------------------------------------------------
    def learn(self, var: E.Var, value: E.Range | E.PrimExpr) -> None:
        """Tell the analyzer a variable's range or value; it only makes the text simpler."""
        try:
            self.ana.bind(var, value)
        except Exception:  # noqa: BLE001 - what it cannot use it need not know
            pass

    def nonnegative(self, e: E.PrimExpr) -> bool:
        if not dt.is_int(e.dtype) or dt.lanes_of(e.dtype) > 1:
            return False
        try:
            return self.ana.const_int_bound(e)[0] >= 0
        except Exception:  # noqa: BLE001 - an analysis gap only costs a helper call
            return False

    def positive(self, e: E.PrimExpr) -> bool:
        if not dt.is_int(e.dtype) or dt.lanes_of(e.dtype) > 1:
            return False
        try:
            return self.ana.const_int_bound(e)[0] > 0
        except Exception:  # noqa: BLE001
            return False

    def divisible(self, e: E.PrimExpr, factor: int) -> bool:
        """Whether ``e`` is provably a multiple of ``factor``."""
        if factor == 1:
            return True
        try:
            rem = self.ana.simplify(E.floormod(e, factor))
        except Exception:  # noqa: BLE001
            return False
        return E.is_const_int(rem, 0)


__all__ = ["CPrinter", "NameTable", "Text"]
