"""Operator computes in tensor expressions, shared by every target's schedule templates.

Each function builds the compute of one operator from placeholders or tensors and
returns the output tensor; schedules live with the targets
(``codegen_llvm/schedules``, ``codegen_cuda/schedules``), and the ONNX frontend
maps its nodes onto these functions.
"""

from ember.tir.topi.elementwise import broadcast_binary, elementwise_chain
from ember.tir.topi.nn import (
    batch_matmul,
    conv2d_nchw,
    dense,
    layer_norm,
    matmul,
    pool2d,
    reduce_rows,
    softmax,
)

__all__ = [
    "batch_matmul",
    "broadcast_binary",
    "conv2d_nchw",
    "dense",
    "elementwise_chain",
    "layer_norm",
    "matmul",
    "pool2d",
    "reduce_rows",
    "softmax",
]
