"""Entry of the CUDA backend: lowered GPU PrimFuncs in, one :class:`CUDAModule` out.

``build_cuda`` is what :func:`ember.build` calls for ``target="cuda"``. It cuts the
function into kernels (``split_host_device``), lowers cross-thread reductions to
warp shuffles and shared memory (``lower_thread_allreduce``), software-pipelines the shared
stages marked for it (``inject_pipeline``), places barriers (``inject_sync``),
checks the kernels against the architecture (``verify_gpu``), prints CUDA C and,
when NVRTC is installed, compiles it right away so a compile error surfaces at
build time. Without cuda-python the module still builds, prints and emulates.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

from ember.codegen_cuda.module import CUDAModule
from ember.codegen_cuda.transform.inject_pipeline import inject_pipeline
from ember.codegen_cuda.transform.inject_sync import inject_sync
from ember.codegen_cuda.transform.lower_thread_allreduce import lower_thread_allreduce
from ember.codegen_cuda.transform.split_host_device import DeviceProgram, split_host_device
from ember.codegen_cuda.transform.verify_gpu import verify_gpu
from ember.errors import EmberError
from ember.target import Target
from ember.tir import stmt as S

DEFAULT_ARCH = "sm_80"


def default_arch() -> str:
    """The visible device's architecture, else ``sm_80``."""
    try:
        from ember.codegen_cuda.device import visible_arch  # type: ignore[import-not-found]
    except ImportError:
        return DEFAULT_ARCH
    return visible_arch() or DEFAULT_ARCH


def build_cuda(
    funcs: S.PrimFunc | Sequence[S.PrimFunc],
    target: Target,
    disabled_passes: Sequence[str] = (),
) -> CUDAModule:
    """Compile lowered functions into one CUDA module (one source, one NVRTC program);
    each function is an entry point with its own kernels and launch list."""
    arch = target.arch or default_arch()
    func_list = [funcs] if isinstance(funcs, S.PrimFunc) else list(funcs)
    programs = [_device_program(f, arch, disabled_passes) for f in func_list]
    fast_math = target.get("fast-math", "0") not in ("0", "")
    module = CUDAModule(programs, arch, fast_math)
    module.compile_if_available()
    return module


def _device_program(func: S.PrimFunc, arch: str, disabled_passes: Sequence[str]) -> DeviceProgram:
    program = split_host_device(func)
    kernels = []
    for kernel in program.kernels:
        try:
            # not optional: it gives the thread_allreduce marks their meaning
            kernel = lower_thread_allreduce(kernel)
            if "inject_pipeline" not in disabled_passes:
                kernel = inject_pipeline(kernel, arch)
            if "inject_sync" not in disabled_passes:
                kernel = inject_sync(kernel)
            kernels.append(verify_gpu(kernel, arch))
        except EmberError as e:
            raise e.add_context(f"in kernel '{kernel.name}'") from None
    return dataclasses.replace(program, kernels=tuple(kernels))
