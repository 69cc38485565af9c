"""The Ember operator library; importing it registers every op family (see ``registry``)."""

from ember.frontend.ops import broadcast, elementwise, math, nn, transform
from ember.frontend.ops.registry import OpDef, get_op, list_ops, register_op

__all__ = [
    "OpDef",
    "broadcast",
    "elementwise",
    "math",
    "get_op",
    "list_ops",
    "nn",
    "register_op",
    "transform",
]
