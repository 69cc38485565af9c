"""ember.codegen_cuda: the CUDA backend, from device TIR to PTX/cubin, a runtime and an emulator.

Read in this order: ``build.py`` (the entry ``ember.build`` calls), ``transform/``
(``split_host_device``, ``inject_sync``, ``verify_gpu``), ``printer_c.py`` and
``printer_cuda.py`` (CUDA C), ``nvrtc.py`` (in-process compilation, disk cache),
``resources.py`` (registers, shared memory, occupancy), ``module.py`` (the
callable module), ``runtime.py``, ``gpu_arguments.py``, ``dlpack.py`` and
``device_array.py`` (the GPU: launches, arguments, tensors kept on the device)
and ``emulator/`` (kernels on the CPU). The public names below load their
module on first use (PEP 562), and cuda-python is imported only when a kernel
is compiled, so ``import ember`` works on machines without CUDA.
"""

from __future__ import annotations

import importlib
from typing import Any

_LAZY = {
    "print_kernel": "printer_cuda",
    "print_module": "printer_cuda",
    "compile_cuda": "nvrtc",
    "CompiledCuda": "nvrtc",
    "ResourceUsage": "resources",
    "Occupancy": "resources",
    "occupancy": "resources",
    "DeviceArray": "device_array",
    "empty": "device_array",
    "to_device": "device_array",
}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'ember.codegen_cuda' has no attribute '{name}'")
    return getattr(importlib.import_module(f"ember.codegen_cuda.{module}"), name)


__all__ = sorted(_LAZY)
