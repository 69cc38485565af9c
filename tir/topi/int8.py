"""The u8 x s8 -> s32 GEMM over B packed in 16-column panels of 4-step k groups.

``Bp[N/16, K/4, 16, 4]``: for one 16-column panel each group of 4 k steps is 64
contiguous bytes, the operand of one x86 VNNI ``vpdpbusd`` (TVM's x86 int8 dense packs
the same way). The compute is target-neutral; the CPU template ``matmul_int8.llvm``
(``codegen_llvm/schedules/matmul_int8.py``) tensorizes its inner 16 x 4 block.
"""

from __future__ import annotations

from ember.tir import expr as E
from ember.tir.te import operation as te
from ember.tir.te.tensor import PlaceholderOp, Tensor

GROUP = 4  # k steps summed into one accumulator lane per packed group
LANES = 16  # columns of one packed panel


def packed_shape(N: int, K: int) -> tuple[int, int, int, int]:
    """The shape of packed B: ``(ceil(N/16), ceil(K/4), 16, 4)``."""
    return (-(-N // LANES), -(-K // GROUP), LANES, GROUP)


def pack_int8_weights(B: Tensor, N: int, K: int) -> Tensor:
    """``Bp[x, g, z, q] = B[4g + q, 16x + z]``, zero past K and N."""

    def f(x, g, z, q):  # noqa: ANN001, ANN202
        k, n = g * GROUP + q, x * LANES + z
        value = B[E.min_(k, K - 1), E.min_(n, N - 1)]
        return E.select(E.logical_and(k < K, n < N), value, E.const(0, "int8"))

    return te.compute(packed_shape(N, K), f, name="B_packed")


def int8_gemm(A: Tensor, Bp: Tensor, M: int, N: int, K: int) -> tuple[Tensor, Tensor]:
    """The partial sums ``Cp[m, x, z]`` over packed B and the int32 output ``C[m, n]``."""
    groups = -(-K // GROUP)
    if K % GROUP or not isinstance(A.op, PlaceholderOp):
        # the intrinsic reads A's buffer: a computed A (a fused producer) stays a stage
        src = A
        A = te.compute(
            (M, groups * GROUP),
            lambda m, k: E.select(k < K, src[m, E.min_(k, K - 1)], E.const(0, "uint8")),
            name="A_padded",
            tag="pad",
        )
    g = te.reduce_axis((0, groups), name="g")
    q = te.reduce_axis((0, GROUP), name="q")
    Cp = te.compute(
        (M, Bp.shape[0], LANES),
        lambda m, x, z: te.sum(
            A[m, g * GROUP + q].astype("int32") * Bp[x, g, z, q].astype("int32"),
            axis=[g, q],
        ),
        name="C_panels",
        tag="matmul_int8_panels",
        attrs={"task_args": (M, N, K)},
    )
    C = te.compute((M, N), lambda m, n: Cp[m, n // LANES, n % LANES], name="C", tag="matmul_int8")
    return Cp, C
