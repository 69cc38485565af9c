"""The Ember operator library; importing it registers every op family (see ``registry``)."""

from ember.frontend.ops import (
    control_flow,
    elementwise,
    indexing,
    nn,
    quant,
    rnn,
    transform,
)
from ember.frontend.ops.registry import OpDef, get_op, list_ops, register_op

__all__ = [
    "control_flow",
    "elementwise",
    "get_op",
    "indexing",
    "list_ops",
    "nn",
    "OpDef",
    "quant",
    "register_op",
    "rnn",
    "transform",
]
