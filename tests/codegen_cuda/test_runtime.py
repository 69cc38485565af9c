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
import weakref
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest

import ember
from ember import te
from ember.cli import main as cli_main
from ember.codegen_cuda import device, device_array, dlpack, runtime
from ember.codegen_cuda.emulator import emulate
from ember.codegen_cuda.module import CUDAModule
from ember.codegen_cuda.transform.split_host_device import DeviceProgram, Launch
from ember.runtime.module import TimingResult
from ember.runtime.sizes import eval_size
from ember.tir import dtype as dt
from ember.tir import expr as E
from ember.tir.signature import size_text
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
        slots = (ctypes.c_void_p * len(kernel.params)).from_address(params)
        sizes = {}  # symbolic sizes come by value after the pointers, in their own width
        for p, slot in zip(kernel.params, slots):
            if isinstance(p, E.Var):
                width = ctypes.c_int64 if p.dtype == "int64" else ctypes.c_int32
                sizes[p.name] = width.from_address(slot).value

        def value(x: Any) -> int:
            return x if isinstance(x, int) else eval_size(str(size_text(x)), sizes)

        grid, block = kernel.attr("launch")
        assert tuple(map(value, grid)) == (gx, gy, gz) and tuple(block) == (bx, by, bz)
        assert extra == 0
        args: list[Any] = []
        for buf, slot in zip(kernel.params, slots):
            if isinstance(buf, E.Var):
                args.append(sizes[buf.name])
                continue
            ptr = ctypes.c_void_p.from_address(slot).value
            raw = self.at(ptr)
            shape = tuple(value(s.value if isinstance(s, E.IntImm) else s) for s in buf.shape)
            args.append(raw.view(dt.numpy_dtype(buf.dtype))[: int(np.prod(shape))].reshape(shape))
        emulate(kernel, *args)
        return self._ok("cuLaunchKernel")

    def at(self, ptr: int) -> np.ndarray:
        """The bytes from ``ptr`` (possibly inside an allocation) to the allocation's end."""
        for base, raw in self.memory.items():
            if base <= ptr < base + raw.nbytes:
                return raw[ptr - base :]
        raise KeyError(f"{ptr:#x} is not device memory")  # the runtime passed a stray pointer

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

    with pytest.raises(ember.ArgumentError, match="expected 2 arguments"):
        mod(x)

    class RequiresGrad:  # what torch says of a CUDA tensor that requires grad
        @property
        def __cuda_array_interface__(self) -> dict[str, Any]:
            raise RuntimeError("Can't get __cuda_array_interface__ on Variable that requires grad")

    with pytest.raises(ember.ArgumentError, match="'A' cannot be read as a GPU array: Can't get"):
        mod(RequiresGrad(), x)


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
    # TVM's spelling: the function name and the device first
    b[:] = np.nan
    tvm_style = mod.time_evaluator(mod.entry_name, "cuda", number=1, repeat=2)(a, b)
    assert len(tvm_style.results) == 2
    np.testing.assert_allclose(b, a * 2 + 1, rtol=1e-6)
    with pytest.raises(ember.ArgumentError, match="cuda module cannot be timed on device 'cpu'"):
        mod.time_evaluator(mod.entry_name, "cpu")


# -- DLPack in -------------------------------------------------------------------------------
_DLTENSOR = b"dltensor"  # module-level: a capsule keeps a pointer to its name
_capsule_new = ctypes.PYFUNCTYPE(
    ctypes.py_object, ctypes.c_void_p, ctypes.c_char_p, ctypes.c_void_p
)(("PyCapsule_New", ctypes.pythonapi))
_capsule_set_name = ctypes.PYFUNCTYPE(ctypes.c_int, ctypes.py_object, ctypes.c_char_p)(
    ("PyCapsule_SetName", ctypes.pythonapi)
)
_capsule_pointer = ctypes.PYFUNCTYPE(ctypes.c_void_p, ctypes.py_object, ctypes.c_char_p)(
    ("PyCapsule_GetPointer", ctypes.pythonapi)
)
_DL_CODE = {name: key for key, name in dlpack.DTYPES.items()}


class DLPackGpuArray:
    """A DLPack-only CUDA array (no __cuda_array_interface__) in the fake driver's memory.

    Its capsules have no destructor: the DLManagedTensor lives in this object.
    """

    def __init__(
        self,
        drv: FakeDriver,
        host: np.ndarray,
        *,
        strides: Any = None,
        device: tuple[int, int] = (2, 0),
        dtype: tuple[int, int, int] | None = None,
        offset: int = 0,
    ) -> None:
        _, self.base = drv.cuMemAlloc(host.nbytes + offset)
        drv.memory[self.base][offset:] = host.view(np.uint8).ravel()
        self.drv, self.host, self.offset, self.device = drv, host, offset, device
        self.streams: list[Any] = []
        ndim = host.ndim
        self._shape = (ctypes.c_int64 * max(ndim, 1))(*host.shape)
        self._strides = None if strides is None else (ctypes.c_int64 * ndim)(*strides)
        m = self.managed = dlpack.DLManagedTensor()
        t = m.dl_tensor
        t.data, t.byte_offset, t.ndim = self.base, offset, ndim
        t.device = dlpack.DLDevice(*device)
        t.dtype = dlpack.DLDataType(*(dtype or (*_DL_CODE[host.dtype.name], 1)))
        t.shape = ctypes.cast(self._shape, ctypes.POINTER(ctypes.c_int64))
        if self._strides is not None:
            t.strides = ctypes.cast(self._strides, ctypes.POINTER(ctypes.c_int64))

    def __dlpack_device__(self) -> tuple[int, int]:
        return self.device

    def __dlpack__(self, stream: Any = None) -> Any:
        self.streams.append(stream)
        return _capsule_new(ctypes.addressof(self.managed), _DLTENSOR, None)

    def get(self) -> np.ndarray:
        raw = self.drv.memory[self.base][self.offset :]
        return raw.view(self.host.dtype).reshape(self.host.shape).copy()


def test_dlpack_gpu_arrays_pass_their_pointers(fake, rng):
    M, N, K = 20, 24, 12
    mod = _module(tiled_matmul(M, N, K, 8), fake)
    a = rng.uniform(-1, 1, (M, K)).astype("float32")
    b = rng.uniform(-1, 1, (K, N)).astype("float32")
    a_dl = DLPackGpuArray(fake, a, offset=64)  # data + byte_offset is the pointer
    b_dl = DLPackGpuArray(fake, b, device=(13, 0), strides=(N, 1))  # kDLCUDAManaged
    c_dl = DLPackGpuArray(fake, np.full((M, N), np.nan, "float32"))
    mod(a_dl, b_dl, c_dl)
    np.testing.assert_allclose(c_dl.get(), a @ b, rtol=1e-4, atol=1e-4)
    assert "cuMemcpyHtoD" not in fake.calls and "cuMemcpyDtoH" not in fake.calls
    assert a_dl.streams == [None]  # the legacy default stream, where Ember launches


def test_dlpack_gpu_array_checks(fake):
    mod = _module(elementwise(64, 64), fake)
    x = np.zeros(64, "float32")
    with pytest.raises(ember.ArgumentError, match=r"'A' expects shape \(64,\), got \(63,\)"):
        mod(DLPackGpuArray(fake, np.zeros(63, "float32")), x)
    with pytest.raises(ember.ArgumentError, match="'A' expects dtype float32, got float64"):
        mod(DLPackGpuArray(fake, np.zeros(64, "float64")), x)
    with pytest.raises(ember.ArgumentError, match="got float32x4"):
        mod(DLPackGpuArray(fake, np.zeros(64, "float32"), dtype=(2, 32, 4)), x)
    with pytest.raises(ember.ArgumentError, match="got complex64"):
        mod(DLPackGpuArray(fake, np.zeros(64, "float32"), dtype=(5, 64, 1)), x)
    with pytest.raises(ember.ArgumentError, match="'B' must be C-contiguous on the GPU"):
        mod(x, DLPackGpuArray(fake, np.zeros(64, "float32"), strides=(2,)))
    with pytest.raises(ember.ArgumentError, match="on CUDA device 1; Ember runs kernels on"):
        mod(DLPackGpuArray(fake, np.zeros(64, "float32"), device=(2, 1)), x)

    class NotACapsule:
        def __dlpack_device__(self) -> tuple[int, int]:
            return (2, 0)

        def __dlpack__(self, stream: Any = None) -> str:
            return "capsule"

    with pytest.raises(ember.ArgumentError, match="returned str, not an unconsumed 'dltensor'"):
        mod(NotACapsule(), x)

    class Refuses(NotACapsule):
        def __dlpack__(self, stream: Any = None) -> Any:
            raise BufferError("stream 7 is busy")

    with pytest.raises(ember.ArgumentError, match="'A': its __dlpack__.. failed: BufferError"):
        mod(Refuses(), x)


def test_dlpack_cpu_array_takes_the_host_path(fake, rng):
    mod = _module(elementwise(64, 64), fake)
    a = rng.uniform(-1, 1, 64).astype("float32")

    class CpuDLPack:  # e.g. a CPU torch tensor: viewed by numpy, staged like one
        def __dlpack_device__(self) -> tuple[int, int]:
            return a.__dlpack_device__()

        def __dlpack__(self, **kwargs: Any) -> Any:
            return a.__dlpack__(**kwargs)

    b = np.full(64, np.nan, "float32")
    mod(CpuDLPack(), b)
    np.testing.assert_allclose(b, a * 2 + 1, rtol=1e-6)
    assert fake.calls.count("cuMemcpyHtoD") == 2  # both staged


def test_dlpack_capsule_lives_for_the_call_and_is_not_consumed(fake, rng, monkeypatch):
    mod = _module(elementwise(64, 64), fake)
    a = GpuArray(fake, rng.uniform(-1, 1, 64).astype("float32"))
    tokens: list[weakref.ref] = []

    class Token:
        pass

    class Producer:  # the capsule alone keeps the token alive; its destructor drops it
        def __dlpack_device__(self) -> tuple[int, int]:
            return (2, 0)

        def __dlpack__(self, stream: Any = None) -> Any:
            token = Token()
            tokens.append(weakref.ref(token))
            return dlpack.make_capsule(token, a.ptr, (64,), "float32", (2, 0))

    alive_at_launch = []
    launch = fake.cuLaunchKernel

    def checked_launch(*args: Any) -> Any:
        alive_at_launch.append(tokens[0]() is not None)
        return launch(*args)

    monkeypatch.setattr(fake, "cuLaunchKernel", checked_launch)
    b = np.full(64, np.nan, "float32")
    mod(Producer(), b)
    np.testing.assert_allclose(b, a.get() * 2 + 1, rtol=1e-6)
    assert alive_at_launch == [True]
    assert tokens[0]() is None  # capsule released unconsumed: its destructor freed the tensor


# -- DeviceArray: tensors kept on the GPU ----------------------------------------------------
def test_device_arrays_stay_on_the_gpu_across_calls(fake, rng):
    mod = _module(elementwise(300, 64), fake)
    a = rng.uniform(-1, 1, 300).astype("float32")
    a_dev = device_array.to_device(a)
    b_dev, c_dev = device_array.empty(300, "float32"), device_array.empty((300,), np.float32)
    assert fake.calls.count("cuMemcpyHtoD") == 1
    mod(a_dev, b_dev)
    mod(b_dev, c_dev)
    assert fake.calls.count("cuMemcpyHtoD") == 1 and "cuMemcpyDtoH" not in fake.calls
    np.testing.assert_allclose(c_dev.numpy(), (a * 2 + 1) * 2 + 1, rtol=1e-6)
    iface = c_dev.__cuda_array_interface__
    assert iface["version"] == 3 and iface["typestr"] == "<f4" and iface["shape"] == (300,)
    assert iface["data"] == (c_dev.buffer.ptr, False)
    assert repr(c_dev) == "DeviceArray(shape=(300,), dtype=float32, cuda:0)"
    ptr = c_dev.buffer.ptr
    del c_dev
    assert ptr not in fake.memory  # freed with the array


def test_nd_places_arrays_on_the_gpu_through_the_cuda_backend(fake, rng):
    """ember.nd (the runtime, which may not import a backend) reaches DeviceArray through
    the hook the package root fills."""
    x = rng.uniform(-1, 1, (4, 3)).astype("float32")
    a = ember.nd.array(x, ember.cuda())
    assert isinstance(a, device_array.DeviceArray) and fake.calls.count("cuMemcpyHtoD") == 1
    np.testing.assert_array_equal(a.numpy(), x)
    e = ember.nd.empty((5,), "float16x2", "cuda:0")
    assert isinstance(e, device_array.DeviceArray)
    assert (e.shape, e.dtype) == ((5, 2), np.dtype("float16"))


def test_device_array_checks(fake):
    mod = _module(elementwise(64, 64), fake)
    x = device_array.empty(64)
    with pytest.raises(ember.ArgumentError, match="expects dtype float32, got float64"):
        mod(device_array.to_device(np.zeros(64)), x)
    with pytest.raises(ember.ArgumentError, match="expects shape"):
        mod(device_array.empty((8, 8)), x)
    with pytest.raises(ember.ArgumentError, match="output 'B' overlaps argument 'A' on the GPU"):
        mod(x, x)
    with pytest.raises(ember.ArgumentError, match="dtype complex64 is not supported"):
        device_array.empty(4, "complex64")
    with pytest.raises(ember.ArgumentError, match="'float33' is not a dtype"):
        device_array.empty(4, "float33")
    with pytest.raises(ember.ArgumentError, match="shape must be non-negative integers"):
        device_array.empty((4, -1))
    with pytest.raises(ember.ArgumentError, match="expects shape"):
        x.copy_from(np.zeros(63, "float32"))
    with pytest.raises(ember.ArgumentError, match="expects dtype float32, got int32"):
        x.copy_from(np.zeros(64, "int32"))
    bf = device_array.empty(3, "bfloat16")
    bf.copy_from(np.array([1, 2, 3], "uint16"))  # bfloat16 is held as its bits on the host
    assert bf.numpy().dtype == np.uint16 and bf.numpy().tolist() == [1, 2, 3]


class DLPackOnly:
    """Hides __cuda_array_interface__, so the runtime must read the DLPack capsule."""

    def __init__(self, x: Any) -> None:
        self.x = x

    def __dlpack_device__(self) -> tuple[int, int]:
        return self.x.__dlpack_device__()

    def __dlpack__(self, **kwargs: Any) -> Any:
        return self.x.__dlpack__(**kwargs)


def test_device_array_dlpack_round_trip(fake, rng):
    M, N, K = 20, 24, 12
    mod = _module(tiled_matmul(M, N, K, 8), fake)
    a = rng.uniform(-1, 1, (M, K)).astype("float32")
    b = rng.uniform(-1, 1, (K, N)).astype("float32")
    c_dev = device_array.empty((M, N))
    mod(
        DLPackOnly(device_array.to_device(a)),
        DLPackOnly(device_array.to_device(b)),
        DLPackOnly(c_dev),
    )
    np.testing.assert_allclose(c_dev.numpy(), a @ b, rtol=1e-4, atol=1e-4)
    assert c_dev.__dlpack_device__() == (2, 0)
    view = dlpack.read_capsule(c_dev.__dlpack__(stream=1, max_version=(1, 0)), "test")
    assert view.device == (2, 0) and view.pointer == c_dev.buffer.ptr
    assert view.shape == (M, N) and view.strides == (N, 1) and view.dtype == "float32"
    bf = dlpack.read_capsule(device_array.empty((2, 3), "bfloat16").__dlpack__(), "test")
    assert bf.dtype == "bfloat16" and bf.itemsize == 2


def test_device_array_capsule_keeps_memory_until_deleted(fake):
    dev = device_array.empty(16)
    ptr = dev.buffer.ptr
    unused = dev.__dlpack__()
    consumed = dev.__dlpack__()
    del dev
    assert ptr in fake.memory
    del unused  # never consumed: its destructor calls the deleter
    assert ptr in fake.memory
    # A consumer renames the capsule and calls the deleter when it is done with the data.
    address = _capsule_pointer(consumed, _DLTENSOR)
    _capsule_set_name(consumed, b"used_dltensor")
    del consumed
    assert ptr in fake.memory
    deleter = dlpack.DLManagedTensor.from_address(address).deleter
    ctypes.CFUNCTYPE(None, ctypes.c_void_p)(deleter)(address)
    assert ptr not in fake.memory


def test_device_array_refused_by_numpy_is_released(fake):
    dev = device_array.empty(16)
    ref = weakref.ref(dev)
    # numpy drops the capsule while its own error is pending; that error must survive.
    with pytest.raises((BufferError, RuntimeError), match="[Uu]nsupported device"):
        np.from_dlpack(dev)
    del dev
    assert ref() is None
    with pytest.raises(BufferError, match="cannot be exported to"):
        device_array.empty(4).__dlpack__(dl_device=(1, 0))
    with pytest.raises(ember.ArgumentError, match="does not copy"):
        device_array.empty(4).__dlpack__(copy=True)


def test_made_capsule_is_consumed_by_numpy():
    """A C consumer (numpy) takes a capsule made here and calls its deleter when done."""
    host = np.arange(6, dtype="float32").reshape(2, 3)

    class Owner:
        def __dlpack_device__(self) -> tuple[int, int]:
            return (1, 0)

        def __dlpack__(self, **kwargs: Any) -> Any:
            return dlpack.make_capsule(self, host.ctypes.data, host.shape, "float32", (1, 0))

    owner = Owner()
    ref = weakref.ref(owner)
    view = np.from_dlpack(owner)
    del owner
    assert ref() is not None and np.shares_memory(view, host)
    np.testing.assert_array_equal(view, host)
    del view
    assert ref() is None


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


@pytest.mark.gpu
def test_device_arrays_on_gpu(monkeypatch, rng):
    monkeypatch.delenv("EMBER_CUDA_EMULATE", raising=False)
    M, N, K = 70, 50, 33
    mod = _template("matmul.cuda", (M, N, K, "float32"))
    a = rng.uniform(-1, 1, (M, K)).astype("float32")
    b = rng.uniform(-1, 1, (K, N)).astype("float32")
    c = device_array.empty((M, N))
    mod(device_array.to_device(a), DLPackOnly(device_array.to_device(b)), c)
    np.testing.assert_allclose(c.numpy(), a @ b, rtol=1e-4, atol=1e-4)


@pytest.mark.gpu
def test_torch_tensors_on_gpu(monkeypatch, rng):
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("torch has no CUDA")
    monkeypatch.delenv("EMBER_CUDA_EMULATE", raising=False)
    M, N, K = 70, 50, 33
    mod = _template("matmul.cuda", (M, N, K, "float32"))
    a = torch.rand(M, K, device="cuda") - 0.5
    b = torch.rand(K, N, device="cuda") - 0.5
    c = torch.full((M, N), float("nan"), device="cuda")
    mod(a, DLPackOnly(b), c)  # a and c through __cuda_array_interface__, b through DLPack
    torch.testing.assert_close(c, a @ b, rtol=1e-4, atol=1e-4)
    with pytest.raises(ember.ArgumentError, match="C-contiguous"):
        mod(DLPackOnly(a.t().contiguous().t()), b, c)
    with pytest.raises(ember.ArgumentError, match="expects dtype float32"):
        mod(DLPackOnly(a.double()), b, c)
    out = device_array.to_device(a.cpu().numpy())
    torch.testing.assert_close(torch.from_dlpack(out), a)
    torch.testing.assert_close(torch.as_tensor(out, device="cuda"), a)


@pytest.mark.gpu
def test_cupy_arrays_on_gpu(monkeypatch, rng):
    cp = pytest.importorskip("cupy")
    monkeypatch.delenv("EMBER_CUDA_EMULATE", raising=False)
    M, N, K = 70, 50, 33
    mod = _template("matmul.cuda", (M, N, K, "float32"))
    a = cp.asarray(rng.uniform(-1, 1, (M, K)).astype("float32"))
    b = cp.asarray(rng.uniform(-1, 1, (K, N)).astype("float32"))
    c = cp.full((M, N), cp.nan, "float32")
    mod(DLPackOnly(a), b, c)
    cp.testing.assert_allclose(c, a @ b, rtol=1e-4, atol=1e-4)
    out = device_array.to_device(cp.asnumpy(a))
    cp.testing.assert_array_equal(cp.from_dlpack(out), a)
    cp.testing.assert_array_equal(cp.asarray(out), a)


def test_ember_nd_arrays_on_the_gpu(fake, rng):
    mod = _module(elementwise(300, 64), fake)
    a = rng.uniform(-1, 1, 300).astype("float32")
    a_dev, b_dev = ember.nd.array(a, device="cuda"), ember.nd.empty((300,), "float32", "cuda")
    mod(a_dev, b_dev)
    assert (b_dev.device, b_dev.shape) == ("cuda", (300,))
    np.testing.assert_allclose(b_dev.numpy(), a * 2 + 1, rtol=1e-6)


def test_symbolic_sizes_are_launch_parameters_and_grid(fake, rng):
    """Sizes travel by value after the pointers; the grid and the workspace follow each call."""
    n = te.var("n")
    A = te.placeholder((n,), name="A")
    B = te.compute((n,), lambda i: A[i] + 1.0, name="B")
    C = te.compute((n,), lambda i: B[n - 1 - i] * 2.0, name="C")
    s = te.create_schedule(C.op)
    for T in (B, C):
        bx, tx = s[T].split(s[T].op.axis[0], factor=64)
        s[T].bind(bx, "blockIdx.x")
        s[T].bind(tx, "threadIdx.x")
    mod = _module((s, [A, C, n]), fake)
    for size in (5, 300, 64, 129):
        a = rng.uniform(-1, 1, size).astype("float32")
        c = np.full(size, np.nan, "float32")
        mod(a, c, size)
        np.testing.assert_allclose(c, (a[::-1] + 1) * 2, rtol=1e-6)
    with pytest.raises(ember.ArgumentError, match=r"argument 'A' has 5 elements"):
        mod(np.zeros(5, "float32"), np.zeros(5, "float32"), 6)
