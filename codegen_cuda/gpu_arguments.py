"""Arguments already on the GPU: checked, then passed to kernels by their device pointer.

``runtime.bind_arguments`` asks :func:`gpu_argument` about each argument of a
call. An array with ``__cuda_array_interface__`` (CuPy, PyTorch, Numba,
``DeviceArray``) is read from that dict; one that only speaks DLPack and says
it is on a CUDA device gives its capsule, read without consuming it and held
(with its producer) until the call ends. Either way the dtype, shape and
C-contiguity must match the parameter, or an ``ArgumentError`` names the
function and the argument; anything else is host data for the caller to stage.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from ember.codegen_cuda.dlpack import CUDA_DEVICE_TYPES, read_capsule
from ember.errors import ArgumentError
from ember.runtime.signature import FunctionSignature, ParamSpec, dtype_text
from ember.tir import dtype as dt


@dataclass(frozen=True)
class GpuArgument:
    """An argument already on the GPU: its pointer and size, and what keeps it valid."""

    pointer: int
    nbytes: int
    keep: Any = None  # a DLPack capsule (and its producer), held until the call ends
    shape: tuple[int, ...] = ()  # binds the symbolic sizes of the call


def _check_gpu_layout(
    where: str, p: ParamSpec, shape: tuple[int, ...], itemsize: int, strides: Any
) -> None:
    """Shape and C-contiguity (``strides`` in bytes, None for compact) of a GPU array."""
    if len(shape) != len(p.shape) or any(
        isinstance(want, int) and want != have for want, have in zip(p.shape, shape)
    ):  # symbolic extents are bound and checked with the other arguments
        raise ArgumentError(f"{where} expects shape {p.shape}, got {shape} (on the GPU)")
    if strides is None or not any(n > 1 for n in shape):
        return
    expect, step = [], itemsize
    for n in reversed(shape):
        expect.append(step)
        step *= n
    if any(s != e for s, e, n in zip(strides, reversed(expect), shape) if n > 1):
        raise ArgumentError(f"{where} must be C-contiguous on the GPU; pass a contiguous copy")


def _from_cuda_array_interface(where: str, p: ParamSpec, iface: dict[str, Any]) -> GpuArgument:
    shape = tuple(int(s) for s in iface["shape"])
    got = np.dtype(iface["typestr"])
    want = dt.numpy_dtype(p.dtype)
    bf16 = p.dtype == "bfloat16" and got.itemsize == 2 and got.kind in ("V", "u")
    if got != want and not bf16:
        raise ArgumentError(
            f"{where} expects dtype {dtype_text(want)}, got {dtype_text(got)} (on the GPU)"
        )
    _check_gpu_layout(where, p, shape, got.itemsize, iface.get("strides"))
    ptr, readonly = iface["data"]
    if p.written and readonly:
        raise ArgumentError(f"{where} is written by the function but the GPU array is read-only")
    nbytes = int(np.prod(shape, dtype=np.int64)) * got.itemsize
    return GpuArgument(int(ptr or 0), nbytes, shape=shape)


def _from_dlpack(where: str, p: ParamSpec, x: Any) -> GpuArgument:
    """Read (without consuming) the capsule of a DLPack-only CUDA array."""
    try:
        try:
            # None: the producer orders its work before the legacy default stream,
            # which is where Ember launches.
            capsule = x.__dlpack__(stream=None)
        except TypeError:
            capsule = x.__dlpack__()  # a producer older than the stream keyword
    except Exception as e:  # noqa: BLE001 - a producer's __dlpack__ may raise anything
        raise ArgumentError(f"{where}: its __dlpack__() failed: {type(e).__name__}: {e}") from e
    view = read_capsule(capsule, where)
    kind, ordinal = view.device
    if kind not in CUDA_DEVICE_TYPES:
        raise ArgumentError(
            f"{where}: __dlpack_device__() says CUDA but the capsule holds device type {kind}"
        )
    if ordinal != 0:
        raise ArgumentError(f"{where} is on CUDA device {ordinal}; Ember runs kernels on device 0")
    if view.dtype != p.dtype:
        raise ArgumentError(f"{where} expects dtype {p.dtype}, got {view.dtype} (on the GPU)")
    strides = None if view.strides is None else tuple(s * view.itemsize for s in view.strides)
    _check_gpu_layout(where, p, view.shape, view.itemsize, strides)
    nbytes = int(np.prod(view.shape, dtype=np.int64)) * view.itemsize
    return GpuArgument(view.pointer, nbytes, keep=(x, view), shape=tuple(view.shape))


def gpu_argument(sig: FunctionSignature, p: ParamSpec, x: Any) -> GpuArgument | None:
    """A GPU array argument after checking it, or None for host data (staged by the caller)."""
    where = f"{sig.name}: argument '{p.name}'"
    try:  # e.g. torch refuses both for a tensor that requires grad
        iface = getattr(x, "__cuda_array_interface__", None)
        dlpack_device = None if iface else getattr(x, "__dlpack_device__", None)
        on_cuda = dlpack_device is not None and int(dlpack_device()[0]) in CUDA_DEVICE_TYPES
    except (RuntimeError, TypeError, ValueError) as e:
        raise ArgumentError(f"{where} cannot be read as a GPU array: {e}") from e
    if iface is not None:
        return _from_cuda_array_interface(where, p, iface)
    if on_cuda:
        return _from_dlpack(where, p, x)
    return None  # numpy, or DLPack on the CPU: the host path views and checks it


def check_gpu_overlap(sig: FunctionSignature, gpu: dict[int, GpuArgument]) -> None:
    """Compiled code assumes outputs alias nothing, on the GPU as on the host."""
    for i, a in gpu.items():
        if not sig.params[i].written or not a.nbytes:
            continue
        for j, b in gpu.items():
            overlap = a.pointer < b.pointer + b.nbytes and b.pointer < a.pointer + a.nbytes
            if j != i and b.nbytes and overlap:
                raise ArgumentError(
                    f"{sig.name}: output '{sig.params[i].name}' overlaps argument "
                    f"'{sig.params[j].name}' on the GPU; compiled code assumes outputs share no "
                    "memory with other arguments, pass a separate array"
                )


__all__ = ["GpuArgument", "check_gpu_overlap", "gpu_argument"]
