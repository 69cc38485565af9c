"""A small builder for writing TIR by hand: Before/Expected IR in pass tests, and small kernels.

Statements are emitted in order into the innermost open block; ``with`` blocks
open loops and branches::

    ib = IRBuilder()
    A = ib.param((16, 16), "float32", name="A")
    with ib.for_range(0, 16, name="i") as i:
        with ib.for_range(0, 16, name="j", kind="vectorized") as j:
            ib.store(A, (i, j), A[i, j] * 2.0)
        with ib.if_then_else(i < 4):
            ib.store(A, (i, 0), 0.0)
        with ib.else_():
            ib.store(A, (i, 0), 1.0)
    func = ib.get_func("f")

``allocate``, ``let`` and ``assert_`` scope over the statements emitted after
them in the same block, the way the IR nests them. The result is ordinary
immutable TIR; the builder only saves writing the nesting by hand.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any

from ember.errors import ArgumentError
from ember.tir import stmt as S
from ember.tir.buffer import Buffer, decl_buffer
from ember.tir.expr import ExprLike, PrimExpr, Var, convert, is_const_int
from ember.tir.expr import const as make_const

_KINDS = {k.value: k for k in S.ForKind} | {k.name.lower(): k for k in S.ForKind}
_KINDS["unrolled"] = S.ForKind.UNROLLED

# An item of a block: a statement, or a wrapper that encloses everything emitted after it.
_Item = S.Stmt | Callable[[S.Stmt], S.Stmt]


def _index_tuple(indices: ExprLike | Sequence[ExprLike]) -> tuple[PrimExpr, ...]:
    if isinstance(indices, Sequence):
        return tuple(convert(i) for i in indices)
    return (convert(indices),)


class IRBuilder:
    """Builds TIR imperatively with ``with`` blocks, for hand-written kernels and tests."""

    def __init__(self) -> None:
        self._blocks: list[list[_Item]] = [[]]
        self._params: list[Buffer] = []

    # -- buffers -------------------------------------------------------------------
    def buffer(
        self,
        shape: Sequence[ExprLike],
        dtype: str = "float32",
        name: str = "buf",
        scope: str = "global",
        strides: Sequence[ExprLike] = (),
    ) -> Buffer:
        """Declare a buffer (not a parameter unless passed to ``get_func``)."""
        return decl_buffer(tuple(shape), dtype, name=name, scope=scope, strides=tuple(strides))

    def param(
        self,
        shape: Sequence[ExprLike],
        dtype: str = "float32",
        name: str = "buf",
        strides: Sequence[ExprLike] = (),
    ) -> Buffer:
        """Declare a buffer that becomes the next parameter of ``get_func``."""
        buf = self.buffer(shape, dtype, name=name, strides=strides)
        self._params.append(buf)
        return buf

    def allocate(
        self,
        shape: Sequence[ExprLike],
        dtype: str = "float32",
        scope: str = "local",
        name: str = "scratch",
    ) -> Buffer:
        """Allocate a buffer live for the rest of the current block."""
        buf = decl_buffer(tuple(shape), dtype, name=name, scope=scope)
        self._blocks[-1].append(lambda body: S.Allocate(buf, body))
        return buf

    # -- statements ----------------------------------------------------------------------
    def emit(self, stmt: S.Stmt | PrimExpr) -> None:
        """Append a statement; an expression (a ``call_extern``) is evaluated, as in TVM."""
        if isinstance(stmt, PrimExpr):
            stmt = S.Evaluate(stmt)
        if not isinstance(stmt, S.Stmt):
            raise ArgumentError(f"emit() takes a statement, got {type(stmt).__name__}")
        self._blocks[-1].append(stmt)

    def store(self, buf: Buffer, indices: ExprLike | Sequence[ExprLike], value: ExprLike) -> None:
        """``buf[indices] = value``; a Python number becomes a constant of the buffer's dtype."""
        v = value if isinstance(value, PrimExpr) else make_const(value, buf.dtype)
        self.emit(S.BufferStore(buf, v, _index_tuple(indices)))

    def evaluate(self, value: ExprLike) -> None:
        self.emit(S.Evaluate(convert(value)))

    def barrier(self, scope: str = "shared") -> None:
        self.emit(S.Barrier(scope))

    def let(self, name: str | Var, value: ExprLike) -> Var:
        """Bind a variable for the rest of the current block; returns it."""
        v_value = convert(value)
        var = name if isinstance(name, Var) else Var(name, v_value.dtype)
        self._blocks[-1].append(lambda body: S.LetStmt(var, v_value, body))
        return var

    def assert_(self, condition: ExprLike, message: str) -> None:
        """Check ``condition`` before the rest of the current block runs."""
        cond = convert(condition)
        self._blocks[-1].append(lambda body: S.AssertStmt(cond, message, body))

    # -- blocks ---------------------------------------------------------------------------
    @contextmanager
    def _block(self) -> Iterator[list[_Item]]:
        self._blocks.append([])
        try:
            yield self._blocks[-1]
        finally:
            self._blocks.pop()

    @contextmanager
    def for_range(
        self,
        begin: ExprLike,
        end: ExprLike,
        name: str = "i",
        kind: str | S.ForKind = "serial",
        dtype: str = "int32",
        thread_tag: str = "",
        annotations: tuple[tuple[str, Any], ...] = (),
    ) -> Iterator[Var]:
        """A loop ``for name in range(begin, end)``; yields the loop variable."""
        for_kind = kind if isinstance(kind, S.ForKind) else _KINDS.get(kind)
        if for_kind is None:
            raise ArgumentError(f"unknown loop kind {kind!r}; expected one of {sorted(_KINDS)}")
        var = Var(name, dtype)
        lo, hi = convert(begin, dtype), convert(end, dtype)
        with self._block() as items:
            yield var
        body = _build(items)
        extent = hi if is_const_int(lo, 0) else hi - lo
        self.emit(S.For(var, lo, extent, for_kind, body, thread_tag, annotations))

    @contextmanager
    def if_then_else(self, condition: ExprLike) -> Iterator[None]:
        """``if condition:`` — follow with ``with ib.else_():`` for an else branch."""
        cond = convert(condition)
        with self._block() as items:
            yield
        self.emit(S.IfThenElse(cond, _build(items)))

    @contextmanager
    def else_(self) -> Iterator[None]:
        """The else branch of the ``if_then_else`` block just closed."""
        block = self._blocks[-1]
        last = block[-1] if block else None
        if not isinstance(last, S.IfThenElse) or last.else_case is not None:
            raise ArgumentError("else_() must directly follow an if_then_else() block")
        with self._block() as items:
            yield
        block[-1] = S.IfThenElse(last.condition, last.then_case, _build(items))

    @contextmanager
    def attr(self, node: Any, key: str, value: ExprLike) -> Iterator[None]:
        """An ``AttrStmt`` around the statements of the block."""
        with self._block() as items:
            yield
        self.emit(S.AttrStmt(node, key, convert(value), _build(items)))

    # -- results -------------------------------------------------------------------------
    def get(self) -> S.Stmt:
        """The statement built so far (the outermost block)."""
        if len(self._blocks) != 1:
            raise ArgumentError("get() called inside an open with-block")
        return _build(self._blocks[0])

    def get_func(
        self,
        name: str = "main",
        params: Sequence[Buffer] | None = None,
        attrs: tuple[tuple[str, Any], ...] = (),
    ) -> S.PrimFunc:
        """A PrimFunc of the built body; ``params`` default to the ``param()`` buffers."""
        chosen = tuple(self._params if params is None else params)
        return S.PrimFunc(name, chosen, self.get(), attrs)


def _build(items: list[_Item]) -> S.Stmt:
    """Nest the block's items: a wrapper encloses everything after it."""
    stmts: list[S.Stmt] = []
    for item in reversed(items):
        if isinstance(item, S.Stmt):
            stmts.append(item)
        else:
            body = S.seq(*reversed(stmts)) if stmts else S.no_op()
            stmts = [item(body)]
    return S.seq(*reversed(stmts)) if stmts else S.no_op()


def create() -> IRBuilder:
    """TVM's ``tvm.tir.ir_builder.create()``: a new builder."""
    return IRBuilder()


__all__ = ["IRBuilder", "create"]
