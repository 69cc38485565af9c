"""Pass ``swizzle_shared``: the XOR layout of shared tiles that ``ldmatrix`` reads.

Expects: a kernel from ``split_host_device`` (before ``inject_pipeline``) in which a
schedule marked the loop filling a shared tile with the pragma ``smem_swizzle`` whose
value is the tile's row length in elements (``s[stage].pragma(axis, "smem_swizzle",
width)``), a power of two of at least 16 half-precision elements (32 bytes).
Guarantees: every access of each buffer the marked loop writes (loads, stores,
asynchronous copies, and the element offsets that tensor-core calls pass with its
pointer) goes to :func:`swizzle_index` of its row-major index instead. The map
permutes the 16-byte chunks within each row, so the writer and the readers still
meet at the same element, a 16-byte vector (a ``cp.async``, an ``ldmatrix`` row)
stays whole, and the tile keeps its size; but the 8 rows an ``ldmatrix`` phase reads
at one column land in 8 different bank groups, with no padding.
"""

from __future__ import annotations

from typing import Any

from ember.tir import expr as E
from ember.tir import stmt as S
from ember.tir.functor import Mutator, post_order_stmts
from ember.tir.tensor_core import TENSOR_CORE_OPS, tensor_core_pointers

PRAGMA = "smem_swizzle"
CHUNK = 8  # half-precision elements per 16-byte chunk


def swizzle_index(row: Any, col: Any, width: int) -> Any:
    """Element offset of (row, col) in a tile ``width`` elements wide whose 16-byte chunks
    are XOR-permuted per row: chunk ``c`` of row ``r`` is stored at ``c ^ f(r)``, with
    ``f`` cycling through the chunk positions of one 128-byte line every 8 rows."""
    chunks = width // CHUNK
    rows_per_line = max(1, CHUNK // chunks)
    mask = min(chunks, CHUNK) - 1
    chunk = (col // CHUNK) ^ ((row // rows_per_line) & mask)
    return row * width + chunk * CHUNK + col % CHUNK


def _swizzled(index: E.PrimExpr, width: int) -> E.PrimExpr:
    if isinstance(index, E.Ramp):  # a vector of at most one chunk, chunk-aligned
        base = _swizzled(index.base, width)
        return E.Ramp(index.dtype, base, index.stride, index.lanes)
    return swizzle_index(index // width, index % width, width)


def _marked(func: S.PrimFunc) -> dict[E.Var, int]:
    """Buffers written under a ``smem_swizzle`` loop -> their row length."""
    found: dict[E.Var, int] = {}

    def visit(n: object) -> None:
        if not isinstance(n, S.For):
            return
        for key, value in n.annotations or ():
            if key == PRAGMA:

                def store(m: object, w: int = int(value)) -> None:
                    if isinstance(m, S.BufferStore) and m.buffer.scope == "shared":
                        found[m.buffer.data] = w

                post_order_stmts(n.body, store)

    post_order_stmts(func.body, visit)
    return found


class _Swizzle(Mutator):
    def __init__(self, widths: dict[E.Var, int], sides: tuple[str, ...]) -> None:
        self.widths, self.sides = widths, sides

    def visit_BufferLoad(self, e: E.BufferLoad) -> E.PrimExpr:
        e = self.generic_visit(e)
        w = self.widths.get(e.buffer.data)
        if w is None or "load" not in self.sides:
            return e
        return E.BufferLoad(e.dtype, e.buffer, (_swizzled(e.indices[0], w),))

    def visit_BufferStore(self, s: S.BufferStore) -> S.Stmt:
        s = self.generic_visit(s)
        w = self.widths.get(s.buffer.data)
        if w is None or "store" not in self.sides:
            return s
        return S.BufferStore(s.buffer, s.value, (_swizzled(s.indices[0], w),))

    def visit_Call(self, e: E.Call) -> E.PrimExpr:
        e = self.generic_visit(e)
        if e.op not in TENSOR_CORE_OPS or "load" not in self.sides:
            return e
        args = list(e.args)
        for n, arg in enumerate(args[:-1]):
            if isinstance(arg, E.Var) and arg in self.widths and arg in tensor_core_pointers(e):
                args[n + 1] = _swizzled(args[n + 1], self.widths[arg])
        return E.Call(e.dtype, e.op, tuple(args))


def swizzle_shared(func: S.PrimFunc, sides: tuple[str, ...] = ("store", "load")) -> S.PrimFunc:
    """``sides`` exists for mutation tests: a layout applied on one side only must fail."""
    widths = _marked(func)
    if not widths:
        return func
    return _Swizzle(widths, sides).visit_func(func)


__all__ = ["PRAGMA", "swizzle_index", "swizzle_shared"]
