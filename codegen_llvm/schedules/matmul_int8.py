"""CPU template ``matmul_int8.llvm``: ``C = A @ B`` for u8 A, s8 B and int32 C, on VNNI.

The GEMM of quantized models (ONNX ``MatMulInteger``, whose weights are constants):
the template takes B packed (:func:`pack_b` in numpy, ``tir/topi/int8.py``'s
:func:`pack_int8_weights` in TE, whose compute :func:`int8_gemm` it schedules) as TVM's
x86 int8 dense packs it, ``Bp[N/16, K/4, 16, 4]`` (``tir/topi/int8.py``'s ``GROUP`` and
``LANES`` are VNNI's): for one 16-column panel, each
group of 4 k steps is 64 contiguous bytes, one ``vpdpbusd`` operand, and a
panel's k groups follow each other, so the micro-kernel streams one panel
sequentially (the ``(K/4, N/16, 16, 4)`` order would put a page between
consecutive k groups of a panel). A is padded with zeros to a multiple of 4 in k
where needed and read 4 bytes at a time, broadcast. The partial sums
``Cp[m, N/16, 16]`` are a ``local`` tile of ``mr`` rows x ``nb`` panels computed at
the output's parallel tile loop: the k groups run outermost, the ``mr x nb``
accumulators unrolled inside, and the 16 lanes x 4 steps tensorized to
``dot_16x1x16_uint8_int8_int32`` (:mod:`ember.codegen_llvm.tensor_intrinsics`),
whose ``reset`` zeroes the tile before the k loop. Rows that ``mr`` does not divide
are guarded; columns past N are zero panels never stored. The schedule is the same
for every target; built for one whose CPU lacks VNNI (``-mcpu=x86-64-v3``) the code
generator expands ``vpdpbusd`` to generic vector code
(:mod:`ember.codegen_llvm.cpu_intrinsics`): exact, slower, and it runs there.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ember.codegen_llvm.tensor_intrinsics import (
    VNNI_GROUP,
    VNNI_LANES,
    dot_16x1x16_uint8_int8_int32,
)
from ember.tir.schedule.schedule import Schedule, create_schedule
from ember.tir.te import operation as te
from ember.tir.te.tensor import ComputeOp, Tensor
from ember.tir.topi.int8 import int8_gemm, pack_int8_weights, packed_shape
from ember.tuner.template import get_config, template

__all__ = [
    "define_int8_knobs",
    "int8_gemm",
    "matmul_int8_llvm",
    "pack_b",
    "pack_int8_weights",
    "packed_shape",
    "schedule_int8_gemm",
]


def schedule_int8_gemm(
    s: Schedule, Cp: Tensor, C: Tensor, mr: int, nb: int, copies: bool = True
) -> None:
    """Tiles of ``mr`` rows x ``nb`` panels, in parallel; the VNNI dot innermost. ``C`` is
    the (M, N) output reading ``Cp`` (maybe with an epilogue inlined); ``copies``: also
    parallelize the packing and padding stages (the graph schedules those itself)."""
    m, n = s[C].op.axis
    no, ni = s[C].split(n, factor=VNNI_LANES * nb)
    mo, mi = s[C].split(m, factor=mr)
    s[C].reorder(no, mo, mi, ni)
    nv, lanes = s[C].split(ni, factor=VNNI_LANES)
    s[C].vectorize(lanes)
    tile = s[C].fuse(no, mo)
    s[C].parallel(tile)
    s[Cp].set_scope("local")
    s[Cp].compute_at(s[C], tile)
    cm, cx, cz = s[Cp].op.axis
    g, q = s[Cp].op.reduce_axis
    s[Cp].reorder(g, cm, cx, cz, q)
    s[Cp].unroll(cm)
    s[Cp].unroll(cx)
    s[Cp].tensorize(cz, dot_16x1x16_uint8_int8_int32())
    for st in s.stages if copies else ():
        if isinstance(st.op, ComputeOp) and st.op.name in ("B_packed", "A_padded"):
            st.parallel(st.op.axis[0])


def define_int8_knobs(M: int, N: int) -> tuple[int, int]:
    """``mr`` rows x ``nb`` 16-lane panels of accumulators (default 4 x 4: 16 zmm registers),
    fewer panels where N is narrower."""
    cfg = get_config()
    panels = -(-N // VNNI_LANES)
    cfg.define_knob("mr", [1, 2, 4, 6, 8], default=4 if M >= 4 else 1)
    cfg.define_knob("nb", [1, 2, 3, 4], default=min(4, panels))
    return cfg["mr"].val, cfg["nb"].val


def pack_b(b: Any) -> Any:
    """numpy: B (K, N) int8 -> packed ``Bp[N/16, K/4, 16, 4]`` (zero padded), as the
    template takes it; constant weights are packed once, when the model is compiled."""

    K, N = b.shape
    x, g, _, _ = packed_shape(N, K)
    padded = np.zeros((g * VNNI_GROUP, x * VNNI_LANES), np.int8)
    padded[:K, :N] = b
    return np.ascontiguousarray(padded.reshape(g, VNNI_GROUP, x, VNNI_LANES).transpose(2, 0, 3, 1))


def _reference(a: Any, bp: Any, *, workload: tuple[int, int, int]) -> Any:
    """numpy's int32 ``A @ B``, B unpacked from ``bp``; N comes from the ``workload``
    (M, N, K), since packed B is padded to whole 16-column panels."""

    x, g, lanes, group = bp.shape
    b = bp.transpose(1, 3, 0, 2).reshape(g * group, x * lanes)[: a.shape[1]]
    return (a.astype(np.int32) @ b.astype(np.int32))[:, : workload[1]]


@template("matmul_int8.llvm", reference=_reference)
def matmul_int8_llvm(M: int, N: int, K: int) -> tuple[Schedule, list[Any]]:
    """``C = A @ B`` with A (M, K) uint8, B (K, N) int8 given packed (:func:`pack_b`, shape
    :func:`packed_shape`) and C (M, N) int32."""
    mr, nb = define_int8_knobs(M, N)
    A = te.placeholder((M, K), "uint8", name="A")
    Bp = te.placeholder(packed_shape(N, K), "int8", name="B_packed")
    Cp, C = int8_gemm(A, Bp, M, N, K)
    s = create_schedule(C.op)
    schedule_int8_gemm(s, Cp, C, mr, nb)
    return s, [A, Bp, C]
