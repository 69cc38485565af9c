"""The emulator computes what the printed CUDA C says, operator by operator (issue 22, item 28).

One kernel applies every math function the CUDA printer can print (``expf``, ``fmaxf``,
``__hmax``, ``copysignf``, ...) to every pair of special values: NaN, ±Inf, ±0.0,
denormals (which CUDA C keeps without ``-ftz``/fast-math) and ordinary numbers. The
printed source is compiled by the host's C++ compiler (``host_cuda.py``), whose C math
library is the independent reference for the C meaning of each name; the same kernel runs
in the SIMT emulator. They must agree: the same NaN-ness, the same infinities, the same
sign of zero, the same denormals, and ordinary values within a few ulps (CUDA's and
glibc's transcendental functions are not correctly rounded).
"""

from __future__ import annotations

import numpy as np
import pytest

from ember.codegen_cuda.emulator import emulate
from ember.tir import expr as E
from ember.tir import op as tir_op
from ember.tir import stmt as S
from ember.tir.bf16 import bf16_to_float32, float32_to_bf16
from ember.tir.ir_builder import IRBuilder
from tests.codegen_cuda import handmade_kernels as K
from tests.codegen_cuda.host_cuda import have_compiler, run_on_host

pytestmark = pytest.mark.skipif(not have_compiler(), reason="needs g++ to run kernels on the host")

I = E.Intrinsic  # noqa: E741
# the printed name's meaning is exact (no rounding freedom): results must match bit for bit
EXACT = {I.ABS, I.FLOOR, I.CEIL, I.TRUNC, I.ROUND, I.NEARBYINT, I.COPYSIGN, I.FMOD, I.SQRT}
EXACT |= {"min", "max", "truncmod"}
# ops whose result for zeros of different sign C leaves open (fmax(+0, -0)); the GPU's
# answer is pinned by test_item_28_fmax_fmin_as_a_gpu_computes_them
SIGNED_ZERO_FREE = {"min", "max"}
OPS = (*K.INTRINSIC_OPS, I.ISNAN, I.ISINF, I.ISFINITE)


def _specials(dtype: str) -> np.ndarray:
    info = np.finfo(dtype)
    tiny = info.smallest_subnormal
    values = [np.nan, -np.nan, np.inf, -np.inf, 0.0, -0.0, tiny, -tiny * 3, info.tiny / 2]
    values += [info.tiny, info.max, -info.max, 1.0, -1.0, 0.5, -2.5, 3.75, 1e-3]
    return np.array(values, dtype)


def _kernel(dtype: str, n: int) -> S.PrimFunc:
    """``Y[k*n + t] = op_k(A[t], B[t])`` for every op of :data:`OPS` (results as floats)."""
    ib = IRBuilder()
    A = ib.param((n,), dtype, name="A")
    B = ib.param((n,), dtype, name="B")
    Y = ib.param((len(OPS) * n,), dtype, name="Y")
    with K._bind(ib, 1, "blockIdx.x", "bx"), K._bind(ib, n, "threadIdx.x", "tx") as tx:
        x, y = A[tx], B[tx]
        for k, op in enumerate(OPS):
            if op in (I.ISNAN, I.ISINF, I.ISFINITE):
                one, zero = E.const(1.0, dtype), E.const(0.0, dtype)
                test = {I.ISNAN: tir_op.isnan, I.ISINF: tir_op.isinf}.get(op, tir_op.isfinite)
                value = E.select(test(x), one, zero)
            else:
                value = K.apply_op(op, x, y)
            ib.store(Y, k * n + tx, value)
    return K._kernel(ib, f"c_math_{dtype}", (1,), (n,))


def _agree(
    op: object, got: np.ndarray, want: np.ndarray, a: np.ndarray, b: np.ndarray, bf16: bool
) -> list:
    """The pairs (a, b, emulated, C) where the emulator's value is not the C one."""
    bad = []
    rtol = {2: 2e-3, 4: 4e-6, 8: 1e-13}[got.dtype.itemsize]
    rtol = 1e-2 if bf16 else rtol
    for g, w, x, y in zip(got.tolist(), want.tolist(), a.tolist(), b.tolist()):
        if np.isnan(w) or np.isnan(g):
            ok = np.isnan(w) and np.isnan(g)
        elif op in SIGNED_ZERO_FREE and x == 0 and y == 0:
            ok = g == 0 and (np.signbit(g) in (np.signbit(x), np.signbit(y)))
        elif op in EXACT or np.isinf(w) or np.isinf(g) or w == 0 or g == 0:
            ok = g == w and np.signbit(g) == np.signbit(w)
        else:
            ok = abs(g - w) <= rtol * abs(w)
        if not ok:
            bad.append((x, y, g, w))
    return bad


@pytest.mark.parametrize("dtype", ["float32", "float64", "float16", "bfloat16"])
def test_item_28_printed_math_matches_emulated_meaning(tmp_path, dtype):
    bf16 = dtype == "bfloat16"
    s = _specials("float32" if bf16 else dtype)
    a, b = (v.ravel().copy() for v in np.meshgrid(s, s, indexing="ij"))
    if bf16:  # bfloat16 travels as its bits; tiny/2 and smaller round to bfloat16's own
        a, b = float32_to_bf16(a), float32_to_bf16(b)
    n = a.size
    func = _kernel(dtype, n)
    store = "uint16" if bf16 else dtype
    on_host = np.zeros(len(OPS) * n, store)
    run_on_host(func, [a, b, on_host], tmp_path)
    emulated = np.zeros(len(OPS) * n, store)
    with np.errstate(all="ignore"):
        emulate(func, a, b, emulated)
    if bf16:
        a, b, on_host, emulated = map(bf16_to_float32, (a, b, on_host, emulated))
    failures = {}
    for k, op in enumerate(OPS):
        rows = slice(k * n, (k + 1) * n)
        bad = _agree(op, emulated[rows], on_host[rows], a, b, bf16)
        if bad:
            failures[str(op)] = bad[:4]
    assert not failures, f"emulator != printed C on {dtype}: (a, b, emulated, C) {failures}"


@pytest.mark.parametrize("dtype", ["float32", "float64", "float16"])
def test_item_28_fmax_fmin_as_a_gpu_computes_them(dtype):
    """fmaxf/fminf (fmax/fmin, __hmax/__hmin) as an H200 computed them (sm_90, nvcc 13.0,
    no fast-math; a one-off run, numbers written down here): a NaN operand is dropped, NaN
    only from two; of two zeros max is +0.0 and min -0.0 in either order; denormals kept."""
    tiny = float(np.finfo(dtype).smallest_subnormal)
    a = np.array([np.nan, 1.0, np.nan, tiny, 0.0, -0.0, -0.0, 0.0], dtype)
    b = np.array([2.0, np.nan, np.nan, 0.0, -0.0, 0.0, -0.0, 0.0], dtype)
    n = a.size
    ib = IRBuilder()
    A = ib.param((n,), dtype, name="A")
    B = ib.param((n,), dtype, name="B")
    Y = ib.param((2 * n,), dtype, name="Y")
    with K._bind(ib, 1, "blockIdx.x", "bx"), K._bind(ib, n, "threadIdx.x", "tx") as tx:
        ib.store(Y, tx, E.max_(A[tx], B[tx]))
        ib.store(Y, n + tx, E.min_(A[tx], B[tx]))
    y = np.zeros(2 * n, dtype)
    emulate(K._kernel(ib, f"fmax_facts_{dtype}", (1,), (n,)), a, b, y)
    want_max = np.array([2.0, 1.0, np.nan, tiny, 0.0, 0.0, -0.0, 0.0], dtype)
    want_min = np.array([2.0, 1.0, np.nan, 0.0, -0.0, -0.0, -0.0, 0.0], dtype)
    np.testing.assert_array_equal(y[:n], want_max)
    np.testing.assert_array_equal(y[n:], want_min)
    np.testing.assert_array_equal(np.signbit(y), np.signbit(np.concatenate([want_max, want_min])))


def test_item_28_table_covers_every_printed_math_function():
    """A math function the printer learns to print is checked above, or this fails."""
    from ember.codegen_cuda.printer_cuda import FLOAT_MIN_MAX, MATH_NAMES

    assert set(MATH_NAMES) <= set(OPS), set(MATH_NAMES) - set(OPS)
    assert set(FLOAT_MIN_MAX) == {"float32", "float64", "float16", "bfloat16"}
    assert {"min", "max"} <= set(OPS)
