"""Operator computes in tensor expressions, shared by every target's schedule templates.

Each function builds the compute of one operator from placeholders or tensors and
returns the output tensor; schedules live with the targets
(``codegen_llvm/schedules``, ``codegen_cuda/schedules``), and the ONNX frontend
maps its nodes onto these functions.
"""

from ember.tir.topi import activation, broadcast
from ember.tir.topi.conv import conv_nd
from ember.tir.topi.elementwise import (
    broadcast_binary,
    copy,
    elementwise_chain,
    exp,
    relu,
    sigmoid,
    tanh,
    unary,
)
from ember.tir.topi.linalg import gemm, matmul_nd
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
from ember.tir.topi.pool import pool_nd, softmax_axis
from ember.tir.topi.transform import concatenate, reshape, take, transpose

__all__ = [
    "activation",
    "broadcast",
    "batch_matmul",
    "broadcast_binary",
    "concatenate",
    "conv2d_nchw",
    "conv_nd",
    "copy",
    "dense",
    "elementwise_chain",
    "exp",
    "gemm",
    "layer_norm",
    "matmul",
    "matmul_nd",
    "pool2d",
    "pool_nd",
    "reduce_rows",
    "relu",
    "reshape",
    "sigmoid",
    "softmax",
    "softmax_axis",
    "take",
    "tanh",
    "transpose",
    "unary",
]
