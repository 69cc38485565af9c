"""The Ember operator library; importing it registers every op family (see ``registry``)."""

from ember.frontend.ops import elementwise, linalg, nn, norm, reduce, spatial, transform
from ember.frontend.ops.registry import OpDef, get_op, list_ops, register_op

__all__ = [
    "OpDef",
    "elementwise",
    "linalg",
    "get_op",
    "list_ops",
    "nn",
    "norm",
    "reduce",
    "register_op",
    "spatial",
    "transform",
]
