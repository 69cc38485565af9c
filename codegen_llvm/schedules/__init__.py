"""CPU schedule templates; importing this package registers every ``<op>.llvm`` template."""

from ember.codegen_llvm.schedules import (
    batch_matmul,
    conv2d,
    conv2d_nchwc,
    dense_packed,
    depthwise_conv2d,
    depthwise_conv2d_nchwc,
    elementwise,
    layer_norm,
    matmul,
    matmul_int8,
    pool2d,
    reduce,
    softmax,
    winograd,
    winograd_nchwc,
)

__all__ = [
    "batch_matmul",
    "conv2d",
    "conv2d_nchwc",
    "dense_packed",
    "depthwise_conv2d",
    "depthwise_conv2d_nchwc",
    "elementwise",
    "layer_norm",
    "matmul",
    "matmul_int8",
    "pool2d",
    "reduce",
    "softmax",
    "winograd",
    "winograd_nchwc",
]
