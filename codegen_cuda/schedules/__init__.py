"""GPU schedule templates; importing this package registers every ``<op>.cuda`` template."""

from ember.codegen_cuda.schedules import (
    conv2d,
    conv2d_gemm,
    conv2d_tensorcore,
    elementwise,
    matmul,
    matmul_tensorcore,
    pool2d,
    reduce,
)

__all__ = [
    "conv2d",
    "conv2d_gemm",
    "conv2d_tensorcore",
    "elementwise",
    "matmul",
    "matmul_tensorcore",
    "pool2d",
    "reduce",
]
