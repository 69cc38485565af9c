"""Register staging for ``inject_pipeline`` on GPUs without ``cp.async`` (before sm_80).

The fill of the next tile is split at registers: ``through_registers`` gives a
local array and two statements, one that loads the tile's global values into it
(issued before the compute, so the loads' latency hides behind the arithmetic)
and one that stores them into the shared stage (after the compute).
"""

from __future__ import annotations

from ember.tir import dtype as dt
from ember.tir import expr as E
from ember.tir import stmt as S
from ember.tir.arith import Analyzer
from ember.tir.buffer import Buffer, decl_buffer
from ember.tir.functor import Mutator, post_order_visit


class _Registers(Mutator):
    """One fill through registers: ``load`` keeps the values a thread copies in a local
    array (one slot per iteration of the fill's serial loops), ``store`` writes them to the
    stage. Thread-bound loops are not slots: each thread has its own array."""

    def __init__(self, reg: Buffer, strides: dict[E.Var, tuple[E.PrimExpr, int]], load: bool):
        self.reg, self.strides, self.load = reg, strides, load

    def visit_BufferStore(self, s: S.BufferStore) -> S.Stmt:
        lanes = dt.lanes_of(s.value.dtype)
        slot: E.PrimExpr = E.const(0)
        for var, (lo, stride) in self.strides.items():
            slot = slot + (var - lo) * (stride * lanes)
        slot = Analyzer().simplify(slot)
        index = (
            E.Ramp(dt.with_lanes("int32", lanes), slot, E.const(1), lanes) if lanes > 1 else slot
        )
        if self.load:
            return S.BufferStore(self.reg, s.value, (index,))
        return S.BufferStore(s.buffer, E.BufferLoad(s.value.dtype, self.reg, (index,)), s.indices)


_MAX_PREFETCH_ELEMS = 64  # per thread and fill; a bigger fill is copied directly


def through_registers(fill: S.Stmt, ana: Analyzer) -> tuple[Buffer, S.Stmt, S.Stmt] | None:
    """``(registers, load, store)`` splitting ``fill`` (one store under serial and thread
    loops) at its registers, or None when its shape or size does not allow it."""
    stores: list[S.BufferStore] = []
    serial: list[S.For] = []

    def visit(n: object) -> None:
        if isinstance(n, S.BufferStore):
            stores.append(n)
        elif isinstance(n, S.For) and n.kind is not S.ForKind.THREAD_BINDING:
            serial.append(n)

    post_order_visit(fill, visit)
    if len(stores) != 1:
        return None
    store = stores[0]
    slots, strides = 1, {}
    with ana.scope():
        for loop in reversed(serial):  # post-order: innermost first, so outermost last
            ana.bind(loop.loop_var, E.Range(loop.min, loop.extent))
        for loop in serial:  # innermost first: the fastest slot
            hi = ana.const_int_bound(loop.extent)[1]
            if not isinstance(hi, int) or hi < 1:
                return None
            strides[loop.loop_var] = (loop.min, slots)
            slots *= hi
    lanes = dt.lanes_of(store.value.dtype)
    if slots * lanes > _MAX_PREFETCH_ELEMS:
        return None
    reg = decl_buffer((slots * lanes,), store.buffer.dtype, f"{store.buffer.name}.next", "local")
    load = _Registers(reg, strides, True).visit(fill)
    back = _Registers(reg, strides, False).visit(fill)
    return reg, load, back
