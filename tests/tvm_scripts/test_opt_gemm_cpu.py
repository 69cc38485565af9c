"""TVM's CPU GEMM tutorial (``opt_gemm``) as its users write it: blocking with ``tile``,
a write cache computed at the block, ``k`` split and unrolled, the inner column
vectorized, rows in parallel, and ``B`` packed into column panels addressed with
``tvm.tir.indexdiv``/``indexmod``. Sizes are odd (the panel width does not divide
them), so the packed panel is padded by an ``if_then_else``; checked against numpy.
"""

from __future__ import annotations

import numpy as np
import pytest

import ember as tvm
from ember import te

M, K, N = 67, 45, 71
BN, KFACTOR = 32, 4


def _matmul(packed: bool):
    k = te.reduce_axis((0, K), "k")
    A = te.placeholder((M, K), name="A")
    B = te.placeholder((K, N), name="B")
    if not packed:
        C = te.compute((M, N), lambda x, y: te.sum(A[x, k] * B[k, y], axis=k), name="C")
        return A, B, C, None
    panels = (N + BN - 1) // BN
    packedB = te.compute(
        (panels, K, BN),
        lambda x, y, z: te.if_then_else(x * BN + z < N, B[y, x * BN + z], 0.0),
        name="packedB",
    )
    C = te.compute(
        (M, N),
        lambda x, y: te.sum(
            A[x, k] * packedB[tvm.tir.indexdiv(y, BN), k, tvm.tir.indexmod(y, BN)], axis=k
        ),
        name="C",
    )
    return A, B, C, packedB


def _schedule(packed: bool):
    A, B, C, packedB = _matmul(packed)
    s = te.create_schedule(C.op)
    CC = s.cache_write(C, "global")
    xo, yo, xi, yi = s[C].tile(C.op.axis[0], C.op.axis[1], BN, BN)
    s[CC].compute_at(s[C], yo)
    xc, yc = s[CC].op.axis
    (k,) = s[CC].op.reduce_axis
    ko, ki = s[CC].split(k, factor=KFACTOR)
    s[CC].reorder(ko, xc, ki, yc)
    s[CC].unroll(ki)
    s[CC].vectorize(yc)
    s[C].parallel(xo)
    if packedB is not None:
        x, _, z = s[packedB].op.axis
        s[packedB].vectorize(z)
        s[packedB].parallel(x)
    return s, [A, B, C]


@pytest.mark.parametrize("packed", [False, True], ids=["cache_write", "packed"])
def test_opt_gemm_tutorial_llvm(rng, packed):
    s, args = _schedule(packed)
    func = tvm.build(s, args, target="llvm", name="mmult")
    a = rng.uniform(-1, 1, (M, K)).astype("float32")
    b = rng.uniform(-1, 1, (K, N)).astype("float32")
    c = tvm.nd.array(np.full((M, N), np.nan, "float32"))
    func(tvm.nd.array(a), tvm.nd.array(b), c)
    np.testing.assert_allclose(c.numpy(), a.astype(np.float64) @ b, rtol=1e-5, atol=1e-5)
