"""Stage indices of pipelined buffers: how ``inject_pipeline`` writes them, how others read them.

``inject_pipeline`` gives each pipelined shared buffer ``S`` stages and points every
access of it at one stage with :class:`Restage`, which writes the index as
``floormod(e, S) * X + index`` (``X`` the stage's size, ``e`` the loop variable plus a
constant, or a constant in the prologue), built by hand so that no folding hides that
shape. :func:`split_stage` reads such an index back into a :class:`Phase` and the
in-stage index, so that ``inject_sync`` knows two accesses in one iteration touch
different stages (:func:`phases_may_meet`) and need no barrier between them. A
tensor-core call that reaches a staged buffer through a pointer takes the stage in the
element offset after it.
"""

from __future__ import annotations

from dataclasses import dataclass

from ember.tir import expr as E
from ember.tir import stmt as S
from ember.tir.buffer import Buffer
from ember.tir.functor import Mutator
from ember.tir.tensor_core import TENSOR_CORE_OPS, tensor_core_pointers


@dataclass(frozen=True)
class Phase:
    """Which stage an access touches: ``(var + offset) % stages`` (``var`` None: a constant)."""

    var: E.Var | None
    offset: int
    stages: int

    def shifted(self, by: int) -> Phase:
        return Phase(self.var, self.offset + by, self.stages)


def split_stage(index: E.PrimExpr) -> tuple[Phase, E.PrimExpr] | None:
    """The phase and the in-stage index of a staged access, or None for any other index."""
    if isinstance(index, E.Ramp):
        inner = split_stage(index.base)
        if inner is None:
            return None
        return inner[0], E.Ramp(index.dtype, inner[1], index.stride, index.lanes)
    if not (isinstance(index, E.BinOp) and index.op is E.BinaryOp.ADD):
        return None
    term = index.a
    if not (
        isinstance(term, E.BinOp)
        and term.op is E.BinaryOp.MUL
        and isinstance(term.a, E.BinOp)
        and term.a.op is E.BinaryOp.FLOORMOD
        and isinstance(term.a.b, E.IntImm)
        and isinstance(term.b, E.IntImm)
    ):
        return None
    e, stages = term.a.a, term.a.b.value
    if isinstance(e, E.IntImm):
        return Phase(None, e.value, stages), index.b
    if isinstance(e, E.Var):
        return Phase(e, 0, stages), index.b
    if isinstance(e, E.BinOp) and e.op is E.BinaryOp.ADD and isinstance(e.b, E.IntImm):
        if isinstance(e.a, E.Var):
            return Phase(e.a, e.b.value, stages), index.b
    return None


def phases_may_meet(a: Phase | None, b: Phase | None) -> bool:
    """Could accesses in phases ``a`` and ``b`` (of one iteration) touch the same stage?"""
    if a is None or b is None:
        return True
    if a.var is not b.var or a.stages != b.stages:
        return True
    return (a.offset - b.offset) % a.stages == 0


def _stage_term(e: E.PrimExpr, stages: int, size: int) -> E.PrimExpr:
    # built by hand so that no folding hides the shape split_stage reads back
    mod = E.BinOp(e.dtype, E.BinaryOp.FLOORMOD, e, E.IntImm(e.dtype, stages))
    return E.BinOp(e.dtype, E.BinaryOp.MUL, mod, E.IntImm(e.dtype, size))


def _with_stage(index: E.PrimExpr, term: E.PrimExpr) -> E.PrimExpr:
    if isinstance(index, E.Ramp):
        return E.Ramp(index.dtype, _with_stage(index.base, term), index.stride, index.lanes)
    return E.BinOp(index.dtype, E.BinaryOp.ADD, term, index)


class Restage(Mutator):
    """Point every access of a staged buffer at the stage of phase ``e``."""

    def __init__(self, staged: dict[E.Var, tuple[Buffer, int]], stages: int, e: E.PrimExpr):
        self.staged, self.stages, self.e = staged, stages, e

    def _index(self, buf: Buffer, index: E.PrimExpr) -> tuple[Buffer, E.PrimExpr]:
        new, size = self.staged[buf.data]
        return new, _with_stage(index, _stage_term(self.e, self.stages, size))

    def visit_Call(self, e: E.Call) -> E.PrimExpr:
        """A tensor-core call reaching a staged buffer through a pointer (``ldmatrix``'s
        source, a wmma load or store) takes the stage in the element offset after it."""
        e = self.generic_visit(e)
        if e.op not in TENSOR_CORE_OPS:
            return e
        args = list(e.args)
        for n, arg in enumerate(args[:-1]):
            if isinstance(arg, E.Var) and arg in self.staged and arg in tensor_core_pointers(e):
                size = self.staged[arg][1]
                args[n + 1] = _with_stage(args[n + 1], _stage_term(self.e, self.stages, size))
        return E.Call(e.dtype, e.op, tuple(args))

    def visit_BufferLoad(self, e: E.BufferLoad) -> E.PrimExpr:
        indices = tuple(self.visit(i) for i in e.indices)
        if e.buffer.data not in self.staged:
            return e if indices == e.indices else E.BufferLoad(e.dtype, e.buffer, indices)
        buf, index = self._index(e.buffer, indices[0])
        return E.BufferLoad(e.dtype, buf, (index,))

    def visit_BufferStore(self, s: S.BufferStore) -> S.Stmt:
        value = self.visit(s.value)
        indices = tuple(self.visit(i) for i in s.indices)
        if s.buffer.data not in self.staged:
            if value is s.value and indices == s.indices:
                return s
            return S.BufferStore(s.buffer, value, indices)
        buf, index = self._index(s.buffer, indices[0])
        return S.BufferStore(buf, value, (index,))
