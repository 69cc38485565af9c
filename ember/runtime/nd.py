"""``ember.nd``: arrays placed on a device, handed to modules the way ``tvm.nd`` does it.

``ember.nd.array(x, device)`` copies ``x`` to the CPU (a :class:`CPUArray`
holding a numpy array) or to the GPU (a ``DeviceArray`` in device memory), and
``ember.nd.empty(shape, dtype, device)`` allocates one. Both carry ``shape``,
``dtype``, ``device`` and ``numpy()`` (a host copy), and a module takes them as
arguments without copying: a CPU module views a ``CPUArray`` through DLPack, a
CUDA module passes a ``DeviceArray``'s pointer, so a chain of calls on one
device moves no data. Plain numpy arrays and other libraries' DLPack tensors
are taken as well; these are for code that wants to say where its data lives.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, Protocol

import numpy as np

from ember.errors import ArgumentError, DeviceError, DLPackExportError
from ember.runtime import dtype as dt

_CPU = ("cpu", "llvm")
_CUDA = ("cuda", "cuda:0", "gpu")


def device_kind(device: str) -> str:
    """'cpu' or 'cuda' for a device name users pass (``'llvm'``, ``'cuda:0'``, ...)."""
    if not isinstance(device, str) or device.lower() not in _CPU + _CUDA:
        raise ArgumentError(
            f"unknown device {device!r}; use 'cpu' (or 'llvm') or 'cuda' (or 'cuda:0')"
        )
    return "cpu" if device.lower() in _CPU else "cuda"


def device(dev_type: str, dev_id: int = 0) -> str:
    """TVM's ``tvm.device("cuda", 0)``: Ember names devices by kind, ``'cpu'`` or ``'cuda'``.

    A target string works as in TVM (``device("llvm -mcpu=znver3")`` is the CPU). Ember
    drives one device of each kind, so ``dev_id`` must be 0.
    """
    head = dev_type.split()[0] if isinstance(dev_type, str) and dev_type.split() else dev_type
    kind = device_kind(head)
    if isinstance(dev_id, bool) or not isinstance(dev_id, (int, np.integer)) or dev_id != 0:
        raise ArgumentError(
            f"device: Ember uses device 0 of each kind; got {kind} device {dev_id!r}"
        )
    return kind


def cpu(dev_id: int = 0) -> str:
    """TVM's ``tvm.cpu(0)``: the name ``'cpu'``."""
    return device("cpu", dev_id)


def cuda(dev_id: int = 0) -> str:
    """TVM's ``tvm.cuda(0)``: the name ``'cuda'``."""
    return device("cuda", dev_id)


class DeviceArrays(Protocol):
    """What a GPU backend supplies to place arrays in its memory (CUDA's is the module
    ``ember.codegen_cuda.device_array``)."""

    def to_device(self, array: Any) -> Any:
        """A device copy of the host array ``array``."""

    def empty(self, shape: Sequence[int] | int, dtype: Any = "float32") -> Any:
        """An array of ``shape`` and ``dtype`` in device memory, its contents not set."""


# device kind -> a function returning that device's DeviceArrays, as TVM's runtime finds a
# DeviceAPI by name. The runtime may not import a backend, so the package root registers
# CUDA's here (as it fills ember.target.TEMPLATE_LOADERS); the backend loads on first use.
DEVICE_ARRAYS: dict[str, Callable[[], DeviceArrays]] = {}


def _device_arrays(kind: str) -> DeviceArrays:
    loader = DEVICE_ARRAYS.get(kind)
    if loader is None:
        raise DeviceError(f"no backend has registered arrays for the {kind} device")
    return loader()


class CPUArray:
    """An array in host memory, owned by Ember: a C-contiguous numpy array inside."""

    device = "cpu"

    def __init__(self, data: np.ndarray) -> None:
        # np.require, not np.ascontiguousarray: the latter turns a rank-0 array into shape (1,)
        self._data = np.require(data, requirements="C")

    @property
    def shape(self) -> tuple[int, ...]:
        return tuple(self._data.shape)

    @property
    def dtype(self) -> np.dtype:
        """The storage type, as ``DeviceArray.dtype`` (``dtype_name``: Ember's name)."""
        return self._data.dtype

    @property
    def dtype_name(self) -> str:
        return str(self._data.dtype)

    def numpy(self) -> np.ndarray:
        """A copy of the contents as a numpy array."""
        return self._data.copy()

    def copy_from(self, source: Any) -> CPUArray:
        """Overwrite the contents with ``source`` (same shape; converted to this dtype).
        Returns the array, as TVM's ``copyfrom`` does (``nd.empty(...).copyfrom(x)``)."""
        src = np.asarray(source)
        if src.shape != self._data.shape:
            raise ArgumentError(f"copy_from: expected shape {self.shape}, got {src.shape}")
        self._data[...] = src
        return self

    copyfrom = copy_from  # TVM's spelling

    def copyto(self, target: Any) -> Any:
        """Copy the contents into ``target`` (an array of this shape), as TVM's ``copyto``."""
        if isinstance(target, CPUArray):
            target.copy_from(self._data)
        else:
            np.copyto(target, self._data)
        return target

    def __getitem__(self, key: Any) -> Any:
        return self._data[key]

    def __setitem__(self, key: Any, value: Any) -> None:
        """In-place writes, as numpy (TVM's NDArray takes ``a[:] = value``)."""
        self._data[key] = np.asarray(value)

    def __array__(self, dtype: Any = None, copy: bool | None = None) -> np.ndarray:
        if copy:
            return np.array(self._data, dtype=dtype, copy=True)
        return self._data if dtype is None else self._data.astype(dtype, copy=False)

    def __dlpack__(self, **kwargs: Any) -> Any:
        """numpy's capsule; a request numpy refuses (a stream, another device, a
        non-native byte order) is a ``DLPackExportError`` saying which."""
        try:
            return self._data.__dlpack__(**kwargs)
        except (BufferError, RuntimeError, TypeError, ValueError) as e:
            raise DLPackExportError(
                f"CPUArray(shape={self.shape}, dtype={self.dtype_name}) cannot be exported "
                f"through DLPack with {kwargs or 'no options'}: {e}"
            ) from e

    def __dlpack_device__(self) -> tuple[int, int]:
        return self._data.__dlpack_device__()  # type: ignore[no-any-return]

    def __repr__(self) -> str:
        return f"CPUArray(shape={self.shape}, dtype={self.dtype_name}, cpu)"


def array(data: Any, device: str = "cpu") -> Any:
    """``data`` (anything numpy can read) copied onto ``device``."""
    kind = device_kind(device)
    host = np.array(data, copy=True, order="C")
    if kind == "cpu":
        return CPUArray(host)
    return _device_arrays(kind).to_device(host)


def empty(shape: Sequence[int] | int, dtype: str = "float32", device: str = "cpu") -> Any:
    """An array of ``shape`` and ``dtype`` on ``device``, its contents not set.

    A vector dtype (``"float32x2"``) is stored as TVM stores it, its lanes innermost:
    ``empty((n,), "float32x2")`` holds ``n * 2`` float32 values. Ember's array has the lanes
    as a last axis of its own (shape ``(n, 2)``, dtype float32), which is the shape
    ``numpy()`` gives in TVM too and the one a compiled function takes for such a tensor;
    TVM's NDArray instead reports ``shape == (n,)`` and ``dtype == "float32x2"``.
    """
    kind = device_kind(device)
    dims = (shape,) if isinstance(shape, (int, np.integer)) else tuple(shape)
    if any(not isinstance(d, (int, np.integer)) or d < 0 for d in dims):
        raise ArgumentError(f"empty: shape must be non-negative integers, got {shape!r}")
    element, lanes = dt.split_lanes(dt.check_dtype(dtype))
    if lanes > 1:
        dims = (*dims, lanes)
    if kind != "cpu":
        return _device_arrays(kind).empty(dims, element)
    return CPUArray(np.empty(dims, dt.numpy_dtype(element)))


__all__ = [
    "DEVICE_ARRAYS",
    "CPUArray",
    "DeviceArrays",
    "array",
    "cpu",
    "cuda",
    "device",
    "device_kind",
    "empty",
]
