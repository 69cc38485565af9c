"""Running CUDA kernels on a real GPU through the driver API (cuda-python's ``driver``).

``CUDAModule`` calls into this module when a device is present: one primary
context of device 0 shared by every module (created on first use), a
:class:`DeviceModule` per compiled module (the cubin loaded, falling back to the
PTX when the driver cannot take the cubin, and one function handle per kernel),
device buffers for the arguments and workspaces, and the launches in program
order. Every driver call goes through :func:`call`, which turns a failing
``CUresult`` into a ``DeviceError`` naming the call and the error, so nothing
here returns a status code to check.

Arguments are numpy arrays (copied to the device, outputs copied back after
the launches) or arrays already on the GPU, whose pointers are passed as they
are after checking shape, dtype and contiguity: ``__cuda_array_interface__``
(CuPy, PyTorch, Numba, Ember's own ``DeviceArray``) or, failing that, a DLPack
capsule on a CUDA device (both checked in ``gpu_arguments.py``).
``to_device``, ``empty`` and ``DeviceArray`` (``device_array.py``, built on this
module's :class:`DeviceBuffer`) keep tensors on the GPU between calls.
"""

from __future__ import annotations

import ctypes
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ember.codegen_cuda.device import device_available
from ember.codegen_cuda.gpu_arguments import GpuArgument, check_gpu_overlap, gpu_argument
from ember.codegen_cuda.shared_layout import STATIC_SHARED_LIMIT, dynamic_shared_bytes
from ember.errors import DeviceError
from ember.runtime.module import TimingResult, repeat_batches
from ember.runtime.signature import FunctionSignature, call_sizes, check_arguments
from ember.runtime.sizes import eval_size
from ember.tir import dtype as dt
from ember.tir import expr as E
from ember.tir import stmt as S
from ember.tir.buffer import Buffer
from ember.tir.signature import size_text


def _driver() -> Any:
    """cuda-python's driver bindings (a function so tests can substitute a fake)."""
    try:
        # optional dependency: cuda-python
        from cuda.bindings import driver
    except ImportError as e:
        raise DeviceError("cuda-python is not installed (pip install ember[cuda])") from e
    return driver


def call(name: str, *args: Any) -> Any:
    """``driver.<name>(*args)``; the values after the status, or a ``DeviceError``."""
    driver = _driver()
    try:
        result = getattr(driver, name)(*args)
    except DeviceError:
        raise
    except Exception as e:  # noqa: BLE001 - a binding-level failure (bad argument, no library)
        raise DeviceError(f"CUDA driver call {name} failed: {type(e).__name__}: {e}") from e
    err, rest = result[0], tuple(result[1:])
    if err != driver.CUresult.CUDA_SUCCESS:
        raise DeviceError(f"CUDA driver call {name} failed with {getattr(err, 'name', err)}")
    if not rest:
        return None
    return rest[0] if len(rest) == 1 else rest


# -- the context ---------------------------------------------------------------------------
_LOCK = threading.Lock()
_CONTEXT: list[Any] = []  # [the primary context of device 0], once retained
_CURRENT = threading.local()


def ensure_context() -> Any:
    """Device 0's primary context, retained once and made current on this thread."""
    with _LOCK:
        if not _CONTEXT:
            call("cuInit", 0)
            dev = call("cuDeviceGet", 0)
            _CONTEXT.append(call("cuDevicePrimaryCtxRetain", dev))
    ctx = _CONTEXT[0]
    if getattr(_CURRENT, "ctx", None) is not ctx:
        call("cuCtxSetCurrent", ctx)
        _CURRENT.ctx = ctx
    return ctx


def synchronize() -> None:
    """Waits for all work queued on the current CUDA context, e.g. before timing or reading back."""
    call("cuCtxSynchronize")


class DeviceBuffer:
    """``nbytes`` of global device memory, freed when closed or collected."""

    def __init__(self, nbytes: int) -> None:
        ensure_context()
        self.nbytes = nbytes
        self.ptr = int(call("cuMemAlloc", max(nbytes, 1)))

    def copy_from_host(self, array: np.ndarray) -> None:
        if self.nbytes:
            call("cuMemcpyHtoD", self.ptr, array.ctypes.data, self.nbytes)

    def copy_to_host(self, array: np.ndarray) -> None:
        if self.nbytes:
            call("cuMemcpyDtoH", array.ctypes.data, self.ptr, self.nbytes)

    def close(self) -> None:
        if self.ptr:
            ptr, self.ptr = self.ptr, 0
            call("cuMemFree", ptr)

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:  # noqa: BLE001, S110 - interpreter shutdown; the context owns it
            pass


# -- arguments -------------------------------------------------------------------------------
@dataclass
class BoundArguments:
    """Device pointers for one call, with the host arrays staged through device buffers."""

    pointers: list[int]  # one per array parameter
    staged: list[tuple[np.ndarray, DeviceBuffer, bool]] = field(default_factory=list)
    keep: list[Any] = field(default_factory=list)  # what GPU arguments need until the end
    sizes: dict[str, int] = field(default_factory=dict)  # the call's symbolic sizes

    def copy_in(self) -> None:
        for array, buf, _ in self.staged:
            buf.copy_from_host(array)

    def copy_out(self) -> None:
        for array, buf, written in self.staged:
            if written:
                buf.copy_to_host(array)

    def close(self) -> None:
        for _, buf, _ in self.staged:
            buf.close()
        self.staged.clear()
        self.keep.clear()


def bind_arguments(sig: FunctionSignature, args: Sequence[Any]) -> BoundArguments:
    """Check ``args`` and give each array a device pointer (allocating for host arrays)."""
    if len(args) != len(sig.params):
        check_arguments(sig, args)  # raises the arity error
    found = [None if p.scalar else gpu_argument(sig, p, x) for p, x in zip(sig.params, args)]
    gpu = {i: g for i, g in enumerate(found) if g is not None}
    check_gpu_overlap(sig, gpu)
    host_idx = [i for i, g in enumerate(found) if g is None]
    host_sig = FunctionSignature(sig.name, tuple(sig.params[i] for i in host_idx))
    host_values = check_arguments(host_sig, [args[i] for i in host_idx])
    values: list[Any] = [None] * len(args)
    for i, g in gpu.items():
        values[i] = g
    for i, v in zip(host_idx, host_values):
        values[i] = v
    names = [n for n, _ in sig.size_vars]
    sizes = call_sizes(sig, values)
    arrays = [i for i, p in enumerate(sig.params) if not p.scalar]
    bound = BoundArguments([0] * len(arrays), sizes=dict(zip(names, sizes)))
    for k, i in enumerate(arrays):
        value = values[i]
        if isinstance(value, GpuArgument):
            bound.pointers[k] = value.pointer
            if value.keep is not None:
                bound.keep.append(value.keep)
            continue
        buf = DeviceBuffer(value.nbytes)
        bound.staged.append((value, buf, sig.params[i].written))
        bound.pointers[k] = buf.ptr
    return bound


def bind_pointers(sig: FunctionSignature, native_args: Sequence[int]) -> BoundArguments:
    """Stage already-checked host data (``Module``'s native-call convention: the arrays'
    data pointers, then the values of the symbolic sizes)."""
    specs = sig.arrays
    pointers, size_values = native_args[: len(specs)], native_args[len(specs) :]
    sizes = {n: int(v) for (n, _), v in zip(sig.size_vars, size_values)}
    arrays = []
    for p, ptr in zip(specs, pointers):
        dtype = dt.numpy_dtype(p.dtype)
        dims = [d if isinstance(d, int) else eval_size(d, sizes) for d in p.shape]
        count = int(np.prod(dims, dtype=np.int64))
        raw = (ctypes.c_byte * (count * dtype.itemsize)).from_address(int(ptr)) if count else b""
        arrays.append(np.frombuffer(raw, dtype=dtype, count=count))
    bound = BoundArguments([0] * len(arrays), sizes=sizes)
    for i, (p, array) in enumerate(zip(specs, arrays)):
        buf = DeviceBuffer(array.nbytes)
        bound.staged.append((array, buf, p.written))
        bound.pointers[i] = buf.ptr
    return bound


# -- modules and launches ----------------------------------------------------------------
@dataclass(frozen=True)
class Kernel:
    """A loaded CUDA kernel with its launch shape, shared memory and by-value size arguments."""

    name: str
    function: Any
    grid: tuple[int | str, ...]  # a str: a size text evaluated on each call's sizes
    block: tuple[int, int, int]
    shared_bytes: int
    sizes: tuple[tuple[str, str], ...] = ()  # (name, dtype) passed by value after the pointers

    def grid_for(self, sizes: dict[str, int]) -> tuple[int, ...]:
        return tuple(g if isinstance(g, int) else eval_size(g, sizes) for g in self.grid)


def _load_image(compiled: Any) -> Any:
    if compiled.cubin:
        try:
            return call("cuModuleLoadData", compiled.cubin)
        except DeviceError:
            pass  # e.g. a cubin for another architecture: let the driver JIT the PTX
    return call("cuModuleLoadData", compiled.ptx.encode() + b"\0")


def _workspace_bytes(ws: Buffer, sizes: dict[str, int]) -> int:
    size = ws.flat_size() if len(ws.shape) != 1 else ws.shape[0]
    if isinstance(size, E.IntImm):
        return size.value * dt.bytes_of(ws.dtype)
    text = size_text(size)
    count = text if isinstance(text, int) else eval_size(text, sizes)
    return max(count, 0) * dt.bytes_of(ws.dtype)


class DeviceModule:
    """A compiled CUDA module loaded on the device, with its kernels and workspaces."""

    def __init__(self, compiled: Any, kernels: Sequence[S.PrimFunc]) -> None:
        ensure_context()
        self.handle = _load_image(compiled)
        self.kernels: dict[str, Kernel] = {}
        attr = _driver().CUfunction_attribute.CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES
        for func in kernels:
            symbol = func.attr("global_symbol") or func.name
            handle = call("cuModuleGetFunction", self.handle, symbol.encode())
            shared = dynamic_shared_bytes(func)
            if shared > STATIC_SHARED_LIMIT:
                call("cuFuncSetAttribute", handle, attr, shared)
            grid, block = func.attr("launch")
            grid = tuple(g if isinstance(g, int) else size_text(g) for g in grid)
            scalars = tuple((v.name, v.dtype) for v in func.size_vars())
            self.kernels[func.name] = Kernel(func.name, handle, grid, tuple(block), shared, scalars)
        self._workspaces: dict[E.Var, DeviceBuffer] = {}
        # held by a call from its first launch to its synchronize: the workspaces are shared
        self.lock = threading.Lock()

    def workspace(self, ws: Buffer, sizes: dict[str, int] | None = None) -> int:
        """The device pointer of a workspace, allocated on first use and kept (and grown
        when a call's sizes need more)."""
        nbytes = _workspace_bytes(ws, sizes or {})
        buf = self._workspaces.get(ws.data)
        if buf is None or buf.nbytes < nbytes:
            if buf is not None:
                buf.close()
            buf = self._workspaces[ws.data] = DeviceBuffer(nbytes)
        return buf.ptr

    def launch(
        self,
        name: str,
        pointers: Sequence[int],
        stream: Any = 0,
        sizes: dict[str, int] | None = None,
    ) -> None:
        kernel = self.kernels[name]
        sizes = sizes or {}
        values: list[Any] = [ctypes.c_void_p(int(p)) for p in pointers]
        for n, dtype in kernel.sizes:
            values.append((ctypes.c_int64 if dtype == "int64" else ctypes.c_int32)(sizes[n]))
        grid = kernel.grid_for(sizes)
        if min(grid) < 1:
            return  # an empty grid (a size of 0): nothing to run
        params = (ctypes.c_void_p * max(len(values), 1))(*[ctypes.addressof(v) for v in values])
        call(
            "cuLaunchKernel",
            kernel.function,
            *grid,
            *kernel.block,
            kernel.shared_bytes,
            stream,
            ctypes.addressof(params),
            0,
        )

    def close(self) -> None:
        for buf in self._workspaces.values():
            buf.close()
        self._workspaces.clear()


# -- timing ------------------------------------------------------------------------------------
def _elapsed_ms(launch_all: Callable[[], None], n: int, start: Any, end: Any) -> float:
    call("cuEventRecord", start, 0)
    for _ in range(n):
        launch_all()
    call("cuEventRecord", end, 0)
    call("cuEventSynchronize", end)
    return float(call("cuEventElapsedTime", start, end))


def time_launches(
    launch_all: Callable[[], None], number: int, repeat: int, min_repeat_ms: float
) -> TimingResult:
    """Seconds per ``launch_all()`` on the default stream, measured with CUDA events.

    One warm-up run, then ``repeat`` batches of ``number`` runs (a batch is
    lengthened until it lasts ``min_repeat_ms``).
    """
    ensure_context()
    launch_all()
    synchronize()
    start, end = call("cuEventCreate", 0), call("cuEventCreate", 0)
    try:
        return repeat_batches(
            lambda n: _elapsed_ms(launch_all, n, start, end),
            number,
            repeat,
            min_repeat_ms,
            max_runs=1 << 20,
        )
    finally:
        call("cuEventDestroy", start)
        call("cuEventDestroy", end)


__all__ = [
    "BoundArguments",
    "DeviceBuffer",
    "DeviceModule",
    "bind_arguments",
    "bind_pointers",
    "call",
    "device_available",
    "ensure_context",
    "synchronize",
    "time_launches",
]
