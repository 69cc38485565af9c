"""The Ember operator library; importing it registers every op family (see ``registry``)."""

from ember.frontend.ops import control_flow, elementwise, nn, quant, rnn, transform
from ember.frontend.ops.registry import OpDef, get_op, list_ops, register_op

__all__ = [
    "OpDef",
    "control_flow",
    "elementwise",
    "get_op",
    "list_ops",
    "nn",
    "quant",
    "register_op",
    "rnn",
    "transform",
]
