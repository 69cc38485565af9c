"""The Ember operator library; importing it registers every op family (see ``registry``)."""

from ember.frontend.ops import (
    attention,
    broadcast,
    control_flow,
    elementwise,
    grid_sample,
    indexing,
    layout,
    linalg,
    math,
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
    "attention",
    "broadcast",
    "control_flow",
    "elementwise",
    "get_op",
    "grid_sample",
    "indexing",
    "layout",
    "linalg",
    "list_ops",
    "math",
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
