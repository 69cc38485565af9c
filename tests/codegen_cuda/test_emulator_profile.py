"""emulate(..., profile=True): sectors per warp request and shared bank conflicts, by hand."""

from __future__ import annotations

import numpy as np
import pytest

from ember.codegen_cuda.emulator import emulate
from ember.tir import expr as E
from ember.tir.ir_builder import IRBuilder
from tests.codegen_cuda.handmade_kernels import _bind, _kernel


def _strided_copy(stride: int, n: int = 64):
    """B[t] = A[t * stride]: one warp request per 32 threads."""
    ib = IRBuilder()
    A = ib.param((n * stride,), "float32", name="A")
    B = ib.param((n,), "float32", name="B")
    with _bind(ib, n, "threadIdx.x", "tx") as tx:
        ib.store(B, tx, A[tx * stride])
    return _kernel(ib, "strided", (1, 1, 1), (n, 1, 1)), n * stride, n


def _shared_stride(stride: int):
    """Each of 32 threads writes and reads S[t * stride] of a shared array."""
    ib = IRBuilder()
    A = ib.param((32,), "float32", name="A")
    B = ib.param((32,), "float32", name="B")
    S = ib.allocate((32 * stride,), "float32", scope="shared", name="S")
    with _bind(ib, 32, "threadIdx.x", "tx") as tx:
        ib.store(S, tx * stride, A[tx])
        ib.store(B, tx, S[tx * stride] + E.const(1.0))
    return _kernel(ib, "bank", (1, 1, 1), (32, 1, 1))


@pytest.mark.parametrize("stride,sectors", [(1, 4), (2, 8), (32, 32)])
def test_global_sectors_per_request(rng, stride, sectors):
    kernel, n_in, n_out = _strided_copy(stride)
    a = rng.uniform(-1, 1, n_in).astype("float32")
    b = np.empty(n_out, "float32")
    prof = emulate(kernel, a, b, profile=True)
    np.testing.assert_array_equal(b, a[::stride])
    assert prof.global_load_requests == 2  # 64 threads = 2 warps
    assert prof.global_load_sectors == 2 * sectors
    assert prof.global_store_sectors == 2 * 4
    load_site = next(iter(prof.global_loads))
    assert f"A[tx * {stride}]" in load_site or stride == 1


@pytest.mark.parametrize("stride,extra", [(1, 0), (2, 1), (32, 31), (33, 0)])
def test_shared_bank_conflicts(rng, stride, extra):
    kernel = _shared_stride(stride)
    a = rng.uniform(-1, 1, 32).astype("float32")
    b = np.empty(32, "float32")
    prof = emulate(kernel, a, b, profile=True)
    np.testing.assert_allclose(b, a + 1)
    assert prof.shared_store_requests == 1 and prof.shared_load_requests == 1
    assert prof.shared_bank_conflicts == 2 * extra
    assert "bank conflicts" in str(prof)


def test_profile_off_returns_none(rng):
    kernel, n_in, n_out = _strided_copy(1)
    assert emulate(kernel, np.ones(n_in, "float32"), np.empty(n_out, "float32")) is None


def test_module_profile_of_matmul_template(rng):
    import ember
    from ember.tuner import create_task

    task = create_task("matmul.cuda", args=(64, 64, 32, "float32"), target="cuda")
    s, args = task.instantiate()
    mod = ember.build(s, args, target="cuda")
    a = rng.uniform(-1, 1, (64, 32)).astype("float32")
    b = rng.uniform(-1, 1, (32, 64)).astype("float32")
    c = np.empty((64, 64), "float32")
    (prof,) = mod.emulate(a, b, c, profile=True)
    np.testing.assert_allclose(c, a @ b, rtol=1e-4, atol=1e-4)
    assert prof.global_load_requests > 0 and prof.shared_load_requests > 0
    assert mod.emulate(a, b, c) is None
