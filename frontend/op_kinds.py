"""Operator pattern kinds: how an op's outputs depend on its inputs, for fusion.

The kinds are TVM's (``relay.op.OpPattern``), ordered so that a larger kind is
harder to fuse: an ``ELEMWISE`` op reads each input at its own output index, a
``BROADCAST`` op at an index with some axes dropped, an ``INJECTIVE`` op at any
one index computed from the output index (reshape, transpose), ``COMM_REDUCE``
reduces with a commutative reducer, ``OUT_ELEMWISE_FUSABLE`` (conv2d, matmul)
can take elementwise consumers into its loop nest, and ``OPAQUE`` fuses with
nothing. The fusion pass reads these; the generic schedules pick by them too.
"""

from __future__ import annotations

from enum import IntEnum


class OpKind(IntEnum):
    """An op's pattern kind; comparisons follow TVM's order (lower fuses more easily)."""

    ELEMWISE = 0
    BROADCAST = 1
    INJECTIVE = 2
    COMM_REDUCE = 3
    OUT_ELEMWISE_FUSABLE = 4
    OPAQUE = 8


ELEMWISE = OpKind.ELEMWISE
BROADCAST = OpKind.BROADCAST
INJECTIVE = OpKind.INJECTIVE
COMM_REDUCE = OpKind.COMM_REDUCE
OUT_ELEMWISE_FUSABLE = OpKind.OUT_ELEMWISE_FUSABLE
OPAQUE = OpKind.OPAQUE

__all__ = [
    "BROADCAST",
    "COMM_REDUCE",
    "ELEMWISE",
    "INJECTIVE",
    "OPAQUE",
    "OUT_ELEMWISE_FUSABLE",
    "OpKind",
]
