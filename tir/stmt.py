"""Statement nodes of TIR, and ``PrimFunc``, the unit a code generator compiles.

Like expressions, statements are frozen, slotted dataclasses with identity
equality; children are nodes or tuples of nodes, never lists. ``For`` carries
how it runs (:class:`ForKind`) and, when bound to a GPU thread axis, the axis
name. ``AttrStmt`` carries facts a later pass needs (thread extents, pragmas).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ember.errors import ArgumentError
from ember.tir.buffer import Buffer
from ember.tir.expr import PrimExpr, Var, const, ir_node
from ember.tir.functor import free_vars
from ember.tir.node import IREnum, IRNode, to_text


class ForKind(IREnum):
    """How a loop runs: serially, in parallel, vectorized, unrolled or bound to a GPU axis."""

    SERIAL = "serial"
    PARALLEL = "parallel"
    VECTORIZED = "vectorized"
    UNROLLED = "unroll"
    THREAD_BINDING = "thread_binding"


class Stmt(IRNode):
    """Base of every statement; ``repr`` is the printer's text (see :mod:`ember.tir.node`)."""

    __slots__ = ()


@ir_node
class For(Stmt):
    """A loop of ``loop_var`` over ``[min, min + extent)``; its kind says how it runs."""

    loop_var: Var
    min: PrimExpr
    extent: PrimExpr
    kind: ForKind
    body: Stmt
    thread_tag: str = ""  # "blockIdx.x", "threadIdx.y", ... for THREAD_BINDING
    annotations: tuple[tuple[str, Any], ...] = ()

    def __post_init__(self) -> None:
        # TVM programs write ``tir.For(i, 0, 8, ...)``: plain ints become constants of the
        # loop variable's type
        for name in ("min", "extent"):
            value = getattr(self, name)
            if isinstance(value, int):
                object.__setattr__(self, name, const(value, self.loop_var.dtype))

    def annotation(self, key: str, default: Any = None) -> Any:
        for k, v in self.annotations:
            if k == key:
                return v
        return default


@ir_node
class BufferStore(Stmt):
    """A write of ``value`` to ``buffer`` at ``indices``, the only way TIR mutates memory."""

    buffer: Buffer
    value: PrimExpr
    indices: tuple[PrimExpr, ...]


@ir_node
class SeqStmt(Stmt):
    """Statements run in order; an empty one is the no-op."""

    stmts: tuple[Stmt, ...]


@ir_node
class IfThenElse(Stmt):
    """Run ``then_case`` when ``condition`` holds, else ``else_case`` (which may be absent)."""

    condition: PrimExpr
    then_case: Stmt
    else_case: Stmt | None = None


@ir_node
class LetStmt(Stmt):
    """Binds ``var`` to ``value`` for ``body``, so a value computed once is reused."""

    var: Var
    value: PrimExpr
    body: Stmt


@ir_node
class Allocate(Stmt):
    """Storage for ``buffer`` (its scope says where) for the extent of ``body``."""

    buffer: Buffer
    body: Stmt

    # TVM's fields of an Allocate, read from the buffer it allocates
    @property
    def extents(self) -> tuple[PrimExpr, ...]:
        return self.buffer.shape

    @property
    def buffer_var(self) -> Any:
        return self.buffer.data

    @property
    def dtype(self) -> str:
        return self.buffer.dtype


@ir_node
class AttrStmt(Stmt):
    """A fact about ``body``: ``key`` such as ``"thread_extent"`` or ``"pragma_unroll"``."""

    node: Any
    key: str
    value: PrimExpr
    body: Stmt


@ir_node
class AssertStmt(Stmt):
    """Checks ``condition`` at run time and fails with ``message`` before running ``body``."""

    condition: PrimExpr
    message: str
    body: Stmt


@ir_node
class Evaluate(Stmt):
    """Evaluate an expression for its effect (an intrinsic call such as a barrier)."""

    value: PrimExpr


@ir_node
class Barrier(Stmt):
    """A block-wide barrier (``__syncthreads()`` on CUDA); a no-op on the CPU."""

    scope: str = "shared"


@ir_node
class AsyncCopy(Stmt):
    """``store`` issued asynchronously (``cp.async`` on sm_80 and newer).

    The store's value is a load of global memory. The copy is in flight until an
    :class:`AsyncWait` of the issuing thread lets its group land: the destination
    must not be read before then, and other threads see it only after a barrier
    that follows the wait.
    """

    store: BufferStore


@ir_node
class AsyncCommit(Stmt):
    """Close the group of the asynchronous copies this thread issued since the last commit."""


@ir_node
class AsyncWait(Stmt):
    """Wait until at most ``pending`` of this thread's committed copy groups are in flight."""

    pending: int = 0


def no_op() -> Stmt:
    """The statement that does nothing, for passes that delete a statement."""
    return SeqStmt(())


def seq(*stmts: Stmt | None) -> Stmt:
    """A sequence with empty and nested sequences flattened; one statement stays itself."""
    flat: list[Stmt] = []
    for s in stmts:
        if s is None:
            continue
        if isinstance(s, SeqStmt):
            flat.extend(s.stmts)
        else:
            flat.append(s)
    return flat[0] if len(flat) == 1 else SeqStmt(tuple(flat))


@dataclass(frozen=True, slots=True, eq=False, repr=False)
class PrimFunc:
    """A function over buffers: what lowering produces and a code generator consumes.

    ``params`` are the arguments in call order: buffers, and scalar variables (a
    size or a split factor passed by value, as TVM's ``tvm.build(s, [A, B, n])``).
    A variable in a buffer's shape that is not a parameter is bound from the
    array passed for that buffer. ``attrs`` holds facts such as
    ``("global_symbol", "matmul")`` or ``("target", "llvm")`` as key/value pairs.
    """

    name: str
    params: tuple[Buffer | Var, ...]
    body: Stmt
    attrs: tuple[tuple[str, Any], ...] = ()

    @property
    def buffers(self) -> tuple[Buffer, ...]:
        """The buffer parameters, in call order."""
        return tuple(p for p in self.params if isinstance(p, Buffer))

    def size_vars(self) -> tuple[Var, ...]:
        """Every scalar the function takes by value, in a fixed order: the scalar
        parameters, then the variables of buffer shapes, each once. Code generators
        pass these after the buffers' data pointers."""
        out: list[Var] = [p for p in self.params if isinstance(p, Var)]
        for buf in self.buffers:
            for extent in buf.shape:
                for v in sorted(free_vars(extent), key=lambda v: v.name):
                    if v not in out:
                        out.append(v)
        return tuple(out)

    def attr(self, key: str, default: Any = None) -> Any:
        for k, v in self.attrs:
            if k == key:
                return v
        return default

    def __getitem__(self, name: str) -> PrimFunc:
        """``ember.lower(s, args, name="f")["f"]`` is the function itself.

        TVM's ``lower`` returns an IRModule indexed by function name; Ember's returns
        the PrimFunc, and this keeps TVM code that indexes the result working."""
        if name != self.name:
            raise ArgumentError(f"no function '{name}' here: this PrimFunc is '{self.name}'")
        return self

    def with_body(self, body: Stmt) -> PrimFunc:
        return PrimFunc(self.name, self.params, body, self.attrs)

    def with_attr(self, key: str, value: Any) -> PrimFunc:
        attrs = tuple((k, v) for k, v in self.attrs if k != key) + ((key, value),)
        return PrimFunc(self.name, self.params, self.body, attrs)

    def __repr__(self) -> str:
        return to_text(self)
