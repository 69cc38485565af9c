"""Pass ``flatten_buffers``: every buffer access becomes one index into 1-D memory.

Expects: loads and stores with one index per buffer dimension.
Guarantees: every ``BufferLoad``/``BufferStore`` has exactly one index, computed
from the buffer's strides (row-major, or the padded strides ``storage_align``
chose) plus its ``elem_offset`` (a view bound inside another buffer, e.g. by
``tensorize``); allocations are of 1-D buffers. A flattened buffer keeps its ``data``
pointer variable, which is how code generators know a parameter's flat view
is the parameter. Parameters keep their declared shapes so callers are still
checked against them.
"""

from __future__ import annotations

from ember.tir import expr as E
from ember.tir import stmt as S
from ember.tir.buffer import Buffer
from ember.tir.functor import MemoMutator


class _Flatten(MemoMutator):
    """An access's flat index depends on its buffer alone, so shared subexpressions are
    flattened once and stay shared."""

    def __init__(self) -> None:
        super().__init__()
        self.flat: dict[int, Buffer] = {}

    def buffer(self, b: Buffer) -> Buffer:
        if b.ndim == 1 and not b.strides and b.elem_offset is None:
            return b
        fb = self.flat.get(id(b))
        if fb is None:
            size = b.flat_size()
            fb = Buffer(b.name, b.dtype, (size,), b.data, b.scope, (), None, b.align)
            self.flat[id(b)] = fb
        return fb

    def index(self, b: Buffer, indices: tuple[E.PrimExpr, ...]) -> tuple[E.PrimExpr, ...]:
        if len(indices) == 1 and not b.strides and b.elem_offset is None:
            return indices
        flat: E.PrimExpr | None = None
        if b.elem_offset is not None and not E.is_const_int(b.elem_offset, 0):
            flat = b.elem_offset
        for idx, stride in zip(indices, b.row_major_strides()):
            term = idx if E.is_const_int(stride, 1) else idx * stride
            flat = term if flat is None else flat + term
        return (flat if flat is not None else E.const(0),)

    def visit_BufferLoad(self, e: E.BufferLoad) -> E.PrimExpr:
        indices = tuple(self.visit(i) for i in e.indices)
        return E.BufferLoad(e.dtype, self.buffer(e.buffer), self.index(e.buffer, indices))

    def visit_BufferStore(self, s: S.BufferStore) -> S.Stmt:
        indices = tuple(self.visit(i) for i in s.indices)
        value = self.visit(s.value)
        return S.BufferStore(self.buffer(s.buffer), value, self.index(s.buffer, indices))

    def visit_Allocate(self, s: S.Allocate) -> S.Stmt:
        return S.Allocate(self.buffer(s.buffer), self.visit(s.body))


def flatten_buffers(func: S.PrimFunc) -> S.PrimFunc:
    """Runs the pass on ``func`` (see the module notes)."""
    return _Flatten().visit_func(func)
