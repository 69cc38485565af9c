"""Readable text for TIR: what ``ember.lower`` prints and what bug reports quote.

The format reads like TVMScript: ``for i in range(0, 128):`` with the loop kind
as a decorator-like prefix, ``C[i, j] = ...`` for stores, ``alloc`` for
allocations. Variable names are printed as the user gave them; two distinct
variables that share a name are told apart with a numeric suffix, so the text
stays unambiguous.

An expression whose tree is very large and reads a subexpression more than once (a fused
chain of ops that each read their input twice is a DAG whose tree doubles per op) prints
each such subexpression once, as ``shared = ...`` on a line of its own above the
statement (or expression) that reads it (:mod:`ember.tir.shared_subexprs`); printed as a
tree, a 16-op chain did not print in a minute. TVM prints the tree; ordinary expressions
print as it does.

``repr`` of any node is this module's text: it registers :func:`node_to_str` with
:mod:`ember.tir.node` when imported (``ember.tir`` imports it), since the node modules
sit below the printer and cannot import it.
"""

from __future__ import annotations

from ember.tir import expr as E
from ember.tir import stmt as S
from ember.tir.buffer import Buffer
from ember.tir.functor import Visitor
from ember.tir.node import set_printer
from ember.tir.shared_subexprs import shared_subexpressions

_PREC = {
    E.BinaryOp.OR: 1,
    E.BinaryOp.AND: 2,
    E.BinaryOp.ADD: 4,
    E.BinaryOp.SUB: 4,
    E.BinaryOp.MUL: 5,
    E.BinaryOp.DIV: 5,
    E.BinaryOp.FLOORDIV: 5,
    E.BinaryOp.FLOORMOD: 5,
}
_CMP_PREC = 3


class _Names:
    """Stable, unique display names for variables and buffers."""

    def __init__(self) -> None:
        self.names: dict[int, str] = {}
        self.used: set[str] = set()

    def get(self, obj: object, hint: str) -> str:
        key = id(obj)
        if key not in self.names:
            name, n = hint or "v", 1
            while name in self.used:
                name = f"{hint}_{n}"
                n += 1
            self.used.add(name)
            self.names[key] = name
        return self.names[key]


class TIRPrinter(Visitor):
    """Renders TIR as readable Python-like text for dumps, reprs and test diffs."""

    def __init__(self) -> None:
        self.names = _Names()
        self.lines: list[str] = []
        self.indent = 0
        self._keep: list[object] = []  # keep printed objects alive so ids stay unique
        self._depth = 0  # expressions being printed: 0 between top-level ones
        self._shared: dict[int, E.PrimExpr] = {}  # of the top-level expression printed
        self._bound: dict[int, str] = {}  # shared subexpressions printed, by id: names

    # -- expressions return strings -------------------------------------------------
    def expr(self, e: E.PrimExpr, prec: int = 0) -> str:
        if self._depth == 0:
            self._shared, self._bound = shared_subexpressions(e), {}
        name = self._bound.get(id(e))
        if name is not None:
            return name
        self._depth += 1
        try:
            text, p = self._expr(e)
        finally:
            self._depth -= 1
        if id(e) in self._shared:
            key = object()  # a fresh name: each binding is its own
            self._keep.append(key)
            name = self.names.get(key, "shared")
            self.line(f"{name} = {text}")
            self._bound[id(e)] = name
            return name
        return f"({text})" if p < prec else text

    def _expr(self, e: E.PrimExpr) -> tuple[str, int]:
        if isinstance(e, E.Var):
            self._keep.append(e)
            return self.names.get(e, e.name), 10
        if isinstance(e, E.IntImm):
            if e.dtype == "bool":
                return ("True" if e.value else "False"), 10
            if e.dtype in ("int32",):
                return str(e.value), 10 if e.value >= 0 else 6
            return f"{e.dtype}({e.value})", 10
        if isinstance(e, E.FloatImm):
            return (f"{e.value!r}" if e.dtype == "float32" else f"{e.dtype}({e.value!r})"), 10
        if isinstance(e, E.StringImm):
            return repr(e.value), 10
        if isinstance(e, E.BinOp):
            if e.op in (E.BinaryOp.MIN, E.BinaryOp.MAX, E.BinaryOp.TRUNCDIV, E.BinaryOp.TRUNCMOD):
                return f"{e.op.value}({self.expr(e.a)}, {self.expr(e.b)})", 10
            p = _PREC[e.op]
            return f"{self.expr(e.a, p)} {e.op.value} {self.expr(e.b, p + 1)}", p
        if isinstance(e, E.Compare):
            p = _CMP_PREC
            return f"{self.expr(e.a, p + 1)} {e.op.value} {self.expr(e.b, p + 1)}", p
        if isinstance(e, E.Not):
            return f"not {self.expr(e.a, 6)}", 6
        if isinstance(e, E.Select):
            args = ", ".join(self.expr(x) for x in (e.cond, e.true_value, e.false_value))
            return f"select({args})", 10
        if isinstance(e, E.Cast):
            return f"{e.dtype}({self.expr(e.value)})", 10
        if isinstance(e, E.Call):
            return f"{e.op.value}({', '.join(self.expr(a) for a in e.args)})", 10
        if isinstance(e, E.Ramp):
            return f"ramp({self.expr(e.base)}, {self.expr(e.stride)}, {e.lanes})", 10
        if isinstance(e, E.Broadcast):
            return f"broadcast({self.expr(e.value)}, {e.lanes})", 10
        if isinstance(e, E.Let):
            name = self.expr(e.var)
            return f"let({name} = {self.expr(e.value)}, {self.expr(e.body)})", 10
        if isinstance(e, E.BufferLoad):
            return f"{self.buffer(e.buffer)}[{', '.join(self.expr(i) for i in e.indices)}]", 10
        if isinstance(e, E.ProducerLoad):
            name = getattr(e.producer, "name", "tensor")
            return f"{name}[{', '.join(self.expr(i) for i in e.indices)}]", 10
        if isinstance(e, E.Reduce):
            axes = ", ".join(self.expr(iv.var) for iv in e.axis)
            return f"reduce({e.combiner.name}, {self.expr(e.source)}, axis=[{axes}])", 10
        return f"<{type(e).__name__}>", 10

    def buffer(self, b: Buffer) -> str:
        self._keep.append(b)
        return self.names.get(b.data, b.name)  # a flattened view prints as its buffer

    # -- statements append lines ---------------------------------------------------------
    def line(self, text: str) -> None:
        self.lines.append("    " * self.indent + text)

    def body(self, s: S.Stmt) -> None:
        self.indent += 1
        self.visit(s)
        self.indent -= 1

    def visit_For(self, s: S.For) -> None:
        var = self.expr(s.loop_var)
        lo, ext = self.expr(s.min), self.expr(s.extent)
        rng = f"range({ext})" if E.is_const_int(s.min, 0) else f"range({lo}, {lo} + {ext})"
        if s.kind is S.ForKind.SERIAL:
            head = f"for {var} in {rng}:"
        elif s.kind is S.ForKind.THREAD_BINDING:
            head = f'for {var} in thread_binding({ext}, "{s.thread_tag}"):'
        else:
            head = f"for {var} in {s.kind.value}({rng[6:-1]}):"
        self.line(head)
        self.body(s.body)

    def visit_BufferStore(self, s: S.BufferStore) -> None:
        idx = ", ".join(self.expr(i) for i in s.indices)
        self.line(f"{self.buffer(s.buffer)}[{idx}] = {self.expr(s.value)}")

    def visit_SeqStmt(self, s: S.SeqStmt) -> None:
        if not s.stmts:
            self.line("pass")
        for st in s.stmts:
            self.visit(st)

    def visit_IfThenElse(self, s: S.IfThenElse) -> None:
        self.line(f"if {self.expr(s.condition)}:")
        self.body(s.then_case)
        if s.else_case is not None:
            self.line("else:")
            self.body(s.else_case)

    def visit_LetStmt(self, s: S.LetStmt) -> None:
        self.line(f"{self.expr(s.var)} = {self.expr(s.value)}")
        self.visit(s.body)

    def visit_Allocate(self, s: S.Allocate) -> None:
        b = s.buffer
        shape = ", ".join(self.expr(x) for x in b.shape)
        self.line(f'{self.buffer(b)} = alloc(({shape}), "{b.dtype}", scope="{b.scope}")')
        self.visit(s.body)

    def visit_AttrStmt(self, s: S.AttrStmt) -> None:
        node = s.node
        if isinstance(node, E.PrimExpr):
            target = self.expr(node)
        elif isinstance(node, Buffer):
            target = self.buffer(node)
        else:
            target = repr(node) if node is not None else ""
        self.line(f'with attr({target}, "{s.key}", {self.expr(s.value)}):')
        self.body(s.body)

    def visit_AssertStmt(self, s: S.AssertStmt) -> None:
        self.line(f"assert {self.expr(s.condition)}, {s.message!r}")
        self.visit(s.body)

    def visit_Evaluate(self, s: S.Evaluate) -> None:
        self.line(self.expr(s.value))

    def visit_Barrier(self, s: S.Barrier) -> None:
        self.line(f'barrier("{s.scope}")')

    def visit_AsyncCopy(self, s: S.AsyncCopy) -> None:
        st = s.store
        idx = ", ".join(self.expr(i) for i in st.indices)
        self.line(f"async_copy({self.buffer(st.buffer)}[{idx}], {self.expr(st.value)})")

    def visit_AsyncCommit(self, s: S.AsyncCommit) -> None:
        self.line("async_commit()")

    def visit_AsyncWait(self, s: S.AsyncWait) -> None:
        self.line(f"async_wait({s.pending})")

    def func(self, f: S.PrimFunc) -> str:
        params = []
        for b in f.params:
            if isinstance(b, E.Var):
                params.append(f"{self.expr(b)}: {b.dtype}")
                continue
            shape = ", ".join(self.expr(x) for x in b.shape)
            params.append(f'{self.buffer(b)}: Buffer(({shape}), "{b.dtype}")')
        self.line(f"def {f.name}({', '.join(params)}):")
        self.body(f.body)
        return "\n".join(self.lines)


def expr_to_str(e: E.PrimExpr) -> str:
    """One expression as text, the form ``repr`` of an expression shows (after the lines
    that name its shared subexpressions, where it has such)."""
    p = TIRPrinter()
    text = p.expr(e)
    return "\n".join([*p.lines, text])


def stmt_to_str(s: S.Stmt) -> str:
    """A statement as indented text, the form ``repr`` of a statement shows."""
    p = TIRPrinter()
    p.visit(s)
    return "\n".join(p.lines)


def func_to_str(f: S.PrimFunc) -> str:
    """A whole ``PrimFunc`` (parameters, buffers, body) as text, for pass dumps."""
    return TIRPrinter().func(f)


def node_to_str(node: E.PrimExpr | S.Stmt | S.PrimFunc) -> str:
    """A function, statement or expression as text: what ``repr`` of each shows."""
    if isinstance(node, S.PrimFunc):
        return func_to_str(node)
    if isinstance(node, S.Stmt):
        return stmt_to_str(node)
    return expr_to_str(node)


set_printer(node_to_str)
