"""ONNX import: ``from_onnx`` and the converters (importing this registers them all)."""

from ember.frontend.onnx_import import (
    ops_attention,
    ops_broadcast,
    ops_control_flow,
    ops_elementwise,
    ops_gather,
    ops_indexing,
    ops_linalg,
    ops_loss,
    ops_math,
    ops_nn,
    ops_norm,
    ops_quant,
    ops_reduce,
    ops_resize,
    ops_rnn,
    ops_spatial,
    ops_transform,
)
from ember.frontend.onnx_import.importer import from_onnx, load_model
from ember.frontend.onnx_import.registry import converter, find_converter, supported_op_types

__all__ = [
    "converter",
    "find_converter",
    "from_onnx",
    "load_model",
    "ops_attention",
    "ops_broadcast",
    "ops_control_flow",
    "ops_elementwise",
    "ops_gather",
    "ops_indexing",
    "ops_linalg",
    "ops_loss",
    "ops_math",
    "ops_nn",
    "ops_norm",
    "ops_quant",
    "ops_reduce",
    "ops_resize",
    "ops_rnn",
    "ops_spatial",
    "ops_transform",
    "supported_op_types",
]
