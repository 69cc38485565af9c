"""Pass ``lower_warp_memory``: a ``warp`` buffer becomes each lane's ``local`` share.

Expects: a kernel from ``split_host_device`` whose ``warp``-scope allocations (memory a
warp's 32 lanes hold between them, as the accumulator of a tensor-core GEMM: TVM's
warp memory) are accessed only per lane: every load, store and tensor-core pointer
offset is already the index of a register of the lane's own share (the convention of
the tensor intrinsics that write them, ``codegen_cuda/schedules/tensorcore_intrin.py``).
Guarantees: no ``warp`` buffer remains; each is a ``local`` array of a 32nd of its
size, the same pointer, with every access of it rewritten to the new buffer. An
access at or past that size is a ``LoweringError`` (it would be a lane reaching
another lane's share, which no per-thread array can give).
"""

from __future__ import annotations

import dataclasses

from ember.errors import LoweringError
from ember.tir import expr as E
from ember.tir import stmt as S
from ember.tir.buffer import Buffer
from ember.tir.functor import Mutator, contains

WARP_SIZE = 32


class _Lower(Mutator):
    def __init__(self, kernel: str) -> None:
        self.kernel = kernel
        self.lane_share: dict[E.Var, Buffer] = {}

    def _share(self, buf: Buffer) -> Buffer:
        return self.lane_share.get(buf.data, buf)

    def visit_Allocate(self, s: S.Allocate) -> S.Stmt:
        buf = s.buffer
        if buf.scope != "warp":
            return self.generic_visit(s)
        (size,) = buf.shape
        n = E.const_value(size)
        if n is None or n % WARP_SIZE:
            raise LoweringError(
                f"kernel '{self.kernel}': warp buffer '{buf.name}' has {size} elements, not a "
                f"constant multiple of the {WARP_SIZE} lanes that hold it"
            )
        share = dataclasses.replace(buf, scope="local", shape=(E.const(n // WARP_SIZE),))
        self.lane_share[buf.data] = share
        return S.Allocate(share, self.visit(s.body))

    def _check(self, buf: Buffer, indices: tuple) -> None:
        (n,) = buf.shape
        for i in indices:
            v = E.const_value(i)
            if v is not None and not 0 <= v < E.const_value(n):
                raise LoweringError(
                    f"kernel '{self.kernel}': access {v} of warp buffer '{buf.name}' is past a "
                    f"lane's share of {n} elements; warp memory is accessed per lane"
                )

    def visit_BufferLoad(self, e: E.BufferLoad) -> E.PrimExpr:
        e = self.generic_visit(e)
        if e.buffer.data not in self.lane_share:
            return e
        share = self._share(e.buffer)
        self._check(share, e.indices)
        return E.BufferLoad(e.dtype, share, e.indices)

    def visit_BufferStore(self, s: S.BufferStore) -> S.Stmt:
        s = self.generic_visit(s)
        if s.buffer.data not in self.lane_share:
            return s
        share = self._share(s.buffer)
        self._check(share, s.indices)
        return S.BufferStore(share, s.value, s.indices)


def lower_warp_memory(func: S.PrimFunc) -> S.PrimFunc:
    """Runs the pass on ``func`` (see the module notes)."""
    if not contains(func.body, _is_warp):  # nothing to lower: the rewrite need not walk
        return func
    return _Lower(func.name).visit_func(func)


def _is_warp(s: object) -> bool:
    return isinstance(s, S.Allocate) and s.buffer.scope == "warp"


__all__ = ["lower_warp_memory"]
