"""x86 tensor intrinsics for ``tensorize``: the AVX-512 VNNI int8 dot product.

``dot_16x1x16_uint8_int8_int32()`` declares, with ``te.decl_tensor_intrin``, TVM's
intrinsic of the same name: ``C[i] += sum_k int32(data[k]) * int32(kernel[i, k])``
for 16 lanes ``i`` and 4 steps ``k``, u8 data times s8 kernel accumulated in int32.
One ``vpdpbusd`` (``llvm.x86.avx512.vpdpbusd.512``) does it: the 4 data bytes are
read as one int32 and broadcast to all 16 lanes, the kernel's 64 bytes are one
vector (so ``kernel`` must be dense, its 4 steps innermost), and each lane adds the
4 products of its byte group to its accumulator. The int8 GEMM template
(:mod:`ember.codegen_llvm.schedules.matmul_int8`) tensorizes its inner loop to it.
``has_vnni(target)`` says whether code for ``target`` may use it (for ``-mcpu=native``,
whether the host has it; for a named CPU, whether its known features include it). A
tensorized schedule built for a target without it is still correct: the code
generator expands the intrinsic to generic vector code there.
"""

from __future__ import annotations

import functools

from ember.codegen_llvm.cpu_intrinsics import cpu_facts, needed_features
from ember.tir import expr as E
from ember.tir import stmt as S
from ember.tir.buffer import Buffer
from ember.tir.op import call_llvm_pure_intrin, reinterpret
from ember.tir.te import operation as te
from ember.tir.te.tensor_intrin import TensorIntrin, decl_tensor_intrin

VNNI_LANES = 16  # int32 accumulators of one zmm register
VNNI_GROUP = 4  # u8 x s8 products summed into each accumulator per instruction
VPDPBUSD_512 = "llvm.x86.avx512.vpdpbusd.512"


@functools.cache
def has_vnni(target: str | None = None) -> bool:
    """Whether code for the ``llvm`` ``target`` (None: the host) may use AVX-512 VNNI.

    A portable target (``-mcpu=x86-64-v3``) built on a VNNI host must not: LLVM aborts
    the process on the intrinsic for a CPU without the feature, and the code would not
    run where the target says it runs. Where this is False a VNNI schedule still builds
    (the code generator expands ``vpdpbusd``, :mod:`ember.codegen_llvm.cpu_intrinsics`)
    but runs slower than the generic int8 kernel, so strategies pick by it."""
    try:
        features = cpu_facts(target or "llvm").features
    except RuntimeError:  # LLVM cannot read this CPU's features
        return False
    return features is not None and set(needed_features(VPDPBUSD_512)) <= features


def _ramp(lanes: int, base: int = 0) -> E.PrimExpr:
    return E.Ramp(f"int32x{lanes}", E.const(base), E.const(1), lanes)


def _vnni_step(data: Buffer, kernel: Buffer, out: Buffer, accumulate: bool) -> S.Stmt:
    """``out[0:16] = (out[0:16] or 0) + vpdpbusd(data[0:4] broadcast, kernel[0:16, 0:4])``."""
    lanes = VNNI_LANES
    quad = reinterpret("int32", data[_ramp(VNNI_GROUP)])
    a = reinterpret(f"int8x{lanes * VNNI_GROUP}", E.Broadcast(f"int32x{lanes}", quad, lanes))
    b = kernel[0, _ramp(lanes * VNNI_GROUP)]
    acc = out[_ramp(lanes)] if accumulate else E.Broadcast(f"int32x{lanes}", E.const(0), lanes)
    dot = call_llvm_pure_intrin(f"int32x{lanes}", VPDPBUSD_512, acc, a, b)
    return S.BufferStore(out, dot, (_ramp(lanes),))


def dot_16x1x16_uint8_int8_int32() -> TensorIntrin:
    """TVM's x86 VNNI intrinsic: 16 int32 lanes, each the dot of 4 u8 with 4 s8."""
    data = te.placeholder((VNNI_GROUP,), "uint8", name="data")
    kernel = te.placeholder((VNNI_LANES, VNNI_GROUP), "int8", name="kernel")
    k = te.reduce_axis((0, VNNI_GROUP), name="k")
    C = te.compute(
        (VNNI_LANES,),
        lambda i: te.sum(data[k].astype("int32") * kernel[i, k].astype("int32"), axis=k),
        name="C",
    )

    def fcompute(ins: list[Buffer], outs: list[Buffer]) -> tuple[S.Stmt, S.Stmt, S.Stmt]:
        zero = E.Broadcast(f"int32x{VNNI_LANES}", E.const(0), VNNI_LANES)
        reset = S.BufferStore(outs[0], zero, (_ramp(VNNI_LANES),))
        body = _vnni_step(ins[0], ins[1], outs[0], accumulate=False)
        return body, reset, _vnni_step(ins[0], ins[1], outs[0], accumulate=True)

    return decl_tensor_intrin(C.op, fcompute, name="dot_16x1x16_uint8_int8_int32")
