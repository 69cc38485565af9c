"""The Ember operator library; importing it registers every op family (see ``registry``)."""

from ember.frontend.ops import (
    control_flow,
    elementwise,
    indexing,
    linalg,
    nn,
    norm,
    quant,
    reduce,
    rnn,
    spatial,
    transform,
)
from ember.frontend.ops.registry import OpDef, get_op, list_ops, register_op

__all__ = [
    "control_flow",
    "elementwise",
    "get_op",
    "indexing",
    "linalg",
    "list_ops",
    "nn",
    "norm",
    "OpDef",
    "quant",
    "reduce",
    "register_op",
    "rnn",
    "spatial",
    "transform",
]
