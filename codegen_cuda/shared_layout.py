"""Where a kernel's shared arrays live: static ``__shared__`` arrays, or one dynamic buffer.

CUDA caps *static* shared memory at 48 KiB per block; a kernel needing more must
declare ``extern __shared__`` storage, and the launch must ask for those bytes
(after raising the function's limit). ``verify_gpu`` allows up to the
architecture's opt-in limit, so the printer asks this module whether a kernel
goes dynamic and at which byte offset each shared array starts; the runtime asks
:func:`dynamic_shared_bytes` how many bytes to request at launch.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ember.tir import dtype as dt
from ember.tir import expr as E
from ember.tir import stmt as S
from ember.tir.functor import Visitor

STATIC_SHARED_LIMIT = 48 * 1024
SHARED_ALIGN = 16


@dataclass(frozen=True)
class SharedLayout:
    """Byte offsets of the shared arrays (by ``id`` of their ``Allocate``) in one dynamic
    buffer. Copies of one allocation (loop partitioning makes them) are separate
    arrays, as their static ``__shared__`` declarations are and as ``inject_sync``
    and the emulator treat them, so each has its own place."""

    offsets: dict[int, int] = field(default_factory=dict)
    total_bytes: int = 0

    @property
    def dynamic(self) -> bool:
        return self.total_bytes > STATIC_SHARED_LIMIT


def shared_layout(func: S.PrimFunc) -> SharedLayout:
    """Shared arrays placed one after another, each 16-byte aligned, in body order."""
    allocs: list[S.Allocate] = []

    class _Collect(Visitor):
        def visit_Allocate(self, node: S.Allocate) -> None:
            if node.buffer.scope == "shared":
                allocs.append(node)
            self.generic_visit(node)

    _Collect().visit(func.body)
    offsets: dict[int, int] = {}
    total = 0
    for alloc in allocs:
        buf = alloc.buffer
        size = buf.flat_size() if len(buf.shape) != 1 else buf.shape[0]
        if not isinstance(size, E.IntImm) or id(alloc) in offsets:
            continue
        offsets[id(alloc)] = total
        total += -(-size.value * dt.bytes_of(buf.dtype) // SHARED_ALIGN) * SHARED_ALIGN
    return SharedLayout(offsets, total)


def dynamic_shared_bytes(func: S.PrimFunc) -> int:
    """Bytes of dynamic shared memory to request when launching ``func`` (0: all static)."""
    layout = shared_layout(func)
    return layout.total_bytes if layout.dynamic else 0


__all__ = ["STATIC_SHARED_LIMIT", "SharedLayout", "dynamic_shared_bytes", "shared_layout"]
