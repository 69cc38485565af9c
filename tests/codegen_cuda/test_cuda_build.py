"""ember.build for CUDA, end to end without a GPU: lower, split, sync, print, NVRTC, emulate."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

import ember
from ember.codegen_cuda.transform.split_host_device import DeviceProgram
from ember.tir import stmt as S
from ember.tir.functor import Mutator
from tests.codegen_cuda.gpu_schedules import elementwise, tiled_matmul


def _inputs(rng, *shapes):
    return [rng.uniform(-1, 1, size=s).astype("float32") for s in shapes]


@pytest.mark.parametrize("n", [1000, 128, 77])
def test_elementwise_emulated(rng, n):
    s, args = elementwise(n, 64)
    mod = ember.build(s, args, target="cuda -arch=sm_80")
    (a,) = _inputs(rng, (n,))
    b = np.full(n, np.nan, "float32")
    mod.emulate(a, b)
    np.testing.assert_allclose(b, a * 2 + 1, rtol=1e-6)


@pytest.mark.parametrize("shape", [(64, 64, 64), (70, 50, 33)])
def test_tiled_matmul_emulated(rng, shape):
    M, N, K = shape
    s, args = tiled_matmul(M, N, K, tile=16)
    mod = ember.build(s, args, target="cuda")
    a, b = _inputs(rng, (M, K), (K, N))
    c = np.full((M, N), np.nan, "float32")
    mod.emulate(a, b, c)
    np.testing.assert_allclose(c, a @ b, rtol=1e-4, atol=1e-4)
    source = mod.get_source("cuda")
    assert "__global__" in source and "__shared__" in source and "__syncthreads()" in source


def test_missing_barrier_is_a_race(rng):
    s, args = tiled_matmul(32, 32, 32, tile=16)
    mod = ember.build(s, args, target="cuda", disabled_passes=("inject_sync",))
    a, b = _inputs(rng, (32, 32), (32, 32))
    with pytest.raises(ember.RaceError):
        mod.emulate(a, b, np.empty((32, 32), "float32"))


class _DropBarrier(Mutator):
    """Removes the ``index``-th barrier (in print order) of a kernel."""

    def __init__(self, index: int) -> None:
        self.index, self.seen = index, 0

    def visit_Barrier(self, s: S.Barrier) -> S.Stmt:
        self.seen += 1
        return S.no_op() if self.seen - 1 == self.index else s


def test_every_injected_barrier_is_needed(rng):
    """Mutation test: dropping any one barrier that inject_sync placed must be caught."""
    s, args = tiled_matmul(32, 32, 48, tile=16)
    mod = ember.build(s, args, target="cuda")
    a, b = _inputs(rng, (32, 48), (48, 32))
    program: DeviceProgram = mod.program
    (kernel,) = program.kernels
    count = repr(kernel).count("barrier(")
    assert count == 2
    for k in range(count):
        broken = _DropBarrier(k).visit_func(kernel)
        mod.program = dataclasses.replace(program, kernels=(broken,))
        with pytest.raises(ember.RaceError):
            mod.emulate(a, b, np.empty((32, 32), "float32"))
    mod.program = program


def test_call_without_device_points_at_emulator(rng, monkeypatch):
    s, args = elementwise(100, 32)
    mod = ember.build(s, args, target="cuda")
    (a,) = _inputs(rng, (100,))
    b = np.empty(100, "float32")
    monkeypatch.delenv("EMBER_CUDA_EMULATE", raising=False)
    with pytest.raises(ember.DeviceError, match="emulate"):
        mod(a, b)
    monkeypatch.setenv("EMBER_CUDA_EMULATE", "1")
    mod(a, b)
    np.testing.assert_allclose(b, a * 2 + 1, rtol=1e-6)


def test_emulate_checks_arguments():
    s, args = elementwise(100, 32)
    mod = ember.build(s, args, target="cuda")
    with pytest.raises(ember.ArgumentError):
        mod.emulate(np.zeros(99, "float32"), np.zeros(100, "float32"))


def test_verify_gpu_error_surfaces_from_build():
    s, args = elementwise(4096, 2048)
    with pytest.raises(ember.LoweringError, match="threads per block"):
        ember.build(s, args, target="cuda")


@pytest.mark.nvrtc
@pytest.mark.parametrize("arch", ["sm_80", "sm_90"])
def test_nvrtc_compiles_and_reports_resources(arch):
    pytest.importorskip("cuda.bindings.nvrtc")
    s, args = tiled_matmul(64, 64, 64, tile=16)
    mod = ember.build(s, args, target=f"cuda -arch={arch}")
    assert ".entry" in mod.get_source("ptx")
    (usage,) = mod.resource_usage().values()
    assert usage.shared_bytes >= 2 * 16 * 16 * 4
    assert 0 < usage.registers <= 255
