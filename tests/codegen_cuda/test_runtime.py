"""The CUDA driver runtime: without a GPU, against a fake driver, and (gpu-marked) on a device.

The fake driver keeps "device" memory in host arrays (a device pointer is a real
host address) and runs each ``cuLaunchKernel`` with the SIMT emulator, so the
whole path — argument staging, workspaces, the kernel-parameter array, copies
back, errors and timing — is exercised here; the gpu tests repeat the
numerics on real hardware.
"""

from __future__ import annotations

import ctypes
import enum
import threading
import time
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest

import ember
from ember import te
from ember.cli import main as cli_main
from ember.codegen_cuda import device, runtime
from ember.codegen_cuda.emulator import emulate
from ember.codegen_cuda.module import CUDAModule
from ember.codegen_cuda.transform.split_host_device import DeviceProgram, Launch
from ember.runtime.module import TimingResult
from ember.tir import dtype as dt
from tests.codegen_cuda import handmade_kernels as hk
from tests.codegen_cuda.gpu_schedules import elementwise, tiled_matmul


class _Result(enum.IntEnum):
    CUDA_SUCCESS = 0
    CUDA_ERROR_INVALID_VALUE = 1
    CUDA_ERROR_OUT_OF_MEMORY = 2
    CUDA_ERROR_INVALID_IMAGE = 200


class FakeDriver:
    """Just enough of ``cuda.bindings.driver`` to run kernels through the emulator."""

    CUresult = _Result
    CUfunction_attribute = SimpleNamespace(CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES=8)

    def __init__(self) -> None:
        self.kernels: dict[str, Any] = {}
        self.memory: dict[int, np.ndarray] = {}
        self.calls: list[str] = []
        self.fail: dict[str, _Result] = {}
        self.attributes: list[tuple[str, int, int]] = []

    def _ok(self, name: str, *values: Any) -> tuple[Any, ...]:
        self.calls.append(name)
        return (self.fail.get(name, _Result.CUDA_SUCCESS), *values)

    def cuInit(self, flags: int) -> tuple[Any, ...]:
        return self._ok("cuInit")

    def cuDeviceGet(self, ordinal: int) -> tuple[Any, ...]:
        return self._ok("cuDeviceGet", ordinal)

    def cuDevicePrimaryCtxRetain(self, dev: int) -> tuple[Any, ...]:
        return self._ok("cuDevicePrimaryCtxRetain", "ctx")

    def cuCtxSetCurrent(self, ctx: Any) -> tuple[Any, ...]:
        return self._ok("cuCtxSetCurrent")

    def cuCtxSynchronize(self) -> tuple[Any, ...]:
        return self._ok("cuCtxSynchronize")

    def cuMemAlloc(self, nbytes: int) -> tuple[Any, ...]:
        if "cuMemAlloc" in self.fail:
            return self._ok("cuMemAlloc", 0)
        arr = np.zeros(nbytes, np.uint8)
        self.memory[arr.ctypes.data] = arr
        return self._ok("cuMemAlloc", arr.ctypes.data)

    def cuMemFree(self, ptr: int) -> tuple[Any, ...]:
        del self.memory[ptr]
        return self._ok("cuMemFree")

    def cuMemcpyHtoD(self, dst: int, src: int, n: int) -> tuple[Any, ...]:
        assert self.memory[dst].nbytes >= n
        ctypes.memmove(dst, src, n)
        return self._ok("cuMemcpyHtoD")

    def cuMemcpyDtoH(self, dst: int, src: int, n: int) -> tuple[Any, ...]:
        assert self.memory[src].nbytes >= n
        ctypes.memmove(dst, src, n)
        return self._ok("cuMemcpyDtoH")

    def cuModuleLoadData(self, image: bytes) -> tuple[Any, ...]:
        return self._ok("cuModuleLoadData", "module:" + image[:4].decode(errors="replace"))

    def cuModuleGetFunction(self, module: Any, name: bytes) -> tuple[Any, ...]:
        assert name.decode() in self.kernels, name
        return self._ok("cuModuleGetFunction", name.decode())

    def cuFuncSetAttribute(self, func: str, attr: int, value: int) -> tuple[Any, ...]:
        self.attributes.append((func, attr, value))
        return self._ok("cuFuncSetAttribute")

    def cuLaunchKernel(self, func: str, *rest: Any) -> tuple[Any, ...]:
        gx, gy, gz, bx, by, bz, shared, stream, params, extra = rest
        kernel = self.kernels[func]
        assert kernel.attr("launch") == ((gx, gy, gz), (bx, by, bz)) and extra == 0
        slots = (ctypes.c_void_p * len(kernel.params)).from_address(params)
        arrays = []
        for buf, slot in zip(kernel.params, slots):
            ptr = ctypes.c_void_p.from_address(slot).value
            raw = self.memory[ptr]  # a pointer the runtime did not allocate raises here
            shape = tuple(int(s.value) for s in buf.shape)
            arrays.append(raw.view(dt.numpy_dtype(buf.dtype))[: int(np.prod(shape))].reshape(shape))
        emulate(kernel, *arrays)
        return self._ok("cuLaunchKernel")

    def cuEventCreate(self, flags: int) -> tuple[Any, ...]:
        return self._ok("cuEventCreate", [0.0])

    def cuEventRecord(self, event: list[float], stream: int) -> tuple[Any, ...]:
        event[0] = time.perf_counter()
        return self._ok("cuEventRecord")

    def cuEventSynchronize(self, event: Any) -> tuple[Any, ...]:
        return self._ok("cuEventSynchronize")

    def cuEventElapsedTime(self, start: list[float], end: list[float]) -> tuple[Any, ...]:
        return self._ok("cuEventElapsedTime", (end[0] - start[0]) * 1e3)

    def cuEventDestroy(self, event: Any) -> tuple[Any, ...]:
        return self._ok("cuEventDestroy")


@pytest.fixture
def fake(monkeypatch: pytest.MonkeyPatch) -> FakeDriver:
    drv = FakeDriver()
    monkeypatch.setattr(runtime, "_driver", lambda: drv)
    monkeypatch.setattr(runtime, "_CONTEXT", [])
    monkeypatch.setattr(runtime, "_CURRENT", threading.local())
    monkeypatch.setattr(device, "_probe", lambda: ([("Fake GPU", 9, 0, 80 * 2**30)], ""))
    monkeypatch.delenv("EMBER_CUDA_EMULATE", raising=False)
    return drv


def _module(sch_args: Any, drv: FakeDriver) -> CUDAModule:
    s, args = sch_args
    mod = ember.build(s, args, target="cuda -arch=sm_80")
    mod._compiled = SimpleNamespace(cubin=b"CUBIN", ptx="PTX")  # the fake ignores the image
    drv.kernels.update({k.attr("global_symbol") or k.name: k for k in mod.kernels})
    return mod


def _two_stage():
    A = te.placeholder((300,), name="A")
    B = te.compute((300,), lambda i: A[i] + 1.0, name="B")
    C = te.compute((300,), lambda i: B[299 - i] * 2.0, name="C")
    s = te.create_schedule(C.op)
    for T in (B, C):
        bx, tx = s[T].split(s[T].op.axis[0], factor=64)
        s[T].bind(bx, "blockIdx.x")
        s[T].bind(tx, "threadIdx.x")
    return s, [A, C]


# -- without a device --------------------------------------------------------------------
def test_no_device_here_answers_without_raising():
    assert runtime.device_available is device.device_available
    if device.device_available():
        pytest.skip("a CUDA device is present")
    devices, reason = device._probe()
    assert devices == [] and reason
    assert any(reason in line for line in device.describe())


def test_call_without_device_raises_device_error(monkeypatch, rng):
    if device.device_available():
        pytest.skip("a CUDA device is present")
    monkeypatch.delenv("EMBER_CUDA_EMULATE", raising=False)
    s, args = elementwise(100, 32)
    mod = ember.build(s, args, target="cuda")
    a = rng.uniform(-1, 1, 100).astype("float32")
    with pytest.raises(ember.DeviceError, match="emulate"):
        mod(a, np.empty(100, "float32"))
    with pytest.raises(ember.DeviceError, match="needs a GPU"):
        mod.time_evaluator()
    monkeypatch.setenv("EMBER_CUDA_EMULATE", "1")
    b = np.full(100, np.nan, "float32")
    mod(a, b)
    np.testing.assert_allclose(b, a * 2 + 1, rtol=1e-6)


def test_ember_info_reports_nvrtc_driver_and_devices(capsys):
    assert cli_main(["info"]) == 0
    out = capsys.readouterr().out
    assert "nvrtc" in out and "cuda driver" in out
    if not device.device_available():
        assert "no CUDA device:" in out


# -- against the fake driver -------------------------------------------------------------
def test_failing_driver_call_becomes_device_error(fake):
    fake.fail["cuMemAlloc"] = _Result.CUDA_ERROR_OUT_OF_MEMORY
    with pytest.raises(ember.DeviceError, match="cuMemAlloc failed with CUDA_ERROR_OUT_OF_MEMORY"):
        runtime.DeviceBuffer(1024)


def test_binding_exception_becomes_device_error(fake, monkeypatch):
    def broken(*args: Any) -> None:
        raise TypeError("bad argument")

    monkeypatch.setattr(fake, "cuCtxSynchronize", broken, raising=False)
    runtime.ensure_context()
    with pytest.raises(ember.DeviceError, match="cuCtxSynchronize failed: TypeError"):
        runtime.synchronize()


@pytest.mark.parametrize("n,threads", [(1000, 128), (37, 32)])
def test_elementwise_runs_and_frees(fake, rng, n, threads):
    mod = _module(elementwise(n, threads), fake)
    a = rng.uniform(-1, 1, n).astype("float32")
    b = np.full(n, np.nan, "float32")
    mod(a, b)
    np.testing.assert_allclose(b, a * 2 + 1, rtol=1e-6)
    assert fake.calls.count("cuLaunchKernel") == 1 and "cuCtxSynchronize" in fake.calls
    assert fake.memory == {}  # both staged buffers freed
    assert fake.calls.count("cuCtxSetCurrent") == 1


def test_tiled_matmul_odd_shape(fake, rng):
    M, N, K = 37, 45, 29
    mod = _module(tiled_matmul(M, N, K, 16), fake)
    a = rng.uniform(-1, 1, (M, K)).astype("float32")
    b = rng.uniform(-1, 1, (K, N)).astype("float32")
    c = np.full((M, N), np.nan, "float32")
    mod(a, b, c)
    np.testing.assert_allclose(c, a @ b, rtol=1e-4, atol=1e-4)


def test_two_kernels_share_a_cached_workspace(fake, rng):
    mod = _module(_two_stage(), fake)
    a = rng.uniform(-1, 1, 300).astype("float32")
    for _ in range(2):
        c = np.full(300, np.nan, "float32")
        mod(a, c)
        np.testing.assert_allclose(c, (a[::-1] + 1) * 2, rtol=1e-6)
    assert fake.calls.count("cuLaunchKernel") == 4
    assert len(fake.memory) == 1  # the workspace B, allocated once and kept
    mod.device_module().close()
    assert fake.memory == {}


def test_function_handle_runs_through_native(fake, rng):
    mod = _module(elementwise(200, 64), fake)
    a = rng.uniform(-1, 1, 200).astype("float32")
    b = np.full(200, np.nan, "float32")
    mod[mod.entry_name](a, b)
    np.testing.assert_allclose(b, a * 2 + 1, rtol=1e-6)
    with pytest.raises(ember.ArgumentError, match="expects shape"):
        mod[mod.entry_name](a[:10], b)


def test_cubin_rejected_falls_back_to_ptx(fake, monkeypatch):
    real = fake.cuModuleLoadData

    def load(image: bytes) -> tuple[Any, ...]:
        if image == b"CUBIN":
            fake.calls.append("cuModuleLoadData")
            return (_Result.CUDA_ERROR_INVALID_IMAGE, None)
        return real(image)

    monkeypatch.setattr(fake, "cuModuleLoadData", load)
    mod = _module(elementwise(64, 64), fake)
    assert mod.device_module().handle == "module:PTX\x00"
    assert fake.calls.count("cuModuleLoadData") == 2


def test_large_shared_memory_raises_the_function_limit(fake):
    kernel = hk.cooperative_fetch(16384)  # 64 KiB of shared memory: dynamic
    fake.kernels[kernel.name] = kernel
    runtime.DeviceModule(SimpleNamespace(cubin=b"CUBIN", ptx=""), [kernel])
    assert fake.attributes == [(kernel.name, 8, 64 * 1024)]
    small = hk.cooperative_fetch(512)
    fake.kernels[small.name] = small
    dev = runtime.DeviceModule(SimpleNamespace(cubin=b"CUBIN", ptx=""), [small])
    assert len(fake.attributes) == 1 and dev.kernels[small.name].shared_bytes == 0


def test_launch_with_dynamic_shared(fake, rng):
    kernel = hk.cooperative_fetch(16384)
    program = DeviceProgram(
        "rev", kernel.params, (), (kernel,), (Launch(kernel.name, kernel.params),)
    )
    mod = CUDAModule(program, "sm_90")
    mod._compiled = SimpleNamespace(cubin=b"CUBIN", ptx="")
    fake.kernels[kernel.name] = kernel
    a = rng.uniform(-1, 1, 16384 * 4).astype("float32")
    b = np.full_like(a, np.nan)
    mod(a, b)
    np.testing.assert_array_equal(b, a.reshape(4, -1)[:, ::-1].ravel())


class GpuArray:
    """A fake CuPy array: its data lives in the fake driver's memory."""

    def __init__(self, drv: FakeDriver, host: np.ndarray, strides: Any = None, ro: bool = False):
        _, self.ptr = drv.cuMemAlloc(host.nbytes)
        drv.memory[self.ptr][:] = host.view(np.uint8).ravel()
        self.shape, self.dtype, self.strides, self.ro = host.shape, host.dtype, strides, ro
        self.drv = drv

    @property
    def __cuda_array_interface__(self) -> dict[str, Any]:
        return {
            "shape": self.shape,
            "typestr": self.dtype.str,
            "data": (self.ptr, self.ro),
            "strides": self.strides,
            "version": 3,
        }

    def get(self) -> np.ndarray:
        return self.drv.memory[self.ptr].view(self.dtype).reshape(self.shape).copy()


def test_gpu_arrays_pass_their_pointers(fake, rng):
    M, N, K = 20, 24, 12
    mod = _module(tiled_matmul(M, N, K, 8), fake)
    a = rng.uniform(-1, 1, (M, K)).astype("float32")
    b = rng.uniform(-1, 1, (K, N)).astype("float32")
    c = GpuArray(fake, np.full((M, N), np.nan, "float32"), strides=(N * 4, 4))
    mod(GpuArray(fake, a), b, c)  # a and c on the "GPU", b staged from the host
    np.testing.assert_allclose(c.get(), a @ b, rtol=1e-4, atol=1e-4)
    assert fake.calls.count("cuMemcpyHtoD") == 1 and "cuMemcpyDtoH" not in fake.calls


def test_gpu_array_checks(fake):
    mod = _module(elementwise(64, 64), fake)
    x = np.zeros(64, "float32")
    with pytest.raises(ember.ArgumentError, match="expects shape"):
        mod(GpuArray(fake, np.zeros(63, "float32")), x)
    with pytest.raises(ember.ArgumentError, match="expects dtype float32"):
        mod(GpuArray(fake, np.zeros(64, "float64")), x)
    with pytest.raises(ember.ArgumentError, match="C-contiguous"):
        mod(GpuArray(fake, np.zeros(64, "float32"), strides=(8,)), x)
    with pytest.raises(ember.ArgumentError, match="read-only"):
        mod(x, GpuArray(fake, np.zeros(64, "float32"), ro=True))

    class CudaDLPack:
        def __dlpack__(self, **kwargs: Any) -> None:
            raise AssertionError

        def __dlpack_device__(self) -> tuple[int, int]:
            return (2, 0)

    with pytest.raises(ember.ArgumentError, match="DLPack array on a CUDA device"):
        mod(CudaDLPack(), x)
    with pytest.raises(ember.ArgumentError, match="expected 2 arguments"):
        mod(x)


def test_time_evaluator_with_events(fake, rng):
    mod = _module(elementwise(128, 64), fake)
    a = rng.uniform(-1, 1, 128).astype("float32")
    b = np.full(128, np.nan, "float32")
    result = mod.time_evaluator(number=2, repeat=3)(a, b)
    assert isinstance(result, TimingResult) and len(result.results) == 3
    assert all(t > 0 for t in result.results)
    np.testing.assert_allclose(b, a * 2 + 1, rtol=1e-6)
    assert fake.calls.count("cuLaunchKernel") == 1 + 2 * 3
    assert fake.calls.count("cuEventDestroy") == 2 and fake.memory == {}
    with pytest.raises(ember.ArgumentError, match="number must be a positive integer"):
        mod.time_evaluator(number=0)
    with pytest.raises(ember.ArgumentError, match="min_repeat_ms"):
        mod.time_evaluator(min_repeat_ms=-1)


# -- on a real GPU ---------------------------------------------------------------------------
def _template(name: str, args: tuple) -> Any:
    from ember.tuner import create_task

    task = create_task(name, args=args, target="cuda")
    s, tensors = task.instantiate(None)
    return ember.build(s, tensors, target="cuda", name=name.split(".")[0])


@pytest.mark.gpu
@pytest.mark.parametrize("shape", [(256, 256, 128), (70, 50, 33)])
def test_matmul_template_on_gpu(monkeypatch, rng, shape):
    monkeypatch.delenv("EMBER_CUDA_EMULATE", raising=False)
    M, N, K = shape
    mod = _template("matmul.cuda", (M, N, K, "float32"))
    a = rng.uniform(-1, 1, (M, K)).astype("float32")
    b = rng.uniform(-1, 1, (K, N)).astype("float32")
    c = np.full((M, N), np.nan, "float32")
    mod(a, b, c)
    np.testing.assert_allclose(c, a @ b, rtol=1e-4, atol=1e-4)
    result = mod.time_evaluator(number=5, repeat=3)(a, b, c)
    assert len(result.results) == 3 and 0 < result.min < 1.0
    np.testing.assert_allclose(c, a @ b, rtol=1e-4, atol=1e-4)


@pytest.mark.gpu
@pytest.mark.parametrize("shape", [(33, 257), (512, 768)])
def test_elementwise_chain_template_on_gpu(monkeypatch, rng, shape):
    from ember.tir.topi.elementwise import elementwise_chain_numpy

    monkeypatch.delenv("EMBER_CUDA_EMULATE", raising=False)
    mod = _template("elementwise_chain.cuda", (*shape, "float32"))
    x = rng.uniform(-2, 2, shape).astype("float32")
    bias = rng.uniform(-1, 1, shape[1]).astype("float32")
    y = np.full(shape, np.nan, "float32")
    mod(x, bias, y)
    np.testing.assert_allclose(y, elementwise_chain_numpy(x, bias), rtol=1e-5, atol=1e-5)
    result = mod.time_evaluator(number=10, repeat=2, min_repeat_ms=1)(x, bias, y)
    assert len(result.results) == 2 and result.min > 0
