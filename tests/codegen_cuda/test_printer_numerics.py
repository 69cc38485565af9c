"""Printed CUDA C computes what numpy computes: kernels run on the host through a C++ shim.

See ``host_cuda.py``: barrier-free kernels are compiled with g++ and run thread by
thread, so expressions, casts, intrinsics, floor division and vector lanes are
checked numerically on machines without a GPU.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ember.tir import expr as E
from ember.tir.bf16 import bf16_to_float32, float32_to_bf16
from ember.tir.ir_builder import IRBuilder
from tests.codegen_cuda import handmade_kernels as K
from tests.codegen_cuda.host_cuda import have_compiler, run_on_host
from tests.nightly import examples

pytestmark = pytest.mark.skipif(not have_compiler(), reason="needs g++ to run kernels on the host")


@pytest.mark.parametrize(("n", "threads"), [(1000, 128), (77, 32), (256, 64)])
def test_elementwise(rng, tmp_path, n, threads):
    a = rng.uniform(-2, 2, n).astype("float32")
    b = np.full(n, np.nan, "float32")
    run_on_host(K.elementwise(n, threads), [a, b], tmp_path)
    np.testing.assert_allclose(b, a * 2 + 1, rtol=1e-6)


@pytest.mark.parametrize(("lanes", "dtype", "offset"), [(4, "float32", 0), (4, "float32", 1)])
def test_vector_copy(rng, tmp_path, lanes, dtype, offset):
    n = 256
    a = rng.uniform(-2, 2, n + offset).astype(dtype)
    b = np.full(n, np.nan, dtype)
    run_on_host(K.vector_copy(n, lanes, dtype, offset), [a, b], tmp_path)
    np.testing.assert_array_equal(b, a[offset:] * 2)


def test_vector_half8(rng, tmp_path):
    n = 256
    a = rng.uniform(-2, 2, n).astype("float16")
    b = np.full(n, np.nan, "float16")
    run_on_host(K.vector_copy(n, 8, "float16"), [a, b], tmp_path)
    np.testing.assert_array_equal(b, a * np.float16(2))


def test_strided_gather(rng, tmp_path):
    a = rng.uniform(-2, 2, 512).astype("float32")
    b = np.full(256, np.nan, "float32")
    run_on_host(K.strided_gather(256), [a, b], tmp_path)
    np.testing.assert_array_equal(b, a[::2])


I = E.Intrinsic  # noqa: E741
# numpy meaning of each output of K.intrinsics: f(x, y), y being x reversed
_REFERENCE = {
    I.EXP: lambda x, y: np.exp(x),
    I.LOG: lambda x, y: np.log(x),
    I.SQRT: lambda x, y: np.sqrt(x),
    I.RSQRT: lambda x, y: 1 / np.sqrt(x),
    I.TANH: lambda x, y: np.tanh(x),
    I.ERF: lambda x, y: np.vectorize(math.erf)(x),
    I.SIGMOID: lambda x, y: 1 / (1 + np.exp(-x)),
    I.ABS: lambda x, y: np.abs(x),
    I.FLOOR: lambda x, y: np.floor(x),
    I.CEIL: lambda x, y: np.ceil(x),
    I.ROUND: lambda x, y: np.trunc(x + np.copysign(0.5, x)),  # halves away from zero
    I.NEARBYINT: lambda x, y: np.rint(x),  # halves to even
    I.TRUNC: lambda x, y: np.trunc(x),
    I.SIN: lambda x, y: np.sin(x),
    I.COS: lambda x, y: np.cos(x),
    I.TAN: lambda x, y: np.tan(x),
    I.ASIN: lambda x, y: np.arcsin(x),
    I.ACOS: lambda x, y: np.arccos(x),
    I.ATAN: lambda x, y: np.arctan(x),
    I.SINH: lambda x, y: np.sinh(x),
    I.COSH: lambda x, y: np.cosh(x),
    I.ASINH: lambda x, y: np.arcsinh(x),
    I.ACOSH: lambda x, y: np.arccosh(x),
    I.ATANH: lambda x, y: np.arctanh(x),
    I.EXP2: lambda x, y: np.exp2(x),
    I.EXP10: lambda x, y: 10.0**x,
    I.LOG2: lambda x, y: np.log2(x),
    I.LOG10: lambda x, y: np.log10(x),
    I.LOG1P: lambda x, y: np.log1p(x),
    I.FMOD: lambda x, y: np.fmod(x, y),
    I.ATAN2: lambda x, y: np.arctan2(x, y),
    I.HYPOT: lambda x, y: np.hypot(x, y),
    I.COPYSIGN: lambda x, y: np.copysign(x, y),
    I.POW: lambda x, y: np.power(np.abs(x), y),
    I.FMA: lambda x, y: x * y + x,
    "min": np.minimum,
    "max": np.maximum,
    "floordiv": lambda x, y: np.floor(x / y),
    "floormod": lambda x, y: x - np.floor(x / y) * y,
    "truncdiv": lambda x, y: np.trunc(x / y),
    "truncmod": np.fmod,
}


@pytest.mark.parametrize(
    ("dtype", "rtol"), [("float32", 2e-6), ("float64", 1e-12), ("float16", 2e-3)]
)
def test_intrinsics(rng, tmp_path, dtype, rtol):
    n = 256
    x = (rng.uniform(0.3, 3, n) * rng.choice([-1, 1], n)).astype(dtype)
    x[:6] = [0.5, 1.5, 2.5, -0.5, -2.5, 3.5]  # ties: round goes away from zero, rint to even
    ops = K.INTRINSIC_OPS
    out = np.full(len(ops) * n, np.nan, dtype)
    run_on_host(K.intrinsics(dtype, n), [x, out], tmp_path)
    wide = x.astype("float64")
    for k, op in enumerate(ops):
        with np.errstate(all="ignore"):
            want = _REFERENCE[op](wide, wide[::-1]).astype(dtype)
        got = out[k * n : (k + 1) * n].astype("float64")
        np.testing.assert_allclose(got, want, rtol=rtol, atol=rtol, err_msg=f"{op}")


@pytest.mark.parametrize("dtype", ["int32", "int64"])
def test_index_division(rng, tmp_path, dtype):
    n = 300
    a = rng.integers(-1000, 1000, n).astype(dtype)
    a[a == 0] = 5
    b = np.zeros(4 * n, dtype)
    run_on_host(K.index_division(n, dtype), [a, b], tmp_path)
    i = np.arange(n)
    d = (i - 150).astype(dtype)
    np.testing.assert_array_equal(b[:n], d // 7)
    np.testing.assert_array_equal(b[n : 2 * n], d % 7)
    np.testing.assert_array_equal(b[2 * n : 3 * n], a // -3 + a % a[::-1])
    np.testing.assert_array_equal(b[3 * n :], i // 8 + i % 8)


def _gather_kernel(lanes: int, stride: int, offset: int, dtype: str, threads: int):
    ib = IRBuilder()
    A = ib.param((threads * lanes * stride + offset + lanes * stride,), dtype, name="A")
    B = ib.param((threads * lanes,), dtype, name="B")
    with ib.for_range(0, threads, name="t", kind="thread_binding", thread_tag="threadIdx.x") as t:
        src = E.Ramp(f"int32x{lanes}", t * (lanes * stride) + offset, E.const(stride), lanes)
        dst = E.Ramp(f"int32x{lanes}", t * lanes, E.const(1), lanes)
        one = E.Broadcast(f"{dtype}x{lanes}", E.const(1, dtype), lanes)
        ib.store(B, dst, A[src] + one)
    attrs = (("kernel", True), ("launch", ((1, 1, 1), (threads, 1, 1))))
    return ib.get_func(f"gather_{lanes}_{stride}_{offset}_{dtype}", attrs=attrs)


@settings(
    max_examples=examples(12),
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(
    lanes=st.sampled_from([2, 4, 8]),
    stride=st.integers(1, 3),
    offset=st.integers(0, 5),
    dtype=st.sampled_from(["float32", "float16", "int32", "int8"]),
)
def test_vector_accesses_read_the_right_lanes(tmp_path, lanes, stride, offset, dtype):
    threads = 8
    func = _gather_kernel(lanes, stride, offset, dtype, threads)
    rng = np.random.default_rng(lanes * 100 + stride * 10 + offset)
    a = rng.integers(-50, 50, func.params[0].shape[0].value).astype(dtype)
    b = np.zeros(threads * lanes, dtype)
    run_on_host(func, [a, b], tmp_path)
    idx = np.arange(threads)[:, None] * lanes * stride + offset + np.arange(lanes) * stride
    np.testing.assert_array_equal(b, (a[idx.ravel()] + 1).astype(dtype))


def test_bf16_casts(rng, tmp_path):
    n = 256
    x_f32 = rng.uniform(-3, 3, n).astype("float32")
    x = float32_to_bf16(x_f32)
    outs = [np.zeros(n, t) for t in ("float32", "float16", "int8", "bool", "uint16")]
    run_on_host(K.casts(n), [x, *outs], tmp_path)
    f, h, q, z, y = outs
    xv = bf16_to_float32(x)
    np.testing.assert_array_equal(f, xv)
    np.testing.assert_array_equal(h, xv.astype("float16"))
    np.testing.assert_array_equal(q, np.trunc(xv).astype("int8"))
    np.testing.assert_array_equal(z, xv > 0.5)

    def bf(v):
        return bf16_to_float32(float32_to_bf16(v))

    mixed = bf(bf(bf(f) + bf(h.astype("float32"))) + bf(np.arange(n, dtype="float32")))
    want = np.where(z, mixed, bf(q.astype("float32")))
    np.testing.assert_array_equal(bf16_to_float32(y), want)


def test_bf16_intrinsics(rng, tmp_path):
    dtype = "bfloat16"
    n = 256
    x_f32 = (rng.uniform(0.3, 3, n) * rng.choice([-1, 1], n)).astype("float32")
    x = float32_to_bf16(x_f32)
    out = np.zeros(len(K.INTRINSIC_OPS) * n, "uint16")
    run_on_host(K.intrinsics(dtype, n), [x, out], tmp_path)
    wide = bf16_to_float32(x).astype("float64")
    for k, op in enumerate(K.INTRINSIC_OPS):
        with np.errstate(all="ignore"):
            want = _REFERENCE[op](wide, wide[::-1])
        got = bf16_to_float32(out[k * n : (k + 1) * n])
        np.testing.assert_allclose(got, want, rtol=1e-2, atol=1e-2, err_msg=f"{op}")
