"""Ember: a deep-learning compiler. ``import ember`` is light; submodules load on first use."""

from __future__ import annotations

import importlib
from typing import Any

from ember.errors import (
    ArgumentError,
    CompileError,
    ConfigError,
    DeviceError,
    EmberError,
    InternalError,
    InvalidModelError,
    LoweringError,
    PackedFuncError,
    RaceError,
    ScheduleError,
    UnsupportedOperatorError,
)
from ember.runtime.nd import DEVICE_ARRAYS
from ember.runtime.registry import register_func
from ember.target import TEMPLATE_LOADERS

__version__ = "0.1.0"


def _llvm_templates() -> None:
    import ember.codegen_llvm.schedules  # noqa: F401


def _cuda_templates() -> None:
    import ember.codegen_cuda.schedules  # noqa: F401


# The tuner finds each target's built-in templates through these, without importing
# code generators itself (the layering test checks it).
TEMPLATE_LOADERS.update(llvm=_llvm_templates, cuda=_cuda_templates)


def _cuda_arrays() -> Any:
    # start-up cost: the CUDA backend loads with the first GPU array, not with ``import ember``
    from ember.codegen_cuda import device_array

    return device_array


# ``ember.nd`` places arrays on the GPU through this, without importing a backend itself.
DEVICE_ARRAYS.update(cuda=_cuda_arrays)


def _tuner_worker(conn: Any, role: str = "worker") -> None:
    from ember.tune_worker import serve

    serve(conn, role)


# The tuner's measuring processes run this (it builds candidates, which the tuner may
# not import); a module-level function, so a spawned process can find it by name.
register_func("tuner.worker", _tuner_worker, override=True)

# name -> (module, attribute or None for the module itself)
_LAZY: dict[str, tuple[str, str | None]] = {
    "te": ("ember.tir.te", None),
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
    "IRModule": ("ember.tir.ir_module", "IRModule"),
    "register_func": ("ember.runtime.registry", "register_func"),
    "get_global_func": ("ember.runtime.registry", "get_global_func"),
    "remove_global_func": ("ember.runtime.registry", "remove_global_func"),
    "list_global_func_names": ("ember.runtime.registry", "list_global_func_names"),
    "transform": ("ember.transform", None),
    "compile": ("ember.graph.compile", "compile"),
    "extract_tasks": ("ember.graph.model_tuning", "extract_tasks"),
    "load": ("ember.graph.artifact_dynamic", "load"),
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
    "PackedFuncError",
    "RaceError",
    "ScheduleError",
    "UnsupportedOperatorError",
    *_LAZY,
]
