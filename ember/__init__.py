"""Ember: a deep-learning compiler. ``import ember`` is light; submodules load on first use."""

from __future__ import annotations

import importlib
from typing import Any

from ember.backend import Backend, register_backend
from ember.errors import (
    ArgumentError,
    CompileError,
    ConfigError,
    DeviceError,
    EmberError,
    InternalError,
    InvalidModelError,
    LoweringError,
    NeedsConstantError,
    PackedFuncError,
    RaceError,
    ScheduleError,
    UnsupportedOperatorError,
)
from ember.runtime.nd import DEVICE_ARRAYS
from ember.runtime.registry import register_func
from ember.version import __version__ as __version__


def _cpu_backend() -> type[Backend]:
    # start-up cost: a backend loads its code generator (llvmlite) on first use
    from ember.codegen_llvm.backend import CPUBackend

    return CPUBackend


def _cuda_backend() -> type[Backend]:
    # start-up cost: as above (and the CUDA printer, NVRTC bindings where installed)
    from ember.codegen_cuda.backend import CUDABackend

    return CUDABackend


# The built-in targets. Everything below the package root finds a target's backend
# through ember.backend.get_backend, never by importing a code generator.
register_backend("llvm", _cpu_backend)
register_backend("cuda", _cuda_backend)


def _cuda_arrays() -> Any:
    # start-up cost: the CUDA backend loads with the first GPU array, not with ``import ember``
    from ember.codegen_cuda import device_array

    return device_array


# ``ember.nd`` places arrays on the GPU through this, without importing a backend itself.
DEVICE_ARRAYS.update(cuda=_cuda_arrays)


def _tuner_worker(conn: Any, role: str = "worker") -> None:
    # start-up cost: only the tuner's worker processes need the builder
    from ember.tune_worker import serve

    serve(conn, role)


def _fold_compiled(op: str, attrs: Any, in_types: Any, arrays: Any) -> Any:
    # start-up cost: the model compiler loads with the first large constant folded
    from ember.graph.kernels import get_kernel

    return get_kernel(op, attrs, in_types, "llvm").run(arrays)


# The importer folds large constants with compiled kernels through this (the frontend
# sits below the model compiler and may not import it).
register_func("ember.fold.compiled", _fold_compiled, override=True)

# The tuner's measuring processes run this (it builds candidates, which the tuner may
# not import); a module-level function, so a spawned process can find it by name.
register_func("tuner.worker", _tuner_worker, override=True)

# name -> (module, attribute or None for the module itself)
_LAZY: dict[str, tuple[str, str | None]] = {
    "te": ("ember.te", None),
    "tir": ("ember.tir", None),
    "tuner": ("ember.tuner", None),
    "frontend": ("ember.frontend", None),
    "runtime": ("ember.runtime", None),
    "nd": ("ember.runtime.nd", None),
    "device": ("ember.runtime.nd", "device"),
    "cpu": ("ember.runtime.nd", "cpu"),
    "cuda": ("ember.runtime.nd", "cuda"),
    "lower": ("ember.driver", "lower"),
    "build": ("ember.driver", "build"),
    "Target": ("ember.target", "Target"),
    "get_backend": ("ember.backend", "get_backend"),
    "IRModule": ("ember.tir.ir_module", "IRModule"),
    "register_func": ("ember.runtime.registry", "register_func"),
    "get_global_func": ("ember.runtime.registry", "get_global_func"),
    "remove_global_func": ("ember.runtime.registry", "remove_global_func"),
    "list_global_func_names": ("ember.runtime.registry", "list_global_func_names"),
    "transform": ("ember.transform", None),
    "compile": ("ember.graph.compile", "compile"),
    "extract_tasks": ("ember.graph.model_tuning", "extract_tasks"),
    "load": ("ember.graph.load", "load"),
    "CompiledModel": ("ember.graph.executor", "CompiledModel"),
}


def __getattr__(name: str) -> Any:
    if name not in _LAZY:
        raise AttributeError(f"module 'ember' has no attribute {name!r}")
    module, attr = _LAZY[name]
    mod = importlib.import_module(module)
    value = mod if attr is None else getattr(mod, attr)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(list(globals()) + list(_LAZY))


__all__ = [
    "ArgumentError",
    "CompileError",
    "ConfigError",
    "DeviceError",
    "EmberError",
    "InternalError",
    "InvalidModelError",
    "LoweringError",
    "NeedsConstantError",
    "PackedFuncError",
    "RaceError",
    "ScheduleError",
    "UnsupportedOperatorError",
    *_LAZY,
]
