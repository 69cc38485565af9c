"""``DeviceArray``: a tensor that stays in GPU memory between calls of CUDA modules.

Passing numpy arrays to a ``CUDAModule`` copies them to the device and back on
every call. A ``DeviceArray`` owns a ``DeviceBuffer`` with a shape and a dtype
and is taken by a module call like any GPU array (through its
``__cuda_array_interface__``), so a chain of calls moves no data::

    a, b, c = to_device(a_host), to_device(b_host), empty((M, N), "float32")
    cmod(a, b, c)
    c.numpy()

Other libraries take it without a copy through ``__cuda_array_interface__``
(CuPy, Numba, ``torch.as_tensor``) or DLPack (``torch.from_dlpack``,
``cupy.from_dlpack``, JAX): the capsule keeps the array alive until the
consumer lets it go. bfloat16 data is held as its uint16 bits on the host
side (``numpy()``), as everywhere in Ember, and exported to DLPack as bfloat16.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from ember.codegen_cuda.dlpack import KDL_CUDA, make_capsule
from ember.codegen_cuda.runtime import DeviceBuffer
from ember.errors import ArgumentError, DLPackExportError
from ember.tir import dtype as dt


def _dtype_name(dtype: Any) -> str:
    """Ember's name for a dtype given as a string, a numpy dtype or a type."""
    if isinstance(dtype, str) and dtype == "bfloat16":
        return dtype  # without ml_dtypes numpy has no such type
    if isinstance(dtype, str) and dtype in dt.SUB_BYTE_INTS:
        storage = dt.numpy_dtype(dtype).name
        raise ArgumentError(
            f"DeviceArray: {dtype} data lives in a {storage} array (one value per byte, "
            f"{' to '.join(map(str, dt.int_range(dtype)))}); a kernel's {dtype} parameter takes it"
        )
    try:
        name = np.dtype(dtype).name
    except TypeError as e:
        raise ArgumentError(f"DeviceArray: {dtype!r} is not a dtype") from e
    if name not in dt.SCALAR_DTYPES:
        raise ArgumentError(
            f"DeviceArray: dtype {name} is not supported; use one of {', '.join(dt.SCALAR_DTYPES)}"
        )
    return name


class DeviceArray:
    """A C-contiguous array in global memory of device 0, freed with the object."""

    device = "cuda"

    def __init__(self, shape: Sequence[int] | int, dtype: Any = "float32") -> None:
        dims = (shape,) if isinstance(shape, (int, np.integer)) else tuple(shape)
        if not all(isinstance(n, (int, np.integer)) and n >= 0 for n in dims):
            raise ArgumentError(f"DeviceArray: shape must be non-negative integers, got {shape!r}")
        self.shape: tuple[int, ...] = tuple(int(n) for n in dims)
        self.dtype_name = _dtype_name(dtype)
        self.dtype: np.dtype = dt.numpy_dtype(self.dtype_name)  # the storage (host) type
        self.buffer = DeviceBuffer(self.nbytes)

    @property
    def size(self) -> int:
        return int(np.prod(self.shape, dtype=np.int64))

    @property
    def ndim(self) -> int:
        return len(self.shape)

    @property
    def nbytes(self) -> int:
        return self.size * self.dtype.itemsize

    # -- host copies -----------------------------------------------------------------------
    def copy_from(self, array: Any) -> None:
        """Overwrite the contents with a host array of the same shape and dtype."""
        host = np.ascontiguousarray(array)
        name = host.dtype.name
        if name != self.dtype_name and not (self.dtype_name == "bfloat16" and name == "uint16"):
            raise ArgumentError(
                f"DeviceArray.copy_from: expects dtype {self.dtype_name}, got {name}"
            )
        if host.shape != self.shape:
            raise ArgumentError(
                f"DeviceArray.copy_from: expects shape {self.shape}, got {host.shape}"
            )
        self.buffer.copy_from_host(host)

    def copyfrom(self, source: Any) -> DeviceArray:
        """TVM's ``copyfrom``: ``source`` converted to this array's dtype and copied in;
        returns the array (``nd.empty(shape, dtype, dev).copyfrom(x)``)."""
        host = np.asarray(source)
        if host.dtype != self.dtype:
            host = host.astype(self.dtype)
        self.copy_from(host)
        return self

    def copyto(self, target: Any) -> Any:
        """TVM's ``copyto``: the contents copied into ``target`` (a device or host array)."""
        if isinstance(target, DeviceArray):
            target.copy_from(self.numpy())
        else:
            np.copyto(target, self.numpy())
        return target

    def numpy(self) -> np.ndarray:
        """A host copy (waits for nothing: Ember's calls finish before they return)."""
        out = np.empty(self.shape, self.dtype)
        self.buffer.copy_to_host(out)
        return out

    # -- interchange -----------------------------------------------------------------------
    @property
    def __cuda_array_interface__(self) -> dict[str, Any]:
        # No "stream": every Ember call synchronizes, so there is nothing to wait for.
        return {
            "shape": self.shape,
            "typestr": self.dtype.str,
            "data": (self.buffer.ptr, False),
            "strides": None,
            "version": 3,
        }

    def __dlpack_device__(self) -> tuple[int, int]:
        return (KDL_CUDA, 0)

    def __dlpack__(
        self,
        *,
        stream: Any = None,
        max_version: Any = None,
        dl_device: Any = None,
        copy: bool | None = None,
    ) -> Any:
        """A legacy ``dltensor`` capsule (allowed whatever ``max_version`` asks for).

        ``stream`` needs no wait: the memory is only written by Ember calls,
        which synchronize before returning.
        """
        if dl_device is not None and tuple(dl_device) != self.__dlpack_device__():
            raise DLPackExportError(
                f"DeviceArray lives on CUDA device 0 and cannot be exported to {dl_device!r}; "
                "copy it with .numpy()"
            )
        if copy:
            raise DLPackExportError("DeviceArray does not copy on export; use .numpy()")
        return make_capsule(
            self, self.buffer.ptr, self.shape, self.dtype_name, self.__dlpack_device__()
        )

    def __repr__(self) -> str:
        return f"DeviceArray(shape={self.shape}, dtype={self.dtype_name}, cuda:0)"


def empty(shape: Sequence[int] | int, dtype: Any = "float32") -> DeviceArray:
    """An uninitialised array on the GPU."""
    return DeviceArray(shape, dtype)


def to_device(array: Any) -> DeviceArray:
    """A GPU copy of a host array (anything ``np.asarray`` takes)."""
    host = np.require(array, requirements="C")  # keeps a rank-0 array's shape ()
    out = DeviceArray(host.shape, host.dtype)
    out.copy_from(host)
    return out


__all__ = ["DLPackExportError", "DeviceArray", "empty", "to_device"]
