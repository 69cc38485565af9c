"""``matmul_int8.llvm``: u8 x s8 -> s32 GEMM tensorized to AVX-512 VNNI, against numpy.

numpy's int32 product of the unpacked operands is the reference, exact. Runs only
where the host has VNNI (``vpdpbusd`` would fault elsewhere); the IR-level checks of
the intrinsic (reinterpret, the LLVM call) run everywhere.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import ember
from ember.codegen_llvm.schedules.matmul_int8 import (
    int8_gemm,
    pack_b,
    pack_int8_weights,
    packed_shape,
    schedule_int8_gemm,
)
from ember.codegen_llvm.tensor_intrinsics import VPDPBUSD_512, has_vnni
from ember.errors import ArgumentError
from ember.tir import expr as E
from ember.tir.op import call_llvm_pure_intrin, reinterpret
from ember.tir.schedule.schedule import create_schedule
from ember.tir.te import operation as te
from tests.codegen_llvm.schedules.template_helpers import sampled_configs, task_of
from tests.nightly import examples

needs_vnni = pytest.mark.skipif(not has_vnni(), reason="host CPU has no AVX-512 VNNI")


def operands(M: int, N: int, K: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    a = rng.integers(0, 256, (M, K), dtype=np.uint8)
    b = rng.integers(-128, 128, (K, N), dtype=np.int8)
    return a, b


def run_template(M: int, N: int, K: int, cfg=None, seed: int = 0, task=None) -> None:  # noqa: ANN001
    task = task or task_of("matmul_int8.llvm", M, N, K)
    s, args = task.instantiate(cfg) if cfg is not None else task.instantiate()
    f = ember.build(s, args, "llvm")
    a, b = operands(M, N, K, seed)
    c = np.full((M, N), -7, np.int32)
    f(a, pack_b(b), c)
    np.testing.assert_array_equal(c, a.astype(np.int32) @ b.astype(np.int32))


@needs_vnni
@pytest.mark.parametrize(
    "shape", [(1, 1, 1), (3, 17, 5), (33, 100, 257), (64, 48, 64), (7, 16, 4), (130, 64, 1029)]
)
def test_int8_gemm_matches_numpy(shape: tuple[int, int, int]) -> None:
    run_template(*shape)


@needs_vnni
def test_int8_gemm_configs() -> None:
    task = task_of("matmul_int8.llvm", 23, 77, 41)
    for cfg in sampled_configs(task, 4, seed=5):
        run_template(23, 77, 41, cfg, seed=cfg.index, task=task)


@needs_vnni
def test_extreme_values() -> None:
    """255 x -128 in every product: the int32 sums of the instruction, not saturated."""
    M, N, K = 4, 16, 64
    task = task_of("matmul_int8.llvm", M, N, K)
    s, args = task.instantiate()
    f = ember.build(s, args, "llvm")
    a = np.full((M, K), 255, np.uint8)
    b = np.full((K, N), -128, np.int8)
    c = np.zeros((M, N), np.int32)
    f(a, pack_b(b), c)
    assert (c == 255 * -128 * K).all()


@needs_vnni
def test_te_packing_of_unpacked_weights() -> None:
    """``pack_int8_weights`` (B packed in TE, for non-constant B) feeding the same GEMM."""
    M, N, K = 9, 40, 22
    A = te.placeholder((M, K), "uint8", name="A")
    B = te.placeholder((K, N), "int8", name="B")
    Bp = pack_int8_weights(B, N, K)
    Cp, C = int8_gemm(A, Bp, M, N, K)
    s = create_schedule(C.op)
    schedule_int8_gemm(s, Cp, C, 2, 2)
    f = ember.build(s, [A, B, C], "llvm")
    a, b = operands(M, N, K, 4)
    c = np.zeros((M, N), np.int32)
    f(a, b, c)
    np.testing.assert_array_equal(c, a.astype(np.int32) @ b.astype(np.int32))


@needs_vnni
@settings(max_examples=examples(8), deadline=None)
@given(M=st.integers(1, 40), N=st.integers(1, 90), K=st.integers(1, 90))
def test_int8_gemm_property(M: int, N: int, K: int) -> None:
    run_template(M, N, K, seed=M * N + K)


def test_tensorized_ir_calls_vpdpbusd() -> None:
    task = task_of("matmul_int8.llvm", 8, 32, 16)
    s, args = task.instantiate()
    text = str(ember.lower(s, args))
    assert VPDPBUSD_512 in text and "C_panels" in text


def test_pack_b_layout() -> None:
    _, b = operands(1, 20, 7, 9)
    bp = pack_b(b)
    assert bp.shape == packed_shape(20, 7) == (2, 2, 16, 4)
    assert bp[1, 1, 2, 2] == b[4 + 2, 16 + 2]
    assert bp[1, 1, 3, 3] == 0 and bp[1, 0, 4, 0] == 0  # past K, past N


def test_reinterpret_and_llvm_intrin_arguments() -> None:
    x = E.Var("x", "int32")
    assert reinterpret("uint8x4", x).dtype == "uint8x4"
    with pytest.raises(ArgumentError, match="width"):
        reinterpret("int8x8", x)
    with pytest.raises(ArgumentError, match="llvm"):
        call_llvm_pure_intrin("int32", "vpdpbusd", x)


def test_reinterpret_on_llvm() -> None:
    """int32 -> 4 bytes and back, through memory: the bits are kept."""
    from ember.tir.ir_builder import IRBuilder

    ib = IRBuilder()
    src = ib.param((4,), "int32", name="src")
    dst = ib.param((16,), "uint8", name="dst")
    with ib.for_range(0, 4, name="i") as i:
        ramp = E.Ramp("int32x4", i * 4, E.const(1), 4)
        ib.store(dst, (ramp,), reinterpret("uint8x4", src[i]))
    f = ember.build(ib.get_func("bits"), target="llvm")
    s = np.random.default_rng(2).integers(-(2**31), 2**31, 4, dtype=np.int64).astype(np.int32)
    d = np.zeros(16, np.uint8)
    f(s, d)
    np.testing.assert_array_equal(d, s.view(np.uint8))
