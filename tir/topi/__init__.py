"""Operator computes in tensor expressions, shared by every target's schedule templates.

Each function builds the compute of one operator from placeholders or tensors and
returns the output tensor; schedules live with the targets
(``codegen_llvm/schedules``, ``codegen_cuda/schedules``), and the ONNX frontend
maps its nodes onto these functions.
"""

from ember.tir.topi import activation, broadcast, indexing, resize, scatter
from ember.tir.topi.conv import conv_nd
from ember.tir.topi.conv_nchwc import (
    avg_pool2d_nchwc,
    conv2d_nchwc,
    depthwise_conv2d_nchwc,
    depthwise_pointwise_nchwc,
    expand_depthwise_pointwise_nchwc,
    layout_transform,
    max_pool2d_nchwc,
)
from ember.tir.topi.conv_transpose import conv_transpose_nd
from ember.tir.topi.einsum import einsum
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
from ember.tir.topi.linalg import dense_packed, gemm, matmul_nd
from ember.tir.topi.lppool import lp_pool_nd
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
from ember.tir.topi.norm import batch_norm, lp_normalize, lrn, normalize
from ember.tir.topi.pool import pool_nd, softmax_axis
from ember.tir.topi.quant import (
    conv_integer,
    dequantize_linear,
    dynamic_qparams,
    matmul_integer,
    qlinear_conv,
    qlinear_matmul,
    quantize_linear,
    requantize,
)
from ember.tir.topi.reduce import arg_reduce, hardmax, reduce_axes
from ember.tir.topi.transform import concatenate, reshape, take, transpose

__all__ = [
    "activation",
    "arg_reduce",
    "batch_matmul",
    "batch_norm",
    "broadcast",
    "broadcast_binary",
    "concatenate",
    "conv2d_nchw",
    "conv2d_nchwc",
    "depthwise_conv2d_nchwc",
    "depthwise_pointwise_nchwc",
    "expand_depthwise_pointwise_nchwc",
    "conv_integer",
    "conv_nd",
    "conv_transpose_nd",
    "layout_transform",
    "avg_pool2d_nchwc",
    "max_pool2d_nchwc",
    "copy",
    "dense",
    "dense_packed",
    "dequantize_linear",
    "dynamic_qparams",
    "einsum",
    "elementwise_chain",
    "exp",
    "gemm",
    "hardmax",
    "indexing",
    "layer_norm",
    "lp_normalize",
    "lp_pool_nd",
    "lrn",
    "matmul",
    "matmul_integer",
    "matmul_nd",
    "normalize",
    "pool2d",
    "pool_nd",
    "qlinear_conv",
    "qlinear_matmul",
    "quantize_linear",
    "reduce_axes",
    "reduce_rows",
    "relu",
    "requantize",
    "reshape",
    "resize",
    "scatter",
    "sigmoid",
    "softmax",
    "softmax_axis",
    "take",
    "tanh",
    "transpose",
    "unary",
]
