"""Tensor-core intrinsics (ember.tir.tensor_core): emulated against numpy, compiled by NVRTC.

Tolerance: inputs are exact fp16/bf16/tf32 values, products are exact and sums are float32
(as on the tensor cores), so against a float64 reference on the same inputs the error of a
K-long dot product is below K * 2^-24 * sum |a b| (about 1e-5 here): rtol = atol = 1e-4.
With a float16 accumulator each mma rounds to fp16 (2^-11 relative): atol = 0.05.
"""

from __future__ import annotations

import importlib.util

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ember.codegen_cuda.emulator import emulate
from ember.codegen_cuda.printer_cuda import print_kernel
from ember.errors import ArgumentError, InternalError, RaceError
from ember.tir import expr as E
from ember.tir import tensor_core as tc
from ember.tir.bf16 import bf16_to_float32, float32_to_bf16
from ember.tir.ir_builder import IRBuilder
from tests.codegen_cuda import tensor_core_kernels as K
from tests.nightly import examples

TOL = {"float32": 1e-4, "float16": 5e-2}


def _inputs(rng, n: int, dtype: str) -> tuple[np.ndarray, np.ndarray]:
    """(array passed to the kernel, its exact values as float64)."""
    x = rng.standard_normal(n).astype(np.float32)
    if dtype == "float16":
        arr = x.astype(np.float16)
        return arr, arr.astype(np.float64)
    if dtype == "bfloat16":
        bits = float32_to_bf16(x)
        return bits, bf16_to_float32(bits).astype(np.float64)
    arr = (x.view(np.uint32) & np.uint32(0xFFFFE000)).view(np.float32)  # tf32 values
    return arr, arr.astype(np.float64)


@pytest.mark.parametrize(
    "shape, in_dtype, acc",
    [
        ("m16n8k16", "float16", "float32"),
        ("m16n8k16", "float16", "float16"),
        ("m16n8k16", "bfloat16", "float32"),
        ("m16n8k8", "tf32", "float32"),
    ],
)
def test_single_mma_matches_numpy(shape, in_dtype, acc):
    k = 16 if shape == "m16n8k16" else 8
    rng = np.random.default_rng(1)
    a, a64 = _inputs(rng, 16 * k, in_dtype)
    b, b64 = _inputs(rng, k * 8, in_dtype)
    c = rng.standard_normal(128).astype(acc)
    d = np.zeros(128, acc)
    emulate(K.single_mma(in_dtype, acc, shape), a, b, c, d)
    ref = a64.reshape(16, k) @ b64.reshape(k, 8) + c.astype(np.float64).reshape(16, 8)
    np.testing.assert_allclose(d.reshape(16, 8), ref, rtol=TOL[acc], atol=TOL[acc])


def test_tf32_drops_the_low_mantissa_bits():
    """A float32 that is not a tf32 value multiplies as its truncation."""
    a = np.zeros(128, np.float32)
    b = np.zeros(64, np.float32)
    a[0] = 1.0 + 2.0**-20  # below tf32's 10 mantissa bits
    b[0] = 1.0
    d = np.zeros(128, np.float32)
    emulate(K.single_mma("tf32", "float32", "m16n8k8"), a, b, np.zeros(128, np.float32), d)
    assert d[0] == 1.0


GEMM_SHAPES = [(64, 64, 64), (128, 64, 64), (64, 128, 128)]


@pytest.mark.parametrize("M, N, Kd", GEMM_SHAPES)
@pytest.mark.parametrize("layout", ["plain", "pad", "swizzle"])
def test_ldmatrix_gemm_matches_numpy(M, N, Kd, layout):
    rng = np.random.default_rng(M + N + Kd)
    a, a64 = _inputs(rng, M * Kd, "float16")
    b, b64 = _inputs(rng, Kd * N, "float16")
    c = np.full(M * N, np.nan, np.float32)
    emulate(K.ldmatrix_gemm(M, N, Kd, layout), a, b, c)
    ref = a64.reshape(M, Kd) @ b64.reshape(Kd, N)
    np.testing.assert_allclose(c.reshape(M, N), ref, rtol=1e-4, atol=1e-4)


def test_ldmatrix_gemm_bf16():
    rng = np.random.default_rng(5)
    a, a64 = _inputs(rng, 64 * 64, "bfloat16")
    b, b64 = _inputs(rng, 64 * 64, "bfloat16")
    c = np.zeros(64 * 64, np.float32)
    emulate(K.ldmatrix_gemm(64, 64, 64, "swizzle", dtype="bfloat16"), a, b, c)
    np.testing.assert_allclose(c.reshape(64, 64), a64.reshape(64, 64) @ b64.reshape(64, 64),
                               rtol=1e-4, atol=1e-4)  # fmt: skip


@pytest.mark.parametrize(
    "M, N, Kd, dtype, acc",
    [
        (64, 64, 64, "float16", "float32"),
        (128, 64, 32, "float16", "float32"),
        (64, 128, 48, "float16", "float16"),
        (64, 64, 64, "bfloat16", "float32"),
    ],
)
def test_wmma_gemm_matches_numpy(M, N, Kd, dtype, acc):
    rng = np.random.default_rng(M * 3 + Kd)
    a, a64 = _inputs(rng, M * Kd, dtype)
    b, b64 = _inputs(rng, Kd * N, dtype)
    c = np.full(M * N, np.nan, acc)
    emulate(K.wmma_gemm(M, N, Kd, dtype, acc), a, b, c)
    ref = a64.reshape(M, Kd) @ b64.reshape(Kd, N)
    np.testing.assert_allclose(c.reshape(M, N), ref, rtol=TOL[acc], atol=TOL[acc])


# -- mutations: each mistake is caught --------------------------------------------------------
def _gemm_inputs():
    rng = np.random.default_rng(7)
    a, a64 = _inputs(rng, 64 * 64, "float16")
    b, b64 = _inputs(rng, 64 * 64, "float16")
    return a, b, a64.reshape(64, 64) @ b64.reshape(64, 64)


@pytest.mark.parametrize("mutate", ["swap_a", "swizzle_one_side"])
def test_wrong_fragment_mapping_gives_wrong_result(mutate):
    a, b, ref = _gemm_inputs()
    c = np.zeros(64 * 64, np.float32)
    emulate(K.ldmatrix_gemm(64, 64, 64, "swizzle", mutate=mutate), a, b, c)
    assert np.abs(c.reshape(64, 64) - ref).max() > 1.0


def test_missing_barrier_before_ldmatrix_is_a_race():
    a, b, _ = _gemm_inputs()
    with pytest.raises(RaceError, match="A_shared|B_shared"):
        emulate(K.ldmatrix_gemm(64, 64, 64, "swizzle", barrier=False), a, b, np.zeros(4096, "f4"))


def test_cp_async_stage_then_ldmatrix():
    """Copies land at the wait; without it ldmatrix reads shared memory still in flight."""
    a, b, ref = _gemm_inputs()
    c = np.zeros(64 * 64, np.float32)
    emulate(K.ldmatrix_gemm(64, 64, 64, "swizzle", copy="async"), a, b, c)
    np.testing.assert_allclose(c.reshape(64, 64), ref, rtol=1e-4, atol=1e-4)
    with pytest.raises(RaceError):
        emulate(K.ldmatrix_gemm(64, 64, 64, "swizzle", copy="async_nowait"), a, b, c)
    with pytest.raises(RaceError):
        emulate(K.ldmatrix_gemm(64, 64, 64, "swizzle", copy="async", barrier=False), a, b, c)


@pytest.mark.parametrize("kernel", ["ldmatrix", "wmma"])
def test_device_passes_see_tensor_core_pointers(kernel):
    """split_host_device passes C (written only by wmma's store) to the kernel, and
    inject_sync puts the missing barrier before ldmatrix / load_matrix_sync."""
    from ember.codegen_cuda.transform.inject_sync import inject_sync
    from ember.codegen_cuda.transform.split_host_device import split_host_device
    from ember.tir.stmt import PrimFunc

    build = K.ldmatrix_gemm if kernel == "ldmatrix" else K.wmma_gemm
    raw = build(64, 64, 64, barrier=False)
    host = PrimFunc("gemm", raw.params, raw.body, ())
    (device,) = split_host_device(host).kernels
    assert [b.name for b in device.buffers] == ["A", "B", "C"]
    a, b, ref = _gemm_inputs()
    c = np.zeros(64 * 64, np.float32)
    with pytest.raises(RaceError):
        emulate(device, a, b, c)
    synced = inject_sync(device)
    assert "__syncthreads" in print_kernel(synced)
    emulate(synced, a, b, c)
    np.testing.assert_allclose(c.reshape(64, 64), ref, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize(
    "layout, conflicted", [("plain", True), ("pad", False), ("swizzle", False)]
)
def test_ldmatrix_bank_conflicts(layout, conflicted):
    a, b, _ = _gemm_inputs()
    prof = emulate(K.ldmatrix_gemm(64, 64, 64, layout), a, b, np.zeros(4096, "f4"), profile=True)
    # 4 warps x 4 k-steps x 4 ldmatrix.x4, one request each
    assert sum(s.requests for s in prof.ldmatrix.values()) == 64
    if conflicted:  # 8 rows 128 bytes apart share their banks: 7 extra wavefronts per phase
        assert prof.ldmatrix_bank_conflicts == 64 * 4 * 7
    else:
        assert prof.ldmatrix_bank_conflicts == 0
    assert "ldmatrix" in str(prof)


# -- warp-collective rules --------------------------------------------------------------------
def _one_warp(body, threads: int = 32, guard: int = 0):
    ib = IRBuilder()
    out = ib.param((64,), "float32", name="out")
    with ib.for_range(0, 1, kind="thread_binding", thread_tag="blockIdx.x", name="bx"):
        with ib.for_range(0, threads, kind="thread_binding", thread_tag="threadIdx.x") as tx:
            fa = ib.allocate((8,), "float16", scope="local", name="fa")
            fb = ib.allocate((4,), "float16", scope="local", name="fb")
            fc = ib.allocate((4,), "float32", scope="local", name="fc")
            for buf, n in ((fa, 8), (fb, 4), (fc, 4)):
                for r in range(n):
                    ib.store(buf, r, E.const(0.0, buf.dtype))
            if guard:
                with ib.if_then_else(tx < guard):
                    body(ib, fa, fb, fc)
            else:
                body(ib, fa, fb, fc)
            ib.store(out, tx, fc[0])
    return ib.get_func("warp", attrs=(("kernel", True), ("launch", ((1, 1, 1), (threads, 1, 1)))))


def _mma(ib, fa, fb, fc):
    ib.evaluate(tc.ptx_mma("m16n8k16", "float16", "float32", fa, 0, fb, 0, fc, 0))


@pytest.mark.parametrize("threads, guard", [(32, 16), (48, 0)])
def test_mma_needs_the_whole_warp(threads, guard):
    with pytest.raises(RaceError, match="mma.sync with a partial warp"):
        emulate(_one_warp(_mma, threads, guard), np.zeros(64, np.float32))


def test_mma_in_whole_warps_of_a_branch():
    """A thread-dependent branch that keeps whole warps is fine: warp 1 does not run it."""

    def body(ib, fa, fb, fc):
        for buf, n in ((fa, 8), (fb, 4)):
            for r in range(n):
                ib.store(buf, r, E.const(1.0, "float16"))
        _mma(ib, fa, fb, fc)

    out = np.full(64, -1.0, np.float32)
    emulate(_one_warp(body, 64, 32), out)
    np.testing.assert_array_equal(out, [16.0] * 32 + [0.0] * 32)  # k = 16 ones


def test_wmma_fragment_is_opaque():
    ib = IRBuilder()
    out = ib.param((32,), "float32", name="out")
    with ib.for_range(0, 1, kind="thread_binding", thread_tag="blockIdx.x"):
        with ib.for_range(0, 32, kind="thread_binding", thread_tag="threadIdx.x") as tx:
            acc = ib.allocate((256,), "float32", scope="wmma.accumulator", name="acc")
            ib.evaluate(tc.tvm_fill_fragment(acc, 0, 1.0))
            ib.store(out, tx, acc[tx])
    func = ib.get_func("peek", attrs=(("kernel", True), ("launch", ((1, 1, 1), (32, 1, 1)))))
    with pytest.raises(ArgumentError, match="opaque"):
        emulate(func, np.zeros(32, np.float32))


# -- ldmatrix lane layout, property-tested ----------------------------------------------------
def _ldmatrix_kernel(trans: bool, num: int, shift: int = 0):
    ib = IRBuilder()
    X = ib.param((256,), "float16", name="X")
    rows = ib.param((32,), "int32", name="rows")
    out = ib.param((32 * 2 * num,), "float16", name="out")
    with ib.for_range(0, 1, kind="thread_binding", thread_tag="blockIdx.x"):
        S = ib.allocate((256,), "float16", scope="shared", name="S")
        with ib.for_range(0, 32, kind="thread_binding", thread_tag="threadIdx.x") as tx:
            with ib.for_range(0, 8, name="i") as i:
                ib.store(S, i * 32 + tx, X[i * 32 + tx])
            ib.barrier()
            L = ib.allocate((2 * num,), "float16", scope="local", name="L")
            ib.evaluate(tc.ptx_ldmatrix(trans, num, L, 0, S, rows[tx] * 8 + shift))
            for r in range(2 * num):
                ib.store(out, tx * 2 * num + r, L[r])
    return ib.get_func("ldm", attrs=(("kernel", True), ("launch", ((1, 1, 1), (32, 1, 1)))))


@settings(max_examples=examples(12), deadline=None)
@given(
    trans=st.booleans(),
    num=st.sampled_from([1, 2, 4]),
    rows=st.lists(st.integers(0, 31), min_size=32, max_size=32),
)
def test_ldmatrix_layout_property(trans, num, rows):
    """Lane l receives, from matrix i (rows addressed by lanes 8i..8i+7), row l // 4 and
    columns 2 (l % 4) + j; transposed: rows 2 (l % 4) + j of column l // 4 (PTX ISA)."""
    x = np.arange(256, dtype=np.float16)
    out = np.zeros(32 * 2 * num, np.float16)
    emulate(_ldmatrix_kernel(trans, num), x, np.array(rows, np.int32), out)
    got = out.reshape(32, num, 2)
    for lane in range(32):
        for i in range(num):
            m = [x[rows[8 * i + r] * 8 : rows[8 * i + r] * 8 + 8] for r in range(8)]
            for j in range(2):
                a, b = lane // 4, 2 * (lane % 4) + j
                assert got[lane, i, j] == (m[b][a] if trans else m[a][b])


def test_ldmatrix_misaligned_row_is_an_error():
    x = np.zeros(256, np.float16)
    with pytest.raises(ArgumentError, match="16-byte aligned"):
        emulate(
            _ldmatrix_kernel(False, 1, 4), x, np.full(32, 1, np.int32), np.zeros(64, np.float16)
        )


# -- builders check their operands ------------------------------------------------------------
def test_builders_reject_bad_operands():
    ib = IRBuilder()
    fa = ib.allocate((8,), "float16", scope="local", name="fa")
    fc = ib.allocate((4,), "float32", scope="local", name="fc")
    sh = ib.allocate((64,), "float16", scope="shared", name="sh")
    with pytest.raises(ArgumentError, match="supported"):
        tc.ptx_mma("m16n8k32", "float16", "float32", fa, 0, fa, 0, fc, 0)
    with pytest.raises(ArgumentError, match="bfloat16 inputs and float16"):
        tc.ptx_mma("m16n8k16", "bfloat16", "float16", fa, 0, fa, 0, fc, 0)
    with pytest.raises(ArgumentError, match="dtype"):
        tc.ptx_mma("m16n8k16", "float16", "float32", fa, 0, fa, 0, fa, 0)
    with pytest.raises(ArgumentError, match="scope"):
        tc.ptx_ldmatrix(False, 4, fa, 0, fa, 0)
    with pytest.raises(ArgumentError, match="num"):
        tc.ptx_ldmatrix(False, 3, fa, 0, sh, 0)
    with pytest.raises(ArgumentError, match="multiple of 8"):
        tc.ptx_ldmatrix(False, 4, fa, 0, sh, 4)
    with pytest.raises(ArgumentError, match="m16n16k16"):
        tc._mnk(8, 32, 16, "wmma")


def test_other_engines_refuse_tensor_core_calls():
    from ember.tir.interp.closures import ExprCompilerBase, Scope

    ib = IRBuilder()
    fa = ib.allocate((8,), "float16", scope="local", name="fa")
    fc = ib.allocate((4,), "float32", scope="local", name="fc")
    call = tc.ptx_mma("m16n8k16", "float16", "float32", fa, 0, fa, 0, fc, 0)
    with pytest.raises(InternalError, match="tensor-core"):
        ExprCompilerBase(Scope()).compile(call)


# -- CUDA C ---------------------------------------------------------------------------------
KERNELS = {
    "mma_f16": lambda: K.single_mma("float16", "float32"),
    "mma_f16acc": lambda: K.single_mma("float16", "float16"),
    "mma_bf16": lambda: K.single_mma("bfloat16", "float32"),
    "mma_tf32": lambda: K.single_mma("tf32", "float32", "m16n8k8"),
    "ldmatrix_gemm": lambda: K.ldmatrix_gemm(64, 64, 64, "swizzle"),
    "ldmatrix_gemm_async": lambda: K.ldmatrix_gemm(64, 64, 64, "pad", copy="async"),
    "wmma_gemm": lambda: K.wmma_gemm(64, 64, 64),
    "wmma_gemm_f16acc": lambda: K.wmma_gemm(64, 64, 64, "float16", "float16"),
    "wmma_gemm_bf16": lambda: K.wmma_gemm(64, 64, 64, "bfloat16", "float32"),
    "wmma_col_major": lambda: K.wmma_single("col_major", "col_major"),
}


def test_printed_ptx():
    src = print_kernel(K.ldmatrix_gemm(64, 64, 64, "swizzle"))
    assert "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32" in src
    assert "ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16" in src
    assert "ldmatrix.sync.aligned.m8n8.x4.shared.b16" in src
    assert "__cvta_generic_to_shared" in src
    wsrc = print_kernel(K.wmma_gemm(64, 64, 64))
    assert "#include <mma.h>" in wsrc
    assert "fragment<nvcuda::wmma::matrix_b, 16, 16, 16, half, nvcuda::wmma::row_major>" in wsrc
    assert "float* __restrict__ C" in wsrc and "const float* __restrict__ C" not in wsrc


@pytest.mark.nvrtc
@pytest.mark.parametrize("arch", ["sm_80", "sm_90"])
@pytest.mark.parametrize("name", sorted(KERNELS))
def test_nvrtc_compiles_without_spills(name, arch):
    pytest.importorskip("cuda.bindings.nvrtc")
    from ember.codegen_cuda.nvrtc import compile_cuda

    func = KERNELS[name]()
    usage = compile_cuda(print_kernel(func), arch).resources[func.name]
    assert usage.spill_bytes == 0 and usage.local_bytes == 0, usage
    assert usage.registers <= 128


@pytest.mark.parametrize("kernel", ["ldmatrix", "wmma"])
def test_full_cuda_build(kernel):
    """The target-independent passes and the CUDA pass list (split_host_device, inject_sync,
    verify_gpu) carry tensor-core kernels through unchanged in meaning."""
    from ember.codegen_cuda.build import build_cuda
    from ember.target import Target
    from ember.tir.stmt import PrimFunc
    from ember.tir.transform.context import PassContext
    from ember.tir.transform.pipeline import default_passes, run_passes

    build = K.ldmatrix_gemm if kernel == "ldmatrix" else K.wmma_gemm
    raw = build(64, 128, 64, barrier=False)
    ctx = PassContext.current()
    lowered = run_passes(PrimFunc("gemm", raw.params, raw.body, ()), default_passes(ctx), ctx)
    mod = build_cuda(lowered, Target("cuda"))
    (program,) = mod.programs.values()
    (device,) = program.kernels
    rng = np.random.default_rng(11)
    a, a64 = _inputs(rng, 64 * 64, "float16")
    b, b64 = _inputs(rng, 64 * 128, "float16")
    c = np.zeros(64 * 128, np.float32)
    emulate(device, a, b, c)
    ref = a64.reshape(64, 64) @ b64.reshape(64, 128)
    np.testing.assert_allclose(c.reshape(64, 128), ref, rtol=1e-4, atol=1e-4)
    if importlib.util.find_spec("cuda") is not None:  # NVRTC installed
        assert mod.resource_usage()["gemm_kernel"].spill_bytes == 0


@settings(max_examples=examples(6), deadline=None)
@given(
    mt=st.integers(1, 2),
    nt=st.integers(1, 2),
    k16=st.integers(1, 5),
    route=st.sampled_from(["wmma", "plain", "pad"]),
    seed=st.integers(0, 2**16),
)
def test_gemm_property(mt, nt, k16, route, seed):
    """Any tile-multiple shape, either route, random data: the product numpy computes."""
    M, N, Kd = 64 * mt, 64 * nt, 16 * k16
    rng = np.random.default_rng(seed)
    a, a64 = _inputs(rng, M * Kd, "float16")
    b, b64 = _inputs(rng, Kd * N, "float16")
    c = np.zeros(M * N, np.float32)
    func = K.wmma_gemm(M, N, Kd) if route == "wmma" else K.ldmatrix_gemm(M, N, Kd, route)
    emulate(func, a, b, c)
    ref = a64.reshape(M, Kd) @ b64.reshape(Kd, N)
    np.testing.assert_allclose(c.reshape(M, N), ref, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("a_layout", ["row_major", "col_major"])
@pytest.mark.parametrize("b_layout", ["row_major", "col_major"])
def test_wmma_layouts_and_accumulator_load(a_layout, b_layout):
    """D = A @ B + C, A and B read in either layout, C loaded, D stored column-major."""
    func = K.wmma_single(a_layout, b_layout)
    rng = np.random.default_rng(3)
    a, a64 = _inputs(rng, 256, "float16")
    b, b64 = _inputs(rng, 256, "float16")
    c = rng.standard_normal(256).astype(np.float32)
    d = np.zeros(256, np.float32)
    emulate(func, a, b, c, d)
    ma = a64.reshape(16, 16) if a_layout == "row_major" else a64.reshape(16, 16).T
    mb = b64.reshape(16, 16) if b_layout == "row_major" else b64.reshape(16, 16).T
    ref = ma @ mb + c.reshape(16, 16)
    np.testing.assert_allclose(d.reshape(16, 16).T, ref, rtol=1e-4, atol=1e-4)
    src = print_kernel(func)
    assert f"nvcuda::wmma::{a_layout}> fa[1]" in src
    assert "load_matrix_sync(fc[0], C, 16, nvcuda::wmma::mem_row_major)" in src
    assert "nvcuda::wmma::mem_col_major" in src


@pytest.mark.parametrize(
    "shape, in_dtype", [("m16n8k16", "float16"), ("m16n8k16", "bfloat16"), ("m16n8k8", "tf32")]
)
def test_lane_coords_agree_with_the_layout_table(shape, in_dtype):
    spec = tc.mma_spec(shape, in_dtype, "float32")
    for operand, n in (("a", spec.a_elems), ("b", spec.b_elems), ("c", spec.c_elems)):
        rows, cols = tc.mma_layout(spec, operand)
        got = [[tc.lane_coords(spec, operand, lane, r) for r in range(n)] for lane in range(32)]
        assert np.array_equal(np.array(got), np.stack([rows, cols], axis=-1))
        # every element of the matrix is held by exactly one (lane, register)
        shape_ = {"a": (spec.m, spec.k), "b": (spec.k, spec.n), "c": (spec.m, spec.n)}[operand]
        hits = np.zeros(shape_, int)
        np.add.at(hits, (rows, cols), 1)
        assert (hits == 1).all()
    tx = E.Var("tx", "int32")
    row, col = tc.lane_coords(spec, "c", tx % 32, 3)
    assert isinstance(row, E.PrimExpr) and isinstance(col, E.PrimExpr)
